"""Report section: Recht et al.'s rank table for ImageNetV2 (2019, Table 1) on a testbed that has
ImageNet ``val`` and ImageNetV2 MatchedFrequency (:func:`shiftbench.analysis.ranks.rank_table`)."""
from __future__ import annotations

import math
import pandas as pd

from shiftbench.analysis.ranks import rank_table
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

ORIGINAL, NEW = "val", "imagenetv2-matched-frequency-format-val"


def _cell(acc: float, low: float, high: float) -> str:
    """``80.85 [80.06, 81.62]``, Recht et al.'s cell (the accuracy alone without an example count)."""
    return f"{acc:.2f} [{low:.2f}, {high:.2f}]" if math.isfinite(low) and math.isfinite(high) else f"{acc:.2f}"


def shown_rows(table: pd.DataFrame, top: int, highlight: tuple[str, ...] = ()) -> pd.DataFrame:
    """The page's rows of a :func:`rank_table`: its first ``top`` (original rank), then any
    highlighted model below them, as Recht et al. print their cells (accuracy [interval])."""
    keep = list(table.index[:top]) + [m for m in highlight if m in table.index[top:]]
    t = table.loc[keep]
    return pd.DataFrame({
        "orig. rank": t["x_rank"].to_numpy(), "model": list(t.index), "type": t["model_type"].to_numpy(),
        "orig. accuracy %": [_cell(*v) for v in zip(t["x_acc"], t["x_low"], t["x_high"])],
        "new accuracy %": [_cell(*v) for v in zip(t["y_acc"], t["y_low"], t["y_high"])],
        "gap (pp)": t["gap"].to_numpy(), "new rank": t["y_rank"].to_numpy(),
        "Δ rank": [f"{d:+d}" if d else "0" for d in t["delta_rank"]],
    })


@register_section
class RankTableSection(Section):
    """Per testbed with ``val`` and ImageNetV2 MatchedFrequency: the models' original and new
    accuracy with 95% Clopper–Pearson intervals, the gap, original and new rank and Δ rank
    (Recht et al. 2019, Table 1), the first :attr:`top` rows on the page (and any highlighted
    model below them), the whole table as CSV, Markdown and LaTeX, and Kendall's τ."""

    key, title = "ranks", "Ranks on ImageNetV2"
    top = 20

    def available(self, ctx: ReportContext, tb: TestbedReport | None) -> bool:
        return tb is not None and {ORIGINAL, NEW} <= set(tb.testbed.settings)

    def render(self, ctx: ReportContext, tb: TestbedReport | None) -> list[Rendered]:
        assert tb is not None
        t = tb.testbed
        table = rank_table(t, ORIGINAL, NEW, confidence=0.95)
        a = table.attrs
        rows = shown_rows(table, self.top, ctx.highlight)
        parts = [(f"<p>Each model's accuracy on the original test set (<code>{esc(ORIGINAL)}</code>) and on "
                  f"ImageNetV2 MatchedFrequency (<code>{esc(NEW)}</code>) with 95% Clopper–Pearson intervals, the "
                  "gap in percentage points, and its rank on each, as in Recht et al. (2019, Table 1): ranks are over "
                  f"all {a['n_models']} models of the testbed with both accuracies (1 = most accurate; tied accuracies "
                  "share a rank); Δ rank = original rank − new rank, so a negative Δ rank is a model that fell. "
                  f"Kendall's τ-b between the two rankings: <b>{a['kendall_tau']:.3f}</b> (not in Recht et al.'s "
                  "table; 1 = the same order).</p>"),
                 '<p class="sb-note">' + (f"All {len(table)} models" if len(table) <= self.top else
                                          f"The {self.top} best models on {esc(ORIGINAL)} of {len(table)}"
                                          + (", then your models below them" if len(rows) > self.top else "")
                                          + "; the files hold every model")
                 + "." + (f" {a['n_skipped']} models lack one of the two accuracies." if a["n_skipped"] else "")
                 + "</p>",
                 compact(small_table(rows, {"orig. rank": "d", "gap (pp)": ".2f", "new rank": "d"})),
                 file_row(ctx.table(table.reset_index(), tb.dir / "ranks_imagenetv2",
                                    f"Ranks of the models of {t.name} on {NEW} against {ORIGINAL} "
                                    "(Recht et al. 2019, Table 1)"))]
        anchor = ctx.anchor(tb.anchor, self.key)
        return [Rendered(self.title, anchor, section_html(anchor, self.title, "".join(parts)))]
