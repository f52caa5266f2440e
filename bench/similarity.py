"""Benchmark: model similarity of 300 models x 50,000 examples, vectorised vs a per-pair loop.

The target (issue 7): dominance probability and error consistency of every pair of 300 models
over 50,000 examples in under 30 s and under 4 GiB. The data is a synthetic correctness matrix
with the structure real ones have (a difficulty per example, a skill per model, noise), so
accuracies spread from about 30% to 90% and errors correlate.

Three timings are printed:

* ``model_similarity`` (the chunked float32 ``C C^T`` product, both matrices and the tidy
  44,850-row pairs table) plus ``unsolved_examples`` - the computation itself;
* optionally (``--store``, on by default) ``correctness_matrix`` reading the same matrix back
  from a results store of 300 keys x 50,000 per-example rows, written here with the store API;
* the naive implementation - the definitions read literally, one pair at a time with numpy
  boolean operations - on ``--loop-models`` models, scaled to all pairs by the pair count, and
  checked to give the same numbers. Each side is the best of ``--repeat`` runs.

Peak memory: ``tracemalloc`` traces every numpy and Python allocation during the computation
(its peak is printed), and ``ru_maxrss`` gives the whole process's peak resident size.

Usage: python bench/similarity.py [--models 300] [--examples 50000] [--loop-models 40]
                                  [--repeat 3] [--no-store]
"""
from __future__ import annotations

import argparse
import resource
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from shiftbench.analysis.similarity import model_similarity, unsolved_examples
from shiftbench.correctness import CorrectnessMatrix, correctness_matrix

TARGET_S, TARGET_GIB = 30.0, 4.0


def synthetic(n_models: int, n_examples: int, seed: int = 0) -> CorrectnessMatrix:
    """Correct iff skill_i > difficulty_k + noise: correlated errors, accuracies ~30-90%."""
    rng = np.random.default_rng(seed)
    difficulty = rng.random(n_examples, dtype=np.float32)
    skill = np.linspace(0.35, 1.05, n_models, dtype=np.float32)[:, None]
    correct = np.empty((n_models, n_examples), dtype=bool)
    for i in range(n_models):        # row by row: no float matrix of the full size
        correct[i] = skill[i] > 0.8 * difficulty + 0.35 * rng.random(n_examples, dtype=np.float32)
    # the least accurate two thirds are standard models, the rest more-data models
    types = tuple("STANDARD" if i < 2 * n_models // 3 else "MORE_DATA" for i in range(n_models))
    return CorrectnessMatrix(correct, tuple(f"model-{i:03d}" for i in range(n_models)),
                             tuple(f"img-{k:06d}.jpeg" for k in range(n_examples)), setting="synthetic",
                             model_types=types)


def naive(c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dominance probability and kappa for every pair, one pair at a time."""
    n_models = c.shape[0]
    dom = np.zeros((n_models, n_models))
    kappa = np.full((n_models, n_models), np.nan)
    for i in range(n_models):
        for j in range(i + 1, n_models):
            x, y = c[i], c[j]
            p, q = x.mean(), y.mean()
            lo, hi = (x, y) if p <= q else (y, x)
            dom[i, j] = dom[j, i] = np.mean(lo & ~hi)
            c_obs = np.mean(x == y)
            c_exp = p * q + (1 - p) * (1 - q)
            if c_exp != 1:
                kappa[i, j] = kappa[j, i] = (c_obs - c_exp) / (1 - c_exp)
    return dom, kappa


def write_store(c: CorrectnessMatrix, root: Path) -> None:
    """One finished key per model with per-example rows, as ``shiftbench eval`` writes them."""
    import pandas as pd
    import pyarrow as pa

    from shiftbench.store import Store

    store = Store(root)
    ids = pa.array(c.example_ids)
    index = pa.array(np.arange(c.n_examples))
    status = pa.array(["ok"] * c.n_examples)
    for i, model in enumerate(c.models):
        key = f"key{i:04d}"
        store.write_part(key, 0, pa.table({"index": index, "id": ids, "status": status,
                                           "correct": pa.array(c.correct[i])}))
        store.finish(key, {"model": model, "setting": c.setting, "accuracy": float(100 * c.correct[i].mean()),
                           "n_examples": c.n_examples, "n_skipped": 0, "convention": "full",
                           "model_type": c.model_types[i]})
    del pd


def best_of(repeat: int, fn):
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=300)
    parser.add_argument("--examples", type=int, default=50_000)
    parser.add_argument("--loop-models", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--store", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()

    c = synthetic(args.models, args.examples)
    n_pairs = args.models * (args.models - 1) // 2
    acc = c.accuracy
    print(f"{args.models} models x {args.examples:,} examples ({n_pairs:,} pairs), accuracies "
          f"{acc.min():.1f}-{acc.max():.1f}%")

    def compute():
        sim = model_similarity(c)
        return sim, unsolved_examples(c)

    compute()                                                      # warm-up (BLAS threads, imports)
    tracemalloc.start()
    t_vec, (sim, unsolved) = best_of(args.repeat, compute)
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"vectorised  model_similarity + unsolved_examples: {t_vec:8.3f} s   "
          f"(traced peak {traced_peak / 2**20:,.0f} MiB; {len(unsolved):,} examples no standard model gets right)")

    if args.store:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            write_store(c, Path(tmp))
            t_write = time.perf_counter() - t0
            t_load, loaded = best_of(1, lambda: correctness_matrix(tmp, c.setting))
            assert np.array_equal(loaded.correct, c.correct) and loaded.models == c.models
        print(f"store       correctness_matrix (read {args.models} keys): {t_load:8.3f} s   "
              f"(writing the store took {t_write:.1f} s)")
    else:
        t_load = 0.0

    k = min(args.loop_models, args.models)
    sub = c.correct[:k]
    loop_pairs = k * (k - 1) // 2
    t_loop_measured, (dom, kappa) = best_of(args.repeat, lambda: naive(sub))
    check = model_similarity(CorrectnessMatrix(sub, c.models[:k]))
    order = [c.models[:k].index(m) for m in check.models]
    assert np.allclose(check.dominance.to_numpy(), dom[np.ix_(order, order)])
    off = ~np.eye(k, dtype=bool)                                   # the loop skips the diagonal
    assert np.allclose(check.error_consistency.to_numpy()[off], kappa[np.ix_(order, order)][off], equal_nan=True)
    t_loop = t_loop_measured * n_pairs / loop_pairs
    print(f"naive       per-pair loop ({loop_pairs:,} pairs of {k} models, scaled):    {t_loop:8.3f} s   "
          f"(measured {t_loop_measured:.3f} s; same numbers)")
    print(f"speed-up    {t_loop / t_vec:,.0f}x")

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20         # KiB -> GiB (Linux)
    total = t_vec + t_load
    ok = total < TARGET_S and rss < TARGET_GIB
    print(f"target      < {TARGET_S:.0f} s and < {TARGET_GIB:.0f} GiB: {total:.2f} s (compute + load), "
          f"peak RSS {rss:.2f} GiB -> {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
