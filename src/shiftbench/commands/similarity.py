"""``shiftbench similarity``: dominance probability and error consistency of every pair of models
on a setting, and the examples no standard model gets right (Mania & Sra 2020; Geirhos et al. 2020).

One call into :func:`shiftbench.analysis.similarity.model_similarity` over the correctness
matrix that :func:`~shiftbench.correctness.correctness_matrix` reads from the store.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Optional

import typer

from shiftbench.cli_options import DEFAULT_STORE, JsonOpt, ModelsOpt, OneTestbedOpt, StoreOpt, canonical_settings
from shiftbench.cli_support import Table, check_count, out
from shiftbench.errors import ConfigError

TOP = 10


def _names(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def study_name(setting: str) -> str:
    """The store study name of a setting's similarity, :func:`~shiftbench.store.files.name_slug`
    (``folder:/data/x`` -> ``folder-data-x-<hash>``): two settings never share one."""
    from shiftbench.store.files import name_slug  # deferred: shiftbench.store loads pandas, pyarrow

    return name_slug(setting)


def _num(v: float) -> float | None:
    return None if v is None or not math.isfinite(float(v)) else float(v)


def register(app: typer.Typer) -> None:
    """Add ``similarity`` to the ``shiftbench`` app."""

    @app.command("similarity")
    def similarity_cmd(
        setting: Annotated[str, typer.Option("--setting", "-s", callback=canonical_settings,
                                             help="Setting whose stored predictions to compare "
                                             "(shiftbench results lists them).")],
        output: Annotated[Path, typer.Option("--output", "-o", help="Folder for pairs.csv, the two matrices (CSV), "
                                             "unsolved.csv and similarity.png.")],
        store: StoreOpt = DEFAULT_STORE,
        model: ModelsOpt = None,
        standard: Annotated[Optional[list[str]], typer.Option(
            "--standard", help="Standard models, for the examples none of them gets right (repeat or comma-separate; "
            "default: models stored with type STANDARD).")] = None,
        testbed: OneTestbedOpt = None,
        max_models: Annotated[int, typer.Option("--max-models", help="Models drawn in similarity.png (evenly "
                                                "spaced in accuracy).")] = 60,
        save_study: Annotated[bool, typer.Option("--save-study/--no-save-study", help="Also store the pairs table "
                                                 "as study similarity/<setting>-<hash> in the store.")] = True,
        as_json: JsonOpt = False,
    ) -> None:
        """Dominance probability and error consistency of every pair of models on a setting, from the
        stored per-example predictions; and the examples no standard model gets right."""
        from shiftbench.analysis.similarity import (  # deferred: loads pyarrow
            model_similarity,
            standard_models,
            unsolved_examples,
        )
        from shiftbench.correctness import correctness_matrix  # deferred: loads pyarrow
        from shiftbench.report.figures import save_figure  # deferred: loads Pillow, loads matplotlib, loads plotly, loads pyarrow
        from shiftbench.report.similarity_figures import plot_similarity_matrices  # deferred: loads Pillow, loads matplotlib, loads plotly, loads pyarrow
        from shiftbench.store import Store  # deferred: loads pyarrow

        check_count(max_models, "--max-models", what="of models to draw in similarity.png (default 60)")
        if standard and testbed:
            raise ConfigError("give the standard models once: either --standard NAMES or --testbed T")
        if output.exists() and not output.is_dir():
            raise ConfigError(f"{output}: is a file; give a folder for the similarity tables (-o DIR)")
        matrix = correctness_matrix(store, setting, _names(model))
        sim = model_similarity(matrix)
        if testbed:
            from shiftbench.reference import load_testbed  # deferred: loads pandas

            chosen = load_testbed(testbed)
        else:
            chosen = _names(standard)
        try:
            std = standard_models(matrix, chosen)
            unsolved = unsolved_examples(matrix, std)
        except ConfigError:
            if chosen is not None:
                raise
            std, unsolved = [], None                      # no STANDARD types stored: skip, say so below
        output.mkdir(parents=True, exist_ok=True)
        written = {"pairs": output / "pairs.csv", "dominance_probability": output / "dominance_probability.csv",
                   "error_consistency": output / "error_consistency.csv", "figure": output / "similarity.png"}
        sim.pairs.to_csv(written["pairs"], index=False)
        sim.dominance.to_csv(written["dominance_probability"])
        sim.error_consistency.to_csv(written["error_consistency"])
        if unsolved is not None:
            written["unsolved"] = output / "unsolved.csv"
            unsolved.to_csv(written["unsolved"], index=False)
        save_figure(plot_similarity_matrices(sim, max_models=max_models), written["figure"])
        if save_study:
            meta = {"setting": setting, "n_models": matrix.n_models, "n_examples": matrix.n_examples,
                    "n_skipped": matrix.n_skipped, "n_unshared": matrix.n_unshared, "standard": std}
            Store(store).write_study("similarity", study_name(setting), sim.pairs, meta)
        top = sim.pairs.sort_values(["dominance_probability", "model_a", "model_b"],
                                    ascending=[False, True, True]).head(TOP)
        n_solved = None if unsolved is None else int((unsolved["n_right"] > 0).sum())
        if as_json:
            print(json.dumps({
                "setting": setting, "n_models": matrix.n_models, "n_examples": matrix.n_examples,
                "n_skipped": matrix.n_skipped, "n_unshared": matrix.n_unshared,
                "accuracy": {m: _num(a) for m, a in sim.accuracy.items()},
                "standard": std, "n_unsolved_by_standard": None if unsolved is None else len(unsolved),
                "n_unsolved_solved_by_others": n_solved,
                "most_dissimilar": [{"model_a": r.model_a, "model_b": r.model_b,
                                     "dominance_probability": _num(r.dominance_probability),
                                     "error_consistency": _num(r.error_consistency)} for r in top.itertuples()],
                "files": {k: str(v) for k, v in written.items()}}))
            return
        left = []
        if matrix.n_skipped:
            left.append(f"{matrix.n_skipped} skipped for some model")
        if matrix.n_unshared:
            left.append(f"{matrix.n_unshared} not evaluated for every model")
        table = Table("less accurate", "acc. %", "more accurate", "acc. %", "dominance prob.", "error consistency κ",
                      title=f"{setting}: {matrix.n_models} models, {matrix.n_examples:,} examples"
                      + (f" ({'; '.join(left)}, left out)" if left else "")
                      + f"; the {len(top)} most dissimilar of {len(sim.pairs):,} pairs")
        for r in top.itertuples():
            kappa = "undefined" if not math.isfinite(r.error_consistency) else f"{r.error_consistency:+.3f}"
            table.add_row(r.model_a, f"{r.accuracy_a:.2f}", r.model_b, f"{r.accuracy_b:.2f}",
                          f"{r.dominance_probability:.4f}", kappa)
        out.print(table)
        if unsolved is None:
            out.print("no model has type STANDARD: pass --standard NAMES or --testbed T for the examples no standard "
                      "model gets right")
        else:
            out.print(f"{len(unsolved):,} examples no standard model ({len(std)}) gets right; {n_solved:,} of them "
                      "solved by another model")
            for r in unsolved.head(5).itertuples():
                names = r.solved_by.split("; ") if r.solved_by else []
                shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
                out.print(f"  {r.id}: " + (f"{r.n_right} right ({shown})" if names else "no model right"))
        out.print("wrote " + ", ".join(str(p) for p in written.values()))
