"""Report section "Dataset replication": the selection-frequency histograms of stored replications.

Reads the ``replication`` studies that ``shiftbench replicate ... --store DIR`` writes
(:meth:`shiftbench.datasets.replication.Replication.to_study`): per replication, the share of
the reference's and the replicated set's images per selection-frequency bin with both means
marked, the per-class means, and the bin table (Recht et al. 2019, §3 and Figure 3: how the
images are chosen moves the mean selection frequency, and with it the accuracy drop).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from shiftbench.report.replication_figures import (
    class_means_figure,
    has_reference,
    plot_replication,
    replication_figure,
    replication_title,
    study_parts,
)
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
from shiftbench.studies.replication import STUDY_KIND


def replication_overview(store) -> pd.DataFrame:
    """One row per stored replication: ``study``, ``strategy``, ``images_per_class``, ``seed``,
    ``n_images``, ``n_classes``, ``mean_selection_frequency``,
    ``reference_mean_selection_frequency`` and their difference ``delta``."""
    rows = []
    for name in store.study_names(STUDY_KIND) if store is not None else []:
        meta = store.study_meta(STUDY_KIND, name)
        mean, ref = meta.get("mean_selection_frequency"), meta.get("reference_mean_selection_frequency")
        mean = float(mean) if mean is not None else np.nan
        ref = float(ref) if ref is not None else np.nan
        rows.append({"study": name, "strategy": str(meta.get("strategy", "?")),
                     "images_per_class": meta.get("images_per_class"), "seed": meta.get("seed"),
                     "n_images": meta.get("n_images"), "n_classes": meta.get("n_classes"),
                     "mean_selection_frequency": mean, "reference_mean_selection_frequency": ref,
                     "delta": mean - ref})
    return pd.DataFrame(rows, columns=["study", "strategy", "images_per_class", "seed", "n_images", "n_classes",
                                       "mean_selection_frequency", "reference_mean_selection_frequency", "delta"])


def _means_text(meta: dict) -> str:
    mean, ref = meta.get("mean_selection_frequency"), meta.get("reference_mean_selection_frequency")
    text = f"mean selection frequency {float(mean):.3f}" if mean is not None else "no mean selection frequency"
    if ref is not None and mean is not None:
        text += f" (reference {float(ref):.3f}, {float(mean) - float(ref):+.3f})"
    return text


@register_section
class ReplicationSection(Section):
    """Stored dataset replications (``shiftbench replicate --store``): reference vs replicated
    selection-frequency histograms with both means, per-class means, and the bin tables."""

    key, title, scope = "replication", "Dataset replication", "report"

    def available(self, ctx: ReportContext, tb: TestbedReport | None) -> bool:
        return ctx.store is not None and bool(ctx.store.study_names(STUDY_KIND))

    def render(self, ctx: ReportContext, tb: TestbedReport | None) -> list[Rendered]:
        store = ctx.store
        overview = replication_overview(store)
        parts = [f"<p>{len(overview)} replicated test set(s). Each candidate image's selection frequency is the "
                 "share of annotators who said it shows its class; the bars are the share of images per "
                 "frequency bin in the reference (the original test set) and in the replication, the dashed "
                 "lines their means. Recht et al. (2019, §3) found that a replication with a higher mean "
                 "selection frequency than the original (Threshold0.7, TopImages) has easier images and a "
                 "smaller accuracy drop than MatchedFrequency.</p>"]
        if len(overview) > 1:
            parts.append(small_table(overview.rename(columns={
                "images_per_class": "k", "n_images": "images", "n_classes": "classes",
                "mean_selection_frequency": "mean sel. freq.",
                "reference_mean_selection_frequency": "reference mean", "delta": "Δ"}),
                {"mean sel. freq.": ".3f", "reference mean": ".3f", "Δ": "+.3f"}))
        for name in overview["study"]:
            study, meta = store.read_study(STUDY_KIND, name), store.study_meta(STUDY_KIND, name)
            bins, classes = study_parts(study)
            title = replication_title(meta)
            parts.append(f"<h3>{esc(name)}</h3><p>{esc(title)}; {esc(_means_text(meta))}.</p>")
            parts.append(ctx.plot(replication_figure(study, meta)))
            scatter = class_means_figure(study, title=f"Per-class mean selection frequency ({name})")
            if scatter is not None:
                parts.append(ctx.plot(scatter))
            stem = ctx.out_dir / "replication" / name     # a study's name is a file name in the store already
            parts.append(ctx.static_plot(stem, plot_replication, study, meta))
            shown = bins.assign(bin=[f"[{lo:g}, {hi:g}{']' if i == len(bins) - 1 else ')'}"
                                     for i, (lo, hi) in enumerate(zip(bins["lower"], bins["upper"]))])
            cols = {"bin": "bin", "count": "images", "share": "share"}
            if has_reference(bins):
                cols |= {"reference_count": "reference images", "reference_share": "reference share"}
            shown = shown[list(cols)].rename(columns=cols)
            parts.append(small_table(shown, {"images": ".0f", "share": ".1%", "reference images": ".0f",
                                             "reference share": ".1%"}))
            parts.append(ctx.table(study, stem, f"Replication {name}: images per selection-frequency bin "
                                                f"and per class", "Table"))
        anchor = ctx.anchor(self.key)
        return [Rendered(self.title, anchor, section_html(anchor, self.title, "".join(parts), level=2))]
