"""``shiftbench transfer-correlation``: which robustness metrics predict transfer accuracy, per task
group, and do they say more than ID accuracy (Djolonga et al. 2021)?

One call into :func:`shiftbench.analysis.transferability.robustness_transfer_correlation` on a testbed
that holds ``transfer:<task>`` results beside the robustness settings (``shiftbench transfer``). The
task groups are those the transfer runs declared in the store (``--store DIR`` or ``--testbed DIR``),
unless ``--groups FILE`` overrides them; the output says where they came from (a line under the
tables; ``tasks`` and ``groups_from`` in every ``--json`` row), and a task left in ``other`` is a
note on stderr.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from shiftbench.cli_options import (
    JsonOpt,
    SeedOpt,
    StoreAddOpt,
    TestbedOpt,
    canonical_settings,
)
from shiftbench.cli_support import Table, check_count, err, out
from shiftbench.cli_support import testbed_from_options as _testbed


def _num(v: object) -> float | None:
    return None if v is None or not math.isfinite(float(v)) else round(float(v), 4)


def _cell(rho: float, low: float, high: float) -> str:
    if not math.isfinite(rho):
        return "-"
    return f"{rho:+.2f} [{low:+.2f}, {high:+.2f}]" if math.isfinite(low) else f"{rho:+.2f}"


def _group_fields(res: Any, group: str) -> dict[str, Any]:
    """``tasks`` of a row's group (every task for ``mean``) and ``groups_from``: where their
    groups came from (``groups``, ``store``, ``vtab`` or ``none``, joined with ``+`` when mixed)."""
    tasks = [t for t, g in res.task_groups.items() if group == "mean" or g == group]
    return {"tasks": tasks, "groups_from": "+".join(dict.fromkeys(res.groups_from[t] for t in tasks))}


def register(app: typer.Typer) -> None:
    """Add ``transfer-correlation`` to the ``shiftbench`` app."""

    @app.command("transfer-correlation")
    def transfer_correlation_cmd(
        x: Annotated[str, typer.Option("--x", help="The in-distribution setting (its accuracy is partialled out).",
                                       callback=canonical_settings)],
        testbed: TestbedOpt = None,
        store: StoreAddOpt = None,
        groups: Annotated[Optional[Path], typer.Option(
            "--groups", help="CSV task,group: overrides the groups the transfer runs declared in the store "
            "(else VTAB's 19 tasks are known; any other task is 'other').")] = None,
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
        for note in res.notes:
            err.print(f"note: {note}")
        if as_json:
            print(json.dumps([{**{k: (v if isinstance(v, str) else _num(v)) for k, v in r.items()},
                               **_group_fields(res, r["group"])} for r in res.rows.to_dict("records")]))
            return
        groups_seen = list(dict.fromkeys(res.rows["group"]))
        # two tables with the same rows (raw, then partial): one holding both overflows a terminal
        for kind, title in (("", (f"Robustness vs transfer on {tb.name}: Spearman ρ over models, 95% interval "
                                  f"({n_resamples} bootstrap resamples)")),
                            ("partial_", f"Partial ρ given {x} accuracy (does the metric say more than ID accuracy?)")):
            t = Table("metric", *(f"{g} {'partial' if kind else 'ρ [95%]'}" for g in groups_seen), "models",
                      title=title)
            for metric_name, rows in res.rows.groupby("metric", sort=False):
                by = rows.set_index("group")
                t.add_row(metric_name, *(_cell(by.at[g, f"{kind}rho"], by.at[g, f"{kind}low"], by.at[g, f"{kind}high"])
                                         for g in groups_seen), str(int(rows["n_models"].max())))
            out.print(t)
        out.print(res.groups_origin[:1].upper() + res.groups_origin[1:])
