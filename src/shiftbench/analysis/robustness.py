"""Effective and relative robustness (Taori et al. 2020, §2) and their rankings.

* **Effective robustness** of model ``f``: ``rho(f) = acc_y(f) - beta(acc_x(f))``, where
  ``beta`` is the trend fitted on the standard models (:func:`~shiftbench.analysis.fit_trend`),
  in percentage points. A model on the line has ``rho = 0``.
* **Relative robustness** of ``f`` derived from a baseline ``f0`` by an intervention:
  ``tau(f) = acc_y(f) - acc_y(f0)``, in percentage points.

The interval of ``rho`` combines the two sources of uncertainty conservatively: with the
Clopper-Pearson interval ``[y_lo, y_hi]`` of the model's shifted accuracy and the bootstrap band
``[b_lo, b_hi]`` of the trend at its in-distribution accuracy,
``rho in [y_lo - b_hi, y_hi - b_lo]``.

Against K >= 2 in-distribution test sets (Shi et al. 2023, NeurIPS: one per training
distribution, e.g. ImageNet and the test set of CLIP's own data), ``beta`` is the plane
``t^-1(sum_k a_k t(acc_x_k) + b)`` of a :class:`~shiftbench.analysis.trend.MultiTrendFit`, and
``[b_lo, b_hi]`` the percentile bootstrap interval of the plane at the model's point
(:func:`~shiftbench.analysis.trend.bootstrap_interval`): a band along one axis does not exist there.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from shiftbench.analysis.intervals import accuracy_interval
from shiftbench.analysis.trend import (
    DEFAULT_FIT_ON,
    Band,
    MultiTrendFit,
    TrendFit,
    bootstrap_band,
    bootstrap_interval,
    check_accuracy_arrays,
    check_testbed_first,
    fit_trend,
    percent_arrays,
    x_settings,
)
from shiftbench.errors import ConfigError, DataError
from shiftbench.testbed import Testbed

ER_COLUMNS = ["model_type", "x_acc", "y_acc", "predicted_y_acc", "effective_robustness",
              "er_low", "er_high", "in_fit"]


def effective_robustness(
    testbed: Testbed | None = None,
    x: str | Sequence[str] | ArrayLike | None = None,
    y: str | ArrayLike | None = None,
    scale: str = "logit",
    *,
    fit: TrendFit | MultiTrendFit | None = None,
    fit_on: str | Iterable[str] | None = DEFAULT_FIT_ON,
    models: Iterable[str] | None = None,
    confidence: float = 0.95,
    band: Band | None = None,
    n_resamples: int = 1000,
    seed: int | None = 0,
    fractions: bool | None = None,
) -> pd.DataFrame:
    """Effective robustness ``rho = acc_y - beta(acc_x)`` of every model, in percentage points.

    Parameters
    ----------
    x, y:
        Setting names of ``testbed``, or arrays of accuracies in percent (then ``fit`` is
        required, or the trend is fitted on all points). ``x`` may name K >= 2 in-distribution
        settings (or be an ``(n, K)`` array / K-column DataFrame): the trend is then the plane of
        :func:`fit_trend` over them (Shi et al. 2023; see the module docstring).
    scale:
        Scaling of the trend fitted here; a given ``fit`` keeps its own scale.
    fit:
        A trend from :func:`fit_trend` / :func:`fit_piecewise_trend`; fitted here when omitted.
    fit_on:
        Models the trend is fitted on when ``fit`` is omitted (default ``STANDARD``).
    models:
        Which models to report (default: every model with both accuracies).
    confidence, band, n_resamples, seed:
        The interval (see module docstring): Clopper-Pearson at ``confidence`` and a bootstrap
        band (given, or computed with ``n_resamples`` and ``seed``; ``n_resamples=0`` skips it).
        With several x there is no band to give: the bootstrap runs at the models' points.
    fractions:
        For arrays: as in :func:`fit_trend`, arrays whose accuracies all lie in [0, 1] are refused
        as fractions unless ``fractions=True`` (multiplied by 100) or ``False`` (percentages).

    Returns
    -------
    DataFrame indexed by model with columns ``model_type, x_acc, y_acc, predicted_y_acc,
    effective_robustness, er_low, er_high, in_fit``, in the testbed's order. With K >= 2 x,
    ``x_acc`` is replaced by one column ``x_acc:<setting>`` per x (``x_acc:x1``... for arrays).
    ``attrs`` holds the fit and the number of models skipped for an empty cell.
    """
    check_testbed_first("effective_robustness", testbed, x, y)
    x, k = x_settings(x, y, testbed)
    if k > 1 or isinstance(fit, MultiTrendFit):
        if testbed is None and not isinstance(x, str):          # in percent once, here at the boundary
            labels = x.columns if isinstance(x, pd.DataFrame) else None
            x, y = percent_arrays(x, y, fractions)
            x = pd.DataFrame(x, columns=labels) if labels is not None else x
        return _multi_effective_robustness(x, y, scale, testbed=testbed, fit=fit, fit_on=fit_on, models=models,
                                           confidence=confidence, band=band, n_resamples=n_resamples, seed=seed)
    fitted_here = fit is None
    if testbed is None:
        ax, ay = check_accuracy_arrays(x, y, fractions)
        if fit is None:
            fit = fit_trend(x=ax, y=ay, scale=scale, fractions=False)        # checked (and converted) above
        frame = pd.DataFrame({"x_acc": ax, "y_acc": ay, "x_n": np.nan, "y_n": np.nan,
                              "model_type": "UNKNOWN"})
        skipped = int((~(np.isfinite(ax) & np.isfinite(ay))).sum())
        frame = frame[np.isfinite(ax) & np.isfinite(ay)]
        frame.index = frame.index.astype(str)
    else:
        if fit is None:
            fit = fit_trend(testbed, x, y, scale, fit_on=fit_on)
        wanted = None if models is None else [testbed.check_model(m) for m in models]
        frame, skipped = testbed.paired(str(x), str(y), wanted)
    pred = fit.predict(frame["x_acc"].to_numpy(), frame["x_n"].to_numpy())
    er = frame["y_acc"].to_numpy() - pred
    y_lo, y_hi = accuracy_interval(frame["y_acc"], frame["y_n"], confidence)
    y_lo = np.where(np.isfinite(y_lo), y_lo, frame["y_acc"])
    y_hi = np.where(np.isfinite(y_hi), y_hi, frame["y_acc"])
    if band is None and n_resamples > 0:
        band = bootstrap_band(fit, n_resamples=n_resamples, confidence=confidence, seed=seed)
    b_lo, b_hi = band.at(frame["x_acc"].to_numpy(), frame["x_n"].to_numpy()) if band is not None else (pred, pred)
    out = pd.DataFrame({
        "model_type": frame["model_type"], "x_acc": frame["x_acc"], "y_acc": frame["y_acc"],
        "predicted_y_acc": pred, "effective_robustness": er,
        "er_low": y_lo - b_hi, "er_high": y_hi - b_lo,
        # array inputs carry no names: positions only identify the fit's models if it was fitted here
        "in_fit": frame.index.isin(list(fit.models)) if (testbed is not None or fitted_here) else False,
    }, index=frame.index)
    out.index.name = "model"
    out.attrs.update(fit=fit, n_skipped=skipped, x=fit.x, y=fit.y, scale=fit.scale)
    return out


def _multi_effective_robustness(
    x: object, y: str | ArrayLike, scale: str, *, testbed: Testbed | None, fit: MultiTrendFit | None,
    fit_on: str | Iterable[str] | None, models: Iterable[str] | None, confidence: float, band: Band | None,
    n_resamples: int, seed: int | None,
) -> pd.DataFrame:
    """:func:`effective_robustness` against the plane over K >= 2 in-distribution settings."""
    if band is not None:
        raise ConfigError("band= is a band along one x axis; with several x the interval bootstraps the plane "
                          "at each model's point (n_resamples=, seed=)")
    fitted_here = fit is None
    if fit is None:                       # array accuracies are in percent already (effective_robustness)
        fit = fit_trend(testbed, x, y, scale, fit_on=fit_on, fractions=False if testbed is None else None)
    elif not isinstance(fit, MultiTrendFit):
        raise ConfigError(f"fit is a trend on one x ({fit.x!r}); pass a fit over the same x settings, or none")
    if testbed is None:
        if isinstance(x, str):
            raise ConfigError(f"x={x!r} is a setting name: pass testbed=... as well")
        labels = tuple(map(str, x.columns)) if isinstance(x, pd.DataFrame) else fit.x_labels
        ax, ay = np.asarray(x, dtype=float), np.asarray(y, dtype=float).ravel()
        if ax.ndim != 2 or ax.shape[0] != ay.size:
            raise DataError(f"x has shape {ax.shape} and y {ay.size} values; give one row of x accuracies per model")
        for j in range(ax.shape[1]):
            check_accuracy_arrays(ax[:, j], ay, fractions=False)
        ycol = "y" if "y" not in labels else "_y"
        acc = pd.DataFrame(np.column_stack([ax, ay]), columns=[*labels, ycol])
        acc.index = acc.index.astype(str)
        sizes = pd.DataFrame(np.nan, index=acc.index, columns=acc.columns)
        types = pd.Series("UNKNOWN", index=acc.index)
    else:
        labels = (x,) if isinstance(x, str) else tuple(x)
        if fit.x is not None and tuple(labels) != tuple(fit.x):
            raise ConfigError(f"fit is a plane over {', '.join(fit.x)}, not over {', '.join(labels)}; "
                              "pass the same x settings, or no fit")
        ycol = testbed.check_setting(str(y))
        cols = [testbed.check_setting(s) for s in labels] + [ycol]
        idx = testbed.models if models is None else [testbed.check_model(m) for m in models]
        acc, sizes = testbed.accuracies.loc[idx, cols], testbed.sizes.loc[idx, cols]
        types = testbed.model_types.loc[idx]
    if len(labels) != fit.k:
        raise ConfigError(f"fit is a plane over {fit.k} x settings; got {len(labels)}")
    keep = acc.notna().all(axis=1)
    skipped = int((~keep).sum())
    acc, sizes, types = acc[keep], sizes[keep], types[keep]
    ax, xn = acc[list(labels)].to_numpy(), sizes[list(labels)].to_numpy()
    pred = fit.predict(ax, xn)
    er = acc[ycol].to_numpy() - pred
    y_lo, y_hi = accuracy_interval(acc[ycol], sizes[ycol], confidence)
    y_lo = np.where(np.isfinite(y_lo), y_lo, acc[ycol])
    y_hi = np.where(np.isfinite(y_hi), y_hi, acc[ycol])
    b_lo, b_hi = (bootstrap_interval(fit, ax, n=xn, n_resamples=n_resamples, confidence=confidence, seed=seed)
                  if n_resamples > 0 and len(acc) else (pred, pred))
    out = pd.DataFrame({"model_type": types, **{f"x_acc:{s}": acc[s] for s in labels}, "y_acc": acc[ycol],
                        "predicted_y_acc": pred, "effective_robustness": er,
                        "er_low": y_lo - b_hi, "er_high": y_hi - b_lo,
                        "in_fit": acc.index.isin(list(fit.models)) if (testbed is not None or fitted_here) else False},
                       index=acc.index)
    out.index.name = "model"
    out.attrs.update(fit=fit, n_skipped=skipped, x=tuple(labels), y=fit.y, scale=fit.scale)
    return out


def relative_robustness(
    testbed: Testbed,
    y: str,
    baseline: str | Mapping[str, str],
    *,
    models: Iterable[str] | None = None,
    x: str | None = None,
) -> pd.DataFrame:
    """Relative robustness ``tau(f) = acc_y(f) - acc_y(f0)`` against a baseline model ``f0``.

    ``baseline`` is one model name for all, or a mapping ``{model: its baseline}`` (e.g. each
    robust variant to the network it was derived from). With ``x``, the in-distribution change
    ``acc_x(f) - acc_x(f0)`` is reported beside it, so an intervention's shifted gain can be
    read against its in-distribution gain. The testbed comes first, as everywhere.
    """
    if not isinstance(testbed, Testbed):
        check_testbed_first("relative_robustness", testbed, y, baseline, data="y, baseline")
    testbed.check_setting(y)
    if x is not None:
        testbed.check_setting(x)
    if isinstance(baseline, str):
        testbed.check_model(baseline)
        chosen = [m for m in (testbed.models if models is None else models) if m != baseline]
        pairs = {m: baseline for m in chosen}
    else:
        pairs = dict(baseline)
        if models is not None:
            pairs = {m: pairs[m] for m in models if m in pairs}
    acc = testbed.accuracies
    rows = []
    for model, base in pairs.items():
        testbed.check_model(model)
        testbed.check_model(base)
        if not np.isfinite(acc.at[base, y]):
            raise DataError(f"baseline model {base!r} has no accuracy on {y!r}; choose a baseline evaluated there")
        row = {"model": model, "model_type": testbed.model_types[model], "baseline": base,
               "y_acc": acc.at[model, y], "baseline_y_acc": acc.at[base, y]}
        row["relative_robustness"] = row["y_acc"] - row["baseline_y_acc"]
        if x is not None:
            row.update(x_acc=acc.at[model, x], baseline_x_acc=acc.at[base, x])
            row["x_gain"] = row["x_acc"] - row["baseline_x_acc"]
        rows.append(row)
    out = pd.DataFrame(rows).set_index("model") if rows else pd.DataFrame(columns=["relative_robustness"])
    skipped = int(out["relative_robustness"].isna().sum()) if len(out) else 0
    out = out[out["relative_robustness"].notna()] if len(out) else out
    out.attrs.update(n_skipped=skipped, y=y, x=x)
    return out


def check_top(top: int) -> int:
    """``top`` if it is at least 1, else a ConfigError (the ``top`` of every ranking)."""
    if top < 1:
        raise ConfigError(f"top={top} must be at least 1")
    return top


def most_effectively_robust(
    er: pd.DataFrame,
    top: int = 10,
    *,
    model_types: Iterable[str] | None = None,
    exclude_fit: bool = False,
) -> pd.DataFrame:
    """The ``top`` models with the largest effective robustness in an :func:`effective_robustness`
    table, optionally only some model types or only models the trend was not fitted on."""
    check_top(top)
    frame = er
    if model_types is not None:
        frame = frame[frame["model_type"].isin(list(model_types))]
    if exclude_fit:
        frame = frame[~frame["in_fit"]]
    out = frame.sort_values("effective_robustness", ascending=False).head(top)
    out.attrs.update(er.attrs)
    return out


#: the rule :func:`trend_verdicts` applies, in words (for reports)
VERDICT_RULE = ("significantly above (below) the trend: inside the ID accuracy range the line was fitted on, "
                "above (below) the line's 95% prediction interval - the standard models' own scatter around it "
                "included - and with the model's interval (Clopper-Pearson and bootstrap band) entirely above "
                "(below) the line")


def trend_verdicts(er: pd.DataFrame, confidence: float = 0.95) -> pd.Series:
    """Per model of an :func:`effective_robustness` frame: ``"above"``, ``"below"``, ``"on"`` the
    trend, or ``"outside"`` (its ID accuracy lies outside the range the line was fitted on, where
    the line is an extrapolation), by :data:`VERDICT_RULE`. Against a plane over several x
    (:class:`~shiftbench.analysis.trend.MultiTrendFit`), "inside" means inside the fitted
    models' range on every x (a box around their points)."""
    fit: TrendFit | MultiTrendFit = er.attrs["fit"]
    if isinstance(fit, MultiTrendFit):
        ax = er[[f"x_acc:{s}" for s in er.attrs["x"]]].to_numpy()
        lo, hi = fit.prediction_interval(ax, confidence)
        ranges = np.asarray(fit.x_ranges)
        inside = pd.Series(((ax >= ranges[:, 0]) & (ax <= ranges[:, 1])).all(axis=1), index=er.index)
    else:
        lo, hi = fit.prediction_interval(er["x_acc"].to_numpy(), confidence)
        inside = (er["x_acc"] >= fit.x_range[0]) & (er["x_acc"] <= fit.x_range[1])
    above = inside & (er["er_low"] > 0) & (er["y_acc"] > hi)
    below = inside & (er["er_high"] < 0) & (er["y_acc"] < lo)
    verdict = pd.Series("on", index=er.index, name="verdict")
    verdict[above] = "above"
    verdict[below] = "below"
    verdict[~inside] = "outside"
    return verdict
