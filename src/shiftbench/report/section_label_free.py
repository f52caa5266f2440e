"""Report section: accuracy under shift estimated without labels, on the results store (``--store``).

For the shifts the store has predictions for - the natural shifts of the report's testbeds whose
two settings are in the store, and every corrupted copy ``<id>+<corruption>.<severity>`` of an
in-distribution setting - each model's shifted accuracy is estimated from its stored predictions
alone (:func:`~shiftbench.analysis.agreement.estimate_ood_accuracy`: ALine-D and ALine-S, Baek et
al. 2022; ATC, Garg et al. 2022; DoC; AC) and compared with the truth the labels give. The section
shows (a) agreement (pairs) and accuracy (models) in probit axes with both fitted lines for a few
representative shifts (the natural ones, and one corruption per ImageNet-C family at severity
:data:`SEVERITY`; the rest behind a dropdown), (b) every estimate against the truth, and (c) the
mean absolute error per shift family and method
(:func:`~shiftbench.analysis.agreement.estimation_errors`), with the share of shifts whose
agreement is on the line and ALine-D's error on and off it.

Reading predictions is the cost (one Parquet read per model and setting: 44 models x 51 settings
on the digits demo). The corrupted settings are therefore restricted to severity :data:`SEVERITY`
(every corruption of the store at that severity; ``bench/label_free.py`` computes all severities),
which the section says.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import matplotlib

matplotlib.use("Agg", force=False)
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import plotly.graph_objects as go
from matplotlib.figure import Figure
from scipy import stats

from shiftbench import correctness
from shiftbench.analysis import agreement
from shiftbench.analysis.agreement import (
    CORRUPTION_FAMILIES,
    METHODS,
    ON_LINE_ALPHA,
    LabelFreeEstimates,
    corruption_family,
    estimate_ood_accuracy,
    estimation_errors,
    probit,
    setting_errors,
)
from shiftbench.analysis.trajectory import is_checkpoint
from shiftbench.correctness import (
    PredictionMatrix,
    _label_space,
    _latest_keys,
    prediction_matrix,
)
from shiftbench.errors import ConfigError, ShiftbenchError
from shiftbench.report.figures import _fmt, _ticks
from shiftbench.report.interactive import _layout, _round, plotly_text
from shiftbench.report.sections import (
    Rendered,
    ReportContext,
    Section,
    TestbedReport,
    compact,
    esc,
    file_row,
    pair_html,
    register_section,
    section_html,
    small_table,
)
from shiftbench.store import Store

#: the severity of the corrupted settings the section computes
SEVERITY = 3
#: at most this many natural shifts are drawn as panels (the rest are in the dropdown)
MAX_NATURAL_PANELS = 2
MIN_MODELS = 3
METHOD_STYLE = {"aline-d": ("#d62728", "ALine-D"), "aline-s": ("#ff7f0e", "ALine-S"), "atc": ("#1f77b4", "ATC"),
                "doc": ("#2ca02c", "DoC"), "ac": ("#9467bd", "AC")}


@dataclass(frozen=True)
class Shift:
    """One (in-distribution, shifted) pair of store settings and the family it is counted in."""

    label: str
    id_setting: str
    ood_setting: str
    family: str
    natural: bool = False


@dataclass
class LabelFreeRun:
    """The estimates of every shift computed, the ones that failed and why, and the time taken."""

    shifts: list[Shift]
    estimates: dict[str, LabelFreeEstimates] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def families(self) -> dict[str, str]:
        """Shifted setting -> the family it is counted in (for :func:`estimation_errors`)."""
        return {s.ood_setting: s.family for s in self.shifts}


# ---------------------------------------------------------------------------- which shifts
def store_models(results: pd.DataFrame | None) -> dict[str, set[str]]:
    """Per setting of a store's ``results()``, the models (fine-tuning checkpoints left out)."""
    if results is None or results.empty:
        return {}
    res = results.loc[~results["model"].astype(str).map(is_checkpoint).astype(bool)]
    return {str(s): set(g["model"].astype(str)) for s, g in res.groupby("setting")}


