"""Multi-label scores: mean average precision (mAP) with a bootstrap interval over examples.

A multi-label example has a *set* of labels (DeepFashion Remixed: the clothing items in the
image; the demo's multi-digit canvases: the digits drawn). Top-1 accuracy then only asks whether
the highest score is one of the labels (the ``top-1-in-set`` convention, kept as the stored
``accuracy``); the benchmark's score is mean average precision (Hendrycks et al. 2021, *The Many
Faces of Robustness*, §3, DeepFashion Remixed):

* per class ``c`` with at least one positive, the average precision of ranking the examples by
  the model's score for ``c`` (scikit-learn's :func:`~sklearn.metrics.average_precision_score`:
  ``AP = Σ_n (R_n − R_{n−1}) P_n`` over the distinct score thresholds, no interpolation);
* mAP = the unweighted mean over those classes (macro average). A class with no positive
  example in the split has no AP; it is left out and named (``classes_without_positives``),
  never averaged in as 0 or NaN.

Examples with an empty label set stay in: they are negatives for every class (and are counted,
``n_no_labels``). Scores are the model's raw outputs (logits): AP depends only on the ranking,
so sigmoid probabilities give the same AP.

Clopper–Pearson does not apply to mAP (it is not a proportion), so the interval is a
percentile bootstrap over examples: ``n_resamples`` resamples of the examples with replacement, each
scored with the same macro AP over the classes that have positives in the resample. The
resampled APs are computed all at once as *weighted* APs (example weights = how often the
resample drew it), which equals scikit-learn's ``average_precision_score`` with
``sample_weight`` (tested) and is ~100x faster than calling it once per resample and class.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shiftbench.errors import DataError
from shiftbench.views import _ops

#: bootstrap resamples processed together (bounds the memory of the weighted cumulative sums)
_BLOCK_ELEMENTS = 20_000_000


@dataclass(frozen=True)
class MeanAveragePrecision:
    """mAP of one model on one multi-label split.

    ``map``, ``low`` and ``high`` are in percent (mAP and its 95% bootstrap interval over
    examples); ``per_class`` maps each class index with positives to its AP (percent);
    ``classes_without_positives`` lists the classes left out of the mean.
    """

    map: float
    low: float
    high: float
    per_class: dict[int, float]
    classes_without_positives: list[int]
    n_examples: int
    n_no_labels: int
    n_resamples: int
    confidence: float = 0.95
    class_names: list[str] | None = field(default=None, repr=False)

    def name(self, c: int) -> str:
        return self.class_names[c] if self.class_names and c < len(self.class_names) else str(c)

    def summary(self) -> str:
        """One line, e.g. ``mAP 81.3% [79.9, 82.6] over 10 classes, 2,000 examples``."""
        text = (f"mAP {self.map:.1f}% [{self.low:.1f}, {self.high:.1f}] over {len(self.per_class)} classes, "
                f"{self.n_examples:,} examples")
        if self.classes_without_positives:
            left = ", ".join(self.name(c) for c in self.classes_without_positives[:10])
            text += f"; left out (no positives): {left}"
        if self.n_no_labels:
            text += f"; {self.n_no_labels} example(s) with no labels (negatives for every class)"
        return text


def label_indicator(targets: Sequence[Any] | np.ndarray, num_classes: int | None = None) -> np.ndarray:
    """Label sets (a sequence of tuples of class ids, or an ``(n, C)`` 0/1 matrix) as a boolean
    ``(n, C)`` indicator matrix."""
    arr = targets if isinstance(targets, np.ndarray) else None
    if arr is not None and arr.ndim == 2 and num_classes is not None and arr.shape[1] == num_classes \
            and arr.dtype.kind in "biuf" and np.isin(arr, (0, 1)).all():
        return arr.astype(bool)
    rows = [() if t is None else ((int(t),) if np.isscalar(t) else tuple(int(v) for v in t)) for t in targets]
    top = max((max(r) for r in rows if r), default=-1)
    k = num_classes if num_classes is not None else top + 1
    if top >= k:
        raise DataError(f"mean_average_precision: label {top} is outside the {k} classes of the scores")
    if any(v < 0 for r in rows for v in r):
        raise DataError("mean_average_precision: labels must be non-negative class ids")
    y = np.zeros((len(rows), k), dtype=bool)
    for i, r in enumerate(rows):  # one pass over a Python list of label sets
        y[i, list(r)] = True
    return y


def _weighted_ap(score: np.ndarray, y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Average precision of one class under each row of ``weights`` ``(B, n)``: scikit-learn's
    ``average_precision_score(y, score, sample_weight=w)`` for every ``w`` at once (NaN where
    a row gives the class no positive weight)."""
    order = np.argsort(-score, kind="mergesort")
    s, ys = score[order], y[order].astype(np.float64)
    ends = np.r_[np.flatnonzero(np.diff(s)), s.size - 1]  # last example of each tied score
    w = weights[:, order].astype(np.float64)
    tp = np.cumsum(w * ys, axis=1)[:, ends]
    seen = np.cumsum(w, axis=1)[:, ends]
    total = tp[:, -1:]
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.where(seen > 0, tp / np.where(seen > 0, seen, 1), 0.0)
        recall = tp / total
    gain = np.diff(recall, axis=1, prepend=0.0)
    ap = (gain * precision).sum(axis=1)
    return np.where(total[:, 0] > 0, ap, np.nan)


