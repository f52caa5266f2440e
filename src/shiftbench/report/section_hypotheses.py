"""Report section: the "seven hypotheses" verdict table (Hendrycks et al. 2021, "The Many Faces of
Robustness", §5) of :mod:`shiftbench.analysis.hypotheses`: groups x shifts, each cell the group's mean
effective robustness with its 95% bootstrap interval over models, coloured by the verdict.

Shown for a testbed whose name has a shipped group table (``data/hypotheses/<testbed>.csv``); the
bootstrap is vectorised (one ``(n_resamples, n)`` gather per cell), so 1,000 resamples over ~16 groups
and 9 shifts take well under a second.
"""
from __future__ import annotations

import math

from shiftbench.analysis.hypotheses import (
    HELPS,
    HURTS,
    NO_EVIDENCE,
    VERDICT_RULE,
    HypothesesTable,
    hypotheses_table,
    shipped_groups_path,
)
from shiftbench.errors import ShiftbenchError
from shiftbench.report.sections import (
    Rendered,
    ReportContext,
    Section,
    TestbedReport,
    esc,
    file_row,
    register_section,
    section_html,
)

#: cell background per verdict (green, red, grey); other verdicts are left white
COLOURS = {HELPS: "#d4edda", HURTS: "#f8d7da", NO_EVIDENCE: "#eeeeee"}
#: the verdict as a mark after the mean (the colour says it too; the legend above the table names them)
MARKS = {HELPS: "▲", HURTS: "▼", NO_EVIDENCE: "·"}


#: With at most this many shifts, a cell's interval fits on the line of its mean (one line a row).
ONE_LINE_SHIFTS = 5


def verdict_legend() -> str:
    """The verdicts' marks on their colours: ``▲ helps · ▼ hurts · · no evidence``."""
    return " · ".join(f'<span style="background:{COLOURS[v]};padding:0 4px">{m} {esc(v)}</span>'
                      for v, m in MARKS.items())


def interval_place(res: HypothesesTable) -> str:
    """Where a cell's interval is: ``"under"`` the mean, or ``"beside"`` it (few shifts)."""
    return "under" if res.rows["shift"].nunique() > ONE_LINE_SHIFTS else "beside"


def verdict_table_html(res: HypothesesTable, note: bool = True) -> str:
    """A static groups x shifts table: mean ER [interval] and the verdict, coloured (escaped). The
    group's name takes one line where it can (its column is wide, the hypothesis under it); the
    interval goes under the mean with many shifts and beside it with few (:data:`ONE_LINE_SHIFTS`).
    ``note``: a line above the table saying what a cell holds (:func:`verdict_legend`)."""
    rows = res.rows
    shifts = list(dict.fromkeys(rows["shift"]))
    under = "<br>" if interval_place(res) == "under" else " "
    head = "<th>group <small>(hypothesis)</small></th>" + "".join(f'<th class="num">{esc(s)}</th>' for s in shifts)
    body = []
    for group, part in rows.groupby("group", sort=False):
        cells = [f'<td class="sb-group">{esc(group)}<br><small>{esc(part["hypothesis"].iloc[0])}</small></td>']
        by_shift = {r.shift: r for r in part.itertuples(index=False)}
        for s in shifts:
            r = by_shift.get(s)
            if r is None:
                cells.append("<td></td>")
                continue
            mean = "" if not math.isfinite(r.mean_er) else f"{r.mean_er:+.1f}"   # plain text: nothing to escape
            mark = MARKS.get(r.verdict)
            mean += f" {mark}" if mark else f" <small>{esc(r.verdict)}</small>"
            interval = (f"{under}<small>[{r.low:+.1f}, {r.high:+.1f}]</small>"
                        if math.isfinite(r.low) and math.isfinite(r.high) else "")
            colour = COLOURS.get(r.verdict)
            style = f"background:{colour};" if colour else ""
            cells.append(f'<td class="num" style="{style}white-space:nowrap" title="{esc(r.verdict)}, '
                         f'n = {r.n_models}">{mean}'
                         f"{interval}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    table = (f'<table class="sb-small sb-verdicts"><thead><tr>{head}</tr></thead>'
             f'<tbody>{"".join(body)}</tbody></table>')
    if not note:
        return table
    return (f'<p class="sb-note">Each cell: mean effective robustness (pp) and its verdict, {verdict_legend()}; '
            f"{interval_place(res)} it the 95% interval.</p>" + table)


@register_section
class HypothesesSection(Section):
    """Per testbed with a shipped group table: the verdict table of the intervention groups."""

    key, title = "hypotheses", "Hypotheses: which interventions give effective robustness?"
    n_resamples = 1000

    def available(self, ctx: ReportContext, tb: TestbedReport | None) -> bool:
        return tb is not None and shipped_groups_path(tb.testbed.name) is not None

    def render(self, ctx: ReportContext, tb: TestbedReport | None) -> list[Rendered]:
        assert tb is not None
        t = tb.testbed
        anchor = ctx.anchor(tb.anchor, self.key)
        shifts = [a.shift for a in tb.analysed if a.fit is not None] or None
        try:
            res = hypotheses_table(t, shifts=shifts, n_resamples=self.n_resamples, seed=ctx.seed, scale=ctx.scale)
        except ShiftbenchError as err:
            note = f'<p class="sb-note">No verdict table: {esc(str(err))}</p>'
            return [Rendered(self.title, anchor, section_html(anchor, self.title, note))]
        # said once: what a row and a cell hold, the verdicts' colours, and the rule behind them
        parts = [f"<p>Which interventions make models robust (Hendrycks et al. 2021, <em>The Many Faces of "
                 f"Robustness</em>, §5)? A row: a group of models sharing an intervention (<code>"
                 f"{esc(res.groups_source)}</code>); a cell: its mean effective robustness (pp) and verdict, "
                 f"{verdict_legend()}, {interval_place(res)} it the 95% percentile bootstrap interval over the "
                 f"group's models ({res.n_resamples} resamples, seed {res.seed}). {esc(VERDICT_RULE)} (minimum "
                 f"{res.min_models}).</p>",
                 verdict_table_html(res, note=False)]
        parts.append(file_row(ctx.table(res.rows, tb.dir / "hypotheses",
                                        f"Hypotheses on {t.name}: mean effective and relative robustness (pp) per "
                                        f"group and shift, 95% bootstrap intervals over models", "Full table")))
        notes = [f"{r.group}: {r.note}" for r in res.rows.drop_duplicates("group").itertuples(index=False) if r.note]
        notes += list(res.notes)
        if notes:
            parts.append('<p class="sb-note">' + "; ".join(esc(n) for n in notes) + "</p>")
        return [Rendered(self.title, anchor, section_html(anchor, self.title, "".join(parts)))]
