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
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from shiftbench.analysis.intervals import accuracy_interval
from shiftbench.analysis.trend import DEFAULT_FIT_ON, Band, TrendFit, bootstrap_band, check_accuracy_arrays, fit_trend
from shiftbench.errors import ConfigError, DataError
from shiftbench.testbed import Testbed

ER_COLUMNS = ["model_type", "x_acc", "y_acc", "predicted_y_acc", "effective_robustness",
              "er_low", "er_high", "in_fit"]


def effective_robustness(
    x: str | ArrayLike,
    y: str | ArrayLike,
    scale: str = "logit",
    *,
    testbed: Testbed | None = None,
    fit: TrendFit | None = None,
    fit_on: str | Iterable[str] | None = DEFAULT_FIT_ON,
    models: Iterable[str] | None = None,
    confidence: float = 0.95,
    band: Band | None = None,
    n_resamples: int = 1000,
    seed: int | None = 0,
) -> pd.DataFrame:
    """Effective robustness ``rho = acc_y - beta(acc_x)`` of every model, in percentage points.

    Parameters
    ----------
    x, y:
        Setting names of ``testbed``, or arrays of accuracies in percent (then ``fit`` is
        required, or the trend is fitted on all points).
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

    Returns
    -------
    DataFrame indexed by model with columns ``model_type, x_acc, y_acc, predicted_y_acc,
    effective_robustness, er_low, er_high, in_fit``, in the testbed's order. ``attrs`` holds
    the fit and the number of models skipped for an empty cell.
    """
    fitted_here = fit is None
    if testbed is None:
        ax, ay = check_accuracy_arrays(x, y)
        if fit is None:
            fit = fit_trend(ax, ay, scale)
        frame = pd.DataFrame({"x_acc": ax, "y_acc": ay, "x_n": np.nan, "y_n": np.nan,
                              "model_type": "UNKNOWN"})
        skipped = int((~(np.isfinite(ax) & np.isfinite(ay))).sum())
        frame = frame[np.isfinite(ax) & np.isfinite(ay)]
        frame.index = frame.index.astype(str)
    else:
        if fit is None:
            fit = fit_trend(x, y, scale, testbed=testbed, fit_on=fit_on)
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


def relative_robustness(
    y: str,
    baseline: str | Mapping[str, str],
    *,
    testbed: Testbed,
    models: Iterable[str] | None = None,
    x: str | None = None,
) -> pd.DataFrame:
    """Relative robustness ``tau(f) = acc_y(f) - acc_y(f0)`` against a baseline model ``f0``.

    ``baseline`` is one model name for all, or a mapping ``{model: its baseline}`` (e.g. each
    robust variant to the network it was derived from). With ``x``, the in-distribution change
    ``acc_x(f) - acc_x(f0)`` is reported beside it, so an intervention's shifted gain can be
    read against its in-distribution gain.
    """
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
    the line is an extrapolation), by :data:`VERDICT_RULE`."""
    fit: TrendFit = er.attrs["fit"]
    lo, hi = fit.prediction_interval(er["x_acc"].to_numpy(), confidence)
    inside = (er["x_acc"] >= fit.x_range[0]) & (er["x_acc"] <= fit.x_range[1])
    above = inside & (er["er_low"] > 0) & (er["y_acc"] > hi)
    below = inside & (er["er_high"] < 0) & (er["y_acc"] < lo)
    verdict = pd.Series("on", index=er.index, name="verdict")
    verdict[above] = "above"
    verdict[below] = "below"
    verdict[~inside] = "outside"
    return verdict
