"""Vectorised building blocks shared by the views (private).

Validation happens here, at the boundary (:func:`as_logits`, :func:`as_targets`); the views
trust what these return. Nothing here loops over examples except target parsing of a Python
list of tuples, which is one pass of list comprehension per batch.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from shiftbench.errors import ConfigError, DataError, did_you_mean

#: padding of a multi-label target matrix; never equal to a prediction (predictions are
#: ``>= 0``, or ``-1`` for "outside the view's label space" / top-5 padding)
NO_LABEL = -2

CONVENTIONS = ("restricted", "argmax-all")


def to_numpy(x: Any) -> np.ndarray:
    """``np.asarray`` that also takes torch tensors (on any device, with grad, bfloat16)."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor, without importing torch
        x = x.detach().cpu()
        try:
            return x.numpy()
        except TypeError:  # bfloat16 and friends have no numpy dtype
            return x.float().numpy()
    return np.asarray(x)


def as_logits(logits: Any, view: str, min_classes: int = 0) -> np.ndarray:
    """Validate ``(B, C)`` logits and return them as float32 (float64 stays float64)."""
    x = to_numpy(logits)
    if x.ndim != 2:
        raise DataError(f"view {view!r}: logits must be 2-D (batch, classes), got shape {x.shape}")
    if not np.issubdtype(x.dtype, np.floating):
        raise DataError(f"view {view!r}: logits must be floating point, got dtype {x.dtype}")
    if x.dtype != np.float64:
        x = x.astype(np.float32, copy=False)
    if x.shape[1] < min_classes:
        raise DataError(f"view {view!r}: needs logits over at least {min_classes} classes, got "
                        f"{x.shape[1]}; pass the model's full-label-space logits")
    if not np.isfinite(x).all():
        rows = np.flatnonzero(~np.isfinite(x).all(axis=1))
        raise DataError(f"view {view!r}: logits contain NaN or inf in {rows.size} row(s), first row "
                        f"{rows[0]}; check the model's output (float16 overflow?)")
    return x


def as_targets(targets: Any, n: int | None = None, view: str = "") -> np.ndarray:
    """Targets as an int64 matrix ``(B, L)`` padded with :data:`NO_LABEL`.

    Accepts a sequence of ints, a sequence of tuples/lists of ints (multi-label: a prediction
    is correct if it is any of them), a 1-D int array, a 2-D int array padded with negative
    values, or a torch tensor.
    """
    if isinstance(targets, np.ndarray) or hasattr(targets, "detach"):
        t = to_numpy(targets)
    else:
        seq = list(targets)
        if all(isinstance(v, (int, np.integer)) for v in seq):
            t = np.asarray(seq, dtype=np.int64).reshape(len(seq))
        else:
            rows = [(int(v),) if isinstance(v, (int, np.integer)) else tuple(int(u) for u in v) for v in seq]
            width = max((len(r) for r in rows), default=1) or 1
            t = np.full((len(rows), width), NO_LABEL, dtype=np.int64)
            for i, r in enumerate(rows):  # one pass over a Python list that already exists
                t[i, :len(r)] = r
            if (t[t != NO_LABEL] < 0).any():
                raise DataError(f"view {view!r}: targets must be non-negative class ids")
    if t.dtype.kind not in "iu":
        if t.size and not np.array_equal(t, np.round(t)):
            raise DataError(f"view {view!r}: targets must be integer class ids, got dtype {t.dtype}")
        t = t.astype(np.int64)
    t = t.astype(np.int64, copy=False)
    if t.ndim == 1:
        if (t < 0).any():
            raise DataError(f"view {view!r}: targets must be non-negative class ids "
                            f"(got {int(t.min())})")
        t = t[:, None]
    elif t.ndim == 2:
        t = np.where(t < 0, NO_LABEL, t)
    else:
        raise DataError(f"view {view!r}: targets must be 1-D (or 2-D padded multi-label), got shape {t.shape}")
    if n is not None and len(t) != n:
        raise DataError(f"view {view!r}: {n} rows of logits but {len(t)} targets")
    return t


def check_convention(convention: str) -> str:
    """``convention`` if it is a class-subset convention, else a ConfigError (the one check, for
    the views and for :class:`~shiftbench.engine.EvalRequest`)."""
    if convention not in CONVENTIONS:
        raise ConfigError(did_you_mean("convention", str(convention), CONVENTIONS,
                                       f"use one of {', '.join(map(repr, CONVENTIONS))}"))
    return convention


def index_array(ids: Any, what: str) -> np.ndarray:
    """Sorted, unique, non-negative int64 ids (read-only)."""
    a = np.unique(np.asarray(to_numpy(ids), dtype=np.int64).ravel())
    if a.size == 0:
        raise ConfigError(f"{what} is empty")
    if a[0] < 0:
        raise ConfigError(f"{what} must be non-negative class ids, got {int(a[0])}")
    a.flags.writeable = False
    return a


