"""Metric informativeness: does a robustness metric tell model groups apart beyond ID accuracy?

Djolonga et al. (2021, "On Robustness and Transferability of Convolutional Neural Networks",
CVPR, §4) call a robustness metric *informative* when, on top of in-distribution (ID) accuracy,
it helps predict which group a model belongs to (e.g. trained on more data, adversarially
trained). shiftbench implements it as follows (every choice is a parameter):

* **task** - one binary task per group: the models of that type (``MORE_DATA``, ``LP_ADV``, ...)
  against the ``baseline`` type (``STANDARD``). One-vs-standard rather than one-vs-rest or
  multinomial, so a gain reads as "this metric separates *this* intervention from standard
  training" and is not diluted by the other groups;
* **features** - the ID accuracy alone, or the ID accuracy and the metric, both mapped to
  ``scale`` coordinates (logit by default, the coordinates of the trend; Taori et al. 2020) and
  standardised on each training fold (weighted mean and s.d., as scikit-learn's
  ``StandardScaler``). In logit coordinates a setting's effective robustness is an affine
  function of the two features, so "the setting's accuracy" and "its effective robustness" are
  the same metric here (they differ only through the L2 penalty);
* **classifier** - L2-regularised logistic regression (scikit-learn's ``LogisticRegression``
  objective, ``C = 1``, unpenalised intercept):
  ``min_b 0.5 ||b_1..p||^2 + C sum_i w_i [log(1 + exp(eta_i)) - y_i eta_i]``, with
  ``class_weight="balanced"`` (each class weighs half of the loss). Without it a small group
  (12 ``ROBUST_INTV`` against 1,208 ``STANDARD`` models in ``timm-reference``) is never
  predicted at all, and every metric scores a flat 50% balanced accuracy;
* **score** - *balanced* accuracy (the mean of the two recalls) of the pooled out-of-fold
  predictions of a stratified ``n_folds``-fold cross-validation. Balanced, because the groups are
  imbalanced (16 ``LP_ADV`` against 87 ``STANDARD`` models): plain accuracy would reward
  predicting "standard" everywhere;
* **gain** - ``score(ID acc + metric) - score(ID acc)``, in points of balanced accuracy
  (0-100). Both scores use the same folds and resample, so the gain is a paired difference;
* **uncertainty** - a stratified bootstrap over models (each group resampled with replacement to
  its own size, seeded): mean and s.d. of the gain over ``n_resamples`` resamples. A resampled
  model keeps one fold, so its copies never sit in both a training and a test fold. ``gain``
  itself is the gain on the original models, averaged over ``n_repeats`` random fold splits.

A model missing the setting (or the ID accuracy) is dropped for that setting; ``n_group`` and
``n_baseline`` report how many were used. Every resample and fold is one weighted problem of a
batched Newton solver (hand-written: a few matrix products per iteration for all problems at
once; the tests check it against scikit-learn's ``LogisticRegression``), so ranking the 213
settings of ``imagenet-reference`` takes seconds rather than the hours of a loop of sklearn fits.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy import special

from shiftbench.analysis.robustness import check_top
from shiftbench.analysis.scaling import check_scale, transform
from shiftbench.errors import ConfigError, DataError, did_you_mean
from shiftbench.testbed import UNKNOWN_TYPE, Testbed

DEFAULT_RESAMPLES = 100
DEFAULT_FOLDS = 5
DEFAULT_REPEATS = 10
DEFAULT_MIN_MODELS = 10
RANKING_COLUMNS = ["group", "setting", "rank", "gain_mean", "gain_sd", "gain", "score_id", "score_metric",
                   "n_group", "n_baseline"]


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


# ---------------------------------------------------------------------------- public API
def _check_counts(n_resamples: int, n_folds: int, n_repeats: int, C: float, class_weight: str | None) -> None:
    if class_weight not in ("balanced", None):
        raise ConfigError(f"class_weight={class_weight!r}: use 'balanced' (default) or None")
    if n_resamples < 1:
        raise ConfigError(f"n_resamples={n_resamples} must be at least 1 (100 is the default)")
    if n_folds < 2:
        raise ConfigError(f"n_folds={n_folds} must be at least 2 for cross-validation (5 is the default)")
    if n_repeats < 1:
        raise ConfigError(f"n_repeats={n_repeats} must be at least 1 (10 is the default)")
    if not C > 0:
        raise ConfigError(f"C={C!r} must be positive (the inverse L2 strength; 1.0 as in scikit-learn)")


class _Scorer:
    """Scores for one set of models: the ID-only scores are computed once and reused."""

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
    n_resamples: int = DEFAULT_RESAMPLES,
    n_folds: int = DEFAULT_FOLDS,
    n_repeats: int = DEFAULT_REPEATS,
    C: float = 1.0,
    class_weight: str | None = "balanced",
    seed: int | None = 0,
) -> Informativeness:
    """Gain in cross-validated balanced accuracy from adding ``metric`` to ``id_accuracy``.

    Djolonga et al. 2021, §4 (protocol in the module docstring). ``id_accuracy`` and ``metric``
    are one value per model, used as given (transform them first, e.g. with
    :func:`~shiftbench.analysis.scaling.transform`); ``in_group`` is True for the models of the
    group and False for the baseline models. Pairs with a non-finite value are dropped.

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


