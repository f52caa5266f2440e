"""Analyse a list of (in-distribution, shifted) setting pairs and write a Markdown report.

:data:`NATURAL_SHIFTS` are the natural distribution shifts of Taori et al. (2020), each with the
in-distribution setting it is compared against: the ImageNet validation set for ImageNetV2 and
ImageNet-Sketch, the validation set restricted to the shift's classes for ObjectNet,
ImageNet-R, ImageNet-A and the video anchors, and pm-0 (anchor frames) for pm-10. Each trend
follows a named recipe (:func:`~shiftbench.analysis.placement.fit_shift`): ImageNet-A as its
authors fitted it, two independent lines split at the ResNet-50 it was filtered against
(``taori2020``); every other shift on the published testbed with the authors' model selection
(``taori2020``), elsewhere on every STANDARD model (``standard``).
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from shiftbench.analysis import (
    Band,
    TrendFit,
    bootstrap_band,
    effective_robustness,
    most_effectively_robust,
    robustness_correlation,
)

# the natural shifts and how each is fitted are pure data and code, shared with analysis.placement
from shiftbench.analysis.placement import (
    NATURAL_SHIFTS,
    ShiftPair,
    fit_shift,
    fitted_on_note,
    place_models,
    skipped_lines,
    skipped_without_trend,
)
from shiftbench.analysis.robustness import VERDICT_RULE, trend_verdicts
from shiftbench.analysis.trend import DEFAULT_FIT_ON, TwoLineBand, TwoLineTrendFit, fit_note
from shiftbench.errors import ConfigError, ShiftbenchError, did_you_mean
from shiftbench.report.cache import CACHE_DIR, SharedCache
from shiftbench.report.figures import FigureWriter, plot_trend, plot_trend_inputs
from shiftbench.report.tables import file_slug, placement_table
from shiftbench.testbed import Testbed

#: Types left out of the correlation section: trained like the fit's models, so ~0 by design.
CORRELATION_EXCLUDES = ("STANDARD", "LOW_ACCURACY_CNN")


@dataclass
class ShiftAnalysis:
    """Fit, band and effective robustness of one shift, or why it could not be analysed."""

    shift: ShiftPair
    fit: TrendFit | TwoLineTrendFit | None = None
    band: Band | TwoLineBand | None = None
    er: pd.DataFrame | None = None
    error: str | None = None
    figures: list[Path] = field(default_factory=list)


def analyse_shift(
    testbed: Testbed, shift: ShiftPair, *, scale: str = "logit",
    fit_on: str | Iterable[str] | None = DEFAULT_FIT_ON, n_resamples: int = 1000, seed: int = 0,
    recipe: str | None = None,
) -> ShiftAnalysis:
    """Fit the trend by ``recipe`` (default: :func:`~shiftbench.analysis.placement.default_recipe`,
    the authors' two lines around a pivot model in the testbed), its bootstrap band and every
    model's effective robustness; a failure is recorded, not raised."""
    missing = [s for s in (shift.x, shift.y) if s not in testbed.settings]
    if missing:
        return ShiftAnalysis(shift, error=f"testbed {testbed.name!r} has no setting {missing[0]!r}")
    try:
        fit = fit_shift(testbed, shift, scale, fit_on=fit_on, recipe=recipe)
        band = bootstrap_band(fit, n_resamples=n_resamples, seed=seed)
        er = effective_robustness(testbed, shift.x, shift.y, fit=fit, band=band)
    except ShiftbenchError as exc:
        return ShiftAnalysis(shift, error=str(exc))
    return ShiftAnalysis(shift, fit=fit, band=band, er=er)


def _fmt_table(frame: pd.DataFrame) -> str:
    """A DataFrame as a GitHub Markdown table (numbers to 2 decimals)."""
    cols = list(frame.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, row in frame.iterrows():
        cells = [f"{v:.2f}" if isinstance(v, float) else str(v).replace("|", "\\|") for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


FITS_COLUMNS = ["shift", "x", "y", "kind", "slope", "intercept", "r2", "n_models", "n_skipped",
                "recipe", "slope_below", "intercept_below", "n_excluded", "excluded"]


def fits_table(results: Sequence[ShiftAnalysis]) -> pd.DataFrame:
    """One row per analysed shift: the fit's parameters, how many models it used, its recipe, and
    how many of the STANDARD models it left out and why (``excluded``: "count reason; ...").
    ``slope`` and ``intercept`` are the line's; a two-line trend's upper line's, with the lower
    line's in ``slope_below`` and ``intercept_below``; a hinge's ``slope_below`` is its slope
    below the knot (its ``intercept`` the trend at the knot)."""
    rows = []
    for r in results:
        if r.fit is None:
            continue
        d = r.fit.to_dict()
        if isinstance(r.fit, TwoLineTrendFit):
            d.update(slope=d["above"]["slope"], intercept=d["above"]["intercept"],
                     slope_below=d["below"]["slope"], intercept_below=d["below"]["intercept"])
        rows.append({"shift": r.shift.label, "x": r.shift.x, "y": r.shift.y, "kind": d["kind"],
                     "slope": d["slope"], "intercept": d["intercept"], "r2": d["r2"],
                     "n_models": d["n_models"], "n_skipped": d["n_skipped"], "recipe": d["recipe"],
                     "slope_below": d.get("slope_below", float("nan")),
                     "intercept_below": d.get("intercept_below", float("nan")),
                     "n_excluded": d["n_excluded"], "excluded": "; ".join(f"{n} {why}" for why, n in r.fit.excluded)})
    return pd.DataFrame(rows, columns=FITS_COLUMNS)


def write_testbed_report(
    testbed: Testbed, out_dir: str | Path, *, shifts: Sequence[ShiftPair] = NATURAL_SHIFTS, top: int = 5,
    scale: str = "logit", n_resamples: int = 1000, seed: int = 0,
    on_step: Callable[[str], None] | None = None, highlight: Sequence[str] = (),
    figures: FigureWriter | None = None,
) -> tuple[str, list[ShiftAnalysis]]:
    """Analyse ``shifts`` on ``testbed``, write its figures and CSVs under ``out_dir/<testbed>/``
    and return the Markdown section for it together with the analyses (``highlight``: models
    drawn as labelled stars in every figure). ``figures`` writes the PNGs (default: a
    :class:`~shiftbench.report.figures.FigureWriter` of its own, in the background, skipping a
    PNG whose figure is unchanged since ``out_dir/.shiftbench-cache`` recorded it, copying one an earlier
    report drew (:class:`~shiftbench.report.cache.SharedCache`), and done before
    this returns; a writer passed in is waited for by the caller)."""
    out = Path(out_dir) / testbed.name
    out.mkdir(parents=True, exist_ok=True)
    writer = figures if figures is not None else FigureWriter(cache=Path(out_dir) / CACHE_DIR,
                                                              shared=SharedCache.default())
    results: list[ShiftAnalysis] = []
    try:
        for shift in shifts:
            if on_step:
                on_step(f"{testbed.name}: {shift.label}")
            res = analyse_shift(testbed, shift, scale=scale, n_resamples=n_resamples, seed=seed)
            if res.fit is not None:
                kw = dict(fit=res.fit, band=res.band, title=shift.label,
                          highlight=[m for m in highlight if m in testbed.models])
                res.figures.extend(writer.save_lazily(functools.partial(plot_trend, testbed, shift.x, shift.y, **kw),
                                                      out / file_slug(shift.label), [".png"],
                                                      plot_trend_inputs(testbed, shift.x, shift.y, **kw)))
            results.append(res)
    finally:
        if figures is None:
            writer.wait()

    fits = fits_table(results)
    fits.reindex(columns=FITS_COLUMNS).to_csv(out / "fits.csv", index=False)
    long = [r.er.assign(shift=r.shift.label).reset_index() for r in results if r.er is not None]
    if long:
        pd.concat(long).to_csv(out / "effective_robustness.csv", index=False)

    lines = [f"## {testbed.name}", "", f"{len(testbed)} models, {len(testbed.settings)} settings; "
             f"types: " + ", ".join(f"{k} {v}" for k, v in testbed.model_types.value_counts().items()) + ".", "",
             f"Trends fitted in {scale} space on STANDARD models, each by the recipe its row names "
             "(taori2020: the authors' model selection, and ImageNet-A's two lines; standard: every STANDARD "
             f"model); 95% bootstrap bands from {n_resamples} resamples; effective robustness in percentage "
             "points with its interval.", ""]
    if len(fits):
        lines += [_fmt_table(fits), ""]
    lines += at_a_glance(results)
    for res in results:
        lines += [f"### {res.shift.label}: `{res.shift.y}` vs `{res.shift.x}`", ""]
        if res.error:
            lines += [f"Not analysed: {res.error}.", ""]
            continue
        assert res.fit is not None and res.er is not None
        f = res.fit
        ty, tx = ("y", "x") if scale == "linear" else (f"{scale}(y)", f"{scale}(x)")
        lines += [f"Fit: {trend_text(f, ty, tx)} (r² {f.r2:.3f}; {fit_note(f)}).", "",
                  f"![{res.shift.label}]({testbed.name}/{res.figures[0].name})", "",
                  f"Most effectively robust models (top {top}):", ""]
        best = most_effectively_robust(res.er, top).reset_index()
        best = best[["model", "model_type", "x_acc", "y_acc", "predicted_y_acc", "effective_robustness",
                     "er_low", "er_high"]]
        lines += [_fmt_table(best), ""]
    lines += correlation_section(results)
    return "\n".join(lines), results


def trend_text(f: TrendFit | TwoLineTrendFit, ty: str = "logit(y)", tx: str = "logit(x)") -> str:
    """The trend in words: its equation(s), and for ImageNet-A's two lines which side is which."""
    if isinstance(f, TwoLineTrendFit):
        at = f"{f.pivot_model}'s {f.pivot:.2f}%" if f.pivot_model else f"{f.pivot:.2f}%"
        lo, hi = f.below, f.above
        return (f"two independent lines split at {at} (Taori et al. 2020): {ty} = {lo.slope:.3f} {tx} "
                f"{lo.intercept:+.3f} at or below it, {ty} = {hi.slope:.3f} {tx} {hi.intercept:+.3f} above it")
    if f.kind == "piecewise":
        return (f"continuous hinge at {getattr(f, 'pivot'):.2f}% (shiftbench's variant): slope "
                f"{getattr(f, 'slope_below'):.3f} below, {f.slope:.3f} above")
    return f"{ty} = {f.slope:.3f} {tx} {f.intercept:+.3f}"


def at_a_glance(results: Sequence[ShiftAnalysis], top: int = 10) -> list[str]:
    """Markdown bullets: per analysed shift, how well the trend holds and who beats it."""
    lines = []
    for r in results:
        if r.fit is None or r.er is None:
            continue
        best = most_effectively_robust(r.er, top)
        types = best["model_type"].value_counts()
        lead = best.iloc[0]
        verdict = trend_verdicts(r.er).value_counts()
        lines.append(
            f"- **{r.shift.label}**: r² {r.fit.r2:.3f} over {r.fit.n_models} standard models; "
            f"{verdict.get('above', 0)} of {len(r.er) - verdict.get('outside', 0)} models inside the fitted ID range "
            f"lie significantly above the trend ({verdict.get('outside', 0)} outside it not counted); "
            "the most effectively robust is "
            f"`{best.index[0]}` ({lead.model_type}, {lead.effective_robustness:+.1f} pp); "
            f"top {len(best)} by type: " + ", ".join(f"{t} {n}" for t, n in types.items()) + ".")
    return (["At a glance:", ""] + lines + ["", f"({VERDICT_RULE[0].upper() + VERDICT_RULE[1:]}.)", ""]
            if lines else [])


def correlation_section(results: Sequence[ShiftAnalysis], reference: str = "ImageNetV2") -> list[str]:
    """Markdown lines: correlation of effective robustness on ``reference`` with each other shift
    over the models of every type but :data:`CORRELATION_EXCLUDES` (Pearson and Spearman)."""
    ref = next((r for r in results if r.shift.label == reference and r.er is not None), None)
    if ref is None:
        return []
    rows = []
    for r in results:
        if r is ref or r.er is None:
            continue
        try:
            c = robustness_correlation(ref.er, r.er, exclude_types=CORRELATION_EXCLUDES)
        except ShiftbenchError as exc:
            rows.append({"shift": r.shift.label, "n_models": 0, "pearson_r": float("nan"),
                         "pearson_p": float("nan"), "spearman_rho": float("nan"), "spearman_p": str(exc)})
            continue
        rows.append({"shift": r.shift.label, "n_models": c.n_models, "pearson_r": c.pearson_r,
                     "pearson_p": f"{c.pearson_p:.1e}", "spearman_rho": c.spearman_rho,
                     "spearman_p": f"{c.spearman_p:.1e}"})
    if not rows:
        return []
    return [f"### Does effective robustness on {reference} carry over?", "",
            "Correlation of effective robustness over the models with an intervention or more data "
            f"(all types but {', '.join(CORRELATION_EXCLUDES)}):", "",
            _fmt_table(pd.DataFrame(rows)), ""]


def _your_models(testbed: Testbed, mine: Sequence[str], results: Sequence[ShiftAnalysis], out: Path, *,
                 scale: str, n_resamples: int, seed: int) -> list[str]:
    """Markdown lines of the "Your models" section for one testbed (and its CSV)."""
    lines = [f"### {testbed.name}", ""]
    if not mine:
        return lines + [f"None of your models is in {testbed.name}.", ""]
    placed = place_models(testbed, mine, [r.shift for r in results if r.fit is not None], scale=scale,
                          n_resamples=n_resamples, seed=seed)
    placed.to_csv(out / testbed.name / "your_models.csv", index=False)
    lines += [fitted_on_note(placed.attrs["fits"], testbed, mine), ""]
    if placed.attrs.get("unplaced"):
        lines += ["Not placed (no shift with both accuracies): " + ", ".join(placed.attrs["unplaced"]) + ".", ""]
    skipped = placed.attrs["skipped"] + [e for r in results if r.fit is None
                                         for e in skipped_without_trend(testbed, mine, r.shift, r.error or "")]
    if skipped:
        lines += ["Not placed:", ""] + [f"- {line}" for line in skipped_lines(skipped)] + [""]
    if len(placed):
        lines += [_fmt_table(placement_table(placed)), ""]
    return lines


def write_report(
    testbeds: Sequence[Testbed], out_dir: str | Path, *, shifts: Sequence[ShiftPair] = NATURAL_SHIFTS,
    top: int = 5, scale: str = "logit", n_resamples: int = 1000, seed: int = 0,
    on_step: Callable[[str], None] | None = None, highlight: Sequence[str] | None = None,
) -> Path:
    """Write ``out_dir/summary.md`` (plus figures and CSVs) for each testbed; returns its path.

    With ``highlight`` (models of the testbeds, your own say), every figure marks them and a
    "Your models" section comes first: their effective robustness, 95% interval and rank on
    every fitted shift (:func:`~shiftbench.analysis.placement.place_models`)."""
    known = {m for tb in testbeds for m in tb.models}
    marked = list(dict.fromkeys(str(m) for m in ([highlight] if isinstance(highlight, str) else highlight or ())))
    for m in marked:
        if m not in known:
            raise ConfigError(did_you_mean("model", m, sorted(known), "highlight names models of the testbeds"))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sections = ["# shiftbench report: effective robustness under natural distribution shift", "",
                f"Each figure plots shifted against in-distribution accuracy in {scale} space; the line is "
                "fitted on the standard models (Taori et al. 2020), error bars are 99.5% Clopper-Pearson "
                "intervals. Effective robustness = a model's shifted accuracy minus the line's prediction.", ""]
    head = len(sections)
    yours = ["## Your models", "",
             "Effective robustness (pp, with its 95% interval) and its rank among the models of the testbed "
             "evaluated on both settings (1 = most effectively robust).", ""]
    # one background writer for every testbed's figures
    writer = FigureWriter(cache=out / CACHE_DIR, shared=SharedCache.default())
    try:
        for tb in testbeds:
            mine = [m for m in marked if m in tb.models]
            text, results = write_testbed_report(tb, out, shifts=shifts, top=top, scale=scale,
                                                 n_resamples=n_resamples, seed=seed, on_step=on_step, highlight=mine,
                                                 figures=writer)
            sections.append(text)
            if marked:
                yours += _your_models(tb, mine, results, out, scale=scale, n_resamples=n_resamples, seed=seed)
    finally:
        writer.wait()
    if marked:
        sections[head:head] = yours                             # right after the title and the intro
    path = out / "summary.md"
    path.write_text("\n".join(sections) + "\n")
    return path
