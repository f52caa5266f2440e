"""The per-example correctness matrix of a setting, read from a results store (the testbed floor:
per example what `Testbed.from_store` is per setting).

``C[i, k]`` says whether model ``i`` classifies example ``k`` correctly, aligned on example ids
across models; :mod:`shiftbench.analysis.similarity` computes dominance probability, error
consistency and unsolved examples from it without opening the store. On a pm-k setting the
examples are the pm-sets, scored by the pm-k rule (:func:`shiftbench.views.pm_k_anchors`).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from shiftbench.errors import ConfigError, DataError, did_you_mean
from shiftbench.settings import get_setting
from shiftbench.store import Store
from shiftbench.views.pmk import pm_k_anchors


# ---------------------------------------------------------------------------- the matrix
@dataclass(frozen=True)
class CorrectnessMatrix:
    """Which model gets which example right, aligned on example ids.

    Attributes
    ----------
    correct:
        Boolean array ``(n_models, n_examples)``.
    models, example_ids:
        Row and column labels.
    setting:
        The evaluation setting the predictions come from ("" when built by hand).
    model_types:
        Per model (``STANDARD``, ``ROBUST_INTV``, ...; ``UNKNOWN`` when not known).
    n_skipped:
        Examples left out because some model's row was not scored (``status`` ``skipped``:
        an image that could not be decoded) - left out for every model, so all see the same set.
    n_unshared:
        Examples left out because they are not in every model's example list (e.g. a
        ``--limit`` run beside a full one).
    """

    correct: np.ndarray
    models: tuple[str, ...]
    example_ids: tuple[str, ...] = ()
    setting: str = ""
    model_types: tuple[str, ...] = ()
    n_skipped: int = 0
    n_unshared: int = 0

    def __post_init__(self) -> None:
        c = np.asarray(self.correct)
        where = f"setting {self.setting!r}" if self.setting else "correctness matrix"
        if c.ndim != 2:
            raise DataError(f"{where}: correctness must be 2-D (models x examples), got shape {c.shape}")
        if c.dtype != bool:
            if c.dtype.kind not in "biuf" or not np.isin(c, (0, 1)).all():
                raise DataError(f"{where}: correctness values must be True/False or 0/1 (no NaN); "
                                "leave unscored examples out instead")
            c = c.astype(bool)
        if c.shape[0] < 1 or c.shape[1] < 1:
            raise DataError(f"{where}: needs at least one model and one example, got shape {c.shape}")
        models = tuple(str(m) for m in self.models)
        if len(models) != c.shape[0]:
            raise DataError(f"{where}: {c.shape[0]} rows of correctness but {len(models)} model names")
        if len(set(models)) != len(models):
            dup = next(m for m in models if models.count(m) > 1)
            raise DataError(f"{where}: model {dup!r} appears twice; give each row a unique model name")
        ids = tuple(str(i) for i in self.example_ids) or tuple(str(k) for k in range(c.shape[1]))
        if len(ids) != c.shape[1]:
            raise DataError(f"{where}: {c.shape[1]} examples but {len(ids)} example ids")
        types = tuple(str(t) for t in self.model_types) or ("UNKNOWN",) * len(models)
        if len(types) != len(models):
            raise DataError(f"{where}: {len(models)} models but {len(types)} model types")
        object.__setattr__(self, "correct", c)
        object.__setattr__(self, "models", models)
        object.__setattr__(self, "example_ids", ids)
        object.__setattr__(self, "model_types", types)

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, *, setting: str = "",
                   model_types: Sequence[str] | None = None) -> CorrectnessMatrix:
        """From a DataFrame indexed by model with one column per example."""
        return cls(frame.to_numpy(), tuple(frame.index), tuple(frame.columns), setting=setting,
                   model_types=tuple(model_types or ()))

    def to_frame(self) -> pd.DataFrame:
        """The matrix as a DataFrame (models x example ids)."""
        return pd.DataFrame(self.correct, index=pd.Index(self.models, name="model"),
                            columns=pd.Index(self.example_ids, name="id"))

    @property
    def n_models(self) -> int:
        return self.correct.shape[0]

    @property
    def n_examples(self) -> int:
        return self.correct.shape[1]

    @property
    def accuracy(self) -> pd.Series:
        """Top-1 accuracy in percent over the aligned examples, per model."""
        return pd.Series(100.0 * self.correct.mean(axis=1), index=pd.Index(self.models, name="model"),
                         name="accuracy")

    def select(self, models: Iterable[str]) -> CorrectnessMatrix:
        """The rows of ``models`` (in that order)."""
        rows = [self._row(m) for m in models]
        return CorrectnessMatrix(self.correct[rows], tuple(self.models[r] for r in rows), self.example_ids,
                                 self.setting, tuple(self.model_types[r] for r in rows), self.n_skipped,
                                 self.n_unshared)

    def _row(self, model: str) -> int:
        try:
            return self.models.index(model)
        except ValueError:
            where = f" on setting {self.setting!r}" if self.setting else ""
            listed = ", ".join(self.models[:8]) + (", ..." if len(self.models) > 8 else "")
            raise ConfigError(did_you_mean("model", model, self.models,
                                           f"models with predictions{where}: {listed}")) from None


# ---------------------------------------------------------------------------- from a results store
def _latest_keys(results: pd.DataFrame, convention: str) -> pd.DataFrame:
    """One key per (model, setting): the given class-subset convention (or ``full``), then the
    longest example list, then the latest (as :meth:`Testbed.from_store` picks)."""
    res = results[results["convention"].isin([convention, "full"]) | results["convention"].isna()]
    res = res.assign(n_examples=pd.to_numeric(res["n_examples"], errors="coerce"),
                     finished=pd.to_numeric(res["finished"], errors="coerce"))
    return res.sort_values(["n_examples", "finished"]).drop_duplicates(["model", "setting"], keep="last")


def similarity_settings(store: Store | str | Path, min_models: int = 2, *,
                        convention: str = "restricted") -> pd.Series:
    """Settings of a results store with finished predictions of at least ``min_models`` models:
    the number of models per setting, most models first (then by name)."""
    res = Store.existing(store).results()
    if res.empty:
        return pd.Series(dtype=int, name="n_models")
    latest = _latest_keys(res, convention)
    st = Store.existing(store)
    # results without per-example parts (a transfer probe's accuracy) have no predictions to align
    latest = latest[[st.has_predictions(k) for k in latest["key"]]]
    counts = latest.groupby("setting")["model"].nunique()
    counts = counts[counts >= min_models]
    order = sorted(counts.index, key=lambda s: (-counts[s], s))
    return counts.reindex(order).rename("n_models").astype(int)


def _check_unique(ids: np.ndarray, st: Store, row: tuple, setting: str) -> None:
    index = pd.Index(ids)
    if index.has_duplicates:
        raise DataError(f"{st.root}: example id {index[index.duplicated()][0]!r} appears twice for model "
                        f"{row.model!r} on {setting!r} (key {row.key}); rerun it with --force")


def _pm_k_of(setting: str) -> int | None:
    """k of a pm-k setting (``imagenet-vid-robust_pm10``, ...), None for any other setting."""
    try:
        return get_setting(setting).pm_k
    except Exception:   # a setting this installation cannot parse is not a pm-k one
        return None


def _anchor_rows(pred: pd.DataFrame, k: int, st: Store, row: tuple, setting: str) -> pd.DataFrame:
    """A pm-k setting's frame rows as one row per pm-set, ``id`` = the set's anchor id, ``correct``
    = pm-k correctness (the anchor and every frame within ``k`` right), scored over the decoded
    frames as the runner scores them; a set whose anchor frame was not scored is skipped."""
    if not {"group", "offset"} <= set(pred.columns) or pred["group"].isna().all():
        raise DataError(f"{st.root}: the predictions of model {row.model!r} on {setting!r} (key {row.key}) have "
                        "no pm-set groups; rerun `shiftbench eval --force` for it")
    ok = pred[pred["status"] == "ok"]
    anchored = ok.loc[ok["offset"] == 0, "group"].astype(str).unique()
    scored = ok[ok["group"].astype(str).isin(anchored)]
    ids, right = (pm_k_anchors(scored["correct"].to_numpy(dtype=bool), scored["group"].astype(str).to_numpy(),
                               scored["offset"].to_numpy(), k) if len(scored) else (np.zeros(0, dtype=object),
                                                                                      np.zeros(0, dtype=bool)))
    dropped = sorted(set(pred["group"].dropna().astype(str)) - set(anchored))
    return pd.DataFrame({"id": np.concatenate([np.asarray(ids, dtype=object), np.asarray(dropped, dtype=object)]),
                         "status": ["ok"] * len(ids) + ["skipped"] * len(dropped),
                         "correct": np.concatenate([right, np.zeros(len(dropped), dtype=bool)])})


class _IdAligner:
    """Aligns each model's per-example rows on the first model's example ids: an example is kept
    when every model has a scored row for it; ``n_skipped`` counts examples skipped (not
    decodable) for some model, ``n_unshared`` those missing from some model's example list."""

    def __init__(self, st: Store, setting: str) -> None:
        self.st, self.setting = st, setting
        self.ref: pd.Index | None = None
        self.ref_ids = np.zeros(0, dtype=object)
        self.present = self.bad = np.zeros(0, dtype=bool)
        self.extra: set[str] = set()
        self.extra_bad: set[str] = set()

    def add(self, ids: np.ndarray, ok: np.ndarray, row: Any) -> tuple[np.ndarray, np.ndarray]:
        """One model's ids and scored flags; returns each row's position in the reference and
        whether it has one."""
        if self.ref is None:                              # the first model's examples are the reference
            _check_unique(ids, self.st, row, self.setting)
            self.ref, self.ref_ids = pd.Index(ids), ids
            self.present, self.bad = np.ones(len(ids), dtype=bool), np.zeros(len(ids), dtype=bool)
        if len(ids) == len(self.ref_ids) and (ids == self.ref_ids).all():
            pos = np.arange(len(ids))                     # the usual case: the same example list
        else:
            _check_unique(ids, self.st, row, self.setting)
            pos = self.ref.get_indexer(ids)
        inside = pos >= 0
        seen = np.zeros(len(self.ref), dtype=bool)
        seen[pos[inside]] = True
        self.present &= seen
        self.bad[pos[inside & ~ok]] = True
        self.extra.update(ids[~inside])
        self.extra_bad.update(ids[~inside & ~ok])
        return pos, inside

    def kept(self, n_models: int) -> np.ndarray:
        """The reference examples every model scored (an error when there are none)."""
        kept = self.present & ~self.bad
        if not kept.any():
            raise DataError(f"{self.st.root}: the {n_models} models on {self.setting!r} share no scored example; "
                            "evaluate them on the same dataset")
        return kept

    @property
    def n_skipped(self) -> int:
        return int(self.bad.sum()) + len(self.extra_bad)

    @property
    def n_unshared(self) -> int:
        return int((~self.present & ~self.bad).sum()) + len(self.extra - self.extra_bad)


