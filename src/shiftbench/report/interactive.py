"""Interactive plotly figures for the HTML report (the static twins are in :mod:`.figures`).

Every figure is kept lean so that a report over 1,556 models stays a few MB: one trace per
model type (legend clicks toggle a type), numbers rounded to what the eye can see, the
bootstrap band as one filled polygon, and no plotly template (it would be repeated in every
figure). Text that comes from users' tables - model names, model types, setting names - is
HTML-escaped before it reaches plotly (:func:`plotly_text`), so plotly shows it as text.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from shiftbench.analysis.intervals import accuracy_interval
from shiftbench.analysis.scaling import inverse, transform
from shiftbench.analysis.trend import Band, TrendFit
from shiftbench.report.figures import HIGHLIGHT_COLOUR, HIGHLIGHT_LABEL, TYPE_STYLE, _fmt, _ticks, place_labels

#: Colours for model types without a style of their own, cycled in order of appearance.
EXTRA_COLOURS = ("#8c564b", "#e377c2", "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39")
FONT = dict(family="system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", size=12, color="#222")
GRID = "#e6e6e6"
#: The plot area (pixels) labels of highlighted models are placed for: the height is fixed by the
#: layout, the width is a narrow page's; a wider page only shrinks the labels towards their centres.
PLOT_AREA = (600.0, 440.0)


def plotly_text(text: object) -> str:
    """Escape ``&``, ``<`` and ``>`` the way plotly decodes them, so user text stays text.

    (plotly renders a small subset of HTML in labels and hover text and decodes only a few
    named entities; ``&quot;`` is not among them, and quotes are harmless without tags.)
    """
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def type_styles(types: Sequence[str]) -> dict[str, tuple[str, str]]:
    """Colour and legend label of each model type, in :data:`TYPE_STYLE` order, then the rest."""
    ordered = sorted(dict.fromkeys(types), key=lambda t: list(TYPE_STYLE).index(t) if t in TYPE_STYLE else len(TYPE_STYLE))
    out, extra = {}, 0
    for t in ordered:
        if t in TYPE_STYLE:
            out[t] = TYPE_STYLE[t]
        else:
            out[t] = (EXTRA_COLOURS[extra % len(EXTRA_COLOURS)], t.replace("_", " ").capitalize())
            extra += 1
    return out


def _round(values: np.ndarray | pd.Series, digits: int) -> list[float | None]:
    arr = np.round(np.asarray(values, dtype=float), digits)
    return [None if not np.isfinite(v) else float(v) for v in arr]


def _layout(fig: go.Figure, title: str, x_title: str, y_title: str, height: int = 560) -> None:
    fig.update_layout(
        template="none", height=height, font=FONT, paper_bgcolor="white", plot_bgcolor="white",
        title=dict(text=title, x=0.012, xanchor="left", font=dict(size=14)),
        margin=dict(l=70, r=20, t=60, b=60), hovermode="closest",
        legend=dict(bgcolor="rgba(255,255,255,0.85)", bordercolor="#ccc", borderwidth=1,
                    x=0.01, y=0.99, xanchor="left", yanchor="top", font=dict(size=11)),
        hoverlabel=dict(align="left", font=dict(size=12)))
    axis = dict(showgrid=True, gridcolor=GRID, zeroline=False, linecolor="#888", showline=True, mirror=True,
                ticks="outside", tickcolor="#888")
    fig.update_xaxes(title=dict(text=x_title), **axis)
    fig.update_yaxes(title=dict(text=y_title), **axis)


def trend_figure(
    frame: pd.DataFrame,
    *,
    x: str,
    y: str,
    title: str,
    fit: TrendFit | None = None,
    band: Band | None = None,
    er: pd.DataFrame | None = None,
    scale: str = "logit",
    ci: float = 0.995,
    highlight: Sequence[str] = (),
) -> go.Figure:
    """Shifted against in-distribution accuracy in ``scale`` coordinates (ticks in percent).

    ``frame`` is :meth:`Testbed.paired` output (``x_acc, y_acc, x_n, y_n, model_type``, indexed
    by model). With ``fit``: the trend, its ``band`` (drawn over the fitted models' x range)
    and, for a piecewise trend, the pivot. Points carry ``ci`` Clopper-Pearson bars and hover
    with the model's name, type, both accuracies and (with ``er``) effective robustness.
    ``highlight`` models (those in ``frame``) are drawn last, as gold stars in a trace named
    "your models", each labelled by an annotation placed in free space with a leader line.
    """
    scale = fit.scale if fit is not None else scale
    fig = go.Figure()
    xs = transform(frame["x_acc"], scale, frame["x_n"])
    ys = transform(frame["y_acc"], scale, frame["y_n"])
    x_lo, x_hi = float(xs.min()), float(xs.max())
    y_lo, y_hi = float(ys.min()), max(float(ys.max()), x_hi)
    x_pad, y_pad = 0.06 * max(x_hi - x_lo, 1e-3), 0.06 * max(y_hi - y_lo, 1e-3)
    x_lo, x_hi, y_lo, y_hi = x_lo - x_pad, x_hi + x_pad, y_lo - y_pad, y_hi + y_pad

    fig.add_trace(go.Scatter(x=[x_lo, x_hi], y=[x_lo, x_hi], mode="lines", name="y = x", hoverinfo="skip",
                             line=dict(color="#777", dash="dash", width=1)))
    if fit is not None and band is not None:
        gx = transform(band.grid, scale)
        fx_lo, fx_hi = transform(fit.x_range[0], scale), transform(fit.x_range[1], scale)
        keep = (gx >= max(x_lo, fx_lo)) & (gx <= min(x_hi, fx_hi))
        if keep.sum() >= 2:
            bx = np.concatenate([gx[keep], gx[keep][::-1]])
            by = np.concatenate([band.upper_scaled[keep], band.lower_scaled[keep][::-1]])
            fig.add_trace(go.Scatter(
                x=_round(bx, 4), y=_round(by, 4), mode="lines", fill="toself", fillcolor="rgba(0,0,0,0.13)",
                line=dict(width=0), hoverinfo="skip", name=f"{band.confidence:.0%} bootstrap band"))
    if fit is not None:
        knots = [x_lo, x_hi]
        if fit.kind == "piecewise":
            p = float(transform(getattr(fit, "pivot"), scale))
            knots = sorted({x_lo, min(max(p, x_lo), x_hi), x_hi})
        label = (f"{fit.kind.capitalize()} fit ({fit.n_models} models, slope {fit.slope:.2f}, "
                 f"r² {fit.r2:.3f})")
        fig.add_trace(go.Scatter(x=_round(knots, 4), y=_round(fit.predict_scaled(knots), 4), mode="lines",
                                 name=label, hoverinfo="skip", line=dict(color="black", width=2)))
        if fit.kind == "piecewise":
            pivot = float(getattr(fit, "pivot"))
            fig.add_vline(x=float(transform(pivot, scale)), line=dict(color="#555", dash="dot", width=1),
                          annotation=dict(text=f"pivot {pivot:.2f}%", font=dict(size=10), yanchor="bottom"),
                          annotation_position="bottom right")

    xl, xh = accuracy_interval(frame["x_acc"], frame["x_n"], ci)
    yl, yh = accuracy_interval(frame["y_acc"], frame["y_n"], ci)
    err = {
        "xm": xs - transform(xl, scale), "xp": transform(xh, scale) - xs,
        "ym": ys - transform(yl, scale), "yp": transform(yh, scale) - ys,
    }
    err = {k: np.where(np.isfinite(v), np.abs(v), 0.0) for k, v in err.items()}
    er_values = er["effective_robustness"].reindex(frame.index) if er is not None else None
    names = [plotly_text(m) for m in frame.index]
    marked = [m for m in dict.fromkeys(highlight) if m in frame.index]
    is_marked = frame.index.isin(marked)
    styles = type_styles(list(frame["model_type"]))

    def points(idx: np.ndarray, name: str, type_text: str | None, marker: dict, bar_colour: str) -> go.Scatter:
        xa, ya = _round(frame["x_acc"].to_numpy()[idx], 2), _round(frame["y_acc"].to_numpy()[idx], 2)
        custom = [[names[i], a, b] for i, a, b in zip(idx, xa, ya)]
        er_line = ""
        if er_values is not None:
            custom = [c + [e] for c, e in zip(custom, _round(er_values.to_numpy()[idx], 2))]
            er_line = "<br>effective robustness: %{customdata[3]:+.2f} pp"
        if type_text is None:               # a mixed trace (your models): each point's type in its hover
            custom = [c + [plotly_text(f"{styles[t][1]} ({t})")]
                      for c, t in zip(custom, frame["model_type"].to_numpy()[idx])]
            type_text = "%{customdata[" + str(len(custom[0]) - 1) + "]}"
        return go.Scatter(
            x=_round(xs[idx], 4), y=_round(ys[idx], 4), mode="markers", name=name, customdata=custom,
            hovertemplate=("<b>%{customdata[0]}</b><br>" + type_text + "<br>" +
                           plotly_text(x) + ": %{customdata[1]:.2f}%<br>" + plotly_text(y) +
                           ": %{customdata[2]:.2f}%" + er_line + "<extra></extra>"),
            marker=marker,
            error_x=dict(type="data", symmetric=False, array=_round(err["xp"][idx], 4),
                         arrayminus=_round(err["xm"][idx], 4), color=bar_colour, thickness=0.7, width=0),
            error_y=dict(type="data", symmetric=False, array=_round(err["yp"][idx], 4),
                         arrayminus=_round(err["ym"][idx], 4), color=bar_colour, thickness=0.7, width=0))

    for mtype, (colour, label) in styles.items():
        idx = np.flatnonzero((frame["model_type"] == mtype).to_numpy() & ~is_marked)
        if len(idx):
            fig.add_trace(points(idx, plotly_text(f"{label} ({len(idx)})"), plotly_text(f"{label} ({mtype})"),
                                 dict(color=colour, size=7, opacity=0.85, line=dict(color="white", width=0.5)),
                                 colour))
    if marked:
        at = np.array([frame.index.get_loc(m) for m in marked])
        fig.add_trace(points(at, HIGHLIGHT_LABEL, None, dict(color=HIGHLIGHT_COLOUR, size=STAR_PX, symbol="star",
                                                               line=dict(color="black", width=1)), "black"))
        legend_rows = [str(t.name) for t in fig.data if t.showlegend is not False]
        _annotate_highlighted(fig, [names[i] for i in at], xs[at], ys[at], xs, ys, (x_lo, x_hi, y_lo, y_hi),
                              fit, legend_rows)

    _layout(fig, plotly_text(title), plotly_text(f"{x} accuracy ({scale} scale)"),
            plotly_text(f"{y} accuracy ({scale} scale)"))
    for axis, lo, hi in (("x", x_lo, x_hi), ("y", y_lo, y_hi)):
        ticks = _ticks(float(inverse(lo, scale)), float(inverse(hi, scale)), scale)
        update = fig.update_xaxes if axis == "x" else fig.update_yaxes
        update(range=[lo, hi], tickmode="array", tickvals=_round(transform(ticks, scale), 4),
               ticktext=[_fmt(t) for t in ticks])
    return fig


STAR_PX = 17
LABEL_FONT = 11


def _annotate_highlighted(fig: go.Figure, labels: list[str], mx: np.ndarray, my: np.ndarray, xs: np.ndarray,
                          ys: np.ndarray, view: tuple[float, float, float, float], fit: TrendFit | None,
                          legend_rows: list[str]) -> None:
    """One annotation per highlighted point: the label's box in free space (placed in an assumed
    :data:`PLOT_AREA` of pixels, text and legend sizes estimated from their characters), its
    centre given in data coordinates (``axref="x"``) and a leader line to the point."""
    x_lo, x_hi, y_lo, y_hi = view
    width, height = PLOT_AREA
    sx, sy = width / (x_hi - x_lo), height / (y_hi - y_lo)

    def px(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.column_stack([(np.asarray(a) - x_lo) * sx, (np.asarray(b) - y_lo) * sy])

    char = 0.62 * LABEL_FONT
    sizes = np.array([[char * len(t) + 10, LABEL_FONT * 1.35 + 8] for t in labels])
    longest = max((len(r) for r in legend_rows), default=0)
    blocked = [(0.0, height - (10 + 19 * len(legend_rows)) - 0.01 * height, 0.01 * width + 46 + char * longest, height)]
    if fit is not None and fit.kind == "piecewise":                           # the pivot's note, bottom right
        p = (float(transform(getattr(fit, "pivot"), fit.scale)) - x_lo) * sx
        blocked.append((p, 0.0, p + 0.62 * 10 * 14 + 8, 10 * 1.35 + 8))

    def below(cx: np.ndarray, cy: np.ndarray) -> np.ndarray:
        dx = cx / sx + x_lo
        line = fit.predict_scaled(dx) if fit is not None else dx                 # the trend, else y = x
        return cy < (line - y_lo) * sy

    stars = px(mx, my)
    centres = place_labels(stars, sizes, np.vstack([px(xs, ys), stars]),
                           np.concatenate([np.full(len(xs), 5.0), np.full(len(stars), STAR_PX / 2 + 1.0)]),
                           (2.0, 2.0, width - 2.0, height - 2.0), blocked=blocked, below=below)
    for text, (x0, y0), (cx, cy) in zip(labels, np.column_stack([mx, my]), centres):
        fig.add_annotation(
            x=round(float(x0), 4), y=round(float(y0), 4), ax=round(float(cx / sx + x_lo), 4),
            ay=round(float(cy / sy + y_lo), 4), xref="x", yref="y", axref="x", ayref="y", text=text,
            showarrow=True, arrowhead=0, arrowwidth=0.8, arrowcolor="#444", standoff=STAR_PX / 2,
            xanchor="center", yanchor="middle", bgcolor="rgba(255,255,255,0.92)", bordercolor="#555",
            borderwidth=1, borderpad=2, font=dict(size=LABEL_FONT, color="#111"))


def synthetic_figure(frame: pd.DataFrame, *, natural_label: str, r: float | None, title: str) -> go.Figure:
    """Natural against synthetic effective robustness, one point per model (``frame``: indexed
    by model with ``model_type``, ``synthetic_er`` and ``natural_er`` in percentage points)."""
    fig = go.Figure()
    lo = float(np.nanmin(frame[["synthetic_er", "natural_er"]].to_numpy())) if len(frame) else -1.0
    hi = float(np.nanmax(frame[["synthetic_er", "natural_er"]].to_numpy())) if len(frame) else 1.0
    fig.add_hline(y=0, line=dict(color="#999", width=1))
    fig.add_vline(x=0, line=dict(color="#999", width=1))
    if len(frame) >= 2 and np.ptp(frame["synthetic_er"]) > 0:
        slope, intercept = np.polyfit(frame["synthetic_er"], frame["natural_er"], 1)
        gx = np.array([frame["synthetic_er"].min(), frame["synthetic_er"].max()])
        fig.add_trace(go.Scatter(x=_round(gx, 3), y=_round(slope * gx + intercept, 3), mode="lines",
                                 name="least-squares line", hoverinfo="skip", line=dict(color="black", width=1.5)))
    for mtype, (colour, label) in type_styles(list(frame["model_type"])).items():
        sub = frame[frame["model_type"] == mtype]
        custom = [[plotly_text(m), a, b] for m, a, b in
                  zip(sub.index, _round(sub["synthetic_er"], 2), _round(sub["natural_er"], 2))]
        fig.add_trace(go.Scatter(
            x=_round(sub["synthetic_er"], 3), y=_round(sub["natural_er"], 3), mode="markers",
            name=plotly_text(f"{label} ({len(sub)})"), customdata=custom,
            hovertemplate=("<b>%{customdata[0]}</b><br>" + plotly_text(f"{label} ({mtype})") +
                           "<br>synthetic ER: %{customdata[1]:+.2f} pp<br>" + plotly_text(natural_label) +
                           " ER: %{customdata[2]:+.2f} pp<extra></extra>"),
            marker=dict(color=colour, size=7, opacity=0.85, line=dict(color="white", width=0.5))))
    _layout(fig, plotly_text(title) + (f" (Pearson r = {r:.2f})" if r is not None else ""),
            "effective robustness, mean over corruptions (pp)",
            plotly_text(f"effective robustness on {natural_label} (pp)"))
    pad = 0.05 * max(hi - lo, 1.0)
    fig.update_xaxes(range=[lo - pad, hi + pad])
    return fig


def correlation_bars(table: pd.DataFrame, *, natural_label: str, title: str) -> go.Figure:
    """Horizontal bars: Pearson r of each corruption's effective robustness with the natural
    shift's (``table`` from :func:`~shiftbench.analysis.synthetic.corruption_correlations`)."""
    t = table.dropna(subset=["pearson_r"]).sort_values("pearson_r")
    colours = ["#444" if c == "synthetic_er" else ("#2b7bba" if r >= 0 else "#c44e52")
               for c, r in zip(t["corruption"], t["pearson_r"])]
    labels = [plotly_text("mean over corruptions" if c == "synthetic_er" else c) for c in t["corruption"]]
    custom = [[lab, n, p] for lab, n, p in zip(labels, t["n_models"].astype(int).tolist(), _round(t["pearson_p"], 6))]
    fig = go.Figure(go.Bar(
        x=_round(t["pearson_r"], 3), y=labels, orientation="h", marker=dict(color=colours), customdata=custom,
        hovertemplate="<b>%{customdata[0]}</b><br>Pearson r %{x:.2f} over %{customdata[1]} models"
                      "<br>p = %{customdata[2]:.2g}<extra></extra>"))
    _layout(fig, plotly_text(title), plotly_text(f"Pearson r with effective robustness on {natural_label}"), "",
            height=max(320, 26 * len(t) + 120))
    fig.update_xaxes(range=[-1, 1], zeroline=True, zerolinecolor="#999")
    fig.update_layout(showlegend=False, margin=dict(l=150))
    return fig


