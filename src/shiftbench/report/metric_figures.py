"""Figures of the metric diagnostics: r² of each shift's trend per scaling (a heatmap with weak
trends marked) and the most informative settings (bars with bootstrap s.d.): one panel for the
``djolonga2021`` recipe (all groups at once), one per group for ``one-vs-standard``.

Each figure comes twice: matplotlib for the static PNG/SVG/PDF files and plotly for the HTML
report. User-supplied text (shift, setting and group names) is escaped for plotly with
:func:`~shiftbench.report.interactive.plotly_text` and for matplotlib's mathtext (``$``).
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg", force=False)
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import plotly.graph_objects as go  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from plotly.subplots import make_subplots  # noqa: E402

from shiftbench.analysis.diagnostics import r2_table  # noqa: E402
from shiftbench.report.figures import TYPE_STYLE  # noqa: E402
from shiftbench.report.interactive import FONT, plotly_text, type_styles  # noqa: E402


def _mpl(text: object) -> str:
    """Text safe from matplotlib's mathtext."""
    return str(text).replace("$", r"\$")


def _cell_marks(diag: pd.DataFrame) -> pd.DataFrame:
    """Per shift x scale: '' or a mark - '!' weak trend, '<' another scaling clearly better."""
    marks = np.where(diag["weak"], "!", "") + np.where(diag["better_scale"] != "", "<", "")
    frame = diag.assign(mark=marks)
    return frame.pivot_table(index="shift", columns="scale", values="mark", aggfunc="first", sort=False).reindex(
        index=list(dict.fromkeys(diag["shift"])), columns=list(dict.fromkeys(diag["scale"]))).fillna("")


def plot_r2_heatmap(diag: pd.DataFrame, *, title: str = "How well does ID accuracy predict shifted accuracy?") -> Figure:
    """Heatmap of r² (shift x scaling) from :func:`~shiftbench.analysis.diagnostics.trend_diagnostics`;
    cells marked ``!`` are weak (r² below the threshold), ``<`` where another scaling is clearly better."""
    r2 = r2_table(diag)
    marks = _cell_marks(diag)
    fig, ax = plt.subplots(figsize=(2.2 + 1.1 * r2.shape[1], 1.0 + 0.34 * len(r2)), dpi=120)
    ax.imshow(r2.to_numpy(dtype=float), cmap="viridis", vmin=0, vmax=1, aspect="auto")
    for i in range(r2.shape[0]):
        for j in range(r2.shape[1]):
            v = r2.iat[i, j]
            text = "–" if not np.isfinite(v) else f"{v:.3f}{marks.iat[i, j]}"
            ax.text(j, i, text, ha="center", va="center", fontsize=8,
                    color="black" if np.isfinite(v) and v > 0.6 else "white")
    ax.set_xticks(range(r2.shape[1]), [_mpl(c) for c in r2.columns])
    ax.set_yticks(range(len(r2)), [_mpl(s) for s in r2.index], fontsize=8)
    ax.set_title(_mpl(title), fontsize=10)
    ax.set_xlabel(f"scaling  (! r² < {diag.attrs.get('weak_r2', 0.5):g};  < another scaling is clearly better)",
                  fontsize=8)
    fig.tight_layout()
    return fig


def r2_heatmap_figure(diag: pd.DataFrame, *, title: str) -> go.Figure:
    """The interactive twin of :func:`plot_r2_heatmap` (hover: r², slope, models, flags)."""
    r2 = r2_table(diag)
    marks = _cell_marks(diag)
    by = diag.set_index(["shift", "scale"])
    hover, text = [], []
    for s in r2.index:
        hover.append([])
        text.append([])
        for c in r2.columns:
            row = by.loc[(s, c)]
            v = float(row["r2"])
            flag = ("weak trend; " if row["weak"] else "") + (
                f"{row['better_scale']} fits clearly better" if row["better_scale"] else "")
            hover[-1].append(plotly_text(f"{s} ({row['x']} → {row['y']}), {c}: " + (
                f"r² {v:.3f}, slope {row['slope']:.3f}, {int(row['n_models'])} models" if np.isfinite(v)
                else str(row["error"])) + (f"; {flag}" if flag else "")))
            text[-1].append("–" if not np.isfinite(v) else f"{v:.3f}{marks.loc[s, c]}")
    values = [[None if not np.isfinite(v) else round(float(v), 4) for v in row] for row in r2.to_numpy(dtype=float)]
    fig = go.Figure(go.Heatmap(
        z=values, x=[plotly_text(c) for c in r2.columns], y=[plotly_text(s) for s in r2.index], zmin=0, zmax=1,
        colorscale="Viridis", text=text, texttemplate="%{text}", hovertext=hover, hoverinfo="text",
        colorbar=dict(title=dict(text="r²"))))
    fig.update_layout(template="none", font=FONT, title=dict(text=plotly_text(title), x=0.012, font=dict(size=14)),
                      height=int(140 + 28 * len(r2)), margin=dict(l=20, r=20, t=60, b=40),
                      yaxis=dict(autorange="reversed", automargin=True), paper_bgcolor="white", plot_bgcolor="white")
    return fig


