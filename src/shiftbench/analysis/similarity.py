"""Model similarity from per-example correctness: dominance probability and error consistency.

Two models with the same accuracy can make the same mistakes or entirely different ones. Over a
boolean correctness matrix ``C`` (models x examples, ``C[i, k]`` = model ``i`` classifies
example ``k`` correctly) this module computes, for every pair of models:

* the **dominance probability** (Mania & Sra 2020, "Why do classifier accuracies show linear
  trends under distribution shift?", §3): for ``acc_i <= acc_j``, the share of examples the
  less accurate model ``i`` gets right and the more accurate ``j`` gets wrong,
  ``P(i right, j wrong)``. Small values for all pairs are what makes accuracies on two
  distributions line up;
* the **error consistency** (Geirhos et al. 2020, "Beyond accuracy: quantifying trial-by-trial
  behaviour of CNNs and humans by measuring error consistency", §2): Cohen's kappa of the two
  models' right/wrong decisions, ``kappa = (c_obs - c_exp) / (1 - c_exp)`` with ``c_obs`` the
  share of examples both get right or both get wrong and ``c_exp = p_i p_j + (1 - p_i)(1 - p_j)``
  the agreement two independent models with accuracies ``p_i``, ``p_j`` would reach;
* the examples that no *standard* model (Taori et al. 2020) gets right, and which models do.

Everything comes from one matrix product: ``B = C C^T`` counts the examples both models get
right (float32 products over chunks of examples, exact for counts below 2^24 per chunk and
accumulated in float64), ``r = diag(B)`` what each gets right, and then
``i right, j wrong = r_i - B_ij`` and ``both wrong = n - r_i - r_j + B_ij``. 300 models x 50,000
examples take well under a second of arithmetic (``bench/similarity.py``).

:func:`correctness_matrix` builds ``C`` from a results store (``shiftbench eval`` writes one
row per example and model); everything else is numpy/pandas only (DESIGN principle 5).

Example
-------
>>> import numpy as np
>>> c = CorrectnessMatrix(np.array([[1, 1, 1, 1, 0, 0],
...                                 [1, 1, 0, 0, 1, 0],
...                                 [0, 1, 1, 0, 0, 0]], dtype=bool), models=("a", "b", "c"))
>>> float(dominance_probability(c).loc["c", "a"])   # c (2/6) right and a (4/6) wrong: none
0.0
>>> round(float(dominance_probability(c).loc["b", "a"]), 4)   # example 4 only: 1/6
0.1667
>>> round(float(error_consistency(c).loc["a", "b"]), 4)
0.0
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Union

import numpy as np
import pandas as pd

from shiftbench.errors import ConfigError, DataError, did_you_mean

if TYPE_CHECKING:  # pragma: no cover
    from shiftbench.store import Store
    from shiftbench.testbed import Testbed

STANDARD = "STANDARD"
#: Examples per float32 block of the matrix product (300 models x 8192 examples = 9.8 MB).
CHUNK_SIZE = 8192
_EXACT_FLOAT32 = 2 ** 24


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


Correctness = Union[CorrectnessMatrix, pd.DataFrame, np.ndarray]


def as_correctness(correct: Correctness) -> CorrectnessMatrix:
    """Validate ``correct``: a :class:`CorrectnessMatrix`, a DataFrame (models x examples) or an
    array ``(n_models, n_examples)`` of booleans or 0/1."""
    if isinstance(correct, CorrectnessMatrix):
        return correct
    if isinstance(correct, pd.DataFrame):
        return CorrectnessMatrix.from_frame(correct)
    arr = np.asarray(correct)
    return CorrectnessMatrix(arr, tuple(f"model{i}" for i in range(arr.shape[0])) if arr.ndim == 2 else ())


# ---------------------------------------------------------------------------- counts
def both_right_counts(correct: np.ndarray, chunk_size: int = CHUNK_SIZE) -> np.ndarray:
    """``B = C C^T``: for every pair of models the number of examples both get right (int64).

    Computed as float32 matrix products over blocks of at most ``chunk_size`` examples (exact:
    each block's counts stay below 2^24) summed in float64, so memory stays at one float32 block
    however many examples there are.
    """
    if not 1 <= chunk_size <= _EXACT_FLOAT32:
        raise ConfigError(f"chunk_size={chunk_size}: use 1 to {_EXACT_FLOAT32} examples per block")
    n_models, n_examples = correct.shape
    total = np.zeros((n_models, n_models), dtype=np.float64)
    for start in range(0, n_examples, chunk_size):
        block = correct[:, start:start + chunk_size].astype(np.float32)
        total += block @ block.T
    return np.rint(total).astype(np.int64)


def _labels(c: CorrectnessMatrix) -> pd.Index:
    return pd.Index(c.models, name="model")


def _dominance(both: np.ndarray, n: int) -> np.ndarray:
    right = np.diag(both)
    return (np.minimum(right[:, None], right[None, :]) - both) / n


def _kappa(both: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    right = np.diag(both).astype(np.float64)
    p = right / n
    both_wrong = n - right[:, None] - right[None, :] + both
    c_obs = (both + both_wrong) / n
    c_exp = p[:, None] * p[None, :] + (1 - p[:, None]) * (1 - p[None, :])
    # c_exp = 1 exactly when both models get every example right, or both get every one wrong
    degenerate = (right[:, None] == right[None, :]) & ((right[:, None] == 0) | (right[:, None] == n))
    with np.errstate(divide="ignore", invalid="ignore"):
        kappa = np.where(degenerate, np.nan, (c_obs - c_exp) / np.where(degenerate, 1.0, 1 - c_exp))
    return kappa, c_obs, c_exp


def dominance_probability(correct: Correctness, *, chunk_size: int = CHUNK_SIZE) -> pd.DataFrame:
    """Dominance probability of every pair of models (Mania & Sra 2020, §3).

    For models ``i``, ``j`` with ``acc_i <= acc_j``: ``P(i right and j wrong)``, the share of
    examples the less accurate model gets right and the more accurate one gets wrong. With
    ``r_i`` the examples model ``i`` gets right and ``B_ij`` those both get right, this is
    ``(min(r_i, r_j) - B_ij) / n``: symmetric (for equal accuracies both readings agree),
    zero on the diagonal, and at most ``min(acc_i, 1 - acc_j)``.

    Returns a models x models DataFrame of shares in [0, 1].
    """
    c = as_correctness(correct)
    values = _dominance(both_right_counts(c.correct, chunk_size), c.n_examples)
    return pd.DataFrame(values, index=_labels(c), columns=_labels(c))


def error_consistency(correct: Correctness, *, chunk_size: int = CHUNK_SIZE) -> pd.DataFrame:
    """Error consistency (Cohen's kappa) of every pair of models (Geirhos et al. 2020, §2).

    ``c_obs`` = share of examples both models get right or both get wrong;
    ``c_exp = p_i p_j + (1 - p_i)(1 - p_j)`` with ``p`` the accuracies (as shares), the agreement
    expected of independent models; ``kappa = (c_obs - c_exp) / (1 - c_exp)``, in [-1, 1]: 0 is
    chance agreement, 1 identical errors, negative systematically different errors.

    Degenerate case: ``c_exp = 1`` exactly when both models get every example right (or both
    get every example wrong); then ``c_obs = 1`` as well, kappa is 0/0 and is returned as
    ``NaN`` (there are no errors whose consistency could be measured). A model with
    accuracy 0 or 1 against one that is not gets ``kappa = 0``.

    Returns a models x models DataFrame (1 on the diagonal unless degenerate).
    """
    c = as_correctness(correct)
    kappa, _, _ = _kappa(both_right_counts(c.correct, chunk_size), c.n_examples)
    return pd.DataFrame(kappa, index=_labels(c), columns=_labels(c))


# ---------------------------------------------------------------------------- standard models
def standard_models(correct: Correctness, standard: Testbed | Iterable[str] | str | None = None) -> list[str]:
    """The models of ``correct`` that count as standard (Taori et al. 2020: trained on the
    in-distribution training set without a robustness intervention).

    ``standard`` is ``None`` (the models whose type is ``STANDARD``), a
    :class:`~shiftbench.testbed.Testbed` (the models it types ``STANDARD``) or model names.
    """
    from shiftbench.testbed import Testbed

    c = as_correctness(correct)
    if standard is None:
        chosen = [m for m, t in zip(c.models, c.model_types) if t == STANDARD]
        how = "no model has type STANDARD"
    elif isinstance(standard, Testbed):
        types = standard.model_types
        chosen = [m for m in c.models if m in types.index and types[m] == STANDARD]
        how = f"testbed {standard.name!r} types none of these models STANDARD"
    else:
        names = [standard] if isinstance(standard, str) else [str(s) for s in standard]
        for name in names:
            c._row(name)
        chosen = [m for m in c.models if m in set(names)]
        how = "no standard model names given"
    if not chosen:
        where = f" on setting {c.setting!r}" if c.setting else ""
        raise ConfigError(f"{how}{where}; name the standard models (--standard a,b) or give a testbed "
                          "that types them (--testbed)")
    return chosen


def unsolved_examples(correct: Correctness, standard: Testbed | Iterable[str] | str | None = None) -> pd.DataFrame:
    """The examples no standard model gets right, and which other models do.

    One row per such example: ``id``, ``n_right`` (models that get it right), ``solved_by``
    (their names, most accurate first, ``"; "``-separated) and ``solved_by_types``; sorted by
    ``n_right`` (descending) then id. ``attrs`` holds ``n_standard`` and ``n_examples``.
    """
    c = as_correctness(correct)
    std = standard_models(c, standard)
    mask = np.zeros(c.n_models, dtype=bool)
    mask[[c.models.index(m) for m in std]] = True
    unsolved = np.flatnonzero(~c.correct[mask].any(axis=0))
    order = np.argsort(-c.correct.mean(axis=1), kind="stable")          # most accurate first
    sub = c.correct[np.ix_(order, unsolved)]
    names = np.asarray(c.models, dtype=object)[order]
    types = np.asarray(c.model_types, dtype=object)[order]
    frame = pd.DataFrame({
        "id": [c.example_ids[k] for k in unsolved],
        "n_right": sub.sum(axis=0).astype(int),
        "solved_by": ["; ".join(names[col]) for col in sub.T],
        "solved_by_types": ["; ".join(dict.fromkeys(types[col])) for col in sub.T],
    })
    frame = frame.sort_values(["n_right", "id"], ascending=[False, True], kind="stable").reset_index(drop=True)
    frame.attrs.update(n_standard=len(std), n_examples=c.n_examples, setting=c.setting)
    return frame


# ---------------------------------------------------------------------------- the tidy result
@dataclass(frozen=True)
class ModelSimilarity:
    """Similarity of every pair of models on one setting (see :func:`model_similarity`).

    ``accuracy`` (percent), ``dominance`` and ``error_consistency`` are ordered by accuracy,
    least accurate first (ties by name) - the order of the matrix figure. ``pairs`` is the tidy
    form: one row per unordered pair.
    """

    setting: str
    accuracy: pd.Series
    model_types: pd.Series
    dominance: pd.DataFrame
    error_consistency: pd.DataFrame
    pairs: pd.DataFrame = field(repr=False)
    n_examples: int
    n_skipped: int = 0
    n_unshared: int = 0

    @property
    def models(self) -> list[str]:
        return list(self.accuracy.index)

    def subset(self, models: Iterable[str]) -> ModelSimilarity:
        """The same result restricted to ``models`` (kept in accuracy order)."""
        keep = set(models)
        names = [m for m in self.models if m in keep]
        pairs = self.pairs[self.pairs["model_a"].isin(keep) & self.pairs["model_b"].isin(keep)]
        return ModelSimilarity(self.setting, self.accuracy[names], self.model_types[names],
                               self.dominance.loc[names, names], self.error_consistency.loc[names, names],
                               pairs.reset_index(drop=True), self.n_examples, self.n_skipped, self.n_unshared)


PAIR_COLUMNS = ["setting", "model_a", "model_b", "accuracy_a", "accuracy_b", "both_right", "only_a", "only_b",
                "both_wrong", "n_examples", "dominance_probability", "observed_consistency",
                "expected_consistency", "error_consistency"]


def model_similarity(correct: Correctness, *, chunk_size: int = CHUNK_SIZE) -> ModelSimilarity:
    """Dominance probability (Mania & Sra 2020) and error consistency (Geirhos et al. 2020) of
    every pair of models, from one chunked matrix product of the correctness matrix.

    ``pairs`` has one row per unordered pair with ``model_a`` the less accurate model (ties by
    name): ``both_right``, ``only_a`` (a right, b wrong), ``only_b``, ``both_wrong`` counts,
    ``dominance_probability = only_a / n``, ``observed_consistency``, ``expected_consistency``
    and ``error_consistency`` (kappa; ``NaN`` when ``c_exp = 1``, see :func:`error_consistency`).
    """
    c = as_correctness(correct)
    n = c.n_examples
    right = c.correct.sum(axis=1)
    order = np.lexsort((np.asarray(c.models, dtype=object), right))       # accuracy, then name
    c = c.select([c.models[i] for i in order])
    both = both_right_counts(c.correct, chunk_size)
    right = np.diag(both)
    dom = _dominance(both, n)
    kappa, c_obs, c_exp = _kappa(both, n)
    labels = _labels(c)
    acc = pd.Series(100.0 * right / n, index=labels, name="accuracy")
    a, b = np.triu_indices(c.n_models, k=1)                               # a before b: a less accurate
    names = np.asarray(c.models, dtype=object)
    pairs = pd.DataFrame({
        "setting": c.setting, "model_a": names[a], "model_b": names[b],
        "accuracy_a": acc.to_numpy()[a], "accuracy_b": acc.to_numpy()[b],
        "both_right": both[a, b], "only_a": right[a] - both[a, b], "only_b": right[b] - both[a, b],
        "both_wrong": n - right[a] - right[b] + both[a, b], "n_examples": n,
        "dominance_probability": dom[a, b], "observed_consistency": c_obs[a, b],
        "expected_consistency": c_exp[a, b], "error_consistency": kappa[a, b],
    }, columns=PAIR_COLUMNS)
    return ModelSimilarity(
        setting=c.setting, accuracy=acc, model_types=pd.Series(c.model_types, index=labels, name="model_type"),
        dominance=pd.DataFrame(dom, index=labels, columns=labels),
        error_consistency=pd.DataFrame(kappa, index=labels, columns=labels),
        pairs=pairs, n_examples=n, n_skipped=c.n_skipped, n_unshared=c.n_unshared)


# ---------------------------------------------------------------------------- from a results store
def _store(store: Store | str | Path) -> Store:
    from shiftbench.store import Store

    if isinstance(store, Store):
        return store
    path = Path(store)
    if not path.is_dir():
        raise ConfigError(f"{path}: no results store there; pass the --store directory that `shiftbench eval` wrote")
    return Store(path)


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
    res = _store(store).results()
    if res.empty:
        return pd.Series(dtype=int, name="n_models")
    counts = _latest_keys(res, convention).groupby("setting")["model"].nunique()
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
    from shiftbench.settings import get_setting

    try:
        return get_setting(setting).pm_k
    except Exception:   # a setting this installation cannot parse is not a pm-k one
        return None


def _anchor_rows(pred: pd.DataFrame, k: int, st: Store, row: tuple, setting: str) -> pd.DataFrame:
    """A pm-k setting's frame rows as one row per pm-set, ``id`` = the set's anchor id, ``correct``
    = pm-k correctness (the anchor and every frame within ``k`` right), scored over the decoded
    frames as the runner scores them; a set whose anchor frame was not scored is skipped."""
    from shiftbench.views import pm_k_anchors

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
    st = _store(store)
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
    ref: pd.Index | None = None
    ref_ids = np.zeros(0, dtype=object)
    rows: list[np.ndarray] = []
    present = bad = np.zeros(0, dtype=bool)
    extra: set[str] = set()
    extra_bad: set[str] = set()
    k = _pm_k_of(setting)
    for row in here.itertuples(index=False):
        pred = st.read_predictions(row.key, columns=["id", "status", "correct", "group", "offset"])
        if pred.empty or not {"id", "status", "correct"} <= set(pred.columns):
            raise DataError(f"{st.root}: no per-example predictions for model {row.model!r} on {setting!r} "
                            f"(key {row.key}); rerun `shiftbench eval --force` for it")
        if k is not None:
            pred = _anchor_rows(pred, k, st, row, setting)
        ids = pred["id"].astype(str).to_numpy(dtype=object)
        ok = (pred["status"] == "ok").to_numpy()
        if ref is None:                                   # the first model's examples are the reference
            _check_unique(ids, st, row, setting)
            ref, ref_ids = pd.Index(ids), ids
            present, bad = np.ones(len(ref), dtype=bool), np.zeros(len(ref), dtype=bool)
        if len(ids) == len(ref_ids) and (ids == ref_ids).all():
            pos = np.arange(len(ids))                     # the usual case: the same example list
        else:
            _check_unique(ids, st, row, setting)
            pos = ref.get_indexer(ids)
        inside = pos >= 0
        seen = np.zeros(len(ref), dtype=bool)
        seen[pos[inside]] = True
        present &= seen
        bad[pos[inside & ~ok]] = True
        extra.update(ids[~inside])
        extra_bad.update(ids[~inside & ~ok])
        vec = np.zeros(len(ref), dtype=bool)
        vec[pos[inside & ok]] = pred["correct"].to_numpy(dtype=bool)[inside & ok]
        rows.append(vec)
    assert ref is not None
    kept = present & ~bad
    if not kept.any():
        raise DataError(f"{st.root}: the {len(here)} models on {setting!r} share no scored example; "
                        "evaluate them on the same dataset")
    n_skipped = int(bad.sum()) + len(extra_bad)
    n_unshared = int((~present & ~bad).sum()) + len(extra - extra_bad)
    correct = np.vstack(rows)[:, kept]
    types = here["model_type"] if "model_type" in here else pd.Series([None] * len(here))
    types = [str(t) if isinstance(t, str) and t else "UNKNOWN" for t in types]
    return CorrectnessMatrix(correct, tuple(here["model"].astype(str)), tuple(ref[kept]), setting=setting,
                             model_types=tuple(types), n_skipped=n_skipped, n_unshared=n_unshared)
