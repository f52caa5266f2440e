"""Report section: do robust models transfer better? (Djolonga et al. 2021, CVPR, §5 and its figure.)

Shown when the report's store holds transfer results (settings ``transfer:<task>``, written by
:func:`shiftbench.transfer` or the digits demo's mini VTAB, :mod:`shiftbench.demo.transfer`). The
transfer cells are joined to the report's testbed that shares most models with them, and
:func:`~shiftbench.analysis.transferability.robustness_transfer_correlation` correlates a short
list of robustness metrics with each task group's mean transfer accuracy over the models:
ID accuracy, accuracy and effective robustness on each natural shift the testbed analyses, the
mean over the synthetic corruptions (the quantity mCE ranks models by) and per ImageNet-C
family, and the ECE on the ID setting where the store has calibration. Two heatmaps in the
paper's form (metrics x task groups): Spearman's rho, and the partial rho with ID accuracy
partialled out; every cell carries its 95% bootstrap interval over models and its model count.
Below them, each model's mean transfer accuracy per group (VTAB's summary).
"""
from __future__ import annotations

import warnings
from collections import Counter

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import plotly.graph_objects as go

from shiftbench.analysis.agreement import CORRUPTION_FAMILIES, corruption_family
from shiftbench.analysis.transfer import parse_transfer_setting, transfer_group_means
from shiftbench.analysis.transferability import robustness_transfer_correlation
from shiftbench.errors import ShiftbenchError
from shiftbench.report.interactive import plotly_text
from shiftbench.report.sections import (
    Rendered,
    ReportContext,
    Section,
    TestbedReport,
    calibration_rows,
    choice_html,
    esc,
    file_row,
    register_section,
    section_html,
    setting_family,
    small_table,
)
from shiftbench.testbed import Testbed

MIN_MODELS = 5
MEAN_CORRUPTIONS = "corruptions (mean)"
KIND_LABEL = {"acc": "accuracy", "er": "eff. robustness"}


def _transfer_results(ctx: ReportContext) -> pd.DataFrame:
    """Linear-probe transfer rows of the store: ``model, setting, task, group, accuracy``."""
    results = ctx.store_results
    if results is None and ctx.store is not None:
        try:
            results = ctx.store.results()
        except ShiftbenchError:
            return pd.DataFrame()
    if results is None or results.empty or "setting" not in results:
        return pd.DataFrame()
    parsed = results["setting"].astype(str).map(parse_transfer_setting)
    rows = results[parsed.map(lambda p: p is not None and p[1] == "linear")].copy()
    if rows.empty:
        return rows
    rows["task"] = rows["setting"].astype(str).map(lambda s: parse_transfer_setting(s)[0])
    if "group" not in rows:
        rows["group"] = np.nan
    rows["accuracy"] = pd.to_numeric(rows["accuracy"], errors="coerce")
    return rows[["model", "setting", "task", "group", "accuracy"]].dropna(subset=["accuracy"])


def _target(ctx: ReportContext, rows: pd.DataFrame) -> TestbedReport | None:
    """The report's testbed sharing most models with the transfer results (at least MIN_MODELS)."""
    models = set(rows["model"].astype(str))
    best = max(ctx.testbeds, key=lambda t: len(models & set(t.testbed.models)), default=None)
    return best if best is not None and len(models & set(best.testbed.models)) >= MIN_MODELS else None


def _id_setting(tb: TestbedReport) -> str | None:
    """The x most of the testbed's shift analyses use (else its most complete setting)."""
    xs = Counter(a.shift.x for a in tb.analysed)
    if xs:
        return xs.most_common(1)[0][0]
    acc = tb.testbed.accuracies
    plain = [s for s in acc.columns if parse_transfer_setting(s) is None]
    return max(plain, key=lambda s: acc[s].notna().sum(), default=None)


def _robustness_columns(tb: TestbedReport, x: str) -> dict[str, pd.Series]:
    """The robustness columns the section shows: x, each analysed natural shift, the mean over the
    corrupted settings of x and the mean per ImageNet-C family."""
    acc = tb.testbed.accuracies
    out = {x: acc[x]}
    for a in tb.analysed:
        y = a.shift.y
        if a.shift.x == x and "+" not in y and parse_transfer_setting(y) is None and y in acc and y not in out:
            out[y] = acc[y]
    corrupted = [s for s in acc.columns if s.startswith(f"{x}+") and setting_family(s)[1] is not None
                 and corruption_family(s) is not None]
    if len(corrupted) >= 2:
        out[MEAN_CORRUPTIONS] = acc[corrupted].mean(axis=1, skipna=False)
        for family in CORRUPTION_FAMILIES:
            members = [s for s in corrupted if corruption_family(s) == family]
            if members:
                out[f"corruptions: {family}"] = acc[members].mean(axis=1, skipna=False)
    return out