def result_keys(results: pd.DataFrame) -> pd.DataFrame:
    """The key of each (model, setting) that :func:`~shiftbench.correctness.prediction_matrix` reads."""
    return _latest_keys(results, "restricted")


def read_setting(store: Store, keys: pd.DataFrame, setting: str, models: Sequence[str]) -> PredictionMatrix:
    """:func:`~shiftbench.correctness.prediction_matrix` of ``models`` on ``setting``, read in one
    Parquet scan over every part of their keys (``keys``: :func:`result_keys`) - 3 to 10 times
    faster than one read per key on the digits store. When the models' example lists differ or
    some example was not scored, it falls back to ``prediction_matrix`` (which aligns them)."""
    import pyarrow.compute as pc  # deferred: pyarrow's compute module (the store loads pyarrow)

    keys = keys[keys["setting"] == setting].set_index("model")
    wanted = list(models)
    cols = ["index", "id", "status", "pred", "correct", "confidence", "entropy"]
    table = store.scan_predictions([keys.loc[m, "key"] for m in wanted], cols)   # one scan, local or bucket
    if table is None:
        return prediction_matrix(store, setting, wanted)
    codes = pc.dictionary_encode(table["key"]).combine_chunks()
    key_names = codes.dictionary.to_pylist()
    code = codes.indices.to_numpy(zero_copy_only=False)
    n_rows = np.bincount(code, minlength=len(key_names))
    order = np.lexsort((table["index"].to_numpy(), code))
    n = int(n_rows[0]) if len(n_rows) else 0
    if (len(key_names) != len(wanted) or not (n_rows == n).all() or n == 0
            or not pc.all(pc.equal(table["status"], "ok")).as_py()):
        return prediction_matrix(store, setting, wanted)
    # rows of model k: its key's rows in dataset order
    rank = {k: i for i, k in enumerate(key_names)}
    take = np.concatenate([order[rank[keys.loc[m, "key"]] * n:(rank[keys.loc[m, "key"]] + 1) * n]
                           for m in wanted])
    ids = table["id"].to_numpy(zero_copy_only=False)[take].reshape(len(wanted), n)
    if not (ids == ids[0]).all():
        return prediction_matrix(store, setting, wanted)
    arrays = {c: table[c].to_numpy(zero_copy_only=False)[take].reshape(len(wanted), n).astype(d)
              for c, d in (("pred", np.int64), ("correct", bool), ("confidence", np.float64), ("entropy", np.float64))}
    conf, ent = arrays["confidence"], arrays["entropy"]
    return PredictionMatrix(tuple(wanted), tuple(str(i) for i in ids[0]), arrays["pred"], arrays["correct"],
                            None if np.isnan(conf).any() else conf, None if np.isnan(ent).any() else ent, setting)


def _severity(setting: str) -> int | None:
    tail = setting.rsplit("+", 1)[-1].rsplit(".", 1)
    return int(tail[1]) if len(tail) == 2 and tail[1].isdigit() else None


def label_free_shifts(results: pd.DataFrame | None, natural: Sequence[tuple[str, str, str]] = (),
                      severity: int | None = SEVERITY) -> list[Shift]:
    """The shifts to estimate: the ``natural`` ``(label, id setting, shifted setting)`` with both
    settings in the store (family: the label), then every ``<id>+<corruption>.<severity>`` of the
    store whose ``<id>`` is a store setting too (family: its ImageNet-C family; ``severity=None``:
    every severity); each with at least :data:`MIN_MODELS` models on both settings. ``results``: the
    store's :meth:`~shiftbench.store.Store.results`."""
    have = store_models(results)
    out: dict[str, Shift] = {}

    def enough(x: str, y: str) -> bool:
        return len(have.get(x, set()) & have.get(y, set())) >= MIN_MODELS

    for label, x, y in natural:
        if y not in out and x != y and enough(x, y):
            out[y] = Shift(label, x, y, label, natural=True)
    for y in sorted(have, key=lambda v: (v.rsplit(".", 1)[0], _severity(v) or 0)):
        x = y.rsplit("+", 1)[0]
        fam = corruption_family(y) if "+" in y else None
        if fam is None or y in out or x not in have or not enough(x, y):
            continue
        if severity is None or _severity(y) == severity:
            out[y] = Shift(y.rsplit("+", 1)[1], x, y, fam)
    order = {f: k for k, f in enumerate(CORRUPTION_FAMILIES)}
    return sorted(out.values(), key=lambda s: (not s.natural, order.get(s.family, len(order))))


