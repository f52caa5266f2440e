"""Benchmark: the trend module's hand-written routines against numpy's, side by side.

``shiftbench.analysis.trend`` has two hand-written numerical routines on the path of
:func:`~shiftbench.analysis.trend.bootstrap_band`; each is kept only if it measurably beats the
numpy call it replaces. On the shapes a 100,000-resample band uses (the setting of
``bench/bootstrap.py``: the logit trend of ImageNetV2 on ImageNet over the 87 STANDARD models of
``imagenet-reference``, 100 grid points), this times, in one run, alternating, best of
``--repeat`` each (so a busy machine penalises neither side):

* **quantiles**: ``_row_quantiles`` (sample-bracketed selection) against
  ``np.quantile(preds, [.025, .975], axis=1)`` on the band's blocks of predictions (16 grid
  rows x ~100,000 resamples each, every block of the grid), and checks they are equal bit for bit;
* **solver**: ``_solve_small`` (Cramer's rule over the stack) against batched
  ``np.linalg.solve`` (plus the same determinant test for degenerate resamples), on the normal
  equations of every chunk of 8,192 resamples, for the linear trend (2 x 2) and the piecewise
  one (3 x 3), and reports the largest relative difference of the solutions (and, as numpy's
  lower bound, ``np.linalg.solve`` alone, without the determinant test);

and prints the times and the ratios (numpy time / hand-written time: above 1 the hand-written
routine is faster).

Usage: python bench/trend_routines.py [--resamples 100000] [--repeat 5]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from shiftbench import fit_piecewise_trend, fit_trend, load_testbed
from shiftbench.analysis import trend
from shiftbench.analysis.scaling import transform

QS = [0.025, 0.975]
STEP = 16          # grid rows per block, as bootstrap_band
CHUNK = 8192       # resamples per solve, as bootstrap_coefficients


def prediction_blocks(fit, grid: np.ndarray, n_resamples: int) -> list[np.ndarray]:
    """The blocks of predictions ``bootstrap_band`` takes quantiles of."""
    coefs_t = np.ascontiguousarray(trend.bootstrap_coefficients(fit, n_resamples, seed=0).T)
    basis = fit.basis(transform(grid, fit.scale))
    return [basis[s:s + STEP] @ coefs_t for s in range(0, len(grid), STEP)]


def numpy_solve(gram: np.ndarray, vec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Batched LAPACK solve, with the same degenerate-resample test as ``_solve_small``."""
    p = gram.shape[-1]
    det = np.linalg.det(gram)
    ok = np.abs(det) > 1e-10 * np.abs(gram).max(axis=(1, 2)) ** p
    safe = np.where(ok[:, None, None], gram, np.eye(p))
    return np.linalg.solve(safe, vec[..., None])[..., 0], ok


def best_pair(a, b, repeat: int) -> tuple[float, float]:
    ta = tb = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        a()
        ta = min(ta, time.perf_counter() - t0)
        t0 = time.perf_counter()
        b()
        tb = min(tb, time.perf_counter() - t0)
    return ta, tb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resamples", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    tb = load_testbed("imagenet-reference")
    fit = fit_trend(tb, "val", "imagenetv2-matched-frequency-format-val")
    piecewise = fit_piecewise_trend(tb, "val", "imagenetv2-matched-frequency-format-val", 75.0)
    grid = np.linspace(0.1, 99.9, 100)
    print(f"trend routines on the shapes of a {args.resamples:,}-resample bootstrap band over "
          f"{fit.n_models} STANDARD models (ImageNetV2 vs val, logit), {len(grid)} grid points; "
          f"best of {args.repeat}, alternating")

    blocks = prediction_blocks(fit, grid, args.resamples)
    exact = all(np.array_equal(trend._row_quantiles(b, QS), np.quantile(b, QS, axis=1).T) for b in blocks)
    t_hand, t_np = best_pair(lambda: [trend._row_quantiles(b, QS) for b in blocks],
                             lambda: [np.quantile(b, QS, axis=1) for b in blocks], args.repeat)
    print(f"  quantiles, {len(blocks)} blocks of {blocks[0].shape[0]} x {blocks[0].shape[1]:,}:")
    print(f"    _row_quantiles {t_hand * 1e3:8.1f} ms   np.quantile {t_np * 1e3:8.1f} ms   "
          f"ratio (numpy / hand-written) {t_np / t_hand:5.2f}   bit-identical: {exact}")

    for name, f in (("linear, 2 x 2", fit), ("piecewise, 3 x 3", piecewise)):
        systems = list(trend.normal_equations(f, args.resamples, seed=0, chunk=CHUNK))
        worst = 0.0
        for gram, vec in systems:
            (c1, ok1), (c2, ok2) = trend._solve_small(gram, vec), numpy_solve(gram, vec)
            assert np.array_equal(ok1, ok2)
            worst = max(worst, float(np.max(np.abs(c1[ok1] - c2[ok1]) / np.maximum(np.abs(c2[ok1]), 1e-300))))
        t_hand, t_np = best_pair(lambda: [trend._solve_small(g, v) for g, v in systems],
                                 lambda: [numpy_solve(g, v) for g, v in systems], args.repeat)
        _, t_bare = best_pair(lambda: None, lambda: [np.linalg.solve(g, v[..., None]) for g, v in systems],
                              args.repeat)
        print(f"  solver, {name}, {len(systems)} stacks of <= {CHUNK:,}:")
        print(f"    _solve_small   {t_hand * 1e3:8.1f} ms   np.linalg.solve {t_np * 1e3:8.1f} ms   "
              f"ratio (numpy / hand-written) {t_np / t_hand:5.2f}   max rel. difference {worst:.1e}")
        print(f"    (np.linalg.solve alone, without the determinant test: {t_bare * 1e3:.1f} ms, "
              f"ratio {t_bare / t_hand:.2f})")

    t0 = time.perf_counter()
    trend.bootstrap_band(fit, grid=grid, n_resamples=args.resamples, seed=0)
    print(f"  (the whole band, for scale: {time.perf_counter() - t0:.3f} s)")


if __name__ == "__main__":
    main()
