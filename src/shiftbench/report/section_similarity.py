"""Report section: model similarity on each setting of the results store (``--store``).

Per setting with predictions of at least two models: the dominance-probability (Mania & Sra
2020) and error-consistency (Geirhos et al. 2020) matrices sorted by accuracy, the most
dissimilar pairs, and the examples that no standard model gets right with the models that do.
Computed from the stored per-example predictions (:mod:`shiftbench.analysis.similarity`).
To keep the page small, each matrix shows at most :data:`MAX_MODELS` models (evenly spaced in
accuracy) and at most :data:`MAX_SETTINGS` settings are drawn (those with the most models);
settings made by a synthetic shift (``<setting>+<shift>``: every corruption at every severity)
are drawn only when the store has no other, and then at most :data:`MAX_SHIFTED` of them (one
matrix per corruption and severity repeated the same story and made the page 50 matrices long;
``shiftbench similarity --setting S`` computes any of them). The full tables of the drawn
settings are written as CSV next to the report, named by :func:`similarity_stem` (one stem per
setting: ``similarity/<setting slug>-<hash>-pairs.csv``, ...).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from shiftbench import correctness
from shiftbench.analysis import similarity
from shiftbench.analysis.similarity import STANDARD, model_similarity, unsolved_examples
from shiftbench.analysis.trajectory import is_checkpoint
from shiftbench.correctness import correctness_matrix, similarity_settings
from shiftbench.errors import ShiftbenchError
from shiftbench.report.sections import (
    Rendered,
    ReportContext,
    Section,
    TestbedReport,
    choice_html,
    compact,
    esc,
    file_row,
    pair_html,
    register_section,
    section_html,
    small_table,
)
from shiftbench.report.similarity_figures import MAX_MODELS, plot_similarity_matrices, similarity_heatmap
from shiftbench.report.tables import file_slug

MAX_SETTINGS = 12
MAX_SHIFTED = 4
TOP_PAIRS = 8
TOP_EXAMPLES = 15
MAX_NAMES = 6


def solved_by_short(names: str, limit: int = MAX_NAMES) -> str:
    """``"a; b; c; ..."`` cut to ``limit`` names with the count of the rest."""
    parts = [p for p in str(names).split("; ") if p]
    if len(parts) <= limit:
        return "; ".join(parts)
    return "; ".join(parts[:limit]) + f"; … {len(parts) - limit} more"


def drawn_settings(settings: list[str]) -> tuple[list[str], list[str]]:
    """(the settings whose matrices are drawn, the settings made by a synthetic shift): up to
    :data:`MAX_SETTINGS` settings without a shift in the order given (most models first), or,
    when every setting is shifted, the first :data:`MAX_SHIFTED` of those."""
    unshifted = [s for s in settings if "+" not in s]
    shifted = [s for s in settings if "+" in s]
    return unshifted[:MAX_SETTINGS] or shifted[:MAX_SHIFTED], shifted


def similarity_stem(out_dir: Path, setting: str) -> Path:
    """The stem of a setting's files in the report folder ``out_dir``:
    ``similarity/<setting slug>-<hash>`` (:func:`~shiftbench.report.tables.file_slug`), followed by
    ``.png``/``.pdf`` (the matrices), ``-pairs.csv`` (:func:`pairs_csv`) and ``-unsolved.csv``/``.md``
    /``.tex``. Two settings never share a stem, also when they differ only in ``/``, ``_``, ``-``,
    spaces or case."""
    return Path(out_dir) / "similarity" / file_slug(setting)


def pairs_csv(stem: Path) -> Path:
    """The CSV of every pair of models next to the figures of :func:`similarity_stem` ``stem``."""
    return stem.with_name(stem.name + "-pairs.csv")


def dissimilar_pairs(pairs: pd.DataFrame, n: int = TOP_PAIRS) -> pd.DataFrame:
    """The ``n`` pairs with the highest dominance probability, for display."""
    top = pairs.sort_values(["dominance_probability", "model_a", "model_b"], ascending=[False, True, True]).head(n)
    return pd.DataFrame({"less accurate": top["model_a"], "acc. less %": top["accuracy_a"],
                         "more accurate": top["model_b"], "acc. more %": top["accuracy_b"],
                         "dominance prob.": top["dominance_probability"], "κ": top["error_consistency"]})


def similarity_on(store, setting: str, models: list[str]):  # noqa: ANN001, ANN201 - Store -> (matrix, Similarity)
    """The correctness matrix of ``models`` on ``setting`` and their pairwise similarity (module
    level: the analysis worker computes it, :meth:`SimilaritySection.prefetch`)."""
    matrix = correctness_matrix(store, setting, models=models)
    return matrix, model_similarity(matrix)


@register_section
class SimilaritySection(Section):
    """Dominance probability, error consistency and unsolved examples per store setting."""

    key, title, scope = "similarity", "Model similarity (results store)", "report"

    def _settings(self, ctx: ReportContext) -> pd.Series:
        """Settings with at least two models that are not fine-tuning checkpoints (``<name>@step<k>``:
        those belong to the trajectory section and would crowd the matrices); once per build."""
        return ctx.once("similarity settings", lambda: self._find_settings(ctx))

    @staticmethod
    def _find_settings(ctx: ReportContext) -> pd.Series:
        if ctx.store is None:
            return pd.Series(dtype=int)
        try:
            settings = similarity_settings(ctx.store, min_models=2)
            res = ctx.store.results()
        except ShiftbenchError:
            return pd.Series(dtype=int)
        if res.empty:
            return pd.Series(dtype=int)
        res = res.loc[~res["model"].astype(str).map(is_checkpoint).astype(bool)]
        counts = res.groupby("setting")["model"].nunique()
        keep = [s for s in settings.index if counts.get(s, 0) >= 2]
        return counts.reindex(keep).rename("n_models").astype(int)

    @staticmethod
    def _models(ctx: ReportContext, setting: str) -> list[str]:
        res = ctx.store.results()
        names = res.loc[res["setting"] == setting, "model"].astype(str).unique()
        return sorted(m for m in names if not is_checkpoint(m))

    def available(self, ctx: ReportContext, tb: TestbedReport | None) -> bool:
        return len(self._settings(ctx)) > 0

    #: what the matrices are computed by (their cache key holds its source)
    _code = (correctness, similarity)

    def _inputs(self, ctx: ReportContext, setting: str) -> tuple[tuple, list[str]]:
        """The cache inputs of ``setting``'s matrices - a pure function of the store's finished
        keys on this setting - and the models compared."""
        models = self._models(ctx, setting)
        return (ctx.store_stamp(), setting, models), models

    def prefetch(self, ctx: ReportContext, tb: TestbedReport | None) -> None:
        for setting in drawn_settings(list(self._settings(ctx).index))[0]:
            inputs, models = self._inputs(ctx, setting)
            ctx.prefetch("similarity", inputs, similarity_on, ctx.store, setting, models, code=self._code)

    def render(self, ctx: ReportContext, tb: TestbedReport | None) -> list[Rendered]:
        settings = self._settings(ctx)
        shown, shifted = drawn_settings(list(settings.index))
        parts = ["<p>Per pair of models on a setting: the <b>dominance probability</b>, the share of examples the "
                 "less accurate model gets right and the more accurate one wrong (Mania &amp; Sra 2020), and the "
                 "<b>error consistency</b> κ, Cohen's kappa of their right/wrong decisions beyond what their "
                 "accuracies alone give (Geirhos et al. 2020; 0: chance, 1: identical errors; blank if both are "
                 "never or always wrong).</p>"]
        if len(settings) > len(shown):
            left = (f"; the {len(shifted)} made by a synthetic shift, <code>+corruption.severity</code>, are "
                    "not drawn" if shifted and shown[0] not in shifted else "")
            parts[0] = parts[0][:-4] + (f' <span class="sb-note">{len(shown)} of {len(settings)} settings shown '
                                        f"(most models{left}; <code>shiftbench similarity --setting S</code> "
                                        "computes any).</span></p>")
        if len(shown) == 1:
            parts.append(self._setting(ctx, shown[0]))
        else:   # one setting at a time: a selector over the settings, not one pair of matrices after another
            parts.append(choice_html("Setting", [(setting, ctx.anchor(self.key, setting), self._setting(ctx, setting))
                                                 for setting in shown]))
        anchor = ctx.anchor(self.key)
        return [Rendered(self.title, anchor, section_html(anchor, self.title, "".join(parts), level=2))]

    def _setting(self, ctx: ReportContext, setting: str) -> str:
        assert ctx.store is not None
        head = f"<p><b>Similarity on {esc(setting)}</b>: "
        try:
            inputs, models = self._inputs(ctx, setting)
            matrix, sim = ctx.memo("similarity", inputs, lambda: similarity_on(ctx.store, setting, models),
                                   code=self._code)
        except ShiftbenchError as exc:
            return head + f'not computed: {esc(exc)}.</p>'
        out_stem = similarity_stem(ctx.out_dir, setting)
        out_stem.parent.mkdir(parents=True, exist_ok=True)
        excluded = []
        if matrix.n_skipped:
            excluded.append(f"{matrix.n_skipped:,} skipped (not decodable) for some model")
        if matrix.n_unshared:
            excluded.append(f"{matrix.n_unshared:,} not evaluated for every model")
        more = (f' <span class="sb-note">Matrices: {MAX_MODELS}, evenly spaced in accuracy.</span>'
                if matrix.n_models > MAX_MODELS else "")
        # one line under the selector: the setting, its models and examples (examples are aligned by id)
        parts = [f"{matrix.n_models} models, {matrix.n_examples:,} examples"
                 + (f" ({'; '.join(excluded)}, left out)" if excluded else "") + f".{more}</p>"]
        # short titles (the heading above names the setting), clear of the toolbar at half the page
        parts.append(pair_html(
            ctx.plot(similarity_heatmap(sim, "dominance_probability", with_setting=False), half=True),
            ctx.plot(similarity_heatmap(sim, "error_consistency", with_setting=False), half=True)))
        # the most dissimilar pairs under the matrices, their heading on the line of the files
        sim.pairs.to_csv(pairs_csv(out_stem), index=False)
        parts.append(file_row(f"<h4>Most dissimilar pairs (top {min(TOP_PAIRS, len(sim.pairs))} by dominance "
                              "probability)</h4>",
                              ctx.static_plot(out_stem, plot_similarity_matrices, sim),
                              f'<p class="sb-files">Every pair: '
                              f'{ctx.link(pairs_csv(out_stem))}</p>'))
        parts.append(compact(small_table(dissimilar_pairs(sim.pairs), {"acc. less %": ".2f", "acc. more %": ".2f",
                                                                       "dominance prob.": ".4f", "κ": "+.3f"})))
        parts.append(self._unsolved(ctx, matrix, out_stem))
        return head + "".join(parts)

    def _unsolved(self, ctx: ReportContext, matrix, out_stem) -> str:
        n_std = sum(t == STANDARD for t in matrix.model_types)
        if n_std == 0:
            return ('<p class="sb-note">No model on this setting has type STANDARD, so the examples no standard '
                    "model gets right are not listed (<code>shiftbench eval --model-type STANDARD</code>).</p>")
        table = unsolved_examples(matrix)
        solved = int((table["n_right"] > 0).sum())
        parts = [f"<p><b>Unsolved:</b> {len(table):,} of {matrix.n_examples:,} examples are missed by all {n_std} "
                 f"standard models; {solved:,} of them are solved by at least one other model.</p>"]
        if len(table):
            top = table.head(TOP_EXAMPLES)
            show = pd.DataFrame({"example": top["id"], "models right": top["n_right"],
                                 "solved by (most accurate first)": top["solved_by"].map(solved_by_short),
                                 "their types": top["solved_by_types"]})
            # folded: the numbers above are the reading, the examples are for a closer look
            parts.append(f"<details><summary>The first {len(top)} of these {len(table):,} examples (id, models "
                         "right, which models solve it, their types)</summary>"
                         + compact(small_table(show, {"models right": "d"})) + "</details>")
            stem = out_stem.with_name(out_stem.name + "-unsolved")
            parts.append(ctx.table(table, stem, f"Examples of {matrix.setting} no standard model gets right",
                                   "Every such example"))
        return "".join(parts)