def _groups(ranking: pd.DataFrame) -> list[str]:
    """The panels: the ranking's ``group`` labels (``"all"`` for ``djolonga2021``), in order."""
    return list(dict.fromkeys(ranking["group"]))


def _colour(group: str, groups: list[str]) -> str:
    return type_styles(groups)[group][0] if group not in TYPE_STYLE else TYPE_STYLE[group][0]


def _one_vs(top: pd.DataFrame) -> bool:
    return "method" in top and (top["method"] == "one-vs-standard").any()


def _score(top: pd.DataFrame) -> str:
    return "balanced accuracy" if _one_vs(top) else "accuracy"


def _task(group: str, top: pd.DataFrame) -> str:
    """A panel's title: the group against the baseline, or the multinomial task over all groups."""
    if _one_vs(top):
        return f"{group} vs {top.attrs.get('baseline') or 'STANDARD'}"
    groups = top.attrs.get("groups") or []
    return f"predicting the group among {len(groups)} types" if groups else "predicting the group"


def plot_informativeness(top: pd.DataFrame, *, title: str = "Most informative settings beyond ID accuracy") -> Figure:
    """One panel per task: the gain (bootstrap mean ± s.d., points of accuracy) of its
    most informative settings (``top``: :func:`~shiftbench.analysis.informativeness.top_informative`)."""
    groups = [g for g in _groups(top) if g in set(top["group"])]
    k = max(int(top.groupby("group").size().max()), 1)
    fig, axes = plt.subplots(len(groups), 1, figsize=(7.5, 0.6 + len(groups) * (0.8 + 0.26 * k)), dpi=120,
                             squeeze=False)
    for ax, g in zip(axes[:, 0], groups):
        rows = top[top["group"] == g].iloc[::-1]
        ax.barh([_mpl(s) for s in rows["setting"]], rows["gain_mean"], xerr=rows["gain_sd"],
                color=_colour(g, groups), alpha=0.85, error_kw=dict(ecolor="0.3", lw=0.8, capsize=2))
        ax.axvline(0, color="0.4", lw=0.8)
        ax.tick_params(axis="y", labelsize=7)
        ax.set_title(_mpl(f"{_task(g, top)} (up to {int(rows['n_models'].max())} models; "
                          f"{top.attrs.get('x', 'ID')} alone: {rows['score_id'].mean():.1f}% {_score(top)})"),
                     fontsize=9)
    axes[-1, 0].set_xlabel(f"gain in {_score(top)} from adding the setting (points; mean ± s.d.)")
    fig.suptitle(_mpl(title), fontsize=10)
    fig.tight_layout()
    return fig


def informativeness_figure(top: pd.DataFrame, *, title: str) -> go.Figure:
    """The interactive twin of :func:`plot_informativeness`: one row of bars per group."""
    groups = [g for g in _groups(top) if g in set(top["group"])]
    k = max(int(top.groupby("group").size().max()), 1)
    fig = make_subplots(rows=len(groups), cols=1, vertical_spacing=0.25 / max(len(groups), 1),
                        subplot_titles=[plotly_text(_task(g, top)) for g in groups])
    for i, g in enumerate(groups, start=1):
        rows = top[top["group"] == g].iloc[::-1]
        hover = [plotly_text(f"{r.setting}: gain {r.gain_mean:+.1f} ± {r.gain_sd:.1f} (on the data {r.gain:+.1f}); "
                             f"{_score(top)} {r.score_id:.1f}% → {r.score_metric:.1f}%; "
                             f"{r.n_models} models ({r.models_per_group})") for r in rows.itertuples()]
        fig.add_trace(go.Bar(
            x=[round(float(v), 2) for v in rows["gain_mean"]], y=[plotly_text(s) for s in rows["setting"]],
            orientation="h", name=plotly_text(g), marker_color=_colour(g, groups),
            error_x=dict(type="data", array=[round(float(v), 2) for v in rows["gain_sd"]], color="#444", thickness=1),
            hovertext=hover, hoverinfo="text"), row=i, col=1)
        fig.update_xaxes(title_text=f"gain in {_score(top)} (points)" if i == len(groups) else None,
                         zeroline=True, zerolinecolor="#888", gridcolor="#e6e6e6", row=i, col=1)
    # the title at the top (clear of the subplot titles under it), no blank band above it
    fig.update_layout(template="none", font=FONT, showlegend=False, paper_bgcolor="white", plot_bgcolor="white",
                      title=dict(text=plotly_text(title), x=0.012, y=1, yref="container", yanchor="top",
                                 pad=dict(t=10), font=dict(size=14)),
                      height=int(104 + len(groups) * (70 + 21 * k)), margin=dict(l=20, r=20, t=64, b=50))
    fig.update_yaxes(automargin=True)   # the setting names set the left margin: none is cut off
    return fig
