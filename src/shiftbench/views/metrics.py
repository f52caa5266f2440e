"""Summaries of a view's per-example columns: top-1 / top-5 accuracy and calibration."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from shiftbench.errors import DataError
from shiftbench.views import _ops


def _column(x: Any, key: str) -> np.ndarray:
    a = x[key] if isinstance(x, Mapping) else x
    a = np.asarray(_ops.to_numpy(a)).ravel()
    if a.size == 0:
        raise DataError(f"no examples to score ({key!r} is empty); check the view's keep() mask")
    return a


def top1(correct: Any) -> float:
    """Top-1 accuracy in percent, ``100 * mean(correct)``; takes the ``correct`` column or a
    view's column dict.

    >>> top1([True, False, True, True])
    75.0
    """
    return float(100.0 * _column(correct, "correct").astype(bool).mean())


def top5(correct5: Any) -> float:
    """Top-5 accuracy in percent from the ``correct5`` column (or a view's column dict)."""
    return float(100.0 * _column(correct5, "correct5").astype(bool).mean())


def calibration(confidence: Any, correct: Any, p_true: Any, p_sq_sum: Any, n_bins: int = 15) -> dict[str, float]:
    """Expected calibration error, negative log-likelihood and Brier score.

    * ECE (Guo et al. 2017, "On calibration of modern neural networks", eq. 3), in percent:
      ``100 * sum_b |B_b|/n * |acc(B_b) - conf(B_b)|`` over ``n_bins`` equal-width confidence
      bins ``((b-1)/M, b/M]`` (confidence 0 falls in the first bin).
    * NLL: ``mean(-log p_true)``, with ``p_true`` clipped at ``1e-12``.
    * Brier (Brier 1950, multi-class form): ``mean_i sum_k (p_ik - y_ik)^2``, computed as
      ``p_sq_sum - 2 p_true + 1`` for a one-hot ``y``.

    Inputs are a view's ``confidence``, ``correct``, ``p_true`` and ``p_sq_sum`` columns.
    Returns ``{"ece": ..., "nll": ..., "brier": ..., "n": ...}``.

    >>> calibration([0.9, 0.9], [True, False], [0.9, 0.05], [0.82, 0.82], n_bins=15)["ece"]
    40.0
    """
    conf = _column(confidence, "confidence").astype(np.float64)
    acc = _column(correct, "correct").astype(bool)
    pt = _column(p_true, "p_true").astype(np.float64)
    sq = _column(p_sq_sum, "p_sq_sum").astype(np.float64)
    n = conf.size
    if not (acc.size == pt.size == sq.size == n):
        raise DataError(f"calibration: columns differ in length ({n}, {acc.size}, {pt.size}, {sq.size})")
    if n_bins < 1:
        raise DataError(f"calibration needs n_bins >= 1, got {n_bins}")
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    b = np.searchsorted(edges[1:-1], conf, side="left")  # bin b holds (edges[b], edges[b+1]]
    gap = np.bincount(b, weights=acc - conf, minlength=n_bins)
    ece = 100.0 * np.abs(gap).sum() / n
    nll = float(-np.log(np.clip(pt, 1e-12, None)).mean())
    brier = float((sq - 2.0 * pt + 1.0).mean())
    return {"ece": float(ece), "nll": nll, "brier": brier, "n": int(n)}
