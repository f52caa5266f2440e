"""Interactive plotly figures for the HTML report (the static twins are in :mod:`.figures`).

Every figure is kept lean so that a report over 1,556 models stays a few MB: one trace per
model type (legend clicks toggle a type), numbers rounded to what the eye can see, the
bootstrap band as one filled polygon, and no plotly template (it would be repeated in every
figure). Text that comes from users' tables - model names, model types, setting names - is
HTML-escaped before it reaches plotly (:func:`plotly_text`), so plotly shows it as text.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from shiftbench.analysis.intervals import accuracy_interval
from shiftbench.analysis.scaling import inverse, transform
from shiftbench.analysis.trend import Band, TrendFit, TwoLineBand, TwoLineTrendFit
from shiftbench.report.figures import (  # noqa: I001  (pivot_label, trend_label: shared with the static figures)
    pivot_label,
    trend_label,
    DENSE_POINTS,
    EXTRA_COLOURS,
    HIGHLIGHT_COLOUR,
    HIGHLIGHT_LABEL,
    PLOTLY_SYMBOL,
    TYPE_STYLE,
    View,
    _fmt,
    _ticks,
    axis_title,
    draw_order,
    fitted_types,
    place_labels,
    trend_views,
    type_looks,
)
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
    """Colour and legend label of each model type, in :data:`TYPE_STYLE` order, then the rest
    (:func:`~shiftbench.report.figures.type_looks` adds each type's marker)."""
    return {t: (look.colour, look.label) for t, look in type_looks(types).items()}


def _rows(rows: list[list]) -> np.ndarray:
    """Per-point hover rows as one object array: plotly takes a NumPy array as it is, where it
    validates a list of lists element by element (15x slower on 1,556 models; the same JSON)."""
    return np.array(rows, dtype=object)


def _round(values: np.ndarray | pd.Series, digits: int) -> list[float | None]:
    arr = np.round(np.asarray(values, dtype=float), digits)
    return [None if not np.isfinite(v) else float(v) for v in arr]


def _layout(fig: go.Figure, title: str, x_title: str, y_title: str, height: int = 560, *,
            legend_outside: bool = False, top: int = 70, extra: dict | None = None) -> None:
    """The house layout: the title at the top left of the figure, in a top margin of ``top``
    pixels, so the modebar (top right, shown on hover) never sits on it; the legend inside the
    plot's top left corner or, with ``legend_outside``, to the right of the plot area."""
    legend = (dict(x=1.02, y=1.0, xanchor="left", yanchor="top") if legend_outside
              else dict(x=0.01, y=0.99, xanchor="left", yanchor="top"))
    house = dict(
        template="none", height=height, font=FONT, paper_bgcolor="white", plot_bgcolor="white",
        title=dict(text=title, x=0.012, xanchor="left", y=1.0, yref="container", yanchor="top",
                   pad=dict(t=10), font=dict(size=14)),
        margin=dict(l=70, r=20, t=top, b=60), hovermode="closest",
        legend=dict(bgcolor="rgba(255,255,255,0.85)", bordercolor="#ccc", borderwidth=1, font=dict(size=11),
                    **legend),
        hoverlabel=dict(align="left", font=dict(size=12)))
    axis = dict(showgrid=True, gridcolor=GRID, zeroline=False, linecolor="#888", showline=True, mirror=True,
                ticks="outside", tickcolor="#888")
    current = fig.layout.to_plotly_json()
    for letter, text in (("x", x_title), ("y", y_title)):       # every x (y) axis, as update_xaxes would
        for name in {f"{letter}axis", *(k for k in current if re.fullmatch(f"{letter}axis\\d*", k))}:
            house[name] = dict(title=dict(text=text), **axis)
    # one assignment, validated once: update_layout's relayout machinery took 15 ms a figure (2 s a report);
    # ``extra`` (nested dicts) goes in the same assignment
    fig.layout = _merged(_merged(current, house), extra or {})


def _merged(base: dict, update: dict) -> dict:
    """``base`` with ``update`` merged in, nested dicts key by key (``update_layout``'s rule)."""
    out = dict(base)
    for k, v in update.items():
        out[k] = _merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def trend_figure(
    frame: pd.DataFrame,
    *,
    x: str,
    y: str,
    title: str,
    fit: TrendFit | TwoLineTrendFit | None = None,
    band: Band | TwoLineBand | None = None,
    er: pd.DataFrame | None = None,
    scale: str = "logit",
    confidence: float = 0.995,
    highlight: Sequence[str] = (),
    zoom: bool = True,
) -> go.Figure:
    """Shifted against in-distribution accuracy in ``scale`` coordinates (ticks in percent).

    ``frame`` is :meth:`Testbed.paired` output (``x_acc, y_acc, x_n, y_n, model_type``, indexed
    by model). With ``fit``: the trend, its ``band`` (drawn over the fitted models' x range)
    and, for a piecewise trend, the pivot; a two-line trend (ImageNet-A, recipe ``taori2020``)
    draws both lines, each on its side of the pivot with its own band. Points carry ``confidence``
    Clopper-Pearson bars and hover with the model's name, type, both accuracies and (with ``er``)
    effective robustness. Each
    model type has its own colour and marker; the fitted-on types are drawn after (on top of)
    the others, and the legend, to the right of the plot, lists types in the usual order.
    ``highlight`` models (those in ``frame``) are drawn last, as large gold stars with a black
    outline in a trace named "your models", each labelled by an annotation placed in free space
    with a leader line.

    With ``zoom`` (the default) the axes open on the models that matter (the rule is
    :func:`~shiftbench.report.figures.trend_views`: from the least accurate fitted-on model up)
    and two buttons above the plot switch between "zoom: models that matter" and "all N models";
    without a fit, or when the zoom leaves no model out, there are no buttons. Above
    :data:`~shiftbench.report.figures.DENSE_POINTS` models the markers are small and translucent.
    """
    scale = fit.scale if fit is not None else scale
    fig = go.Figure()
    xs = transform(frame["x_acc"], scale, frame["x_n"])
    ys = transform(frame["y_acc"], scale, frame["y_n"])
    marked = [m for m in dict.fromkeys(highlight) if m in frame.index]
    is_marked = frame.index.isin(marked)
    full, view, inside = trend_views(xs, ys, fit if zoom else None, is_marked)
    x_lo, x_hi = full.x_lo, full.x_hi               # lines run across every model, for the "all" view

    fig.add_trace(go.Scatter(x=[x_lo, x_hi], y=[x_lo, x_hi], mode="lines", name="y = x", hoverinfo="skip",
                             line=dict(color="#777", dash="dash", width=1), legendrank=1))
    if fit is not None and band is not None:
        shown_band = False
        for (line, lo, hi), (b, _, _) in zip(fit.segments(), band.segments()):
            gx = transform(b.grid, scale)
            fx_lo, fx_hi = transform(line.x_range[0], scale), transform(line.x_range[1], scale)
            keep = (gx >= max(x_lo, fx_lo)) & (gx <= min(x_hi, fx_hi)) & (gx > lo) & (gx <= hi)
            if keep.sum() >= 2:
                bx = np.concatenate([gx[keep], gx[keep][::-1]])
                by = np.concatenate([b.upper_scaled[keep], b.lower_scaled[keep][::-1]])
                fig.add_trace(go.Scatter(
                    x=_round(bx, 4), y=_round(by, 4), mode="lines", fill="toself", fillcolor="rgba(0,0,0,0.13)",
                    line=dict(width=0), hoverinfo="skip", name=f"{band.confidence:.0%} bootstrap band",
                    legendgroup="band", showlegend=not shown_band, legendrank=3))
                shown_band = True
    if fit is not None:
        drawn = 0
        for line, lo, hi in fit.segments():
            a, b = max(x_lo, lo), min(x_hi, hi)
            if a >= b:
                continue
            knots = [a, b]
            if fit.kind == "piecewise":
                p = float(transform(getattr(fit, "pivot"), scale))
                knots = sorted({a, min(max(p, a), b), b})
            fig.add_trace(go.Scatter(x=_round(knots, 4), y=_round(line.predict_scaled(knots), 4), mode="lines",
                                     name=trend_label(fit), hoverinfo="skip", line=dict(color="black", width=2),
                                     legendgroup="trend", showlegend=drawn == 0, legendrank=2))
            drawn += 1
        if fit.kind == "two-line":
            fig.add_vline(x=float(getattr(fit, "pivot_scaled")), line=dict(color="#555", dash="dot", width=1),
                          annotation=dict(text=plotly_text(pivot_label(fit)), font=dict(size=10), yanchor="bottom"),
                          annotation_position="bottom right")
        if fit.kind == "piecewise":
            pivot = float(getattr(fit, "pivot"))
            fig.add_vline(x=float(transform(pivot, scale)), line=dict(color="#555", dash="dot", width=1),
                          annotation=dict(text=f"pivot {pivot:.2f}%", font=dict(size=10), yanchor="bottom"),
                          annotation_position="bottom right")

    xl, xh = accuracy_interval(frame["x_acc"], frame["x_n"], confidence)
    yl, yh = accuracy_interval(frame["y_acc"], frame["y_n"], confidence)
    err = {
        "xm": xs - transform(xl, scale), "xp": transform(xh, scale) - xs,
        "ym": ys - transform(yl, scale), "yp": transform(yh, scale) - ys,
    }
    err = {k: np.where(np.isfinite(v), np.abs(v), 0.0) for k, v in err.items()}
    er_values = er["effective_robustness"].reindex(frame.index) if er is not None else None
    names = [plotly_text(m) for m in frame.index]
    looks = type_looks(frame["model_type"])
    dense = len(frame) > DENSE_POINTS

    def points(idx: np.ndarray, name: str, type_text: str | None, marker: dict, bar_colour: str | None) -> go.Scatter:
        xa, ya = _round(frame["x_acc"].to_numpy()[idx], 2), _round(frame["y_acc"].to_numpy()[idx], 2)
        custom = [[names[i], a, b] for i, a, b in zip(idx, xa, ya)]
        er_line = ""
        if er_values is not None:
            custom = [c + [e] for c, e in zip(custom, _round(er_values.to_numpy()[idx], 2))]
            er_line = "<br>effective robustness: %{customdata[3]:+.2f} pp"
        if type_text is None:               # a mixed trace (your models): each point's type in its hover
            custom = [c + [plotly_text(f"{looks[t].label} ({t})")]
                      for c, t in zip(custom, frame["model_type"].to_numpy()[idx])]
            type_text = "%{customdata[" + str(len(custom[0]) - 1) + "]}"
        bars = {}
        if bar_colour is not None:          # a dense cloud reads better without bars
            bars = dict(
                error_x=dict(type="data", symmetric=False, array=_round(err["xp"][idx], 4),
                             arrayminus=_round(err["xm"][idx], 4), color=bar_colour, thickness=0.7, width=0),
                error_y=dict(type="data", symmetric=False, array=_round(err["yp"][idx], 4),
                             arrayminus=_round(err["ym"][idx], 4), color=bar_colour, thickness=0.7, width=0))
        return go.Scatter(
            x=_round(xs[idx], 4), y=_round(ys[idx], 4), mode="markers", name=name, customdata=_rows(custom),
            hovertemplate=("<b>%{customdata[0]}</b><br>" + type_text + "<br>" +
                           plotly_text(x) + ": %{customdata[1]:.2f}%<br>" + plotly_text(y) +
                           ": %{customdata[2]:.2f}%" + er_line + "<extra></extra>"),
            marker=marker, **bars)

    rank = {t: 10 + i for i, t in enumerate(looks)}        # legend in the usual type order
    for mtype in draw_order(looks, fitted_types(frame, fit)):
        idx = np.flatnonzero((frame["model_type"] == mtype).to_numpy() & ~is_marked)
        if not len(idx):
            continue
        look = looks[mtype]
        marker = dict(color=look.colour, symbol=PLOTLY_SYMBOL.get(look.marker, "circle"),
                      size=POINT_PX_DENSE if dense else POINT_PX, opacity=0.35 if dense else 0.85,
                      line=dict(color=look.edge, width=0 if dense else 0.5))
        trace = points(idx, plotly_text(f"{look.label} ({len(idx)})"), plotly_text(f"{look.label} ({mtype})"),
                       marker, None if dense else look.colour)
        trace.legendrank = rank[mtype]
        fig.add_trace(trace)
    if marked:
        at = np.array([frame.index.get_loc(m) for m in marked])
        trace = points(at, HIGHLIGHT_LABEL, None, dict(color=HIGHLIGHT_COLOUR, size=STAR_PX, symbol="star",
                                                       line=dict(color="black", width=1)), "black")
        trace.legendrank = 100
        fig.add_trace(trace)
        _annotate_highlighted(fig, [names[i] for i in at], xs[at], ys[at], xs, ys, tuple(view), fit, [])

    zoomed = view != full
    axes: dict[str, dict] = {"xaxis": {"tickmode": "array"}, "yaxis": {"tickmode": "array"}}
    for key, value in _view_layout(view, scale).items():
        axis, prop = key.split(".")
        axes[axis][prop] = value
    _layout(fig, plotly_text(title), plotly_text(axis_title(x, scale)), plotly_text(axis_title(y, scale)),
            # the zoom buttons sit between the title and the plot: 10 px more than the plain figure's top
            height=580 if zoomed else 540, legend_outside=True, top=80 if zoomed else 50,
            # small dense markers stay visible in the legend
            extra={"legend": {"itemsizing": "constant"}, **axes})
    if zoomed:
        n_out = int((~inside).sum())
        fig.update_layout(updatemenus=[dict(
            type="buttons", direction="right", showactive=True, active=0, x=0.0, xanchor="left", y=1.0,
            yanchor="bottom", pad=dict(b=8, l=0), bgcolor="white", bordercolor="#bbb", font=dict(size=11),
            buttons=[dict(label="zoom: models that matter", method="relayout", args=[_view_layout(view, scale)]),
                     dict(label=f"all {len(frame)} models ({n_out} more)", method="relayout",
                          args=[_view_layout(full, scale)])])])
    return fig


def _view_layout(view: View, scale: str) -> dict:
    """The relayout of both axes to ``view``: ranges and ticks in percent (flat keys, so the same
    dict serves ``update_layout`` and a button's ``relayout``)."""
    out = {}
    for axis, lo, hi in (("xaxis", view.x_lo, view.x_hi), ("yaxis", view.y_lo, view.y_hi)):
        ticks = _ticks(float(inverse(lo, scale)), float(inverse(hi, scale)), scale)
        out[f"{axis}.range"] = [round(lo, 4), round(hi, 4)]
        out[f"{axis}.tickvals"] = _round(transform(ticks, scale), 4)
        out[f"{axis}.ticktext"] = [_fmt(t) for t in ticks]
    return out


#: Marker sizes (pixels): highlighted stars, every other model's point, points of a dense testbed.
STAR_PX, POINT_PX, POINT_PX_DENSE = 17, 7, 4
LABEL_FONT = 11


def _annotate_highlighted(fig: go.Figure, labels: list[str], mx: np.ndarray, my: np.ndarray, xs: np.ndarray,
                          ys: np.ndarray, view: tuple[float, float, float, float], fit: TrendFit | None,
                          legend_rows: list[str]) -> None:
    """One annotation per highlighted point: the label's box in free space (placed in an assumed
    :data:`PLOT_AREA` of pixels showing ``view``, text and legend sizes estimated from their
    characters; ``legend_rows`` empty: the legend is outside the plot), its centre given in data
    coordinates (``axref="x"``) and a leader line to the point. Labels never overlap each other
    or a marker in that area (:func:`~shiftbench.report.figures.place_labels`)."""
    x_lo, x_hi, y_lo, y_hi = view
    width, height = PLOT_AREA
    sx, sy = width / (x_hi - x_lo), height / (y_hi - y_lo)

    def px(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.column_stack([(np.asarray(a) - x_lo) * sx, (np.asarray(b) - y_lo) * sy])

    char = 0.62 * LABEL_FONT
    sizes = np.array([[char * len(t) + 10, LABEL_FONT * 1.35 + 8] for t in labels])
    longest = max((len(r) for r in legend_rows), default=0)
    blocked = ([(0.0, height - (10 + 19 * len(legend_rows)) - 0.01 * height, 0.01 * width + 46 + char * longest,
                 height)] if legend_rows else [])                     # a legend inside the plot, top left
    if fit is not None and fit.kind in ("piecewise", "two-line"):             # the pivot's note, bottom right
        p = (float(transform(getattr(fit, "pivot"), fit.scale)) - x_lo) * sx
        chars = len(pivot_label(fit)) if fit.kind == "two-line" else 14    # "pivot 86.10%" and its box
        blocked.append((p, 0.0, p + 0.62 * 10 * chars + 8, 10 * 1.35 + 8))

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


def synthetic_figure(frame: pd.DataFrame, *, natural_label: str, r: float | None, title: str,
                     synthetic_label: str = "effective robustness, mean over corruptions (pp)") -> go.Figure:
    """Natural against synthetic effective robustness, one point per model (``frame``: indexed
    by model with ``model_type``, ``synthetic_er`` and ``natural_er`` in percentage points;
    ``synthetic_label``: the x axis, what the recipe averaged)."""
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
            name=plotly_text(f"{label} ({len(sub)})"), customdata=_rows(custom),
            hovertemplate=("<b>%{customdata[0]}</b><br>" + plotly_text(f"{label} ({mtype})") +
                           "<br>synthetic ER: %{customdata[1]:+.2f} pp<br>" + plotly_text(natural_label) +
                           " ER: %{customdata[2]:+.2f} pp<extra></extra>"),
            marker=dict(color=colour, size=7, opacity=0.85, line=dict(color="white", width=0.5))))
    _layout(fig, plotly_text(title) + (f" (Pearson r = {r:.2f})" if r is not None else ""),
            plotly_text(synthetic_label),
            plotly_text(f"effective robustness on {natural_label} (pp)"), height=540)   # half a page wide
    # the legend in rows under the axis title: half a page has no room beside the plot, and inside
    # it covered points
    fig.update_layout(legend=dict(orientation="h", x=0.0, xanchor="left", y=-0.2, yanchor="top"),
                      margin=dict(b=120))
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
            height=max(320, 20 * len(t) + 120))
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