def correctness_matrix(store: Store | str | Path, setting: str, models: Iterable[str] | None = None, *,
                       convention: str = "restricted") -> CorrectnessMatrix:
    """The correctness matrix of ``setting`` from the per-example predictions in a results store.

    Models are aligned on example ``id``: an example is kept when every model has a scored
    (``status == "ok"``) row for it; examples skipped for any model (``n_skipped``) or missing
    from some model's example list (``n_unshared``) are left out for every model. Where a model
    has several keys on the setting (both class-subset conventions, ``--limit`` runs), the
    ``convention`` one with the most examples is used, as in :meth:`Testbed.from_store`.
    Model types come from the store (``shiftbench eval --model-type``). On a pm-k setting
    (``imagenet-vid-robust_pm10``, ...) the examples are the pm-sets, identified by their anchor
    frame, and an example is right when the pm-k criterion holds (its anchor and every frame
    within k right) - so the matrices compare the numbers the setting reports, not frames.
    """
    st = Store.existing(store)
    res = st.results()
    if res.empty:
        raise DataError(f"{st.root}: no finished results; run `shiftbench eval` first")
    res = _latest_keys(res, convention)
    here = res[res["setting"] == setting]
    if here.empty:
        raise ConfigError(did_you_mean("setting", setting, sorted(res["setting"].astype(str).unique()),
                                       f"settings with predictions in {st.root}"))
    if models is not None:
        wanted = list(dict.fromkeys(models))
        have = list(here["model"])
        for m in wanted:
            if m not in have:
                raise ConfigError(did_you_mean("model", m, have, f"models with predictions on {setting!r}"))
        here = here.set_index("model").loc[wanted].reset_index()
    align = _IdAligner(st, setting)
    rows: list[np.ndarray] = []
    k = _pm_k_of(setting)
    cols = ["id", "status", "correct", "group", "offset"] if k is not None else ["id", "status", "correct"]
    preds = st.read_predictions_of(list(here["key"]), columns=cols)
    for row in here.itertuples(index=False):
        pred = preds[row.key]
        if pred.empty or not {"id", "status", "correct"} <= set(pred.columns):
            raise DataError(f"{st.root}: no per-example predictions for model {row.model!r} on {setting!r} "
                            f"(key {row.key}); rerun `shiftbench eval --force` for it")
        if k is not None:
            pred = _anchor_rows(pred, k, st, row, setting)
        ids = pred["id"].astype(str).to_numpy(dtype=object)
        ok = (pred["status"] == "ok").to_numpy()
        pos, inside = align.add(ids, ok, row)
        vec = np.zeros(len(align.ref), dtype=bool)
        vec[pos[inside & ok]] = pred["correct"].to_numpy(dtype=bool)[inside & ok]
        rows.append(vec)
    kept = align.kept(len(here))
    correct = np.vstack(rows)[:, kept]
    types = here["model_type"] if "model_type" in here else pd.Series([None] * len(here))
    types = [str(t) if isinstance(t, str) and t else "UNKNOWN" for t in types]
    return CorrectnessMatrix(correct, tuple(here["model"].astype(str)), tuple(align.ref[kept]), setting=setting,
                             model_types=tuple(types), n_skipped=align.n_skipped, n_unshared=align.n_unshared)