def _testbed(tb: TestbedReport, x: str, rows: pd.DataFrame) -> Testbed:
    """The shown robustness columns and the transfer cells of the testbed's models, as one testbed."""
    models = tb.testbed.models
    wide = rows.pivot_table(index="model", columns="setting", values="accuracy", aggfunc="last")
    acc = pd.DataFrame(_robustness_columns(tb, x)).join(wide.reindex(models))
    return Testbed(acc, metadata=tb.testbed.metadata, name=tb.testbed.name)


def _ece(ctx: ReportContext, x: str, models: list[str]) -> pd.DataFrame | None:
    cal = calibration_rows(ctx.store_results)
    cal = cal[cal["setting"] == x]
    if cal["model"].isin(models).sum() < MIN_MODELS:
        return None
    return pd.DataFrame({f"ece:{x}": cal.drop_duplicates("model", keep="last").set_index("model")["ece"]})


def _label(metric: str) -> str:
    kind, _, setting = metric.partition(":")
    if kind in KIND_LABEL and setting:
        return f"{KIND_LABEL[kind]}: {setting}"
    return f"ECE: {setting}" if kind == "ece" else metric


def _cell_text(rows: pd.DataFrame, value: str, with_n: bool = True) -> pd.DataFrame:
    """Per cell: ``+0.80 [+0.55, +0.93]`` on one line, `` n=28`` added with ``with_n``."""
    lo, hi = ("low", "high") if value == "rho" else ("partial_low", "partial_high")
    return rows.assign(text=[("" if not np.isfinite(r[value]) else f"{r[value]:+.2f} [{r[lo]:+.2f}, {r[hi]:+.2f}]")
                             + (f" n={int(r['n_models'])}" if with_n else "") for _, r in rows.iterrows()])


def _constant_n(corr) -> int | None:
    """The model count of every cell when it is one number (then said once, in the title)."""
    counts = corr.rows["n_models"].dropna().unique()
    return int(counts[0]) if len(counts) == 1 else None


def _heatmap(corr, value: str, title: str) -> go.Figure:
    """Metrics x task groups, one line of text per cell (rho and its interval); the model count
    is in each cell when it differs between cells, else once in the title (and always on hover)."""
    mat = corr.matrix(value)
    n = _constant_n(corr)
    same_n = n is not None
    if same_n:
        title = f"{title} (n={n} models per cell)"
    text = _cell_text(corr.rows, value, with_n=not same_n).pivot(index="metric", columns="group", values="text")
    text = text.reindex(index=mat.index, columns=mat.columns)
    n = corr.rows.pivot(index="metric", columns="group", values="n_models").reindex(index=mat.index,
                                                                                    columns=mat.columns)
    labels = [plotly_text(_label(m)) for m in mat.index]
    fig = go.Figure(go.Heatmap(z=mat.to_numpy(), x=[plotly_text(g) for g in mat.columns], y=labels, zmin=-1, zmax=1,
                               zmid=0, colorscale="RdBu", text=text.to_numpy(), texttemplate="%{text}",
                               customdata=n.to_numpy(), textfont=dict(size=11), colorbar=dict(title="rho", len=0.8),
                               hovertemplate="%{y}<br>%{x}: %{text}<br>n=%{customdata} models<extra></extra>"))
    fig.update_layout(title=dict(text=plotly_text(title), y=0.98), height=max(300, 26 * len(mat) + 100),
                      template="plotly_white", margin=dict(l=10, t=64, b=10), xaxis=dict(side="top"),
                      yaxis=dict(autorange="reversed"))
    return fig


def _static(corr, title: str):
    values = [("rho", "Spearman rho"), ("partial_rho", "partial rho (ID accuracy partialled out)")]
    mats = [corr.matrix(v) for v, _ in values]
    n = mats[0].shape[0]
    counts = corr.matrix("n_models")
    n_models = _constant_n(corr)
    same_n = n_models is not None
    if same_n:        # said once in the title (as the HTML figure does), not in every cell
        title = f"{title} (n={n_models} models per cell)"
    fig, axes = plt.subplots(1, 2, figsize=(4.0 + 2.4 * mats[0].shape[1], 1.2 + (0.32 if same_n else 0.42) * n),
                             sharey=True)
    for ax, mat, (value, name) in zip(axes, mats, values):
        im = ax.imshow(mat.to_numpy(dtype=float), cmap="RdBu", vmin=-1, vmax=1, aspect="auto")
        for i in range(mat.shape[0]):
            for j in range(mat.shape[1]):
                v = mat.iat[i, j]
                text = (f"{v:+.2f}" if np.isfinite(v) else "–") if same_n else \
                    (f"{v:+.2f}\n" if np.isfinite(v) else "") + f"n={int(counts.iat[i, j])}"
                ax.text(j, i, text, ha="center", va="center", fontsize=7 if same_n else 6.5)
        ax.set_xticks(range(mat.shape[1]), list(mat.columns), fontsize=8)
        ax.set_title(name, fontsize=9)
    axes[0].set_yticks(range(n), [_label(m) for m in mats[0].index], fontsize=7.5)
    fig.colorbar(im, ax=axes, shrink=0.8, label="rho")
    fig.suptitle(title, fontsize=10)
    return fig


