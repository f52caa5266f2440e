"""Linear trends between in-distribution and shifted accuracy, and their bootstrap bands.

The published protocol (Taori et al. 2020, §3; Miller et al. 2021) fits, by least squares on
the *standard* models only,

    t(acc_y) = slope * t(acc_x) + intercept,      t = logit, probit or linear,

and draws a bootstrap confidence band around it. Which standard models: every one ``fit_on``
selects (recipe ``standard``), or, as the authors' figure scripts do (recipe ``taori2020``), those
whose names hold none of ``aws``, ``batch64``, ``subsample`` and that the figure shows (``val`` >=
55%, or the shift figure's own rule): :func:`fit_trend`'s ``recipe=``.

For an adversarially filtered test set such as ImageNet-A, where the filtering model (ResNet-50,
the *pivot*) scores 0 by construction, the authors fit *two independent lines* (recipe
``taori2020``, :func:`fit_two_line_trend`, the published testbed's ``plotting/paper_imagenet_a.py``):
one on the standard models strictly below the pivot's in-distribution accuracy ``p``, one on those
strictly above it, the pivot model itself in neither, only models with >= 75% on the ImageNet-A
classes; a model at or below ``p`` is measured against the lower line. shiftbench's variant
(recipe ``hinge``, :func:`fit_piecewise_trend`) fits one *continuous* piecewise-linear trend with
its knot at ``p`` on every ``fit_on`` model, the pivot included:

    t(acc_y) = b + a_below * min(t(acc_x) - t(p), 0) + a_above * max(t(acc_x) - t(p), 0).

Models trained on other data (CLIP on LAION, say) are better placed against several
in-distribution test sets, one per training distribution (Shi et al. 2023, NeurIPS): with
K >= 2 x settings :func:`fit_trend` fits the plane

    t(acc_y) = a_1 t(acc_x_1) + ... + a_K t(acc_x_K) + b

(:class:`MultiTrendFit`), with OLS prediction / confidence intervals and a pointwise bootstrap
(:func:`bootstrap_interval`) but no grid band.

All are ordinary least squares on a small basis; :func:`bootstrap_band` resamples models with
replacement and refits all resamples at once (batched normal equations), so 100,000 resamples
take about a second.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import overload

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from shiftbench.analysis.intervals import check_confidence
from shiftbench.analysis.recipes import TAORI_FIT_EXCLUDE, TAORI_MIN_X, TAORI_SHOWN, check_recipe
from shiftbench.analysis.scaling import check_scale, inverse, transform
from shiftbench.errors import ConfigError, DataError
from shiftbench.testbed import Testbed, check_percent

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
    recipe: str = "standard"
    excluded: tuple[tuple[str, int], ...] = ()

    kind = "linear"

    @property
    def n_excluded(self) -> int:
        """Models of the ``fit_on`` selection the recipe left out (:attr:`excluded`, per reason)."""
        return sum(n for _, n in self.excluded)

    def segments(self) -> list[tuple[TrendFit, float, float]]:
        """The lines to draw, each with the scaled x interval it holds on: one line everywhere
        here (two for a :class:`TwoLineTrendFit`)."""
        return [(self, -np.inf, np.inf)]

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
            "recipe": self.recipe, "n_excluded": self.n_excluded, "excluded": dict(self.excluded),
        }


@dataclass(frozen=True)
class PiecewiseTrendFit(TrendFit):
    """A continuous hinge trend around ``pivot`` (percent): ``slope`` is the slope above the
    pivot, ``slope_below`` below it, and ``intercept`` the scaled y-value at the pivot. This is
    shiftbench's variant (recipe ``hinge``); the authors' ImageNet-A trend is two independent
    lines (:class:`TwoLineTrendFit`)."""

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
class MultiTrendFit:
    """A least-squares *plane* over K >= 2 in-distribution test sets (Shi et al. 2023):

        t(acc_y) = sum_k coefficients[k] * t(acc_x_k) + intercept,      t = logit, probit or linear.

    ``x`` names the K settings in order (``None`` when fitted on arrays: then
    :attr:`x_labels` is ``x1 .. xK``). ``coefficient_se`` and ``intercept_se`` are the OLS
    standard errors (``s^2 (X'X)^{-1}``, ``s^2 = SSR / (n - K - 1)``), ``r2`` the coefficient of
    determination in scaled coordinates, ``x_ranges`` the fitted models' accuracy range on each x.

    Available: :meth:`predict`, :meth:`prediction_interval` (a new model, OLS),
    :meth:`confidence_interval` (where the plane is, OLS) and :func:`bootstrap_interval` (where the
    plane is, bootstrap at given points). Not available: a bootstrap *band* (:func:`bootstrap_band`
    draws over one x axis) and piecewise (hinge) planes.
    """

    coefficients: tuple[float, ...]
    intercept: float
    r2: float
    n_models: int
    scale: str
    coefficient_se: tuple[float, ...]
    intercept_se: float
    residual_std: float
    x: tuple[str, ...] | None = None
    y: str | None = None
    models: tuple[str, ...] = field(default=(), repr=False)
    fit_on: tuple[str, ...] = ()
    n_skipped: int = 0
    x_ranges: tuple[tuple[float, float], ...] = ()
    xs: np.ndarray = field(default_factory=lambda: np.empty((0, 0)), repr=False, compare=False)
    ys: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False, compare=False)
    recipe: str = "standard"
    excluded: tuple[tuple[str, int], ...] = ()

    kind = "multi"

    @property
    def n_excluded(self) -> int:
        """Models of the ``fit_on`` selection left out (:attr:`excluded`, per reason)."""
        return sum(n for _, n in self.excluded)

    @property
    def k(self) -> int:
        """Number of in-distribution test sets K."""
        return len(self.coefficients)

    @property
    def x_labels(self) -> tuple[str, ...]:
        """The settings' names, or ``x1 .. xK`` for a fit on arrays."""
        return self.x if self.x is not None else tuple(f"x{i + 1}" for i in range(self.k))

    @property
    def coefficient_by_x(self) -> dict[str, float]:
        """``{x_k: a_k}``."""
        return dict(zip(self.x_labels, self.coefficients))

    @property
    def coef(self) -> np.ndarray:
        """``[intercept, a_1, ..., a_K]``, ordered like :meth:`basis`."""
        return np.array([self.intercept, *self.coefficients])

    def basis(self, xs: np.ndarray) -> np.ndarray:
        """Design matrix ``[1, t(x_1), ..., t(x_K)]`` for scaled ``xs`` of shape ``(m, K)``."""
        xs = np.asarray(xs, dtype=float)
        return np.concatenate([np.ones((xs.shape[0], 1)), xs], axis=1)

    def columns(self, acc_x: ArrayLike | pd.DataFrame) -> np.ndarray:
        """``acc_x`` as an ``(m, K)`` float array: a DataFrame's columns named like :attr:`x`
        (in that order) or else its K columns in order; an array ``(m, K)``, or ``(K,)`` for one model."""
        if isinstance(acc_x, pd.DataFrame):
            names = list(self.x_labels)
            frame = acc_x[names] if set(names) <= set(map(str, acc_x.columns)) else acc_x
            arr = frame.to_numpy(dtype=float)
        else:
            arr = np.asarray(acc_x, dtype=float)
        arr = arr.reshape(1, -1) if arr.ndim == 1 else arr
        if arr.ndim != 2 or arr.shape[1] != self.k:
            raise ConfigError(f"the plane over {', '.join(self.x_labels)} needs {self.k} accuracies per model; "
                              f"got shape {np.shape(acc_x)}; pass an (models, {self.k}) array or DataFrame")
        return arr

    def _scaled(self, acc_x: ArrayLike | pd.DataFrame, n: ArrayLike | None) -> np.ndarray:
        arr = self.columns(acc_x)
        nn = None if n is None else self.columns(n)
        return np.column_stack([transform(arr[:, k], self.scale, None if nn is None else nn[:, k])
                                for k in range(self.k)])

    def predict_scaled(self, xs: ArrayLike) -> np.ndarray:
        """Plane value in scaled coordinates at scaled ``xs`` of shape ``(m, K)``."""
        return self.basis(xs) @ self.coef

    def predict(self, acc_x: ArrayLike | pd.DataFrame, n: ArrayLike | None = None) -> np.ndarray:
        """The plane's shifted accuracy (percent) at in-distribution accuracies ``acc_x`` (percent,
        ``(m, K)`` array or DataFrame; ``n`` the test-set sizes, same shape, for the clip)."""
        pred = inverse(self.predict_scaled(self._scaled(acc_x, n)), self.scale)
        return pred if _is_table(acc_x) else pred[0]

    def _interval(self, acc_x, confidence: float, n, new: float) -> tuple[np.ndarray, np.ndarray]:
        from scipy.stats import t as student_t  # deferred: scipy.stats is slow to import

        check_confidence(confidence)
        phi = self.basis(self._scaled(acc_x, n))
        fit_phi = self.basis(self.xs)
        dof = max(1, fit_phi.shape[0] - fit_phi.shape[1])
        lever = np.einsum("ij,jk,ik->i", phi, np.linalg.pinv(fit_phi.T @ fit_phi), phi)
        half = student_t.ppf(0.5 + confidence / 2, dof) * self.residual_std * np.sqrt(new + lever)
        centre = phi @ self.coef
        lo, hi = inverse(centre - half, self.scale), inverse(centre + half, self.scale)
        return (lo, hi) if _is_table(acc_x) else (lo[0], hi[0])

    def prediction_interval(self, acc_x: ArrayLike | pd.DataFrame, confidence: float = 0.95,
                            n: ArrayLike | None = None) -> tuple[np.ndarray, np.ndarray]:
        """OLS prediction interval (percent) of a *new* model's shifted accuracy:
        ``t(pred) ± t_{n-K-1} s sqrt(1 + b(x)' (X'X)^-1 b(x))`` with ``b(x) = [1, t(x_1) .. t(x_K)]``."""
        return self._interval(acc_x, confidence, n, 1.0)

    def confidence_interval(self, acc_x: ArrayLike | pd.DataFrame, confidence: float = 0.95,
                            n: ArrayLike | None = None) -> tuple[np.ndarray, np.ndarray]:
        """OLS confidence interval (percent) of the plane itself at ``acc_x``:
        ``t(pred) ± t_{n-K-1} s sqrt(b(x)' (X'X)^-1 b(x))``."""
        return self._interval(acc_x, confidence, n, 0.0)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready summary (the ``shiftbench fit --x A --x B --json`` object)."""
        return {
            "coefficients": {k: float(v) for k, v in self.coefficient_by_x.items()},
            "intercept": float(self.intercept), "r2": float(self.r2), "n_models": int(self.n_models),
            "scale": self.scale, "x": list(self.x_labels), "y": self.y,
            "coefficient_se": {k: float(v) for k, v in zip(self.x_labels, self.coefficient_se)},
            "intercept_se": float(self.intercept_se), "n_skipped": int(self.n_skipped),
            "fit_on": list(self.fit_on), "kind": self.kind,
            "recipe": self.recipe, "n_excluded": self.n_excluded, "excluded": dict(self.excluded),
        }


def _is_table(acc_x: object) -> bool:
    """Several models (a DataFrame or a 2-D array), as opposed to one model's K accuracies."""
    return isinstance(acc_x, pd.DataFrame) or np.ndim(acc_x) == 2


class _BandLimits:
    """``lower``/``upper`` (percent) of a band from its ``lower_scaled``/``upper_scaled`` limits
    and ``scale``; shared by :class:`Band` and :class:`TwoLineBand` (no fields of its own, so
    neither dataclass's fields, repr or pickling change)."""

    lower_scaled: np.ndarray
    upper_scaled: np.ndarray
    scale: str

    @property
    def lower(self) -> np.ndarray:
        """Lower limit (percent) at each grid point."""
        return inverse(self.lower_scaled, self.scale)

    @property
    def upper(self) -> np.ndarray:
        """Upper limit (percent) at each grid point."""
        return inverse(self.upper_scaled, self.scale)


@dataclass(frozen=True)
class Band(_BandLimits):
    """A pointwise bootstrap confidence band of a trend, on a grid of x accuracies (percent)."""

    grid: np.ndarray
    lower_scaled: np.ndarray = field(repr=False)
    upper_scaled: np.ndarray = field(repr=False)
    confidence: float = 0.95
    n_resamples: int = 0
    scale: str = "logit"

    def at(self, acc_x: ArrayLike, n: ArrayLike | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Band limits (percent) at ``acc_x``, interpolated in scaled coordinates (the limits
        are kept unclipped, so a band far below 0.01% stays exact)."""
        gx = transform(self.grid, self.scale)
        xs = transform(acc_x, self.scale, n)
        lo = np.interp(xs, gx, self.lower_scaled)
        hi = np.interp(xs, gx, self.upper_scaled)
        return inverse(lo, self.scale), inverse(hi, self.scale)

    def segments(self) -> list[tuple[Band, float, float]]:
        """One band everywhere (two for a :class:`TwoLineBand`), as :meth:`TrendFit.segments`."""
        return [(self, -np.inf, np.inf)]


@dataclass(frozen=True)
class TwoLineTrendFit:
    """Two independent least-squares lines split at a pivot accuracy (percent): :attr:`below`,
    fitted on the models strictly below ``pivot``, and :attr:`above`, on those strictly above it
    (Taori et al. 2020's ImageNet-A trend, recipe ``taori2020``; :func:`fit_two_line_trend`).

    The trend at ``acc_x`` is the lower line's at or below the pivot and the upper line's above
    it, so effective robustness, prediction intervals and bootstrap bands each come from the line
    on the model's side. ``n_models`` counts both lines' models, ``models`` lists them (lower line
    first); ``excluded`` says, per reason, which models of ``fit_on`` neither line was fitted on
    (the pivot model among them). ``r2`` is the pooled coefficient of determination of the two
    lines over all their models (scaled coordinates); each line has its own ``r2``, ``slope``,
    standard errors and ``x_range``.
    """

    below: TrendFit
    above: TrendFit
    pivot: float
    scale: str
    x: str | None = None
    y: str | None = None
    pivot_model: str | None = None
    fit_on: tuple[str, ...] = ("STANDARD",)
    n_skipped: int = 0
    recipe: str = "taori2020"
    excluded: tuple[tuple[str, int], ...] = ()

    kind = "two-line"

    @property
    def n_models(self) -> int:
        """Models in either line."""
        return self.below.n_models + self.above.n_models

    @property
    def n_excluded(self) -> int:
        """Models of the ``fit_on`` selection in neither line (:attr:`excluded`, per reason)."""
        return sum(n for _, n in self.excluded)

    @property
    def models(self) -> tuple[str, ...]:
        """The lower line's models, then the upper line's."""
        return tuple(self.below.models) + tuple(self.above.models)

    @property
    def x_range(self) -> tuple[float, float]:
        """From the least accurate model of the lower line to the most accurate of the upper line."""
        return (self.below.x_range[0], self.above.x_range[1])

    @property
    def r2(self) -> float:
        """Pooled r^2 of both lines: ``1 - (SSR_below + SSR_above) / SST`` over all fitted models."""
        ys = np.concatenate([self.below.ys, self.above.ys])
        ssr = sum(float(((f.ys - f.predict_scaled(f.xs)) ** 2).sum()) for f in (self.below, self.above))
        sst = float(((ys - ys.mean()) ** 2).sum())
        return 1.0 - ssr / sst if sst > 0 else 1.0

    @property
    def pivot_scaled(self) -> float:
        """The pivot in scaled coordinates."""
        return float(transform(self.pivot, self.scale))

    def segments(self) -> list[tuple[TrendFit, float, float]]:
        """``[(below, -inf, t(pivot)), (above, t(pivot), inf)]``: each line with the scaled x
        interval it holds on (the lower one includes the pivot)."""
        p = self.pivot_scaled
        return [(self.below, -np.inf, p), (self.above, p, np.inf)]

    def predict_scaled(self, xs: ArrayLike) -> np.ndarray:
        """The trend in scaled coordinates at scaled ``xs``: the line on each point's side."""
        xs = np.asarray(xs, dtype=float)
        return np.where(xs > self.pivot_scaled, self.above.predict_scaled(xs), self.below.predict_scaled(xs))

    def predict(self, acc_x: ArrayLike, n: ArrayLike | None = None) -> np.ndarray:
        """The trend's shifted accuracy (percent) at ``acc_x`` (percent): lower line at or below
        the pivot, upper line above it."""
        return inverse(self.predict_scaled(transform(acc_x, self.scale, n)), self.scale)

    def prediction_interval(self, acc_x: ArrayLike, confidence: float = 0.95,
                            n: ArrayLike | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The OLS prediction interval (percent) of :meth:`TrendFit.prediction_interval`, from the
        line on ``acc_x``'s side."""
        up = np.asarray(transform(acc_x, self.scale, n)) > self.pivot_scaled
        lo_b, hi_b = self.below.prediction_interval(acc_x, confidence, n)
        lo_a, hi_a = self.above.prediction_interval(acc_x, confidence, n)
        return np.where(up, lo_a, lo_b), np.where(up, hi_a, hi_b)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready summary: both lines (``below``, ``above``) and what was left out."""
        return {
            "kind": self.kind, "recipe": self.recipe, "x": self.x, "y": self.y, "scale": self.scale,
            "pivot": float(self.pivot), "pivot_model": self.pivot_model, "n_models": int(self.n_models),
            "r2": float(self.r2), "n_skipped": int(self.n_skipped), "fit_on": list(self.fit_on),
            "n_excluded": self.n_excluded, "excluded": dict(self.excluded),
            "below": _line_dict(self.below), "above": _line_dict(self.above),
        }


def _line_dict(fit: TrendFit) -> dict[str, object]:
    """One line of a :class:`TwoLineTrendFit` for JSON: its coefficients, fit and x range."""
    return {"slope": float(fit.slope), "intercept": float(fit.intercept), "r2": float(fit.r2),
            "n_models": int(fit.n_models), "slope_se": float(fit.slope_se), "intercept_se": float(fit.intercept_se),
            "x_range": [float(v) for v in fit.x_range]}


@dataclass(frozen=True)
class TwoLineBand(_BandLimits):
    """The bootstrap bands of a :class:`TwoLineTrendFit`'s two lines (:attr:`below`,
    :attr:`above`, each a :class:`Band` from resampling that line's models). Read like a
    :class:`Band`: the limits at a point (:meth:`at`, ``lower``, ``upper``) come from the band of
    the line on its side of ``pivot``."""

    below: Band
    above: Band
    pivot: float

    @property
    def grid(self) -> np.ndarray:
        return self.below.grid

    @property
    def confidence(self) -> float:
        return self.below.confidence

    @property
    def n_resamples(self) -> int:
        """Resamples kept, the fewer of the two lines'."""
        return min(self.below.n_resamples, self.above.n_resamples)

    @property
    def scale(self) -> str:
        return self.below.scale

    @property
    def lower_scaled(self) -> np.ndarray:
        return np.where(self.grid > self.pivot, self.above.lower_scaled, self.below.lower_scaled)

    @property
    def upper_scaled(self) -> np.ndarray:
        return np.where(self.grid > self.pivot, self.above.upper_scaled, self.below.upper_scaled)

    def segments(self) -> list[tuple[Band, float, float]]:
        """``[(below, -inf, t(pivot)), (above, t(pivot), inf)]`` in scaled x, as
        :meth:`TwoLineTrendFit.segments`."""
        p = float(transform(self.pivot, self.scale))
        return [(self.below, -np.inf, p), (self.above, p, np.inf)]

    def at(self, acc_x: ArrayLike, n: ArrayLike | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Band limits (percent) at ``acc_x`` from the band of the line on its side."""
        up = np.asarray(transform(acc_x, self.scale, n)) > float(transform(self.pivot, self.scale))
        lo_b, hi_b = self.below.at(acc_x, n)
        lo_a, hi_a = self.above.at(acc_x, n)
        return np.where(up, lo_a, lo_b), np.where(up, hi_a, hi_b)


# ---------------------------------------------------------------------------- data selection
def check_accuracy_arrays(x: ArrayLike, y: ArrayLike, fractions: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Validate paired accuracy arrays (percent, same length, within [0, 100]; NaN allowed).

    Accuracies are percentages: arrays whose values all lie in [0, 1] (two or more, not all
    zero) look like fractions and are refused unless ``fractions`` says which they are
    (``True``: fractions, multiplied by 100; ``False``: percentages below 1%), as
    :func:`shiftbench.testbed.check_percent` does for tables."""
    ax = np.asarray(x, dtype=float).ravel()
    ay = np.asarray(y, dtype=float).ravel()
    if ax.shape != ay.shape:
        raise DataError(f"x and y have different lengths ({ax.size} vs {ay.size})")
    both = check_percent(np.concatenate([ax, ay]), fractions, "x and y", switches=False)
    ax, ay = both[:ax.size], both[ax.size:]
    bad = (ax < 0) | (ax > 100) | (ay < 0) | (ay > 100)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(f"accuracy at index {i} ({ax[i]:g}, {ay[i]:g}) is outside [0, 100]; give percentages")
    return ax, ay


def _points(
    x: str | ArrayLike, y: str | ArrayLike, scale: str, testbed: Testbed | None,
    fit_on: str | Iterable[str] | None, fractions: bool | None = None,
) -> tuple[np.ndarray, np.ndarray, dict[str, object]]:
    """Scaled (xs, ys) for the fit, and the provenance fields of the result."""
    check_scale(scale)
    if testbed is None:
        if isinstance(x, str) or isinstance(y, str):
            raise ConfigError(f"x={x!r}, y={y!r} are setting names: pass testbed=... as well")
        ax, ay = check_accuracy_arrays(x, y, fractions)
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


def check_testbed_first(func: str, testbed: object, x: object, y: object, *, data: str = "x, y") -> None:
    """The one calling convention of every function that reads a testbed: the testbed first
    (positionally or as ``testbed=``), setting names after it; arrays by keyword with no
    testbed. Anything else passed first (a setting name, an array) is a ConfigError saying so."""
    if testbed is not None and not isinstance(testbed, Testbed):
        got = repr(testbed) if isinstance(testbed, str) else type(testbed).__name__
        raise ConfigError(f"{func}() takes the testbed first: {func}(testbed, {data}, ...); got {got} in its place "
                          f"(arrays of accuracies go by keyword without a testbed: {func}(x=..., y=...))")
    if x is None or y is None:
        raise ConfigError(f"{func}() needs x and y: setting names of the testbed, or arrays of accuracies")


def x_settings(x: object, y: object, testbed: Testbed | None) -> tuple[object, int]:
    """Normalise the in-distribution argument of a fit: ``(x, 1)`` for one axis (a setting name
    or a 1-D array, exactly as before), ``(names, K)`` or ``(array (n, K) / DataFrame, K)`` for
    K >= 2 in-distribution test sets. A one-name sequence and a one-column table become the
    one-axis form. A sequence of names must not repeat a name nor contain ``y`` (ConfigError)."""
    if isinstance(x, str):
        return x, 1
    if isinstance(x, pd.DataFrame):
        return (x.iloc[:, 0].to_numpy(dtype=float), 1) if x.shape[1] == 1 else (x, x.shape[1])
    if isinstance(x, (list, tuple, pd.Index)) and len(x) and all(isinstance(v, str) for v in x):
        names = tuple(x)
        if testbed is None:
            raise ConfigError(f"x={list(names)!r} are setting names: pass testbed=... as well")
        dup = next((s for i, s in enumerate(names) if s in names[:i]), None)
        if dup is not None:
            raise ConfigError(f"x names setting {dup!r} twice; give each in-distribution setting once")
        if isinstance(y, str) and y in names:
            raise ConfigError(f"y={y!r} is also among the x settings ({', '.join(names)}); "
                              "the shifted setting must differ from the in-distribution ones")
        return (names[0], 1) if len(names) == 1 else (names, len(names))
    if testbed is not None and isinstance(x, (list, tuple)) and not x:
        raise ConfigError("x is empty; give at least one in-distribution setting")
    if np.ndim(x) == 2:
        arr = np.asarray(x, dtype=float)
        return (arr[:, 0], 1) if arr.shape[1] == 1 else (arr, arr.shape[1])
    return x, 1


def _multi_points(
    x: Sequence[str] | np.ndarray | pd.DataFrame, y: str | ArrayLike, scale: str, testbed: Testbed | None,
    fit_on: str | Iterable[str] | None, fractions: bool | None = None,
) -> tuple[np.ndarray, np.ndarray, dict[str, object]]:
    """Scaled ``(xs (n, K), ys)`` of the models with all K + 1 accuracies, and provenance."""
    check_scale(scale)
    if testbed is None:
        names = tuple(map(str, x.columns)) if isinstance(x, pd.DataFrame) else None
        ax, ay = percent_arrays(x, y, fractions)
        for k in range(ax.shape[1]):
            check_accuracy_arrays(ax[:, k], ay, fractions=False)       # in percent now
        keep = np.isfinite(ax).all(axis=1) & np.isfinite(ay)
        info = {"models": tuple(str(i) for i in np.flatnonzero(keep)), "n_skipped": int((~keep).sum()),
                "fit_on": (), "x": names, "xa": ax[keep]}
        return transform(ax[keep], scale), transform(ay[keep], scale), info
    cols = [testbed.check_setting(s) for s in [*x, str(y)]]
    selectors = DEFAULT_FIT_ON if fit_on is None else ((fit_on,) if isinstance(fit_on, str) else tuple(fit_on))
    models = testbed.resolve(selectors)
    acc = testbed.accuracies.loc[models, cols]
    keep = acc.notna().all(axis=1)
    acc, sizes = acc[keep], testbed.sizes.loc[models, cols][keep]
    xs = np.column_stack([transform(acc[s], scale, sizes[s]) for s in cols[:-1]]).reshape(len(acc), len(x))
    info = {"models": tuple(acc.index), "n_skipped": int((~keep).sum()), "fit_on": selectors,
            "x": tuple(cols[:-1]), "y": cols[-1], "xa": acc[cols[:-1]].to_numpy()}
    return xs, transform(acc[cols[-1]], scale, sizes[cols[-1]]), info


def percent_arrays(x: ArrayLike | pd.DataFrame, y: ArrayLike, fractions: bool | None) -> tuple[np.ndarray, np.ndarray]:
    """``(x (n, K), y (n,))`` accuracy arrays of a plane fit in percent: one row of x per y
    value, and the fractions check of :func:`check_accuracy_arrays` over all of them at once."""
    ax = np.asarray(x, dtype=float)
    ay = np.asarray(y, dtype=float).ravel()
    if ax.ndim != 2 or ax.shape[0] != ay.size:
        rows = f"{ax.shape[0]} rows" if ax.ndim == 2 else f"shape {ax.shape}"
        raise DataError(f"x has {rows} and y {ay.size} values; give one row of x accuracies per model")
    both = check_percent(np.concatenate([ax.ravel(), ay]), fractions, "x and y", switches=False)
    return both[:ax.size].reshape(ax.shape), both[ax.size:]


def _fit_multi(x: object, y: object, scale: str, testbed: Testbed | None,
               fit_on: str | Iterable[str] | None, fractions: bool | None = None) -> MultiTrendFit:
    """OLS of ``t(y)`` on ``[1, t(x_1) .. t(x_K)]`` (see :class:`MultiTrendFit`)."""
    xs, ys, info = _multi_points(x, y, scale, testbed, fit_on, fractions)
    k = xs.shape[1]
    labels = info["x"] or tuple(f"x{i + 1}" for i in range(k))
    if len(ys) < k + 2:
        where = f" in testbed {testbed.name!r}" if testbed is not None else ""
        sel = ", ".join(info["fit_on"]) or "the given points"
        raise ConfigError(
            f"a plane of {info.get('y', 'y')!r} on {', '.join(map(repr, labels))} needs at least {k + 2} models "
            f"with all {k + 1} accuracies{where}; {sel} gave {len(ys)} ({info['n_skipped']} skipped for empty "
            f"cells); choose other models with fit_on / --fit-on, or fewer x settings")
    design = np.concatenate([np.ones((len(ys), 1)), xs], axis=1)
    if np.linalg.matrix_rank(design) < k + 1:
        raise DataError(f"the accuracies on {', '.join(map(repr, labels))} of the {len(ys)} fitted models are "
                        "collinear (one is constant or a combination of the others); drop an x or fit on other models")
    coef, se, r2, s = _ols(design, ys)
    xa = np.asarray(info["xa"])
    return MultiTrendFit(
        coefficients=tuple(float(c) for c in coef[1:]), intercept=float(coef[0]), r2=r2, n_models=len(ys),
        scale=scale, coefficient_se=tuple(float(v) for v in se[1:]), intercept_se=float(se[0]), residual_std=s,
        x=info["x"], y=info.get("y"), models=info["models"], fit_on=tuple(info["fit_on"]),
        n_skipped=int(info["n_skipped"]), x_ranges=tuple((float(c.min()), float(c.max())) for c in xa.T),
        xs=xs, ys=np.asarray(ys, dtype=float))


def _missing_reason(x: str, y: str) -> str:
    return f"no accuracy on {x} or {y}"


def _missing_excluded(info: dict[str, object]) -> tuple[tuple[str, int], ...]:
    """The ``excluded`` of a fit whose only left-out models are those lacking an accuracy."""
    n = int(info.get("n_skipped", 0))
    return ((_missing_reason(str(info.get("x", "x")), str(info.get("y", "y"))), n),) if n else ()


def _check_line_recipe(recipe: str) -> None:
    """``recipe`` names a recipe of one line (:data:`~shiftbench.analysis.recipes.FIT_RECIPES`)."""
    if recipe == "hinge":
        raise ConfigError("recipe 'hinge' is a trend around a pivot: fit_piecewise_trend(testbed, x, y, pivot) "
                          "or fit_shift(testbed, shift, recipe='hinge')")
    check_recipe("fit", recipe, option="recipe")


def _check_taori_fit_on(testbed: Testbed | None, fit_on: str | Iterable[str] | None) -> None:
    """The authors' recipe chooses its own models: a testbed, and ``fit_on`` left at STANDARD."""
    if testbed is None:
        raise ConfigError("recipe 'taori2020' chooses models by name, type and the figure's display rule: "
                          "pass the testbed first (arrays take recipe 'standard')")
    chosen = DEFAULT_FIT_ON if fit_on is None else ((fit_on,) if isinstance(fit_on, str) else tuple(fit_on))
    if tuple(chosen) != DEFAULT_FIT_ON:
        raise ConfigError(f"recipe 'taori2020' fits the STANDARD models the authors' figures fit; fit_on "
                          f"{', '.join(chosen)} asks for others: drop fit_on (--fit-on) or choose recipe 'standard'")


def taori_fit_models(testbed: Testbed, x: str, y: str, *, pivot: float | None = None,
                     pivot_model: str | None = None) -> tuple[list[str], tuple[tuple[str, int], ...]]:
    """The STANDARD models of ``testbed`` the published testbed's figure scripts fit a trend of
    ``y`` on ``x`` to (recipe ``taori2020``), and the others, counted per reason.

    A STANDARD model is left out when it lacks the ``x`` or ``y`` accuracy; when the figure does
    not show it: ``subsample`` in its name, or below the figure's display threshold
    (:data:`~shiftbench.analysis.recipes.TAORI_SHOWN`: ``val`` >= 55% unless the shift's figure
    has its own rule, ImageNet-A's ``val-on-imagenet-a-classes`` >= 75%); when its name holds
    ``aws`` or ``batch64`` (lower-cased, as the scripts match); and, around a ``pivot`` (percent),
    when it is the ``pivot_model`` or sits exactly at the pivot (the two lines take strict
    inequalities). Returns ``(kept models in testbed order, ((reason, count), ...))``; a testbed
    without the setting the display rule reads is a ConfigError naming it.
    """
    x, y = testbed.check_setting(x), testbed.check_setting(y)
    shown, minimum = TAORI_SHOWN.get(y, ("val", TAORI_MIN_X))
    if shown not in testbed.settings:
        raise ConfigError(f"recipe 'taori2020' needs setting {shown!r}, which testbed {testbed.name!r} lacks: the "
                          f"authors' figure of {y} shows and fits only models with {shown} >= {minimum:g}%; "
                          "choose recipe 'standard'")
    if "STANDARD" not in set(testbed.model_types):
        raise ConfigError(f"recipe 'taori2020' fits STANDARD models; testbed {testbed.name!r} has none (types: "
                          f"{', '.join(sorted(set(testbed.model_types)))}); choose recipe 'standard' with fit_on")
    acc = testbed.accuracies
    names = [f for f in TAORI_FIT_EXCLUDE if f != "subsample"]
    kept: list[str] = []
    reasons: dict[str, int] = {}
    for m in testbed.resolve(["type:STANDARD"]):
        low = m.lower()
        frag = next((f for f in names if f in low), None)
        if not (np.isfinite(acc.at[m, x]) and np.isfinite(acc.at[m, y])):
            why = _missing_reason(x, y)
        elif "subsample" in low:
            why = "'subsample' in the name (not shown)"
        elif not acc.at[m, shown] >= minimum:
            why = f"{shown} below {minimum:g}% (not shown)"
        elif frag is not None:
            why = f"'{frag}' in the name"
        elif pivot is not None and m == pivot_model:
            why = f"the pivot model {m}"
        elif pivot is not None and acc.at[m, x] == pivot:
            why = f"at the pivot accuracy {pivot:.2f}%"
        else:
            kept.append(m)
            continue
        reasons[why] = reasons.get(why, 0) + 1
    return kept, tuple(reasons.items())


# ---------------------------------------------------------------------------- public fits
@overload
def fit_trend(testbed: Testbed | None = None, x: str | None = None, y: str | ArrayLike | None = None,
              scale: str = "logit", *, fit_on: str | Iterable[str] | None = DEFAULT_FIT_ON,
              fractions: bool | None = None, recipe: str = "standard") -> TrendFit: ...
@overload
def fit_trend(testbed: Testbed | None = None, x: Sequence[str] | ArrayLike | None = None,
              y: str | ArrayLike | None = None, scale: str = "logit", *,
              fit_on: str | Iterable[str] | None = DEFAULT_FIT_ON,
              fractions: bool | None = None, recipe: str = "standard") -> TrendFit | MultiTrendFit: ...
def fit_trend(
    testbed: Testbed | None = None,
    x: str | Sequence[str] | ArrayLike | None = None,
    y: str | ArrayLike | None = None,
    scale: str = "logit",
    *,
    fit_on: str | Iterable[str] | None = DEFAULT_FIT_ON,
    fractions: bool | None = None,
    recipe: str = "standard",
) -> TrendFit | MultiTrendFit:
    """Least-squares trend ``t(acc_y) = slope * t(acc_x) + intercept`` (Taori et al. 2020, §3),
    or, over K >= 2 in-distribution test sets, the plane
    ``t(acc_y) = sum_k a_k t(acc_x_k) + b`` (Shi et al. 2023, "Effective robustness against
    natural distribution shifts for models with different training data", NeurIPS 2023).

    With one x (a name, a one-name sequence, a 1-D array) the result is the :class:`TrendFit`
    of the published protocol (a least-squares line on standard models; ``recipe="taori2020"``
    adds the authors' model filters). With K >= 2 x settings it is a :class:`MultiTrendFit` fitted on the
    selected models that have all K + 1 accuracies: it offers ``predict`` and the OLS
    ``prediction_interval`` / ``confidence_interval`` (and :func:`bootstrap_interval`), but no
    bootstrap band and no piecewise form. It needs at least K + 2 such models (ConfigError
    otherwise); a repeated x, or y among the x, is a ConfigError.

    Parameters
    ----------
    testbed:
        The :class:`~shiftbench.testbed.Testbed` holding the accuracies, always the first
        argument (as in every function that reads a testbed); ``None`` when ``x`` and ``y`` are
        arrays, which are then passed by keyword: ``fit_trend(x=[...], y=[...])``.
    x, y:
        Setting names of ``testbed`` (in-distribution and shifted; ``x`` one name or a sequence
        of K names), or, without a testbed, arrays of accuracies in percent (``x`` 1-D, or
        ``(n, K)`` / a K-column DataFrame; all finite rows are fitted).
    scale:
        ``"logit"`` (default), ``"probit"`` or ``"linear"``; see :mod:`shiftbench.analysis.scaling`.
    fit_on:
        Which models the line is fitted on: model types, tags or model names (a union; see
        :meth:`Testbed.resolve`). Default: ``STANDARD`` models (all of them: recipe ``standard``;
        the authors' own selection among them is recipe ``taori2020``). ``"all"`` fits on every model.
    fractions:
        For arrays: accuracies are percentages, so arrays whose values all lie in [0, 1] look
        like fractions and are refused (DataError) unless ``fractions=True`` (multiply them by
        100) or ``fractions=False`` (they are percentages below 1%). A testbed's tables were
        checked when read (:func:`~shiftbench.load_testbed`).
    recipe:
        Which of the ``fit_on`` models the line is fitted on (:data:`~shiftbench.analysis.recipes.FIT_RECIPES`):
        ``"standard"`` (default) all of them with both accuracies; ``"taori2020"`` the STANDARD
        models the authors' figure scripts fit (:func:`taori_fit_models`; one x, a testbed, and the
        default ``fit_on``). The result names its recipe and counts what it left out, per reason
        (``fit.recipe``, ``fit.excluded``).

    Examples
    --------
    >>> fit = fit_trend(x=[60, 70, 80], y=[45, 56, 67], scale="linear")
    >>> round(fit.slope, 3), round(fit.intercept, 3)
    (1.1, -0.21)
    """
    check_testbed_first("fit_trend", testbed, x, y)
    _check_line_recipe(recipe)
    x, k = x_settings(x, y, testbed)
    if k > 1:
        if recipe != "standard":
            raise ConfigError(f"recipe {recipe!r} fits one x; a plane over {k} x settings takes recipe 'standard'")
        return _fit_multi(x, y, scale, testbed, fit_on, fractions)
    if recipe == "taori2020":
        _check_taori_fit_on(testbed, fit_on)
        kept, excluded = taori_fit_models(testbed, str(x), str(y))
        xs, ys, info = _points(x, y, scale, testbed, [f"model:{m}" for m in kept], fractions)
        info.update(fit_on=DEFAULT_FIT_ON, n_skipped=dict(excluded).get(_missing_reason(str(x), str(y)), 0))
    else:
        xs, ys, info = _points(x, y, scale, testbed, fit_on, fractions)
        excluded = _missing_excluded(info)
    _require(len(xs), MIN_MODELS, info, testbed, "a trend fit")
    if np.ptp(xs) == 0:
        raise DataError(f"all {len(xs)} models have the same accuracy on {info.get('x', 'x')!r}; a trend needs spread")
    coef, se, r2, s = _ols(_linear_basis(xs), ys)
    xa = np.asarray(info["xa"])
    return TrendFit(
        slope=float(coef[1]), intercept=float(coef[0]), r2=r2, n_models=len(xs), scale=scale,
        slope_se=float(se[1]), intercept_se=float(se[0]), residual_std=s,
        x=info.get("x"), y=info.get("y"), models=info["models"], fit_on=tuple(info["fit_on"]),
        n_skipped=int(info["n_skipped"]), x_range=(float(xa.min()), float(xa.max())), xs=xs, ys=ys,
        recipe=recipe, excluded=excluded)


def fit_piecewise_trend(
    testbed: Testbed | None = None,
    x: str | ArrayLike | None = None,
    y: str | ArrayLike | None = None,
    pivot: float | str | None = None,
    scale: str = "logit",
    *,
    fit_on: str | Iterable[str] | None = DEFAULT_FIT_ON,
    fractions: bool | None = None,
) -> PiecewiseTrendFit:
    """Continuous piecewise-linear (hinge) trend with a knot at ``pivot`` (see module docstring):
    shiftbench's variant, recipe ``hinge``. The authors' ImageNet-A trend is two independent lines
    with the pivot model left out (recipe ``taori2020``, :func:`fit_two_line_trend`); the hinge
    instead fits every ``fit_on`` model, the pivot model included, with one continuous trend.

    ``pivot`` is an in-distribution accuracy in percent, or the name of a testbed model whose
    ``x`` accuracy is used - for ImageNet-A, the ResNet-50 it was filtered against
    (``pivot="resnet50"``). At least two fitted models are needed on each side of the pivot.
    There is no piecewise form over several x settings (ConfigError). ``fractions`` as in
    :func:`fit_trend` (for arrays; a numeric ``pivot`` is in percent either way). The testbed
    comes first, as in :func:`fit_trend`.
    """
    check_testbed_first("fit_piecewise_trend", testbed, x, y)
    if pivot is None:
        raise ConfigError("fit_piecewise_trend needs pivot=: an accuracy in percent or a model name")
    x, k = x_settings(x, y, testbed)
    if k > 1:
        raise ConfigError(f"a piecewise trend takes one x; got {k} x settings; drop the pivot or give one x")
    xs, ys, info = _points(x, y, scale, testbed, fit_on, fractions)
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
        pivot=pivot, slope_below=float(coef[1]), slope_below_se=float(se[1]),
        recipe="hinge", excluded=_missing_excluded(info))


def fit_two_line_trend(
    testbed: Testbed | None = None,
    x: str | None = None,
    y: str | None = None,
    pivot: float | str | None = None,
    scale: str = "logit",
) -> TwoLineTrendFit:
    """Taori et al.'s ImageNet-A trend (recipe ``taori2020``): two independent least-squares
    lines in ``scale`` coordinates, split at ``pivot``.

    ``pivot`` is a model of the testbed (ImageNet-A: ``"resnet50"``, the model it was filtered
    against; its ``x`` accuracy is the pivot, 91.86% on ``val-on-imagenet-a-classes``) or an
    accuracy in percent. The models are :func:`taori_fit_models`' (STANDARD; no ``aws``,
    ``batch64``, ``subsample`` in the name; shown in the figure: >= 75% on the ImageNet-A classes;
    the pivot model left out); the lower line is fitted on those strictly below the pivot, the
    upper one on those strictly above it, each needing at least 3 models. Effective robustness of
    a model at or below the pivot is measured against the lower line, above it against the upper
    (:class:`TwoLineTrendFit`), as the published testbed's ``plotting/paper_imagenet_a.py`` fits
    and ``plotting/paper_appendix_eff_robust.py`` measures it. The testbed comes first.

    >>> import shiftbench as sb
    >>> tb = sb.load_testbed("imagenet-reference")
    >>> fit = fit_two_line_trend(tb, "val-on-imagenet-a-classes", "imagenet-a", pivot="resnet50")
    >>> fit.below.n_models, fit.above.n_models, round(fit.pivot, 2)
    (33, 51, 91.86)
    """
    check_testbed_first("fit_two_line_trend", testbed, x, y)
    if testbed is None:
        raise ConfigError("fit_two_line_trend chooses models by name and type (the authors' recipe): pass the "
                          "testbed first: fit_two_line_trend(testbed, x, y, pivot)")
    if pivot is None:
        raise ConfigError("fit_two_line_trend needs pivot=: a model of the testbed (resnet50 for ImageNet-A) or "
                          "an accuracy in percent")
    x, k = x_settings(x, y, testbed)
    if k > 1:
        raise ConfigError(f"two lines around a pivot take one x; got {k} x settings")
    check_scale(scale)
    x, y = testbed.check_setting(str(x)), testbed.check_setting(str(y))
    pivot_model = None
    if isinstance(pivot, str):
        pivot_model = testbed.check_model(pivot)
        value = testbed.accuracies.at[pivot_model, x]
        if not np.isfinite(value):
            raise DataError(f"pivot model {pivot_model!r} has no accuracy on {x!r}; give the pivot in percent")
        pivot = float(value)
    pivot = float(pivot)
    if not 0 < pivot < 100:
        raise ConfigError(f"pivot={pivot:g} must be an accuracy in percent, strictly between 0 and 100")
    kept, excluded = taori_fit_models(testbed, x, y, pivot=pivot, pivot_model=pivot_model)
    frame, _ = testbed.paired(x, y, kept)
    lines = []
    for side, rows in (("below", frame[frame["x_acc"] < pivot]), ("above", frame[frame["x_acc"] > pivot])):
        if len(rows) < MIN_MODELS or np.ptp(rows["x_acc"].to_numpy()) == 0:
            raise DataError(f"the taori2020 line {side} the {pivot:.2f}% pivot of {y!r} on {x!r} needs at least "
                            f"{MIN_MODELS} models with spread in testbed {testbed.name!r}; the authors' selection "
                            f"gave {len(rows)} ({sum(n for _, n in excluded)} STANDARD models left out: "
                            + ", ".join(f"{n} {why}" for why, n in excluded) + "); choose recipe 'hinge'")
        lines.append(_line_fit(rows, x, y, scale))
    return TwoLineTrendFit(below=lines[0], above=lines[1], pivot=pivot, scale=scale, x=x, y=y,
                           pivot_model=pivot_model, fit_on=DEFAULT_FIT_ON,
                           n_skipped=dict(excluded).get(_missing_reason(x, y), 0), excluded=excluded)


def _line_fit(rows: pd.DataFrame, x: str, y: str, scale: str) -> TrendFit:
    """One least-squares line on the ``rows`` of :meth:`Testbed.paired` (a two-line fit's side)."""
    xs = np.asarray(transform(rows["x_acc"], scale, rows["x_n"]), dtype=float)
    ys = np.asarray(transform(rows["y_acc"], scale, rows["y_n"]), dtype=float)
    coef, se, r2, s = _ols(_linear_basis(xs), ys)
    xa = rows["x_acc"].to_numpy()
    return TrendFit(slope=float(coef[1]), intercept=float(coef[0]), r2=r2, n_models=len(xs), scale=scale,
                    slope_se=float(se[1]), intercept_se=float(se[0]), residual_std=s, x=x, y=y,
                    models=tuple(rows.index), fit_on=DEFAULT_FIT_ON, x_range=(float(xa.min()), float(xa.max())),
                    xs=xs, ys=ys, recipe="taori2020")


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
    # counts are taken ~32k draws at a time: the same draws and sums as one bincount per chunk,
    # but small buffers, reused, instead of two fresh (chunk x n) arrays per chunk whose page
    # faults cost more than the counting (bench/coef_ci.py: 100,000 resamples over 87 models)
    rows = max(1, 32768 // n)
    offsets = n * np.arange(rows)[:, None]
    for start in range(0, n_resamples, chunk):
        b = min(chunk, n_resamples - start)
        idx = rng.integers(0, n, size=(b, n), dtype=np.int16 if n < 2**15 else np.int64)
        sums = np.empty((b, per_model.shape[1]))
        for s in range(0, b, rows):
            block = idx[s:s + rows]
            counts = np.bincount((block + offsets[:len(block)]).ravel(), minlength=len(block) * n)
            np.matmul(counts.reshape(len(block), n), per_model, out=sums[s:s + len(block)])
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
    if isinstance(fit, TwoLineTrendFit):
        raise ConfigError("a two-line trend has a set of coefficients per line: bootstrap each line, "
                          "bootstrap_coefficients(fit.below) and bootstrap_coefficients(fit.above)")
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
    fit: TrendFit | TwoLineTrendFit,
    *,
    grid: ArrayLike | None = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int | None = 0,
) -> Band | TwoLineBand:
    """Pointwise percentile bootstrap band of ``fit`` (Efron & Tibshirani 1993, §13).

    For a :class:`TwoLineTrendFit` a :class:`TwoLineBand`: each line's band from resampling its own
    models (the published testbed's ImageNet-A figure does the same, with one seed for both).

    ``grid`` is a set of x accuracies in percent (default: 100 points spanning 0.1-99.9%).
    The band at each grid point is the central ``confidence`` interval of the refitted trends'
    predictions there. Vectorised and seeded: the same ``seed`` gives the same band.
    """
    check_confidence(confidence)
    if isinstance(fit, TwoLineTrendFit):          # each line resampled on its own models, as the authors do
        kw = dict(grid=grid, n_resamples=n_resamples, confidence=confidence, seed=seed)
        return TwoLineBand(bootstrap_band(fit.below, **kw), bootstrap_band(fit.above, **kw), fit.pivot)
    if isinstance(fit, MultiTrendFit):
        raise ConfigError(f"a bootstrap band runs along one x axis; the plane over {', '.join(fit.x_labels)} has "
                          "none: use bootstrap_interval(fit, points) or fit.prediction_interval(points)")
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


def bootstrap_interval(
    fit: TrendFit | MultiTrendFit | TwoLineTrendFit,
    acc_x: ArrayLike | pd.DataFrame,
    *,
    n: ArrayLike | None = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int | None = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval (percent) of where the fitted line or plane is at the given
    in-distribution accuracies (Efron & Tibshirani 1993, §13): the band of :func:`bootstrap_band`
    evaluated at points instead of along a grid, so it also serves a :class:`MultiTrendFit`
    (``acc_x`` of shape ``(m, K)`` or a DataFrame). Same ``seed``, same interval. For a
    :class:`TwoLineTrendFit`, each point's interval comes from the line on its side."""
    check_confidence(confidence)
    if isinstance(fit, TwoLineTrendFit):
        kw = dict(n=n, n_resamples=n_resamples, confidence=confidence, seed=seed)
        up = np.asarray(transform(acc_x, fit.scale, n)) > fit.pivot_scaled
        lo_b, hi_b = bootstrap_interval(fit.below, acc_x, **kw)
        lo_a, hi_a = bootstrap_interval(fit.above, acc_x, **kw)
        return np.where(up, lo_a, lo_b), np.where(up, hi_a, hi_b)
    coefs_t = np.ascontiguousarray(bootstrap_coefficients(fit, n_resamples, seed).T)
    if isinstance(fit, MultiTrendFit):
        table, phi = _is_table(acc_x), fit.basis(fit._scaled(acc_x, n))
    else:
        table, phi = np.ndim(acc_x) > 0, fit.basis(np.atleast_1d(np.asarray(transform(acc_x, fit.scale, n))))
    alpha = 1.0 - confidence
    bounds = np.empty((phi.shape[0], 2))
    for start in range(0, phi.shape[0], 16):
        bounds[start:start + 16] = _row_quantiles(phi[start:start + 16] @ coefs_t, [alpha / 2, 1 - alpha / 2])
    lo, hi = inverse(bounds[:, 0], fit.scale), inverse(bounds[:, 1], fit.scale)
    return (lo, hi) if table else (lo[0], hi[0])


#: Recht et al. (2019) draw their linear fits' 95% confidence regions from 100,000 bootstrap samples.
COEF_CI_RESAMPLES = 100_000


@dataclass(frozen=True)
class CoefficientIntervals:
    """Percentile bootstrap intervals of a fit's coefficients (:func:`coefficient_intervals`), in
    the fit's scaled coordinates. ``names`` follow :attr:`TrendFit.coef`: ``intercept, slope``
    (piecewise: ``intercept, slope_below, slope``; a plane: ``intercept`` and its x settings);
    ``n_kept`` is ``n_resamples`` less the degenerate resamples (a singular design) dropped."""

    names: tuple[str, ...]
    estimates: tuple[float, ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    confidence: float
    n_resamples: int
    n_kept: int
    seed: int | None
    scale: str

    def __getitem__(self, name: str) -> tuple[float, float]:
        """``(lower, upper)`` of the coefficient ``name``."""
        if name not in self.names:
            raise ConfigError(f"no coefficient {name!r}; the fit has {', '.join(self.names)}")
        i = self.names.index(name)
        return self.lower[i], self.upper[i]

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: ``{name: [lower, upper], ...}`` and how they were drawn (``fit --coef-ci --json``)."""
        return {**{n: [float(lo), float(hi)] for n, lo, hi in zip(self.names, self.lower, self.upper)},
                "confidence": float(self.confidence), "n_resamples": int(self.n_resamples),
                "n_kept": int(self.n_kept), "seed": self.seed, "method": "percentile bootstrap over models",
                "scale": self.scale}


def coefficient_intervals(
    fit: TrendFit | MultiTrendFit,
    *,
    n_resamples: int = COEF_CI_RESAMPLES,
    confidence: float = 0.95,
    seed: int | None = 0,
) -> CoefficientIntervals:
    """Percentile bootstrap intervals of the slope and intercept (every coefficient) of ``fit``,
    as Recht et al. report their linear fits (Recht, Roelofs, Schmidt & Shankar 2019, "Do ImageNet
    Classifiers Generalize to ImageNet?", ICML: 95% regions from 100,000 bootstrap samples, the
    default here): the models are resampled with replacement ``n_resamples`` times, each resample is
    refitted (:func:`bootstrap_coefficients`, the batched normal equations), and the interval of a
    coefficient is the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles of its
    refitted values (linear interpolation, ``np.quantile``'s default; Efron & Tibshirani 1993,
    §13.3). Same ``seed``, same intervals.

    Examples
    --------
    >>> fit = fit_trend(x=[60, 65, 70, 75, 80], y=[45, 52, 56, 62, 67], scale="linear")
    >>> ci = coefficient_intervals(fit, n_resamples=2000)
    >>> lo, hi = ci["slope"]
    >>> bool(lo < fit.slope < hi)
    True
    """
    check_confidence(confidence)
    coefs = bootstrap_coefficients(fit, n_resamples, seed)
    alpha = 1.0 - confidence
    lower, upper = np.quantile(coefs, [alpha / 2, 1 - alpha / 2], axis=0)
    if isinstance(fit, MultiTrendFit):
        names = ("intercept", *fit.x_labels)
    else:
        names = ("intercept", "slope_below", "slope") if isinstance(fit, PiecewiseTrendFit) else ("intercept", "slope")
    return CoefficientIntervals(
        names=names, estimates=tuple(float(c) for c in fit.coef), lower=tuple(float(v) for v in lower),
        upper=tuple(float(v) for v in upper), confidence=confidence, n_resamples=int(n_resamples),
        n_kept=int(coefs.shape[0]), seed=seed, scale=fit.scale)


def fit_note(fit: TrendFit | MultiTrendFit | TwoLineTrendFit) -> str:
    """One line on which models a fit used and which its recipe left out, per reason, e.g.
    ``recipe taori2020: 85 models (STANDARD); 2 left out: 1 'aws' in the name, 1 'batch64' in the name``."""
    text = f"recipe {fit.recipe}: {fit.n_models} models ({', '.join(fit.fit_on) or 'the given points'})"
    if isinstance(fit, TwoLineTrendFit):
        at = f"{fit.pivot_model}'s {fit.pivot:.2f}%" if fit.pivot_model else f"{fit.pivot:.2f}%"
        text += f" in two lines split at {at}: {fit.below.n_models} below, {fit.above.n_models} above"
    left = "; ".join(f"{n} {why}" for why, n in fit.excluded)
    return text + (f"; {fit.n_excluded} left out: {left}" if fit.excluded else "; none left out")


def as_frame(fit: TrendFit | MultiTrendFit) -> pd.DataFrame:
    """One-row DataFrame of :meth:`TrendFit.to_dict` (handy for tables of many shifts)."""
    return pd.DataFrame([fit.to_dict()])