def run_estimates(store: Store, shifts: Sequence[Shift], results: pd.DataFrame | None = None) -> LabelFreeRun:
    """:func:`estimate_ood_accuracy` on every shift (every method the store has the columns for;
    a shift that fails is recorded with its reason). Each ID setting is read once per model set.

    BLAS runs on one thread here: the solves are tiny (ALine-D: pairs x models), and on a busy
    2-core machine OpenBLAS's two threads made the whole run twice as slow (5.1-6.2 s against
    2.4-3.2 s on the digits store)."""
    from threadpoolctl import threadpool_limits  # deferred: scikit-learn's dependency

    with threadpool_limits(limits=1):
        return _run_estimates(store, shifts, results)


def _run_estimates(store: Store, shifts: Sequence[Shift], results: pd.DataFrame | None) -> LabelFreeRun:
    t0 = time.perf_counter()
    run = LabelFreeRun(list(shifts))
    results = store.results() if results is None else results
    have = store_models(results)
    keys = result_keys(results)
    cache: dict[tuple[str, tuple[str, ...]], PredictionMatrix] = {}
    for s in shifts:
        models = tuple(sorted(have[s.id_setting] & have[s.ood_setting]))
        try:
            if s.natural and not same_label_space(s.id_setting, s.ood_setting):
                raise ConfigError(f"{s.id_setting!r} and {s.ood_setting!r} predict in different label spaces")
            if (s.id_setting, models) not in cache:
                cache[(s.id_setting, models)] = read_setting(store, keys, s.id_setting, models)
            ind = cache[(s.id_setting, models)]
            ood = read_setting(store, keys, s.ood_setting, models)
            run.estimates[s.ood_setting] = estimate_ood_accuracy(
                ind.models, ind.pred, ind.correct, ood.pred, ood.correct, conf_id=ind.confidence,
                conf_ood=ood.confidence, entropy_id=ind.entropy, entropy_ood=ood.entropy,
                methods=_methods(ind, ood), where=f"{s.id_setting!r} -> {s.ood_setting!r}")
        except ShiftbenchError as exc:
            run.failed[s.ood_setting] = str(exc)
    run.shifts = [s for s in shifts if s.ood_setting in run.estimates]
    run.seconds = time.perf_counter() - t0
    return run


def same_label_space(id_setting: str, ood_setting: str) -> bool:
    """Whether two settings predict in one label space (the check of ``label_free_inputs``)."""
    return _label_space(id_setting, "restricted") == _label_space(ood_setting, "restricted")


def _methods(ind: PredictionMatrix, ood: PredictionMatrix) -> tuple[str, ...]:
    """Every method, less the confidence ones where the store lacks max-softmax or entropy."""
    if any(m is None for m in (ind.confidence, ood.confidence, ind.entropy, ood.entropy)):
        return ("aline-d", "aline-s")
    return METHODS


def representative(shifts: list[Shift]) -> list[Shift]:
    """The panels drawn: up to :data:`MAX_NATURAL_PANELS` natural shifts, then the first shift of
    each corruption family."""
    natural = [s for s in shifts if s.natural][:MAX_NATURAL_PANELS]
    first: dict[str, Shift] = {}
    for s in shifts:
        if not s.natural:
            first.setdefault(s.family, s)
    return natural + list(first.values())


# ---------------------------------------------------------------------------- figures
def _line_points(res: LabelFreeEstimates):
    """(pairs in range: x, y; models: x, y) in probit units, from percent."""
    p = res.pairs[res.pairs["in_range"]]
    e = res.estimates
    return (probit(p["agreement_id"] / 100), probit(p["agreement_ood"] / 100),
            probit(e["accuracy_id"] / 100), probit(e["accuracy_ood"] / 100))


def _verdict(res: LabelFreeEstimates) -> str:
    t = res.line_test
    if t is None:
        return "no same-line test"
    where = "on the line" if t.p_value >= ON_LINE_ALPHA else "off the line"
    return f"{where} (p = {t.p_value:.2g})"


