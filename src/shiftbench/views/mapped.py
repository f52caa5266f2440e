"""Many-to-one class maps scored on the model's logits (ObjectNet's 125 -> 113 classes)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from shiftbench.views import _ops
from shiftbench.views._keyed import ProjectedView
from shiftbench.views.base import Target


class MappedView(ProjectedView):
    """Predictions in a target label space reached by a many-to-one map from the model's classes.

    ObjectNet (Barbu et al. 2019; the protocol of Taori et al. 2020): 125 ImageNet classes map
    to 113 ObjectNet classes. ``source_to_target`` maps full-space (source) ids to target ids
    ``0 .. num_target - 1``.

    ``convention="restricted"`` (published): restrict the logits to the mapped source ids,
    take the argmax and map it to its target class. Equivalently, each target class scores
    the max of its members' logits; ``top5`` lists the 5 best *distinct* target classes by
    that score (the published ``val-on-objectnet-classes`` top-5).
    ``convention="argmax-all"`` (stricter): argmax over all classes; a prediction that is not a
    mapped class is wrong and reported as ``-1``; ``top5`` is the full-space top-5 mapped to
    target ids (``-1`` for unmapped classes; a target class can appear twice).

    Probabilities (``confidence``, ``p_true``, ``p_sq_sum``): a target class's probability is
    the **sum of its members' softmax probabilities** -- softmax over the restricted logits
    under ``restricted`` (a distribution over the target classes), over all logits under
    ``argmax-all`` (each unmapped class then stays an outcome of its own, so the Brier term
    still sums over a proper distribution). ``confidence`` is the probability of the predicted
    outcome; since the prediction follows the published argmax of *logits*, it need not be the
    largest aggregated probability.

    Targets are target-space ids, or with ``targets_in_source_space=True`` full-space ids that
    the view maps (``val-on-objectnet-classes``: ImageNet val images of the mapped classes;
    :meth:`keep` then keeps the examples whose target is mapped).

    >>> import numpy as np
    >>> view = MappedView("toy", {0: 0, 1: 0, 3: 1}, num_target=2)
    >>> view.apply(np.array([[0.0, 4.0, 9.0, 1.0]]), [0])["pred"].tolist()   # class 2 unmapped
    [0]
    """

    name: str
    convention: str
    num_target: int
    targets_in_source_space: bool
    target_names: tuple[str, ...] | None

    def __init__(self, name: str, source_to_target: Mapping[int, int], num_target: int,
                 convention: str = "restricted", target_names: Sequence[str] | None = None,
                 targets_in_source_space: bool = False):
        proj = _ops.Projection(source_to_target, num_target, f"view {name!r}")
        self._set(name=str(name), convention=_ops.check_convention(convention), num_target=proj.n_target,
                  _n_out=proj.n_target,
                  targets_in_source_space=bool(targets_in_source_space),
                  target_names=_ops.label_names(target_names, proj.n_target, f"view {name!r}"), _proj=proj)

    @property
    def source_to_target(self) -> dict[int, int]:
        return dict(zip(self._proj.src.tolist(), self._proj.tgt.tolist()))

    @property
    def source_ids(self) -> np.ndarray:
        """The mapped full-space ids (grouped by target class)."""
        return self._proj.src

    def _key(self) -> tuple:
        return (self.name, self.convention, self.targets_in_source_space, self.target_names, self._proj.key())

    def _summary(self) -> str:
        return f"n_source={self._proj.src.size}, num_target={self.num_target}"

    def scores(self, logits: np.ndarray) -> np.ndarray:
        """``(B, num_target)`` max-pooled member logits (the restricted argmax's scores)."""
        x = _ops.as_logits(logits, self.name, min_classes=int(self._proj.lut.size))
        return self._proj.reduce(x[:, self._proj.src], np.maximum, -np.inf)

    def apply(self, logits: np.ndarray, targets: Sequence[Target]) -> dict[str, np.ndarray]:
        proj = self._proj
        x = _ops.as_logits(logits, self.name, min_classes=int(proj.lut.size))
        t = self._targets(targets, len(x))
        if self.convention == "restricted":
            grouped = x[:, proj.src]
            top = _ops.top5(proj.reduce(grouped, np.maximum, -np.inf))
            pred = top[:, 0]
            prob = proj.reduce(_ops.softmax(grouped), np.add, 0.0)
            return _ops.columns(pred, top, t, _ops.gather(prob, pred), _ops.gather(prob, t[:, 0]),
                                _ops.sq_sum(prob), _ops.entropy(prob))
        full_top = _ops.top5(x)
        mapped = _ops.lookup(proj.lut, full_top)
        top = np.where(mapped >= 0, mapped, -1)
        pred = top[:, 0]
        p = _ops.softmax(x)
        members = p[:, proj.src]
        prob = proj.reduce(members, np.add, 0.0)
        confidence = np.where(pred >= 0, _ops.gather(prob, pred), _ops.gather(p, full_top[:, 0]))
        p_sq_sum = _ops.sq_sum(prob) + _ops.sq_sum(p) - _ops.sq_sum(members)
        entropy = _ops.entropy(prob) + _ops.entropy(p) - _ops.entropy(members)
        return _ops.columns(pred, top, t, confidence, _ops.gather(prob, t[:, 0]), p_sq_sum, entropy)
