"""The replication study: sample a new test set from annotated candidates (Recht et al. 2019,
*Do ImageNet Classifiers Generalize to ImageNet?*, §3), write its manifest and keep its
selection-frequency histograms in the results store.

The sampling strategies (MatchedFrequency, Threshold tau, TopImages) and the
:class:`~shiftbench.datasets.replication.Replication` they produce are data
(:mod:`shiftbench.datasets.replication`). :class:`ReplicationConfig` /
:class:`ReplicationStudy` (``run_study(config, store)``) sample, write the manifest (``output``)
and store ``Replication.to_study()`` as the study ``replication`` / ``<name>`` that the report's
"Dataset replication" section draws; :func:`replicate` is the one-call form that only samples::

    rep = replicate("candidates.csv", "val_frequencies.csv", images_per_class=10, seed=0)
    rep.mean_selection_frequency, rep.summary; rep.write("candidates_dir/v2.csv")
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shiftbench.datasets.replication import BINS, Replication, sample_replication
from shiftbench.store.store import Store
from shiftbench.studies.base import Study, StudyResult, as_store, register_study

STUDY_KIND = "replication"

__all__ = ["ReplicationConfig", "ReplicationStudy", "replicate", "Replication", "STUDY_KIND"]


@dataclass(frozen=True)
class ReplicationConfig:
    """A replication: the arguments of :func:`~shiftbench.datasets.replication.sample_replication`,
    plus where to write the manifest (``output``, ``.csv`` or ``.parquet``; ``label_space`` as
    for :meth:`Replication.write`) and the study's ``name`` (default: ``output``'s stem, else
    ``replication``)."""

    candidates: Any
    reference: Any = None
    strategy: str = "matched-frequency"
    images_per_class: int = 10
    threshold: float = 0.7
    bins: Sequence[float] = BINS
    seed: int = 0
    fallback: str | None = None
    root: Path | str | None = None
    output: Path | str | None = None
    label_space: Any = None
    name: str | None = None


@register_study
class ReplicationStudy(Study):
    """Dataset replication by selection frequency; the report section ``replication``."""

    kind, config_type, section = STUDY_KIND, ReplicationConfig, "replication"
    description = "a test set re-sampled from annotated candidates by selection frequency"

    def run(self, config: ReplicationConfig, store: str | Path | Store | None = None) -> StudyResult:
        """Sample; write the manifest when ``config.output`` is set; store the study when ``store``
        is given (its name is checked before anything is written)."""
        rep = sample_replication(config.candidates, config.reference, config.strategy,
                                 images_per_class=config.images_per_class, threshold=config.threshold,
                                 bins=config.bins, seed=config.seed, fallback=config.fallback, root=config.root)
        name = config.name or (Path(config.output).stem if config.output is not None else STUDY_KIND)
        target = as_store(store) if store is not None else None
        if target is not None:
            target.check_study_name(STUDY_KIND, name)     # a bad name fails before anything is written
        if config.output is not None:
            rep.write(config.output, label_space=config.label_space)
        result = StudyResult(STUDY_KIND, name, rep.to_study(), rep.study_meta(), value=rep)
        if target is not None:
            result.write(target)
        return result


def replicate(candidates: Any, reference: Any = None, strategy: str = "matched-frequency", *,
              images_per_class: int = 10, threshold: float = 0.7, bins: Sequence[float] = BINS, seed: int = 0,
              fallback: str | None = None, root: Path | str | None = None) -> Replication:
    """Sample a new test set per class from annotated candidates (Recht et al. 2019, §3); the
    arguments are those of :func:`~shiftbench.datasets.replication.sample_replication` (strategies
    ``matched-frequency``, ``threshold``, ``top-images``; ``images_per_class`` k; the threshold
    tau; the bin edges; the seed of :func:`~shiftbench.datasets.replication.class_rng`; the
    ``upward`` fallback). Nothing is written: ``rep.write(path)`` writes the manifest, and
    ``run_study(ReplicationConfig(..., output=path), store)`` also stores the study.
    """
    config = ReplicationConfig(candidates, reference, strategy, images_per_class=images_per_class,
                               threshold=threshold, bins=bins, seed=seed, fallback=fallback, root=root)
    return ReplicationStudy().run(config).value
