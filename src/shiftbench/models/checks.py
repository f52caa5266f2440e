"""Validation of a model's output at the boundary (the scikit-learn ``check_array`` way): the
runner calls :func:`check_logits` on every batch, and trusts the logits after it."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from shiftbench.errors import ModelError


def _as_numpy(logits: Any) -> np.ndarray:
    if hasattr(logits, "detach"):  # torch.Tensor, without importing torch here
        logits = logits.detach().float().cpu().numpy()
    return np.asarray(logits)


def check_logits(logits: Any, model_name: str, expected_classes: int, *,
                 ids: Sequence[str] | None = None) -> None:
    """Raise :class:`ModelError` naming ``model_name`` unless ``logits`` is a finite
    ``(B, expected_classes)`` array.

    ``logits`` is a torch tensor or anything numpy accepts. ``expected_classes`` is the class
    count of the label space the dataset is scored in (1000 for the ImageNet family, whose
    subset views restrict the 1000 logits themselves). ``ids`` (the batch's example ids, optional)
    lets the NaN/inf message name the first bad example.

    >>> import numpy as np
    >>> check_logits(np.zeros((2, 10)), "tiny", 10)
    >>> check_logits(np.zeros((2, 1000)), "tiny", 10)
    Traceback (most recent call last):
    ...
    shiftbench.errors.ModelError: model 'tiny' outputs 1000 logits per example but the dataset has 10 classes ...
    """
    arr = _as_numpy(logits)
    if arr.ndim != 2:
        raise ModelError(f"model {model_name!r} returned logits of shape {tuple(arr.shape)}; expected "
                         f"(batch, {expected_classes}) (does its forward return a tuple or features?)")
    width = arr.shape[1]
    if width != expected_classes:
        raise ModelError(
            f"model {model_name!r} outputs {width} logits per example but the dataset has "
            f"{expected_classes} classes (label spaces differ: load the model with "
            f"num_classes={expected_classes} / a matching checkpoint, or pick a dataset in its label space)")
    if not np.issubdtype(arr.dtype, np.floating):
        return
    bad = ~np.isfinite(arr).all(axis=1)
    n_bad = int(bad.sum())
    if n_bad:
        first = int(np.flatnonzero(bad)[0])
        n_nan = int(np.isnan(arr).any(axis=1).sum())
        where = f"example {ids[first]!r}" if ids is not None and first < len(ids) else f"batch index {first}"
        raise ModelError(
            f"model {model_name!r} produced non-finite logits (NaN/inf) for {n_bad} of {len(arr)} examples "
            f"({n_nan} with NaN; first at {where}); check its weights, its normalisation and the input dtype")