def _percent_ticks(lo: float, hi: float) -> list[float]:
    """Percent ticks for a probit axis spanning ``[lo, hi]`` (probit units)."""
    a, b = 100 * float(stats.norm.cdf(lo)), 100 * float(stats.norm.cdf(hi))
    return _ticks(max(a, 0.01), min(b, 99.99), "probit", max_ticks=6)


def plot_lines(run: LabelFreeRun, shown: list[Shift]) -> Figure:
    """Small multiples: per shift, agreement of every pair (grey) and accuracy of every model
    (black) in probit axes, with the agreement line (dashed) and the accuracy line (solid)."""
    n = len(shown)
    cols = min(n, 3)
    rows = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.4 * rows), squeeze=False)
    for ax, s in zip(axes.flat, shown):
        res = run.estimates[s.ood_setting]
        ax_, ay_, mx, my = _line_points(res)
        ax.scatter(ax_, ay_, s=4, color="#bbbbbb", alpha=0.5, lw=0, label="agreement (pairs)")
        ax.scatter(mx, my, s=12, color="#222222", lw=0, label="accuracy (models)")
        xs = np.concatenate([ax_, mx])
        ys = np.concatenate([ay_, my])
        lo, hi = float(np.nanmin(xs)), float(np.nanmax(xs))
        grid = np.linspace(lo, hi, 20)
        for line, style, name in ((res.agreement_line, "--", "agreement line"),
                                  (res.accuracy_line, "-", "accuracy line")):
            if line is not None:
                ax.plot(grid, line.slope * grid + line.bias, style, color="#d62728", lw=1.2, label=name)
        both = np.concatenate([xs, ys])
        d_lo, d_hi = float(np.nanmin(both)), float(np.nanmax(both))
        ax.plot([d_lo, d_hi], [d_lo, d_hi], ":", color="#888888", lw=0.8, label="y = x")
        for setter, (a, b) in ((ax.set_xticks, (lo, hi)), (ax.set_yticks, (float(np.nanmin(ys)), float(np.nanmax(ys))))):
            ticks = _percent_ticks(a, b)
            setter(probit(np.asarray(ticks) / 100), [_fmt(t) for t in ticks])
        ax.tick_params(labelsize=7)
        ax.set_title(f"{s.label}\n{_verdict(res)}", fontsize=8)
    empty = list(axes.flat)[n:]
    for ax in empty:
        ax.axis("off")
    fig.supxlabel("in-distribution (probit axis)", fontsize=9)
    fig.supylabel("shifted (probit axis)", fontsize=9)
    fig.tight_layout()
    # one legend for every panel, off the data (inside a panel it covered points): in an empty
    # cell of the grid, else in a row under the axis title
    handles, labels = axes[0, 0].get_legend_handles_labels()
    if empty:
        empty[0].legend(handles, labels, loc="center", fontsize=8, frameon=False)
    else:
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=len(labels), fontsize=7,
                   frameon=False)
    return fig


