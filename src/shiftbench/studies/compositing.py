"""The compositing study: a model's accuracy per object size, location and rotation on a
composite dataset (SI-SCORE, Djolonga et al. 2021, "On Robustness and Transferability of
Convolutional Neural Networks", §4).

The composite dataset (foregrounds pasted onto backgrounds, one factor of variation at a time)
is :mod:`shiftbench.datasets.composite`; :func:`composite_setting` registers an evaluation
setting over one. :func:`factor_accuracy` gives accuracy per factor value and
:func:`location_heatmap` SI-SCORE's location map: accuracy at each location divided by the
95th percentile over locations. :class:`CompositingConfig` / :class:`CompositingStudy`
(``run_study(config, store)``) and the one-call :func:`compositing_study` evaluate a model
through :func:`shiftbench.evaluate` and store the per-factor table as the study
``compositing`` / ``<model>__<dataset name>-<hash>`` (:func:`~shiftbench.studies.base.study_name`),
which the report's "Object compositing" section draws::

    ds = composite_dataset(foregrounds, backgrounds, sizes=(0.1, 0.2), locations=location_grid(5))
    res = shiftbench.evaluate(model, composite_setting(ds), store=store)
    preds = Store(store).read_predictions(res.key[0])
    factor_accuracy(preds, ds)["size"], location_heatmap(preds, ds)
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from shiftbench.datasets.composite import CompositeDataset, register_composite_dataset
from shiftbench.errors import ConfigError, DataError
from shiftbench.settings import Setting, register_setting
from shiftbench.store.store import Store
from shiftbench.studies.base import Study, StudyResult, as_store, register_study, stored_study_name
from shiftbench.views import FullView


# ---------------------------------------------------------------------------- the setting
def composite_setting(source: CompositeDataset | str | Path) -> str:
    """Register an evaluation setting over a composite dataset and return its name.

    ``source`` is a spec file (the setting ``composite:<path>``, built by the dataset
    ``composite``, registered on first use; the path is resolved against ``data_root`` like
    ``folder:`` paths) or a :class:`CompositeDataset` (the setting ``composite:<dataset name>``,
    its dataset held in this process's registry, so not for the Ray executor). Pass the name to
    :func:`shiftbench.evaluate`; the per-example rows are then in the store under the result's
    ``key``. Scored over all ``num_classes`` classes (top-1 / top-5).
    """
    from shiftbench.datasets.registry import DATASETS, DatasetEntry  # deferred: loads Pillow

    def full_view(_: str) -> Any:

        return FullView()

    if isinstance(source, CompositeDataset):
        name = f"composite:{source.name}"
        DATASETS[name] = DatasetEntry(name, None, lambda **_: source, "a CompositeDataset held in memory",
                                      source.label_space)
        setting = Setting(name, name, full_view, f"composite dataset {source.name} ({len(source)} examples)",
                          dataset_args=(("path", "."),))
    elif isinstance(source, str | Path):
        register_composite_dataset()
        name = f"composite:{source}"
        setting = Setting(name, "composite", full_view, f"composite dataset from the spec {source}",
                          dataset_args=(("path", str(source)),))
    else:
        raise ConfigError("composite_setting: give a CompositeDataset or a spec file path, "
                          f"got {type(source).__name__}")
    register_setting(setting)
    return name


# ---------------------------------------------------------------------------- analysis
def _correct_column(correct: Any, dataset: CompositeDataset) -> pd.DataFrame:
    """The factor table with a ``correct`` column; unscored (skipped) examples dropped."""
    table = dataset.factors
    if isinstance(correct, pd.DataFrame):
        if "id" not in correct or "correct" not in correct:
            raise DataError("per-example results need columns 'id' and 'correct' (Store.read_predictions rows)")
        rows = correct if "status" not in correct else correct[correct["status"] == "ok"]
        pos = pd.Series(np.arange(len(table)), index=table["id"])
        missing = ~rows["id"].isin(pos.index)
        if missing.any():
            raise DataError(f"{int(missing.sum())} result ids are not examples of {dataset.name!r} "
                            f"(first: {rows['id'][missing].iloc[0]!r}); pass the dataset that was evaluated")
        values = np.full(len(table), np.nan)
        values[pos[rows["id"]].to_numpy()] = rows["correct"].astype(float).to_numpy()
    else:
        values = np.asarray(correct, dtype=float).reshape(-1)
        if len(values) != len(table):
            raise DataError(f"{len(values)} correctness values for {len(table)} examples of {dataset.name!r}")
    return table.assign(correct=values).dropna(subset=["correct"])


def factor_accuracy(correct: Any, dataset: CompositeDataset) -> dict[str, pd.DataFrame]:
    """Accuracy (percent) and example count per value of each factor.

    ``correct`` is a boolean per example in dataset order, or per-example rows with ``id`` and
    ``correct`` columns (``Store.read_predictions``; rows with ``status != "ok"`` are ignored).
    Returns ``{"size": [size, accuracy, n], "location": [x, y, accuracy, n], "rotation": [...],
    "foreground": [...], "background": [...]}``, each sorted by factor value.
    """
    table = _correct_column(correct, dataset)
    keys = {"size": ["size"], "location": ["x", "y"], "rotation": ["rotation"], "foreground": ["foreground"],
            "background": ["background"]}
    out = {}
    for factor, cols in keys.items():
        g = table.groupby(cols, sort=True)["correct"]
        out[factor] = pd.DataFrame({"accuracy": 100 * g.mean(), "n": g.size()}).reset_index()
    return out


def _check_percentile(percentile: float, where: str) -> None:
    if not 0 < percentile <= 100:
        raise ConfigError(f"{where}: percentile must be in (0, 100], got {percentile!r}")


def location_heatmap(correct: Any, dataset: CompositeDataset, percentile: float = 95.0) -> pd.DataFrame:
    """SI-SCORE's location map: accuracy at each object centre divided by its 95th percentile.

    A 2-D table with rows = ``y`` and columns = ``x`` (both ascending; ``.to_numpy()`` for the
    array); a value of 1 is as good as the 95th-percentile location, values above 1 are
    possible, locations absent from the dataset are NaN. Over all other factors. If the
    percentile is 0 (nothing correct anywhere) the map is the raw accuracies (all 0).
    """
    _check_percentile(percentile, "location_heatmap")
    acc = factor_accuracy(correct, dataset)["location"]
    grid = acc.pivot(index="y", columns="x", values="accuracy").sort_index().sort_index(axis=1) / 100
    ref = float(np.nanpercentile(acc["accuracy"] / 100, percentile)) if len(acc) else float("nan")
    return grid / ref if ref > 0 else grid


# ---------------------------------------------------------------------------- stored study
STUDY_KIND = "compositing"
#: Columns of a stored compositing study (one row per factor value; see :func:`compositing_study`).
STUDY_COLUMNS = ["model", "spec", "dataset", "setting", "factor", "value", "label", "x", "y", "accuracy", "n",
                 "normalised"]



@dataclass(frozen=True)
class CompositingConfig:
    """One compositing study: ``model`` on the composite dataset ``spec`` (a spec file or a
    :class:`~shiftbench.datasets.composite.CompositeDataset`); ``percentile`` normalises the
    location map; ``evaluate_kwargs`` go to :func:`shiftbench.evaluate` (see
    :func:`compositing_study`)."""

    model: Any
    spec: CompositeDataset | str | Path
    data_root: str | Path = "."
    percentile: float = 95.0
    evaluate_kwargs: Mapping[str, Any] = field(default_factory=dict)


@register_study
class CompositingStudy(Study):
    """Accuracy per object size, location and rotation (SI-SCORE); the report section ``compositing``."""

    kind, config_type, section = STUDY_KIND, CompositingConfig, "compositing"
    description = "accuracy per factor of SI-SCORE-style composites (object size, location, rotation)"

    def run(self, config: CompositingConfig, store: str | Path | Store | None = None) -> StudyResult:
        from shiftbench.datasets.registry import load_dataset  # deferred: loads Pillow
        from shiftbench.engine.runner import evaluate  # deferred: loads Pillow, loads pyarrow

        spec, data_root, percentile = config.spec, config.data_root, config.percentile
        _check_percentile(percentile, "compositing_study")   # before the model runs
        setting = composite_setting(spec)
        # the spec is read (and checked) before the model is loaded
        dataset = spec if isinstance(spec, CompositeDataset) else load_dataset("composite", data_root, path=spec)
        target = as_store(store)
        evaluate_kwargs = {"progress": False, **dict(config.evaluate_kwargs)}
        result = evaluate(config.model, setting, data_root=data_root, store=target, **evaluate_kwargs)
        row = result.iloc[0]
        preds = target.read_predictions(row["key"])
        factors = factor_accuracy(preds, dataset)
        heat = location_heatmap(preds, dataset, percentile)
        frame = _study_frame(factors, heat)
        spec_text = dataset.name if isinstance(spec, CompositeDataset) else str(spec)
        frame.insert(0, "setting", setting)
        frame.insert(0, "dataset", dataset.name)
        frame.insert(0, "spec", spec_text)
        frame.insert(0, "model", str(row["model"]))
        frame = frame[STUDY_COLUMNS]
        name = stored_study_name(target, STUDY_KIND, (str(row["model"]), dataset.name),
                                 {"model": str(row["model"]), "dataset": dataset.name})
        meta = {"model": str(row["model"]), "spec": spec_text, "dataset": dataset.name, "setting": setting,
                "key": row["key"], "accuracy": float(row["accuracy"]), "n_examples": int(row["n_examples"]),
                "n_skipped": int(row["n_skipped"]), "percentile": float(percentile), "shape": list(dataset.shape),
                "limit": evaluate_kwargs.get("limit")}
        out = StudyResult(STUDY_KIND, name, frame, meta, value=dataset)
        out.write(target)
        frame.attrs.update(accuracy=float(row["accuracy"]), n_examples=int(row["n_examples"]), key=row["key"],
                           study=name)
        return out


def compositing_study(
    model: Any,
    spec: CompositeDataset | str | Path,
    *,
    data_root: str | Path = ".",
    store: Any = None,
    percentile: float = 95.0,
    **evaluate_kwargs: Any,
) -> pd.DataFrame:
    """Evaluate ``model`` on a composite dataset and store its per-factor accuracies as a study.

    ``spec`` is a JSON/YAML spec file (the setting ``composite:<spec>``, resolved against
    ``data_root`` like ``folder:`` paths) or a :class:`CompositeDataset`. The model runs through
    :func:`shiftbench.evaluate` (so an interrupted study resumes at the engine's first
    unfinished chunk and a finished one is not recomputed); the per-example rows are read back
    from the store (``Store.read_predictions``) and reduced with :func:`factor_accuracy` and
    :func:`location_heatmap` (SI-SCORE, Djolonga et al. 2021, §4: accuracy per object size,
    location and rotation; the location map divided by its ``percentile``-th percentile).

    Returns the long-form table written to the store as the study ``compositing`` /
    ``<model>__<dataset name>-<hash>`` (replacing an earlier one): one row per factor value with
    ``model, spec, dataset, setting, factor`` (``size``, ``rotation``, ``location``,
    ``foreground``, ``background``), ``value`` (size or angle), ``label`` (the value as text:
    ``0.2``, ``90``, ``0.5,0.1``, a foreground name), ``x, y`` (locations), ``accuracy``
    (percent), ``n`` (examples) and ``normalised`` (the location map's value). ``.attrs``
    holds ``accuracy``, ``n_examples``, ``key`` and ``study``. ``evaluate_kwargs`` go to
    :func:`shiftbench.evaluate` (``batch_size``, ``limit``, ``device``, ``progress``, ...).
    """
    config = CompositingConfig(model, spec, data_root=data_root, percentile=percentile,
                               evaluate_kwargs=evaluate_kwargs)
    return CompositingStudy().run(config, store).frame


def _study_frame(factors: Mapping[str, pd.DataFrame], heat: pd.DataFrame) -> pd.DataFrame:
    """The long-form rows of :func:`compositing_study` from :func:`factor_accuracy` and the map."""
    parts = []
    for factor in ("size", "rotation"):
        t = factors[factor]
        parts.append(pd.DataFrame({"factor": factor, "value": t[factor].astype(float),
                                   "label": [f"{v:g}" for v in t[factor]], "accuracy": t["accuracy"], "n": t["n"]}))
    loc = factors["location"]
    normalised = heat.rename_axis(index="y", columns=None).reset_index().melt(
        id_vars="y", var_name="x", value_name="normalised")
    normalised["x"] = normalised["x"].astype(float)
    loc = loc.merge(normalised, on=["x", "y"], how="left")
    parts.append(pd.DataFrame({"factor": "location", "label": [f"{x:g},{y:g}" for x, y in zip(loc["x"], loc["y"])],
                               "x": loc["x"], "y": loc["y"], "accuracy": loc["accuracy"], "n": loc["n"],
                               "normalised": loc["normalised"]}))
    for factor in ("foreground", "background"):
        t = factors[factor]
        parts.append(pd.DataFrame({"factor": factor, "label": t[factor].astype(str), "accuracy": t["accuracy"],
                                   "n": t["n"]}))
    frame = pd.concat(parts, ignore_index=True)
    for col in ("value", "x", "y", "normalised"):
        frame[col] = frame[col].astype(float) if col in frame else np.nan
    frame["n"] = frame["n"].astype(np.int64)
    return frame


def heatmap_from_study(frame: pd.DataFrame, column: str = "normalised") -> pd.DataFrame:
    """The location map (rows ``y``, columns ``x``, ascending) of one stored compositing study.

    ``column`` is ``normalised`` (accuracy over its 95th percentile, as stored) or ``accuracy``.
    """
    if column not in ("normalised", "accuracy"):
        raise ConfigError(f"heatmap_from_study: column must be 'normalised' or 'accuracy', got {column!r}")
    loc = frame[frame["factor"] == "location"]
    if not {"x", "y", column} <= set(loc.columns) or loc.empty:
        raise DataError("heatmap_from_study: no location rows; pass one study's table from compositing_study "
                        "or Store.read_study('compositing', name)")
    return loc.pivot(index="y", columns="x", values=column).sort_index().sort_index(axis=1)
