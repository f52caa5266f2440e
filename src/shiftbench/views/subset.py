"""Class-subset views (ImageNet-A / ImageNet-R classes) under both scoring conventions."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from shiftbench.views import _ops
from shiftbench.views._keyed import KeyedView
from shiftbench.views.base import Target


class SubsetView(KeyedView):
    """Accuracy on a subset of the model's classes, with the scoring convention kept beside it.

    ``convention="restricted"`` (the published protocol, Hendrycks et al. 2021 for
    ImageNet-A/R; Taori et al. 2020): softmax and argmax over the subset's logits only;
    a model can only ever predict a subset class. ``convention="argmax-all"`` (stricter):
    argmax over all classes, so a prediction outside the subset is wrong.
    ``confidence`` / ``p_true`` / ``p_sq_sum`` use the subset softmax under ``restricted`` and
    the full softmax under ``argmax-all``. Predictions (``pred``, ``top5``) are always
    reported as full-space class ids, and targets are full-space ids.

    :meth:`keep` keeps the examples with a target in the subset, so the same view serves a
    dataset in the full label space (ImageNet val -> ``val-on-imagenet-a-classes``) and a
    dataset already restricted to it (ImageNet-A itself).

    >>> import numpy as np
    >>> logits = np.array([[5.0, 1.0, 2.0]])          # best class 0 is outside {1, 2}
    >>> SubsetView("s", [1, 2]).apply(logits, [2])["correct"].tolist()
    [True]
    >>> SubsetView("s", [1, 2], convention="argmax-all").apply(logits, [2])["correct"].tolist()
    [False]
    """

    name: str
    convention: str
    class_ids: np.ndarray

    def __init__(self, name: str, class_ids: Any, convention: str = "restricted"):
        ids = _ops.index_array(class_ids, f"view {name!r}: class_ids")
        local = np.full(int(ids[-1]) + 1, _ops.NO_LABEL, dtype=np.int64)
        local[ids] = np.arange(ids.size)
        local.flags.writeable = False
        self._set(name=str(name), convention=_ops.check_convention(convention), class_ids=ids, _local=local)

    def _key(self) -> tuple:
        return (self.name, self.convention, tuple(self.class_ids.tolist()))

    def _summary(self) -> str:
        return f"n_classes={self.class_ids.size}"

    def keep(self, targets: Sequence[Target]) -> np.ndarray:
        """Examples with (any) target in the subset."""
        t = _ops.as_targets(targets, view=self.name)
        return (_ops.lookup(self._local, t) >= 0).any(axis=1)

    def apply(self, logits: np.ndarray, targets: Sequence[Target]) -> dict[str, np.ndarray]:
        x = _ops.as_logits(logits, self.name, min_classes=int(self.class_ids[-1]) + 1)
        t = _ops.as_targets(targets, len(x), self.name)
        if self.convention == "argmax-all":
            return _ops.score_columns(x, t)
        sub = x[:, self.class_ids]
        top_local = _ops.top5(sub)
        p = _ops.softmax(sub)
        top = np.where(top_local >= 0, self.class_ids[np.maximum(top_local, 0)], -1)
        p_true = _ops.gather(p, _ops.lookup(self._local, t[:, 0]))
        return _ops.columns(top[:, 0], top, t, _ops.gather(p, top_local[:, 0]), p_true, _ops.sq_sum(p),
                            _ops.entropy(p))
