"""The attribute-split study: carve attribute-controlled splits from a manifest, evaluate a model
on the in-distribution test set and on each one-attribute-changed test set, and store accuracy
per split (Hendrycks et al. 2021, *The Many Faces of Robustness*, §3: StreetView StoreFronts and
DeepFashion Remixed change one attribute at a time).

The carving itself is data (:func:`~shiftbench.datasets.attributes.carve_splits`,
:class:`~shiftbench.datasets.attributes.AttributeSplits`). :class:`AttributeConfig` /
:class:`AttributeStudy` (``run_study(config, store)``) carve, write the split manifests
(``output``) and, with a ``model``, evaluate it through :func:`shiftbench.evaluate` and store one
row per test split (:data:`STUDY_COLUMNS`) as the study ``attributes`` / ``<name>``, which the
report's "Attribute-controlled shifts" section draws. :func:`attribute_splits` is the one-call
form that only carves::

    splits = attribute_splits("digits.csv", train={"thickness": "medium", "slant": "upright"},
                              bins={"thickness": ["thin", "medium", "thick"]}, seed=0)
    files = splits.write("carved")       # {"train": Path("carved/train.csv"), ...}
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from shiftbench.analysis.intervals import accuracy_interval
from shiftbench.datasets.attributes import AttributeSplits, Binning, carve_splits
from shiftbench.errors import ConfigError
from shiftbench.store.store import Store
from shiftbench.studies.base import Study, StudyResult, as_store, register_study, stored_study_name, study_name

STUDY_KIND = "attributes"
#: Columns of a stored attribute study (one row per test split).
STUDY_COLUMNS = ["split", "kind", "attribute", "value", "n", "accuracy", "ci_low", "ci_high", "drop", "model",
                 "setting"]

__all__ = ["AttributeConfig", "AttributeStudy", "attribute_splits", "split_accuracies", "AttributeSplits",
           "STUDY_KIND", "STUDY_COLUMNS"]


@dataclass(frozen=True)
class AttributeConfig:
    """Attribute-controlled splits: the arguments of
    :func:`~shiftbench.datasets.attributes.carve_splits`; ``output`` (a folder: write the split
    manifests and ``splits.json`` there, ``images`` as for :meth:`AttributeSplits.write`);
    ``model`` (evaluate it on every test split; needs ``output``), ``name`` (the study name;
    default ``<model>__<manifest stem>-<hash>``, the hash of the model and the manifest's full
    path) and ``evaluate_kwargs`` (to :func:`shiftbench.evaluate`)."""

    manifest: str | Path | pd.DataFrame
    train: Mapping[str, Any]
    bins: Mapping[str, int | str | Sequence[str] | Binning] | None = None
    id_test: float | int = 0.2
    max_per_split: int | None = None
    balance: bool = False
    seed: int = 0
    root: str | Path | None = None
    output: str | Path | None = None
    images: str = "auto"
    model: Any = None
    name: str | None = None
    evaluate_kwargs: Mapping[str, Any] = field(default_factory=dict)


@register_study
class AttributeStudy(Study):
    """Accuracy per attribute-controlled split; the report section ``attributes``."""

    kind, config_type, section = STUDY_KIND, AttributeConfig, "attributes"
    description = "accuracy on splits that change one attribute at a time (Hendrycks et al. 2021)"

    def run(self, config: AttributeConfig, store: str | Path | Store | None = None) -> StudyResult:
        """Carve; write the splits when ``config.output`` is set; with ``config.model``, evaluate
        and store the per-split table (without a model the result's ``frame`` is
        ``AttributeSplits.sizes`` and nothing is stored)."""
        if config.model is not None and config.output is None:
            raise ConfigError("attribute study: evaluating a model needs output=<folder> for the split manifests")
        splits = carve_splits(config.manifest, config.train, bins=config.bins, id_test=config.id_test,
                              max_per_split=config.max_per_split, balance=config.balance, seed=config.seed,
                              root=config.root)
        files = splits.write(config.output, images=config.images) if config.output is not None else {}
        source = Path(splits.source).stem
        if config.model is None:
            return StudyResult(STUDY_KIND, config.name or study_name(source, hashed=(splits.source,)), splits.sizes,
                               splits.summary(), value=splits)
        from shiftbench.engine.runner import evaluate  # deferred: loads Pillow, loads pyarrow

        target = as_store(store)
        tests = [s for s in splits.names if s != "train"]
        settings = {s: f"manifest:{Path(files[s]).resolve()}" for s in tests}
        res = evaluate(config.model, list(settings.values()), store=target,
                       **{"progress": False, **dict(config.evaluate_kwargs)})
        model = str(res["model"].iloc[0])
        table = split_accuracies(splits, dict(zip(res["setting"], res["accuracy"])), settings)
        table["model"] = model
        table = table[STUDY_COLUMNS]
        # the readable name holds the manifest's file name, its hash the manifest's full path
        name = config.name or stored_study_name(target, STUDY_KIND, (model, source),
                                                {"model": model, "source": splits.source}, hashed=(splits.source,))
        meta = {**splits.summary(), "model": model, "output": str(config.output)}
        result = StudyResult(STUDY_KIND, name, table, meta, value=splits)
        result.write(target)
        return result


def split_accuracies(splits: AttributeSplits, accuracy: Mapping[str, float],
                     settings: Mapping[str, str]) -> pd.DataFrame:
    """One row per test split of ``splits`` (``id-test`` and every OOD split named in
    ``settings``): ``split, kind, attribute, value, n, accuracy`` (``accuracy[settings[split]]``,
    percent), ``ci_low, ci_high`` (95% Clopper-Pearson, :func:`shiftbench.accuracy_interval`),
    ``drop`` (accuracy minus the id-test accuracy, points) and ``setting``."""

    sizes = splits.sizes.set_index("split")
    rows = []
    for s, setting in settings.items():
        a, m = float(accuracy[setting]), int(sizes.loc[s, "n"])
        lo, hi = accuracy_interval(a, m, confidence=0.95)
        rows.append({"split": s, "kind": sizes.loc[s, "kind"], "attribute": sizes.loc[s, "attribute"],
                     "value": sizes.loc[s, "value"], "n": m, "accuracy": a, "ci_low": float(lo), "ci_high": float(hi)})
    table = pd.DataFrame(rows)
    ref = table.loc[table["split"] == "id-test", "accuracy"]
    table["drop"] = table["accuracy"] - (float(ref.iloc[0]) if len(ref) else float("nan"))
    table["setting"] = [settings[s] for s in table["split"]]
    return table


def attribute_splits(
    manifest: str | Path | pd.DataFrame,
    train: Mapping[str, Any],
    *,
    bins: Mapping[str, int | str | Sequence[str] | Binning] | None = None,
    id_test: float | int = 0.2,
    max_per_split: int | None = None,
    balance: bool = False,
    seed: int = 0,
    root: str | Path | None = None,
) -> AttributeSplits:
    """Carve attribute-controlled splits (Hendrycks et al. 2021, §3); the arguments are those of
    :func:`~shiftbench.datasets.attributes.carve_splits` (the manifest, ``train`` =
    ``{attribute: training value(s)}``, ``bins`` of numeric attributes, ``id_test`` share or
    size, ``max_per_split``, ``balance``, ``seed``, ``root`` of a DataFrame's relative paths).
    Nothing is written: ``splits.write(folder)`` writes the manifests, and
    ``run_study(AttributeConfig(..., output=folder, model=...), store)`` also evaluates a model
    and stores the study.
    """
    config = AttributeConfig(manifest, train, bins=bins, id_test=id_test, max_per_split=max_per_split,
                             balance=balance, seed=seed, root=root)
    return AttributeStudy().run(config).value