def calibration_figure(results: pd.DataFrame, *, title: str) -> go.Figure:
    """Expected calibration error against accuracy, one trace per setting (``results``: rows of
    a results store with ``model``, ``setting``, ``accuracy`` and ``ece`` in percent, ``nll``, ``brier``)."""
    fig = go.Figure()
    palette = [c for c, _ in TYPE_STYLE.values()] + list(EXTRA_COLOURS)
    for i, (setting, sub) in enumerate(results.groupby("setting", sort=True)):
        custom = [[plotly_text(m), a, e, n, b] for m, a, e, n, b in zip(
            sub["model"], _round(sub["accuracy"], 2), _round(sub["ece"], 2), _round(sub["nll"], 3),
            _round(sub["brier"], 4))]
        fig.add_trace(go.Scatter(
            x=_round(sub["accuracy"], 3), y=_round(sub["ece"], 3), mode="markers", name=plotly_text(setting),
            customdata=custom,
            hovertemplate=("<b>%{customdata[0]}</b><br>" + plotly_text(setting) + "<br>accuracy %{customdata[1]:.2f}%"
                           "<br>ECE %{customdata[2]:.2f}%<br>NLL %{customdata[3]:.3f}<br>Brier %{customdata[4]:.4f}"
                           "<extra></extra>"),
            marker=dict(color=palette[i % len(palette)], size=8, opacity=0.85, line=dict(color="white", width=0.5))))
    _layout(fig, plotly_text(title), "top-1 accuracy (%)", "expected calibration error (%)", height=480)
    return fig
