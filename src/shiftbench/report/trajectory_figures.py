"""Figures of fine-tuning trajectories (Andreassen et al. 2021, Figures 1-2).

* :func:`plot_trajectory` / :func:`trajectory_figure`: each trajectory's checkpoints drawn over
  the testbed's scatter and trend (shifted against in-distribution accuracy, logit axes with
  ticks in percent), joined in step order with arrows, the start marked by a ring and the end
  by a star;
* :func:`plot_trajectory_er` / :func:`trajectory_er_figure`: effective robustness against
  step or epoch, one line per trajectory, with the trend (``rho = 0``) as a reference line.

matplotlib for the static PNG/SVG/PDF, plotly for the HTML report. A trajectory is a table with
``step``, ``x_acc``, ``y_acc`` (percent) and optionally ``epoch`` and ``effective_robustness``
(:func:`~shiftbench.analysis.trajectory.trajectory_effective_robustness`), keyed by its name.
Checkpoints stored in the testbed itself (``<name>@step<k>``) are not drawn as models.
"""
from __future__ import annotations

import re
from collections.abc import Mapping

import matplotlib

matplotlib.use("Agg", force=False)
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import plotly.graph_objects as go  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from shiftbench.analysis.scaling import inverse, transform  # noqa: E402
from shiftbench.analysis.trajectory import (  # noqa: E402
    is_checkpoint,
    no_gap_effective_robustness,
    percent_of_gap,
)
from shiftbench.analysis.trend import Band, TrendFit, fit_trend  # noqa: E402
from shiftbench.errors import ConfigError, DataError  # noqa: E402
from shiftbench.report.figures import _fmt, _ticks, plot_trend  # noqa: E402
from shiftbench.report.interactive import _layout, _round, plotly_text, trend_figure  # noqa: E402
from shiftbench.testbed import Testbed  # noqa: E402

#: Line colours of trajectories, in order: distinct from the model-type colours of the scatter and
#: from the black trend line and grey y = x (a trajectory must never read as the trend).
TRAJECTORY_COLOURS = ("#7b3294", "#c51b7d", "#8c510a", "#01665e", "#2d004b", "#b35806")

Trajectories = Mapping[str, pd.DataFrame]


def _check(trajectories: Trajectories, need_er: bool = False) -> dict[str, pd.DataFrame]:
    if not trajectories:
        raise ConfigError("no trajectories to draw; pass {name: table with step, x_acc, y_acc}")
    out = {}
    for name, t in trajectories.items():
        cols = {"step", "x_acc", "y_acc"} | ({"effective_robustness"} if need_er else set())
        missing = sorted(cols - set(t.columns))
        if missing:
            raise DataError(f"trajectory {name!r}: missing column(s) {', '.join(missing)}")
        if len(t) == 0:
            raise DataError(f"trajectory {name!r} has no checkpoints")
        out[str(name)] = t.sort_values("step").reset_index(drop=True)
    return out


def _models(testbed: Testbed) -> Testbed:
    return testbed.select([m for m in testbed.models if not is_checkpoint(m)])


def _colour(i: int) -> str:
    return TRAJECTORY_COLOURS[i % len(TRAJECTORY_COLOURS)]


