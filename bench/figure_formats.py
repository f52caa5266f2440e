"""Benchmark: saving real report figures as PNG, SVG and PDF, one tight box per format vs shared.

The HTML report saves every static figure in three formats with ``bbox_inches="tight"``. The
old way, ``fig.savefig(path, bbox_inches="tight")`` per format, makes matplotlib draw the figure
twice per file (a layout draw to find the tight box, then the real one): six draws. The new
``save_figure_formats`` (``shiftbench.report.figures``) does one layout draw, asks each
format's renderer for its tight box, and saves each file with that box: four draws, and the
same files (SVG and PDF identical up to their id salt and date). When the tight box lies inside
the canvas, that first draw is a real one and the PNG is cut from it along whole pixels (at most
2 px wider and taller than savefig's, the same drawing): three draws.

The figures are report figures on ``imagenet-reference``: ``plot_trend`` for each natural shift
the testbed has (``analyse_shift`` with ``--resamples`` bootstrap resamples), plus
``plot_calibration`` on 90 synthetic (accuracy, ECE) rows and ``plot_similarity_matrices`` of
20 synthetic models; ``--figures N`` keeps the first N. Each figure is built before the clock
starts (building is not saving); both ways save the same figures into a temporary folder,
alternating old and new, best of ``--repeat`` each (a busy machine penalises neither side). The
script counts the PNGs whose bytes agree and those cut from the first draw, and prints both times and the ratio (old / new: above 1 the
new way is faster).

Usage: MPLBACKEND=Agg HF_HUB_OFFLINE=1 python bench/figure_formats.py [--figures 6] [--repeat 3]
                                                                      [--resamples 100]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import shiftbench  # noqa: E402
from shiftbench.analysis.similarity import model_similarity  # noqa: E402
from shiftbench.report.figures import FORMATS, plot_calibration, plot_trend, save_figure_formats  # noqa: E402
from shiftbench.report.shifts import NATURAL_SHIFTS, analyse_shift  # noqa: E402
from shiftbench.report.similarity_figures import plot_similarity_matrices  # noqa: E402


def figure_makers(n_resamples: int) -> list[tuple[str, object]]:
    """(name, zero-argument function building a fresh figure) for every report figure used."""
    tb = shiftbench.load_testbed("imagenet-reference")
    makers = []
    for shift in NATURAL_SHIFTS:
        a = analyse_shift(tb, shift, n_resamples=n_resamples)
        if a.fit is None:
            continue
        makers.append((f"trend {shift.label}", lambda s=shift, a=a: plot_trend(tb, s.x, s.y, fit=a.fit, band=a.band,
                                                                               title=s.label)))
    rng = np.random.default_rng(0)
    rows = pd.DataFrame({"setting": np.repeat(["val", "v2", "sketch"], 30),
                         "accuracy": rng.uniform(30, 90, 90), "ece": rng.uniform(0, 15, 90)})
    sim = model_similarity(rng.random((20, 500)) < np.linspace(0.2, 0.9, 20)[:, None])
    makers.insert(1, ("calibration", lambda: plot_calibration(rows)))
    makers.insert(2, ("similarity matrices", lambda: plot_similarity_matrices(sim)))
    return makers


def save_old(fig, stem: Path) -> list[Path]:
    """The previous ``save_figure_formats``: matplotlib finds the tight box once per format."""
    paths = [stem.with_name(stem.name + ext) for ext in FORMATS]
    for path in paths:
        fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--figures", type=int, default=6, help="how many report figures to save (default 6)")
    ap.add_argument("--repeat", type=int, default=3, help="best of this many runs per way (default 3)")
    ap.add_argument("--resamples", type=int, default=100, help="bootstrap resamples of each trend band")
    args = ap.parse_args()

    makers = figure_makers(args.resamples)[:args.figures]
    print(f"{len(makers)} figures x {len(FORMATS)} formats ({', '.join(FORMATS)}): "
          + "; ".join(name for name, _ in makers))
    best = {"old": float("inf"), "new": float("inf")}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        for _ in range(args.repeat):
            for way, save in (("old", save_old), ("new", save_figure_formats)):
                figs = [make() for _, make in makers]          # built outside the clock
                t0 = time.perf_counter()
                for i, fig in enumerate(figs):
                    save(fig, out / f"{way}-{i}")
                best[way] = min(best[way], time.perf_counter() - t0)
        same = sum((out / f"old-{i}.png").read_bytes() == (out / f"new-{i}.png").read_bytes()
                   for i in range(len(makers)))
    print(f"{'old (tight per format)':>26}  {'new (one layout draw)':>22}  {'old / new':>9}")
    print(f"{best['old']:>24.3f} s  {best['new']:>20.3f} s  {best['old'] / best['new']:>9.2f}")
    print(f"PNGs byte-identical to savefig's: {same} of {len(makers)}; the other {len(makers) - same} cut from "
          "the first draw (tight box inside the canvas)")


if __name__ == "__main__":
    main()