# ---------------------------------------------------------------------------- predictions, for label-free estimates
@dataclass(frozen=True)
class PredictionMatrix:
    """Per model the top-1 prediction, correctness, max-softmax and entropy of every example of a
    setting, aligned on example ids as in :func:`correctness_matrix` (``(n_models, n_examples)``
    arrays; ``confidence``/``entropy`` are None when some model's rows lack the column, e.g. a
    store written before the column existed)."""

    models: tuple[str, ...]
    example_ids: tuple[str, ...]
    pred: np.ndarray
    correct: np.ndarray
    confidence: np.ndarray | None
    entropy: np.ndarray | None
    setting: str = ""
    n_skipped: int = 0
    n_unshared: int = 0


def _label_space(setting: str, convention: str) -> tuple:
    """What a setting's predictions are ids of: the view's class subset or target space (a folder,
    a manifest and every full-space setting compare equal)."""
    try:
        view = get_setting(setting).view(convention)
    except Exception:   # a setting this installation cannot build: nothing to compare
        return ("unknown",)
    ids = getattr(view, "class_ids", None)
    if ids is not None:
        return ("subset", tuple(np.asarray(ids).tolist()))
    n = getattr(view, "num_target", None)
    if n is not None:
        return (type(view).__name__, int(n), tuple(getattr(view, "target_names", None) or ()))
    return ("full",)


