"""Effective robustness on synthetic corruptions, and how well it predicts natural robustness.

Taori et al. (2020, §4, Figure 5) ask whether robustness to synthetic shifts (ImageNet-C's
corruptions) predicts robustness to natural ones. Per corruption setting ``c`` the trend
``t(acc_c) = slope * t(acc_x) + intercept`` is fitted on the standard models against the
in-distribution setting ``x`` (``val``) and every model's effective robustness
``rho_c = acc_c - beta_c(acc_x)`` is taken (percentage points). Then

* the **synthetic effective robustness** of a model is the mean of ``rho_c`` over all
  corruption settings (every corruption at every severity); a model missing any of them gets
  ``NaN`` so that all averages are over the same settings. A severity that some model lacks
  while it has the corruption's other severities is a gap in the data and is left out for
  every model (:func:`complete_severities`): in the reference testbed, the severity-1
  in-memory cells that equal clean accuracy;
* the **per-corruption** effective robustness is the mean of ``rho_c`` over the severities of
  one corruption;

and :func:`corruption_correlations` gives, per corruption and for the overall average,
Pearson's r with the effective robustness on a natural shift (e.g. ImageNetV2), over the
non-standard models.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from shiftbench.analysis.correlation import robustness_correlation
from shiftbench.analysis.trend import DEFAULT_FIT_ON, fit_trend
from shiftbench.errors import DataError, ShiftbenchError
from shiftbench.testbed import Testbed

#: ``imagenet-c.<corruption>.<severity>_in-memory``: ImageNet-C generated in memory (the
#: reference testbed's names and those of ``shiftbench eval``).
IMAGENET_C_PATTERN = r"^imagenet-c\.(?P<corruption>[a-z_]+)\.(?P<severity>\d)_in-memory$"
SYNTHETIC = "synthetic_er"
#: Types trained like the trend's models, so their effective robustness is ~0 by design.
STANDARD_LIKE = ("STANDARD", "LOW_ACCURACY_CNN")


def corruption_settings(testbed: Testbed, pattern: str = IMAGENET_C_PATTERN) -> dict[str, list[str]]:
    """Settings of ``testbed`` matching ``pattern`` (named groups ``corruption`` and
    ``severity``), grouped by corruption and sorted by severity."""
    found: dict[str, list[tuple[int, str]]] = {}
    rx = re.compile(pattern)
    for s in testbed.settings:
        m = rx.match(s)
        if m:
            found.setdefault(m["corruption"], []).append((int(m["severity"]), s))
    return {c: [s for _, s in sorted(v)] for c, v in sorted(found.items())}


def complete_severities(testbed: Testbed, settings: Mapping[str, Sequence[str]]
                        ) -> tuple[dict[str, list[str]], list[str]]:
    """``settings`` without the severities some model lacks although it has the corruption's
    other severities - a gap in the data, not a model left unevaluated - and the list of the
    settings left out. Averaging over the remaining severities keeps such models in every
    average instead of dropping them (the reference testbed's severity-1 in-memory cells that
    equal clean accuracy, see :func:`shiftbench.reference.imagenet.defective_cells`)."""
    have = testbed.accuracies.notna()
    kept: dict[str, list[str]] = {}
    left_out: list[str] = []
    for corruption, names in settings.items():
        names = [n for n in names if n in have.columns]
        keep = []
        for s in names:
            others = [o for o in names if o != s]
            gap = have[others].all(axis=1) & ~have[s] if others else pd.Series(False, index=have.index)
            (left_out if gap.any() else keep).append(s)
        if keep:
            kept[corruption] = keep
    return kept, left_out


def synthetic_effective_robustness(
    testbed: Testbed,
    x: str = "val",
    settings: Mapping[str, Sequence[str]] | None = None,
    scale: str = "logit",
    *,
    fit_on: str | Iterable[str] | None = DEFAULT_FIT_ON,
) -> pd.DataFrame:
    """Effective robustness per corruption and on average (see the module docstring).

    ``settings`` maps each corruption to its settings (default: :func:`corruption_settings`
    less the severities with gaps, :func:`complete_severities`). Returns a DataFrame indexed by
    model with ``model_type``, one column per corruption (mean over its severities),
    ``synthetic_er`` (mean over every setting, ``NaN`` unless the model has all of them) and
    ``n_settings``; ``attrs`` holds ``x``, ``scale``, ``settings`` and ``left_out`` (the
    settings with gaps; not the fits: pandas deep-copies ``attrs`` on every operation).
    """
    testbed.check_setting(x)
    left_out: list[str] = []
    if settings is None:
        settings, left_out = complete_severities(testbed, corruption_settings(testbed))
    else:
        settings = {c: list(v) for c, v in settings.items()}
    if not settings:
        raise DataError(f"testbed {testbed.name!r} has no corruption settings (e.g. imagenet-c.fog.3_in-memory)")
    per_setting: dict[str, pd.Series] = {}
    for corruption, names in settings.items():
        for s in names:
            fit = fit_trend(x, s, scale, testbed=testbed, fit_on=fit_on)
            # rho = acc_y - beta(acc_x), exactly as effective_robustness computes it
            pairs, _ = testbed.paired(x, s)
            pred = fit.predict(pairs["x_acc"].to_numpy(), pairs["x_n"].to_numpy())
            per_setting[s] = pd.Series(pairs["y_acc"].to_numpy() - pred, index=pairs.index)
    table = pd.DataFrame(per_setting).reindex(testbed.models)
    evaluated = table.notna().any(axis=1)
    out = pd.DataFrame({"model_type": testbed.model_types}).loc[evaluated]
    for corruption, names in settings.items():
        out[corruption] = table.loc[evaluated, names].mean(axis=1, skipna=False)
    out[SYNTHETIC] = table.loc[evaluated].mean(axis=1, skipna=False)
    out["n_settings"] = table.loc[evaluated].notna().sum(axis=1)
    out.index.name = "model"
    out.attrs.update(x=x, scale=scale, settings=settings, left_out=left_out)
    return out


def corruption_correlations(
    synthetic: pd.DataFrame,
    natural: pd.DataFrame,
    *,
    exclude_types: Iterable[str] = STANDARD_LIKE,
) -> pd.DataFrame:
    """Pearson (and Spearman) correlation of each corruption's effective robustness, and of the
    average ``synthetic_er``, with the natural shift's effective robustness (an
    :func:`~shiftbench.analysis.effective_robustness` table), over the models not of
    ``exclude_types``. One row per column, ``synthetic_er`` first; a correlation that cannot
    be computed has ``NaN`` and its reason in ``note``."""
    columns = [SYNTHETIC] + [c for c in synthetic.columns if c not in ("model_type", SYNTHETIC, "n_settings")]
    # plain frames: pandas would deep-copy the inputs' attrs (fits and all) on every operation
    natural = pd.DataFrame({"model_type": natural["model_type"].to_numpy(),
                            "effective_robustness": natural["effective_robustness"].to_numpy()}, index=natural.index)
    rows = []
    for col in columns:
        a = pd.DataFrame({"model_type": synthetic["model_type"].to_numpy(), "effective_robustness":
                          synthetic[col].to_numpy()}, index=synthetic.index)
        try:
            c = robustness_correlation(a, natural, exclude_types=list(exclude_types))
            rows.append({"corruption": col, "pearson_r": c.pearson_r, "pearson_p": c.pearson_p,
                         "spearman_rho": c.spearman_rho, "n_models": c.n_models, "note": ""})
        except ShiftbenchError as exc:
            rows.append({"corruption": col, "pearson_r": np.nan, "pearson_p": np.nan, "spearman_rho": np.nan,
                         "n_models": 0, "note": str(exc)})
    return pd.DataFrame(rows)
