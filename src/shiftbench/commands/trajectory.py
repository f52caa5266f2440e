"""``shiftbench trajectory``: the fine-tuning trajectories of a results store, checkpoint by
checkpoint, with their effective robustness and figures (Andreassen et al. 2021); with ``--bins``
or ``--mix``, the statistics of several runs of one recipe (Andreassen et al. 2022: binned mean
and s.d. over ID accuracy, maximum over bins, percentage of the gap to y = x, the y = x curve
and the mixed-classifier baseline)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from shiftbench.cli_options import JsonOpt, OneTestbedOpt, ScaleOpt, StoreOpt, canonical_settings
from shiftbench.cli_support import Table, out
from shiftbench.errors import ConfigError, DataError, ShiftbenchError


def _testbed(spec: str | None, store: Path):
    """The testbed whose trend is used: ``-t`` (a reference name, a table, or a results store
    directory), else the store's own finished models; checkpoints are left out."""
    from shiftbench.analysis.trajectory import is_checkpoint  # deferred: loads pandas
    from shiftbench.reference import load_testbed  # deferred: loads pandas
    from shiftbench.testbed import Testbed  # deferred: loads pandas

    if spec is None or Path(spec).is_dir():
        try:
            tb = Testbed.from_store(store if spec is None else spec, name=str(store if spec is None else spec))
        except DataError:
            if spec is not None:
                raise
            return None
    else:
        tb = load_testbed(spec)
    return tb.select([m for m in tb.models if not is_checkpoint(m)])


