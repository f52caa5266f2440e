"""Report section "Object compositing": SI-SCORE-style factor accuracies from the results store.

Reads the ``compositing`` studies that :func:`shiftbench.studies.compositing.compositing_study`
(``shiftbench composite``) writes. Per composite dataset (spec): accuracy against object size
and against rotation, one line per model, and per model the location heatmap -- accuracy at
each object centre divided by its 95th percentile over locations (Djolonga et al. 2021, §4),
drawn with ``y`` growing downwards as in the image -- with the numbers as CSV/Markdown/LaTeX.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from shiftbench.report.figures import TYPE_STYLE, shorten
from shiftbench.report.interactive import EXTRA_COLOURS, _layout, _round, plotly_text
from shiftbench.report.sections import (
    Rendered,
    ReportContext,
    Section,
    TestbedReport,
    choice_html,
    compact,
    esc,
    file_row,
    pair_html,
    register_section,
    section_html,
    small_table,
)
from shiftbench.report.tables import file_slug
from shiftbench.studies.compositing import STUDY_KIND, heatmap_from_study

PALETTE = tuple(c for c, _ in TYPE_STYLE.values()) + EXTRA_COLOURS
NEEDED = {"model", "dataset", "factor", "accuracy", "n"}
FACTOR_AXIS = {"size": "object size (fraction of the image area)", "rotation": "rotation (degrees)"}


def compositing_studies(store) -> pd.DataFrame:
    """Every stored compositing study as one long table (empty when there is none)."""
    frame = store.read_studies(STUDY_KIND) if store is not None else pd.DataFrame()
    if frame.empty or not NEEDED <= set(frame.columns):
        return pd.DataFrame(columns=sorted(NEEDED | {"study"}))
    return frame.assign(model=frame["model"].astype(str), dataset=frame["dataset"].astype(str))


def factor_figure(rows: pd.DataFrame, factor: str, *, title: str) -> go.Figure:
    """Accuracy against one factor's value (``size`` or ``rotation``), one line per model."""
    fig = go.Figure()
    for i, (model, sub) in enumerate(rows[rows["factor"] == factor].groupby("model", sort=True)):
        sub = sub.sort_values("value")
        colour, name = PALETTE[i % len(PALETTE)], plotly_text(model)
        fig.add_trace(go.Scatter(
            x=_round(sub["value"], 6), y=_round(sub["accuracy"], 2), mode="lines+markers", name=name,
            customdata=[[name, int(n)] for n in sub["n"]], line=dict(color=colour, width=2),
            marker=dict(color=colour, size=7),
            hovertemplate="<b>%{customdata[0]}</b><br>" + factor + " %{x}<br>top-1 %{y:.2f}% over "
                          "%{customdata[1]} images<extra></extra>"))
    _layout(fig, plotly_text(title), FACTOR_AXIS[factor], "top-1 accuracy (%)", height=340, top=44)
    # beside the plot, not over its lines (the figure is half the page wide)
    fig.update_layout(legend=dict(x=1.02, xanchor="left", y=1, yanchor="top", font=dict(size=10)),
                      margin=dict(r=10, b=50))
    values = sorted(rows.loc[rows["factor"] == factor, "value"].dropna().unique())
    fig.update_xaxes(type="log" if factor == "size" else "linear", tickvals=[float(v) for v in values],
                     ticktext=[f"{v:g}" for v in values])
    return fig


def heatmap_figure(rows: pd.DataFrame, *, title: str) -> go.Figure:
    """One model's normalised location map (rows: object centre y, downwards; columns: x)."""
    norm, acc = heatmap_from_study(rows), heatmap_from_study(rows, "accuracy")
    z = [[None if not np.isfinite(v) else round(float(v), 3) for v in r] for r in norm.to_numpy()]
    text = [[None if not np.isfinite(v) else round(float(v), 2) for v in r] for r in acc.to_numpy()]
    fig = go.Figure(go.Heatmap(
        x=[f"{v:g}" for v in norm.columns], y=[f"{v:g}" for v in norm.index], z=z, customdata=text,
        colorscale="Viridis", zmin=0, zmax=max(1.0, float(np.nanmax(norm.to_numpy()))),
        colorbar=dict(title=dict(text="accuracy / p95")),
        texttemplate="%{z:.2f}", hovertemplate="centre x %{x}, y %{y}<br>accuracy %{customdata:.2f}%"
                                                "<br>%{z:.3f} of the 95th percentile<extra></extra>"))
    _layout(fig, plotly_text(title), "object centre x (fraction of the width)",
            "object centre y (fraction of the height)", height=340, top=44)
    fig.update_layout(margin=dict(b=50))
    fig.update_yaxes(autorange="reversed", showgrid=False)
    fig.update_xaxes(showgrid=False)
    return fig


