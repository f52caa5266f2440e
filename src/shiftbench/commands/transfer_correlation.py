"""``shiftbench transfer-correlation``: which robustness metrics predict transfer accuracy, per task
group, and do they say more than ID accuracy (Djolonga et al. 2021)?

One call into :func:`shiftbench.analysis.transferability.robustness_transfer_correlation` on a testbed
that holds ``transfer:<task>`` results beside the robustness settings (``shiftbench transfer``).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Optional

import typer

from shiftbench.cli_options import JsonOpt, SeedOpt, StoreAddOpt, TestbedOpt, canonical_settings
from shiftbench.cli_support import Table, check_count, out
from shiftbench.cli_support import testbed_from_options as _testbed


def _num(v: object) -> float | None:
    return None if v is None or not math.isfinite(float(v)) else round(float(v), 4)


def _cell(rho: float, low: float, high: float) -> str:
    if not math.isfinite(rho):
        return "-"
    return f"{rho:+.2f} [{low:+.2f}, {high:+.2f}]" if math.isfinite(low) else f"{rho:+.2f}"


def register(app: typer.Typer) -> None:
    """Add ``transfer-correlation`` to the ``shiftbench`` app."""

    @app.command("transfer-correlation")
    def transfer_correlation_cmd(
        x: Annotated[str, typer.Option("--x", help="The in-distribution setting (its accuracy is partialled out).",
                                       callback=canonical_settings)],
        testbed: TestbedOpt = None,
        store: StoreAddOpt = None,
        groups: Annotated[Optional[Path], typer.Option(
            "--groups", help="CSV task,group for your tasks (VTAB's 19 tasks are known).")] = None,
        protocol: Annotated[str, typer.Option("--protocol", help="linear or finetune.")] = "linear",
        metric: Annotated[Optional[list[str]], typer.Option(
            "--metric", help="Only these metrics (repeat), e.g. er:uci-digits or acc:corruptions.")] = None,
        n_resamples: Annotated[int, typer.Option("--resamples", help="Bootstrap resamples of the models.")] = 1000,
        seed: SeedOpt = 0,
        as_json: JsonOpt = False,
    ) -> None:
        """Spearman correlation of every robustness metric (accuracy and effective robustness per shift,
        the corruption average) with the mean transfer accuracy per task group, 95% bootstrap interval
        over models, and the partial correlation given ID accuracy."""
        from shiftbench.analysis.transferability import robustness_transfer_correlation  # deferred: loads scipy

        check_count(n_resamples, "--resamples", minimum=0, what="bootstrap resamples (0: no interval; default 1000)")
        tb = _testbed(testbed, store)
        res = robustness_transfer_correlation(tb, x, groups=groups, protocol=protocol, metrics=metric,
                                              n_resamples=n_resamples, seed=seed)
        if as_json:
            print(json.dumps([{k: (v if isinstance(v, str) else _num(v)) for k, v in r.items()}
                              for r in res.rows.to_dict("records")]))
            return
        groups_seen = list(dict.fromkeys(res.rows["group"]))
        t = Table("metric", *(f"{g} ρ [95%]" for g in groups_seen), *(f"{g} partial" for g in groups_seen),
                  "models", title=f"Robustness vs transfer on {tb.name}: Spearman ρ over models "
                                  f"({n_resamples} bootstrap resamples; partial: given {x} accuracy)")
        for metric_name, rows in res.rows.groupby("metric", sort=False):
            by = rows.set_index("group")
            t.add_row(metric_name, *(_cell(by.at[g, "rho"], by.at[g, "low"], by.at[g, "high"]) for g in groups_seen),
                      *(_cell(by.at[g, "partial_rho"], by.at[g, "partial_low"], by.at[g, "partial_high"])
                        for g in groups_seen), str(int(rows["n_models"].max())))
        out.print(t)
        for note in res.notes:
            out.print(f"note: {note}")