def register(app: typer.Typer) -> None:
    @app.command("trajectory")
    def trajectory_cmd(
        store: StoreOpt,
        name: Annotated[Optional[list[str]], typer.Option("--name", help="Trajectory name (repeatable; default all).")]
        = None,
        testbed: OneTestbedOpt = None,
        x: Annotated[Optional[str], typer.Option("--x", help="In-distribution setting (default: the trajectory's).",
                                                         callback=canonical_settings)]
        = None,
        y: Annotated[Optional[str], typer.Option("--y", help="Shifted setting (default: its first shifted one).",
                                                         callback=canonical_settings)]
        = None,
        scale: ScaleOpt = "logit",
        output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write figures (PNG/PDF) and a CSV here.")]
        = None,
        bins: Annotated[Optional[int], typer.Option(
            "--bins", help="Summarise the runs of each recipe: mean ± s.d. of effective robustness in this many "
            "equal-width bins of ID accuracy, its maximum over bins, its percentage of the gap to y = x "
            "(Andreassen et al. 2022). The --name runs must be one recipe.")] = None,
        mix: Annotated[Optional[str], typer.Option(
            "--mix", help="MODEL_A,MODEL_B: add the mixed-classifier curve between two testbed models to the "
            "summary (implies --bins 10).")] = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Each stored fine-tuning trajectory: per-step accuracies and effective robustness; with --bins or --mix,
        the statistics of several runs (seeds) of one recipe."""

        import numpy as np  # deferred: loaded when the command runs, not for `--help`
        import pandas as pd  # deferred: loaded when the command runs, not for `--help`

        from shiftbench.analysis.trajectory import (  # deferred: loads pandas
            trajectory_accuracies,
            trajectory_effective_robustness,
            trajectory_endpoints,
        )
        from shiftbench.analysis.trend import fit_trend  # deferred: loads pandas, scipy
        from shiftbench.store import Store  # deferred: loads pyarrow
        from shiftbench.studies.trajectory import Trajectory  # deferred: loads Pillow, loads pyarrow

        from shiftbench.cli_support import check_count  # deferred: loaded when the command runs

        check_count(bins, "--bins")
        pair = _mix_pair(mix)
        st = Store.existing(store)     # a missing folder, or one that is not a store: one line
        names = name or st.study_names("trajectory")
        if not names:
            raise ConfigError(f"{store}: no trajectories stored; record one with shiftbench.Trajectory(...).evaluate")
        tb = _testbed(testbed, store)
        if bins is not None or pair is not None:
            _summaries(st, names, bool(name), tb, x, y, scale, bins, pair, output, as_json)
            return
        results, fits, notes = {}, {}, []
        for n in names:
            tr = Trajectory.load(st, n)
            tx, ty = x or tr.id_setting, y or tr._default_y()
            fit, note = fits.get((tx, ty)), None
            if fit is None and tb is not None:
                try:
                    fit = fits[(tx, ty)] = fit_trend(tb, tx, ty, scale)
                except ShiftbenchError as exc:
                    note = f"no trend: {exc}"
            elif tb is None:
                note = "no trend: the store has no finished models of its own; pass -t TESTBED"
            if fit is not None:
                er = trajectory_effective_robustness(frame=tr.frame, x=tx, y=ty, fit=fit)
            else:
                er = trajectory_accuracies(tr.frame, tx, ty).assign(predicted_y_acc=np.nan, effective_robustness=np.nan)
                notes.append(f"{n}: {note}")
            results[n] = (tx, ty, er)
        if as_json:
            rows = [{"trajectory": n, "x": tx, "y": ty,
                     **{k: (None if isinstance(v, float) and not np.isfinite(v) else v)
                        for k, v in r.items() if k in ("step", "epoch", "x_acc", "y_acc", "predicted_y_acc",
                                                       "effective_robustness")}}
                    for n, (tx, ty, er) in results.items() for r in er.to_dict("records")]
            typer.echo(json.dumps(rows, default=lambda v: v.item() if hasattr(v, "item") else str(v)))
        else:
            for n, (tx, ty, er) in results.items():
                table = Table("step", "epoch", f"{tx} %", f"{ty} %", "trend %", "ER (pp)",
                              title=f"trajectory {n}: {len(er)} checkpoints")
                for r in er.itertuples(index=False):
                    table.add_row(str(r.step), "" if pd.isna(r.epoch) else f"{r.epoch:.2f}", f"{r.x_acc:.2f}",
                                  f"{r.y_acc:.2f}", "" if pd.isna(r.predicted_y_acc) else f"{r.predicted_y_acc:.2f}",
                                  "" if pd.isna(r.effective_robustness) else f"{r.effective_robustness:+.2f}")
                out.print(table)
                if er["effective_robustness"].notna().all():
                    s = trajectory_endpoints(er)
                    typer.echo(f"{n}: effective robustness {s['start_er']:+.2f} pp at step {s['start_step']}, peak "
                               f"{s['peak_er']:+.2f} pp at step {s['peak_step']}, {s['end_er']:+.2f} pp at step "
                               f"{s['end_step']}")
            for note in notes:
                typer.echo(note, err=True)
        if output is not None:
            _write(output, tb, results, fits, as_json)

    return None


def _mix_pair(mix: str | None) -> tuple[str, str] | None:
    """``--mix MODEL_A,MODEL_B`` as two names (ConfigError otherwise)."""
    if mix is None:
        return None
    parts = [p.strip() for p in mix.split(",")]
    if len(parts) != 2 or not all(parts):
        raise ConfigError(f"--mix {mix!r}: give two testbed models joined by a comma, e.g. --mix resnet18,resnet50")
    return parts[0], parts[1]


def _summaries(st, names: list[str], named: bool, tb, x: str | None, y: str | None, scale: str, bins: int | None,
               pair: tuple[str, str] | None, output: Path | None, as_json: bool) -> None:
    """``--bins``/``--mix``: one :func:`trajectory_summary` per recipe (the ``--name`` runs: one)."""
    from shiftbench.analysis.trajectory import DEFAULT_BINS, run_recipe, trajectory_summary  # deferred: loads pandas
    from shiftbench.cli_support import jsonable  # deferred: loaded when the command runs
    from shiftbench.studies.trajectory import Trajectory  # deferred: loads Pillow, loads pyarrow

    if tb is None:
        raise ConfigError("the summary needs a trend: the store has no finished models of its own; pass -t TESTBED")
    runs = {n: Trajectory.load(st, n) for n in names}
    groups: dict[str, dict] = {}
    if named:
        groups[""] = runs                     # passed as one: trajectory_summary refuses mixed recipes
    else:
        for n, r in runs.items():
            groups.setdefault(run_recipe(n, r)[0], {})[n] = r
    summaries = []
    for group in groups.values():
        first = next(iter(group.values()))
        tx, ty = x or first.id_setting, y or first._default_y()
        summaries.append(trajectory_summary(tb, group, tx, ty, scale, bins=bins or DEFAULT_BINS, mix=pair))
    if as_json:
        typer.echo(json.dumps(jsonable({"summaries": [s.to_dict() for s in summaries]})))
    else:
        for s in summaries:
            _print_summary(s)
    if output is not None:
        _write_summaries(output, tb, summaries, as_json)


def _print_summary(s) -> None:
    """The binned table, the maximum, and the mixed-classifier curve of one recipe."""
    import pandas as pd  # deferred: loaded when the command runs, not for `--help`

    runs = ", ".join(s.runs["run"])
    table = Table(f"{s.x} % bin", "checkpoints", "runs", "ER mean (pp)", "ER s.d.", "% of gap", "y = x ER (pp)",
                  title=f"recipe {s.recipe}: {len(s.runs)} runs ({runs}), {s.y} vs {s.x}")
    mids = s.bins["x_mid"].to_numpy()
    no_gap = s.fit.predict(mids)
    def f(v, fmt):           # -1e-15 shows as +0.00, not -0.00
        if pd.isna(v):
            return ""
        text = format(float(v), fmt)
        return format(0.0, fmt) if float(text) == 0 else text

    for r, ng in zip(s.bins.itertuples(index=False), mids - no_gap):
        table.add_row(f"{r.x_low:.1f}-{r.x_high:.1f}", str(r.n_checkpoints), str(r.n_runs), f(r.er_mean, "+.2f"),
                      f(r.er_sd, ".2f"), f(r.percent_of_gap_mean, "+.1f"), f(ng, "+.2f"))
    out.print(table)
    if s.max_er_bin is not None:
        b = s.bins.loc[s.max_er_bin]
        typer.echo(f"{s.recipe}: maximum effective robustness over bins {s.max_er:+.2f} pp (±{b['er_sd']:.2f} s.d.) "
                   f"at {s.x} {b['x_low']:.1f}-{b['x_high']:.1f}%; largest share of the gap to y = x "
                   f"{s.max_percent_of_gap:+.1f}%")
    if s.mixed is not None:
        m = s.mixed
        mt = Table("alpha", f"{s.x} %", f"{s.y} %", "ER (pp)", "% of gap",
                   title=f"mixed classifier {m.attrs['low_model']} -> {m.attrs['high_model']}")
        for r in m.itertuples(index=False):
            mt.add_row(f"{r.alpha:.2f}", f"{r.x_acc:.2f}", f"{r.y_acc:.2f}", f(r.effective_robustness, "+.2f"),
                       f(r.percent_of_gap, "+.1f"))
        out.print(mt)


def _write_summaries(output: Path, tb, summaries: list, quiet: bool) -> None:
    """Per recipe: the statistics figure (PNG/PDF) and the binned table (CSV)."""
    from shiftbench.report.figures import save_figure_formats  # deferred: loads matplotlib, loads plotly
    from shiftbench.report.tables import file_slug  # deferred: loads matplotlib, loads plotly
    from shiftbench.report.trajectory_figures import plot_trajectory_stats  # deferred: loads matplotlib

    output.mkdir(parents=True, exist_ok=True)
    for s in summaries:
        stem = output / f"trajectory_stats_{file_slug(s.recipe)}"
        paths = save_figure_formats(plot_trajectory_stats(tb, s), stem, (".png", ".pdf"))
        csv = stem.with_name(stem.name + "_bins.csv")
        s.bins.assign(recipe=s.recipe).to_csv(csv, index=False)
        paths.append(csv)
        if s.mixed is not None:
            mixed = stem.with_name(stem.name + "_mixed.csv")
            s.mixed.to_csv(mixed, index=False)
            paths.append(mixed)
        if not quiet:
            for p in paths:
                typer.echo(f"wrote {p}")


def _write(output: Path, tb, results: dict, fits: dict, quiet: bool) -> None:
    """Per (x, y) pair with a trend: the trajectory figure, the ER figure and the CSV."""
    import pandas as pd  # deferred: loaded when the command runs, not for `--help`

    from shiftbench.report.figures import save_figure_formats  # deferred: loads Pillow, loads matplotlib, loads plotly, loads pyarrow
    from shiftbench.report.tables import trajectory_stem  # deferred: loads Pillow, loads matplotlib, loads plotly, loads pyarrow
    from shiftbench.report.trajectory_figures import (  # deferred: loads Pillow, loads matplotlib, loads plotly, loads pyarrow
        plot_trajectory,
        plot_trajectory_er,
    )

    output.mkdir(parents=True, exist_ok=True)
    for (tx, ty), fit in fits.items():
        ers = {n: er for n, (a, b, er) in results.items() if (a, b) == (tx, ty)}
        if not ers:
            continue
        stem = output / trajectory_stem(tx, ty)
        paths = save_figure_formats(plot_trajectory(tb, tx, ty, ers, fit=fit), stem, (".png", ".pdf"))
        by = "epoch" if all(e["epoch"].notna().all() for e in ers.values()) else "step"
        paths += save_figure_formats(plot_trajectory_er(ers, by=by), stem.with_name(stem.name + "_er"), (".png", ".pdf"))
        csv = stem.with_name(stem.name + ".csv")      # not with_suffix: a slug may hold a dot
        pd.concat([e.assign(trajectory=n) for n, e in ers.items()], ignore_index=True).to_csv(csv, index=False)
        if not quiet:
            for p in [*paths, csv]:
                typer.echo(f"wrote {p}")
