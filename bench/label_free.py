"""Benchmark: label-free accuracy estimates on the digits testbed of ``make demo``, against the truth.

Every model of the demo store (fine-tuning checkpoints left out) is estimated on each shift from
``mnist-test`` - the natural ones (UCI digits, UCI digits stretched over the frame, MNIST test
digits through UCI's 8x8 pipeline) and every corrupted copy ``mnist-test+<corruption>.<severity>``
- with ALine-D, ALine-S, ATC, DoC and AC (``shiftbench.estimate_ood_accuracy``), as if the shifted
labels were unknown; the labels give the truth. It prints the mean absolute error (percentage
points) per shift family and method (``estimation_errors``), the share of shifts where agreement
is on the line (the same-line F test at alpha 0.05) and ALine-D's error on and off the line, the
same split by the label-free diagnostic (agreement-line R² at least 0.5), then
the same per shift with ``--per-shift``, and the time taken.

Usage: python bench/label_free.py [--store shiftbench-workspace/digits/store] [--severity 3] [--per-shift]
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from shiftbench.analysis.agreement import METHODS, estimation_errors, setting_errors
from shiftbench.demo.report import ID, PIPELINE, UCI, UCI_FILL
from shiftbench.report.section_label_free import (
    METHOD_STYLE,
    label_free_shifts,
    run_estimates,
)
from shiftbench.store import Store

NATURAL = [("UCI digits", ID, UCI), ("UCI digits stretched", ID, UCI_FILL), ("MNIST at UCI resolution", ID, PIPELINE)]


def fmt(v: object, spec: str = ".1f") -> str:
    return "" if v is None or (isinstance(v, float) and not np.isfinite(v)) else format(v, spec)


def print_table(rows: list[list[str]]) -> None:
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    for i, r in enumerate(rows):
        print("  ".join(c.ljust(w) if k == 0 else c.rjust(w) for k, (c, w) in enumerate(zip(r, widths))))
        if i == 0:
            print("  ".join("-" * w for w in widths))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, default=Path("shiftbench-workspace/digits/store"))
    parser.add_argument("--severity", type=int, default=None, help="only this corruption severity (default: all)")
    parser.add_argument("--per-shift", action="store_true", help="also print one row per shift")
    args = parser.parse_args()
    store = Store.existing(args.store)
    results = store.results()
    shifts = label_free_shifts(results, NATURAL, severity=args.severity)
    run = run_estimates(store, shifts, results)
    for setting, why in run.failed.items():
        print(f"not estimated: {setting}: {why}")
    n_models = max(len(r.estimates) for r in run.estimates.values())
    print(f"{args.store}: {len(run.shifts)} shifts, up to {n_models} models, estimated in {run.seconds:.1f} s "
          "(reading the predictions is most of it)\n")
    table = estimation_errors(run.estimates, run.families)
    methods = [m for m in METHODS if table[f"mae_{m}"].notna().any()]
    head = ["family", "shifts", *(METHOD_STYLE[m][1] for m in methods), "on the line", "ALine-D on", "ALine-D off",
            "R² ≥ 0.5", "ALine-D R² ≥ 0.5", "ALine-D R² < 0.5"]
    rows = [head]
    for r in table.to_dict("records"):
        rows.append([str(r["family"]), str(r["n_shifts"]), *(fmt(r[f"mae_{m}"], ".2f") for m in methods),
                     f"{fmt(r['on_line_share'], '.0f')}% of {r['n_tested']}" if r["n_tested"] else "",
                     fmt(r["mae_aline-d_on_line"], ".2f"), fmt(r["mae_aline-d_off_line"], ".2f"),
                     f"{fmt(r['strong_agreement_share'], '.0f')}%", fmt(r["mae_aline-d_strong"], ".2f"),
                     fmt(r["mae_aline-d_weak"], ".2f")])
    print("mean absolute error (pp) over models and shifts")
    print_table(rows)
    if args.per_shift:
        per = setting_errors(run.estimates, run.families)
        rows = [["shift", "family", "agr. slope", "acc. slope", "agr. bias", "acc. bias", "agr. R²", "p",
                 *(METHOD_STYLE[m][1] for m in methods)]]
        for r in per.to_dict("records"):
            rows.append([str(r["shift"]), str(r["family"]), fmt(r["agreement_slope"], ".2f"),
                         fmt(r["accuracy_slope"], ".2f"), fmt(r["agreement_bias"], "+.2f"),
                         fmt(r["accuracy_bias"], "+.2f"), fmt(r["agreement_r2"], ".3f"), fmt(r["p_value"], ".2g"),
                         *(fmt(r[f"mae_{m}"], ".2f") for m in methods)])
        print("\nper shift")
        print_table(rows)


if __name__ == "__main__":
    main()
