"""Metric informativeness: does a robustness metric tell model groups apart beyond ID accuracy?

Djolonga et al. (2021, "On Robustness and Transferability of Convolutional Neural Networks",
CVPR, §3, Fig. 4) call a metric *informative* when, on top of ImageNet (ID) accuracy, it helps a
classifier predict which group a model belongs to. Two recipes, named in :data:`METHODS` (and in
every ranking's ``method`` column, JSON and report caption):

``djolonga2021`` (the default; the paper's procedure, on shiftbench's groups)
    * **groups** - the testbed's model types, not the paper's: Djolonga et al. predict a model's
      *family*, so the procedure is theirs and the gains are not the paper's numbers;
    * **task** - one multinomial task over *all* groups at once: every model type (``STANDARD``,
      ``MORE_DATA``, ``LP_ADV``, ``ROBUST_INTV``, ...; ``UNKNOWN`` is no group) with at least
      ``min_models_per_group`` models evaluated on ``x`` and on the metric;
    * **classifier** - scikit-learn's ``LogisticRegression`` (multinomial, ``C = 1``, the
      ``newton-cholesky`` solver) on features standardised on each training fold: ``x`` accuracy
      alone, and ``x`` accuracy plus the metric (both in ``scale`` coordinates, logit by default).
      By default (``solver="newton"``) the same models are fitted by a batched Newton solver
      (:func:`fit_multinomial_batch`: every resample x fold of a setting in one batch; checked
      against scikit-learn to 1e-5 in the coefficients, and for identical predictions, hence
      accuracies, on the reference testbed); ``solver="sklearn"`` fits scikit-learn's, one at a time;
    * **score** - accuracy (percent) of the pooled out-of-fold predictions of a stratified
      ``n_folds``-fold cross-validation (scikit-learn's ``StratifiedKFold``);
    * **gain** - ``score(x + metric) - score(x)`` on the same folds; ``gain_mean`` / ``gain_sd``
      over ``n_resamples`` bootstrap resamples of the models (1,000 as in the paper; each group
      resampled with replacement to its own size, and a resampled model's copies share one fold,
      so none is both trained and tested on). ``gain`` is the gain on the original models,
      averaged over ``n_repeats`` fold splits.

``one-vs-standard`` (shiftbench's per-group variant)
    * one binary task per group: its models against the ``baseline`` type (``STANDARD``), so a gain
      reads as "this metric separates *this* intervention from standard training";
    * L2 logistic regression with ``class_weight="balanced"`` (a 12-model group against 1,208 is
      otherwise never predicted), scored by *balanced* accuracy, same folds, bootstrap and gain.
    * Its fits run through a batched Newton solver (:func:`fit_logistic_batch`, checked against
      scikit-learn's ``LogisticRegression`` to 1e-5 in the tests) rather than scikit-learn: on the
      same binary problems it is about two orders of magnitude faster (measured in docs/metrics.md),
      which is what lets the report rank every (group, setting) pair in seconds.

**Minimums.** A metric is computed only on the models that have it (and ``x``). A group enters a
metric's task only with ``min_models_per_group`` models on it, and the metric is dropped (listed in
``attrs["dropped"]`` with the reason) when fewer than two groups qualify (``djolonga2021``), or the
group or baseline falls short (``one-vs-standard``), or the task has fewer than ``min_models``
models in all: an ``int`` is a count, a ``float`` below 1 a fraction of the models of the same
groups that have ``x`` (default 0.5). So a metric measured on 21 + 26 of 70 + 87 models cannot top
a ranking on a ±12.6 s.d.; every row reports ``n_models`` and ``models_per_group``.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy import special

from shiftbench.analysis.recipes import DEFAULT_METHOD, DEFAULT_RESAMPLES, METHODS  # noqa: F401  (re-exported)
from shiftbench.analysis.robustness import check_top
from shiftbench.analysis.scaling import check_scale, transform
from shiftbench.errors import ConfigError, DataError, did_you_mean
from shiftbench.testbed import UNKNOWN_TYPE, Testbed

# METHODS (name -> (description, paper): the recipes informativeness_ranking implements), DEFAULT_METHOD
# and DEFAULT_RESAMPLES live in shiftbench.analysis.recipes: the CLI's --help shows them without numpy
ALL_GROUPS = "all"
DEFAULT_FOLDS = 5
DEFAULT_REPEATS = 10
DEFAULT_MIN_MODELS = 10            # per group (kept name: informativeness_groups' minimum)
DEFAULT_MIN_MODELS_PER_GROUP = DEFAULT_MIN_MODELS
DEFAULT_MIN_FRACTION = 0.5         # per metric: half of the groups' models that have x
SOLVER = "newton-cholesky"
#: ``djolonga2021`` fitting: ``"newton"`` (batched, :func:`fit_multinomial_batch`) or ``"sklearn"`` (the reference)
SOLVERS = ("newton", "sklearn")
DEFAULT_SOLVER = "newton"
RANKING_COLUMNS = ["method", "group", "setting", "rank", "gain_mean", "gain_sd", "gain", "score_id", "score_metric",
                   "n_models", "n_group", "n_baseline", "models_per_group"]


def check_method(method: str) -> str:
    """``method`` if it names a recipe of :data:`METHODS`, else a ConfigError with a did-you-mean."""
    if method not in METHODS:
        raise ConfigError(did_you_mean("informativeness method", method, sorted(METHODS), "informativeness_ranking"))
    return method


def check_solver(solver: str) -> str:
    """``solver`` if it is one of :data:`SOLVERS`, else a ConfigError with a did-you-mean."""
    if solver not in SOLVERS:
        raise ConfigError(did_you_mean("djolonga2021 solver", solver, list(SOLVERS), "informativeness_ranking"))
    return solver


def method_info(method: str) -> dict[str, str]:
    """``{"name", "description", "paper"}`` of a recipe (the ``method`` key of the JSON output)."""
    desc, paper = METHODS[check_method(method)]
    return {"name": method, "description": desc, "paper": paper}


@dataclass(frozen=True)
class Informativeness:
    """How much a metric adds to ID accuracy for telling a group from the baseline.

    Scores are balanced accuracies in percent; ``gain = score_metric - score_id`` on the
    original models (mean over fold splits); ``gain_mean`` / ``gain_sd`` over the bootstrap
    resamples, whose gains are kept in ``gains``.
    """

    score_id: float
    score_metric: float
    gain: float
    gain_mean: float
    gain_sd: float
    n_group: int
    n_baseline: int
    n_resamples: int
    gains: np.ndarray = field(repr=False, compare=False, default_factory=lambda: np.empty(0))

    def to_dict(self) -> dict[str, float | int]:
        """JSON-ready summary (without the per-resample gains)."""
        return {"score_id": self.score_id, "score_metric": self.score_metric, "gain": self.gain,
                "gain_mean": self.gain_mean, "gain_sd": self.gain_sd, "n_group": self.n_group,
                "n_baseline": self.n_baseline, "n_resamples": self.n_resamples}


# ---------------------------------------------------------------------------- batched solver
def fit_logistic_batch(features: np.ndarray, y: np.ndarray, weights: np.ndarray, *, C: float = 1.0,
                       balanced: bool = False, max_iter: int = 100, tol: float = 1e-8) -> np.ndarray:
    """Fit many weighted, standardised, L2-regularised logistic regressions at once.

    ``features`` is ``(n, p)`` (shared by all problems), ``y`` is ``(n,)`` in {0, 1} and
    ``weights`` is ``(P, n)``: problem ``k`` minimises, over ``b = (b_0, b_1..p)``,

        0.5 * sum_j (s_kj b_j)^2 + C * sum_i w_ki [log(1 + exp(eta_i)) - y_i eta_i],
        eta_i = b_0 + sum_j b_j x_ij,

    where ``s_kj`` is the ``w_k``-weighted s.d. of feature ``j``. This is exactly scikit-learn's
    ``LogisticRegression(C=C)`` on features standardised with ``StandardScaler`` fitted on
    ``w_k`` (a coefficient on standardised features is ``s_kj b_j``), solved by damped Newton
    steps for all problems together. ``balanced=True`` multiplies each weight by
    ``W / (2 W_c)`` (``W_c`` the problem's total weight of the model's class), scikit-learn's
    ``class_weight="balanced"`` with the weights counted as copies. Returns ``(P, p + 1)``
    coefficients on the *raw* features, intercept first.
    """
    n, p = features.shape
    design = np.concatenate([np.ones((n, 1)), features], axis=1)              # (n, q)
    q = p + 1
    total = weights.sum(axis=1)
    mean = (weights @ features) / total[:, None]
    var = (weights @ features**2) / total[:, None] - mean**2                  # the scaler sees the plain weights
    pen = np.concatenate([np.full((len(weights), 1), 1e-10), np.maximum(var, 0.0) + 1e-12], axis=1)  # (P, q)
    if balanced:
        pos = weights @ y
        per_class = np.where(y[None, :] > 0, pos[:, None], (total - pos)[:, None])
        weights = weights * total[:, None] / (2.0 * np.where(per_class > 0, per_class, 1.0))
    iu = np.triu_indices(q)
    outer = design[:, iu[0]] * design[:, iu[1]]                                # (n, q(q+1)/2)
    wy = weights * y

    def objective(eta: np.ndarray, b: np.ndarray) -> np.ndarray:
        softplus = np.maximum(eta, 0.0) + np.log1p(np.exp(-np.abs(eta)))      # log(1 + exp(eta)), stable
        return C * (weights * softplus - wy * eta).sum(axis=1) + 0.5 * (pen * b**2).sum(axis=1)

    beta = np.zeros((len(weights), q))
    eta = np.zeros((len(weights), n))
    f = objective(eta, beta)
    eye = np.eye(q)
    for _ in range(max_iter):
        mu = special.expit(eta)                                               # (P, n)
        grad = C * ((weights * mu - wy) @ design) + pen * beta
        sums = C * ((weights * mu * (1.0 - mu)) @ outer)
        hess = np.empty((len(weights), q, q))
        hess[:, iu[0], iu[1]] = sums
        hess[:, iu[1], iu[0]] = sums
        hess += pen[:, :, None] * eye
        step = np.linalg.solve(hess, grad[:, :, None])[:, :, 0]
        t = np.ones(len(weights))
        for _ in range(40):                                                   # backtracking where f rose
            trial = beta - t[:, None] * step
            eta_trial = trial @ design.T
            f_trial = objective(eta_trial, trial)
            worse = f_trial > f + 1e-12 * np.abs(f)
            if not worse.any():
                break
            t = np.where(worse, t / 2.0, t)
        beta, eta, f = trial, eta_trial, f_trial
        if np.max(np.abs(t[:, None] * step)) < tol:
            break
    return beta


def fit_multinomial_batch(features: np.ndarray, y: np.ndarray, weights: np.ndarray, *, C: float = 1.0,
                          max_iter: int = 100, tol: float = 1e-9) -> tuple[np.ndarray, np.ndarray]:
    """Fit many weighted, L2-regularised multinomial logistic regressions at once (``djolonga2021``).

    ``features`` is ``(B, n, d)`` (each problem its own features, used as given: standardise them
    first, as scikit-learn's pipeline would), ``y`` is ``(n,)`` in ``[0, K)`` and ``weights`` is
    ``(B, n)`` (nonnegative: bootstrap multiplicities times the training-fold mask). Problem ``b``
    is scikit-learn's ``LogisticRegression(C=C)`` fitted on the rows of positive weight (a weight
    counted as copies), knowing only the classes ``P_b`` present there, as scikit-learn does. With
    three or more it minimises, over ``W`` (``K x d``) and ``w0`` (``K``),

        C * sum_i w_i [logsumexp_{k in P_b}(eta_ik) - eta_i,y_i] + 0.5 * ||W||^2,
        eta_ik = w0_k + W_k . x_i

    (scikit-learn's symmetric parameterisation: every class has coefficients and the penalty makes
    them unique; the unpenalised intercepts are returned summing to zero). With two present classes
    scikit-learn fits one binary model ``b = W_c1 - W_c0`` with penalty ``0.5 ||b||^2``: that is
    this symmetric problem at ``C / 2``, so it is solved as such and ``W_c1 - W_c0`` (``w0_c1 -
    w0_c0``) is scikit-learn's ``coef_[0]`` (``intercept_[0]``). With one present class everything is
    zero. Absent classes get zero coefficients and a ``-inf`` intercept, so the ``argmax`` of
    :func:`multinomial_logits` (scikit-learn's ``predict``) never picks them.

    Damped Newton steps for all problems together (each Hessian is ``(K(d+1))^2``, built by batched
    products and solved with ``np.linalg.solve``) from the first problem's solution, each problem
    until its largest step is below ``tol``. Returns ``coef (B, K, d), intercept (B, K)``.
    """
    features = np.asarray(features, dtype=float)
    weights = np.asarray(weights, dtype=float)
    y = np.asarray(y, dtype=np.int64)
    n_problems, n, d = features.shape
    design = np.concatenate([np.ones((n_problems, n, 1)), features], axis=2)      # (B, n, q)
    theta, present = _solve_multinomial(design, y, weights, np.ones((n_problems, d)), C, max_iter, tol)
    return theta[:, :, 1:], np.where(present, theta[:, :, 0], -np.inf)


def multinomial_logits(features: np.ndarray, coef: np.ndarray, intercept: np.ndarray) -> np.ndarray:
    """``(B, n, K)`` class scores of :func:`fit_multinomial_batch`'s models on ``features (B, n, d)``;
    ``argmax`` over the last axis is scikit-learn's ``predict`` (absent classes score ``-inf``)."""
    return np.einsum("bnd,bkd->bnk", features, coef) + intercept[:, None, :]


def _solve_multinomial(design: np.ndarray, y: np.ndarray, weights: np.ndarray, pen_coef: np.ndarray, C: float,
                       max_iter: int, tol: float, chunk: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """``theta (B, K, 1 + d)`` (intercept first) and ``present (B, K)`` of :func:`fit_multinomial_batch`
    on ``design`` (``(B, n, q)``, or ``(n, q)`` shared by all problems, ones first), the coefficient
    ``j`` of problem ``b`` penalised by ``0.5 * pen_coef[b, j] * W_kj^2``: on raw features with
    ``pen_coef`` the squared s.d. that standardisation would divide by, this is the standardised fit
    in raw coordinates (``W_std = sd * W``), with one shared design for all problems."""
    n_problems = len(weights)
    n_classes = int(y.max()) + 1 if len(y) else 1
    present = (weights @ np.eye(n_classes)[y]) > 0                               # (B, K)
    theta = np.zeros((n_problems, n_classes, design.shape[-1]))
    if n_problems == 0:
        return theta, present

    def part(lo: int, hi: int) -> tuple:
        return (design if design.ndim == 2 else design[lo:hi], y, weights[lo:hi], present[lo:hi], pen_coef[lo:hi])

    # a strictly convex objective: Newton from any start reaches the same optimum, so every problem
    # starts from the first one's solution (the resamples and folds of one task are close)
    init = _newton_multinomial(*part(0, 1), C, max_iter, tol)
    for lo in range(0, n_problems, chunk):
        theta[lo:lo + chunk] = _newton_multinomial(*part(lo, lo + chunk), C, max_iter, tol, init)
    return theta, present


def _newton_multinomial(design: np.ndarray, y: np.ndarray, w: np.ndarray, present: np.ndarray, pen_coef: np.ndarray,
                        C: float, max_iter: int, tol: float, init: np.ndarray | None = None) -> np.ndarray:
    """:func:`_solve_multinomial` on one chunk of problems (each one iterated until its own step is
    below ``tol``; converged problems leave the batch)."""
    n_problems, n_classes = present.shape
    n, q = design.shape[-2:]
    shared = design.ndim == 2
    n_present = present.sum(axis=1)
    active = n_present >= 2
    theta = np.zeros((n_problems, n_classes, q)) if init is None else \
        np.where(present[:, :, None] & active[:, None, None], init, 0.0)
    out = theta.copy()
    # problems with fewer than two classes keep zeros; the others are solved below
    todo = np.flatnonzero(active)
    if not len(todo):
        return out
    # products are per-problem stacks (np.matmul, a small BLAS call each): one tall-skinny product
    # over all problems is threaded by BLAS and measured slower and erratic on a shared machine
    design_t = np.ascontiguousarray(np.swapaxes(design, -1, -2))                 # (.., q, n)
    iq = np.triu_indices(q)
    outer = design[..., iq[0]] * design[..., iq[1]]                              # (.., n, q(q+1)/2)
    square = np.zeros((q, q), dtype=np.int64)
    square[iq] = np.arange(len(iq[0]))
    ju = np.maximum(square, square.T).ravel()                                    # q x q entries from the triangle
    iu = np.triu_indices(n_classes)
    size = n_classes * q
    eye = np.eye(size)

    # per-problem state, subset together as problems converge
    present, n_present, theta = present[todo], n_present[todo], theta[todo]
    # two present classes: scikit-learn's binary model is the symmetric one at C / 2
    cw = np.where(n_present == 2, C / 2.0, C)[:, None] * w[todo]                 # (B, n)
    cwy = np.zeros((len(todo), n_classes, n))
    cwy[:, y, np.arange(n)] = cw                                                 # cw_i on the row's own class
    pm = present.astype(float)
    pen = np.empty((len(todo), n_classes, q))
    pen[:, :, 1:] = pen_coef[todo][:, None, :]                                   # coefficients penalised
    pen[:, :, 0] = 1.0 - pm                                                      # intercepts not (absent ones stay 0)
    neg = np.where(present, 0.0, -np.inf)[:, :, None]                            # (B, K, 1)
    if not shared:
        design, design_t, outer = design[todo], design_t[todo], outer[todo]

    target = np.matmul(cwy, design)                                                  # sum_i cw_i x_i on y_i's row

    def evaluate(theta: np.ndarray, dt: np.ndarray, cw: np.ndarray, neg: np.ndarray, target: np.ndarray,
                 pen: np.ndarray, pm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Objective and class probabilities ``(B, K, n)`` at ``theta``."""
        e = np.matmul(theta, dt)                                                     # (B, K, n)
        e += neg
        top = e.max(axis=1, keepdims=True)
        e -= top
        np.exp(e, out=e)
        total = e.sum(axis=1, keepdims=True)
        lse = (top + np.log(total))[:, 0, :]                                     # (B, n)
        # the intercepts are unique only up to a common shift over the present classes: the penalty
        # 0.5 * (sum of present intercepts)^2 pins it to zero without moving the optimum of anything else
        f = (cw * lse).sum(axis=1) - (target * theta).sum(axis=(1, 2)) + 0.5 * (pen * theta**2).sum(axis=(1, 2)) \
            + 0.5 * (pm * theta[:, :, 0]).sum(axis=1) ** 2
        e /= total
        return f, e

    f, p = evaluate(theta, design_t, cw, neg, target, pen, pm)
    for _ in range(max_iter):
        b = len(todo)
        cp = cw[:, None, :] * p                                                  # (B, K, n)
        grad = np.matmul(cp, design) - target + pen * theta
        grad[:, :, 0] += pm * (pm * theta[:, :, 0]).sum(axis=1, keepdims=True)
        # Hessian of the data term: sum_i cw_i (diag(p_i) - p_i p_i^T) (x) x_i x_i^T, upper class pairs
        pair = np.empty((b, len(iu[0]), n))
        for j, (k, l) in enumerate(zip(*iu)):
            np.multiply(cp[:, k, :], p[:, l, :], out=pair[:, j, :])
            if k == l:
                np.subtract(cp[:, k, :], pair[:, j, :], out=pair[:, j, :])
            else:
                np.negative(pair[:, j, :], out=pair[:, j, :])
        blocks = np.matmul(pair, outer)[:, :, ju].reshape(b, len(iu[0]), q, q)
        h = np.empty((b, n_classes, n_classes, q, q))
        h[:, iu[0], iu[1]] = blocks
        h[:, iu[1], iu[0]] = blocks
        h = h.transpose(0, 1, 3, 2, 4).reshape(b, size, size)
        h += pen.reshape(b, size, 1) * eye
        shift = np.zeros((b, n_classes, q))
        shift[:, :, 0] = pm
        shift = shift.reshape(b, size)
        h += shift[:, :, None] * shift[:, None, :]
        step = np.linalg.solve(h, grad.reshape(b, size, 1)).reshape(theta.shape)
        t = np.ones(b)
        for _ in range(50):                                                      # backtracking where f rose
            trial = theta - t[:, None, None] * step
            f_trial, p_trial = evaluate(trial, design_t, cw, neg, target, pen, pm)
            worse = f_trial > f + 1e-12 * np.abs(f)
            if not worse.any():
                break
            t = np.where(worse, t / 2.0, t)
        theta, f, p = trial, f_trial, p_trial
        moved = np.abs(t[:, None, None] * step).max(axis=(1, 2))
        done = moved < tol
        out[todo[done]] = theta[done]
        if done.all():
            break
        if done.mean() > 0.2:                                                    # drop the converged problems
            keep = ~done
            todo, theta, f, p = todo[keep], theta[keep], f[keep], p[keep]
            cw, cwy, pm, pen, neg, target = cw[keep], cwy[keep], pm[keep], pen[keep], neg[keep], target[keep]
            if not shared:
                design, design_t, outer = design[keep], design_t[keep], outer[keep]
    else:
        out[todo] = theta
    return out


def _stratified_folds(y: np.ndarray, n_folds: int, rng: np.random.Generator) -> np.ndarray:
    """A random fold in ``[0, n_folds)`` per model, each class spread evenly over the folds."""
    folds = np.empty(len(y), dtype=np.int64)
    for cls in (0, 1):
        idx = np.flatnonzero(y == cls)
        folds[idx] = rng.permutation(np.arange(len(idx)) % n_folds)
    return folds


def _stratified_counts(y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Bootstrap multiplicities: each class resampled with replacement to its own size."""
    counts = np.zeros(len(y))
    for cls in (0, 1):
        idx = np.flatnonzero(y == cls)
        counts[idx] = np.bincount(rng.integers(0, len(idx), len(idx)), minlength=len(idx))
    return counts


@dataclass(frozen=True)
class _Plan:
    """Per resample: model multiplicities and folds (shared by both feature sets)."""

    counts: np.ndarray   # (R, n)
    folds: np.ndarray    # (R, n)
    n_folds: int

    @property
    def train_weights(self) -> np.ndarray:
        """(R * K, n): each resample's multiplicities outside fold k."""
        k = np.arange(self.n_folds)
        train = self.folds[:, None, :] != k[None, :, None]
        return (self.counts[:, None, :] * train).reshape(-1, self.counts.shape[1])


def _plans(y: np.ndarray, n_resamples: int, n_folds: int, n_repeats: int, seed: int | None) -> tuple[_Plan, _Plan]:
    """The plan on the original models (``n_repeats`` fold splits) and the bootstrap plan."""
    rng = np.random.default_rng(seed)
    observed = _Plan(np.ones((n_repeats, len(y))),
                     np.stack([_stratified_folds(y, n_folds, rng) for _ in range(n_repeats)]), n_folds)
    boot = _Plan(np.stack([_stratified_counts(y, rng) for _ in range(n_resamples)]),
                 np.stack([_stratified_folds(y, n_folds, rng) for _ in range(n_resamples)]), n_folds)
    return observed, boot


def _cv_balanced_accuracy(features: np.ndarray, y: np.ndarray, plan: _Plan, C: float,
                          balanced: bool = True) -> np.ndarray:
    """Balanced accuracy (percent) of pooled out-of-fold predictions, one per resample."""
    coef = fit_logistic_batch(features, y, plan.train_weights, C=C, balanced=balanced)   # (R*K, q)
    r, n = plan.counts.shape
    eta = (coef[:, 0:1] + coef[:, 1:] @ features.T).reshape(r, plan.n_folds, n)
    oof = np.take_along_axis(eta, plan.folds[:, None, :], axis=1)[:, 0, :]    # each model from its test fold
    hit = (oof > 0) == (y > 0)
    w = plan.counts
    recall1 = (w * hit * y).sum(axis=1) / (w * y).sum(axis=1)
    recall0 = (w * hit * (1 - y)).sum(axis=1) / (w * (1 - y)).sum(axis=1)
    return 50.0 * (recall1 + recall0)


def _standardise(values: np.ndarray) -> np.ndarray:
    """Centre and scale columns once (conditioning only; each fold re-standardises)."""
    sd = values.std(axis=0)
    return (values - values.mean(axis=0)) / np.where(sd > 0, sd, 1.0)


# ---------------------------------------------------------------------------- djolonga2021: sklearn
def _stratified_bootstrap(y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Row indices of a bootstrap resample: each group resampled with replacement to its own size."""
    parts = []
    for cls in np.unique(y):
        idx = np.flatnonzero(y == cls)
        parts.append(idx[rng.integers(0, len(idx), len(idx))])
    return np.sort(np.concatenate(parts))


def _kfold_ids(y: np.ndarray, n_folds: int, random_state: int) -> np.ndarray:
    """The test fold of each model under scikit-learn's shuffled ``StratifiedKFold``."""
    from sklearn.model_selection import StratifiedKFold  # deferred: scikit-learn is slow to import

    ids = np.empty(len(y), dtype=np.int64)
    for k, (_, test) in enumerate(StratifiedKFold(n_folds, shuffle=True, random_state=random_state).split(y, y)):
        ids[test] = k
    return ids


def cv_accuracy(features: np.ndarray, y: np.ndarray, folds: np.ndarray, *, C: float = 1.0) -> float:
    """Accuracy (percent) of the pooled out-of-fold predictions of scikit-learn's multinomial
    ``LogisticRegression`` on features standardised per training fold; ``folds`` gives each row's
    test fold. The same as ``cross_val_predict(make_pipeline(StandardScaler(), LogisticRegression(C=C,
    solver="newton-cholesky")), features, y, cv=...)`` on those folds, without its per-call overhead."""
    from sklearn.linear_model import LogisticRegression  # deferred: scikit-learn is slow to import

    hits = 0
    for k in np.unique(folds):
        test = folds == k
        xtr, ytr = features[~test], y[~test]
        mean, sd = xtr.mean(axis=0), xtr.std(axis=0)
        sd = np.where(sd > 0, sd, 1.0)
        if len(np.unique(ytr)) < 2:
            pred = np.full(test.sum(), ytr[0])
        else:
            lr = LogisticRegression(C=C, solver=SOLVER, max_iter=1000).fit((xtr - mean) / sd, ytr)
            pred = lr.predict((features[test] - mean) / sd)
        hits += int((pred == y[test]).sum())
    return 100.0 * hits / len(y)


def cv_accuracy_batch(features: np.ndarray, y: np.ndarray, counts: np.ndarray, folds: np.ndarray, n_folds: int,
                      *, C: float = 1.0) -> np.ndarray:
    """:func:`cv_accuracy` for many resamples at once, by the solver of :func:`fit_multinomial_batch`.

    ``features`` is ``(n, d)`` and ``y`` ``(n,)`` for the original models; resample ``r`` takes
    model ``i`` ``counts[r, i]`` times (``(R, n)``, all ones for no resampling), every copy in test
    fold ``folds[r, i]`` (in ``[0, n_folds)``). Per resample and fold the features are standardised on
    the training copies and the model fitted on them, as :func:`cv_accuracy` does on the resampled
    rows (solved in raw coordinates with the standardisation folded into the penalty, one design for
    all); returns the ``(R,)`` accuracies (percent) of the pooled out-of-fold predictions, copies counted."""
    x = _standardise(np.asarray(features, dtype=float).reshape(len(y), -1))   # conditioning only
    n_resamples, n = counts.shape
    k = np.arange(n_folds)
    w = (counts[:, None, :] * (folds[:, None, :] != k[None, :, None])).reshape(-1, n)   # (R * F, n)
    total = w.sum(axis=1, keepdims=True)
    total = np.where(total > 0, total, 1.0)
    mean = (w @ x) / total                                                       # (P, d), the scaler's
    var = np.einsum("pn,pnd->pd", w, (x[None, :, :] - mean[:, None, :]) ** 2) / total
    sd = np.where(var > 0, np.sqrt(var), 1.0)
    design = np.concatenate([np.ones((n, 1)), x], axis=1)
    theta, present = _solve_multinomial(design, y, w, sd**2, C, max_iter=100, tol=1e-9)
    eta = np.matmul(theta, design.T)                                             # (P, K, n), raw coordinates
    eta[~present] = -np.inf                                                      # scikit-learn knows only these
    pred = np.zeros(eta[:, 0].shape, dtype=np.int64)
    best = eta[:, 0].copy()
    for c in range(1, eta.shape[1]):                                             # argmax, first on ties
        better = eta[:, c] > best
        pred[better] = c
        np.maximum(best, eta[:, c], out=best)
    pred = pred.reshape(n_resamples, n_folds, n)
    oof = np.take_along_axis(pred, folds[:, None, :], axis=1)[:, 0, :]           # each model from its test fold
    hits = (counts * (oof == y[None, :])).sum(axis=1)
    return 100.0 * hits / counts.sum(axis=1)


class _GroupScorer:
    """``djolonga2021`` on one set of models: resamples and folds drawn once from ``seed`` (so every
    metric on the same models gets the same ones); the ID-only scores are computed once per set.

    ``solver="newton"`` fits every resample x fold of a feature set in one batch
    (:func:`fit_multinomial_batch`); ``"sklearn"`` calls :func:`cv_accuracy` per resample. Both fit
    the same models on the same folds and standardisation, so their predictions agree."""

    def __init__(self, id_feature: np.ndarray, y: np.ndarray, *, n_resamples: int, n_folds: int, n_repeats: int,
                 C: float, seed: int | None, solver: str = DEFAULT_SOLVER) -> None:
        self.y, self.C, self.solver, self.n_folds = y, C, check_solver(solver), n_folds
        rng = np.random.default_rng(seed)
        base = int(rng.integers(2**31)) if seed is None else int(seed)
        self.observed = [(np.arange(len(y)), _kfold_ids(y, n_folds, base + r)) for r in range(n_repeats)]
        self.boot = []
        boot_counts, boot_folds = [], []
        for _ in range(n_resamples):
            rows = _stratified_bootstrap(y, rng)
            folds = _kfold_ids(y, n_folds, int(rng.integers(2**31)))
            self.boot.append((rows, folds[rows]))
            boot_counts.append(np.bincount(rows, minlength=len(y)))
            boot_folds.append(folds)
        # the same plans as multiplicities and folds of the original models (a model's copies share its fold)
        self.observed_plan = (np.ones((n_repeats, len(y))), np.stack([f for _, f in self.observed]))
        self.boot_plan = (np.stack(boot_counts).astype(float), np.stack(boot_folds))
        self.id_feature = id_feature[:, None]

    def _scores(self, features: np.ndarray, plan: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        return np.array([cv_accuracy(features[rows], self.y[rows], folds, C=self.C) for rows, folds in plan])

    def scores(self, metric: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Accuracies on the original models (one per fold split) and per resample, from the ID
        accuracy alone (``metric=None``) or with the metric."""
        feats = self.id_feature if metric is None else np.column_stack([self.id_feature[:, 0], metric])
        if self.solver == "sklearn":
            return self._scores(feats, self.observed), self._scores(feats, self.boot)
        counts = np.concatenate([self.observed_plan[0], self.boot_plan[0]])
        folds = np.concatenate([self.observed_plan[1], self.boot_plan[1]])
        acc = cv_accuracy_batch(feats, self.y, counts, folds, self.n_folds, C=self.C)
        return acc[:len(self.observed)], acc[len(self.observed):]


def _run_jobs(fn: Callable, jobs: list[tuple], n_jobs: int) -> Iterable:
    """``fn(*job)`` for each job, in order, on ``n_jobs`` processes (joblib) or in this one."""
    if n_jobs == 1:
        return (fn(*job) for job in jobs)
    from joblib import Parallel, delayed  # deferred: only for n_jobs > 1

    return Parallel(n_jobs=n_jobs, return_as="generator")(delayed(fn)(*job) for job in jobs)


def _score_with(scorer: _GroupScorer, metric: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    return scorer.scores(metric)


# ---------------------------------------------------------------------------- public API
def _check_counts(n_resamples: int, n_folds: int, n_repeats: int, C: float, class_weight: str | None) -> None:
    if class_weight not in ("balanced", None):
        raise ConfigError(f"class_weight={class_weight!r}: use 'balanced' (default) or None")
    if n_resamples < 1:
        raise ConfigError(f"n_resamples={n_resamples} must be at least 1 (1,000 is the default, as in the paper)")
    if n_folds < 2:
        raise ConfigError(f"n_folds={n_folds} must be at least 2 for cross-validation (5 is the default)")
    if n_repeats < 1:
        raise ConfigError(f"n_repeats={n_repeats} must be at least 1 (10 is the default)")
    if not C > 0:
        raise ConfigError(f"C={C!r} must be positive (the inverse L2 strength; 1.0 as in scikit-learn)")


class _Scorer:
    """``one-vs-standard`` scores for one set of models: the ID-only scores computed once and reused."""

    def __init__(self, id_feature: np.ndarray, y: np.ndarray, *, n_resamples: int, n_folds: int,
                 n_repeats: int, C: float, seed: int | None, class_weight: str | None) -> None:
        self.y, self.C, self.balanced = y.astype(float), C, class_weight == "balanced"
        self.observed, self.boot = _plans(y, n_resamples, n_folds, n_repeats, seed)
        self.id_feature = id_feature
        base = _standardise(id_feature[:, None])
        self.id_observed = _cv_balanced_accuracy(base, self.y, self.observed, C, self.balanced)
        self.id_boot = _cv_balanced_accuracy(base, self.y, self.boot, C, self.balanced)

    def score(self, metric: np.ndarray) -> Informativeness:
        both = _standardise(np.stack([self.id_feature, metric], axis=1))
        obs = _cv_balanced_accuracy(both, self.y, self.observed, self.C, self.balanced)
        boot = _cv_balanced_accuracy(both, self.y, self.boot, self.C, self.balanced)
        gains = boot - self.id_boot
        return Informativeness(
            score_id=float(self.id_observed.mean()), score_metric=float(obs.mean()),
            gain=float((obs - self.id_observed).mean()), gain_mean=float(gains.mean()),
            gain_sd=float(gains.std(ddof=1)) if len(gains) > 1 else 0.0,
            n_group=int(self.y.sum()), n_baseline=int(len(self.y) - self.y.sum()), n_resamples=len(gains),
            gains=gains)


def metric_informativeness(
    id_accuracy: ArrayLike,
    metric: ArrayLike,
    in_group: ArrayLike,
    *,
    n_resamples: int = 100,
    n_folds: int = DEFAULT_FOLDS,
    n_repeats: int = DEFAULT_REPEATS,
    C: float = 1.0,
    class_weight: str | None = "balanced",
    seed: int | None = 0,
) -> Informativeness:
    """``one-vs-standard`` for one metric: the gain in cross-validated balanced accuracy from adding
    ``metric`` to ``id_accuracy`` for telling a group from the baseline (module docstring).

    ``id_accuracy`` and ``metric`` are one value per model, used as given (transform them first,
    e.g. with :func:`~shiftbench.analysis.scaling.transform`); ``in_group`` is True for the models of
    the group and False for the baseline models. Pairs with a non-finite value are dropped.

    Examples
    --------
    >>> x = [70, 72, 74, 76, 78, 80] * 4
    >>> group = [0] * 12 + [1] * 12
    >>> metric = [0.0] * 12 + [1.0] * 12                   # separates the groups at equal ID accuracy
    >>> res = metric_informativeness(x, metric, group, n_resamples=20, n_folds=3)
    >>> res.score_id < 60, round(res.score_metric), res.gain > 40   # ID accuracy alone: chance level
    (True, 100, True)
    """
    _check_counts(n_resamples, n_folds, n_repeats, C, class_weight)
    x = np.asarray(id_accuracy, dtype=float).ravel()
    m = np.asarray(metric, dtype=float).ravel()
    g = np.asarray(in_group).ravel()
    if not (len(x) == len(m) == len(g)):
        raise DataError(f"id_accuracy, metric and in_group have different lengths ({len(x)}, {len(m)}, {len(g)})")
    if g.dtype.kind not in "biu" or not np.isin(g, (0, 1)).all():
        raise DataError("in_group must be booleans or 0/1 (True for the group's models, False for the baseline)")
    keep = np.isfinite(x) & np.isfinite(m)
    x, m, y = x[keep], m[keep], g[keep].astype(int)
    smallest = int(min(y.sum(), len(y) - y.sum()))
    if smallest < n_folds:
        raise DataError(f"{n_folds}-fold cross-validation needs at least {n_folds} models in each group; the smaller "
                        f"group has {smallest} (after dropping {int((~keep).sum())} with missing values); lower "
                        "n_folds or add models")
    return _Scorer(x, y, n_resamples=n_resamples, n_folds=n_folds, n_repeats=n_repeats, C=C, seed=seed,
                   class_weight=class_weight).score(m)


def informativeness_groups(testbed: Testbed, x: str = "val", *, baseline: str | None = "STANDARD",
                           min_models: int = DEFAULT_MIN_MODELS) -> list[str]:
    """Model types of ``testbed`` (not ``UNKNOWN``, which is no group) with at least ``min_models``
    models evaluated on ``x``, largest first (ties by name). With a ``baseline`` (``one-vs-standard``) the baseline
    is left out, and the list is empty when the baseline itself has fewer; with ``baseline=None``
    (``djolonga2021``) every such type is a group."""
    testbed.check_setting(x)
    types = testbed.model_types[testbed.accuracies[x].notna()].value_counts()
    if baseline is not None and types.get(baseline, 0) < min_models:
        return []
    ranked = sorted(types.items(), key=lambda item: (-item[1], str(item[0])))         # largest first, then by name
    return [str(t) for t, n in ranked if t not in (baseline, UNKNOWN_TYPE) and n >= min_models]


def _min_total(min_models: float, n_reference: int) -> int:
    """The per-metric minimum: a count, or a fraction (< 1) of ``n_reference`` models."""
    return math.ceil(min_models * n_reference) if min_models < 1 else int(min_models)


def _per_group(kinds: np.ndarray, order: Sequence[str]) -> str:
    counts = pd.Series(kinds).value_counts()
    return ", ".join(f"{g} {int(counts[g])}" for g in order if g in counts)


def informativeness_ranking(
    testbed: Testbed,
    *,
    method: str = DEFAULT_METHOD,
    x: str = "val",
    groups: str | Iterable[str] | None = None,
    baseline: str = "STANDARD",
    settings: Iterable[str] | None = None,
    scale: str = "logit",
    n_resamples: int = DEFAULT_RESAMPLES,
    n_folds: int = DEFAULT_FOLDS,
    n_repeats: int = DEFAULT_REPEATS,
    min_models_per_group: int = DEFAULT_MIN_MODELS_PER_GROUP,
    min_models: float = DEFAULT_MIN_FRACTION,
    C: float = 1.0,
    class_weight: str | None = "balanced",
    seed: int | None = 0,
    n_jobs: int = 1,
    on_step: Callable[[str], None] | None = None,
    solver: str = DEFAULT_SOLVER,
) -> pd.DataFrame:
    """Rank every setting of ``testbed`` by how much its accuracy adds to ``x`` accuracy for
    predicting model groups, by ``method`` (:data:`METHODS`; protocols in the module docstring).

    Parameters
    ----------
    method:
        ``"djolonga2021"`` (default): one multinomial task over all groups, scikit-learn's
        ``LogisticRegression``, cross-validated accuracy. ``"one-vs-standard"``: one binary task
        per group against ``baseline``, balanced accuracy.
    x:
        The in-distribution setting whose accuracy every classifier gets.
    groups:
        Model types to use; default every type with ``min_models_per_group`` models on ``x``
        (:func:`informativeness_groups`). ``djolonga2021`` needs two or more.
    baseline:
        The type every group is told from (``one-vs-standard`` only).
    settings:
        The metrics, as settings of the testbed (their accuracy in ``scale`` coordinates); default
        every setting but ``x``. Each is computed on the models that have it.
    min_models_per_group, min_models:
        Fewest models of a group on a metric for the group to enter its task; fewest models of the
        metric's task in all (an int, or a fraction below 1 of the same groups' models on ``x``).
        Metrics that fall short are dropped and listed in ``attrs["dropped"]`` with the reason.
    n_resamples, n_folds, n_repeats, C, class_weight, seed:
        Bootstrap resamples (1,000 as in the paper), cross-validation folds, fold splits of the
        point estimate, the inverse L2 strength, the class weighting (``one-vs-standard`` only) and
        the seed: metrics on the same models get the same resamples and folds (paired comparison).
    n_jobs:
        Processes for the ``djolonga2021`` fits (joblib; ``-1``: every core); the result does not
        depend on it.
    on_step:
        Called with the setting's name after each setting (for progress bars).
    solver:
        How ``djolonga2021`` fits its models: ``"newton"`` (default) solves every resample x fold of a
        setting in one batch (:func:`fit_multinomial_batch`, the same models as scikit-learn's to
        1e-5 and the same predictions), ``"sklearn"`` fits scikit-learn's ``LogisticRegression`` one
        at a time (the reference; on ``imagenet-reference`` about 15x slower, see
        ``bench/informativeness.py``).

    Returns
    -------
    DataFrame with one row per (group, setting) - ``group`` is ``"all"`` for ``djolonga2021`` -
    and columns ``method, group, setting, rank, gain_mean, gain_sd, gain, score_id, score_metric,
    n_models, n_group, n_baseline, models_per_group`` (scores and gains in points of accuracy,
    balanced for ``one-vs-standard``; ``n_group``/``n_baseline`` only for ``one-vs-standard``),
    sorted by group and rank (1 = most informative, by ``gain_mean``). ``attrs`` holds the
    parameters, ``method`` (:func:`method_info`), ``groups``, ``dropped``, ``skipped`` and ``seconds``.
    """
    start = time.perf_counter()
    check_method(method)
    check_scale(scale)
    check_solver(solver)
    if n_jobs == 0 or n_jobs < -1:
        raise ConfigError(f"n_jobs={n_jobs}: give a number of processes (>= 1) or -1 for every core")
    _check_counts(n_resamples, n_folds, n_repeats, C, class_weight)
    if min_models_per_group < n_folds:
        raise ConfigError(f"min_models_per_group={min_models_per_group} must be at least n_folds={n_folds}")
    if not (0 < min_models < 1 or (float(min_models).is_integer() and min_models >= 1)):
        raise ConfigError(f"min_models={min_models!r}: give a count (>= 1) or a fraction of the models (0 < f < 1)")
    testbed.check_setting(x)
    types = set(testbed.model_types)
    one_vs = method == "one-vs-standard"
    if one_vs and baseline not in types:
        raise ConfigError(did_you_mean("baseline model type", baseline, sorted(types), f"testbed {testbed.name!r}"))
    on_x = testbed.model_types[testbed.accuracies[x].notna()].value_counts().to_dict()
    if groups is None:
        chosen = informativeness_groups(testbed, x, baseline=baseline if one_vs else None,
                                        min_models=min_models_per_group)
    else:
        chosen = [groups] if isinstance(groups, str) else list(groups)
        allowed = types - {UNKNOWN_TYPE} - ({baseline} if one_vs else set())
        for g in chosen:
            if g not in allowed:
                raise ConfigError(did_you_mean("group", g, sorted(allowed), f"a model type of testbed {testbed.name!r}"
                                               + (f" other than {baseline}" if one_vs else "")))
    if not chosen or (not one_vs and len(chosen) < 2):
        need = f"a model type besides {baseline}" if one_vs else "two model types"
        raise DataError(f"{method}: testbed {testbed.name!r} has no {need} with min_models_per_group="
                        f"{min_models_per_group} models on {x!r} (types: {on_x}); lower min_models_per_group or add "
                        "models")
    metrics = [s for s in testbed.settings if s != x] if settings is None else \
        [testbed.check_setting(s) for s in settings]
    acc, sizes = testbed.accuracies, testbed.sizes
    kinds = testbed.model_types.to_numpy().astype(str)
    columns = list(dict.fromkeys([x, *metrics]))
    feats = np.column_stack([transform(acc[s], scale, sizes[s]) for s in columns])
    feats[~np.isfinite(acc[columns].to_numpy(dtype=float))] = np.nan
    col = {s: i for i, s in enumerate(columns)}
    id_ok = np.isfinite(feats[:, col[x]])
    rows: list[dict] = []
    pending: list[tuple[bytes, np.ndarray, dict]] = []
    dropped: list[dict] = []
    cache: dict[bytes, object] = {}
    kw = dict(n_resamples=n_resamples, n_folds=n_folds, n_repeats=n_repeats, C=C, seed=seed)
    tasks = [(ALL_GROUPS, chosen)] if not one_vs else [(g, [g, baseline]) for g in chosen]
    for s in metrics:
        values = feats[:, col[s]]
        for label, members in tasks:
            have = id_ok & np.isfinite(values) & np.isin(kinds, members)
            counts = pd.Series(kinds[have]).value_counts()
            short = {g: int(counts.get(g, 0)) for g in members if counts.get(g, 0) < min_models_per_group}
            used = [g for g in members if g not in short]
            use = have & np.isin(kinds, used)
            floor = _min_total(min_models, int(sum(on_x.get(g, 0) for g in used)))
            reason = None
            if (one_vs and short) or len(used) < 2:
                reason = (f"groups below min_models_per_group={min_models_per_group}: "
                          + ", ".join(f"{g} {n}" for g, n in short.items()))
            elif use.sum() < floor:
                reason = f"{int(use.sum())} models < min_models={floor}"
            elif np.ptp(values[use]) == 0:
                reason = "constant on its models"
            if reason is not None:
                dropped.append({"group": label, "setting": s, "n_models": int(use.sum()),
                                "models_per_group": _per_group(kinds[have], members), "reason": reason})
                continue
            key = (label + "|").encode() + use.tobytes()
            per_group = _per_group(kinds[use], used)
            if one_vs:
                y = (kinds[use] == label).astype(int)
                if key not in cache:
                    cache[key] = _Scorer(feats[use, col[x]], y, class_weight=class_weight, **kw)
                res = cache[key].score(values[use])
                row = {**res.to_dict(), "n_models": int(use.sum())}
            else:                                    # scored below, possibly on n_jobs processes
                y = pd.Categorical(kinds[use], categories=used).codes.astype(np.int64)
                if key not in cache:
                    cache[key] = _GroupScorer(feats[use, col[x]], y, solver=solver, **kw)
                pending.append((key, values[use], {"method": method, "group": label, "setting": s,
                                                   "models_per_group": per_group, "n_models": int(use.sum())}))
                continue
            rows.append({"method": method, "group": label, "setting": s, "models_per_group": per_group, **row})
        if on_step is not None and (one_vs or not pending or pending[-1][2]["setting"] != s):
            on_step(s)
    if pending:
        keys = list(dict.fromkeys(k for k, _, _ in pending))
        id_scores = dict(zip(keys, _run_jobs(_score_with, [(cache[k], None) for k in keys], n_jobs)))
        results = _run_jobs(_score_with, [(cache[k], v) for k, v, _ in pending], n_jobs)
        for (key, _, base), (obs, boot) in zip(pending, results):
            id_obs, id_boot = id_scores[key]
            gains = boot - id_boot
            rows.append({**base, "score_id": float(id_obs.mean()), "score_metric": float(obs.mean()),
                         "gain": float((obs - id_obs).mean()), "gain_mean": float(gains.mean()),
                         "gain_sd": float(gains.std(ddof=1)) if len(gains) > 1 else 0.0, "n_resamples": len(gains)})
            if on_step is not None:
                on_step(base["setting"])
    out = pd.DataFrame(rows, columns=[c for c in RANKING_COLUMNS if c != "rank"])
    for c in ("n_models", "n_group", "n_baseline"):
        out[c] = out[c].astype("Int64")
    if len(out):
        out["rank"] = out.groupby("group")["gain_mean"].rank(ascending=False, method="min").astype(int)
        order = {g: i for i, g in enumerate([t[0] for t in tasks])}
        out = out.sort_values(["group", "rank"], key=lambda c: c.map(order) if c.name == "group" else c, kind="stable")
    out = out.reindex(columns=RANKING_COLUMNS).reset_index(drop=True)
    if out.empty:
        shown = "; ".join(f"{d['setting']}: {d['reason']}" for d in dropped[:3])
        raise DataError(f"{method}: no metric of testbed {testbed.name!r} has enough models ({len(dropped)} dropped, "
                        f"e.g. {shown}); lower min_models_per_group ({min_models_per_group}) or min_models "
                        f"({min_models}) or add models")
    out.attrs.update(testbed=testbed.name, method=method_info(method), x=x, baseline=baseline if one_vs else None,
                     groups=chosen, scale=scale, n_resamples=n_resamples, n_folds=n_folds, n_repeats=n_repeats, C=C,
                     class_weight=class_weight if one_vs else None, seed=seed,
                     solver=None if one_vs else solver,
                     min_models_per_group=min_models_per_group, min_models=min_models, dropped=dropped,
                     skipped=[(d["group"], d["setting"]) for d in dropped], seconds=time.perf_counter() - start)
    return out


def with_method_columns(ranking: pd.DataFrame) -> pd.DataFrame:
    """``ranking`` with ``method_description`` and ``method_paper`` after ``method`` (the CSV form)."""
    info = ranking.attrs.get("method") or method_info(str(ranking["method"].iloc[0]))
    out = ranking.copy()
    at = list(out.columns).index("method") + 1
    out.insert(at, "method_description", info["description"])
    out.insert(at + 1, "method_paper", info["paper"])
    return out


def top_informative(ranking: pd.DataFrame, top: int = 10, groups: Sequence[str] | None = None) -> pd.DataFrame:
    """The ``top`` most informative settings of each group in an :func:`informativeness_ranking`."""
    check_top(top)
    frame = ranking if groups is None else ranking[ranking["group"].isin(list(groups))]
    out = frame.groupby("group", sort=False, group_keys=False).head(top).reset_index(drop=True)
    out.attrs.update(ranking.attrs)
    return out
