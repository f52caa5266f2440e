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
    esc,
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
        parts = [f"<p>r² of each shift's trend (fitted on the STANDARD models, as above) in logit, probit and linear "
                 f"coordinates: the share of the variance of shifted accuracy that in-distribution accuracy explains. "
                 f"Effective robustness is only as meaningful as its trend: below r² {weak_r2:g} (marked !) the trend is "
                 f"weak; &lt; marks a scaling beaten by another by at least {better_by:g}.</p>"]
        parts.append(ctx.plot(r2_heatmap_figure(diag, title=f"r² of the trend per shift and scaling ({t.name})")))
        parts.append(ctx.static_figure(plot_r2_heatmap(diag, title=f"r² per shift and scaling ({t.name})"),
                                       tb.dir / "trend_diagnostics"))
        flags = flagged(diag, ctx.scale)
        if len(flags):
            rows = flags.assign(flag=[("weak" if w else "") + ("; " if w and b else "") + (f"{b} fits better" if b else "")
                                      for w, b in zip(flags["weak"], flags["better_scale"])])
            parts.append(f"<h4>Flagged in {esc(ctx.scale)} coordinates</h4>")
            parts.append(small_table(rows[["shift", "x", "y", "r2", "n_models", "flag"]],
                                     {"r2": ".3f", "n_models": "d"}))
        else:
            parts.append(f'<p class="sb-note">No shift is flagged in {esc(ctx.scale)} coordinates.</p>')
        parts.append(ctx.table(diag, tb.dir / "trend_diagnostics", f"Trend diagnostics on {t.name}", "Diagnostics"))
        anchor = ctx.anchor(tb.anchor, self.key)
        return [Rendered(self.title, anchor, section_html(anchor, self.title, "".join(parts)))]
