"""Report section: r² of every analysed shift's trend under each scaling, weak trends flagged
(Miller et al. 2021; :mod:`shiftbench.analysis.diagnostics`)."""
from __future__ import annotations

from shiftbench.analysis.diagnostics import flagged, trend_diagnostics
from shiftbench.analysis.scaling import SCALES
from shiftbench.report.metric_figures import plot_r2_heatmap, r2_heatmap_figure
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


@register_section
class TrendDiagnosticsSection(Section):
    """Per testbed: a heatmap of r² (shift x scaling) of the shifts the report analyses, and the
    shifts whose trend is weak or clearly better in another scaling."""

    key, title = "trend-diagnostics", "Trend diagnostics"

    def available(self, ctx: ReportContext, tb: TestbedReport | None) -> bool:
        return tb is not None and bool(tb.analysed)

    def render(self, ctx: ReportContext, tb: TestbedReport | None) -> list[Rendered]:
        assert tb is not None
        t = tb.testbed
        diag = trend_diagnostics(t, [a.shift for a in tb.analysed], scales=SCALES)
        weak_r2, better_by = diag.attrs["weak_r2"], diag.attrs["better_by"]
        parts = [f"<p>r² of each shift's trend (fitted on the STANDARD models) in logit, probit and linear "
                 f"coordinates: the share of the variance of shifted accuracy that in-distribution accuracy explains; "
                 f"effective robustness is only as meaningful as its trend. <b>!</b> weak trend (r² below "
                 f"{weak_r2:g}); <b>&lt;</b> another scaling is better by at least {better_by:g}.</p>"]
        # the heatmap (half the page) and, beside it, the flagged shifts and the files
        left = ctx.plot(r2_heatmap_figure(diag, title=f"r² per shift and scaling ({t.name})"), half=True)
        flags = flagged(diag, ctx.scale)
        if len(flags):
            rows = flags.assign(flag=[("weak" if w else "") + ("; " if w and b else "") + (f"{b} fits better" if b else "")
                                      for w, b in zip(flags["weak"], flags["better_scale"])])
            right = [f"<h4>Flagged in {esc(ctx.scale)} coordinates ({len(rows)})</h4>",
                     compact(small_table(rows[["shift", "x", "y", "r2", "n_models", "flag"]],
                                         {"r2": ".3f", "n_models": "d"}))]
        else:
            right = [f'<p class="sb-note">No shift is flagged in {esc(ctx.scale)} coordinates.</p>']
        right.append(file_row(ctx.static_plot(tb.dir / "trend_diagnostics", plot_r2_heatmap, diag,
                                              title=f"r² per shift and scaling ({t.name})"),
                              ctx.table(diag, tb.dir / "trend_diagnostics", f"Trend diagnostics on {t.name}",
                                        "Diagnostics")))
        parts.append(pair_html(left, "".join(right)))
        anchor = ctx.anchor(tb.anchor, self.key)
        return [Rendered(self.title, anchor, section_html(anchor, self.title, "".join(parts)))]
