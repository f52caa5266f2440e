"""Figures of a dataset replication (Recht et al. 2019, Figure 3 style).

Both figures read the long-form study table of
:meth:`shiftbench.datasets.replication.Replication.to_study` (or the same table read back with
``Store.read_study("replication", name)``) and its metadata (``Replication.study_meta()`` or
``Store.study_meta``):

- the **selection-frequency histogram**: per bin ``[e_b, e_{b+1})``, the share of the reference's
  images (``reference_count_b / sum(reference_count)``) beside the share of the replicated set's,
  drawn on the frequency axis itself so that each set's mean selection frequency is a vertical
  line; the strategy is in the title (Recht et al. compare MatchedFrequency, Threshold0.7 and
  TopImages with the original this way);
- the **per-class means**: one point per class, reference mean selection frequency against the
  replicated one, with the diagonal ``y = x`` (a point above it: the class's new images are
  easier to recognise than its original ones).

:func:`plot_replication` is the static matplotlib figure (written next to a manifest by
``shiftbench replicate`` and by the report); :func:`replication_figure` and
:func:`class_means_figure` are the interactive plotly twins.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
import plotly.graph_objects as go

from shiftbench.errors import DataError
from shiftbench.report.interactive import _layout, _round, plotly_text

matplotlib.use("Agg", force=False)

REFERENCE_COLOUR, REPLICATION_COLOUR = "#7f7f7f", "#1f77b4"
#: The mean lines: dark grey for the reference, red for the replication (visible over either bar).
REFERENCE_MEAN_COLOUR, REPLICATION_MEAN_COLOUR = "#333333", "#d62728"
BIN_COLUMNS = ["bin", "lower", "upper", "count", "share", "reference_count", "reference_share"]
CLASS_COLUMNS = ["label", "n_candidates", "n_images", "mean_selection_frequency", "reference_n_images",
                 "reference_mean_selection_frequency"]


def study_parts(study: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split a replication study table into its bin rows and its class rows (``part`` column)."""
    if "part" not in study.columns or not set(BIN_COLUMNS) <= set(study.columns):
        raise DataError("replication study: the table lacks the columns of Replication.to_study() "
                        f"({', '.join(['part', *BIN_COLUMNS])}); rewrite it with shiftbench replicate --store")
    bins = study[study["part"] == "bin"][BIN_COLUMNS].sort_values("bin").reset_index(drop=True)
    cols = [c for c in CLASS_COLUMNS if c in study.columns]
    classes = study[study["part"] == "class"][cols].reset_index(drop=True)
    for c in BIN_COLUMNS[1:]:
        bins[c] = pd.to_numeric(bins[c], errors="coerce").astype(float)
    return bins, classes


def has_reference(bins: pd.DataFrame) -> bool:
    """Whether the study has the reference's histogram (a reference was given)."""
    return bool(np.isfinite(bins["reference_share"].to_numpy(dtype=float)).any())


def _mean(meta: Mapping[str, Any], key: str) -> float | None:
    value = meta.get(key)
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if np.isfinite(value) else None


def replication_title(meta: Mapping[str, Any]) -> str:
    """``"<strategy>: N images, C classes (k=.., seed=..[, tau=..])"`` from the study metadata."""
    params = [f"k={meta['images_per_class']}"] if "images_per_class" in meta else []
    params += [f"tau={float(meta['threshold']):g}"] if meta.get("threshold") is not None else []
    params += [f"seed={meta['seed']}"] if "seed" in meta else []
    head = f"{meta.get('strategy', 'replication')}"
    if "n_images" in meta and "n_classes" in meta:
        head += f": {meta['n_images']} images, {meta['n_classes']} classes"
    return head + (f" ({', '.join(params)})" if params else "")


