"""Views: pure functions from one forward pass's logits to per-example predictions.

A view turns a batch of logits ``(B, C)`` over the model's label space (ImageNet-1k for the
ImageNet family) and the examples' targets into per-example columns, all numpy arrays of
length ``B``:

``pred``        int32   top-1 prediction in the view's label space
``top5``        int32   ``(B, 5)`` top-5 predictions (``-1`` where the space has < 5 classes)
``correct``     bool    top-1 correct (for a tuple target: prediction in the tuple)
``correct5``    bool    target among the top-5
``confidence``  float32 softmax probability of ``pred`` (over the view's classes)
``p_true``      float32 softmax probability of the (first) true class
``p_sq_sum``    float32 sum of squared softmax probabilities (for the Brier score)
``entropy``     float32 entropy of the softmax, in nats (for label-free accuracy estimates: ATC)

and :meth:`View.keep` says which examples of the dataset belong to the setting (e.g.
``val-on-imagenet-a-classes`` keeps the validation images of the 200 ImageNet-A classes).
Everything downstream (accuracy, top-5, pm-k, calibration) is computed from these columns,
so a new view over stored logits never needs the model again.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

COLUMNS = ("pred", "top5", "correct", "correct5", "confidence", "p_true", "p_sq_sum", "entropy")

Target = int | tuple[int, ...]


@dataclass(frozen=True)
class View:
    """Base view: the full label space, top-1/top-5 by argmax over every class."""

    name: str = "full"
    #: how a class subset is scored: "full" (no subset), "restricted" (logits restricted to the
    #: subset: the published protocol) or "argmax-all" (argmax over all classes, stricter)
    convention: str = "full"

    def keep(self, targets: Sequence[Target]) -> np.ndarray:
        """Boolean mask of the examples that belong to this view's setting."""
        return np.ones(len(targets), dtype=bool)

    def apply(self, logits: np.ndarray, targets: Sequence[Target]) -> dict[str, np.ndarray]:
        """Per-example columns (see module docstring) for ``logits`` ``(B, C)``."""
        raise NotImplementedError
