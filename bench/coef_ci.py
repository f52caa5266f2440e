"""Benchmark: ``fit --coef-ci`` (percentile bootstrap intervals of slope and intercept) against
a straightforward per-resample loop, side by side.

Recht et al. (2019) draw their fits' 95% regions from 100,000 bootstrap samples, the default of
``shiftbench fit --coef-ci``. On the setting of ``bench/bootstrap.py`` (the logit trend of
ImageNetV2 on ImageNet over the 87 STANDARD models of ``imagenet-reference``) this times, best
of ``--repeat`` each, alternating (so a busy machine penalises neither side):

* **shiftbench**: :func:`~shiftbench.analysis.trend.coefficient_intervals` (every resample's
  weighted normal equations solved at once, :func:`~shiftbench.analysis.trend.bootstrap_coefficients`,
  then ``np.quantile``) at 1,000, 10,000 and ``--resamples`` (default 100,000) resamples;
* **polyfit loop**: the textbook loop, one ``np.polyfit(xs[idx], ys[idx], 1)`` per resample
  (the same resample indices, drawn as shiftbench draws them), then ``np.quantile``: measured at
  1,000 and 10,000 resamples, and at ``--resamples`` only with ``--full-loop`` (else its time
  there is extrapolated linearly from 10,000 and printed as such);

* **one-piece counts**: shiftbench's path as it was before the counts were blocked: one
  ``np.bincount`` over a whole chunk of 8,192 resamples, then ``.astype(float) @ per_model``
  (two fresh 8,192 x 87 arrays per chunk), same draws; at ``--resamples``;

and checks that the loop gives the same intervals at 10,000 resamples (largest absolute
difference of the four bounds) and the one-piece counts the same coefficients bit for bit.
Prints the times and the ratios (other time / shiftbench time).

Usage: python bench/coef_ci.py [--resamples 100000] [--repeat 3] [--full-loop]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from shiftbench import fit_trend, load_testbed
from shiftbench.analysis.trend import (
    _solve_small,
    bootstrap_coefficients,
    coefficient_intervals,
)

V2 = "imagenetv2-matched-frequency-format-val"
CHUNK = 8192        # resamples per draw, as bootstrap_coefficients


def loop_intervals(xs: np.ndarray, ys: np.ndarray, n_resamples: int, seed: int = 0,
                   confidence: float = 0.95) -> np.ndarray:
    """``[[intercept lo, slope lo], [intercept hi, slope hi]]`` by one ``np.polyfit`` per resample,
    over the resample indices shiftbench draws (same generator, same chunks)."""
    rng = np.random.default_rng(seed)
    n = len(xs)
    coefs = []
    for start in range(0, n_resamples, CHUNK):
        idx = rng.integers(0, n, size=(min(CHUNK, n_resamples - start), n), dtype=np.int16)
        for row in idx:
            if np.ptp(xs[row]) > 0:                       # shiftbench drops singular resamples too
                slope, intercept = np.polyfit(xs[row], ys[row], 1)
                coefs.append((intercept, slope))
    alpha = 1 - confidence
    return np.quantile(np.asarray(coefs), [alpha / 2, 1 - alpha / 2], axis=0)


def one_piece_coefficients(fit, n_resamples: int, seed: int = 0) -> np.ndarray:
    """``bootstrap_coefficients`` with each chunk's counts in one piece (the code before blocking)."""
    rng = np.random.default_rng(seed)
    phi = fit.basis(fit.xs)
    n, p = phi.shape
    iu = np.triu_indices(p)
    per_model = np.concatenate([phi[:, iu[0]] * phi[:, iu[1]], phi * fit.ys[:, None]], axis=1)
    out = []
    for start in range(0, n_resamples, CHUNK):
        b = min(CHUNK, n_resamples - start)
        idx = rng.integers(0, n, size=(b, n), dtype=np.int16)
        counts = np.bincount((idx + n * np.arange(b)[:, None]).ravel(), minlength=b * n).reshape(b, n).astype(float)
        sums = counts @ per_model
        gram = np.empty((b, p, p))
        gram[:, iu[0], iu[1]] = sums[:, : len(iu[0])]
        gram[:, iu[1], iu[0]] = sums[:, : len(iu[0])]
        coef, ok = _solve_small(gram, sums[:, len(iu[0]):])
        out.append(coef[ok])
    return np.concatenate(out)


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--resamples", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--full-loop", action="store_true", help="also run the polyfit loop at --resamples")
    args = ap.parse_args()

    fit = fit_trend(load_testbed("imagenet-reference"), "val", V2)
    print(f"logit trend of {V2} on val: {fit.n_models} STANDARD models of imagenet-reference; "
          f"best of {args.repeat}")
    fast = coefficient_intervals(fit, n_resamples=10_000)
    slow = loop_intervals(fit.xs, fit.ys, 10_000)
    diff = np.abs(np.array([fast.lower, fast.upper]) - slow).max()
    print(f"same intervals at 10,000 resamples: largest difference of the bounds {diff:.1e}")
    print(f"{'resamples':>10}  {'shiftbench':>12}  {'polyfit loop':>14}  {'ratio':>7}")
    counts = sorted({1_000, 10_000, args.resamples})
    loop_10k = None
    for n in counts:
        t_fast = best(lambda n=n: coefficient_intervals(fit, n_resamples=n), args.repeat)
        if n <= 10_000 or args.full_loop:
            t_loop = best(lambda n=n: loop_intervals(fit.xs, fit.ys, n), args.repeat if n <= 10_000 else 1)
            note = "" if n <= 10_000 else "  (loop run once)"
        else:
            t_loop = loop_10k * n / 10_000
            note = "  (loop extrapolated from 10,000, not measured)"
        if n == 10_000:
            loop_10k = t_loop
        print(f"{n:>10,}  {t_fast * 1e3:>9.1f} ms  {t_loop * 1e3:>11.1f} ms  {t_loop / t_fast:>6.0f}x{note}")
    n = args.resamples
    same = np.array_equal(one_piece_coefficients(fit, n), bootstrap_coefficients(fit, n))
    t_new = t_old = float("inf")
    for _ in range(args.repeat):                  # alternating
        t_new = min(t_new, best(lambda: bootstrap_coefficients(fit, n), 1))
        t_old = min(t_old, best(lambda: one_piece_coefficients(fit, n), 1))
    print(f"bootstrap_coefficients at {n:,}: blocked counts {t_new * 1e3:.1f} ms, one-piece counts "
          f"{t_old * 1e3:.1f} ms ({t_old / t_new:.1f}x); same coefficients bit for bit: {same}")


if __name__ == "__main__":
    main()
