"""Model-similarity matrices sorted by accuracy: a static matplotlib figure and plotly heatmaps.

Both show a :class:`~shiftbench.analysis.similarity.ModelSimilarity`: the dominance probability
(Mania & Sra 2020) and the error consistency kappa (Geirhos et al. 2020) of every pair of
models, rows and columns ordered from the least to the most accurate model, study variants
(``name@res40``) after the models, past a line (:func:`kept_apart`). With more than
``max_models`` models the matrix shows ``max_models`` of them spaced evenly in accuracy rank
(least and most accurate always kept), so that a report over hundreds of models stays small.
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg", force=False)
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import plotly.graph_objects as go  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from shiftbench.analysis.similarity import ModelSimilarity  # noqa: E402
from shiftbench.errors import ConfigError  # noqa: E402
from shiftbench.report.interactive import FONT, plotly_text  # noqa: E402

#: Matrix size drawn in reports by default.
MAX_MODELS = 60
#: ``which`` -> (attribute, label, matplotlib colour map, plotly colour scale (drawn reversed, to match
#: the ``_r`` maps: high values dark / red), value range or None for [0, max]).
MATRICES = {
    "dominance_probability": ("dominance", "dominance probability", "magma_r", "Magma", None),
    "error_consistency": ("error_consistency", "error consistency (κ)", "RdBu_r", "RdBu", (-1.0, 1.0)),
}


def spread_models(sim: ModelSimilarity, max_models: int = MAX_MODELS) -> list[str]:
    """At most ``max_models`` models of ``sim``, evenly spaced in accuracy rank (ends kept)."""
    if max_models < 2:
        raise ConfigError(f"max_models={max_models}: a similarity matrix needs at least 2 models")
    models = sim.models
    if len(models) <= max_models:
        return models
    picks = np.unique(np.round(np.linspace(0, len(models) - 1, max_models)).astype(int))
    return [models[i] for i in picks]


def kept_apart(models: list[str]) -> tuple[list[str], int]:
    """``models`` (in accuracy order) with the study variants (``name@res40``, ``name@step5``: one
    model evaluated under a study's setting) after the models themselves, each part still in
    accuracy order; and how many come before the variants. Interleaved, a model's variants would
    read as a block of near-identical models."""
    base = [m for m in models if "@" not in m]
    return base + [m for m in models if "@" in m], len(base)


def _matrix(sim: ModelSimilarity, which: str):
    if which not in MATRICES:
        raise ConfigError(f"unknown similarity matrix {which!r}; use one of {', '.join(MATRICES)}")
    attr, label, cmap, scale, limits = MATRICES[which]
    order, _ = kept_apart(sim.models)
    frame = getattr(sim, attr).loc[order, order]
    values = frame.to_numpy(dtype=float)
    if limits is None:
        off = values[~np.eye(len(values), dtype=bool)]
        top = float(np.nanmax(off)) if off.size and np.isfinite(off).any() else 0.0
        limits = (0.0, max(top, 1e-9))
    return frame, values, label, cmap, scale, limits


def _order_words(n: int, n_base: int) -> str:
    """What runs along a matrix's axes: the models by accuracy, then past a line their study variants."""
    return ("models, least to most accurate" if n_base in (0, n) else
            f"{n_base} models | {n - n_base} variants (name@…), by accuracy")


def plot_similarity_matrices(sim: ModelSimilarity, *, max_models: int = MAX_MODELS, title: str | None = None) -> Figure:
    """Dominance probability and error consistency side by side, models sorted by accuracy
    (least accurate at the top left). Model names label the axes up to 40 models."""
    shown = sim.subset(spread_models(sim, max_models))
    n = len(shown.models)
    size = min(6.0, 2.5 + 0.09 * n)
    fig, axes = plt.subplots(1, 2, figsize=(2 * size + 1.8, size + 0.9), dpi=120)
    order, n_base = kept_apart(shown.models)
    names = [f"{m} ({shown.accuracy[m]:.1f}%)" for m in order]
    for ax, which in zip(axes, MATRICES):
        _, values, label, cmap, _, (lo, hi) = _matrix(shown, which)
        image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=lo, vmax=hi, interpolation="nearest")
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.03)
        if 0 < n_base < n:   # the study variants after the models, past a line
            ax.axhline(n_base - 0.5, color="black", lw=0.8)
            ax.axvline(n_base - 0.5, color="black", lw=0.8)
        ax.set_title(label, fontsize=10)
        if n <= 40:
            fs = 7 if n <= 15 else 5
            ax.set_xticks(range(n), names, rotation=90, fontsize=fs)
            ax.set_yticks(range(n), names, fontsize=fs)
        else:               # too many for names: the axis says what runs along it (as the HTML's)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_xlabel(_order_words(n, n_base), fontsize=8)
            ax.set_ylabel(_order_words(n, n_base), fontsize=8)
    more = f"; {n} of {len(sim.models)} models, evenly spaced in accuracy" if n < len(sim.models) else ""
    fig.suptitle(title or f"Model similarity on {sim.setting} ({sim.n_examples:,} examples{more})", fontsize=10)
    fig.tight_layout()
    return fig