def lines_figure(run: LabelFreeRun, first: Shift) -> go.Figure:
    """The agreement and accuracy lines of every computed shift, one at a time (a dropdown)."""
    fig = go.Figure()
    buttons, n_traces, title = [], 0, ""
    for k, s in enumerate(run.shifts):
        res = run.estimates[s.ood_setting]
        ax_, ay_, mx, my = _line_points(res)
        e = res.estimates
        vis = s is first
        fig.add_trace(go.Scattergl(x=_round(ax_, 3), y=_round(ay_, 3), mode="markers", visible=vis,
                                   name="agreement (pairs)", marker=dict(size=4, color="rgba(120,120,120,0.35)"),
                                   hoverinfo="skip"))
        fig.add_trace(go.Scatter(x=_round(mx, 3), y=_round(my, 3), mode="markers", visible=vis,
                                 name="accuracy (models)", marker=dict(size=7, color="#222"),
                                 text=[plotly_text(m) for m in e["model"]], hovertemplate="%{text}<extra>model</extra>"))
        xs = np.concatenate([ax_, mx])
        grid = np.array([np.nanmin(xs), np.nanmax(xs)])
        for line, dash, name in ((res.agreement_line, "dash", "agreement line"), (res.accuracy_line, "solid",
                                                                                   "accuracy line")):
            slope, bias = (line.slope, line.bias) if line is not None else (np.nan, np.nan)
            fig.add_trace(go.Scatter(x=_round(grid, 3), y=_round(slope * grid + bias, 3), mode="lines",
                                     visible=vis, name=name, line=dict(color="#d62728", dash=dash, width=2),
                                     hoverinfo="skip"))
        ys = np.concatenate([ay_, my])
        xt = _percent_ticks(float(np.nanmin(xs)), float(np.nanmax(xs)))
        yt = _percent_ticks(float(np.nanmin(ys)), float(np.nanmax(ys)))
        axes = {"xaxis.tickvals": _round(probit(np.asarray(xt) / 100), 4), "xaxis.ticktext": [_fmt(t) for t in xt],
                "yaxis.tickvals": _round(probit(np.asarray(yt) / 100), 4), "yaxis.ticktext": [_fmt(t) for t in yt],
                "title.text": plotly_text(f"{s.label} ({s.ood_setting}): {_verdict(res)}")}
        buttons.append((plotly_text(s.label if s.natural else f"{s.family}: {s.label}"), axes, 4 * k))
        if vis:
            fig.update_xaxes(tickvals=axes["xaxis.tickvals"], ticktext=axes["xaxis.ticktext"])
            fig.update_yaxes(tickvals=axes["yaxis.tickvals"], ticktext=axes["yaxis.ticktext"])
            title = axes["title.text"]
        n_traces += 4
    _layout(fig, title, "in-distribution (probit axis)", "shifted (probit axis)", height=420)
    menu = []
    for label, axes, start in buttons:
        visible = [start <= i < start + 4 for i in range(n_traces)]
        menu.append(dict(label=label, method="update", args=[{"visible": visible}, axes]))
    fig.update_layout(updatemenus=[dict(buttons=menu, direction="down", x=1.0, xanchor="right", y=1.12,
                                        yanchor="top", active=run.shifts.index(first), font=dict(size=11))],
                      showlegend=True)
    return fig


def _scatter_rows(run: LabelFreeRun) -> pd.DataFrame:
    rows = []
    for s in run.shifts:
        e = run.estimates[s.ood_setting].estimates
        for m in METHODS:
            if m in e:
                rows.append(pd.DataFrame({"shift": s.ood_setting, "family": s.family, "model": e["model"],
                                          "method": m, "truth": e["accuracy_ood"], "estimate": e[m]}))
    out = pd.concat(rows, ignore_index=True)
    return out[np.isfinite(out["truth"]) & np.isfinite(out["estimate"])]


def plot_estimates(points: pd.DataFrame) -> Figure:
    """Estimate against true shifted accuracy, one colour per method, with ``y = x``."""
    fig, ax = plt.subplots(figsize=(5.2, 5.0))
    for m, (colour, label) in METHOD_STYLE.items():
        sub = points[points["method"] == m]
        if len(sub):
            ax.scatter(sub["truth"], sub["estimate"], s=6, alpha=0.55, color=colour, lw=0, label=label)
    ax.plot([0, 100], [0, 100], ":", color="#555", lw=1)
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 100)
    ax.set_xlabel("true shifted accuracy (%)")
    ax.set_ylabel("estimate without labels (%)")
    ax.legend(fontsize=8, markerscale=2, loc="upper left")
    fig.tight_layout()
    return fig


def estimates_figure(points: pd.DataFrame) -> go.Figure:
    """The interactive twin of :func:`plot_estimates` (a legend click hides a method)."""
    fig = go.Figure()
    for m, (colour, label) in METHOD_STYLE.items():
        sub = points[points["method"] == m]
        if len(sub):
            text = [plotly_text(f"{a} on {b}") for a, b in zip(sub["model"], sub["shift"])]
            fig.add_trace(go.Scattergl(x=_round(sub["truth"], 2), y=_round(sub["estimate"], 2), mode="markers",
                                       name=label, marker=dict(size=5, color=colour, opacity=0.6), text=text,
                                       hovertemplate="%{text}<br>truth %{x:.1f}%, estimate %{y:.1f}%<extra>"
                                       + label + "</extra>"))
    fig.add_trace(go.Scatter(x=[0, 100], y=[0, 100], mode="lines", name="y = x", hoverinfo="skip",
                             line=dict(color="#555", dash="dot", width=1)))
    _layout(fig, "Estimate without labels against the truth", "true shifted accuracy (%)",
            "estimate (%)", height=420)
    fig.update_xaxes(range=[0, 100])
    fig.update_yaxes(range=[0, 100])
    return fig


