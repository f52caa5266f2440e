"""The scatter the field reads: shifted vs in-distribution accuracy with the fitted trend.

Both axes are drawn in the chosen scaling (logit by default) with ticks labelled in percent
accuracy; every model is a point coloured by its type with Clopper-Pearson error bars
(99.5% as in Taori et al. 2020, Figure 1), the trend fitted on the standard models is a line
with its bootstrap band, and ``y = x`` is dashed for reference.
"""
from __future__ import annotations

import sys

from collections.abc import Callable, Iterable
from pathlib import Path

import matplotlib

matplotlib.use("Agg", force=False)
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from shiftbench.analysis.intervals import accuracy_interval  # noqa: E402
from shiftbench.analysis.scaling import inverse, transform  # noqa: E402
from shiftbench.analysis.trend import DEFAULT_FIT_ON, Band, TrendFit, bootstrap_band, fit_trend  # noqa: E402
from shiftbench.errors import ConfigError  # noqa: E402
from shiftbench.testbed import Testbed  # noqa: E402

#: Colours and legend labels per model type (others get the fallback colour, labelled by type).
TYPE_STYLE: dict[str, tuple[str, str]] = {
    "STANDARD": ("#1f77b4", "Standard training"),
    "ROBUST_INTV": ("#2ca02c", "Robustness intervention"),
    "LP_ADV": ("#ff7f0e", "Lp adversarially robust"),
    "MORE_DATA": ("#d62728", "Trained with more data"),
    "LOW_ACCURACY_CNN": ("#9467bd", "Low-accuracy CNN"),
    "UNKNOWN": ("#7f7f7f", "Unknown type"),
}
FALLBACK_COLOUR = "#8c564b"
#: How the models a user asks to highlight are drawn: a gold star with a black edge, on top of
#: every other point, labelled in free space with a leader line (no model type uses this colour).
HIGHLIGHT_COLOUR = "#ffd400"
HIGHLIGHT_LABEL = "your models"
TICKS = [0.001, 0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 98, 99, 99.5, 99.9, 99.99]
FORMATS = (".png", ".svg", ".pdf")


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
    fit: TrendFit | None = None,
    fit_on: str | Iterable[str] | None = DEFAULT_FIT_ON,
    band: Band | None = None,
    n_resamples: int = 1000,
    ci: float = 0.995,
    seed: int | None = 0,
    highlight: Iterable[str] = (),
    title: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Draw ``y`` against ``x`` for every model of ``testbed`` with the fitted trend.

    ``fit`` defaults to :func:`~shiftbench.analysis.fit_trend` on ``fit_on`` (STANDARD);
    ``band`` to its bootstrap band with ``n_resamples`` (0 draws no band); ``ci`` is the
    Clopper-Pearson level of the error bars. ``highlight`` names models (your own, say) to draw
    on top of every other point as gold stars, listed in the legend as "your models" and
    labelled in free space - preferably above the trend, away from every marker and the legend -
    with a thin leader line to the point (:func:`place_labels`).
    """
    if fit is None:
        fit = fit_trend(x, y, scale, testbed=testbed, fit_on=fit_on)
    scale = fit.scale
    if band is None and n_resamples > 0:
        band = bootstrap_band(fit, n_resamples=n_resamples, seed=seed)
    frame, skipped = testbed.paired(x, y)
    marked = [m for m in dict.fromkeys(testbed.check_model(m) for m in highlight) if m in frame.index]
    is_marked = frame.index.isin(marked)
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.4, 5.6), dpi=120)
    else:
        fig = ax.figure

    # points clipped like the fit (half an example at 0% / 100%), limits padded in scaled space
    xs = transform(frame["x_acc"], scale, frame["x_n"])
    ys = transform(frame["y_acc"], scale, frame["y_n"])
    x_lo, x_hi = float(xs.min()), float(xs.max())
    y_lo, y_hi = float(ys.min()), max(float(ys.max()), x_hi)   # keep y = x in view at the top
    x_pad = 0.06 * max(x_hi - x_lo, 1e-3)
    y_pad = 0.06 * max(y_hi - y_lo, 1e-3)
    x_lo, x_hi, y_lo, y_hi = x_lo - x_pad, x_hi + x_pad, y_lo - y_pad, y_hi + y_pad
    x_lo_pct, x_hi_pct = float(inverse(x_lo, scale)), float(inverse(x_hi, scale))
    lo_pct, hi_pct = float(inverse(y_lo, scale)), float(inverse(y_hi, scale))

    # y = x and the trend with its band
    grid = np.linspace(x_lo, x_hi, 200)
    ax.plot(grid, grid, ls="--", color="0.45", lw=1, label="y = x", zorder=1)
    label = f"{fit.kind.capitalize()} fit ({fit.n_models} models, slope {fit.slope:.2f}, $r^2$ {fit.r2:.3f})"
    ax.plot(grid, fit.predict_scaled(grid), color="black", lw=1.6, label=label, zorder=3)
    if band is not None:
        gx = transform(band.grid, scale)
        fx_lo, fx_hi = transform(fit.x_range[0], scale), transform(fit.x_range[1], scale)
        keep = (gx >= max(grid[0], fx_lo)) & (gx <= min(grid[-1], fx_hi))
        ax.fill_between(gx[keep], band.lower_scaled[keep], band.upper_scaled[keep],
                        color="black", alpha=0.15, lw=0, label=f"{band.confidence:.0%} bootstrap band", zorder=2)

    # points with Clopper-Pearson bars, one legend entry per type
    xl, xh = accuracy_interval(frame["x_acc"], frame["x_n"], ci)
    yl, yh = accuracy_interval(frame["y_acc"], frame["y_n"], ci)
    types = list(dict.fromkeys(frame["model_type"]))
    types.sort(key=lambda t: list(TYPE_STYLE).index(t) if t in TYPE_STYLE else len(TYPE_STYLE))

    def bars(sel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        xerr = np.abs(np.vstack([xs[sel] - transform(xl[sel], scale), transform(xh[sel], scale) - xs[sel]]))
        yerr = np.abs(np.vstack([ys[sel] - transform(yl[sel], scale), transform(yh[sel], scale) - ys[sel]]))
        return np.where(np.isfinite(xerr), xerr, 0.0), np.where(np.isfinite(yerr), yerr, 0.0)

    for mtype in types:
        sel = (frame["model_type"] == mtype).to_numpy() & ~is_marked
        if not sel.any():
            continue
        colour, name = TYPE_STYLE.get(mtype, (FALLBACK_COLOUR, mtype.replace("_", " ").capitalize()))
        xerr, yerr = bars(sel)
        ax.errorbar(xs[sel], ys[sel], xerr=xerr, yerr=yerr, fmt="o", ms=4.2, color=colour, ecolor=colour,
                    elinewidth=0.6, alpha=0.85, mec="white", mew=0.4, label=f"{name} ({sel.sum()})", zorder=4)
    if marked:
        at = np.array([frame.index.get_loc(m) for m in marked])        # in the order of ``marked``
        xerr, yerr = bars(at)
        ax.errorbar(xs[at], ys[at], xerr=xerr, yerr=yerr, fmt="none", ecolor="black", elinewidth=0.7, zorder=5)
        ax.scatter(xs[at], ys[at], marker="*", s=STAR_SIZE ** 2, c=HIGHLIGHT_COLOUR,
                   edgecolors="black", linewidths=0.8, label=f"{HIGHLIGHT_LABEL} ({len(marked)})", zorder=6)

    xticks = _ticks(x_lo_pct, x_hi_pct, scale)
    yticks = _ticks(lo_pct, hi_pct, scale)
    ax.set_xticks(transform(xticks, scale), [_fmt(t) for t in xticks])
    ax.set_yticks(transform(yticks, scale), [_fmt(t) for t in yticks])
    ax.set_xlim(grid[0], grid[-1])
    ax.set_ylim(y_lo, y_hi)
    ax.set_xlabel(f"{x} accuracy ({scale} scale)")
    ax.set_ylabel(f"{y} accuracy ({scale} scale)")
    ax.grid(True, color="0.9", lw=0.6)
    subtitle = f"{len(frame)} models" + (f", {skipped} without both accuracies" if skipped else "")
    ax.set_title((title or f"{y} vs {x}") + f"\n{testbed.name}: {subtitle}", fontsize=10)
    legend = ax.legend(loc="upper left", fontsize=7, framealpha=0.9)
    fig.tight_layout()
    if marked:
        _label_highlighted(ax, marked, xs[at], ys[at], xs, ys, legend, fit)
    return fig


#: Marker sizes (points) of the highlighted stars and of every other model's point.
STAR_SIZE, POINT_SIZE = 13.0, 4.2


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
                       legend, fit: TrendFit) -> None:
    """Label the highlighted points in free space (display pixels) with leader lines."""
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
    radius = np.full(len(points), POINT_SIZE / 2 * px + 1.5)
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


def save_figure_formats(fig: Figure, stem: str | Path, formats: Iterable[str] = FORMATS) -> list[Path]:
    """Save ``fig`` once per format (``stem.png``, ``stem.svg``, ``stem.pdf``) and close it."""
    stem = Path(stem)
    formats = list(formats)
    bad = [f for f in formats if f.lower() not in FORMATS]
    if bad:
        raise ConfigError(f"unknown figure format {bad[0]!r}; use .png, .svg or .pdf")
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in formats:
        path = stem.with_name(stem.name + ext.lower())
        fig.savefig(path, bbox_inches="tight")
        paths.append(path)
    plt.close(fig)
    return paths


def _save_pickled(blob: bytes, stem: str, formats: list[str]) -> list[str]:
    """Worker side of :class:`FigureWriter`: unpickle a figure and save it in every format."""
    import pickle  # deferred: only the worker process unpickles figures

    return [str(p) for p in save_figure_formats(pickle.loads(blob), stem, formats)]  # noqa: S301 - our own figure


class FigureWriter:
    """Saves static figures in a background process while the caller goes on building the page.

    Rendering PNG, SVG and PDF of every figure was most of the HTML report's time (each format
    draws the figure twice for ``bbox_inches="tight"``); a figure is picklable, so one worker
    process renders while the main process computes the next section. :meth:`save` returns the
    paths at once; :meth:`wait` (called before the report returns) re-raises any worker error.
    The worker is forked (on Linux; elsewhere figures are saved inline): a spawned worker would
    re-import the caller's script, which then needs an ``if __name__ == "__main__"`` guard, and
    the worker only runs matplotlib (never torch or its OpenMP pool, which do not survive a fork).
    A figure that cannot be pickled is saved inline. ``workers=0`` saves everything inline.
    """

    def __init__(self, workers: int = 1) -> None:
        self.workers = workers if sys.platform.startswith("linux") else 0
        self._pool = None
        self._pending: list = []

    def save(self, fig: Figure, stem: str | Path, formats: Iterable[str] = FORMATS) -> list[Path]:
        import pickle  # deferred: only used when figures are written in the background

        stem, formats = Path(stem), [f.lower() for f in formats]
        bad = [f for f in formats if f not in FORMATS]
        if bad:
            raise ConfigError(f"unknown figure format {bad[0]!r}; use .png, .svg or .pdf")
        if self.workers < 1:
            return save_figure_formats(fig, stem, formats)
        try:
            blob = pickle.dumps(fig)
        except Exception:  # noqa: BLE001 - an unpicklable artist: save it here instead
            return save_figure_formats(fig, stem, formats)
        plt.close(fig)
        stem.parent.mkdir(parents=True, exist_ok=True)
        if self._pool is None:
            import multiprocessing as mp  # deferred: only when figures are written in the background
            from concurrent.futures import ProcessPoolExecutor  # deferred: as above

            self._pool = ProcessPoolExecutor(self.workers, mp_context=mp.get_context("fork"))
        self._pending.append(self._pool.submit(_save_pickled, blob, str(stem), formats))
        return [stem.with_name(stem.name + ext) for ext in formats]

    def wait(self) -> None:
        """Block until every figure is written; the first worker error is raised here."""
        try:
            for fut in self._pending:
                fut.result()
        finally:
            self._pending.clear()
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)
                self._pool = None


def _type_legend_scatter(ax: Axes, frame, xcol: str, ycol: str) -> None:
    types = list(dict.fromkeys(frame["model_type"]))
    types.sort(key=lambda t: list(TYPE_STYLE).index(t) if t in TYPE_STYLE else len(TYPE_STYLE))
    for mtype in types:
        sub = frame[frame["model_type"] == mtype]
        colour, name = TYPE_STYLE.get(mtype, (FALLBACK_COLOUR, mtype.replace("_", " ").capitalize()))
        ax.scatter(sub[xcol], sub[ycol], s=18, color=colour, alpha=0.85, edgecolors="white", linewidths=0.4,
                   label=f"{name} ({len(sub)})", zorder=3)


def plot_synthetic_vs_natural(frame, *, natural_label: str, r: float | None = None,
                              title: str = "Synthetic vs natural effective robustness") -> Figure:
    """Natural against synthetic effective robustness (pp), one point per model, coloured by type,
    with the least-squares line (Taori et al. 2020, Figure 5). ``frame``: ``model_type``,
    ``synthetic_er``, ``natural_er``."""
    fig, ax = plt.subplots(figsize=(6.4, 5.2), dpi=120)
    ax.axhline(0, color="0.6", lw=0.8, zorder=1)
    ax.axvline(0, color="0.6", lw=0.8, zorder=1)
    if len(frame) >= 2 and np.ptp(frame["synthetic_er"]) > 0:
        slope, intercept = np.polyfit(frame["synthetic_er"], frame["natural_er"], 1)
        gx = np.array([frame["synthetic_er"].min(), frame["synthetic_er"].max()])
        ax.plot(gx, slope * gx + intercept, color="black", lw=1.2, label="least-squares line", zorder=2)
    _type_legend_scatter(ax, frame, "synthetic_er", "natural_er")
    ax.set_xlabel("effective robustness, mean over corruptions (pp)")
    ax.set_ylabel(f"effective robustness on {natural_label} (pp)")
    ax.set_title(title + (f"\nPearson r = {r:.2f}, {len(frame)} models" if r is not None else ""), fontsize=10)
    ax.grid(True, color="0.9", lw=0.6)
    ax.legend(loc="best", fontsize=7, framealpha=0.9)
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


def plot_calibration(results, *, title: str = "Calibration") -> Figure:
    """Expected calibration error (percent) against accuracy, one colour per setting."""
    fig, ax = plt.subplots(figsize=(6.4, 4.8), dpi=120)
    for setting, sub in results.groupby("setting", sort=True):
        ax.scatter(sub["accuracy"], sub["ece"], s=22, alpha=0.85, label=str(setting), edgecolors="white",
                   linewidths=0.4)
    ax.set_xlabel("top-1 accuracy (%)")
    ax.set_ylabel("expected calibration error (%)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, color="0.9", lw=0.6)
    ax.legend(loc="best", fontsize=7, framealpha=0.9)
    fig.tight_layout()
    return fig