def similarity_heatmap(sim: ModelSimilarity, which: str = "dominance_probability", *,
                       max_models: int = MAX_MODELS, title: str | None = None,
                       with_setting: bool = True) -> go.Figure:
    """One similarity matrix as an interactive heatmap, models sorted by accuracy (least accurate
    first), labelled ``name (accuracy%)``; hover shows both models and the value. The default
    title names the setting unless ``with_setting=False`` (a short title for a half-page figure
    under a heading that names it)."""
    shown = sim.subset(spread_models(sim, max_models))
    _, values, label, _, scale, (lo, hi) = _matrix(shown, which)
    n = len(shown.models)
    # accuracies go into the labels, so hover needs no per-cell customdata (a lean figure)
    order, n_base = kept_apart(shown.models)
    names = [plotly_text(f"{m} ({shown.accuracy[m]:.1f}%)") for m in order]
    z = [[None if not np.isfinite(v) else round(float(v), 4) for v in row] for row in values]
    fig = go.Figure(go.Heatmap(
        z=z, x=names, y=names, zmin=lo, zmax=hi, colorscale=scale, reversescale=True,
        colorbar=dict(title=dict(text=plotly_text(label), side="right"), thickness=14),
        hovertemplate="<b>%{y}</b><br>vs <b>%{x}</b><br>" + plotly_text(label) + " %{z:.3f}<extra></extra>"))
    more = f" ({n} of {len(sim.models)} models)" if n < len(sim.models) else ""
    if 0 < n_base < n:   # a line between the models and their study variants (name@...)
        for kw in (dict(x0=-0.5, x1=n - 0.5, y0=n_base - 0.5, y1=n_base - 0.5),
                   dict(x0=n_base - 0.5, x1=n_base - 0.5, y0=-0.5, y1=n - 0.5)):
            fig.add_shape(type="line", xref="x", yref="y", line=dict(color="black", width=1.5), **kw)
    # with names (up to 40 models) each row needs its 9 px label; without, a matrix about as tall as
    # a half-page figure is wide keeps the cells square
    height = 260 + 9 * n if n <= 40 else 410
    fig.update_layout(
        template="none", font=FONT, height=height, paper_bgcolor="white", plot_bgcolor="white",
        title=dict(text=plotly_text(title or (f"{label} on {sim.setting}" if with_setting else label) + more),
                   x=0.012, xanchor="left", font=dict(size=14)),
        margin=dict(l=20, r=20, t=44, b=16))
    ticks = dict(showticklabels=n <= 40, tickfont=dict(size=9), automargin=True, showgrid=False)
    axis_title = _order_words(n, n_base)
    fig.update_xaxes(title=dict(text=axis_title), **ticks)
    fig.update_yaxes(autorange="reversed", **ticks)
    return fig
