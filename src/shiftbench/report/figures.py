"""The scatter the field reads: shifted vs in-distribution accuracy with the fitted trend.

Both axes are drawn in the chosen scaling (logit by default) with ticks labelled in percent
accuracy; every model is a point with Clopper-Pearson error bars (99.5% as in Taori et al.
2020, Figure 1) whose colour and marker name its type (a colour-blind-safe palette, Okabe &
Ito 2008; no two types share a colour and marker), the trend fitted on the standard models is
a line with its bootstrap band, and ``y = x`` is dashed for reference.

Readability rules shared with the interactive twin (:mod:`.interactive`):

* **Zoom on the models that matter** (:func:`trend_views`): by default the axes start at the
  in-distribution accuracy of the least accurate model the trend was fitted on; the models
  below it (low-accuracy CNNs, baselines near chance) are drawn in a small overview panel with
  every model and a rectangle marking the zoomed region (the HTML figure has an "all models"
  button instead).
* **The fitted-on models are drawn on top** of the other types, and highlighted models on top
  of everything: larger gold stars with a black outline, labelled in free space.
* **Legends sit outside the plotting area**, to the right.
* **Dense testbeds** (more than :data:`DENSE_POINTS` models, e.g. timm's 1,556) get small
  translucent markers.
"""
from __future__ import annotations

import functools
import inspect
import os
import re
import signal
import sys
import textwrap

from collections.abc import Callable, Iterable
from concurrent.futures import Future
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple, TypeVar

import matplotlib

matplotlib.use("Agg", force=False)
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from shiftbench.analysis.intervals import accuracy_interval  # noqa: E402
from shiftbench.analysis.scaling import inverse, transform  # noqa: E402
from shiftbench.analysis.trend import (  # noqa: E402
    DEFAULT_FIT_ON,
    Band,
    TrendFit,
    TwoLineBand,
    TwoLineTrendFit,
    bootstrap_band,
    fit_trend,
)
from shiftbench.errors import ConfigError  # noqa: E402
from shiftbench.report.cache import (  # noqa: E402
    SharedCache,
    code_versions,
    content_hash,
    figure_is_current,
    figure_record_path,
    write_figure_record,
)
from shiftbench.testbed import Testbed  # noqa: E402

#: Colours (Okabe & Ito's colour-blind-safe palette) and legend labels per model type; the
#: legend lists types in this order. Types not listed get a colour and marker of their own from
#: :data:`EXTRA_COLOURS` / :data:`EXTRA_MARKERS` (:func:`type_looks`).
TYPE_STYLE: dict[str, tuple[str, str]] = {
    "STANDARD": ("#0072B2", "Standard training"),
    "ROBUST_INTV": ("#009E73", "Robustness intervention"),
    "LP_ADV": ("#D55E00", "Lp adversarially robust"),
    "MORE_DATA": ("#E69F00", "Trained with more data"),
    "LOW_ACCURACY_CNN": ("#56B4E9", "Low-accuracy CNN"),
    "UNKNOWN": ("#999999", "Unknown type"),
}
#: Matplotlib marker per model type of :data:`TYPE_STYLE`.
TYPE_MARKER: dict[str, str] = {
    "STANDARD": "o", "ROBUST_INTV": "s", "LP_ADV": "^", "MORE_DATA": "D", "LOW_ACCURACY_CNN": "v", "UNKNOWN": "X",
}
#: Colours for the other model types (the rest of Okabe-Ito, then Paul Tol's muted scheme),
#: paired with :data:`EXTRA_MARKERS` so that no two types share a colour and a marker.
EXTRA_COLOURS = ("#CC79A7", "#000000", "#F0E442", "#882255", "#44AA99", "#999933", "#332288", "#AA4499")
EXTRA_MARKERS = ("P", "h", "p", "<", ">", "d", "8", "X")
FALLBACK_COLOUR = EXTRA_COLOURS[0]
#: Plotly's name of each matplotlib marker used above.
PLOTLY_SYMBOL = {"o": "circle", "s": "square", "^": "triangle-up", "D": "diamond", "v": "triangle-down",
                 "X": "x", "P": "cross", "h": "hexagon", "p": "pentagon", "<": "triangle-left",
                 ">": "triangle-right", "d": "diamond-tall", "8": "octagon"}
#: How the models a user asks to highlight are drawn: a gold star with a black edge, on top of
#: every other point, labelled in free space with a leader line (no model type uses this colour
#: or marker).
HIGHLIGHT_COLOUR = "#ffd400"
HIGHLIGHT_LABEL = "your models"
#: Above this many models a trend figure uses small translucent markers.
DENSE_POINTS = 500
#: Padding of every view, as a fraction of its span in scaled units.
VIEW_PAD = 0.06
TICKS = [0.001, 0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 98, 99, 99.5, 99.9, 99.99]
T = TypeVar("T")
#: Figure workers run at this niceness: the main process, which builds the page and is the longest
#: serial path of a report, keeps a core; the workers fill what it leaves.
WORKER_NICENESS = 5
#: Every format a static figure can be written in.
FORMATS = (".png", ".svg", ".pdf")
#: What a report writes unless asked (``figure_formats=``, ``--figure-formats``): PNG for slides and
#: Markdown, PDF for LaTeX. SVG is on request: a third draw of every figure, about a quarter of a
#: first report build's CPU, for a format a paper rarely takes.
DEFAULT_FORMATS = (".png", ".pdf")


class TypeLook(NamedTuple):
    """How one model type is drawn: fill colour, matplotlib marker, legend label, marker edge."""

    colour: str
    marker: str
    label: str
    edge: str


def _type_label(t: str) -> str:
    return TYPE_STYLE[t][1] if t in TYPE_STYLE else t.replace("_", " ").capitalize()


