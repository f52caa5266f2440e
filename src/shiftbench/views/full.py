"""Top-1 / top-5 over the model's whole label space."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shiftbench.views import _ops
from shiftbench.views.base import Target, View


@dataclass(frozen=True)
class FullView(View):
    """Argmax and top-5 over every class, label space unchanged (plain ImageNet accuracy).

    ``confidence``, ``p_true`` and ``p_sq_sum`` come from the softmax over all ``C`` logits.
    Targets may be ints or tuples of ints (multi-label: correct if the prediction is any of
    them; ``p_true`` is the probability of the first).

    >>> import numpy as np
    >>> cols = FullView().apply(np.array([[0.0, 2.0, 1.0]]), [1])
    >>> bool(cols["correct"][0]), cols["top5"][0].tolist()
    (True, [1, 2, 0, -1, -1])
    """

    name: str = "full"
    convention: str = "full"

    def apply(self, logits: np.ndarray, targets: Sequence[Target]) -> dict[str, np.ndarray]:
        x = _ops.as_logits(logits, self.name)
        return _ops.score_columns(x, _ops.as_targets(targets, len(x), self.name))