def plot_compositing(rows: pd.DataFrame, *, title: str):
    """Static twin, two rows a page can hold: accuracy per size and per rotation (one line per
    model, one legend beside them), then one location map per model (accuracy over its 95th
    percentile) on one colour scale with one colour bar. (One row of 2 + models panels was 29
    inches wide for five models, each line plot's legend over its lines.)"""
    import matplotlib.pyplot as plt  # deferred: loads Pillow, loads matplotlib

    models = sorted(rows["model"].unique())
    n = max(len(models), 1)
    fig = plt.figure(figsize=(max(2.5 * n + 0.8, 10.0), 7.0), dpi=120)
    grid = fig.add_gridspec(2, 1, height_ratios=[1.0, 1.05])
    top = grid[0].subgridspec(1, 3, width_ratios=[1.0, 1.0, 0.5])
    handles: list = []
    for k, factor in enumerate(("size", "rotation")):
        ax = fig.add_subplot(top[0, k])
        for i, model in enumerate(models):
            sub = rows[(rows["model"] == model) & (rows["factor"] == factor)].sort_values("value")
            line, = ax.plot(sub["value"], sub["accuracy"], "o-", color=PALETTE[i % len(PALETTE)], lw=1.5, ms=4,
                            label=model)
            if k == 0:
                handles.append(line)
        values = sorted(rows.loc[rows["factor"] == factor, "value"].dropna().unique())
        if factor == "size":
            ax.set_xscale("log")
            ax.minorticks_off()
        if values:
            ax.set_xticks(values, [f"{v:g}" for v in values])
        ax.set_xlabel(FACTOR_AXIS[factor])
        ax.set_ylabel("top-1 accuracy (%)")
        ax.grid(True, color="0.9", lw=0.6)
    legend_ax = fig.add_subplot(top[0, 2])
    legend_ax.axis("off")
    legend_ax.legend(handles, [h.get_label() for h in handles], loc="center left", fontsize=8, frameon=False,
                     title="model", title_fontsize=8)
    heats = [heatmap_from_study(rows[rows["model"] == model]) for model in models]
    top_value = max([1.0] + [float(np.nanmax(h.to_numpy())) for h in heats if np.isfinite(h.to_numpy()).any()])
    bottom = grid[1].subgridspec(1, n + 1, width_ratios=[1.0] * n + [0.06])
    image = None
    for j, (model, heat) in enumerate(zip(models, heats)):
        ax = fig.add_subplot(bottom[0, j])
        image = ax.imshow(heat.to_numpy(), cmap="viridis", vmin=0, vmax=top_value)
        ax.set_xticks(range(heat.shape[1]), [f"{v:g}" for v in heat.columns])
        ax.set_yticks(range(heat.shape[0]), [f"{v:g}" for v in heat.index])
        for (r, c), v in np.ndenumerate(heat.to_numpy()):
            if np.isfinite(v):
                ax.text(c, r, f"{v:.2f}", ha="center", va="center", fontsize=7, color="white" if v < 0.6 else "black")
        ax.set_xlabel("object centre x")
        if j == 0:
            ax.set_ylabel("object centre y")
        else:                       # one y axis for the row: the maps share their locations
            ax.tick_params(labelleft=False)
        ax.set_title(shorten(model, 28), fontsize=8)
    if image is not None:
        fig.colorbar(image, cax=fig.add_subplot(bottom[0, n]), label="accuracy / its 95th percentile")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


