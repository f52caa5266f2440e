"""Axis scalings for accuracy trends: ``linear``, ``probit`` and ``logit``.

Taori et al. (2020, §3) and Miller et al. (2021, "Accuracy on the Line") fit linear trends
between in-distribution and shifted accuracy after a probit or logit transform of both axes;
in those coordinates the trend across standard models is close to linear.

Accuracies enter in **percent**. 0% and 100% have no finite logit/probit, so both are clipped
before the transform: to half an example, ``[50/n, 100 - 50/n]`` percent, when the number of
test examples ``n`` is known (the usual continuity correction of an empirical logit), and to
``[0.01, 99.99]`` percent otherwise. The clip only moves values that are within half an
example of 0 or 100, so measured accuracies are never changed in any other case, and the
transform stays finite, strictly monotone and symmetric (``t(100 - a) = -t(a)`` for logit and
probit). ``linear`` is the identity on fractions (``a / 100``) and never clips.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from shiftbench.errors import ConfigError, did_you_mean

SCALES = ("logit", "probit", "linear")
#: Clip in percent used when the number of examples is unknown.
DEFAULT_CLIP = 0.01


def check_scale(scale: str) -> str:
    """Return ``scale`` if it is one of :data:`SCALES`, else raise ConfigError."""
    if scale not in SCALES:
        raise ConfigError(did_you_mean("scale", str(scale), SCALES, "use logit, probit or linear"))
    return scale


def clip_bounds(n: ArrayLike | None = None) -> np.ndarray:
    """Lower clip in percent: half an example (``50 / n``) where ``n`` is known, else 0.01."""
    if n is None:
        return np.asarray(DEFAULT_CLIP)
    n = np.asarray(n, dtype=float)
    return np.where(np.isfinite(n) & (n > 0), 50.0 / np.where(n > 0, n, 1.0), DEFAULT_CLIP)


def transform(acc: ArrayLike, scale: str = "logit", n: ArrayLike | None = None) -> np.ndarray:
    """Map accuracies in percent to the ``scale`` coordinate (see module docstring)."""
    check_scale(scale)
    a = np.asarray(acc, dtype=float)
    if scale == "linear":
        return a / 100.0
    lo = clip_bounds(n)
    p = np.clip(a, lo, 100.0 - lo) / 100.0
    return special.logit(p) if scale == "logit" else special.ndtri(p)


def inverse(z: ArrayLike, scale: str = "logit") -> np.ndarray:
    """Map ``scale`` coordinates back to accuracy in percent."""
    check_scale(scale)
    z = np.asarray(z, dtype=float)
    if scale == "linear":
        return z * 100.0
    return 100.0 * (special.expit(z) if scale == "logit" else special.ndtr(z))
