"""Superclass projection for the video robustness sets (ImageNet-Vid-Robust, YTBB-Robust)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from shiftbench.errors import ConfigError
from shiftbench.views import _ops
from shiftbench.views._keyed import ProjectedView

MERGES = ("max", "mean", "sum")


class SuperclassView(ProjectedView):
    """Project the model's logits onto superclasses: score = max over member logits.

    The protocol of Shankar et al. 2021 ("Do image classifiers generalize across time?") as
    run by Taori et al. 2020: ImageNet classes are grouped into 30 (ImageNet-Vid-Robust) or 24
    (YTBB-Robust) superclasses, a superclass's score is the **max** of its members' logits
    (``merge="mean"`` / ``"sum"`` are offered for models whose outputs are not logits; the
    published testbed used ``sum`` for randomized-smoothing models) and the prediction is the
    argmax superclass. A superclass without members scores ``-inf`` and is never predicted.
    Targets are superclass ids, typically tuples (multi-label frames: correct if the
    prediction is any of them), or full-space ids with ``targets_in_source_space=True``
    (``val-on-vid-robust-classes``).

    Probabilities: the softmax over the superclass *scores* (not a sum of member
    probabilities: the max-logit projection defines the classifier being evaluated, so its
    scores are the logits being calibrated). ``p_true`` is the probability of the first label.

    ``convention`` is ``"superclass-max"`` (or ``-mean`` / ``-sum``).

    >>> import numpy as np
    >>> view = SuperclassView("toy", {0: 0, 1: 0, 2: 0, 3: 1}, num_super=2)
    >>> view.apply(np.array([[1.0, 1.0, 1.0, 2.0]]), [(1,)])["pred"].tolist()  # max, not sum
    [1]
    """

    name: str
    convention: str
    num_super: int
    merge: str
    targets_in_source_space: bool
    target_names: tuple[str, ...] | None

    def __init__(self, name: str, source_to_super: Mapping[int, int], num_super: int,
                 targets_in_source_space: bool = False, merge: str = "max",
                 target_names: Sequence[str] | None = None):
        if merge not in MERGES:
            raise ConfigError(f"unknown merge {merge!r} for view {name!r}; use one of {', '.join(map(repr, MERGES))}")
        proj = _ops.Projection(source_to_super, num_super, f"view {name!r}")
        self._set(name=str(name), convention=f"superclass-{merge}", num_super=proj.n_target, _n_out=proj.n_target,
                  merge=merge,
                  targets_in_source_space=bool(targets_in_source_space),
                  target_names=_ops.label_names(target_names, proj.n_target, f"view {name!r}"), _proj=proj)

    @property
    def source_to_super(self) -> dict[int, int]:
        return dict(zip(self._proj.src.tolist(), self._proj.tgt.tolist()))

    def _key(self) -> tuple:
        return (self.name, self.convention, self.targets_in_source_space, self.target_names, self._proj.key())

    def _summary(self) -> str:
        return f"n_source={self._proj.src.size}, num_super={self.num_super}"

    def scores(self, logits: np.ndarray) -> np.ndarray:
        """``(B, num_super)`` superclass scores (``-inf`` for superclasses without members)."""
        proj = self._proj
        x = _ops.as_logits(logits, self.name, min_classes=int(proj.lut.size))
        grouped = x[:, proj.src]
        if self.merge == "max":
            return proj.reduce(grouped, np.maximum, -np.inf)
        s = proj.reduce(grouped, np.add, -np.inf)
        if self.merge == "mean":
            s[:, proj.present] /= proj.counts.astype(s.dtype)
        return s
