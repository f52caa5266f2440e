"""Benchmark: views on a batch of ImageNet logits and pm-k on the real ImageNet-Vid-Robust
pm-sets, each against a straightforward per-example Python loop, side by side in this process.

The suite asserts no wall-clock time (a loaded machine would fail it for nothing); these numbers
are what the old timing tests checked (a 256-image batch well under 5 ms per view; pm-k under
0.5 s), printed with the loop's time and the ratio. Each side reports the best of ``--repeat``
runs, as ``timeit`` does, so a busy machine penalises neither side.

Usage: python bench/views.py [--repeat 10]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import shiftbench.views as sv
from shiftbench.views import FullView, imagenet_a_view, objectnet_view, pm_k, video_view

CLASSMAPS = Path(sv.__file__).parent.parent / "data" / "classmaps"


def best_of(repeat: int, fn) -> float:  # noqa: ANN001 - any callable
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def loop_top1(x: np.ndarray, t: list[int]) -> float:
    """Top-1 accuracy one row at a time: the loop a vectorised view replaces."""
    return 100.0 * sum(int(max(range(x.shape[1]), key=row.__getitem__) == y) for row, y in zip(x.tolist(), t)) / len(t)


def pm_sets() -> tuple[int, list[int], list[list[int]], list[list[int]]]:
    pmsets = json.loads((CLASSMAPS / "imagenet-vid-robust__pmsets.json").read_text())
    frames = sorted({f for a, ms in pmsets.items() for f in [a, *ms]})
    index = {f: i for i, f in enumerate(frames)}
    number = lambda f: int(f.rsplit("/", 1)[1].split(".")[0])  # noqa: E731
    anchors = [index[a] for a in pmsets]
    members = [[index[m] for m in ms] for ms in pmsets.values()]
    offsets = [[number(m) - number(a) for m in ms] for a, ms in pmsets.items()]
    return len(frames), anchors, members, offsets


def loop_pm_k(correct: np.ndarray, k: int, anchors: list[int], members: list[list[int]],
              offsets: list[list[int]]) -> float:
    return float(np.mean([correct[a] and all(correct[m] for m, o in zip(ms, os) if abs(o) <= k)
                          for a, ms, os in zip(anchors, members, offsets)]) * 100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    rng = np.random.default_rng(8)
    x = rng.normal(size=(256, 1000)).astype(np.float32)
    t = rng.integers(0, 1000, 256).tolist()
    loop = best_of(args.repeat, lambda: loop_top1(x, t))
    print(f"{'view on 256 x 1000 logits':42s} {'view':>9s} {'loop':>9s} {'ratio':>7s}")
    for view in (FullView(), imagenet_a_view(), objectnet_view("argmax-all", True),
                 video_view(targets_in_source_space=True)):
        view.apply(x, t)
        took = best_of(args.repeat, lambda v=view: v.apply(x, t))
        print(f"{view.name:42s} {took * 1e3:7.2f}ms {loop * 1e3:7.1f}ms {loop / took:6.1f}x")
    n, anchors, members, offsets = pm_sets()
    correct = np.random.default_rng(5).random(n) < 0.97
    for k in (0, 4, 10):
        fast = best_of(args.repeat, lambda k=k: pm_k(correct, k=k, anchors=anchors, members=members,
                                                      member_offsets=offsets))
        slow = best_of(max(1, args.repeat // 5), lambda k=k: loop_pm_k(correct, k, anchors, members, offsets))
        print(f"{f'pm-{k} on {len(anchors)} ImageNet-Vid-Robust pm-sets':42s} {fast * 1e3:7.2f}ms "
              f"{slow * 1e3:7.1f}ms {slow / fast:6.1f}x")


if __name__ == "__main__":
    main()
