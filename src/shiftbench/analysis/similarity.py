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

:func:`shiftbench.views.correctness.correctness_matrix` builds ``C`` from a results store
(``shiftbench eval`` writes one row per example and model); this module is numpy/pandas over
that matrix only and opens no store (DESIGN principle 5).

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

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Union

import numpy as np
import pandas as pd

from shiftbench.correctness import CorrectnessMatrix
from shiftbench.errors import ConfigError
from shiftbench.testbed import Testbed

STANDARD = "STANDARD"
#: Examples per float32 block of the matrix product (300 models x 8192 examples = 9.8 MB).
CHUNK_SIZE = 8192
_EXACT_FLOAT32 = 2 ** 24


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
