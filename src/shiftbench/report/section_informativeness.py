"""Report section: which settings tell model groups apart beyond ID accuracy (the ``djolonga2021``
recipe of :mod:`shiftbench.analysis.informativeness`: Djolonga et al. 2021, §3, Fig. 4), with a
small bootstrap to keep the report fast."""
from __future__ import annotations

from shiftbench.analysis import informativeness
from shiftbench.analysis.informativeness import (
    DEFAULT_METHOD,
    informativeness_groups,
    informativeness_ranking,
    method_info,
    top_informative,
    with_method_columns,
)
from shiftbench.errors import DataError
from shiftbench.report.metric_figures import informativeness_figure, plot_informativeness
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
)


def _id_setting(tb: TestbedReport) -> str | None:
    t = tb.testbed
    return "val" if "val" in t.settings else next((a.shift.x for a in tb.analysed), None)


def _floor(min_models: float) -> str:
    return f"{min_models:.0%} of the groups' models" if min_models < 1 else f"{int(min_models)} models"


@register_section
class InformativenessSection(Section):
    """Per testbed with at least two model types of ``min_models_per_group`` models: the ``top``
    settings whose accuracy most improves predicting a model's group beyond ID accuracy, by the
    ``djolonga2021`` recipe (named, with its paper, in the caption and the CSV)."""

    key, title = "informativeness", "Metric informativeness"
    method = DEFAULT_METHOD
    #: Small on purpose (the paper uses 1,000): the report ranks every setting (212 on
    #: imagenet-reference) with scikit-learn fits, about 13 ms per setting and resample.
    n_resamples = 20
    n_repeats = 3
    top = 10
    min_models_per_group = 10

    def available(self, ctx: ReportContext, tb: TestbedReport | None) -> bool:
        if tb is None or len(tb.testbed.settings) < 2:
            return False
        x = _id_setting(tb)
        return x is not None and len(informativeness_groups(tb.testbed, x, baseline=None,
                                                            min_models=self.min_models_per_group)) >= 2

    def _job(self, ctx: ReportContext, tb: TestbedReport) -> tuple[tuple, dict]:
        """The ranking's cache inputs and :func:`informativeness_ranking`'s parameters."""
        t, x = tb.testbed, _id_setting(tb)
        assert x is not None
        params = dict(method=self.method, x=x, n_resamples=self.n_resamples, n_repeats=self.n_repeats,
                      min_models_per_group=self.min_models_per_group, seed=ctx.seed)
        # kept between builds: the ranking is a pure function of the testbed's tables and these
        return (t.accuracies, t.sizes, t.metadata, params), params

    def prefetch(self, ctx: ReportContext, tb: TestbedReport | None) -> None:
        assert tb is not None
        inputs, params = self._job(ctx, tb)
        ctx.prefetch("informativeness", inputs, informativeness_ranking, tb.testbed, code=(informativeness,),
                     **params)

    def render(self, ctx: ReportContext, tb: TestbedReport | None) -> list[Rendered]:
        assert tb is not None
        t, x = tb.testbed, _id_setting(tb)
        assert x is not None
        anchor = ctx.anchor(tb.anchor, self.key)
        info = method_info(self.method)
        recipe = (f"Recipe <code>{esc(info['name'])}</code>: {esc(info['description'])} "
                  f"({esc(info['paper'])}).")
        try:
            inputs, params = self._job(ctx, tb)
            ranking = ctx.memo("informativeness", inputs, lambda: informativeness_ranking(t, **params),
                               code=(informativeness,))
        except DataError as err:
            note = f'<p class="sb-note">{recipe} Nothing to rank: {esc(str(err))}</p>'
            return [Rendered(self.title, anchor, section_html(anchor, self.title, note))]
        best = top_informative(ranking, self.top)
        a = ranking.attrs
        # said once: the question, the recipe (its own words), then only what the recipe leaves open
        parts = [(f"<p>Does a setting's accuracy help predict a model's group ({esc(', '.join(a['groups']))}) "
                 f"beyond <code>{esc(x)}</code> accuracy? {recipe[:-1]}; here on standardised logit accuracies, "
                 f"{a['n_folds']}-fold, with {a['n_resamples']} resamples (1,000 in the paper and in "
                 f"<code>shiftbench informativeness</code>); gains in points. {ranking['setting'].nunique()} settings "
                 f"ranked in {a['seconds']:.1f} s, each on the models that have it (<em>n</em> in the table); "
                 f"{len(a['dropped'])} dropped with fewer than {a['min_models_per_group']} models per group or "
                 f"fewer than {_floor(a['min_models'])}.</p>")]
        title = f"Most informative settings beyond {x} accuracy ({t.name}, {info['name']})"
        parts.append(ctx.plot(informativeness_figure(best, title=title)))
        shown = best[["rank", "setting", "gain_mean", "gain_sd", "score_id", "score_metric", "n_models",
                      "models_per_group"]].rename(columns={"gain_mean": "gain", "gain_sd": "s.d.",
                                                           "score_id": f"{x} only %", "score_metric": "+ setting %",
                                                           "n_models": "n"})
        shown["n"] = shown["n"].astype(int)
        parts.append(file_row(ctx.static_plot(tb.dir / "informativeness", plot_informativeness, best, title=title),
                              ctx.table(with_method_columns(ranking), tb.dir / "informativeness",
                                        f"Informativeness of every setting beyond {x} accuracy on {t.name} "
                                        f"(recipe {info['name']}: {info['paper']})", "Full ranking"),
                              f"<details><summary>Top {len(shown)} in numbers: gain, s.d., accuracies, models per "
                              f"group ({len(shown)} rows)</summary>"
                              + compact(small_table(shown, {"rank": "d", "gain": "+.1f", "s.d.": ".1f",
                                                            f"{x} only %": ".1f", "+ setting %": ".1f", "n": "d"}))
                              + "</details>"))
        return [Rendered(self.title, anchor, section_html(anchor, self.title, "".join(parts)))]
