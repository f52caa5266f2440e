"""``shiftbench replicate``: sample a new test set from annotated candidates (Recht et al. 2019).

One call into :func:`shiftbench.studies.replication.replicate`, then ``Replication.write``; the
figure (:func:`shiftbench.report.replication_figures.plot_replication`) goes next to the manifest
as ``<manifest>.png`` and, with ``--store``, ``Replication.to_study()`` into the results store.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from shiftbench.cli_options import JsonOpt, SeedOpt, StoreOpt
from shiftbench.cli_support import Table, out

MAX_ROWS = 30   # classes shown in the table unless --per-class


def _bins(text: str):
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise typer.BadParameter(f"{text!r}: comma-separated edges from 0 to 1, e.g. 0,0.2,0.4,0.6,0.8,1",
                                 param_hint="--bins") from None


def register(app: typer.Typer) -> None:
    """Add ``replicate`` to the ``shiftbench`` app."""

    @app.command("replicate")
    def replicate_cmd(
        candidates: Annotated[Path, typer.Option("--candidates", help="CSV/Parquet: path,label,selection_frequency "
                                                 "(or n_selected,n_annotators); paths relative to its folder.")],
        output: Annotated[Path, typer.Option("--output", "-o", help="Manifest to write (.csv or .parquet), in a "
                                             "folder containing the images; evaluate it as manifest:<file>.")],
        reference: Annotated[Optional[Path], typer.Option(
            "--reference", help="CSV/Parquet of the original test set: label,selection_frequency per image "
            "(needed by matched-frequency).")] = None,
        strategy: Annotated[str, typer.Option("--strategy", help="matched-frequency, threshold or top-images.")]
        = "matched-frequency",
        images_per_class: Annotated[int, typer.Option("--images-per-class", "-k", help="Images per class "
                                                      "(ImageNetV2: 10).")] = 10,
        threshold: Annotated[float, typer.Option("--threshold", help="tau of the threshold strategy: sample among "
                                                 "f >= tau.")] = 0.7,
        bins: Annotated[str, typer.Option("--bins", help="Matched-frequency bin edges from 0 to 1.")]
        = "0,0.2,0.4,0.6,0.8,1",
        fallback: Annotated[str, typer.Option("--fallback", help="A matched-frequency bin without enough candidates: "
                                              "error (the paper) or upward (fill from the next higher bin).")]
        = "error",
        seed: SeedOpt = 0,
        label_space: Annotated[Optional[str], typer.Option(
            "--label-space", help="Declare the manifest's label space (imagenet-1k, cifar10, or a .txt file with one "
            "class name per line) in a sidecar <output>.classes.json, so labels (indices, wnids or names) keep its "
            "indices and a model with all its outputs evaluates the manifest.")] = None,
        store: StoreOpt = None,
        name: Annotated[Optional[str], typer.Option("--name", help="Study name in --store (default: the manifest's "
                                                    "file name without its suffix).")] = None,
        no_figure: Annotated[bool, typer.Option("--no-figure", help="Do not write the figure <manifest>.png.")]
        = False,
        per_class: Annotated[bool, typer.Option("--per-class", help=f"Show every class (default: at most "
                                                f"{MAX_ROWS}).")] = False,
        as_json: JsonOpt = False,
    ) -> None:
        """Sample a new test set per class (MatchedFrequency, Threshold tau, TopImages) and write its manifest."""
        from shiftbench.datasets.manifest import read_classes_file, sidecar_of  # deferred: loads Pillow
        from shiftbench.studies.replication import replicate  # deferred: loads Pillow, loads pyarrow

        rep = replicate(candidates, reference, strategy, images_per_class=images_per_class, threshold=threshold,
                        bins=_bins(bins), seed=seed, fallback=fallback)
        study_name = name if name is not None else Path(output).stem
        if store is not None:
            from shiftbench.store import Store  # deferred: loads pyarrow

            st = Store(store)
            st.check_study_name("replication", study_name)  # a bad --name fails before anything is written
        path = rep.write(output, label_space=label_space)
        sidecar = sidecar_of(path)
        figure = None if no_figure else _write_figure(rep, path.with_suffix(".png"))
        study = None if store is None else st.write_study("replication", study_name, rep.to_study(), rep.study_meta())
        if as_json:
            print(json.dumps({"manifest": str(path), "label_space_sidecar": sidecar and str(sidecar),
                              "figure": figure and str(figure), "study": study and study_name, **rep.to_dict()}))
            return
        has_ref = rep.reference_mean_selection_frequency is not None
        headers = ["class", "candidates", "images", "mean sel. freq."]
        if has_ref:
            headers += ["reference images", "reference mean sel. freq.", "Δ"]
        table = Table(*headers, title=f"{rep.strategy}: {len(rep.manifest)} images, {len(rep.summary)} classes")
        rows = rep.summary.reset_index().to_dict("records")
        for r in rows if per_class else rows[:MAX_ROWS]:
            cells = [str(r["label"]), str(r["n_candidates"]), str(r["n_images"]), f"{r['mean_selection_frequency']:.3f}"]
            if has_ref:
                cells += [str(r["reference_n_images"]), f"{r['reference_mean_selection_frequency']:.3f}",
                          f"{r['mean_selection_frequency'] - r['reference_mean_selection_frequency']:+.3f}"]
            table.add_row(*cells)
        out.print(table)
        if len(rows) > MAX_ROWS and not per_class:
            out.print(f"... {len(rows) - MAX_ROWS} more classes (--per-class shows all)")
        line = f"mean selection frequency {rep.mean_selection_frequency:.3f}"
        if has_ref:
            line += (f" (reference {rep.reference_mean_selection_frequency:.3f}, "
                     f"{rep.mean_selection_frequency - rep.reference_mean_selection_frequency:+.3f})")
        out.print(line)
        if sidecar is not None:
            out.print(f"label space: {read_classes_file(sidecar).describe()} (sidecar {sidecar})")
        out.print(f"manifest: {path} (evaluate with --setting manifest:{path})")
        if figure is not None:
            out.print(f"figure: {figure}")
        if study is not None:
            out.print(f"study: replication/{study_name} in {store} (shiftbench report --store {store})")


def _write_figure(rep, path: Path) -> Path:
    """The replication's figure (selection-frequency histograms, per-class means) as a PNG."""
    import matplotlib.pyplot as plt  # deferred: loads Pillow, loads matplotlib

    from shiftbench.report.replication_figures import plot_replication  # deferred: loads Pillow, loads matplotlib, loads plotly, loads pyarrow

    fig = plot_replication(rep.to_study(), rep.study_meta())
    try:
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path