# ----------------------------------------------------------------------------- matplotlib
def plot_trajectory(
    testbed: Testbed,
    x: str,
    y: str,
    trajectories: Trajectories,
    *,
    scale: str = "logit",
    fit: TrendFit | None = None,
    band: Band | None = None,
    n_resamples: int = 1000,
    title: str | None = None,
) -> Figure:
    """The testbed's scatter and trend of ``y`` on ``x`` (:func:`~shiftbench.report.plot_trend`)
    with every trajectory drawn over it in step order (ring: first checkpoint, star: last)."""
    trajs = _check(trajectories)
    models = _models(testbed)
    fit = fit if fit is not None else fit_trend(models, x, y, scale)
    fig = plot_trend(models, x, y, fit=fit, band=band, n_resamples=n_resamples,
                     title=title or f"Fine-tuning trajectories: {y} vs {x}")
    ax = fig.axes[0]
    scale = fit.scale
    (x_lo, x_hi), (y_lo, y_hi) = ax.get_xlim(), ax.get_ylim()
    for i, (name, t) in enumerate(trajs.items()):
        c = _colour(i)
        xs, ys = transform(t["x_acc"], scale), transform(t["y_acc"], scale)
        ax.plot(xs, ys, "-o", color=c, lw=1.4, ms=3.5, label=f"trajectory: {name} ({len(t)} checkpoints)",
                zorder=6, gid=f"trajectory:{name}")
        for j in range(len(xs) - 1):
            ax.annotate("", xy=(xs[j + 1], ys[j + 1]), xytext=(xs[j], ys[j]), zorder=6,
                        arrowprops=dict(arrowstyle="-|>", color=c, lw=1.2, shrinkA=0, shrinkB=2, mutation_scale=9))
        ax.plot(xs[:1], ys[:1], "o", ms=10, mfc="none", mec=c, mew=1.6, zorder=7, gid=f"start:{name}")
        ax.plot(xs[-1:], ys[-1:], "*", ms=13, color=c, mec="white", mew=0.6, zorder=7, gid=f"end:{name}")
        pad_x, pad_y = 0.04 * (x_hi - x_lo), 0.04 * (y_hi - y_lo)
        x_lo, x_hi = min(x_lo, float(xs.min()) - pad_x), max(x_hi, float(xs.max()) + pad_x)
        y_lo, y_hi = min(y_lo, float(ys.min()) - pad_y), max(y_hi, float(ys.max()) + pad_y)
    grid = np.linspace(x_lo, x_hi, 200)      # the trend and y = x across the widened axes
    ax.plot(grid, fit.predict_scaled(grid), color="black", lw=0.9, ls=":", zorder=2)
    ax.plot(grid, grid, ls="--", color="0.45", lw=1, zorder=1)
    _set_axes(ax, x_lo, x_hi, y_lo, y_hi, scale)
    ax.legend(loc="upper left", fontsize=7, framealpha=0.9)
    return fig


def _set_axes(ax, x_lo: float, x_hi: float, y_lo: float, y_hi: float, scale: str) -> None:
    """Limits in scaled units, ticks in percent (the trend line is redrawn across the new width)."""
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, y_hi)
    for setter, lo, hi in ((ax.set_xticks, x_lo, x_hi), (ax.set_yticks, y_lo, y_hi)):
        ticks = _ticks(float(inverse(lo, scale)), float(inverse(hi, scale)), scale)
        setter(transform(ticks, scale), [_fmt(t) for t in ticks])


def _er_axis(t: pd.DataFrame, by: str) -> np.ndarray:
    if by not in ("step", "epoch"):
        raise ConfigError(f"by={by!r}: draw effective robustness against 'step' or 'epoch'")
    if by == "epoch" and ("epoch" not in t or t["epoch"].isna().any()):
        raise DataError("some checkpoints have no epoch; draw against by='step'")
    return t[by].to_numpy(dtype=float)


def _linthresh(trajs: dict[str, pd.DataFrame], by: str) -> float:
    values = np.concatenate([_er_axis(t, by) for t in trajs.values()])
    positive = values[values > 0]
    return float(positive.min()) if len(positive) else 1.0