@register_section
class CompositingSection(Section):
    """Object compositing studies in the results store (``--store``): accuracy per object size,
    per rotation, and the normalised location heatmap, per model and composite dataset
    (SI-SCORE, Djolonga et al. 2021)."""

    key, title, scope = "compositing", "Object compositing", "report"

    def available(self, ctx: ReportContext, tb: TestbedReport | None) -> bool:
        return ctx.store is not None and len(compositing_studies(ctx.store)) > 0

    def render(self, ctx: ReportContext, tb: TestbedReport | None) -> list[Rendered]:
        rows = compositing_studies(ctx.store)
        parts = ["<p>Objects pasted onto background photographs over controlled factors (SI-SCORE, Djolonga et al. "
                 "2021): top-1 accuracy per object size (fraction of the image area), rotation and location, each "
                 "averaged over every combination of the other factors in the spec; the location map divides each "
                 "location's accuracy by the 95th percentile over locations (1: as good as the best).</p>"]
        datasets = [(dataset, sub) for dataset, sub in rows.groupby("dataset", sort=True)]
        if len(datasets) == 1:
            parts.append(f"<h3>{esc(datasets[0][0])}</h3>" + self._dataset(ctx, *datasets[0]))
        else:   # one composite dataset at a time
            parts.append(choice_html("Composite dataset", [
                (dataset, ctx.anchor(self.key, dataset), f"<h3>{esc(dataset)}</h3>" + self._dataset(ctx, dataset, sub))
                for dataset, sub in datasets]))
        anchor = ctx.anchor(self.key)
        return [Rendered(self.title, anchor, section_html(anchor, self.title, "".join(parts), level=2))]

    def _dataset(self, ctx: ReportContext, dataset: str, sub: pd.DataFrame) -> str:
        """One composite dataset: the size and rotation curves side by side, then the location map
        (one model at a time) beside the per-model accuracies; the numbers per factor value fold."""
        parts = []
        curves = [ctx.plot(factor_figure(sub, factor, title=f"Accuracy per {factor} on {dataset}"), half=True)
                  for factor in ("size", "rotation") if (sub["factor"] == factor).any()]
        if len(curves) == 2:
            parts.append(pair_html(*curves))
        else:
            parts.extend(curves)
        overall = self._overall(ctx, sub)
        specs = overall["spec"].unique() if len(overall) else []
        side = [compact(small_table(overall.drop(columns=["spec"]) if len(specs) == 1 else overall,
                                    {"top-1 %": ".2f", "images": "d"}))]
        if len(specs) == 1:   # one spec for every model: said once, not on every row
            side.append(f'<p class="sb-note">Spec: <code>{esc(specs[0])}</code></p>')
        table = sub[sub["factor"].isin(["size", "rotation"])].pivot_table(
            index=["factor", "value"], columns="model", values="accuracy").reset_index()
        table.columns.name = None
        if len(table):
            side.append(f"<details><summary>Top-1 % per size and rotation ({len(table)} rows)</summary>"
                        + small_table(table, {c: ".2f" for c in table.columns if c not in ("factor", "value")}
                                      | {"value": "g"}) + "</details>")
        maps = [(model, ctx.anchor(self.key, dataset, model),
                 ctx.plot(heatmap_figure(msub, title=f"Location map of {model}"), half=True))
                for model, msub in sub.groupby("model", sort=True) if (msub["factor"] == "location").any()]
        if not maps:
            parts.extend(side)
        elif len(maps) == 1:
            parts.append(pair_html(maps[0][2], "".join(side)))
        else:   # one model's location map at a time
            parts.append(pair_html(choice_html("Location map of", maps), "".join(side)))
        stem = ctx.out_dir / "compositing" / file_slug(dataset)
        cols = [c for c in ("model", "factor", "value", "label", "x", "y", "accuracy", "n", "normalised")
                if c in sub.columns]
        parts.append(file_row(ctx.static_plot(stem, plot_compositing, sub, title=f"Object compositing on {dataset}"),
                              ctx.table(sub[cols].reset_index(drop=True), stem,
                                        f"Accuracy (%) per factor value on the composite dataset {dataset}")))
        return "".join(parts)

    @staticmethod
    def _overall(ctx: ReportContext, sub: pd.DataFrame) -> pd.DataFrame:
        """Per model: overall accuracy and image count (from the study's metadata)."""
        out = []
        for model, study in sub.groupby("model", sort=True)["study"].first().items():
            meta = ctx.store.study_meta(STUDY_KIND, study) if ctx.store is not None else {}
            out.append({"model": model, "top-1 %": float(meta.get("accuracy", np.nan)),
                        "images": int(meta.get("n_examples", 0)), "spec": str(meta.get("spec", ""))})
        return pd.DataFrame(out)
