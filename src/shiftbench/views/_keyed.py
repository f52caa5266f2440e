"""Base classes of the views that carry class maps (private): value semantics, and the shared
target handling and scoring of the views into another label space."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from shiftbench.views import _ops
from shiftbench.views.base import Target, View


class KeyedView(View):
    """A frozen :class:`View` whose identity is ``_key()`` (name, convention and its class map).

    The parametrised views set their attributes once in ``__init__`` (through
    ``object.__setattr__``, as frozen dataclasses do) and never change them afterwards, so
    two views built from the same map compare and hash equal and can key a settings table.
    """

    def _set(self, **attrs: Any) -> None:
        for k, v in attrs.items():
            object.__setattr__(self, k, v)

    def _key(self) -> tuple:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._key() == other._key()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, convention={self.convention!r}, {self._summary()})"

    def _summary(self) -> str:
        return ""


class ProjectedView(KeyedView):
    """A view into a target label space of ``_n_out`` classes reached from the model's classes
    (:class:`~shiftbench.views.classmap.ClassMapView`, :class:`~shiftbench.views.superclass.SuperclassView`,
    :class:`~shiftbench.views.mapped.MappedView`): the one home of their target handling and apply.

    Targets are target-space ids (ids outside it count as no label), or with
    ``targets_in_source_space`` model-space ids mapped through ``_proj.lut``. A subclass defines
    :meth:`scores` (``(B, _n_out)`` scores pooled from the logits); :meth:`apply` predicts their
    argmax with probabilities ``softmax(scores)`` (MappedView overrides it: its published
    probabilities sum member probabilities).
    """

    targets_in_source_space: bool = False

    def _targets(self, targets: Sequence[Target], n: int | None = None) -> np.ndarray:
        t = _ops.as_targets(targets, n, self.name)
        if self.targets_in_source_space:
            return _ops.lookup(self._proj.lut, t)  # type: ignore[attr-defined]
        return np.where(t < self._n_out, t, _ops.NO_LABEL)  # type: ignore[attr-defined]

    def keep(self, targets: Sequence[Target]) -> np.ndarray:
        """Examples with (any) target in the target label space (after mapping, if asked)."""
        return (self._targets(targets) >= 0).any(axis=1)

    def scores(self, logits: Any) -> np.ndarray:
        """``(B, _n_out)`` target-space scores pooled from the model's ``logits``."""
        raise NotImplementedError

    def apply(self, logits: Any, targets: Sequence[Target]) -> dict[str, np.ndarray]:
        s = self.scores(logits)
        return _ops.score_columns(s, self._targets(targets, len(s)))