def plot_trajectory_er(trajectories: Trajectories, *, by: str = "epoch", log_x: bool = True,
                       title: str = "Effective robustness during fine-tuning") -> Figure:
    """Effective robustness (pp) against ``by`` (``step`` or ``epoch``), one line per trajectory;
    with ``log_x`` the axis is symmetric-log (linear up to the first checkpoint after 0), so
    the early sub-epoch checkpoints are not squeezed against the start."""
    trajs = _check(trajectories, need_er=True)
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=120)
    ax.axhline(0, color="black", lw=1, label="on the trend (ρ = 0)", zorder=1)
    for i, (name, t) in enumerate(trajs.items()):
        ax.plot(_er_axis(t, by), t["effective_robustness"], "-o", color=_colour(i), ms=4, lw=1.5,
                label=name, zorder=3, gid=f"er:{name}")
    if log_x:
        ax.set_xscale("symlog", linthresh=_linthresh(trajs, by))
    ax.set_xlabel(f"fine-tuning {by}" + (" (symmetric log scale)" if log_x else ""))
    ax.set_ylabel("effective robustness (pp)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, color="0.9", lw=0.6)
    ax.legend(loc="best", fontsize=7, framealpha=0.9)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- plotly
def _hover(t: pd.DataFrame, name: str) -> tuple[list[list[object]], str]:
    er = t["effective_robustness"] if "effective_robustness" in t else pd.Series(np.nan, index=t.index)
    epoch = t["epoch"] if "epoch" in t else pd.Series(np.nan, index=t.index)
    custom = [[int(s), e, a, b, r] for s, e, a, b, r in zip(t["step"], _round(epoch, 3), _round(t["x_acc"], 2),
                                                           _round(t["y_acc"], 2), _round(er, 2))]
    template = ("<b>" + plotly_text(name) + "</b><br>step %{customdata[0]} (epoch %{customdata[1]})"
                "<br>x: %{customdata[2]:.2f}%<br>y: %{customdata[3]:.2f}%"
                "<br>effective robustness: %{customdata[4]:+.2f} pp<extra></extra>")
    return custom, template


def trajectory_figure(
    testbed: Testbed,
    x: str,
    y: str,
    trajectories: Trajectories,
    *,
    fit: TrendFit | None = None,
    band: Band | None = None,
    er: pd.DataFrame | None = None,
    scale: str = "logit",
    title: str | None = None,
    legend_below: bool = False,
) -> go.Figure:
    """Interactive twin of :func:`plot_trajectory`: the testbed's scatter and trend
    (:func:`~shiftbench.report.interactive.trend_figure`) with one ``lines+markers`` trace per
    trajectory (arrow markers pointing along the steps), a ring at its start and a star at its end.
    ``legend_below``: the legend in rows under the plot (:func:`legend_below`), for a figure half
    the page wide, where a legend beside the plot would squeeze it."""
    trajs = _check(trajectories)
    frame, _ = _models(testbed).paired(x, y)
    scale = fit.scale if fit is not None else scale
    fig = trend_figure(frame, x=x, y=y, title=title or f"Fine-tuning trajectories: {y} vs {x}", fit=fit,
                       band=band, er=er, scale=scale)
    x_lo, x_hi = fig.layout.xaxis.range
    y_lo, y_hi = fig.layout.yaxis.range
    for i, (name, t) in enumerate(trajs.items()):
        c = _colour(i)
        xs, ys = transform(t["x_acc"], scale), transform(t["y_acc"], scale)
        custom, template = _hover(t, name)
        symbols = ["circle"] + ["arrow"] * (len(t) - 1)
        fig.add_trace(go.Scatter(x=_round(xs, 4), y=_round(ys, 4), mode="lines+markers",
                                 name=plotly_text(f"trajectory: {name} ({len(t)} checkpoints)"),
                                 customdata=custom, hovertemplate=template, line=dict(color=c, width=2),
                                 marker=dict(color=c, size=9, symbol=symbols, angleref="previous")))
        fig.add_trace(go.Scatter(x=_round(xs[:1], 4), y=_round(ys[:1], 4), mode="markers", showlegend=False,
                                 hoverinfo="skip", marker=dict(color="rgba(0,0,0,0)", size=16, symbol="circle-open",
                                                               line=dict(color=c, width=2))))
        fig.add_trace(go.Scatter(x=_round(xs[-1:], 4), y=_round(ys[-1:], 4), mode="markers", showlegend=False,
                                 hoverinfo="skip", marker=dict(color=c, size=16, symbol="star",
                                                               line=dict(color="white", width=1))))
        pad_x, pad_y = 0.04 * (x_hi - x_lo), 0.04 * (y_hi - y_lo)
        x_lo, x_hi = min(x_lo, float(xs.min()) - pad_x), max(x_hi, float(xs.max()) + pad_x)
        y_lo, y_hi = min(y_lo, float(ys.min()) - pad_y), max(y_hi, float(ys.max()) + pad_y)
    if fit is not None:   # extend the trend across the widened axis
        knots = [x_lo, x_hi] if fit.kind == "linear" else None
        if knots is not None:
            fig.add_trace(go.Scatter(x=_round(knots, 4), y=_round(fit.predict_scaled(knots), 4), mode="lines",
                                     showlegend=False, hoverinfo="skip",
                                     line=dict(color="black", width=1, dash="dot")))
    for update, lo, hi in ((fig.update_xaxes, x_lo, x_hi), (fig.update_yaxes, y_lo, y_hi)):
        ticks = _ticks(float(inverse(lo, scale)), float(inverse(hi, scale)), scale)
        update(range=[lo, hi], tickvals=_round(transform(ticks, scale), 4), ticktext=[_fmt(t) for t in ticks])
    if legend_below:
        # the y axis' title (a setting's name in words) runs the plot's height: a little smaller, clear of the title
        legend_below_plot(fig, plot_height=370)
        fig.update_yaxes(title_font=dict(size=11))
    return fig


#: A legend under a half-page figure: its width (px) in two columns, and a line's height.
BELOW_WIDTH, BELOW_LINE = 500, 15
_CHAR, _SYMBOL = 0.55 * 11, 40       # estimated width of a character of the legend's font, and of the symbol


def _wrap(text: str, chars: int) -> list[str]:
    """``text`` in lines of at most ``chars`` characters, broken at spaces (a longer word is cut)."""
    lines: list[str] = []
    for word in text.split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= chars:
            lines[-1] += " " + word
            continue
        while len(word) > chars:
            lines.append(word[:chars])
            word = word[chars:]
        lines.append(word)
    return lines or [""]


def legend_below_plot(fig: go.Figure, width: int = BELOW_WIDTH, plot_height: int = 340) -> go.Figure:
    """Move the legend under the plot for a figure ``width`` pixels wide (half the page): entries
    in two columns, each half the plot's width (a name too long for its column wraps onto more
    lines, at spaces), at the figure's bottom; the bottom margin and the height grow by the
    legend's estimated rows, so that the plot area keeps ``plot_height`` pixels. Changed in place
    and returned."""
    margin = fig.layout.margin
    column = (width - (margin.l if margin.l is not None else 70) - (margin.r if margin.r is not None else 20)) // 2
    chars = int((column - _SYMBOL) / _CHAR)
    shown = [t for t in fig.data if t.showlegend is not False and t.name]
    shown.sort(key=lambda t: t.legendrank if t.legendrank is not None else 1000)   # plotly's order
    heights = []
    for trace in shown:
        name = str(trace.name)
        if len(name) > chars and "&" not in name:     # an entity-escaped name is left whole
            trace.name = "<br>".join(_wrap(name, chars))
        heights.append(str(trace.name).count("<br>") + 1)
    rows = [max(heights[i:i + 2]) for i in range(0, len(heights), 2)]
    legend_px = int(sum(rows) * BELOW_LINE + 4 * len(rows) + 14)
    top = int(margin.t if margin.t is not None else 70)
    bottom = 60 + legend_px
    # two columns: each entry half the legend's width (plotly: a fraction of the plot's width)
    fig.update_layout(legend=dict(orientation="h", x=0, xanchor="left", y=0, yref="container", yanchor="bottom",
                                  entrywidth=0.5, entrywidthmode="fraction", font=dict(size=11), valign="top"),
                      showlegend=bool(shown),       # plotly hides a one-entry legend: its room is kept for it
                      margin=dict(b=bottom), height=top + plot_height + bottom)
    return fig


def trajectory_er_figure(trajectories: Trajectories, *, by: str = "epoch", log_x: bool = True,
                         title: str = "Effective robustness during fine-tuning",
                         legend_below: bool = False) -> go.Figure:
    """Interactive twin of :func:`plot_trajectory_er` (one trace per trajectory); ``legend_below``:
    the legend in rows under the plot (:func:`legend_below_plot`), as beside a trajectory figure."""
    trajs = _check(trajectories, need_er=True)
    fig = go.Figure()
    fig.add_hline(y=0, line=dict(color="black", width=1))
    for i, (name, t) in enumerate(trajs.items()):
        custom, template = _hover(t, name)
        xs = _er_axis(t, by)
        if log_x:   # plotly has no symlog axis: shift by the first positive value and use a log axis
            xs = xs + _linthresh(trajs, by)
        fig.add_trace(go.Scatter(x=_round(xs, 5), y=_round(t["effective_robustness"], 3), mode="lines+markers",
                                 name=plotly_text(name), customdata=custom, hovertemplate=template,
                                 line=dict(color=_colour(i), width=2), marker=dict(size=7)))
    label = f"fine-tuning {by}" + (" (log scale)" if log_x else "")
    _layout(fig, plotly_text(title), label, "effective robustness (pp)", height=440)
    if log_x:
        shift = _linthresh(trajs, by)
        values = np.concatenate([_er_axis(t, by) for t in trajs.values()])
        ticks = log_ticks(float(values.max()), shift)
        # tick positions in data units (the drawn value + shift), labelled with the value itself
        fig.update_xaxes(type="log", tickvals=[round(float(v + shift), 6) for v in ticks],
                         ticktext=[f"{v:g}" for v in ticks])
    fig.update_layout(legend=dict(x=0.99, xanchor="right", y=0.99, yanchor="top"))
    if legend_below:
        legend_below_plot(fig)
    return fig


def log_ticks(top: float, shift: float) -> list[float]:
    """Tick values (in the data's own units) for an axis drawn at ``value + shift`` on a log scale:
    0, then 1-2-5 steps from ``shift`` up to ``top``."""
    out = [0.0]
    if top <= 0:
        return out
    decade = 10.0 ** np.floor(np.log10(max(shift, 1e-12)))
    while decade <= top * 1.0001:
        for m in (1, 2, 5):
            v = float(f"{m * decade:.6g}")
            if shift * 0.999 <= v <= top * 1.0001 and v not in out:
                out.append(v)
        decade *= 10
    if len(out) > 8:   # thin to at most 8 ticks, keeping the decades
        out = [0.0] + [v for v in out[1:] if f"{v:e}".startswith("1")]
    return out


# ----------------------------------------------------------------------------- several runs of one recipe
def _stats_layers(testbed: Testbed | None, summary) -> dict[str, pd.DataFrame]:
    """What both stats figures draw: the testbed's models with their effective robustness and
    Clopper-Pearson interval against the summary's trend, the binned runs, the y = x curve."""
    from shiftbench.analysis.robustness import effective_robustness  # deferred: robustness imports plotting helpers


    models = pd.DataFrame(columns=["x_acc", "effective_robustness", "er_low", "er_high", "percent_of_gap"])
    if testbed is not None:
        tb = _models(testbed)
        m = effective_robustness(tb, summary.x, summary.y, fit=summary.fit, n_resamples=0)
        models = m.assign(percent_of_gap=percent_of_gap(m["effective_robustness"],
                                                        no_gap_effective_robustness(summary.fit, m["x_acc"])))
    bins = summary.bins[summary.bins["n_checkpoints"] > 0]
    return {"models": models, "bins": bins, "checkpoints": summary.checkpoints, "no_gap": summary.no_gap}


def plot_trajectory_stats(testbed: Testbed | None, summary, *, title: str | None = None) -> Figure:
    """Andreassen et al. 2022's view of several runs of one recipe (a
    :class:`~shiftbench.analysis.trajectory.TrajectorySummary`), two panels against ID accuracy:

    * effective robustness (pp): the testbed's models with their 95% Clopper-Pearson intervals
      (grey), every checkpoint (faint), the binned mean ± s.d. of the runs, the ``y = x`` curve's
      effective robustness (the most a model can have without gaining under the shift) and,
      when the summary has one, the mixed-classifier curve;
    * the same as a percentage of the gap to ``y = x`` (Appendix D): ``y = x`` is 100%.
    """
    layers = _stats_layers(testbed, summary)
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.4), dpi=120)
    models, bins, cps, ng = layers["models"], layers["bins"], layers["checkpoints"], layers["no_gap"]
    if len(models):
        ax.errorbar(models["x_acc"], models["effective_robustness"],
                    yerr=[models["effective_robustness"] - models["er_low"],
                          models["er_high"] - models["effective_robustness"]],
                    fmt="o", ms=3, color="0.6", ecolor="0.8", lw=0.8, label=f"testbed models ({len(models)}, 95% CI)",
                    zorder=2, gid="models")
        ax2.plot(models["x_acc"], models["percent_of_gap"], "o", ms=3, color="0.6", zorder=2, label="testbed models")
    c = _colour(0)
    ax.plot(cps["x_acc"], cps["effective_robustness"], ".", color=c, alpha=0.3, ms=4, zorder=3,
            label=f"checkpoints ({len(cps)}, {cps['run'].nunique()} runs)")
    ax.errorbar(bins["x_acc_mean"], bins["er_mean"], yerr=bins["er_sd"].fillna(0), fmt="-s", color=c, ms=5, lw=1.6,
                capsize=3, zorder=5, label=f"{summary.recipe}: bin mean ± s.d.", gid="bins")
    ax2.errorbar(bins["x_acc_mean"], bins["percent_of_gap_mean"], yerr=bins["percent_of_gap_sd"].fillna(0),
                 fmt="-s", color=c, ms=5, lw=1.6, capsize=3, zorder=5, label=f"{summary.recipe}: bin mean ± s.d.")
    ax.plot(ng["x_acc"], ng["effective_robustness"], "--", color="0.35", lw=1.1, zorder=4, label="y = x (no gap)",
            gid="no_gap")
    ax2.axhline(100, ls="--", color="0.35", lw=1.1, label="y = x (100%)")
    if summary.mixed is not None:
        m = summary.mixed
        label = f"mixed {m.attrs['low_model']} → {m.attrs['high_model']}"
        ax.plot(m["x_acc"], m["effective_robustness"], "-", color=_colour(1), lw=1.3, zorder=4, label=label,
                gid="mixed")
        ax2.plot(m["x_acc"], m["percent_of_gap"], "-", color=_colour(1), lw=1.3, zorder=4, label=label)
    for a, ylabel in ((ax, "effective robustness (pp)"), (ax2, "% of the gap to y = x")):
        a.axhline(0, color="black", lw=0.8, zorder=1)
        a.set_xlabel(f"{summary.x} accuracy (%)")
        a.set_ylabel(ylabel)
        a.grid(True, color="0.9", lw=0.6)
        a.legend(loc="best", fontsize=7, framealpha=0.9)
    gap = np.concatenate([bins["percent_of_gap_mean"].dropna().to_numpy(), [0.0, 100.0]])
    ax2.set_ylim(min(-50.0, float(gap.min()) - 10), max(110.0, float(gap.max()) + 10))
    fig.suptitle(title or f"Effective robustness during fine-tuning on {summary.y}: {summary.recipe} "
                 f"({len(summary.runs)} runs)", fontsize=10)
    fig.tight_layout()
    return fig