def type_looks(types: Iterable[str]) -> dict[str, TypeLook]:
    """Colour, marker and label of each model type, in :data:`TYPE_STYLE` order, then the rest in
    order of appearance; the rest take (colour, marker) pairs from :data:`EXTRA_COLOURS` x
    :data:`EXTRA_MARKERS`, skipping pairs already taken, so no two types look alike (for up to
    64 extra types; beyond that pairs repeat). Light fills (yellow) get a dark edge."""
    ordered = sorted(dict.fromkeys(types), key=lambda t: list(TYPE_STYLE).index(t) if t in TYPE_STYLE else len(TYPE_STYLE))
    out: dict[str, TypeLook] = {}
    taken = {(c, TYPE_MARKER[t]) for t, (c, _) in TYPE_STYLE.items()}
    n_c, n_m, k = len(EXTRA_COLOURS), len(EXTRA_MARKERS), 0
    for t in ordered:
        if t in TYPE_STYLE:
            colour, marker = TYPE_STYLE[t][0], TYPE_MARKER[t]
        else:
            for _ in range(n_c * n_m):
                colour, marker = EXTRA_COLOURS[k % n_c], EXTRA_MARKERS[(k + k // n_c) % n_m]
                k += 1
                if (colour, marker) not in taken:
                    break
            taken.add((colour, marker))
        out[t] = TypeLook(colour, marker, _type_label(t), "#444444" if colour in ("#F0E442",) else "white")
    return out


def draw_order(types: Iterable[str], fitted: Iterable[str]) -> list[str]:
    """Model types in the order their points are drawn: the types the trend was not fitted on
    first, then the fitted-on types (``fitted``), so that the models the line is fitted on are
    never hidden under the others."""
    looks = list(type_looks(types))
    fitted = set(fitted)
    return [t for t in looks if t not in fitted] + [t for t in looks if t in fitted]


def fitted_types(frame, fit: TrendFit | None) -> list[str]:
    """The model types of ``fit``'s models found in ``frame`` (the :data:`DEFAULT_FIT_ON` types
    when there is no fit, or a fit that does not list its models)."""
    if fit is not None and len(fit.models):
        return list(dict.fromkeys(frame["model_type"][frame.index.isin(fit.models)]))
    return list(DEFAULT_FIT_ON) if fit is None or fit.fit_on == () else list(fit.fit_on)


class View(NamedTuple):
    """Axis limits in scaled units."""

    x_lo: float
    x_hi: float
    y_lo: float
    y_hi: float


def _padded(x_lo: float, x_hi: float, y_lo: float, y_hi: float) -> View:
    x_pad = VIEW_PAD * max(x_hi - x_lo, 1e-3)
    y_pad = VIEW_PAD * max(y_hi - y_lo, 1e-3)
    return View(x_lo - x_pad, x_hi + x_pad, y_lo - y_pad, y_hi + y_pad)


def trend_views(xs: np.ndarray, ys: np.ndarray, fit: TrendFit | None,
                keep: np.ndarray | None = None) -> tuple[View, View, np.ndarray]:
    """``(all_models, zoomed, inside)``: the two views of a trend figure and which models the
    zoomed one shows (``xs``, ``ys``: every model's scaled accuracies).

    *All models*: every point, with ``y = x`` kept in view at the top.

    *Zoomed* (the default view), the rule: the x axis runs from the in-distribution accuracy of
    the least accurate model the trend was fitted on (``fit.x_range[0]``) - or of a ``keep``
    model (a highlighted one) below it - to the most accurate model; the y axis covers the
    models inside that x range and the trend across it. Both are padded by :data:`VIEW_PAD` of
    their span. On imagenet-reference's ImageNetV2 this is about 53-91% ImageNet accuracy, which
    leaves out the 115 low-accuracy CNNs and the chance-level baselines. Without a fit, or when
    no model lies below the fitted range, both views are the same.
    """
    xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    full = _padded(float(xs.min()), float(xs.max()), float(ys.min()), max(float(ys.max()), float(xs.max())))
    if fit is None or not np.isfinite(fit.x_range[0]):
        return full, full, np.ones(len(xs), dtype=bool)
    start = float(transform(fit.x_range[0], fit.scale))
    if keep is not None and np.any(keep):
        start = min(start, float(xs[keep].min()))
    inside = xs >= start - 1e-9
    if inside.all() or not inside.any():
        return full, full, np.ones(len(xs), dtype=bool)
    x_hi = float(xs[inside].max())
    line = fit.predict_scaled(np.array([start, x_hi]))
    y_lo = min(float(ys[inside].min()), float(line.min()))
    y_hi = max(float(ys[inside].max()), float(line.max()))
    return full, _padded(start, x_hi, y_lo, y_hi), inside


@lru_cache(maxsize=256)
def setting_words(setting: str) -> str:
    """A setting in words for an axis title: its registered description up to the first comma
    ("ImageNetV2 matched-frequency"), else its name."""
    from shiftbench.settings import list_settings  # deferred: the registry is only read for titles

    description = list_settings().get(setting)
    return description.split(",")[0].strip() if description else setting


def axis_title(setting: str, scale: str) -> str:
    """``Accuracy on <setting in words> (<scale> scale)``."""
    return f"Accuracy on {setting_words(setting)} ({scale} scale)"


def _ticks(lo: float, hi: float, scale: str, max_ticks: int = 9) -> list[float]:
    """Round percentages inside [lo, hi], thinned so neighbours are >= 1/max_ticks of the axis apart."""
    if scale == "linear":
        step = 5 if hi - lo < 40 else 10
        return [float(t) for t in np.arange(np.ceil(lo / step) * step, hi + 1e-9, step)]
    inside = [t for t in TICKS if lo <= t <= hi]
    span = float(transform(hi, scale) - transform(lo, scale))
    kept: list[float] = []
    for t in inside:
        if not kept or transform(t, scale) - transform(kept[-1], scale) >= span / max_ticks:
            kept.append(t)
    return kept


def _fmt(t: float) -> str:
    return f"{t:g}%"


def plot_trend(
    testbed: Testbed,
    x: str,
    y: str,
    *,
    scale: str = "logit",
    fit: TrendFit | TwoLineTrendFit | None = None,
    fit_on: str | Iterable[str] | None = DEFAULT_FIT_ON,
    band: Band | TwoLineBand | None = None,
    n_resamples: int = 1000,
    confidence: float = 0.995,
    seed: int | None = 0,
    highlight: Iterable[str] = (),
    title: str | None = None,
    ax: Axes | None = None,
    zoom: bool = True,
) -> Figure:
    """Draw ``y`` against ``x`` for every model of ``testbed`` with the fitted trend.

    ``fit`` defaults to :func:`~shiftbench.analysis.fit_trend` on ``fit_on`` (STANDARD); a
    two-line trend (ImageNet-A, recipe ``taori2020``) is drawn as its two lines, each on its side
    of the pivot (a dotted vertical line), each with its own band; the legend names the recipe.
    ``band`` defaults to its bootstrap band with ``n_resamples`` (0 draws no band); ``confidence`` is the
    Clopper-Pearson level of the error bars. Each model type has its own colour and marker
    (:func:`type_looks`); the types the trend was fitted on are drawn on top of the others.
    ``highlight`` names models (your own, say) to draw on top of every other point as large gold
    stars with a black outline, listed in the legend as "your models" and labelled in free
    space - preferably above the trend, away from every marker and from each other - with a thin
    leader line to the point (:func:`place_labels`). The legend sits to the right of the axes.

    With ``zoom`` (the default) the axes show the models that matter (the rule is
    :func:`trend_views`: from the least accurate fitted-on model up); when that leaves models
    out, a small second panel at the bottom right shows all of them with a rectangle marking
    the zoomed region (only on a figure made here, not when drawing into a given ``ax``).
    ``fig.axes[0]`` is always the main axes. Above :data:`DENSE_POINTS` models the markers are
    small and translucent.
    """
    if fit is None:
        fit = fit_trend(testbed, x, y, scale, fit_on=fit_on)
    scale = fit.scale
    if band is None and n_resamples > 0:
        band = bootstrap_band(fit, n_resamples=n_resamples, seed=seed)
    frame, skipped = testbed.paired(x, y)
    marked = [m for m in dict.fromkeys(testbed.check_model(m) for m in highlight) if m in frame.index]
    is_marked = frame.index.isin(marked)

    # points clipped like the fit (half an example at 0% / 100%), limits padded in scaled space
    xs = transform(frame["x_acc"], scale, frame["x_n"])
    ys = transform(frame["y_acc"], scale, frame["y_n"])
    full, view, inside = trend_views(xs, ys, fit if zoom else None, is_marked)
    zoomed = view != full
    if ax is None:
        fig = plt.figure(figsize=(9.2, 5.8), dpi=120)
        # room on the left and at the bottom for axis titles wrapped onto two lines
        ax = fig.add_axes((0.09, 0.115, 0.55, 0.77))
        overview = fig.add_axes((0.745, 0.115, 0.225, 0.30)) if zoomed else None
        made_here = True
    else:
        fig, overview, made_here = ax.figure, None, False
    dense = len(frame) > DENSE_POINTS
    looks = type_looks(frame["model_type"])
    order = draw_order(looks, fitted_types(frame, fit))

    # y = x and the trend with its band, across every model (the overview shows all of them)
    grid = np.linspace(full.x_lo, full.x_hi, 300)
    diag, = ax.plot(grid, grid, ls="--", color="0.45", lw=1, label="y = x", zorder=1)
    # one line, or the two lines of a two-line trend, each on its side of the pivot
    lines = [ax.plot(g, line.predict_scaled(g), color="black", lw=1.6, zorder=3)[0]
             for line, g in trend_pieces(fit, grid)]
    lines[0].set_label(trend_label(fit))
    handles = [diag, lines[0]]
    if fit.kind == "two-line":
        handles.append(ax.axvline(getattr(fit, "pivot_scaled"), color="0.3", ls=":", lw=1.1, zorder=2,
                                  label=pivot_label(fit)))
    if band is not None:
        for (line, lo, hi), (b, _, _) in zip(fit.segments(), band.segments()):
            gx = transform(b.grid, scale)
            fx_lo, fx_hi = transform(line.x_range[0], scale), transform(line.x_range[1], scale)
            keep = (gx >= max(grid[0], fx_lo)) & (gx <= min(grid[-1], fx_hi)) & (gx > lo) & (gx <= hi)
            filled = ax.fill_between(gx[keep], b.lower_scaled[keep], b.upper_scaled[keep], color="black",
                                     alpha=0.15, lw=0, zorder=2)
        filled.set_label(f"{band.confidence:.0%} bootstrap band" + ("s" if fit.kind == "two-line" else ""))
        handles.append(filled)

    # points with Clopper-Pearson bars, one legend entry per type, the fitted-on types drawn last
    xl, xh = accuracy_interval(frame["x_acc"], frame["x_n"], confidence)
    yl, yh = accuracy_interval(frame["y_acc"], frame["y_n"], confidence)

    def bars(sel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        xerr = np.abs(np.vstack([xs[sel] - transform(xl[sel], scale), transform(xh[sel], scale) - xs[sel]]))
        yerr = np.abs(np.vstack([ys[sel] - transform(yl[sel], scale), transform(yh[sel], scale) - ys[sel]]))
        return np.where(np.isfinite(xerr), xerr, 0.0), np.where(np.isfinite(yerr), yerr, 0.0)

    size, alpha = (POINT_SIZE_DENSE, 0.35) if dense else (POINT_SIZE, 0.85)
    by_type = {}
    for rank, mtype in enumerate(order):
        sel = (frame["model_type"] == mtype).to_numpy() & ~is_marked
        if not sel.any():
            continue
        look = looks[mtype]
        xerr, yerr = (None, None) if dense else bars(sel)      # a dense cloud reads better without bars
        z = 4 + rank / (10 * len(order))
        ax.errorbar(xs[sel], ys[sel], xerr=xerr, yerr=yerr, fmt=look.marker, ms=size, color=look.colour,
                    ecolor=look.colour, elinewidth=0.6, alpha=alpha, mec=look.edge, mew=0 if dense else 0.4,
                    label=f"{look.label} ({sel.sum()})", zorder=z)
        # the legend shows an opaque marker without bars
        by_type[mtype] = Line2D([], [], ls="none", marker=look.marker, ms=5, color=look.colour, mec=look.edge,
                                mew=0.4, label=f"{look.label} ({sel.sum()})")
        if overview is not None:
            overview.scatter(xs[sel], ys[sel], s=4 if not dense else 1.5, marker=look.marker, color=look.colour,
                             alpha=alpha, linewidths=0, zorder=z)
    handles += [by_type[t] for t in looks if t in by_type]          # the legend lists types in TYPE_STYLE order
    if marked:
        at = np.array([frame.index.get_loc(m) for m in marked])        # in the order of ``marked``
        xerr, yerr = bars(at)
        ax.errorbar(xs[at], ys[at], xerr=xerr, yerr=yerr, fmt="none", ecolor="black", elinewidth=0.7, zorder=5)
        handles.append(ax.scatter(xs[at], ys[at], marker="*", s=STAR_SIZE ** 2, c=HIGHLIGHT_COLOUR,
                                  edgecolors="black", linewidths=0.8, label=f"{HIGHLIGHT_LABEL} ({len(marked)})",
                                  zorder=6))
        if overview is not None:
            overview.scatter(xs[at], ys[at], marker="*", s=40, c=HIGHLIGHT_COLOUR, edgecolors="black",
                             linewidths=0.5, zorder=6)

    _set_view(ax, view, scale)
    # long setting descriptions wrap inside the axes' width and height instead of running off the figure
    ax.set_xlabel(textwrap.fill(axis_title(x, scale), 64))
    ax.set_ylabel(textwrap.fill(axis_title(y, scale), 56))
    ax.grid(True, color="0.9", lw=0.6)
    subtitle = f"{len(frame)} models" + (f", {skipped} without both accuracies" if skipped else "")
    if zoomed:
        subtitle += f" ({int((~inside).sum())} below the fitted range: small panel)"
    # from the axes' left edge: a title wider than the axes runs right, over the legend's column,
    # not off the figure's left edge
    ax.set_title((title or f"{y} vs {x}") + f"\n{testbed.name}: {subtitle}", fontsize=10, loc="left")
    legend = ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
                       fontsize=7, framealpha=0.9)
    if overview is not None:
        _draw_overview(overview, full, view, fit, scale, len(frame))
    if not made_here:
        fig.tight_layout()
    if marked:
        _label_highlighted(ax, marked, xs[at], ys[at], xs, ys, legend, fit, size)
    return fig


def trend_pieces(fit: TrendFit | TwoLineTrendFit, grid: np.ndarray) -> list[tuple[TrendFit, np.ndarray]]:
    """The trend's lines with the part of ``grid`` (scaled x) each is drawn over: the whole grid
    for one line or a hinge; for a two-line trend the lower line up to the pivot and the upper one
    beyond it (:meth:`~shiftbench.analysis.trend.TwoLineTrendFit.segments`)."""
    pieces = [(line, grid[(grid > lo) & (grid <= hi)]) for line, lo, hi in fit.segments()]
    return [(line, g) for line, g in pieces if len(g)] or [(fit.segments()[0][0], grid)]


def trend_label(fit: TrendFit | TwoLineTrendFit) -> str:
    """The legend entry of a trend: its kind, recipe, models and slope(s)."""
    if fit.kind == "two-line":
        lo, hi = getattr(fit, "below"), getattr(fit, "above")
        return (f"Two lines, {fit.recipe} ({lo.n_models} + {hi.n_models} models, slopes {lo.slope:.2f} / "
                f"{hi.slope:.2f})")
    return f"{fit.kind.capitalize()} fit, {fit.recipe} ({fit.n_models} models, slope {fit.slope:.2f}, r² {fit.r2:.3f})"


def pivot_label(fit: TwoLineTrendFit) -> str:
    """The legend entry of a two-line trend's pivot."""
    who = f"{fit.pivot_model} " if fit.pivot_model else ""
    return f"pivot: {who}{fit.pivot:.2f}%"


def _set_view(ax: Axes, view: View, scale: str, max_ticks: int = 9) -> None:
    """Limits in scaled units, ticks labelled in percent."""
    for setter, lim, lo, hi in ((ax.set_xticks, ax.set_xlim, view.x_lo, view.x_hi),
                                (ax.set_yticks, ax.set_ylim, view.y_lo, view.y_hi)):
        ticks = _ticks(float(inverse(lo, scale)), float(inverse(hi, scale)), scale, max_ticks)
        setter(transform(ticks, scale), [_fmt(t) for t in ticks])
        lim(lo, hi)


def _draw_overview(ov: Axes, full: View, view: View, fit: TrendFit, scale: str, n: int) -> None:
    """The small panel: every model, ``y = x``, the trend, and a rectangle around the main view."""
    grid = np.linspace(full.x_lo, full.x_hi, 100)
    ov.plot(grid, grid, ls="--", color="0.45", lw=0.7, zorder=1)
    for line, g in trend_pieces(fit, grid):
        ov.plot(g, line.predict_scaled(g), color="black", lw=0.9, zorder=3)
    ov.add_patch(Rectangle((view.x_lo, view.y_lo), view.x_hi - view.x_lo, view.y_hi - view.y_lo, fill=False,
                           ec="#D55E00", lw=1.2, ls="-", zorder=7))
    _set_view(ov, full, scale, max_ticks=5)
    ov.tick_params(labelsize=6, length=2, pad=1)
    ov.grid(True, color="0.92", lw=0.5)
    ov.set_title(f"All {n} models (box: main view)", fontsize=7, pad=3)
    ov.set_xlabel("in-distribution", fontsize=6, labelpad=1)
    ov.set_ylabel("shifted", fontsize=6, labelpad=1)


#: Marker sizes (points) of the highlighted stars and of every other model's point (dense testbeds:
#: the smaller size).
STAR_SIZE, POINT_SIZE, POINT_SIZE_DENSE = 13.0, 4.6, 2.6


def place_labels(
    anchors: np.ndarray, sizes: np.ndarray, obstacles: np.ndarray, radius: float | np.ndarray,
    bounds: tuple[float, float, float, float], *, blocked: Iterable[tuple[float, float, float, float]] = (),
    below: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None, gap: float = 3.0,
) -> np.ndarray:
    """Centres for label boxes in free space, one per anchor, in any coordinates with equal units
    on both axes (display pixels).

    Each label (``sizes``: width, height), widened by ``gap`` on every side, is placed at the
    candidate centre on a grid over ``bounds`` (x0, y0, x1, y1) that overlaps no obstacle (a
    box of half-width ``radius`` around each of ``obstacles``: the markers), no ``blocked``
    rectangle (a legend) and no label placed before it, and lies closest to its anchor;
    candidates where ``below(cx, cy)`` is true (under the trend) cost an extra quarter of the
    area's diagonal, so labels go to the free space above the trend where there is some. Labels
    are placed from the highest anchor down, so they stack in the anchors' vertical order. If
    no candidate is free, the one with the fewest overlaps wins.
    """
    anchors = np.asarray(anchors, dtype=float).reshape(-1, 2)
    sizes = np.asarray(sizes, dtype=float).reshape(-1, 2)
    obs = np.asarray(obstacles, dtype=float).reshape(-1, 2)
    r = np.broadcast_to(np.asarray(radius, dtype=float), (len(obs),))
    boxes = [np.column_stack([obs[:, 0] - r, obs[:, 1] - r, obs[:, 0] + r, obs[:, 1] + r]),
             np.asarray(list(blocked), dtype=float).reshape(-1, 4)]
    x0, y0, x1, y1 = bounds
    penalty = 0.25 * float(np.hypot(x1 - x0, y1 - y0))
    out = anchors.copy()
    for i in np.argsort(-anchors[:, 1], kind="stable"):
        w, h = sizes[i] + 2 * gap
        step = max(2.0, min(w, h) / 2)
        gx = np.arange(x0 + w / 2, x1 - w / 2 + 1e-9, step)
        gy = np.arange(y0 + h / 2, y1 - h / 2 + 1e-9, step)
        if not len(gx) or not len(gy):                       # larger than the area: beside the point
            out[i] = anchors[i] + [w / 2, h / 2]
            continue
        cx, cy = (a.ravel() for a in np.meshgrid(gx, gy))
        every = np.concatenate(boxes)
        hits = ((cx[:, None] - w / 2 < every[None, :, 2]) & (cx[:, None] + w / 2 > every[None, :, 0])
                & (cy[:, None] - h / 2 < every[None, :, 3]) & (cy[:, None] + h / 2 > every[None, :, 1])).sum(axis=1)
        dist = np.hypot(np.maximum(np.abs(cx - anchors[i, 0]) - w / 2, 0),
                        np.maximum(np.abs(cy - anchors[i, 1]) - h / 2, 0))
        score = dist + (penalty * below(cx, cy) if below is not None else 0.0) + hits * 1e9
        k = int(np.argmin(score))
        out[i] = cx[k], cy[k]
        boxes.append(np.array([[cx[k] - w / 2, cy[k] - h / 2, cx[k] + w / 2, cy[k] + h / 2]]))
    return out


def _label_highlighted(ax: Axes, marked: list[str], mx: np.ndarray, my: np.ndarray, xs: np.ndarray, ys: np.ndarray,
                       legend, fit: TrendFit, point_size: float = 4.6) -> None:
    """Label the highlighted points in free space (display pixels) with leader lines; no label
    covers a marker, another label or the legend (:func:`place_labels`)."""
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    to_px = ax.transData.transform
    texts = [ax.text(0, 0, m, fontsize=7, ha="center", va="center", zorder=7,
                     bbox=dict(boxstyle="round,pad=0.25", fc="white", ec="0.35", lw=0.6, alpha=0.95))
             for m in marked]
    sizes = np.array([[t.get_window_extent(renderer).width, t.get_window_extent(renderer).height] for t in texts])
    px = fig.dpi / 72.0
    points = to_px(np.column_stack([xs, ys]))
    stars = to_px(np.column_stack([mx, my]))
    radius = np.full(len(points), point_size / 2 * px + 1.5)
    area = ax.get_window_extent(renderer)
    inv = ax.transData.inverted()

    def below(cx: np.ndarray, cy: np.ndarray) -> np.ndarray:
        data = inv.transform(np.column_stack([cx, cy]))
        return to_px(np.column_stack([data[:, 0], fit.predict_scaled(data[:, 0])]))[:, 1] > cy

    centres = place_labels(
        stars, sizes + 2 * 0.25 * 7 * px, np.vstack([points, stars]),
        np.concatenate([radius, np.full(len(stars), STAR_SIZE / 2 * px + 1.5)]),
        (area.x0 + 2, area.y0 + 2, area.x1 - 2, area.y1 - 2),
        blocked=[tuple(legend.get_window_extent(renderer).extents)], below=below)
    for text, star, centre, (w, h) in zip(texts, stars, centres, sizes):
        text.set_position(inv.transform(centre))
        # the leader runs from the star to the nearest point of the label's box
        edge = np.clip(star, centre - [w / 2, h / 2], centre + [w / 2, h / 2])
        (lx, ly), (sx, sy) = inv.transform(edge), inv.transform(star)
        ax.plot([sx, lx], [sy, ly], color="0.25", lw=0.6, zorder=5.5)


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Save ``fig`` as PNG, SVG or PDF (by extension) and close it."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise ConfigError(f"{path}: unknown figure format {path.suffix!r}; use .png, .svg or .pdf")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path


def _tight_boxes(fig: Figure, exts: list[str], png: Path | None = None):  # noqa: ANN202 - dict[str, Bbox] | None
    """The padded tight box (inches) that ``fig.savefig(f"x{ext}", bbox_inches="tight")`` would
    crop to, for each extension in ``exts``, from one layout draw instead of one per format; None
    where the boxes cannot be shared (then save each format with ``bbox_inches="tight"``).

    This is the "tight" branch of matplotlib's ``print_figure`` (``Figure.savefig`` ->
    ``FigureCanvasBase.print_figure``, matplotlib 3.8-3.11) run once: a draw with drawing
    disabled on the renderer of the first format (PNG's when asked for), then
    ``Figure.get_tightbbox`` with *each format's* renderer, padded by :rc:`savefig.pad_inches`.
    Each format keeps its own box because the vector renderers measure text at 72 dpi without
    hinting: on the trend figure their box is ~4 pt narrower than Agg's. The renderers come from
    ``backend_bases._get_renderer`` (what ``print_figure`` and ``Figure.draw_without_rendering``
    use: it starts the format's print method and stops at its draw). A figure with a real layout
    engine is laid out again by each save with that format's renderer, so it keeps the per-format
    path; the placeholder that ``Figure.tight_layout`` leaves behind lays nothing out.

    With ``png`` (a path; ``.png`` among ``exts``) the first pass is a real Agg draw of the whole
    canvas, and when the tight box lies inside it the PNG is cut from that draw (:func:`_crop_png`)
    and written to ``png``: its box in the result is then the pixel-snapped one, under the key
    ``"written"`` as well. Three formats then draw the figure three times instead of four.
    """
    from matplotlib.layout_engine import PlaceHolderLayoutEngine  # deferred: with matplotlib

    engine = fig.get_layout_engine()
    if engine is not None and not isinstance(engine, PlaceHolderLayoutEngine):
        return None
    dpi = matplotlib.rcParams["savefig.dpi"]
    if dpi == "figure":
        dpi = getattr(fig, "_original_dpi", fig.dpi)
    pad = matplotlib.rcParams["savefig.pad_inches"]
    order = sorted(dict.fromkeys(exts), key=lambda e: e != ".png")   # PNG's renderer draws
    boxes, before = {}, fig.dpi
    try:
        from matplotlib.backend_bases import _get_renderer  # deferred: private, may move

        for i, ext in enumerate(order):
            if fig.dpi != dpi:          # savefig's dpi; a vector format's renderer set 72
                fig.dpi = dpi
            with fig.canvas._switch_canvas_and_return_print_method(ext[1:]) as print_method:
                renderer = _get_renderer(fig, print_method)      # a vector format sets 72 dpi
                if i == 0 and png is not None and ext == ".png":
                    fig.draw(renderer)                             # a real draw: the PNG may be cut from it
                    content = fig.get_tightbbox(renderer)
                    boxes[ext] = content.padded(pad)
                    snapped = _crop_png(fig, renderer, content, boxes[ext], dpi, png)
                    if snapped is not None:
                        boxes[ext] = boxes["written"] = snapped
                    continue
                if i == 0:
                    with renderer._draw_disabled():
                        fig.draw(renderer)
                boxes[ext] = fig.get_tightbbox(renderer).padded(pad)
    except Exception:  # noqa: BLE001 - matplotlib's private API moved: savefig finds each box
        return None
    finally:
        if fig.dpi != before:
            fig.dpi = before
    return boxes


def _crop_png(fig: Figure, renderer, content, box, dpi: float, path: Path):  # noqa: ANN001, ANN202 - Bbox | None
    """Write the part of ``renderer``'s finished Agg draw of ``fig`` under ``box`` (the padded
    tight box, inches) to ``path`` as ``print_png`` writes a PNG (:func:`matplotlib.image.imsave`
    at ``dpi``), the box widened outwards to whole pixels; returns that box, or None (nothing
    written) where the ``content`` (the unpadded tight box) leaves the canvas, the canvas is not
    whole pixels, or the savefig colours are not the figure's own. Padding past the canvas's edge
    is the figure's face colour, as savefig paints it.

    The file is what ``fig.savefig(path, bbox_inches=<the returned box>)`` writes: a crop by
    whole pixels moves nothing against the pixel grid (a few antialiased edge pixels may round one
    level in 255 apart, and a dashed line that runs past the canvas may start its dashes at another
    phase: Agg clips a path to the canvas before dashing it). Against ``bbox_inches="tight"`` it is
    at most two pixels wider and taller, the same drawing shifted by under a pixel.
    """
    import math  # deferred: only here

    from matplotlib.colors import to_rgba  # deferred: with matplotlib
    from matplotlib.transforms import Bbox  # deferred: as above

    rc = matplotlib.rcParams
    if rc["savefig.transparent"] or rc["savefig.facecolor"] != "auto" or rc["savefig.edgecolor"] != "auto":
        return None
    w, h = fig.bbox.width, fig.bbox.height
    if abs(w - round(w)) > 1e-6 or abs(h - round(h)) > 1e-6:
        return None
    w, h = round(w), round(h)
    if content.x0 * dpi < 0 or content.y0 * dpi < 0 or content.x1 * dpi > w or content.y1 * dpi > h:
        return None
    x0, y0 = math.floor(box.x0 * dpi + 1e-9), math.floor(box.y0 * dpi + 1e-9)
    x1, y1 = math.ceil(box.x1 * dpi - 1e-9), math.ceil(box.y1 * dpi - 1e-9)
    rgba = np.asarray(renderer.buffer_rgba())
    if rgba.shape[:2] != (h, w) or x1 <= x0 or y1 <= y0:
        return None
    out = np.empty((y1 - y0, x1 - x0, 4), dtype=np.uint8)
    out[:] = np.round(np.array(to_rgba(fig.get_facecolor())) * 255).astype(np.uint8)
    # rows count down from the top: canvas row r is y = h - r; the crop's row 0 is y1
    cx0, cx1, cy0, cy1 = max(x0, 0), min(x1, w), max(y0, 0), min(y1, h)
    out[y1 - cy1:y1 - cy0, cx0 - x0:cx1 - x0] = rgba[h - cy1:h - cy0, cx0:cx1]
    matplotlib.image.imsave(path, out, format="png", origin="upper", dpi=dpi)
    return Bbox([[x0 / dpi, y0 / dpi], [x1 / dpi, y1 / dpi]])


def save_figure_formats(fig: Figure, stem: str | Path, formats: Iterable[str] = FORMATS) -> list[Path]:
    """Save ``fig`` once per format (``stem.png``, ``stem.svg``, ``stem.pdf``) and close it.

    Each file is what ``fig.savefig(path, bbox_inches="tight")`` writes, but the tight boxes come
    from one layout draw (:func:`_tight_boxes`) and each file is then drawn once with its box:
    three formats draw the figure four times, not six. When the tight box lies inside the canvas
    the PNG is cut from that first draw instead (:func:`_crop_png`: up to 2 px wider and taller,
    the same drawing): three draws.
    """
    stem = Path(stem)
    formats = list(formats)
    bad = [f for f in formats if f.lower() not in FORMATS]
    if bad:
        raise ConfigError(f"unknown figure format {bad[0]!r}; use .png, .svg or .pdf")
    formats = [f.lower() for f in formats]
    stem.parent.mkdir(parents=True, exist_ok=True)
    png = stem.with_name(stem.name + ".png") if ".png" in formats else None
    boxes = _tight_boxes(fig, formats, png) if len(formats) > 1 else None
    engine = fig.get_layout_engine()
    if boxes is not None and engine is not None:
        # tight_layout()'s placeholder: savefig would still draw before each file for it
        fig.set_layout_engine(None)
        if fig.get_layout_engine() is not None:   # rcParams asked for a layout engine
            fig.set_layout_engine(engine)
            boxes = None
    paths = []
    try:
        for ext in formats:
            path = stem.with_name(stem.name + ext)
            if not (ext == ".png" and boxes is not None and "written" in boxes):   # cut from the first draw
                fig.savefig(path, bbox_inches=boxes[ext] if boxes is not None else "tight")
            paths.append(path)
    finally:
        if fig.get_layout_engine() is not engine:
            fig.set_layout_engine(engine)
    plt.close(fig)
    return paths


def plot_trend_inputs(testbed: Testbed, x: str, y: str, **kwargs: object) -> tuple:
    """Everything ``plot_trend(testbed, x, y, **kwargs)`` draws from: the two settings'
    accuracies and example counts, the models' metadata, and the keyword arguments (fit, band,
    title, highlight, ...) - the key of :meth:`FigureWriter.save_lazily` for a trend figure."""
    cols = [x, y]
    return (testbed.accuracies.reindex(columns=cols), testbed.sizes.reindex(columns=cols), testbed.metadata,
            sorted(kwargs.items()), accuracy_interval)


def stable_pickle(fig: Figure) -> tuple[bytes, bool]:
    """The figure pickled so that equal figures give equal bytes in any process, and whether the
    bytes may draw differently from the figure (then pickle it plainly to draw it).

    Three things in a figure's pickle depend on the process rather than the figure: matplotlib
    keys each transform's parents by ``id()`` (numbered in order here; unpickling only uses the
    keys to drop dead parents); the figure's pyplot number (how many figures were open; left
    out); and paths' interpolation steps: ``Axes.bar`` sets them to 100 on matplotlib's *shared*
    unit rectangle, so every rectangle drawn later in the process (markers, legend patches)
    inherits them. They only bend paths under non-affine transforms (polar axes), so they are
    written as 1 here, and the second value says that happened: the bytes are then a key, and the
    figure itself is pickled plainly to be drawn. The bytes are what :class:`FigureWriter` hashes
    to skip unchanged figures.
    """
    import copyreg  # deferred: only when figures are pickled
    import io  # deferred: as above
    import pickle  # deferred: as above

    from matplotlib.path import Path as MplPath  # deferred: with matplotlib
    from matplotlib.transforms import TransformNode  # deferred: with matplotlib

    changed = False

    class _Stable(pickle.Pickler):
        def reducer_override(self, obj):  # noqa: ANN001, ANN202 - pickle's protocol
            nonlocal changed
            if isinstance(obj, TransformNode):
                state = obj.__getstate__()
                state["_parents"] = dict(enumerate(state["_parents"].values()))
                return copyreg.__newobj__, (type(obj),), state
            if type(obj) is Figure:
                state = obj.__getstate__()
                state["_number"] = None
                return copyreg.__newobj__, (Figure,), state
            if isinstance(obj, MplPath) and obj._interpolation_steps != 1:
                changed = True
                return copyreg.__newobj__, (type(obj),), {**obj.__dict__, "_interpolation_steps": 1}
            return NotImplemented

    buf = io.BytesIO()
    _Stable(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(fig)
    return buf.getvalue(), changed


def _shared_name(key: str, path: Path) -> str:
    """The name of the file drawn from the figure hashing to ``key`` in the shared cache."""
    return key[:40] + path.suffix


def _drawing_code(build: Callable[[], Figure]) -> tuple:
    """The code a figure built by ``build`` depends on (part of its cache key): this module, the
    trend fits' and the builder itself (a partial's function: its name and its module's source)."""
    func = build.func if isinstance(build, functools.partial) else build
    modules = tuple(sys.modules[n] for n in dict.fromkeys((__name__, fit_trend.__module__, transform.__module__)))
    return (*modules, func) if inspect.isfunction(func) else (*modules, repr(func))


def _save_and_record(fig: Figure, stem: str, formats: list[str], cache: str | None, key: str | None,
                     shared: str | None = None) -> list[str]:
    """Worker side of :class:`FigureWriter`: save ``fig`` in every format, record each file's
    content hash (``cache``, ``key``) once it is written and keep a copy in the ``shared`` cache
    (:class:`~shiftbench.report.cache.SharedCache`)."""
    paths = save_figure_formats(fig, stem, formats)
    if cache is not None and key is not None:
        for p in paths:
            write_figure_record(Path(cache), key, p)
            if shared is not None:
                SharedCache(shared).copy_in("figures", _shared_name(key, p), p)
    return [str(p) for p in paths]


def _save_pickled(blob: bytes, stem: str, formats: list[str], cache: str | None = None,
                  key: str | None = None, shared: str | None = None) -> list[str]:
    """Unpickle a figure, then :func:`_save_and_record`."""
    import pickle  # deferred: only the worker process unpickles figures

    return _save_and_record(pickle.loads(blob), stem, formats, cache, key, shared)  # noqa: S301 - our own figure


def _build_and_save(blob: bytes, stem: str, formats: list[str], cache: str | None = None,
                    key: str | None = None, shared: str | None = None) -> list[str]:
    """Build the figure from a pickled builder (``pickle.loads(blob)()``, :meth:`FigureWriter.save_lazily`),
    then :func:`_save_and_record`."""
    import pickle  # deferred: only the worker process unpickles builders

    return _save_and_record(pickle.loads(blob)(), stem, formats, cache, key, shared)  # noqa: S301 - our own builder


class FigureWriter:
    """Saves static figures in a background process while the caller goes on building the page.

    Rendering PNG, SVG and PDF of every figure was most of the HTML report's time (each format
    draws the figure twice for ``bbox_inches="tight"``); a figure is picklable, so two worker
    processes render while the main process computes the next section (with one, the main
    process finished the demo's report 8 s before the figures did; two share both cores at the
    end). :meth:`save_lazily` with a ``functools.partial`` of a module-level function (the trend
    figures) pickles the builder and builds the figure in the worker too. :meth:`save` returns the
    paths at once; :meth:`wait` (called before the report returns) re-raises any worker error.
    The worker is forked (on Linux; elsewhere figures are saved inline): a spawned worker would
    re-import the caller's script, which then needs an ``if __name__ == "__main__"`` guard, and
    the worker only runs matplotlib (never torch or its OpenMP pool, which do not survive a fork).
    A figure that cannot be pickled is saved inline. ``workers=0`` saves everything inline.

    :meth:`compute` runs the report's slow analyses in one more process, at the caller's priority.

    With ``cache`` (a folder: the report's ``.shiftbench-cache``), a file whose figure has the
    same content hash (SHA-256 of :func:`stable_pickle` and the matplotlib version) as when the
    file was last written, and which is unchanged on disk since, is not drawn again
    (:attr:`skipped` and :attr:`written` count files): rebuilding a report redraws only what
    changed. With ``shared`` too (:class:`~shiftbench.report.cache.SharedCache`: the cache of
    every report on this machine), a file that is not current is copied from there when a figure
    of the same content hash was drawn for any report before (:attr:`reused` counts those; they
    are among the skipped), and every file drawn is kept there.
    """

    def __init__(self, workers: int = 2, cache: str | Path | None = None, shared: SharedCache | None = None) -> None:
        self.workers = workers if sys.platform.startswith("linux") else 0
        self.cache = Path(cache) if cache is not None else None
        self.shared = shared if cache is not None else None
        self.skipped = 0
        self.written = 0
        self.reused = 0
        self._pool = None
        self._analyses = None
        self._pending: list = []

    def _paths(self, stem: str | Path, formats: Iterable[str]) -> tuple[Path, list[str], list[Path]]:
        stem, formats = Path(stem), [f.lower() for f in formats]
        bad = [f for f in formats if f not in FORMATS]
        if bad:
            raise ConfigError(f"unknown figure format {bad[0]!r}; use .png, .svg or .pdf")
        return stem, formats, [stem.with_name(stem.name + ext) for ext in formats]

    def save(self, fig: Figure, stem: str | Path, formats: Iterable[str] = FORMATS) -> list[Path]:
        """Save ``fig`` as ``stem.<format>`` for each format (in the background); returns the paths."""
        stem, formats, paths = self._paths(stem, formats)
        try:
            blob, differs = stable_pickle(fig)
        except Exception:  # noqa: BLE001 - an unpicklable artist: save it here instead
            blob, differs = None, False
        key = (content_hash(blob, matplotlib.__version__, save_figure_formats)
               if blob is not None and self.cache is not None else None)
        # the stable bytes may not draw exactly this figure (see stable_pickle): then send it as it is
        return self._write(fig, stem, formats, paths, key, None if differs else blob)

    def save_lazily(self, build: Callable[[], Figure], stem: str | Path, formats: Iterable[str] = FORMATS,
                    inputs: tuple = ()) -> list[Path]:
        """``save(build(), stem, formats)``, keyed instead by ``inputs`` - everything the figure is
        drawn from (tables, fits, titles; :func:`plot_trend_inputs`) - and the source of the code
        that draws it (this module, the builder's, the trend fits'), plus the shiftbench version:
        when every file is current under that key, the figure is not even built. A
        ``functools.partial`` of a module-level function is built in the worker. Inputs that
        :func:`~shiftbench.report.cache.content_hash` cannot hash fall back to :meth:`save`."""
        stem, formats, paths = self._paths(stem, formats)
        key = None
        if self.cache is not None:
            try:
                key = content_hash("figure inputs", inputs, code_versions(), *_drawing_code(build))
            except TypeError:
                key = None
            if key is not None and all(figure_is_current(self.cache, key, p) for p in paths):
                self.skipped += len(paths)
                return paths
        # a partial of a module-level function is built in the worker, off this process (with
        # the cache on, only when it has a key: without one, save() keys the built figure)
        if (key is not None or self.cache is None) and self.workers >= 1 and isinstance(build, functools.partial):
            import pickle  # deferred: only when figures are written in the background

            try:
                blob = pickle.dumps(build, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:  # noqa: BLE001 - an unpicklable argument: build it here instead
                blob = None
            if blob is not None:
                todo = self._todo(formats, paths, key)
                if todo:
                    self._submit(_build_and_save, blob, stem, todo, key)
                return paths
        fig = build()
        if key is None:
            return self.save(fig, stem, formats)
        return self._write(fig, stem, formats, paths, key, None)

    def _todo(self, formats: list[str], paths: list[Path], key: str | None) -> list[str]:
        """The formats whose file is not current under ``key`` (every one without a key) and
        cannot be copied from the shared cache, counted in :attr:`written` and the others in
        :attr:`skipped` (the copied ones also in :attr:`reused`)."""
        todo = formats if key is None else [
            ext for ext, p in zip(formats, paths) if not figure_is_current(self.cache, key, p)]
        if key is not None and self.shared is not None and todo:
            copied = {ext for ext, p in zip(formats, paths) if ext in todo and self._copy_shared(key, p)}
            self.reused += len(copied)
            todo = [ext for ext in todo if ext not in copied]
        self.skipped += len(formats) - len(todo)
        self.written += len(todo)
        return todo

    def _copy_shared(self, key: str, path: Path) -> bool:
        """Copy the file drawn for ``key`` from the shared cache to ``path`` (and record it); whether it was there."""
        assert self.shared is not None and self.cache is not None
        if not self.shared.copy_out("figures", _shared_name(key, path), path):
            return False
        write_figure_record(self.cache, key, path)
        return True

    def _write(self, fig: Figure, stem: Path, formats: list[str], paths: list[Path], key: str | None,
               blob: bytes | None) -> list[Path]:
        """Draw the formats whose file is not current under ``key`` (every one without a key)."""
        todo = self._todo(formats, paths, key)
        if not todo:
            plt.close(fig)
            return paths
        if blob is None and self.workers >= 1:
            import pickle  # deferred: only when figures are written in the background

            try:
                blob = pickle.dumps(fig, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:  # noqa: BLE001 - an unpicklable artist: save it here instead
                blob = None
        if self.workers < 1 or blob is None:
            _save_and_record(fig, stem, todo, None if self.cache is None else str(self.cache), key, self._shared_root())
            return paths
        plt.close(fig)
        self._submit(_save_pickled, blob, stem, todo, key)
        return paths

    def _submit(self, fn: Callable, blob: bytes, stem: Path, formats: list[str], key: str | None) -> None:
        """``fn(blob, stem, formats, cache, key)`` in the worker process (started on first use)."""
        stem.parent.mkdir(parents=True, exist_ok=True)
        self._pending.append(self._worker().submit(fn, blob, str(stem), formats,
                                                   None if self.cache is None else str(self.cache), key,
                                                   self._shared_root()))

    def _shared_root(self) -> str | None:
        """The shared cache's folder, as the worker functions take it."""
        return None if self.shared is None else str(self.shared.root)

    def _worker(self):  # noqa: ANN202 - a ProcessPoolExecutor, imported lazily
        if self._pool is None:
            self._pool = _forked_pool(self.workers, WORKER_NICENESS)
        return self._pool

    def compute(self, fn: Callable[..., T], *args: object, **kwargs: object) -> Future[T] | None:
        """Run ``fn(*args, **kwargs)`` (a module-level function, picklable arguments) in a
        process of its own, one analysis after another, at the main process's priority (the page
        waits for its result; the figure workers fill what is left); its future, or None without
        workers (the caller then computes it itself). The report starts its slow analyses this
        way (:meth:`~shiftbench.report.sections.ReportContext.prefetch`), so they run while the
        page is built."""
        if self.workers < 1:
            return None
        if self._analyses is None:
            self._analyses = _forked_pool(1, 0)
        return self._analyses.submit(fn, *args, **kwargs)

    def wait(self) -> None:
        """Block until every figure is written, then bound the shared cache
        (:meth:`~shiftbench.report.cache.SharedCache.prune`); the first worker error is raised here."""
        try:
            for fut in self._pending:
                fut.result()
        except (KeyboardInterrupt, SystemExit):
            self.abort()   # interrupted: end the workers now, not after every queued figure
            raise
        finally:
            self._pending.clear()
            for pool in (self._pool, self._analyses):
                if pool is not None:
                    pool.shutdown(wait=True, cancel_futures=True)
            self._pool = self._analyses = None
        if self.shared is not None:
            self.shared.prune()

    def abort(self) -> None:
        """End the worker processes now, dropping queued and running figures and analyses (an
        interrupted build: Ctrl-C, SystemExit); :meth:`wait` then has nothing left to wait for."""
        self._pending.clear()
        pools, self._pool, self._analyses = (self._pool, self._analyses), None, None
        for pool in pools:
            if pool is not None:
                _stop_pool(pool)


def _forked_pool(workers: int, niceness: int):  # noqa: ANN202 - a ProcessPoolExecutor, imported lazily
    """Forked worker processes (see :class:`FigureWriter`) at ``niceness``, each dying with this
    process (:func:`die_with_parent`): a report killed with SIGKILL or SIGTERM leaves no worker behind."""
    import multiprocessing as mp  # deferred: only when figures are written in the background
    from concurrent.futures import ProcessPoolExecutor  # deferred: as above

    return ProcessPoolExecutor(workers, mp_context=mp.get_context("fork"), initializer=_start_worker,
                               initargs=(os.getpid(), niceness))


def _start_worker(parent: int, niceness: int) -> None:
    """Initializer of a report worker: :func:`die_with_parent`, then run at ``niceness``."""
    die_with_parent(parent)
    os.nice(niceness)


#: ``prctl(2)`` option: the signal a process gets when the thread that forked it exits (Linux).
PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """Have this (forked) process killed with SIGKILL when its parent ``parent`` dies, by
    ``prctl(PR_SET_PDEATHSIG)`` on Linux (elsewhere nothing is asked), and exit at once if the
    parent is already gone (it died before the call: this process was handed to another).

    The signal is sent when the *thread* that forked this process exits: the report forks its
    workers from the thread that builds it, which outlives them."""
    if sys.platform.startswith("linux"):
        import ctypes  # deferred: only in a worker

        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:
        os._exit(1)


def _stop_pool(pool) -> None:  # noqa: ANN001 - a ProcessPoolExecutor, imported lazily
    """Shut ``pool`` down without waiting (queued work cancelled) and terminate its processes."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        try:
            process.terminate()
        except (OSError, ValueError):   # already gone, or closed
            pass


def _type_legend_scatter(ax: Axes, frame, xcol: str, ycol: str) -> None:
    for mtype, look in type_looks(frame["model_type"]).items():
        sub = frame[frame["model_type"] == mtype]
        ax.scatter(sub[xcol], sub[ycol], s=18, marker=look.marker, color=look.colour, alpha=0.85,
                   edgecolors=look.edge, linewidths=0.4, label=f"{look.label} ({len(sub)})", zorder=3)


def plot_synthetic_vs_natural(frame, *, natural_label: str, r: float | None = None,
                              title: str = "Synthetic vs natural effective robustness",
                              synthetic_label: str = "effective robustness, mean over corruptions (pp)") -> Figure:
    """Natural against synthetic effective robustness (pp), one point per model, coloured by type,
    with the least-squares line (Taori et al. 2020, Figure 5), the legend to the right of the axes.
    ``frame``: ``model_type``, ``synthetic_er``, ``natural_er``; ``synthetic_label`` the x axis
    (what the recipe averaged)."""
    fig, ax = plt.subplots(figsize=(8.0, 5.2), dpi=120)
    ax.axhline(0, color="0.6", lw=0.8, zorder=1)
    ax.axvline(0, color="0.6", lw=0.8, zorder=1)
    if len(frame) >= 2 and np.ptp(frame["synthetic_er"]) > 0:
        slope, intercept = np.polyfit(frame["synthetic_er"], frame["natural_er"], 1)
        gx = np.array([frame["synthetic_er"].min(), frame["synthetic_er"].max()])
        ax.plot(gx, slope * gx + intercept, color="black", lw=1.2, label="least-squares line", zorder=2)
    _type_legend_scatter(ax, frame, "synthetic_er", "natural_er")
    ax.set_xlabel(synthetic_label)
    ax.set_ylabel(f"effective robustness on {natural_label} (pp)")
    ax.set_title(title + (f"\nPearson r = {r:.2f}, {len(frame)} models" if r is not None else ""), fontsize=10,
                 loc="left")
    ax.grid(True, color="0.9", lw=0.6)
    # outside the axes: inside, "best" still covered points of a dense cloud
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=7, framealpha=0.9)
    fig.tight_layout()
    return fig


def plot_corruption_correlation(table, *, natural_label: str,
                                title: str = "Does robustness to a corruption predict natural robustness?") -> Figure:
    """Horizontal bars of Pearson r per corruption (``table``: ``corruption``, ``pearson_r``;
    the row ``synthetic_er`` is the mean over corruptions and drawn dark)."""
    t = table.dropna(subset=["pearson_r"]).sort_values("pearson_r")
    fig, ax = plt.subplots(figsize=(6.4, max(2.5, 0.26 * len(t) + 1.2)), dpi=120)
    colours = ["0.25" if c == "synthetic_er" else ("#2b7bba" if r >= 0 else "#c44e52")
               for c, r in zip(t["corruption"], t["pearson_r"])]
    labels = ["mean over corruptions" if c == "synthetic_er" else c for c in t["corruption"]]
    ax.barh(labels, t["pearson_r"], color=colours)
    ax.axvline(0, color="0.4", lw=0.8)
    ax.set_xlim(-1, 1)
    ax.set_xlabel(f"Pearson r with effective robustness on {natural_label}")
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="x", color="0.9", lw=0.6)
    fig.tight_layout()
    return fig


#: A legend with more entries than this is grouped by shift family (:func:`setting_family`).
MAX_LEGEND = 10
_FAMILY = re.compile(r"^(?P<base>.+)\+(?P<family>[A-Za-z0-9_-]+)\.(?P<severity>\d+)$")


def setting_family(setting: str) -> tuple[str, int | None]:
    """``("gaussian_noise", 3)`` for ``mnist-test+gaussian_noise.3`` (any ``<base>+<shift>.<severity>``
    setting); ``(setting, None)`` for any other."""
    m = _FAMILY.match(setting)
    return (m["family"], int(m["severity"])) if m else (setting, None)


def shorten(text: str, width: int) -> str:
    """``text`` cut in the middle to at most ``width`` characters (``"abc…xyz"``): a long setting
    or model name (a path, say) would squeeze a figure's axes; hover and tables have it whole."""
    if len(text) <= width:
        return text
    keep = (width - 2) // 2
    return text[:keep] + "…" + text[-keep:]


class FamilyLook(NamedTuple):
    """How a setting is drawn in a legend grouped by shift family (:func:`family_looks`)."""

    family: str
    rank: int                 # the family's place in the legend (first seen first)
    colour: str               # the family's colour
    label: str                # the family's legend entry: ``"<family> (k severities)"``
    strength: float | None    # opacity by severity, 0.3 (lightest) to 0.95; None without a severity


def family_looks(names: Iterable[str]) -> list[FamilyLook] | None:
    """Per setting name, in order, its shift family (:func:`setting_family`) and how the family is
    drawn - the one rule of the HTML and the static figures whose legends group settings; None
    when no two names share a family (nothing to group)."""
    fams = [setting_family(str(n)) for n in names]
    order = list(dict.fromkeys(f for f, _ in fams))
    if len(order) == len(fams):
        return None
    palette = [c for c, _ in TYPE_STYLE.values()] + list(EXTRA_COLOURS)
    sizes = {f: sum(1 for g, _ in fams if g == f) for f in order}
    with_severity = {f for f, k in fams if k is not None}
    top = max((k for _, k in fams if k is not None), default=1)
    return [FamilyLook(family, order.index(family), palette[order.index(family) % len(palette)],
                       shorten(f"{family} ({sizes[family]} severities)" if family in with_severity
                               and sizes[family] > 1 else family, 36),
                       None if severity is None else 0.3 + 0.65 * severity / top)
            for family, severity in fams]


def plot_calibration(results, *, title: str = "Calibration", max_entries: int = MAX_LEGEND) -> Figure:
    """Expected calibration error (percent) against accuracy, one colour per setting, the legend
    to the right of the axes. With more than ``max_entries`` settings, as the HTML report's figure
    (:func:`family_looks`): the settings of one shift family (``<base>+<family>.<severity>``)
    share a colour, darker at higher severity, and one legend entry ``"<family> (k severities)"``."""
    settings = sorted(results["setting"].astype(str).unique())
    looks = family_looks(settings) if len(settings) > max_entries else None
    if looks is None:         # one entry per setting
        palette = [c for c, _ in TYPE_STYLE.values()] + list(EXTRA_COLOURS)
        looks = [FamilyLook(st, i, palette[i % len(palette)], shorten(st, 36), None) for i, st in enumerate(settings)]
        grouped = False
    else:
        grouped = True
    look = dict(zip(settings, looks))
    fig, ax = plt.subplots(figsize=(8.4 if grouped else 7.6, 4.8), dpi=120)
    labelled: set[str] = set()
    for setting, sub in results.groupby(results["setting"].astype(str), sort=True):
        lk = look[setting]
        first = lk.family not in labelled
        labelled.add(lk.family)
        ax.scatter(sub["accuracy"], sub["ece"], s=22, alpha=0.85 if lk.strength is None else lk.strength,
                   label=lk.label if first else None, edgecolors="white", linewidths=0.4, color=lk.colour)
    ax.set_xlabel("top-1 accuracy (%)")
    ax.set_ylabel("expected calibration error (%)")
    ax.set_title(title, fontsize=10, loc="left")
    ax.grid(True, color="0.9", lw=0.6)
    legend = ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=7, framealpha=0.9,
                       title="setting family" if grouped else "setting", title_fontsize=7)
    for h in legend.legend_handles:        # the entry shows the family's colour at full strength
        h.set_alpha(0.95)
    fig.tight_layout()
    return fig