@register_section
class TransferSection(Section):
    """Robustness metrics x transfer task groups: Spearman rho and partial rho given ID accuracy."""

    key, title, scope = "transfer", "Robustness and transfer: do robust models transfer better?", "report"

    def available(self, ctx: ReportContext, tb: TestbedReport | None) -> bool:
        rows = _transfer_results(ctx)
        return not rows.empty and _target(ctx, rows) is not None

    def render(self, ctx: ReportContext, tb: TestbedReport | None) -> list[Rendered]:
        rows = _transfer_results(ctx)
        target = _target(ctx, rows)
        x = _id_setting(target)
        groups = dict(zip(rows["task"].astype(str), rows["group"].astype(str))) if rows["group"].notna().any() else None
        testbed = _testbed(target, x, rows[rows["model"].isin(target.testbed.models)])
        anchor = ctx.anchor(self.key)
        intro = (f"<p>Each model of <b>{esc(target.testbed.name)}</b> adapted to new tasks by a linear probe on its "
                 "frozen penultimate features (VTAB-1k, Zhai et al. 2019). Per cell: Spearman's rho over models "
                 "(95% bootstrap interval) of a robustness metric with a task group's mean transfer accuracy; the "
                 f"partial rho has ID accuracy on <code>{esc(x)}</code> partialled out: a metric says more than ID "
                 "accuracy where its interval excludes 0 (Djolonga et al. 2021: robustness tracks transfer to "
                 "natural tasks, but adds little beyond ImageNet accuracy elsewhere).</p>")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # a resample with a constant column: its rho is NaN
                corr = robustness_transfer_correlation(testbed, x, groups=groups, extra=_ece(ctx, x, testbed.models),
                                                       n_resamples=ctx.n_resamples, seed=ctx.seed, min_models=MIN_MODELS)
            means = transfer_group_means(testbed, groups)
        except ShiftbenchError as exc:
            body = intro + f"<p>No correlation: {esc(exc)}</p>"
            return [Rendered(self.title, anchor, section_html(anchor, self.title, body, level=2))]
        out = ctx.out_dir / "transfer"
        out.mkdir(parents=True, exist_ok=True)
        n_tasks = rows.groupby("group")["task"].nunique()
        title = (f"{target.testbed.name}: robustness vs transfer ({int(means['mean'].notna().sum())} models, "
                 + ", ".join(f"{g} {n}" for g, n in n_tasks.items()) + " tasks)")
        # the two heatmaps share one place on the page: a selector shows one at a time
        parts = [intro, choice_html("Correlation", [
                     ("Spearman ρ", ctx.anchor(self.key, "rho"),
                      ctx.plot(_heatmap(corr, "rho", "Spearman rho with group-mean transfer accuracy"))),
                     (f"partial ρ given {x} accuracy", ctx.anchor(self.key, "partial"),
                      ctx.plot(_heatmap(corr, "partial_rho", f"Partial rho, ID accuracy ({x}) partialled out")))])]
        table = corr.rows.assign(metric=corr.rows["metric"].map(_label))
        tasks = rows.drop_duplicates("task")[["task", "group"]]
        parts.append("<p>Tasks: " + "; ".join(f"<code>{esc(t.task)}</code> ({esc(t.group)})"
                                               for t in tasks.itertuples()) + ".</p>")
        shown = means[means["n_tasks"] > 0].sort_values("mean", ascending=False).reset_index()
        parts.append(f"<details><summary>Mean transfer accuracy (%) per task group of the {len(shown)} models, best "
                     "first</summary>"
                     '<div class="sb-table-scroll sb-ten-rows">' + small_table(
                         shown, {c: ".1f" for c in shown.columns if c not in ("model", "n_tasks")} | {"n_tasks": "d"})
                     + "</div></details>")
        # every file of the section on one line: the figure, the correlations, the group means
        parts.append(file_row(ctx.static_plot(out / "robustness-transfer", _static, corr, title),
                              ctx.table(table, out / "robustness-transfer", "Spearman correlation of robustness "
                                        "metrics with mean transfer accuracy per task group", what="Correlations"),
                              ctx.table(shown, out / "transfer-group-means",
                                        "Mean transfer accuracy (%) per task group", what="Group means")))
        if corr.notes:
            parts.append(f'<p class="sb-note">{esc("; ".join(corr.notes))}.</p>')
        return [Rendered(self.title, anchor, section_html(anchor, self.title, "".join(parts), level=2))]