def mean_average_precision(
    scores: Any,
    targets: Sequence[Any] | np.ndarray,
    *,
    class_names: Sequence[str] | None = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> MeanAveragePrecision:
    """Mean average precision over the classes with positives, with a bootstrap interval.

    ``scores`` ``(n, C)``: the model's per-class scores (logits or probabilities); ``targets``:
    ``n`` label sets (tuples of class ids; an empty tuple is an example with no labels) or an
    ``(n, C)`` 0/1 matrix. AP per class is scikit-learn's ``average_precision_score``; mAP is
    their macro mean (Hendrycks et al. 2021, DeepFashion Remixed). The interval is the
    ``confidence`` percentile interval of ``n_resamples`` resamples of the examples (``n_resamples=0``:
    no interval, ``low``/``high`` NaN).

    >>> import numpy as np
    >>> scores = np.array([[0.9, 0.1, 0.3], [0.2, 0.8, 0.7], [0.6, 0.4, 0.1], [0.95, 0.3, 0.2]])
    >>> r = mean_average_precision(scores, [(0,), (1, 2), (0, 1), ()], n_resamples=0)
    >>> round(r.map, 2), r.n_no_labels
    (86.11, 1)
    """
    from sklearn.metrics import average_precision_score  # deferred: loads scikit-learn

    s = _ops.to_numpy(scores)
    if s.ndim != 2:
        raise DataError(f"mean_average_precision: scores must be 2-D (examples, classes), got shape {s.shape}")
    s = s.astype(np.float64)
    if not np.isfinite(s).all():
        raise DataError("mean_average_precision: scores contain NaN or inf; check the model's output")
    y = label_indicator(targets, s.shape[1])
    if len(y) != len(s):
        raise DataError(f"mean_average_precision: {len(s)} rows of scores but {len(y)} label sets")
    if not 0 < confidence < 1:
        raise DataError(f"mean_average_precision: confidence must be in (0, 1), got {confidence}")
    positives = y.any(axis=0)
    have = np.flatnonzero(positives)
    if have.size == 0:
        raise DataError("mean_average_precision: no class has a positive example; check the label sets")
    per_class = {int(c): 100.0 * float(average_precision_score(y[:, c], s[:, c])) for c in have}
    value = float(np.mean(list(per_class.values())))
    low = high = float("nan")
    if n_resamples > 0:
        rng = np.random.default_rng(seed)
        n = len(s)
        block = max(1, min(n_resamples, _BLOCK_ELEMENTS // max(n, 1)))
        boots = []
        for start in range(0, n_resamples, block):
            b = min(block, n_resamples - start)
            draws = rng.integers(0, n, size=(b, n))
            flat = (draws + (np.arange(b) * n)[:, None]).ravel()
            weights = np.bincount(flat, minlength=b * n).reshape(b, n).astype(np.float32)
            aps = np.stack([_weighted_ap(s[:, c], y[:, c], weights) for c in have], axis=1)
            boots.append(np.nanmean(aps, axis=1))
        dist = 100.0 * np.concatenate(boots)
        alpha = (1 - confidence) / 2
        low, high = (float(v) for v in np.nanquantile(dist, [alpha, 1 - alpha]))
    return MeanAveragePrecision(
        map=value, low=low, high=high, per_class=per_class,
        classes_without_positives=[int(c) for c in np.flatnonzero(~positives)],
        n_examples=int(len(s)), n_no_labels=int((~y.any(axis=1)).sum()), n_resamples=int(n_resamples),
        confidence=confidence, class_names=list(class_names) if class_names is not None else None)
