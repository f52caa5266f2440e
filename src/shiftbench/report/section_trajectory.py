"""The HTML report's "Fine-tuning trajectories" section (key ``fine-tuning``).

For each testbed, every trajectory stored in the report's results store (``--store``; studies
of kind ``trajectory``, written by :class:`shiftbench.studies.trajectory.Trajectory`) whose
in-distribution and shifted settings are both in the testbed is drawn over the testbed's trend,
with its checkpoints' effective robustness against step/epoch and a table of the numbers
(Andreassen et al. 2021). Each recipe with two or more runs (seeds; a ``recipe:<name>`` tag or
``<recipe>-seed<k>`` names) also gets Andreassen et al. 2022's statistics
(:func:`~shiftbench.analysis.trajectory.trajectory_summary`): effective robustness against ID
accuracy beside the testbed's models and their intervals, binned mean ± s.d. of the runs, the
y = x reference and the percentage-of-gap panel, with the bins as a table. The section is left
out when no stored trajectory fits the testbed.
"""
from __future__ import annotations

import pandas as pd

from shiftbench.analysis.trajectory import (
    RECIPE_TAG,
    is_checkpoint,
    run_recipe,
    trajectory_effective_robustness,
    trajectory_endpoints,
    trajectory_summary,
)
from shiftbench.analysis.trend import fit_trend
from shiftbench.errors import ShiftbenchError
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
from shiftbench.report.tables import file_slug, trajectory_stem
from shiftbench.report.trajectory_figures import (
    plot_trajectory,
    plot_trajectory_er,
    plot_trajectory_stats,
    trajectory_er_figure,
    trajectory_figure,
    trajectory_stats_figure,
)
from shiftbench.studies.trajectory import KIND


def stored_trajectories(store) -> dict[str, tuple[pd.DataFrame, str, list[str]]]:
    """``{name: (rows, id_setting, shifted settings)}`` of every trajectory in ``store``
    (unreadable studies are skipped)."""
    out = {}
    if store is None:
        return out
    for name in store.study_names(KIND):
        try:
            frame = store.read_study(KIND, name)
            meta = store.study_meta(KIND, name)
        except ShiftbenchError:
            continue
        settings = list(meta.get("settings") or dict.fromkeys(frame.get("setting", [])))
        x = meta.get("id_setting") or (settings[0] if settings else None)
        if x is None or not len(frame):
            continue
        recipe = next((str(t)[len(RECIPE_TAG):] for t in meta.get("tags") or () if str(t).startswith(RECIPE_TAG)), None)
        if recipe:
            frame.attrs["recipe"] = recipe
        out[name] = (frame, x, [s for s in settings if s != x])
    return out


def _pairs(ctx: ReportContext, tb: TestbedReport) -> dict[tuple[str, str], dict[str, pd.DataFrame]]:
    """Trajectories of the store by (x, y) pair of settings both in the testbed (cached)."""
    if "trajectories" in tb.cache:
        return tb.cache["trajectories"]  # type: ignore[return-value]
    settings = set(tb.testbed.settings)
    pairs: dict[tuple[str, str], dict[str, pd.DataFrame]] = {}
    for name, (frame, x, ys) in stored_trajectories(ctx.store).items():
        for y in ys:
            if x in settings and y in settings:
                pairs.setdefault((x, y), {})[name] = frame
    tb.cache["trajectories"] = pairs
    return pairs


def _trend(ctx: ReportContext, tb: TestbedReport, x: str, y: str):
    """The shift analysis' fit and band when the report analysed this pair, else a fit here."""
    for a in tb.analyses:
        if a.shift.x == x and a.shift.y == y and a.fit is not None and a.fit.kind == "linear":
            return a.fit, a.band

    models = tb.testbed.select([m for m in tb.testbed.models if not is_checkpoint(m)])
    return fit_trend(models, x, y, ctx.scale), None


