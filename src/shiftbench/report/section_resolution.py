"""Report section "Resolution sweeps": accuracy against test resolution from the results store.

Reads the ``resolution`` studies that :func:`shiftbench.studies.resolution.resolution_sweep`
(``shiftbench resolution-sweep``) writes: per setting, one line per model of top-1 accuracy
against the test resolution (the side of the centre crop), with the best resolution starred and
the model's native input size ringed -- the curve of Touvron et al. 2019 (FixRes): with
``RandomResizedCrop`` training, the best test resolution is often above the training one.
Resolutions a model could not run at (a fixed input size) are listed with the reason.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from shiftbench.report.figures import TYPE_STYLE
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
    register_section,
    section_html,
    side_html,
    small_table,
)
from shiftbench.report.tables import file_slug
from shiftbench.studies.resolution import STUDY_KIND

PALETTE = tuple(c for c, _ in TYPE_STYLE.values()) + EXTRA_COLOURS
TABLE_COLUMNS = ["model", "setting", "resolution", "resize", "accuracy", "top5", "n_examples", "best", "native",
                 "error"]


def resolution_studies(store) -> pd.DataFrame:
    """Every stored resolution sweep as one table (``TABLE_COLUMNS``), oldest columns filled in:
    ``model`` is the swept model (``base_model``), ``native`` marks its own input size."""
    frame = store.read_studies(STUDY_KIND) if store is not None else pd.DataFrame()
    if frame.empty or not {"resolution", "accuracy"} <= set(frame.columns):
        return pd.DataFrame(columns=TABLE_COLUMNS)
    frame = frame.copy()
    if "base_model" not in frame:
        frame["base_model"] = frame["study"]
    frame["model"] = frame["base_model"].fillna(frame["study"]).astype(str)
    frame["setting"] = frame["setting"].fillna("?").astype(str) if "setting" in frame else "?"
    native = pd.to_numeric(frame.get("native_resolution", pd.Series(np.nan, index=frame.index)), errors="coerce")
    frame["native"] = native.to_numpy() == frame["resolution"].to_numpy()
    for col, default in (("resize", np.nan), ("top5", np.nan), ("n_examples", 0), ("best", False), ("error", None)):
        if col not in frame:
            frame[col] = default
    frame["accuracy"] = pd.to_numeric(frame["accuracy"], errors="coerce")
    frame["error"] = [None if e is None or (isinstance(e, float) and np.isnan(e)) or e == "" else str(e)
                      for e in frame["error"]]
    return frame[TABLE_COLUMNS].sort_values(["setting", "model", "resolution"], kind="stable").reset_index(drop=True)


def resolution_figure(rows: pd.DataFrame, *, title: str) -> go.Figure:
    """Accuracy against resolution (log axis), one line per model; best starred, native ringed."""
    fig = go.Figure()
    for i, (model, sub) in enumerate(rows.groupby("model", sort=True)):
        colour = PALETTE[i % len(PALETTE)]
        ok = sub[sub["accuracy"].notna()]
        name = plotly_text(model)
        custom = [[name, int(r), None if not np.isfinite(t) else round(float(t), 2)]
                  for r, t in zip(ok["resolution"], pd.to_numeric(ok["top5"], errors="coerce"))]
        fig.add_trace(go.Scatter(
            x=ok["resolution"].astype(int).tolist(), y=_round(ok["accuracy"], 2), mode="lines+markers", name=name,
            legendgroup=name, customdata=custom, line=dict(color=colour, width=2), marker=dict(color=colour, size=7),
            hovertemplate="<b>%{customdata[0]}</b><br>resolution %{customdata[1]} px<br>top-1 %{y:.2f}%"
                          "<br>top-5 %{customdata[2]:.2f}%<extra></extra>"))
        for mask, symbol, size, label in ((ok["best"].astype(bool), "star", 16, "best"),
                                          (ok["native"].astype(bool), "circle-open", 17, "native")):
            mark = ok[mask]
            if len(mark):
                fig.add_trace(go.Scatter(
                    x=mark["resolution"].astype(int).tolist(), y=_round(mark["accuracy"], 2), mode="markers",
                    name=f"{name} ({label})", legendgroup=name, showlegend=False,
                    marker=dict(symbol=symbol, size=size, color=colour, line=dict(color=colour, width=2)),
                    hovertemplate=f"<b>{name}</b><br>{label} resolution %{{x}} px: %{{y:.2f}}%<extra></extra>"))
    _layout(fig, plotly_text(title), "test resolution (px, log scale)", "top-1 accuracy (%)", height=440, top=50)
    # beside the plot, not over its lines
    fig.update_layout(legend=dict(x=1.02, xanchor="left", y=1, yanchor="top", font=dict(size=10)),
                      margin=dict(r=10, b=50))
    ticks = sorted({int(r) for r in rows["resolution"]})
    fig.update_xaxes(type="log", tickvals=ticks, ticktext=[str(t) for t in ticks])
    return fig


def plot_resolution(rows: pd.DataFrame, *, title: str):
    """The static (matplotlib) twin of :func:`resolution_figure`."""
    import matplotlib.pyplot as plt  # deferred: loads Pillow, loads matplotlib

    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=120)
    for i, (model, sub) in enumerate(rows.groupby("model", sort=True)):
        colour = PALETTE[i % len(PALETTE)]
        ok = sub[sub["accuracy"].notna()]
        ax.plot(ok["resolution"], ok["accuracy"], "o-", color=colour, lw=1.6, ms=4, label=str(model))
        best, native = ok[ok["best"].astype(bool)], ok[ok["native"].astype(bool)]
        ax.scatter(best["resolution"], best["accuracy"], marker="*", s=160, color=colour, zorder=4)
        ax.scatter(native["resolution"], native["accuracy"], marker="o", s=150, facecolors="none",
                   edgecolors=colour, linewidths=1.5, zorder=4)
    ax.set_xscale("log")
    ticks = sorted({int(r) for r in rows["resolution"]})
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("test resolution (px, log scale)")
    ax.set_ylabel("top-1 accuracy (%)")
    ax.set_title(title + "\n(★ best, ○ native resolution)", fontsize=10)
    ax.grid(True, color="0.9", lw=0.6)
    ax.legend(loc="best", fontsize=7, framealpha=0.9)
    fig.tight_layout()
    return fig


def _short(error: str, limit: int = 120) -> str:
    """The first line of an error message, cut to ``limit`` characters."""
    line = str(error).strip().splitlines()[0] if str(error).strip() else str(error)
    return line if len(line) <= limit else line[: limit - 1] + "…"


@register_section
class ResolutionSection(Section):
    """Resolution sweeps stored in the results store (``--store``): accuracy per test resolution,
    one line per model, best and native resolutions marked (Touvron et al. 2019)."""

    key, title, scope = "resolution", "Resolution sweeps", "report"

    def available(self, ctx: ReportContext, tb: TestbedReport | None) -> bool:
        return ctx.store is not None and len(resolution_studies(ctx.store)) > 0

    def render(self, ctx: ReportContext, tb: TestbedReport | None) -> list[Rendered]:
        rows = resolution_studies(ctx.store)
        parts = [f"<p>{rows['model'].nunique()} models swept over test resolutions on {rows['setting'].nunique()} "
                 "setting(s). Each resolution r is the side of the centre crop fed to the network, resized by the "
                 "model's own resize-to-crop ratio unless the sweep was run with <code>--no-adjust</code>; "
                 "★ marks each model's most accurate resolution, ○ its native input size "
                 "(Touvron et al. 2019).</p>"]
        settings = [(setting, sub) for setting, sub in rows.groupby("setting", sort=True)]
        if len(settings) == 1:
            parts.append(f"<h3>{esc(settings[0][0])}</h3>" + self._setting(ctx, *settings[0]))
        else:   # one setting at a time
            parts.append(choice_html("Setting", [
                (setting, ctx.anchor(self.key, setting), f"<h3>{esc(setting)}</h3>" + self._setting(ctx, setting, sub))
                for setting, sub in settings]))
        anchor = ctx.anchor(self.key)
        return [Rendered(self.title, anchor, section_html(anchor, self.title, "".join(parts), level=2))]

    def _setting(self, ctx: ReportContext, setting: str, sub: pd.DataFrame) -> str:
        """One setting: the curves beside per model its best and native resolutions, with the
        resolutions it could not run at folded under them; every (model, resolution) row folds."""
        parts, files = [], []
        title = f"Accuracy against test resolution on {setting}"
        shown = sub[sub["error"].isna()]
        side = ['<div style="white-space: nowrap">'
                + compact(small_table(best_native(shown), {"native": "s", "best ★": "s"})) + "</div>"]
        failed = sub[sub["error"].notna()]
        if len(failed):
            by_model = list(failed.groupby("model", sort=False))
            side.append(f'<details class="sb-reason-fold"><summary>Not run at every resolution: {len(by_model)} '
                        f"of {sub['model'].nunique()} models (why; the full messages are in the CSV)</summary><ul>"
                        + "".join(f"<li>{esc(model)} at {', '.join(str(int(r)) for r in f['resolution'])} px: "
                                  f"{esc(_short(f['error'].iloc[0]))}</li>" for model, f in by_model)
                        + "</ul></details>")
        if sub["accuracy"].notna().any():
            parts.append(side_html("".join(side), ctx.plot(resolution_figure(sub, title=title), half=True)))
            stem = ctx.out_dir / "resolution" / file_slug(setting)
            files.append(ctx.static_plot(stem, plot_resolution, sub, title=title))
        else:
            parts.extend(side)
        shown = shown.assign(best=np.where(shown["best"].astype(bool), "★", ""),
                             native=np.where(shown["native"].astype(bool), "○", ""))
        parts.append(f"<details><summary>Every model at every resolution ({len(shown)} rows)</summary>"
                     + small_table(shown.drop(columns=["setting", "error"]).rename(
                         columns={"accuracy": "top-1 %", "top5": "top-5 %", "n_examples": "examples"}),
                         {"resolution": "d", "resize": ".0f", "top-1 %": ".2f", "top-5 %": ".2f", "examples": "d"})
                     + "</details>")
        files.append(ctx.table(sub, ctx.out_dir / "resolution" / file_slug(setting),
                               f"Top-1 accuracy (%) against test resolution on {setting}"))
        parts.append(file_row(*files))
        return "".join(parts)


def best_native(rows: pd.DataFrame) -> pd.DataFrame:
    """Per model (rows that ran): its native resolution and its most accurate one, each as
    "resolution px: top-1 %" (blank where unknown)."""
    def cell(mark: pd.DataFrame) -> str:
        return f"{int(mark['resolution'].iloc[0])} px: {float(mark['accuracy'].iloc[0]):.2f}%" if len(mark) else ""

    out = []
    for model, sub in rows.groupby("model", sort=True):
        ok = sub[sub["accuracy"].notna()]
        out.append({"model": model, "native": cell(ok[ok["native"].astype(bool)]),
                    "best ★": cell(ok[ok["best"].astype(bool)])})
    return pd.DataFrame(out, columns=["model", "native", "best ★"])
