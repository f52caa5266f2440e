"""``shiftbench trajectory``: the fine-tuning trajectories of a results store, checkpoint by
checkpoint, with their effective robustness and figures (Andreassen et al. 2021)."""
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
        as_json: JsonOpt = False,
    ) -> None:
        """Each stored fine-tuning trajectory: per-step accuracies and effective robustness."""

        import numpy as np  # deferred: loaded when the command runs, not for `--help`
        import pandas as pd  # deferred: loaded when the command runs, not for `--help`

        from shiftbench.analysis.trajectory import (  # deferred: loads pandas
            trajectory_accuracies,
            trajectory_effective_robustness,
            trajectory_summary,
        )
        from shiftbench.analysis.trend import fit_trend  # deferred: loads pandas, scipy
        from shiftbench.store import Store  # deferred: loads pyarrow
        from shiftbench.studies.trajectory import Trajectory  # deferred: loads Pillow, loads pyarrow

        st = Store.existing(store)     # a missing folder, or one that is not a store: one line
        names = name or st.study_names("trajectory")
        if not names:
            raise ConfigError(f"{store}: no trajectories stored; record one with shiftbench.Trajectory(...).evaluate")
        tb = _testbed(testbed, store)
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
                    s = trajectory_summary(er)
                    typer.echo(f"{n}: effective robustness {s['start_er']:+.2f} pp at step {s['start_step']}, peak "
                               f"{s['peak_er']:+.2f} pp at step {s['peak_step']}, {s['end_er']:+.2f} pp at step "
                               f"{s['end_step']}")
            for note in notes:
                typer.echo(note, err=True)
        if output is not None:
            _write(output, tb, results, fits, as_json)

    return None


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
