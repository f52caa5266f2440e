"""Benchmark: a 100,000-resample bootstrap band, vectorised vs one fit per resample.

Both run side by side in this process on the same fit - the logit trend of ImageNetV2 on
ImageNet over the 87 STANDARD models of ``imagenet-reference`` - and the script prints both
times and their ratio. The loop is the straightforward implementation: for each resample draw
the models with replacement, ``np.polyfit`` a line, predict on the grid; then take percentiles.
By default both run the full number of resamples; ``--loop-fraction 0.1`` times the loop on a
tenth and scales it up linearly, for a quicker look. Each side reports the best of
``--repeat`` runs (as ``timeit`` does), so a busy machine penalises neither side.

Usage: python bench/bootstrap.py [--resamples 100000] [--loop-fraction 1.0] [--repeat 3]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from shiftbench import bootstrap_band, fit_trend, load_testbed
from shiftbench.analysis.scaling import inverse, transform


def loop_band(fit, grid: np.ndarray, n_resamples: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    gx = transform(grid, fit.scale)
    n = len(fit.xs)
    preds = np.empty((n_resamples, len(grid)))
    for b in range(n_resamples):
        idx = rng.integers(0, n, size=n)
        slope, intercept = np.polyfit(fit.xs[idx], fit.ys[idx], 1)
        preds[b] = slope * gx + intercept
    lo, hi = np.quantile(preds, [0.025, 0.975], axis=0)
    return inverse(lo, fit.scale), inverse(hi, fit.scale)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resamples", type=int, default=100_000)
    parser.add_argument("--loop-fraction", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    tb = load_testbed("imagenet-reference")
    fit = fit_trend(tb, "val", "imagenetv2-matched-frequency-format-val")
    grid = np.linspace(0.1, 99.9, 100)
    bootstrap_band(fit, grid=grid, n_resamples=1000)  # warm-up (imports, caches)

    t_vec = t_loop_measured = float("inf")
    n_loop = max(1000, int(args.resamples * min(args.loop_fraction, 1.0)))
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        band = bootstrap_band(fit, grid=grid, n_resamples=args.resamples, seed=0)
        t_vec = min(t_vec, time.perf_counter() - t0)
        t0 = time.perf_counter()
        lo, hi = loop_band(fit, grid, n_loop, seed=1)
        t_loop_measured = min(t_loop_measured, time.perf_counter() - t0)
    t_loop = t_loop_measured * args.resamples / n_loop

    at = np.searchsorted(grid, 76.0)
    print(f"bootstrap band over {fit.n_models} STANDARD models of imagenet-reference "
          f"(ImageNetV2 vs val, logit), {len(grid)} grid points, {args.resamples:,} resamples")
    print(f"  best of {args.repeat} runs each")
    print(f"  vectorised (shiftbench.bootstrap_band): {t_vec:8.3f} s")
    note = "" if n_loop == args.resamples else f"  (measured {t_loop_measured:.2f} s for {n_loop:,}, scaled)"
    print(f"  loop, np.polyfit per resample:          {t_loop:8.3f} s{note}")
    print(f"  speed-up: {t_loop / t_vec:.1f}x")
    print(f"  band at 76% val: vectorised [{band.lower[at]:.2f}, {band.upper[at]:.2f}]%, "
          f"loop [{lo[at]:.2f}, {hi[at]:.2f}]%")


if __name__ == "__main__":
    main()