# ---------------------------------------------------------------------------- the table
def mae_table(table: pd.DataFrame) -> pd.DataFrame:
    """:func:`estimation_errors` with display names (methods absent everywhere dropped)."""
    cols = {"family": "family", "n_shifts": "shifts"}
    cols |= {f"mae_{m}": METHOD_STYLE[m][1] for m in METHODS if table[f"mae_{m}"].notna().any()}
    cols |= {"on_line_share": "on the line %", "mae_aline-d_on_line": "ALine-D on",
             "mae_aline-d_off_line": "ALine-D off", "strong_agreement_share": "R² ≥ 0.5 %",
             "mae_aline-d_strong": "ALine-D R² ≥ 0.5", "mae_aline-d_weak": "ALine-D R² < 0.5"}
    return table[list(cols)].rename(columns=cols)


# ---------------------------------------------------------------------------- the section
@register_section
class LabelFreeSection(Section):
    """Label-free accuracy estimates against the truth on the store's shifts (module docstring)."""

    key, title, scope = "label-free", "Accuracy without labels (results store)", "report"

    @staticmethod
    def _shifts(ctx: ReportContext) -> list[Shift]:
        """The store's shifts with parts on both sides; once per build."""
        return ctx.once("label-free shifts", lambda: LabelFreeSection._find_shifts(ctx))

    @staticmethod
    def _find_shifts(ctx: ReportContext) -> list[Shift]:
        if ctx.store is None:
            return []
        natural = [(a.shift.label, a.shift.x, a.shift.y) for t in ctx.testbeds for a in t.analyses]
        try:
            results = ctx.store_results if ctx.store_results is not None else ctx.store.results()
        except ShiftbenchError:
            return []
        shifts = label_free_shifts(results, natural)
        if not shifts:
            return []
        keys = result_keys(results)
        with_parts = {s for s in {x for sh in shifts for x in (sh.id_setting, sh.ood_setting)}
                      if any(ctx.store.parts(k) for k in keys.loc[keys["setting"] == s, "key"].head(1))}
        return [sh for sh in shifts if sh.id_setting in with_parts and sh.ood_setting in with_parts]

    def available(self, ctx: ReportContext, tb: TestbedReport | None) -> bool:
        return bool(self._shifts(ctx))

    #: what the estimates are computed by (their cache key holds its source)
    _code = (run_estimates, agreement, correctness)

    def prefetch(self, ctx: ReportContext, tb: TestbedReport | None) -> None:
        shifts = self._shifts(ctx)
        ctx.prefetch("label-free", (ctx.store_stamp(), shifts), run_estimates, ctx.store, shifts, ctx.store_results,
                     code=self._code)

    def render(self, ctx: ReportContext, tb: TestbedReport | None) -> list[Rendered]:
        anchor = ctx.anchor(self.key)
        assert ctx.store is not None
        shifts, store = self._shifts(ctx), ctx.store
        # kept between builds: the estimates are a pure function of the store's finished keys
        run = ctx.memo("label-free", (ctx.store_stamp(), shifts),
                       lambda: run_estimates(store, shifts, ctx.store_results), code=self._code)
        parts = [self._intro(run)]
        if not run.shifts:
            parts.append('<p class="sb-reason">No shift could be estimated: '
                         + "; ".join(esc(v) for v in list(run.failed.values())[:3]) + ".</p>")
            return [Rendered(self.title, anchor, section_html(anchor, self.title, "".join(parts), level=2))]
        out = ctx.out_dir / "label-free"
        out.mkdir(parents=True, exist_ok=True)
        families = run.families
        shown = representative(run.shifts)
        # side by side, each half the page wide, under one caption for both (so that both start at
        # one height); how to read the lines and the test folds below them
        points = _scatter_rows(run)
        parts.append("<p><b>Agreement and accuracy lines</b> (left): grey, pairs' agreement; black, models' accuracy; "
                     "dashed / solid, the agreement / accuracy line (probit fits). <b>Estimates against the truth</b> "
                     f"(right): {len(points):,} ({points['model'].nunique()} models × {len(run.shifts)} shifts × "
                     "method), exact on the dotted line.</p>")
        parts.append(pair_html(ctx.plot(lines_figure(run, shown[0]), half=True),
                               ctx.plot(estimates_figure(points), half=True)))
        # each figure's files are named, and go on the row of the tables' files
        files = [ctx.static_plot(out / "lines", plot_lines, run, shown).replace(">Figure:", ">Lines:", 1),
                 ctx.static_plot(out / "estimates", plot_estimates, points).replace(">Figure:", ">Estimates:", 1)]
        parts.append("<details><summary>How to read the lines, their verdict and the error table's columns"
                     "</summary><p>Grey: the agreement of every pair of models inside [5%, 98%] on both sets; black: "
                     "each model's accuracy; dashed: the agreement line, solid: the accuracy line (probit fits); the "
                     "dropdown shows every computed shift. Where the two lines coincide, agreement is on the line and "
                     "ALine's estimates inherit the accuracy line. The verdict in the title is the same-line F test "
                     f"(Chow test; pairs share models, so read p as a guide) at α = {ON_LINE_ALPHA}.</p><p>In the "
                     "table, <em>on the line %</em> is the share of the family's shifts where the same-line test does "
                     "not reject, <em>ALine-D on / off</em> ALine-D's error on those shifts and on the rest. The test "
                     "needs the shifted labels; the diagnostic that does not is how linear agreement itself is (Baek "
                     "et al. 2022): <em>R² ≥ 0.5 %</em> is the share of shifts whose agreement line has R² ≥ 0.5, and "
                     "the last two columns ALine-D's error on those and on the rest.</p></details>")
        table = estimation_errors(run.estimates, families)
        parts.append('<h3 class="sb-tight">Mean absolute error per shift family <span class="sb-note">(|estimate − '
                     "truth| in pp, over the family's models and shifts)</span></h3>")
        shown_table = mae_table(table)
        parts.append('<div class="sb-narrow">' + compact(small_table(
            shown_table, {c: ".2f" for c in shown_table.columns if c not in ("family", "shifts")}
            | {"shifts": "d", "on the line %": ".0f", "R² ≥ 0.5 %": ".0f"})) + "</div>")
        parts.append(file_row(*files,
                              ctx.table(table, out / "mae", "Label-free estimates: mean absolute error (pp) per "
                                        "shift family and method", "Table"),
                              ctx.table(setting_errors(run.estimates, families), out / "shifts",
                                        "Label-free estimates per shift: probit lines, same-line test, MAE (pp)",
                                        "Per shift")))
        return [Rendered(self.title, anchor, section_html(anchor, self.title, "".join(parts), level=2))]

    @staticmethod
    def _intro(run: LabelFreeRun) -> str:
        corrupted = [s for s in run.shifts if not s.natural]
        note = (f" Corrupted settings at severity {SEVERITY} only ({len(corrupted)}; <code>bench/label_free.py"
                "</code> computes every severity)." if corrupted else "")
        failed = (' <span class="sb-note">Not estimated: ' + "; ".join(
            f"<code>{esc(k)}</code> ({esc(v)})" for k, v in list(run.failed.items())[:4]) + ".</span>"
            if run.failed else "")
        return ("<p>Each model's shifted accuracy estimated from its stored predictions without the shifted "
                "labels, against the truth: <b>ALine-D</b> and <b>ALine-S</b> (Baek et al. 2022), <b>ATC</b> (Garg "
                "et al. 2022), <b>DoC</b> (Guillory et al. 2021), <b>AC</b> (average confidence); <code>shiftbench "
                "estimate</code> computes any pair of settings (docs/label_free.md). "
                f"{len(run.shifts)} shifts in {run.seconds:.1f} s."
                f"{note}{failed}</p>")
