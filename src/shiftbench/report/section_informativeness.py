"""Report section: which settings tell model groups apart beyond ID accuracy (Djolonga et al.
2021; :mod:`shiftbench.analysis.informativeness`), with a small bootstrap to keep the report fast."""
from __future__ import annotations

from shiftbench.analysis.informativeness import informativeness_groups, informativeness_ranking, top_informative
from shiftbench.report.metric_figures import informativeness_figure, plot_informativeness
from shiftbench.report.sections import (
    Rendered,
    ReportContext,
    Section,
    TestbedReport,
    esc,
    register_section,
    section_html,
    small_table,
)


def _id_setting(tb: TestbedReport) -> str | None:
    t = tb.testbed
    return "val" if "val" in t.settings else next((a.shift.x for a in tb.analysed), None)


@register_section
class InformativenessSection(Section):
    """Per testbed with at least two groups of ``min_models`` models (the baseline and one more):
    the ``top`` settings whose accuracy most improves telling each group from STANDARD."""

    key, title = "informativeness", "Metric informativeness"
    #: Small on purpose: the report ranks every setting (213 on imagenet-reference) in a few seconds.
    n_resamples = 20
    top = 10
    min_models = 10

    def available(self, ctx: ReportContext, tb: TestbedReport | None) -> bool:
        if tb is None or len(tb.testbed.settings) < 2:
            return False
        x = _id_setting(tb)
        return x is not None and bool(informativeness_groups(tb.testbed, x, min_models=self.min_models))

    def render(self, ctx: ReportContext, tb: TestbedReport | None) -> list[Rendered]:
        assert tb is not None
        t, x = tb.testbed, _id_setting(tb)
        assert x is not None
        ranking = informativeness_ranking(t, x=x, n_resamples=self.n_resamples, min_models=self.min_models,
                                          seed=ctx.seed)
        anchor = ctx.anchor(tb.anchor, self.key)
        a = ranking.attrs
        if ranking.empty:
            note = (f'<p class="sb-note">No setting has {a["min_models"]} models of {esc(", ".join(a["groups"]))} and '
                    f"of STANDARD evaluated on it and on <code>{esc(x)}</code>; nothing to rank.</p>")
            return [Rendered(self.title, anchor, section_html(anchor, self.title, note))]
        best = top_informative(ranking, self.top)
        parts = [f"<p>Does a setting's accuracy help tell a group of models from the STANDARD ones beyond "
                 f"<code>{esc(x)}</code> accuracy (Djolonga et al. 2021)? Per group, a logistic regression on the "
                 f"standardised logit accuracies predicts membership from <code>{esc(x)}</code> alone and from "
                 f"<code>{esc(x)}</code> plus the setting; the gain is the difference of their {a['n_folds']}-fold "
                 f"cross-validated balanced accuracies (points), mean ± s.d. over {a['n_resamples']} stratified "
                 f"bootstrap resamples of the models. {ranking['setting'].nunique()} settings ranked for "
                 f"{len(a['groups'])} groups ({esc(', '.join(a['groups']))}) in {a['seconds']:.1f} s; pairs with "
                 f"fewer than {a['min_models']} models per group are left out ({len(a['skipped'])}).</p>"]
        title = f"Most informative settings beyond {x} accuracy ({t.name})"
        parts.append(ctx.plot(informativeness_figure(best, title=title)))
        parts.append(ctx.static_figure(plot_informativeness(best, title=title), tb.dir / "informativeness"))
        shown = best[["group", "rank", "setting", "gain_mean", "gain_sd", "score_id", "score_metric", "n_group",
                      "n_baseline"]].rename(columns={"gain_mean": "gain", "gain_sd": "s.d.",
                                                     "score_id": f"{x} only %", "score_metric": "+ setting %"})
        parts.append(small_table(shown, {"rank": "d", "gain": "+.1f", "s.d.": ".1f", f"{x} only %": ".1f",
                                         "+ setting %": ".1f", "n_group": "d", "n_baseline": "d"}))
        parts.append(ctx.table(ranking, tb.dir / "informativeness",
                               f"Informativeness of every setting beyond {x} accuracy on {t.name}", "Full ranking"))
        return [Rendered(self.title, anchor, section_html(anchor, self.title, "".join(parts)))]
