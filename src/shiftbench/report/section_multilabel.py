"""Report section: multi-label shifts stored as ``multilabel`` studies (DeepFashion Remixed's form).

A study (written by :func:`shiftbench.demo.multilabel.run_multilabel_demo`, or by a user with
``Store.write_study("multilabel", name, frame)``) has one row per model x split with columns
``model``, ``split`` (``id-test`` or an OOD split such as ``zoom=large``) and ``map`` (percent),
optionally ``map_low``/``map_high`` (95% bootstrap interval over images), ``attribute``,
``model_type``. The section shows, per study: IID mAP against each OOD set's mAP (one colour per
OOD set, its logit-scale trend line, y = x dashed), the fit per OOD set (slope, r², Pearson r,
mean drop), and the table in the paper's form (IID, each OOD set, OOD average; Hendrycks et al.
2021, *The Many Faces of Robustness*, DeepFashion Remixed).
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import plotly.graph_objects as go

from shiftbench.analysis.multilabel import IID, OOD_AVERAGE, dfr_table, dfr_trends
from shiftbench.analysis.scaling import inverse, transform
from shiftbench.report.interactive import plotly_text
from shiftbench.report.sections import (
    Rendered,
    ReportContext,
    Section,
    TestbedReport,
    choice_html,
    compact,
    esc,
    file_row,
    register_section,
    section_html,
    side_html,
    small_table,
    stored_studies,
)

STUDY_KIND = "multilabel"
REQUIRED = {"model", "split", "map"}
#: Okabe & Ito (2008), the colour-blind-safe qualitative palette (black left out: y = x is black)
OKABE_ITO = ("#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#999999")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def _studies(ctx: ReportContext) -> pd.DataFrame:
    frame = stored_studies(ctx, STUDY_KIND, REQUIRED)
    return frame if not frame.empty and (frame["split"] == "id-test").any() else pd.DataFrame()


def _line(trend: pd.Series, lo: float, hi: float, scale: str) -> tuple[np.ndarray, np.ndarray]:
    xs = np.linspace(lo, hi, 50)
    return xs, inverse(trend["slope"] * transform(xs, scale) + trend["intercept"], scale)


def _interactive(table: pd.DataFrame, trends: pd.DataFrame, title: str, scale: str) -> go.Figure:
    fig = go.Figure()
    ood = [c for c in table.columns if c not in (IID, OOD_AVERAGE)]
    lo, hi = float(np.nanmin(table.to_numpy())), float(np.nanmax(table.to_numpy()))
    fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", line=dict(color="black", dash="dash", width=1),
                             name="y = x", hoverinfo="skip"))
    by_split = trends.set_index("split")
    symbols = ("circle", "square", "triangle-up", "diamond", "triangle-down", "cross", "x", "star")
    for i, col in enumerate(ood):
        colour = OKABE_ITO[i % len(OKABE_ITO)]
        fig.add_trace(go.Scatter(x=table[IID], y=table[col], mode="markers", name=plotly_text(col),
                                 legendgroup=col, marker=dict(color=colour, symbol=symbols[i % len(symbols)], size=8),
                                 text=[plotly_text(m) for m in table.index],
                                 hovertemplate="%{text}<br>IID %{x:.1f}%, OOD %{y:.1f}%<extra>" + plotly_text(col)
                                 + "</extra>"))
        t = by_split.loc[col]
        if np.isfinite(t["slope"]):
            xs, ys = _line(t, float(table[IID].min()), float(table[IID].max()), scale)
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line=dict(color=colour, width=1.5), legendgroup=col,
                                     showlegend=False, hoverinfo="skip"))
    fig.update_layout(title=dict(text=plotly_text(title), y=0.97), xaxis_title="IID mAP (%)",
                      yaxis_title="OOD mAP (%)", height=460, template="plotly_white",
                      legend=dict(x=1.02, y=1, xanchor="left", title="OOD set", font=dict(size=10)),
                      margin=dict(t=60, r=20, b=50, l=60))
    return fig


def _static(table: pd.DataFrame, trends: pd.DataFrame, title: str, scale: str):
    fig, ax = plt.subplots(figsize=(7.6, 4.6))
    ood = [c for c in table.columns if c not in (IID, OOD_AVERAGE)]
    lo, hi = float(np.nanmin(table.to_numpy())), float(np.nanmax(table.to_numpy()))
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="y = x")
    by_split = trends.set_index("split")
    for i, col in enumerate(ood):
        colour = OKABE_ITO[i % len(OKABE_ITO)]
        ax.scatter(table[IID], table[col], color=colour, marker=MARKERS[i % len(MARKERS)], s=22, label=col)
        t = by_split.loc[col]
        if np.isfinite(t["slope"]):
            xs, ys = _line(t, float(table[IID].min()), float(table[IID].max()), scale)
            ax.plot(xs, ys, color=colour, lw=1.2)
    ax.set_xlabel("IID mAP (%)")
    ax.set_ylabel("OOD mAP (%)")
    ax.set_title(title)
    ax.legend(title="OOD set", loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


@register_section
class MultiLabelSection(Section):
    """IID vs OOD mAP per changed attribute, the trend per OOD set, and the paper's table."""

    key, title, scope = "multilabel", "Multi-label shifts: mAP when one attribute changes", "report"

    def available(self, ctx: ReportContext, tb: TestbedReport | None) -> bool:
        return not _studies(ctx).empty

    def render(self, ctx: ReportContext, tb: TestbedReport | None) -> list[Rendered]:
        frame = _studies(ctx)
        parts = ["<p>Multi-label images scored by mean average precision (mAP: average precision per class, "
                 "macro over the classes with positives) on an in-distribution (IID) test set and on test sets "
                 "that each change one attribute, every other attribute held at its training value - the design "
                 "of DeepFashion Remixed (Hendrycks et al. 2021). Lines: the fit of OOD mAP on IID mAP over the "
                 f"models, {esc(ctx.scale)} scale; the dashed line is y = x. The paper's finding is that OOD mAP "
                 "mostly tracks IID mAP: read the r column.</p>"]
        out = ctx.out_dir / "multilabel"
        out.mkdir(parents=True, exist_ok=True)
        studies = [(name, rows) for name, rows in frame.groupby("study", sort=True)]
        if len(studies) == 1:
            parts.append(f"<h3>{esc(studies[0][0])}</h3>" + self._study(ctx, *studies[0], out))
        else:   # one study at a time
            parts.append(choice_html("Study", [(name, ctx.anchor(self.key, name),
                                                f"<h3>{esc(name)}</h3>" + self._study(ctx, name, rows, out))
                                               for name, rows in studies]))
        anchor = ctx.anchor(self.key)
        return [Rendered(self.title, anchor, section_html(anchor, self.title, "".join(parts), level=2))]

    @staticmethod
    def _study(ctx: ReportContext, name: str, rows: pd.DataFrame, out) -> str:
        """One study: the IID-OOD plot beside the fit per OOD set, and the paper's table folded."""
        table = dfr_table(rows)
        trends = dfr_trends(rows, scale=ctx.scale)
        title = f"IID vs OOD mAP: {name} ({len(table)} models)"
        paper = table.reset_index()
        fits = trends
        counts = trends["n_models"].dropna().unique() if "n_models" in trends else []
        caption = "Fit of OOD mAP on IID mAP per OOD set (mean drop: IID minus OOD, points)"
        if len(counts) == 1:   # the same models behind every fit: said once, not on every row
            fits = trends.drop(columns=["n_models"])
            caption += f", each over {int(counts[0])} models"
        fits = fits.rename(columns={"r2": "r²", "mean_drop": "mean drop"})
        fit_table = (f"<p>{caption}.</p>"
                     + compact(small_table(fits, {c: ".3f" if c in ("slope", "intercept", "r²", "r") else ".2f"
                                                  for c in ("slope", "intercept", "r²", "r", "mean drop")
                                                  if c in fits})))
        return "".join([
            side_html(fit_table, ctx.plot(_interactive(table, trends, title, ctx.scale), half=True)),
            f"<details><summary>mAP (%) in the paper's form: IID, each OOD set, the OOD average ({len(paper)} "
            "models)</summary>",
            '<div class="sb-table-scroll sb-ten-rows" style="white-space: nowrap">'
            + small_table(paper, {c: ".1f" for c in paper.columns if c != "model"}) + "</div></details>",
            file_row(ctx.static_plot(out / f"{name}-trend", _static, table, trends, title, ctx.scale),
                     ctx.table(paper, out / f"{name}-table", f"Multi-label shifts: {name} (mAP %)"))])
