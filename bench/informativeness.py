"""Benchmark: the ``djolonga2021`` informativeness ranking, batched Newton solver vs scikit-learn.

Both solvers run side by side in this process on the same subset of ``imagenet-reference``
(``--settings`` settings x ``--resamples`` bootstrap resamples, ``--repeats`` fold splits); the
script checks that their rankings are identical (same predictions, so the same accuracies and
gains), prints both times and their ratio. For the paper's 1,000 resamples x every setting, the
batched solver is timed on the subset at 1,000 resamples and scaled by the number of settings (its
cost is per batch), scikit-learn's extrapolated from its time per fit. Then it times the HTML
report's configuration (20 resamples, 3 fold splits, every setting) with the batched solver, and
with ``--full`` the whole 1,000-resample ranking. Each side reports the best of ``--repeat`` runs,
so a busy machine penalises neither side. The extrapolation overestimates with few settings (the
ID-only fits, shared by the settings on the same models, are then a large part of the time).

Usage: python bench/informativeness.py [--settings 10] [--resamples 20] [--repeats 3] [--repeat 1] [--full]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from shiftbench import load_testbed
from shiftbench.analysis.informativeness import informativeness_ranking


def timed(repeat: int, **kwargs):
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = informativeness_ranking(**kwargs)
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", type=int, default=10)
    parser.add_argument("--resamples", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--full", action="store_true", help="also run 1,000 resamples x every setting (newton)")
    args = parser.parse_args()
    tb = load_testbed("imagenet-reference")
    every = [s for s in tb.settings if s != "val"]
    subset = every[:args.settings]
    common = {"testbed": tb, "n_resamples": args.resamples, "n_repeats": args.repeats}
    timed(1, settings=subset[:1], **{**common, "n_resamples": 2, "n_repeats": 1})     # imports, caches
    times, rankings = {}, {}
    for solver in ("sklearn", "newton"):
        times[solver], rankings[solver] = timed(args.repeat, settings=subset, solver=solver, **common)
    a = rankings["newton"].set_index("setting")
    b = rankings["sklearn"].set_index("setting").loc[a.index]
    cols = ["gain_mean", "gain_sd", "gain", "score_id", "score_metric"]
    diff = max(float(np.abs(a[c] - b[c]).max()) for c in cols)
    n_set = len(a)
    print(f"imagenet-reference, djolonga2021: {n_set} settings x {args.resamples} resamples, {args.repeats} fold "
          f"splits, 5 folds")
    print(f"  largest difference of accuracies/gains between the solvers: {diff:.3g} points "
          f"({'identical' if diff == 0 else 'DIFFERENT'})")
    per = times["sklearn"] / (n_set * (args.resamples + args.repeats))
    print(f"  sklearn  {times['sklearn']:7.2f} s  ({1e3 * per:.2f} ms per setting x resample)")
    print(f"  newton   {times['newton']:7.2f} s")
    print(f"  ratio sklearn / newton: {times['sklearn'] / times['newton']:.1f}x (both include drawing the "
          "resamples and folds, the same for both)")
    # the paper's configuration: sklearn extrapolated per fit; newton measured on the subset (its cost
    # is per batch, not per resample) and scaled by the number of settings
    t_big, _ = timed(1, settings=subset, solver="newton", testbed=tb, n_resamples=1000, n_repeats=10)
    scale = len(every) / n_set
    print(f"1,000 resamples x 10 fold splits: newton on the {n_set} settings {t_big:.1f} s; extrapolated to "
          f"{len(every)} settings: newton {t_big * scale / 60:.1f} min, sklearn "
          f"{per * len(every) * 1010 / 60:.1f} min")
    t_report, ranking = timed(args.repeat, testbed=tb, n_resamples=20, n_repeats=3)
    print(f"report configuration (20 resamples, 3 fold splits, {len(ranking)} settings ranked), newton: "
          f"{t_report:.2f} s")
    if args.full:
        t_full, ranking = timed(1, testbed=tb)
        print(f"1,000 resamples x {len(ranking)} settings (10 fold splits), newton: {t_full:.1f} s "
              f"({t_full / 60:.1f} min)")


if __name__ == "__main__":
    main()
