"""Clopper-Pearson (exact binomial) intervals for accuracies.

For ``k`` correct out of ``n`` at confidence ``1 - alpha`` (Clopper & Pearson 1934):
``lower = Beta(alpha/2; k, n - k + 1)`` (0 when k = 0) and
``upper = Beta(1 - alpha/2; k + 1, n - k)`` (1 when k = n). The published testbed plots use
99.5% intervals (Taori et al. 2020, Figure 1); shiftbench defaults to 95%.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from shiftbench.errors import ConfigError


def check_confidence(confidence: float) -> float:
    """``confidence`` if it lies in (0, 1), else a ConfigError (every interval and band checks it here)."""
    if not 0.0 < confidence < 1.0:
        raise ConfigError(f"confidence={confidence!r} must be in (0, 1), e.g. 0.95 or 0.995")
    return confidence


def clopper_pearson(k: ArrayLike, n: ArrayLike, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Exact binomial interval for ``k`` successes of ``n``, as fractions in [0, 1]."""
    alpha = 1.0 - check_confidence(confidence)
    k = np.asarray(k, dtype=float)
    n = np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        lower = np.where(k > 0, stats.beta.ppf(alpha / 2, k, n - k + 1), 0.0)
        upper = np.where(k < n, stats.beta.ppf(1 - alpha / 2, k + 1, n - k), 1.0)
    bad = ~(np.isfinite(n) & (n > 0))
    return np.where(bad, np.nan, lower), np.where(bad, np.nan, upper)


def accuracy_interval(acc: ArrayLike, n: ArrayLike, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Clopper-Pearson interval in percent for an accuracy in percent measured on ``n`` examples.

    ``k = round(acc * n / 100)`` recovers the count of correct examples; ``NaN`` where ``n`` is
    unknown.
    """
    acc = np.asarray(acc, dtype=float)
    n = np.asarray(n, dtype=float)
    k = np.round(acc * np.where(np.isfinite(n), n, 0.0) / 100.0)
    lo, hi = clopper_pearson(k, n, confidence)
    return 100.0 * lo, 100.0 * hi