def prediction_matrix(store: Store | str | Path, setting: str, models: Iterable[str], *,
                      convention: str = "restricted") -> PredictionMatrix:
    """:class:`PredictionMatrix` of ``models`` on ``setting``, from the store (the keys
    :func:`correctness_matrix` picks; examples skipped for any model or not in every model's list
    are left out for every model). Not for pm-k settings (their examples are sets of frames)."""
    st = Store.existing(store)
    if _pm_k_of(setting) is not None:
        raise ConfigError(f"{setting!r} is a pm-k setting (sets of frames); label-free estimates need a "
                          "per-image setting, e.g. its frame-level source")
    res = _latest_keys(st.results(), convention)
    here = res[res["setting"] == setting].set_index("model")
    wanted = list(dict.fromkeys(models))
    align = _IdAligner(st, setting)
    cols: dict[str, list[np.ndarray]] = {"pred": [], "correct": [], "confidence": [], "entropy": []}
    have = {"confidence": True, "entropy": True}
    for model in wanted:
        key = here.loc[model, "key"]
        pred = st.read_predictions(key, columns=["id", "status", "pred", "correct", "confidence", "entropy"])
        if pred.empty or not {"id", "status", "pred", "correct"} <= set(pred.columns):
            raise DataError(f"{st.root}: no per-example predictions for model {model!r} on {setting!r} "
                            f"(key {key}); rerun `shiftbench eval --force` for it")
        ids = pred["id"].astype(str).to_numpy(dtype=object)
        ok = (pred["status"] == "ok").to_numpy()
        pos, inside = align.add(ids, ok, here.loc[[model]].reset_index().iloc[0])
        for name, fill, dtype in (("pred", -1, np.int64), ("correct", False, bool), ("confidence", np.nan, np.float64),
                                  ("entropy", np.nan, np.float64)):
            vec = np.full(len(align.ref), fill, dtype=dtype)
            if name in pred.columns:
                vec[pos[inside & ok]] = pred[name].to_numpy(dtype=dtype, na_value=fill)[inside & ok]
            else:
                have[name] = False
            cols[name].append(vec)
    kept = align.kept(len(wanted))
    mats = {k: np.vstack(v)[:, kept] for k, v in cols.items()}
    for name in ("confidence", "entropy"):
        if have[name] and np.isnan(mats[name]).any():
            have[name] = False
    return PredictionMatrix(tuple(wanted), tuple(align.ref[kept]), mats["pred"], mats["correct"],
                            mats["confidence"] if have["confidence"] else None,
                            mats["entropy"] if have["entropy"] else None, setting, align.n_skipped, align.n_unshared)