def _bar_geometry(bins: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Left edge, half width (with a small gap) and midpoint of each bin on the frequency axis."""
    lower, upper = bins["lower"].to_numpy(float), bins["upper"].to_numpy(float)
    width = upper - lower
    half = 0.45 * width
    return lower + 0.05 * width, half, lower + 0.5 * width


def plot_replication(study: pd.DataFrame, meta: Mapping[str, Any], *, title: str | None = None,
                     per_class: bool = True):
    """Matplotlib figure: reference vs replicated share per selection-frequency bin (bars side
    by side, reference left), each set's mean selection frequency as a dashed vertical line,
    and -- with a reference and ``per_class`` -- a second panel of per-class means (one point
    per class, diagonal ``y = x``). The first axes' bar patches are the reference's bars (when
    there is a reference) followed by the replicated set's, in bin order."""
    import matplotlib.pyplot as plt  # deferred: loads Pillow, loads matplotlib

    bins, classes = study_parts(study)
    ref = has_reference(bins)
    scatter = (per_class and ref and len(classes) > 0
               and classes.get("reference_mean_selection_frequency", pd.Series(dtype=float)).notna().any())
    fig, axes = plt.subplots(1, 2 if scatter else 1, figsize=(10.4 if scatter else 6.4, 4.2), dpi=120,
                             gridspec_kw={"width_ratios": [1.6, 1]} if scatter else None, squeeze=False)
    ax = axes[0, 0]
    left, half, _ = _bar_geometry(bins)
    mean, ref_mean = _mean(meta, "mean_selection_frequency"), _mean(meta, "reference_mean_selection_frequency")
    if ref:
        ax.bar(left, bins["reference_share"], width=half, align="edge", color=REFERENCE_COLOUR,
               label=f"reference ({int(np.nansum(bins['reference_count']))} images)")
    ax.bar(left + (half if ref else 0.0), bins["share"], width=half if ref else 2 * half, align="edge",
           color=REPLICATION_COLOUR, label=f"replicated ({int(np.nansum(bins['count']))} images)")
    for value, colour, name in ((ref_mean, REFERENCE_MEAN_COLOUR, "reference mean"),
                                (mean, REPLICATION_MEAN_COLOUR, "replicated mean")):
        if value is not None and (ref or name.startswith("replicated")):
            ax.axvline(value, color=colour, ls="--", lw=1.4, label=f"{name} {value:.3f}")
    edges = np.r_[bins["lower"].to_numpy(float), bins["upper"].to_numpy(float)[-1:]]
    ax.set_xticks(edges, [f"{e:g}" for e in edges])
    ax.set_xlim(0, 1)
    ax.set_xlabel("selection frequency")
    ax.set_ylabel("share of images")
    ax.set_title(title or replication_title(meta), fontsize=10)
    ax.grid(True, axis="y", color="0.9", lw=0.6)
    ax.set_axisbelow(True)
    ax.legend(loc="upper left", fontsize=7, framealpha=0.9)
    if scatter:
        sc = axes[0, 1]
        x = classes["reference_mean_selection_frequency"].astype(float)
        y = classes["mean_selection_frequency"].astype(float)
        sc.plot([0, 1], [0, 1], color="0.6", lw=0.8, ls=":")
        sc.scatter(x, y, s=18, color=REPLICATION_COLOUR, alpha=0.8)
        sc.set_xlim(-0.03, 1.03)      # a class at 1.0 stays whole
        sc.set_ylim(-0.03, 1.03)
        sc.set_aspect("equal")
        sc.set_xlabel("reference mean sel. freq.")
        sc.set_ylabel("replicated mean sel. freq.")
        sc.set_title(f"per class ({len(classes)})", fontsize=10)
        sc.grid(True, color="0.9", lw=0.6)
    fig.tight_layout()
    return fig


def replication_figure(study: pd.DataFrame, meta: Mapping[str, Any], *, title: str | None = None) -> go.Figure:
    """Plotly twin of :func:`plot_replication`'s histogram panel: one bar trace per set
    (reference first, when there is one) with the share of images per bin, and the means as
    dashed vertical line traces named with their values. Hover shows the bin, count and share."""
    bins, _ = study_parts(study)
    ref = has_reference(bins)
    left, half, _ = _bar_geometry(bins)
    names = [f"[{lo:g}, {hi:g}{']' if i == len(bins) - 1 else ')'}" for i, (lo, hi) in
             enumerate(zip(bins["lower"], bins["upper"]))]
    fig = go.Figure()
    sets = ([("reference", "reference_share", "reference_count", REFERENCE_COLOUR, left)] if ref else [])
    sets.append(("replicated", "share", "count", REPLICATION_COLOUR, left + (half if ref else 0.0)))
    for name, share, count, colour, start in sets:
        width = half if ref else 2 * half
        fig.add_trace(go.Bar(
            x=_round(start + width / 2, 4), y=_round(bins[share], 4), width=_round(width, 4), name=name,
            marker=dict(color=colour), customdata=[[n, int(c)] for n, c in zip(names, np.nan_to_num(bins[count]))],
            hovertemplate=f"<b>{name}</b><br>bin %{{customdata[0]}}<br>%{{customdata[1]}} images "
                          "(%{y:.1%})<extra></extra>"))
    mean, ref_mean = _mean(meta, "mean_selection_frequency"), _mean(meta, "reference_mean_selection_frequency")
    top = 1.08 * float(np.nanmax(np.r_[bins["share"].to_numpy(float), bins["reference_share"].to_numpy(float)]))
    for value, colour, name in ((ref_mean if ref else None, REFERENCE_MEAN_COLOUR, "reference mean"),
                                (mean, REPLICATION_MEAN_COLOUR, "replicated mean")):
        if value is not None:     # a line trace (not a shape), so the legend names it with its value
            fig.add_trace(go.Scatter(x=[value, value], y=[0, top], mode="lines", name=f"{name} {value:.3f}",
                                     line=dict(color=colour, dash="dash", width=2),
                                     hovertemplate=f"{name} %{{x:.3f}}<extra></extra>"))
    _layout(fig, plotly_text(title or replication_title(meta)), "selection frequency", "share of images",
            height=420)
    edges = [float(e) for e in np.r_[bins["lower"].to_numpy(float), bins["upper"].to_numpy(float)[-1:]]]
    fig.update_xaxes(range=[0, 1], tickvals=edges, ticktext=[f"{e:g}" for e in edges])
    fig.update_yaxes(tickformat=".0%", rangemode="tozero")
    fig.update_layout(bargap=0, hovermode="closest")
    return fig


def class_means_figure(study: pd.DataFrame, *, title: str) -> go.Figure | None:
    """Plotly scatter of the per-class means (reference on x, replicated on y, diagonal
    ``y = x``), hover naming the class; ``None`` without a reference."""
    _, classes = study_parts(study)
    if "reference_mean_selection_frequency" not in classes or not classes[
            "reference_mean_selection_frequency"].notna().any():
        return None
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", line=dict(color="#999", dash="dot", width=1),
                             hoverinfo="skip", showlegend=False))
    custom = [[plotly_text(lab), int(n) if pd.notna(n) else None]
              for lab, n in zip(classes["label"], classes["n_images"])]
    fig.add_trace(go.Scatter(
        x=_round(classes["reference_mean_selection_frequency"], 4), y=_round(classes["mean_selection_frequency"], 4),
        mode="markers", name="class", marker=dict(color=REPLICATION_COLOUR, size=7, opacity=0.8), customdata=custom,
        hovertemplate="<b>%{customdata[0]}</b><br>reference mean %{x:.3f}<br>replicated mean %{y:.3f}"
                      "<br>%{customdata[1]} images<extra></extra>"))
    _layout(fig, plotly_text(title), "reference mean selection frequency", "replicated mean selection frequency",
            height=420)
    fig.update_xaxes(range=[-0.03, 1.03])
    fig.update_yaxes(range=[-0.03, 1.03], scaleanchor="x")
    return fig
