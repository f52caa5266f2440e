"""Worst-group accuracy: accuracy per group of examples and the worst of them (the WILDS convention).

Where examples carry metadata -- a manifest's extra columns (``manifest:<file>?groups=colA,colB``),
attribute-carved splits, a class label -- the average accuracy can hide a group the model fails
on. For groups ``g`` with ``n_g`` examples,

    acc_g = (100 / n_g) * sum_{i in g} 1[correct_i]               (percent)
    worst-group accuracy = min_{g : n_g >= 1} acc_g

the convention of WILDS (Koh et al. 2021, *WILDS: A Benchmark of in-the-Wild Distribution
Shifts*, ICML; p-lambda/wilds ``wilds/common/metrics/metric.py``, ``Metric._compute_group_wise``:
``self.worst(group_metrics[group_counts > 0])``) and of group DRO (Sagawa et al. 2020, *Distributionally Robust Neural
Networks*). An
**empty group** (a declared group with no scored example: a class or attribute combination absent
from this test set, or one whose every image failed to decode) is reported with count 0 and
accuracy ``NaN`` and never counted as the worst (WILDS reports such a group's metric as 0 but
also leaves it out of the worst). **Ties** go to the first group in sorted order of the names.

>>> import numpy as np
>>> r = group_accuracy([True, True, False, True, False, False], ["a", "a", "a", "b", "c", "c"])
>>> r.worst, r.worst_group, r.worst_n
(0.0, 'c', 2)
>>> r.accuracy["a"], r.counts
(66.66666666666667, {'a': 3, 'b': 1, 'c': 2})
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shiftbench.errors import DataError

#: the result keys :meth:`GroupAccuracy.to_dict` stores beside a setting's average accuracy
GROUP_KEYS = ("worst_group_accuracy", "worst_group", "worst_group_n", "group_accuracy", "group_counts", "n_groups")


@dataclass(frozen=True)
class GroupAccuracy:
    """Accuracy per group (percent; ``NaN`` for an empty group) and counts, in sorted group
    order; the worst non-empty group's accuracy, name and count (``NaN``, ``None``, 0 when every
    group is empty); ``average`` is the accuracy over all examples and ``n_groups`` counts the
    non-empty groups."""

    accuracy: dict[str, float]
    counts: dict[str, int]
    worst: float
    worst_group: str | None
    worst_n: int
    average: float

    @property
    def n_groups(self) -> int:
        """Groups with at least one example (those the worst is taken over)."""
        return sum(1 for n in self.counts.values() if n > 0)

    def to_dict(self) -> dict[str, Any]:
        """The keys stored in a result beside ``accuracy`` (:data:`GROUP_KEYS`)."""
        return {"worst_group_accuracy": self.worst, "worst_group": self.worst_group, "worst_group_n": self.worst_n,
                "group_accuracy": dict(self.accuracy), "group_counts": dict(self.counts), "n_groups": self.n_groups}


def group_accuracy(correct: Any, groups: Sequence[Any], declared: Iterable[Any] | None = None) -> GroupAccuracy:
    """Per-group accuracy and the worst group (module docstring: WILDS convention).

    ``correct`` is the per-example top-1 column (booleans or 0/1), ``groups`` the group of each
    example (any values; names are their ``str``). ``declared`` optionally names groups that
    should be reported even with no example (they appear with count 0 and accuracy ``NaN`` and
    are not candidates for the worst). Mismatched lengths or a non-boolean ``correct`` is a
    :class:`DataError`.
    """
    c = np.asarray(correct)
    if c.ndim != 1 or (c.size and not (c.dtype == bool or np.isin(c, (0, 1)).all())):
        raise DataError(f"group_accuracy: correct must be a 1-d array of booleans or 0/1, got shape {c.shape} "
                        f"dtype {c.dtype}")
    names = np.asarray([str(g) for g in groups], dtype=object)
    if len(names) != len(c):
        raise DataError(f"group_accuracy: {len(c)} correct values but {len(names)} groups; give one group per example")
    c = c.astype(bool)
    every = sorted(set(names.tolist()) | {str(g) for g in (declared or ())})
    index = {g: i for i, g in enumerate(every)}
    codes = np.fromiter((index[g] for g in names), dtype=np.int64, count=len(names))
    n = np.bincount(codes, minlength=len(every))
    right = np.bincount(codes, weights=c.astype(float), minlength=len(every))
    acc = np.full(len(every), np.nan)
    acc[n > 0] = 100.0 * right[n > 0] / n[n > 0]
    if (n > 0).any():
        worst_i = int(np.flatnonzero(n > 0)[np.argmin(acc[n > 0])])  # argmin: the first of ties, in sorted order
        worst, worst_group, worst_n = float(acc[worst_i]), every[worst_i], int(n[worst_i])
    else:
        worst, worst_group, worst_n = math.nan, None, 0
    return GroupAccuracy(accuracy={g: float(a) for g, a in zip(every, acc)}, counts={g: int(k) for g, k in zip(every, n)},
                         worst=worst, worst_group=worst_group, worst_n=worst_n,
                         average=float(100.0 * c.mean()) if len(c) else math.nan)