def trajectory_stats_figure(testbed: Testbed | None, summary, *, title: str | None = None) -> go.Figure:
    """Interactive twin of :func:`plot_trajectory_stats`: the same two panels side by side."""
    from plotly.subplots import make_subplots  # deferred: only the two-panel figure needs it

    layers = _stats_layers(testbed, summary)
    models, bins, ng = layers["models"], layers["bins"], layers["no_gap"]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1,
                        subplot_titles=("effective robustness (pp)", "% of the gap to y = x"))
    if len(models):
        names = [plotly_text(str(n)) for n in models.index]
        fig.add_trace(go.Scatter(
            x=_round(models["x_acc"], 2), y=_round(models["effective_robustness"], 2), mode="markers",
            name=f"testbed models ({len(models)}, 95% CI)", text=names, marker=dict(color="#999", size=6),
            error_y=dict(type="data", symmetric=False, color="#ccc",
                         array=_round(models["er_high"] - models["effective_robustness"], 2),
                         arrayminus=_round(models["effective_robustness"] - models["er_low"], 2)),
            hovertemplate="%{text}<br>x %{x:.2f}%<br>ER %{y:+.2f} pp<extra></extra>"), row=1, col=1)
        fig.add_trace(go.Scatter(x=_round(models["x_acc"], 2), y=_round(models["percent_of_gap"], 1), mode="markers",
                                 text=names, showlegend=False, marker=dict(color="#999", size=6),
                                 hovertemplate="%{text}<br>x %{x:.2f}%<br>%{y:+.1f}% of the gap<extra></extra>"),
                      row=1, col=2)
    c = _colour(0)
    label = plotly_text(f"{summary.recipe}: bin mean ± s.d. ({len(summary.runs)} runs)")
    for col, mean, sd in ((1, "er_mean", "er_sd"), (2, "percent_of_gap_mean", "percent_of_gap_sd")):
        fig.add_trace(go.Scatter(x=_round(bins["x_acc_mean"], 2), y=_round(bins[mean], 2), mode="lines+markers",
                                 name=label, showlegend=col == 1, legendgroup="bins", line=dict(color=c, width=2),
                                 marker=dict(symbol="square", size=7),
                                 error_y=dict(type="data", array=_round(bins[sd].fillna(0), 2), color=c)),
                      row=1, col=col)
    fig.add_trace(go.Scatter(x=_round(ng["x_acc"], 2), y=_round(ng["effective_robustness"], 2), mode="lines",
                             name="y = x (no gap)", legendgroup="nogap", line=dict(color="#555", dash="dash")),
                  row=1, col=1)
    fig.add_trace(go.Scatter(x=_round(ng["x_acc"], 2), y=[100.0] * len(ng), mode="lines", showlegend=False,
                             legendgroup="nogap", line=dict(color="#555", dash="dash")), row=1, col=2)
    if summary.mixed is not None:
        m = summary.mixed
        name = plotly_text(f"mixed {m.attrs['low_model']} → {m.attrs['high_model']}")
        for col, col_name in ((1, "effective_robustness"), (2, "percent_of_gap")):
            fig.add_trace(go.Scatter(x=_round(m["x_acc"], 2), y=_round(m[col_name], 2), mode="lines", name=name,
                                     showlegend=col == 1, legendgroup="mixed", line=dict(color=_colour(1))),
                          row=1, col=col)
    for col in (1, 2):
        fig.add_hline(y=0, line=dict(color="black", width=1), row=1, col=col)
        fig.update_xaxes(title_text=plotly_text(f"{summary.x} accuracy (%)"), row=1, col=col)
    fig.update_layout(title=plotly_text(title or f"Effective robustness during fine-tuning on {summary.y}: "
                                        f"{summary.recipe}"), height=440, template="plotly_white",
                      legend=dict(orientation="h", y=-0.2))
    return fig
