"""Report section: attribute-controlled shifts stored as ``attributes`` studies.

A study (written by :class:`shiftbench.studies.attributes.AttributeStudy`, by
:func:`shiftbench.demo.attributes.run_attribute_demo`, or by a user with
``Store.write_study("attributes", name, frame)``) has one row per split with columns ``split``,
``kind`` (``id-test`` or ``ood``), ``attribute``, ``value``, ``n``, ``accuracy`` and optionally
``ci_low``/``ci_high`` (95% Clopper-Pearson), ``drop`` (accuracy minus the ID test's) and
``worst_group_accuracy``/``worst_group`` (the split's worst group, WILDS convention: the demo's
digit classes; shown in the table when present). The
section draws accuracy per split with its interval, the ID test first, one chart per study
(Hendrycks et al. 2021, "The Many Faces of Robustness": one attribute changed at a time).
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import plotly.graph_objects as go

from shiftbench.report.interactive import plotly_text
from shiftbench.report.sections import (
    Rendered,
    ReportContext,
    Section,
    TestbedReport,
    compact,
    esc,
    file_row,
    register_section,
    section_html,
    small_table,
    stored_studies,
)
from shiftbench.studies.attributes import STUDY_KIND

REQUIRED = {"split", "kind", "n", "accuracy"}


def _studies(ctx: ReportContext) -> pd.DataFrame:
    return stored_studies(ctx, STUDY_KIND, REQUIRED)


def _ordered(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    frame["_id"] = frame["kind"].astype(str) != "id-test"
    return frame.sort_values(["_id", "split"], kind="stable").drop(columns="_id").reset_index(drop=True)


def _interactive(frame: pd.DataFrame, title: str) -> go.Figure:
    acc = frame["accuracy"].astype(float)
    err = {}
    if {"ci_low", "ci_high"} <= set(frame.columns):
        err = dict(error_y=dict(type="data", symmetric=False, array=(frame["ci_high"] - acc).tolist(),
                                arrayminus=(acc - frame["ci_low"]).tolist()))
    colours = ["#4c72b0" if k == "id-test" else "#dd8452" for k in frame["kind"].astype(str)]
    fig = go.Figure(go.Bar(x=[plotly_text(s) for s in frame["split"].astype(str)], y=acc, marker_color=colours,
                           text=[f"n={int(n)}" for n in frame["n"]], textposition="inside",
                           insidetextanchor="start", hovertemplate="%{x}: %{y:.2f}% (%{text})"
                           "<extra></extra>", **err))
    fig.update_layout(title=plotly_text(title), yaxis_title="accuracy (%)", height=340, template="plotly_white",
                      margin=dict(t=60, b=40))
    return fig


def _static(frame: pd.DataFrame, title: str):
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    acc = frame["accuracy"].astype(float).to_numpy()
    yerr = None
    if {"ci_low", "ci_high"} <= set(frame.columns):
        yerr = np.vstack([acc - frame["ci_low"].to_numpy(float), frame["ci_high"].to_numpy(float) - acc])
    colours = ["#4c72b0" if k == "id-test" else "#dd8452" for k in frame["kind"].astype(str)]
    ax.bar(range(len(frame)), acc, yerr=yerr, color=colours, capsize=3)
    ax.set_xticks(range(len(frame)), frame["split"].astype(str), rotation=30, ha="right")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(title)
    fig.tight_layout()
    return fig


@register_section
class AttributeShiftSection(Section):
    """Accuracy on the in-distribution test set and on each one-attribute-changed test set."""

    key, title, scope = "attributes", "Attribute-controlled shifts (results store)", "report"

    def available(self, ctx: ReportContext, tb: TestbedReport | None) -> bool:
        return not _studies(ctx).empty

    def render(self, ctx: ReportContext, tb: TestbedReport | None) -> list[Rendered]:
        frame = _studies(ctx)
        parts = ["<p>A training distribution fixed by attribute values; an in-distribution test set drawn from "
                 "it, and one test set per changed attribute value with every other attribute held at its "
                 "training values (Hendrycks et al. 2021). Bars: accuracy with its 95% Clopper-Pearson "
                 "interval; blue the ID test, orange the shifted sets. Where stored, the table adds the "
                 "worst-group accuracy: the lowest accuracy over the split's non-empty groups (WILDS "
                 "convention; for the digits, the groups are the digit classes).</p>"]
        out = ctx.out_dir / "attributes"
        out.mkdir(parents=True, exist_ok=True)
        for name, rows in frame.groupby("study", sort=True):
            rows = _ordered(rows)
            title = f"Attribute-controlled shifts: {name}"
            parts.append(f"<h3>{esc(name)}</h3>")
            parts.append(ctx.plot(_interactive(rows, title)))
            cols = [c for c in ("split", "n", "accuracy", "ci_low", "ci_high", "drop", "worst_group_accuracy",
                                "worst_group", "worst_group_n") if c in rows and rows[c].notna().any()]
            formats = {**{c: ".2f" for c in ("accuracy", "ci_low", "ci_high", "drop", "worst_group_accuracy")},
                       "worst_group_n": ".0f"}
            parts.append(compact(small_table(rows[cols], {c: f for c, f in formats.items() if c in cols})))
            parts.append(file_row(ctx.static_plot(out / str(name), _static, rows, title),
                                  ctx.table(rows[cols], out / f"{name}-table", f"Attribute-controlled shifts: {name}")))
        anchor = ctx.anchor(self.key)
        return [Rendered(self.title, anchor, section_html(anchor, self.title, "".join(parts), level=2))]
