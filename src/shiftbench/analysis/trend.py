"""Linear trends between in-distribution and shifted accuracy, and their bootstrap bands.

The published protocol (Taori et al. 2020, §3; Miller et al. 2021) fits, by least squares on
the *standard* models only,

    t(acc_y) = slope * t(acc_x) + intercept,      t = logit, probit or linear,

and draws a bootstrap confidence band around it. For adversarially filtered test sets such as
ImageNet-A, where the filtering model and everything below it scores ~0, a continuous
piecewise-linear (hinge) trend around a pivot accuracy ``p`` fits better (Taori et al. 2020,
Appendix):

    t(acc_y) = b + a_below * min(t(acc_x) - t(p), 0) + a_above * max(t(acc_x) - t(p), 0).

Both are ordinary least squares on a small basis; :func:`bootstrap_band` resamples models with
replacement and refits all resamples at once (batched normal equations), so 100,000 resamples
take about a second.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from shiftbench.analysis.intervals import check_confidence
from shiftbench.analysis.scaling import check_scale, inverse, transform
from shiftbench.errors import ConfigError, DataError
from shiftbench.testbed import Testbed

MIN_MODELS = 3
DEFAULT_FIT_ON = ("STANDARD",)


def _linear_basis(xs: np.ndarray) -> np.ndarray:
    return np.stack([np.ones_like(xs), xs], axis=-1)


def _hinge_basis(xs: np.ndarray, knot: float) -> np.ndarray:
    d = xs - knot
    return np.stack([np.ones_like(xs), np.minimum(d, 0.0), np.maximum(d, 0.0)], axis=-1)


@dataclass(frozen=True)
class TrendFit:
    """A least-squares trend in ``scale`` coordinates: ``t(y) = slope * t(x) + intercept``.

    ``slope_se`` and ``intercept_se`` are the usual OLS standard errors
    (``s^2 (X'X)^{-1}``, ``s^2 = SSR / (n - 2)``); ``r2`` is the coefficient of determination in
    the scaled coordinates. ``n_skipped`` counts models selected for the fit that lacked one of
    the two accuracies. Call :meth:`predict` for the trend's accuracy (percent) at any ``x``.
    """

    slope: float
    intercept: float
    r2: float
    n_models: int
    scale: str
    slope_se: float
    intercept_se: float
    residual_std: float
    x: str | None = None
    y: str | None = None
    models: tuple[str, ...] = field(default=(), repr=False)
    fit_on: tuple[str, ...] = ()
    n_skipped: int = 0
    x_range: tuple[float, float] = (np.nan, np.nan)
    xs: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False, compare=False)
    ys: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False, compare=False)

    kind = "linear"

    def basis(self, xs: np.ndarray) -> np.ndarray:
        """Design matrix ``[1, t(x)]`` for scaled ``xs``."""
        return _linear_basis(xs)

    @property
    def coef(self) -> np.ndarray:
        return np.array([self.intercept, self.slope])

    def predict_scaled(self, xs: ArrayLike) -> np.ndarray:
        """Trend value in scaled coordinates at scaled ``xs``."""
        return self.basis(np.asarray(xs, dtype=float)) @ self.coef

    def predict(self, acc_x: ArrayLike, n: ArrayLike | None = None) -> np.ndarray:
        """The trend's shifted accuracy (percent) at in-distribution accuracy ``acc_x`` (percent)."""
        return inverse(self.predict_scaled(transform(acc_x, self.scale, n)), self.scale)

    def prediction_interval(self, acc_x: ArrayLike, confidence: float = 0.95,
                            n: ArrayLike | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The OLS prediction interval (percent) of a *new* model's shifted accuracy at ``acc_x``:
        ``t(pred) ± t_{n-p} s sqrt(1 + b(x)' (X'X)^-1 b(x))`` in the scaled coordinates, mapped
        back, where ``s`` is the fitted models' residual scatter. Unlike the bootstrap band (where
        the *line* is), it includes how far standard models themselves fall from the line."""
        from scipy.stats import t as student_t  # deferred: scipy.stats is slow to import

        xt = transform(acc_x, self.scale, n)
        phi = self.basis(np.atleast_1d(np.asarray(xt, dtype=float)))
        fit_phi = self.basis(np.asarray(self.xs, dtype=float))
        dof = max(1, len(self.xs) - fit_phi.shape[1])
        lever = np.einsum("ij,jk,ik->i", phi, np.linalg.pinv(fit_phi.T @ fit_phi), phi)
        half = student_t.ppf(0.5 + confidence / 2, dof) * self.residual_std * np.sqrt(1 + lever)
        centre = phi @ self.coef
        lo, hi = inverse(centre - half, self.scale), inverse(centre + half, self.scale)
        return (lo, hi) if np.ndim(acc_x) else (lo[0], hi[0])

    def to_dict(self) -> dict[str, object]:
        """JSON-ready summary (the ``shiftbench fit --json`` object)."""
        return {
            "slope": float(self.slope), "intercept": float(self.intercept), "r2": float(self.r2),
            "n_models": int(self.n_models), "scale": self.scale, "x": self.x, "y": self.y,
            "slope_se": float(self.slope_se), "intercept_se": float(self.intercept_se),
            "n_skipped": int(self.n_skipped), "fit_on": list(self.fit_on), "kind": self.kind,
        }


@dataclass(frozen=True)
class PiecewiseTrendFit(TrendFit):
    """A continuous hinge trend around ``pivot`` (percent): ``slope`` is the slope above the
    pivot, ``slope_below`` below it, and ``intercept`` the scaled y-value at the pivot."""

    pivot: float = np.nan
    slope_below: float = np.nan
    slope_below_se: float = np.nan

    kind = "piecewise"

    def basis(self, xs: np.ndarray) -> np.ndarray:
        """Design matrix ``[1, min(t(x) - t(p), 0), max(t(x) - t(p), 0)]`` for scaled ``xs``."""
        return _hinge_basis(xs, float(transform(self.pivot, self.scale)))

    @property
    def coef(self) -> np.ndarray:
        return np.array([self.intercept, self.slope_below, self.slope])

    def to_dict(self) -> dict[str, object]:
        out = super().to_dict()
        out.update(pivot=float(self.pivot), slope_below=float(self.slope_below),
                   slope_below_se=float(self.slope_below_se))
        return out


@dataclass(frozen=True)
class Band:
    """A pointwise bootstrap confidence band of a trend, on a grid of x accuracies (percent)."""

    grid: np.ndarray
    lower_scaled: np.ndarray = field(repr=False)
    upper_scaled: np.ndarray = field(repr=False)
    confidence: float = 0.95
    n_resamples: int = 0
    scale: str = "logit"

    @property
    def lower(self) -> np.ndarray:
        """Lower limit (percent) at each grid point."""
        return inverse(self.lower_scaled, self.scale)

    @property
    def upper(self) -> np.ndarray:
        """Upper limit (percent) at each grid point."""
        return inverse(self.upper_scaled, self.scale)

    def at(self, acc_x: ArrayLike, n: ArrayLike | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Band limits (percent) at ``acc_x``, interpolated in scaled coordinates (the limits
        are kept unclipped, so a band far below 0.01% stays exact)."""
        gx = transform(self.grid, self.scale)
        xs = transform(acc_x, self.scale, n)
        lo = np.interp(xs, gx, self.lower_scaled)
        hi = np.interp(xs, gx, self.upper_scaled)
        return inverse(lo, self.scale), inverse(hi, self.scale)


# ---------------------------------------------------------------------------- data selection
def check_accuracy_arrays(x: ArrayLike, y: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Validate paired accuracy arrays (percent, same length, within [0, 100]; NaN allowed)."""
    ax = np.asarray(x, dtype=float).ravel()
    ay = np.asarray(y, dtype=float).ravel()
    if ax.shape != ay.shape:
        raise DataError(f"x and y have different lengths ({ax.size} vs {ay.size})")
    bad = (ax < 0) | (ax > 100) | (ay < 0) | (ay > 100)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(f"accuracy at index {i} ({ax[i]:g}, {ay[i]:g}) is outside [0, 100]; give percentages")
    return ax, ay


def _points(
    x: str | ArrayLike, y: str | ArrayLike, scale: str, testbed: Testbed | None,
    fit_on: str | Iterable[str] | None,
) -> tuple[np.ndarray, np.ndarray, dict[str, object]]:
    """Scaled (xs, ys) for the fit, and the provenance fields of the result."""
    check_scale(scale)
    if testbed is None:
        if isinstance(x, str) or isinstance(y, str):
            raise ConfigError(f"x={x!r}, y={y!r} are setting names: pass testbed=... as well")
        ax, ay = check_accuracy_arrays(x, y)
        keep = np.isfinite(ax) & np.isfinite(ay)
        info = {"models": tuple(str(i) for i in np.flatnonzero(keep)), "n_skipped": int((~keep).sum()),
                "fit_on": ()}
        return transform(ax[keep], scale), transform(ay[keep], scale), info | {"xa": ax[keep]}
    selectors = DEFAULT_FIT_ON if fit_on is None else ((fit_on,) if isinstance(fit_on, str) else tuple(fit_on))
    models = testbed.resolve(selectors)
    frame, skipped = testbed.paired(str(x), str(y), models)
    info = {"models": tuple(frame.index), "n_skipped": skipped, "fit_on": selectors, "x": str(x), "y": str(y),
            "xa": frame["x_acc"].to_numpy()}
    return (transform(frame["x_acc"], scale, frame["x_n"]), transform(frame["y_acc"], scale, frame["y_n"]), info)


def _require(n: int, needed: int, info: dict[str, object], testbed: Testbed | None, what: str) -> None:
    if n >= needed:
        return
    where = f" in testbed {testbed.name!r}" if testbed is not None else ""
    sel = ", ".join(info.get("fit_on", ())) or "the given points"
    raise DataError(
        f"{what} of {info.get('y', 'y')!r} on {info.get('x', 'x')!r} needs at least {needed} models with both "
        f"accuracies{where}; {sel} gave {n} ({info['n_skipped']} skipped for empty cells); "
        f"choose other models with fit_on / --fit-on")


def _ols(design: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Coefficients, their standard errors, r^2 and residual std of an OLS fit."""
    coef, *_ = np.linalg.lstsq(design, ys, rcond=None)
    resid = ys - design @ coef
    n, p = design.shape
    ssr = float(resid @ resid)
    sst = float(((ys - ys.mean()) ** 2).sum())
    r2 = 1.0 - ssr / sst if sst > 0 else 1.0
    dof = n - p
    s2 = ssr / dof if dof > 0 else np.nan
    with np.errstate(invalid="ignore"):
        cov = s2 * np.linalg.pinv(design.T @ design)
    return coef, np.sqrt(np.diag(cov)), r2, float(np.sqrt(s2))


# ---------------------------------------------------------------------------- public fits
def fit_trend(
    x: str | ArrayLike,
    y: str | ArrayLike,
    scale: str = "logit",
    *,
    testbed: Testbed | None = None,
    fit_on: str | Iterable[str] | None = DEFAULT_FIT_ON,
) -> TrendFit:
    """Least-squares trend ``t(acc_y) = slope * t(acc_x) + intercept`` (Taori et al. 2020, §3).

    Parameters
    ----------
    x, y:
        Setting names of ``testbed`` (in-distribution and shifted), or, without a testbed,
        arrays of accuracies in percent (all finite pairs are fitted).
    scale:
        ``"logit"`` (default), ``"probit"`` or ``"linear"``; see :mod:`shiftbench.analysis.scaling`.
    testbed:
        The :class:`~shiftbench.testbed.Testbed` holding the accuracies.
    fit_on:
        Which models the line is fitted on: model types, tags or model names (a union; see
        :meth:`Testbed.resolve`). Default: ``STANDARD`` models, the published protocol.
        ``"all"`` fits on every model.

    Examples
    --------
    >>> fit = fit_trend([60, 70, 80], [45, 56, 67], scale="linear")
    >>> round(fit.slope, 3), round(fit.intercept, 3)
    (1.1, -0.21)
    """
    xs, ys, info = _points(x, y, scale, testbed, fit_on)
    _require(len(xs), MIN_MODELS, info, testbed, "a trend fit")
    if np.ptp(xs) == 0:
        raise DataError(f"all {len(xs)} models have the same accuracy on {info.get('x', 'x')!r}; a trend needs spread")
    coef, se, r2, s = _ols(_linear_basis(xs), ys)
    xa = np.asarray(info["xa"])
    return TrendFit(
        slope=float(coef[1]), intercept=float(coef[0]), r2=r2, n_models=len(xs), scale=scale,
        slope_se=float(se[1]), intercept_se=float(se[0]), residual_std=s,
        x=info.get("x"), y=info.get("y"), models=info["models"], fit_on=tuple(info["fit_on"]),
        n_skipped=int(info["n_skipped"]), x_range=(float(xa.min()), float(xa.max())), xs=xs, ys=ys)


def fit_piecewise_trend(
    x: str | ArrayLike,
    y: str | ArrayLike,
    pivot: float | str,
    scale: str = "logit",
    *,
    testbed: Testbed | None = None,
    fit_on: str | Iterable[str] | None = DEFAULT_FIT_ON,
) -> PiecewiseTrendFit:
    """Continuous piecewise-linear trend with a knot at ``pivot`` (see module docstring).

    ``pivot`` is an in-distribution accuracy in percent, or the name of a testbed model whose
    ``x`` accuracy is used - for ImageNet-A, the ResNet-50 it was filtered against
    (``pivot="resnet50"``). At least two fitted models are needed on each side of the pivot.
    """
    xs, ys, info = _points(x, y, scale, testbed, fit_on)
    if isinstance(pivot, str):
        if testbed is None:
            raise ConfigError(f"pivot={pivot!r} names a model: pass testbed=... as well")
        value = testbed.accuracies.at[testbed.check_model(pivot), str(x)]
        if not np.isfinite(value):
            raise DataError(f"pivot model {pivot!r} has no accuracy on {x!r}; give the pivot in percent")
        pivot = float(value)
    pivot = float(pivot)
    if not 0 < pivot < 100:
        raise ConfigError(f"pivot={pivot:g} must be an accuracy in percent, strictly between 0 and 100")
    p = float(transform(pivot, scale))
    below, above = int((xs < p).sum()), int((xs >= p).sum())
    _require(min(below, above), 2, info | {"fit_on": (f"models on each side of the {pivot:.2f}% pivot",)},
             testbed, "a piecewise fit")
    coef, se, r2, s = _ols(_hinge_basis(xs, p), ys)
    xa = np.asarray(info["xa"])
    return PiecewiseTrendFit(
        slope=float(coef[2]), intercept=float(coef[0]), r2=r2, n_models=len(xs), scale=scale,
        slope_se=float(se[2]), intercept_se=float(se[0]), residual_std=s,
        x=info.get("x"), y=info.get("y"), models=info["models"], fit_on=tuple(info["fit_on"]),
        n_skipped=int(info["n_skipped"]), x_range=(float(xa.min()), float(xa.max())), xs=xs, ys=ys,
        pivot=pivot, slope_below=float(coef[1]), slope_below_se=float(se[1]))


def _det(m: np.ndarray) -> np.ndarray:
    """Determinants of a stack of 1x1, 2x2 or 3x3 matrices by their explicit formulas
    (a batched LAPACK call per matrix costs more than the arithmetic at this size)."""
    p = m.shape[-1]
    if p == 1:
        return m[..., 0, 0]
    if p == 2:
        return m[..., 0, 0] * m[..., 1, 1] - m[..., 0, 1] * m[..., 1, 0]
    if p == 3:
        return (m[..., 0, 0] * (m[..., 1, 1] * m[..., 2, 2] - m[..., 1, 2] * m[..., 2, 1])
                - m[..., 0, 1] * (m[..., 1, 0] * m[..., 2, 2] - m[..., 1, 2] * m[..., 2, 0])
                + m[..., 0, 2] * (m[..., 1, 0] * m[..., 2, 1] - m[..., 1, 1] * m[..., 2, 0]))
    return np.linalg.det(m)


def _solve_small(gram: np.ndarray, vec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Solve a stack of small symmetric systems by Cramer's rule; returns (solutions, ok).

    Kept over batched ``np.linalg.solve`` by measurement (``bench/trend_routines.py``, the 13
    stacks of <= 8,192 normal equations of a 100,000-resample band over 87 models, best of 5,
    2-core machine): 4.3 ms vs 17.8 ms for 2 x 2 (4.2x), 7.4-7.6 ms vs 24.2-24.5 ms for 3 x 3
    (3.2x), numpy with the same determinant test for degenerate resamples (``np.linalg.solve``
    alone still takes 7.6-7.9 / 11.2-11.3 ms). Solutions agree to 1.6e-14 relative."""
    p = gram.shape[-1]
    det = _det(gram)
    scale = np.abs(gram).max(axis=(1, 2)) ** p
    ok = np.abs(det) > 1e-10 * scale
    safe = np.where(ok, det, 1.0)
    coef = np.empty(vec.shape)
    for j in range(p):
        m = gram.copy()
        m[..., :, j] = vec
        coef[:, j] = _det(m) / safe
    return coef, ok


def normal_equations(fit: TrendFit, n_resamples: int, seed: int | None = 0,
                     chunk: int = 8192) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The weighted normal equations ``(Phi' W Phi, Phi' W y)`` of ``n_resamples`` bootstrap
    resamples of ``fit``'s models (``W`` = resample counts), ``chunk`` resamples at a time: stacks
    of shape ``(b, p, p)`` and ``(b, p)``."""
    rng = np.random.default_rng(seed)
    phi = fit.basis(fit.xs)
    n, p = phi.shape
    iu = np.triu_indices(p)
    # per model: the upper triangle of phi phi' and phi * y; a resample's sums are counts @ this
    per_model = np.concatenate([phi[:, iu[0]] * phi[:, iu[1]], phi * fit.ys[:, None]], axis=1)
    for start in range(0, n_resamples, chunk):
        b = min(chunk, n_resamples - start)
        idx = rng.integers(0, n, size=(b, n), dtype=np.int16 if n < 2**15 else np.int64)
        flat = (idx + n * np.arange(b)[:, None]).ravel()
        counts = np.bincount(flat, minlength=b * n).reshape(b, n).astype(float)
        sums = counts @ per_model
        gram = np.empty((b, p, p))
        gram[:, iu[0], iu[1]] = sums[:, : len(iu[0])]
        gram[:, iu[1], iu[0]] = sums[:, : len(iu[0])]
        yield gram, sums[:, len(iu[0]):]


def bootstrap_coefficients(fit: TrendFit, n_resamples: int = 1000, seed: int | None = 0,
                           chunk: int = 8192) -> np.ndarray:
    """Coefficients of ``fit`` refitted on ``n_resamples`` bootstrap resamples of its models.

    Each resample draws ``n`` models with replacement; all resamples are solved at once from
    their weighted normal equations ``(Phi' W Phi) b = Phi' W y`` (:func:`normal_equations`).
    Degenerate resamples (a singular design, e.g. all draws of one model) are dropped.
    Returns an array ``(n_kept, n_coef)`` ordered like :attr:`TrendFit.coef`.
    """
    if n_resamples < 1:
        raise ConfigError(f"n_resamples={n_resamples} must be at least 1")
    out = []
    for gram, rhs in normal_equations(fit, n_resamples, seed, chunk):
        coef, ok = _solve_small(gram, rhs)
        out.append(coef[ok])
    return np.concatenate(out)


def _lerp(a: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
    """numpy's own interpolation for quantiles (so results equal ``np.quantile`` bit for bit)."""
    d = b - a
    return np.where(t >= 0.5, b - d * (1 - t), a + d * t)


def _row_quantiles(values: np.ndarray, qs: Sequence[float], sample_size: int = 4096) -> np.ndarray:
    """``np.quantile(values, qs, axis=1)`` (linear interpolation), exactly, by sample-bracketed
    selection (Floyd & Rivest 1975): a sorted subsample of each row gives a narrow value bracket
    that holds the wanted ranks; only the few values inside it are partially sorted. A row whose
    bracket misses (vanishingly rare) falls back to a full partition, so the result is exact.

    Kept over ``np.quantile(values, qs, axis=1)`` by measurement (``bench/trend_routines.py``,
    the 7 blocks of 16 x 100,000 predictions of a 100,000-resample band over 87 models, best of 5,
    2-core machine): 40-44 ms vs 98-104 ms (2.3-2.5x), results equal bit for bit."""
    rows, m = values.shape
    pos = np.asarray(qs, dtype=float) * (m - 1)
    lo = np.floor(pos).astype(int)
    hi = np.minimum(lo + 1, m - 1)
    frac = pos - lo
    if m <= 8 * sample_size:
        part = np.partition(values, np.unique(np.concatenate([lo, hi])), axis=1)
        return _lerp(part[:, lo], part[:, hi], frac)
    sample = values[:, :: m // sample_size]
    s = sample.shape[1]
    brackets = []
    for q in np.asarray(qs, dtype=float):
        margin = 6.0 * np.sqrt(q * (1 - q) * s) + 2
        brackets.append((max(int(q * (s - 1) - margin), 0), min(int(np.ceil(q * (s - 1) + margin)), s - 1)))
    sample = np.partition(sample, sorted({r for pair in brackets for r in pair}), axis=1)
    out = np.empty((rows, len(pos)))
    for j, (ra, rb) in enumerate(brackets):
        a = sample[:, ra][:, None]
        b = sample[:, rb][:, None]
        below = (values < a).sum(axis=1)
        inside = (values >= a) & (values <= b)
        # all rows' candidates in one extraction, then split by row
        per_row = np.split(values[inside], np.cumsum(inside.sum(axis=1))[:-1])
        for r in range(rows):
            k_lo, k_hi = lo[j] - below[r], hi[j] - below[r]
            cand = per_row[r]
            if k_lo < 0 or k_hi >= len(cand):
                cand, k_lo, k_hi = values[r], lo[j], hi[j]
            part = np.partition(cand, [k_lo, k_hi])
            out[r, j] = _lerp(part[k_lo], part[k_hi], frac[j])
    return out


def bootstrap_band(
    fit: TrendFit,
    *,
    grid: ArrayLike | None = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int | None = 0,
) -> Band:
    """Pointwise percentile bootstrap band of ``fit`` (Efron & Tibshirani 1993, §13).

    ``grid`` is a set of x accuracies in percent (default: 100 points spanning 0.1-99.9%).
    The band at each grid point is the central ``confidence`` interval of the refitted trends'
    predictions there. Vectorised and seeded: the same ``seed`` gives the same band.
    """
    check_confidence(confidence)
    g = np.linspace(0.1, 99.9, 100) if grid is None else np.sort(np.asarray(grid, dtype=float))
    coefs = bootstrap_coefficients(fit, n_resamples, seed)
    basis = fit.basis(transform(g, fit.scale))
    alpha = 1.0 - confidence
    bounds = np.empty((len(g), 2))
    coefs_t = np.ascontiguousarray(coefs.T)
    step = 16                                   # grid rows per block: predictions stay in cache
    for start in range(0, len(g), step):
        preds = basis[start:start + step] @ coefs_t
        bounds[start:start + step] = _row_quantiles(preds, [alpha / 2, 1 - alpha / 2])
    return Band(grid=g, lower_scaled=bounds[:, 0], upper_scaled=bounds[:, 1],
                confidence=confidence, n_resamples=int(coefs.shape[0]), scale=fit.scale)


def as_frame(fit: TrendFit) -> pd.DataFrame:
    """One-row DataFrame of :meth:`TrendFit.to_dict` (handy for tables of many shifts)."""
    return pd.DataFrame([fit.to_dict()])