def lookup(lut: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``lut[t]`` where ``t`` is a valid index of ``lut``, else :data:`NO_LABEL` (vectorised)."""
    ok = (t >= 0) & (t < lut.size)
    return np.where(ok, lut[np.where(ok, t, 0)], NO_LABEL)


def top5(scores: np.ndarray) -> np.ndarray:
    """Indices of the 5 highest scores per row, best first (ties: lower index first), padded
    with ``-1`` when there are fewer than 5 columns. ``argpartition`` keeps it O(C)."""
    b, c = scores.shape
    k = min(5, c)
    if c > k:
        part = np.argpartition(scores, c - k, axis=1)[:, c - k:]
    else:
        part = np.broadcast_to(np.arange(c), (b, c))
    vals = np.take_along_axis(scores, part, axis=1)
    order = np.lexsort((part, -vals), axis=1)
    top = np.take_along_axis(part, order, axis=1)
    if k < 5:
        top = np.concatenate([top, np.full((b, 5 - k), -1, dtype=top.dtype)], axis=1)
    return top


def softmax(scores: np.ndarray) -> np.ndarray:
    """Row softmax by log-sum-exp (``-inf`` scores get probability 0)."""
    m = scores.max(axis=1, keepdims=True)
    e = np.exp(scores - m)
    e /= e.sum(axis=1, keepdims=True)
    return e


def sq_sum(p: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", p, p)


def entropy(p: np.ndarray) -> np.ndarray:
    """Row entropy ``-sum p log p`` in nats (``0 log 0 = 0``), computed in float64."""
    q = np.asarray(p, dtype=np.float64)
    return -np.einsum("ij,ij->i", q, np.log(np.where(q > 0, q, 1.0)))


def gather(p: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``p[i, idx[i]]``, and 0 where ``idx[i]`` is not a column of ``p`` (vectorised)."""
    ok = (idx >= 0) & (idx < p.shape[1])
    got = np.take_along_axis(p, np.where(ok, idx, 0)[:, None], axis=1)[:, 0]
    return np.where(ok, got, 0).astype(np.float32)


def columns(pred: np.ndarray, top: np.ndarray, targets: np.ndarray, confidence: np.ndarray,
            p_true: np.ndarray, p_sq_sum: np.ndarray, entropy: np.ndarray) -> dict[str, np.ndarray]:
    """Assemble the per-example columns of the view contract (``targets`` in the view's space)."""
    return {
        "pred": pred.astype(np.int32),
        "top5": top.astype(np.int32),
        "correct": (pred[:, None] == targets).any(axis=1),
        "correct5": (top[:, :, None] == targets[:, None, :]).any(axis=(1, 2)),
        "confidence": confidence.astype(np.float32),
        "p_true": p_true.astype(np.float32),
        "p_sq_sum": p_sq_sum.astype(np.float32),
        "entropy": entropy.astype(np.float32),
    }


def score_columns(scores: np.ndarray, targets: np.ndarray) -> dict[str, np.ndarray]:
    """The columns of a classifier that predicts ``argmax scores``: ``top5`` by score, probabilities
    from ``softmax(scores)`` (``targets`` in the scores' label space)."""
    top = top5(scores)
    pred = top[:, 0]
    p = softmax(scores)
    return columns(pred, top, targets, gather(p, pred), gather(p, targets[:, 0]), sq_sum(p), entropy(p))


class Projection:
    """A many-to-one map from source ids (e.g. ImageNet classes) to ``n_target`` target classes.

    ``src`` lists the mapped source ids grouped by target (target ascending, then source id),
    so ``np.ufunc.reduceat(scores[:, src], starts, axis=1)`` aggregates each target's members
    in one vectorised call; ``present`` are the targets that have members.
    """

    def __init__(self, source_to_target: Mapping[int, int], n_target: int, what: str):
        if not isinstance(source_to_target, Mapping):
            raise ConfigError(f"{what}: the class map must be a dict source id -> target id, "
                              f"got {type(source_to_target).__name__}")
        if not source_to_target:
            raise ConfigError(f"{what}: the class map is empty")
        if int(n_target) < 1:
            raise ConfigError(f"{what}: the number of target classes must be positive, got {n_target}")
        pairs = np.array([(int(s), int(t)) for s, t in source_to_target.items()], dtype=np.int64)
        src, tgt = pairs[:, 0], pairs[:, 1]
        if src.min() < 0:
            raise ConfigError(f"{what}: source ids must be non-negative, got {int(src.min())}")
        if tgt.min() < 0 or tgt.max() >= n_target:
            bad = int(tgt.min()) if tgt.min() < 0 else int(tgt.max())
            raise ConfigError(f"{what}: target id {bad} outside 0..{int(n_target) - 1}; "
                              f"check the map or the number of target classes")
        order = np.lexsort((src, tgt))
        self.src, self.tgt = src[order], tgt[order]
        self.n_target = int(n_target)
        self.present, self.starts, self.counts = np.unique(self.tgt, return_index=True, return_counts=True)
        self.complete = self.present.size == self.n_target
        self.lut = np.full(int(src.max()) + 1, NO_LABEL, dtype=np.int64)
        self.lut[self.src] = self.tgt
        for a in (self.src, self.tgt, self.present, self.starts, self.counts, self.lut):
            a.flags.writeable = False

    def reduce(self, grouped: np.ndarray, ufunc: np.ufunc, empty: float) -> np.ndarray:
        """``(B, n_src)`` scores in ``src`` order -> ``(B, n_target)`` by ``ufunc`` over each
        target's members; targets without members get ``empty``."""
        red = ufunc.reduceat(grouped, self.starts, axis=1)
        if self.complete:
            return red
        out = np.full((grouped.shape[0], self.n_target), empty, dtype=grouped.dtype)
        out[:, self.present] = red
        return out

    def key(self) -> tuple:
        return (self.n_target, tuple(self.src.tolist()), tuple(self.tgt.tolist()))


def label_names(names: Sequence[str] | None, n: int, what: str) -> tuple[str, ...] | None:
    if names is None:
        return None
    names = tuple(str(s) for s in names)
    if len(names) != n:
        raise ConfigError(f"{what}: {len(names)} target names for {n} target classes")
    return names