@register_section
class TrajectorySection(Section):
    """Fine-tuning trajectories drawn over the trend, and their effective robustness by step."""

    key, title = "fine-tuning", "Fine-tuning trajectories"

    def available(self, ctx: ReportContext, tb: TestbedReport | None) -> bool:
        return tb is not None and ctx.store is not None and bool(_pairs(ctx, tb))

    def render(self, ctx: ReportContext, tb: TestbedReport | None) -> list[Rendered]:
        assert tb is not None
        parts = ['<p class="sb-note">The checkpoints of runs evaluated with <code>shiftbench.Trajectory</code>, '
                 "against the trend of the standard models. Andreassen et al. (2021): pre-trained models are "
                 "effectively robust early in fine-tuning, and this vanishes as it converges. Ring: first "
                 "checkpoint; star: last.</p>"]
        for (x, y), trajs in _pairs(ctx, tb).items():
            parts.append(self._pair(ctx, tb, x, y, trajs))
        anchor = ctx.anchor(tb.anchor, self.key)
        return [Rendered(self.title, anchor, section_html(anchor, self.title, "".join(parts)))]

    def _pair(self, ctx: ReportContext, tb: TestbedReport, x: str, y: str, trajs: dict[str, pd.DataFrame]) -> str:
        head = f"<h4>{esc(y)} vs {esc(x)}: {len(trajs)} trajectories</h4>"
        try:
            fit, band = _trend(ctx, tb, x, y)
            ers = {n: trajectory_effective_robustness(frame=f, x=x, y=y, fit=fit) for n, f in trajs.items()}
        except ShiftbenchError as exc:
            return head + f'<p class="sb-reason">No trend to compare with: {esc(str(exc).rstrip("."))}.</p>'
        lines = []
        for name, er in ers.items():
            s = trajectory_endpoints(er)
            lines.append(f"<li><b>{esc(name)}</b> ({s['n_checkpoints']} checkpoints): effective robustness "
                         f"{s['start_er']:+.2f} pp at step {s['start_step']}, peak {s['peak_er']:+.2f} pp at step "
                         f"{s['peak_step']} ({x} {s['peak_x_acc']:.2f}%), {s['end_er']:+.2f} pp at the last step "
                         f"{s['end_step']} ({x} {s['end_x_acc']:.2f}%, {y} {s['end_y_acc']:.2f}%).</li>")
        body = [head, f'<ul class="sb-tight">{"".join(lines)}</ul>']
        stem = tb.dir / trajectory_stem(x, y)
        title = f"Fine-tuning trajectories ({tb.testbed.name}): {y} vs {x}"
        by = "epoch" if all(e["epoch"].notna().all() for e in ers.values()) else "step"
        er_title = f"Effective robustness on {y} during fine-tuning ({tb.testbed.name})"
        # side by side, half the page each: short titles, the legends in rows under the plots, one height
        scatter = trajectory_figure(tb.testbed, x, y, ers, fit=fit, band=band, title=f"Trajectories: {y} vs {x}",
                                    legend_below=True)
        er_fig = trajectory_er_figure(ers, by=by, title=f"Effective robustness on {y} (pp)", legend_below=True)
        height = max(int(scatter.layout.height), int(er_fig.layout.height))
        scatter.update_layout(height=height)
        er_fig.update_layout(height=height)
        left, right = [ctx.plot(scatter, half=True)], [ctx.plot(er_fig, half=True)]
        if ctx.figure_formats:
            left.append(file_row(ctx.static_plot(stem, plot_trajectory, tb.testbed, x, y, ers, fit=fit, band=band,
                                                 title=title)))
            right.append(file_row(ctx.static_plot(stem.with_name(stem.name + "_er"), plot_trajectory_er, ers, by=by,
                                                  title=er_title)))
        body.append(pair_html("".join(left), "".join(right)))
        table = pd.concat([e.assign(trajectory=n) for n, e in ers.items()], ignore_index=True)
        table = table[["trajectory", "step", "epoch", "x_acc", "y_acc", "predicted_y_acc", "effective_robustness"]]
        shown = table.rename(columns={"x_acc": f"{x} %", "y_acc": f"{y} %", "predicted_y_acc": "trend %",
                                      "effective_robustness": "ER (pp)"})
        # the table's files and its folded rows on one line
        body.append(file_row(ctx.table(table, stem, f"Fine-tuning trajectories on {tb.testbed.name}: {y} vs {x}"),
                             f"<details><summary>Every checkpoint ({len(shown)} rows: step, epoch, both accuracies, "
                             f"the trend's prediction and effective robustness)</summary>"
                             + compact(small_table(shown, {"step": "d", "epoch": ".2f", f"{x} %": ".2f",
                                                           f"{y} %": ".2f", "trend %": ".2f", "ER (pp)": "+.2f"}))
                             + "</details>"))
        body.extend(self._recipes(ctx, tb, x, y, trajs, fit))
        return "".join(body)

    def _recipes(self, ctx: ReportContext, tb: TestbedReport, x: str, y: str, trajs: dict[str, pd.DataFrame],
                 fit) -> list[str]:
        """Andreassen et al. 2022's statistics of every recipe with two or more runs."""
        groups: dict[str, dict[str, pd.DataFrame]] = {}
        for name, frame in trajs.items():
            groups.setdefault(run_recipe(name, frame)[0], {})[name] = frame
        body = []
        for recipe, runs in groups.items():
            if len(runs) < 2:
                continue
            s = trajectory_summary(tb.testbed, runs, x, y, fit=fit, recipe=recipe)
            head = (f"<h5>{esc(recipe)}: {len(runs)} runs, binned on {esc(x)} accuracy</h5>"
                    f'<p class="sb-note">Andreassen et al. (2022): the runs\' checkpoints pooled in {len(s.bins)} '
                    "equal-width bins of ID accuracy, mean ± s.d. of effective robustness per bin, beside the "
                    "testbed's models (95% Clopper-Pearson intervals) and the effective robustness of y = x (a model "
                    "that loses nothing under the shift); right: the same as a percentage of that gap. Maximum over "
                    f"bins: <b>{s.max_er:+.2f} pp</b>; largest share of the gap: {s.max_percent_of_gap:+.1f}%.</p>")
            stem = tb.dir / f"{trajectory_stem(x, y)}_stats_{file_slug(recipe)}"
            parts = [ctx.plot(trajectory_stats_figure(tb.testbed, s))]
            if ctx.figure_formats:
                parts.append(file_row(ctx.static_plot(stem, plot_trajectory_stats, tb.testbed, s)))
            bins = s.bins[["x_low", "x_high", "n_checkpoints", "n_runs", "er_mean", "er_sd", "percent_of_gap_mean",
                           "percent_of_gap_sd"]]
            shown = bins.rename(columns={"x_low": f"{x} % from", "x_high": "to", "n_checkpoints": "checkpoints",
                                         "n_runs": "runs", "er_mean": "ER mean (pp)", "er_sd": "ER s.d.",
                                         "percent_of_gap_mean": "% of gap", "percent_of_gap_sd": "% s.d."})
            parts.append(file_row(ctx.table(bins.assign(recipe=recipe), stem,
                                            f"Effective robustness during fine-tuning, {recipe}: {y} vs {x}"),
                                  "<details><summary>The bins</summary>" + compact(small_table(shown, {
                                      f"{x} % from": ".1f", "to": ".1f", "checkpoints": "d", "runs": "d",
                                      "ER mean (pp)": "+.2f", "ER s.d.": ".2f", "% of gap": "+.1f",
                                      "% s.d.": ".1f"})) + "</details>"))
            body.append(head + "".join(parts))
        return body


__all__ = ["TrajectorySection", "stored_trajectories"]