def informativeness_groups(testbed: Testbed, x: str = "val", *, baseline: str = "STANDARD",
                           min_models: int = DEFAULT_MIN_MODELS) -> list[str]:
    """Model types of ``testbed`` (other than ``baseline`` and ``UNKNOWN``, which is no group) with
    at least ``min_models`` models evaluated on ``x``, largest first; empty when the baseline
    itself has fewer."""
    testbed.check_setting(x)
    types = testbed.model_types[testbed.accuracies[x].notna()].value_counts()
    if types.get(baseline, 0) < min_models:
        return []
    return [str(t) for t, n in types.items() if t not in (baseline, UNKNOWN_TYPE) and n >= min_models]


def informativeness_ranking(
    testbed: Testbed,
    *,
    x: str = "val",
    groups: str | Iterable[str] | None = None,
    baseline: str = "STANDARD",
    settings: Iterable[str] | None = None,
    scale: str = "logit",
    n_resamples: int = DEFAULT_RESAMPLES,
    n_folds: int = DEFAULT_FOLDS,
    n_repeats: int = DEFAULT_REPEATS,
    min_models: int = DEFAULT_MIN_MODELS,
    C: float = 1.0,
    class_weight: str | None = "balanced",
    seed: int | None = 0,
    on_step: Callable[[str], None] | None = None,
) -> pd.DataFrame:
    """Rank every setting of ``testbed`` by how much its accuracy adds to ``x`` for telling each
    group from ``baseline`` (Djolonga et al. 2021, §4; protocol in the module docstring).

    Parameters
    ----------
    x:
        The in-distribution setting whose accuracy every classifier gets.
    groups:
        Model types to tell from ``baseline``; default every type with ``min_models`` models on
        ``x`` (:func:`informativeness_groups`).
    settings:
        The metrics, as settings of the testbed (their accuracy in ``scale`` coordinates); default
        every setting but ``x``. A (setting, group) pair with fewer than ``min_models`` models of
        the group or of the baseline is left out and listed in ``attrs["skipped"]``.
    n_resamples, n_folds, n_repeats, C, class_weight, seed:
        Bootstrap resamples, cross-validation folds, fold splits of the point estimate, the
        inverse L2 strength, the class weighting (module docstring) and the seed. The same seed gives every setting with the same
        models the same resamples and folds, so settings are compared on paired resamples.
    on_step:
        Called with the setting's name after each setting (for progress bars).

    Returns
    -------
    DataFrame with one row per (group, setting): ``group, setting, rank, gain_mean, gain_sd,
    gain, score_id, score_metric, n_group, n_baseline`` (scores and gains in points of balanced
    accuracy), sorted by group and rank (1 = most informative, by ``gain_mean``). ``attrs``
    holds the parameters, ``skipped`` and ``seconds``.
    """
    start = time.perf_counter()
    check_scale(scale)
    _check_counts(n_resamples, n_folds, n_repeats, C, class_weight)
    if min_models < n_folds:
        raise ConfigError(f"min_models={min_models} must be at least n_folds={n_folds}")
    testbed.check_setting(x)
    types = set(testbed.model_types)
    if baseline not in types:
        raise ConfigError(did_you_mean("baseline model type", baseline, sorted(types), f"testbed {testbed.name!r}"))
    if groups is None:
        chosen = informativeness_groups(testbed, x, baseline=baseline, min_models=min_models)
        if not chosen:
            counts = testbed.model_types[testbed.accuracies[x].notna()].value_counts().to_dict()
            raise DataError(f"testbed {testbed.name!r} has no model type besides {baseline} with {min_models} models "
                            f"on {x!r} (types: {counts}); lower min_models or add models")
    else:
        chosen = [groups] if isinstance(groups, str) else list(groups)
        for g in chosen:
            if g not in types or g == baseline:
                raise ConfigError(did_you_mean("group", g, sorted(types - {baseline}),
                                               f"a model type of testbed {testbed.name!r} other than {baseline}"))
    metrics = [s for s in testbed.settings if s != x] if settings is None else \
        [testbed.check_setting(s) for s in settings]
    acc, sizes = testbed.accuracies, testbed.sizes
    kinds = testbed.model_types.to_numpy().astype(str)
    columns = list(dict.fromkeys([x, *metrics]))
    feats = np.column_stack([transform(acc[s], scale, sizes[s]) for s in columns])
    feats[~np.isfinite(acc[columns].to_numpy(dtype=float))] = np.nan
    col = {s: i for i, s in enumerate(columns)}
    id_ok = np.isfinite(feats[:, col[x]])
    rows, skipped = [], []
    scorers: dict[tuple[str, bytes], _Scorer] = {}
    for s in metrics:
        for g in chosen:
            values = feats[:, col[s]]
            use = ((kinds == g) | (kinds == baseline)) & id_ok & np.isfinite(values)
            y = (kinds[use] == g).astype(int)
            if min(y.sum(), len(y) - y.sum()) < min_models or np.ptp(values[use]) == 0:
                skipped.append((g, s))
                continue
            key = (g, use.tobytes())
            if key not in scorers:
                scorers[key] = _Scorer(feats[use, col[x]], y, n_resamples=n_resamples, n_folds=n_folds,
                                       n_repeats=n_repeats, C=C, seed=seed, class_weight=class_weight)
            res = scorers[key].score(values[use])
            rows.append({"group": g, "setting": s, **res.to_dict()})
        if on_step is not None:
            on_step(s)
    out = pd.DataFrame(rows, columns=[c for c in RANKING_COLUMNS if c != "rank"] + ["n_resamples"])
    if len(out):
        out["rank"] = out.groupby("group")["gain_mean"].rank(ascending=False, method="min").astype(int)
        order = {g: i for i, g in enumerate(chosen)}
        out = out.sort_values(["group", "rank"], key=lambda c: c.map(order) if c.name == "group" else c)
    out = out.reindex(columns=RANKING_COLUMNS).reset_index(drop=True)
    out.attrs.update(testbed=testbed.name, x=x, baseline=baseline, groups=chosen, scale=scale,
                     n_resamples=n_resamples, n_folds=n_folds, n_repeats=n_repeats, C=C, class_weight=class_weight,
                     seed=seed, min_models=min_models, skipped=skipped, seconds=time.perf_counter() - start)
    return out


def top_informative(ranking: pd.DataFrame, top: int = 10, groups: Sequence[str] | None = None) -> pd.DataFrame:
    """The ``top`` most informative settings of each group in an :func:`informativeness_ranking`."""
    check_top(top)
    frame = ranking if groups is None else ranking[ranking["group"].isin(list(groups))]
    out = frame.groupby("group", sort=False, group_keys=False).head(top).reset_index(drop=True)
    out.attrs.update(ranking.attrs)
    return out