def label_free_inputs(store: Store | str | Path, id_setting: str, ood_setting: str,
                      models: Iterable[str] | None = None, *,
                      convention: str = "restricted") -> tuple[PredictionMatrix, PredictionMatrix, list[str]]:
    """The ID and OOD :class:`PredictionMatrix` of the models with predictions on both settings,
    and the models left out (predictions on the ID setting only, or asked for and on neither).

    A :class:`ConfigError` names the settings when a setting has no predictions, when the two
    settings' predictions are ids of different label spaces, or when fewer than 3 models remain.
    """
    st = Store.existing(store)
    res = st.results()
    if res.empty:
        raise DataError(f"{st.root}: no finished results; run `shiftbench eval` first")
    res = _latest_keys(res, convention)
    known = sorted(res["setting"].astype(str).unique())
    for s in (id_setting, ood_setting):
        if s not in known:
            raise ConfigError(did_you_mean("setting", s, known, f"settings with predictions in {st.root}"))
    if _label_space(id_setting, convention) != _label_space(ood_setting, convention):
        raise ConfigError(f"{id_setting!r} and {ood_setting!r} predict in different label spaces; agreement and "
                          "accuracy estimates need one label space (e.g. val-on-imagenet-a-classes with imagenet-a)")
    on_id = list(res.loc[res["setting"] == id_setting, "model"].astype(str))
    on_ood = set(res.loc[res["setting"] == ood_setting, "model"].astype(str))
    wanted = list(dict.fromkeys(models)) if models is not None else sorted(on_id)
    both = [m for m in wanted if m in on_ood and m in on_id]
    left_out = [m for m in wanted if m not in both]
    if len(both) < 3:
        raise ConfigError(f"{len(both)} models have predictions on both {id_setting!r} and {ood_setting!r}"
                          + (f" ({', '.join(left_out)} lack one)" if left_out else "")
                          + "; label-free estimates need at least 3")
    return (prediction_matrix(st, id_setting, both, convention=convention),
            prediction_matrix(st, ood_setting, both, convention=convention), left_out)
