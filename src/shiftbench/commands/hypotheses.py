"""``shiftbench hypotheses``: the "seven hypotheses" verdict table of Hendrycks et al. (2021, "The Many
Faces of Robustness", §5): per intervention group and shift, the mean effective robustness of the
group's models with a 95% bootstrap interval over models, relative robustness against each model's
baseline where the group names one, and a verdict (helps / hurts / no evidence).

One call into :func:`shiftbench.analysis.hypotheses.hypotheses_table`.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Optional

import typer

from shiftbench.cli_options import JsonOpt, SeedOpt, StoreAddOpt, TestbedOpt, canonical_settings
from shiftbench.cli_support import Table, out
from shiftbench.cli_support import testbed_from_options as _testbed


def _interval(mean: float, low: float, high: float) -> str:
    if not math.isfinite(mean):
        return "-"
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"{mean:+.2f}"
    return f"{mean:+.2f} [{low:+.2f}, {high:+.2f}]"


def register(app: typer.Typer) -> None:
    """Add ``hypotheses`` to the ``shiftbench`` app."""

    @app.command("hypotheses")
    def hypotheses_cmd(
        testbed: TestbedOpt = None,
        store: StoreAddOpt = None,
        groups: Annotated[Optional[Path], typer.Option(
            "--groups", help="Group table (CSV: group, hypothesis, select, baseline; docs/hypotheses.md). Default: the "
            "table shipped for the testbed's name.")] = None,
        x: Annotated[Optional[str], typer.Option(
            "--x", callback=canonical_settings, help="In-distribution setting for every shift (default: each "
            "shift's own, e.g. "
            "val-on-imagenet-r-classes for ImageNet-R).")] = None,
        shift: Annotated[Optional[list[str]], typer.Option(
            "--y", help="A natural shift's name (ImageNet-R) or a shifted setting; repeatable. Default: the "
            "natural shifts the testbed has.")] = None,
        n_resamples: Annotated[int, typer.Option("--resamples", help="Bootstrap resamples of the models per cell.")] = 1000,
        seed: SeedOpt = 0,
        min_models: Annotated[int, typer.Option(
            "--min-models", help="Fewest models with both accuracies for a verdict.")] = 3,
        as_json: JsonOpt = False,
    ) -> None:
        """Does an intervention (more data, larger models, self-attention, data augmentation, adversarial
        training, ...) give effective robustness? Mean ER per group and shift with a bootstrap interval
        over the group's models, and a verdict."""
        from shiftbench.analysis.hypotheses import hypotheses_table  # deferred: loads pandas, scipy

        tb = _testbed(testbed, store)
        res = hypotheses_table(tb, groups, x=x, shifts=shift or None, n_resamples=n_resamples, seed=seed,
                               min_models=min_models)
        if as_json:
            print(json.dumps(res.to_json()))
            return
        t = Table("group", "hypothesis", "shift", "n", "mean ER pp [95%]", "verdict", "pairs", "mean RR pp [95%]",
                  title=f"Hypotheses on {res.testbed}: mean effective robustness per group "
                  f"({res.n_resamples} bootstrap resamples of the models, seed {res.seed})")
        for r in res.rows.itertuples(index=False):
            rr = _interval(r.mean_rr, r.rr_low, r.rr_high) if r.n_pairs else "-"
            t.add_row(r.group, r.hypothesis, r.shift, str(r.n_models), _interval(r.mean_er, r.low, r.high),
                      r.verdict, str(r.n_pairs) if r.n_pairs else "-", rr)
        out.print(t)
        out.print(f"groups: {res.groups_source}; verdict: helps when the interval lies above 0, hurts when below, "
                  f"no evidence when it contains 0, too few models under {res.min_models}")
        for r in res.rows.drop_duplicates("group").itertuples(index=False):
            if r.note:
                out.print(f"note: {r.group}: {r.note}")
        for note in res.notes:
            out.print(f"note: {note}")
