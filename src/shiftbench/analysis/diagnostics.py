"""Linear-trend diagnostics: how well does in-distribution accuracy predict shifted accuracy?

Effective robustness is measured against a trend fitted on the standard models (Taori et al.
2020, §3), so it only means something where that trend holds. Miller et al. (2021, "Accuracy on
the Line", §3) measure this with the coefficient of determination of the fit in probit
coordinates and show shifts where the line holds (r² close to 1) next to shifts where it does
not. :func:`trend_diagnostics` fits every (in-distribution, shifted) pair under every scaling
(``logit``, ``probit``, ``linear``; :mod:`shiftbench.analysis.scaling`) and reports

    r² = 1 - sum_i (t(y_i) - fit_i)^2 / sum_i (t(y_i) - mean t(y))^2      (in scale coordinates)

with the slope and the number of models, and flags

* **weak** - ``r² < weak_r2`` (default 0.5): in-distribution accuracy explains less than half of
  the variance of the shifted accuracy across the fitted models, so the trend's prediction -
  and every model's effective robustness measured against it - is dominated by scatter that the
  trend does not model. (0.5 is a deliberately low bar: the natural ImageNet shifts the report
  analyses reach r² > 0.9; a shift below 0.5 needs a different baseline, not a footnote.)
* **better_scale** - another scaling whose r² is at least ``better_by`` (default 0.05, i.e. five
  more points of variance explained) above this row's: the trend is more linear in those
  coordinates, and the report's scaling is a poor choice for this shift.

A pair whose shift names a ``pivot`` model present in the testbed (ImageNet-A) is fitted with
shiftbench's continuous hinge (:func:`~shiftbench.analysis.fit_piecewise_trend`, recipe ``hinge``):
one fit, so one r² per scale to compare. The report draws the authors' two independent lines there
(recipe ``taori2020``), which have an r² per line instead. A pair that
cannot be fitted (fewer than 3 models) gets a row with ``error`` set instead of raising.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from shiftbench.analysis.scaling import SCALES, check_scale
from shiftbench.analysis.trend import DEFAULT_FIT_ON, fit_piecewise_trend, fit_trend
from shiftbench.errors import ConfigError, ShiftbenchError
from shiftbench.testbed import Testbed

DEFAULT_WEAK_R2 = 0.5
DEFAULT_BETTER_BY = 0.05
DIAGNOSTIC_COLUMNS = ["shift", "x", "y", "scale", "kind", "r2", "slope", "intercept", "n_models", "n_skipped",
                      "weak", "better_scale", "error"]


def _pairs(testbed: Testbed, pairs: Iterable[object] | None, x: str | None) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """Normalise ``pairs`` to ``(label, x, y, pivot models)``; default: every setting against ``x``."""
    if pairs is None:
        x = x if x is not None else ("val" if "val" in testbed.settings else None)
        if x is None:
            raise ConfigError(f"testbed {testbed.name!r} has no 'val' setting; pass x=... (--x) or pairs=...")
        testbed.check_setting(x)
        return [(y, x, y, ()) for y in testbed.settings if y != x]
    out = []
    for item in pairs:
        if hasattr(item, "x") and hasattr(item, "y"):          # a ShiftPair (report.shifts) or alike
            label = str(getattr(item, "label", item.y))
            out.append((label, str(item.x), str(item.y), tuple(getattr(item, "pivot", ()) or ())))
        elif isinstance(item, Sequence) and not isinstance(item, str) and len(item) in (2, 3):
            label, px, py = (item[1], *item) if len(item) == 2 else tuple(item)
            out.append((str(label), str(px), str(py), ()))
        else:
            raise ConfigError(f"pair {item!r}: give (x, y), (label, x, y) or a ShiftPair")
    if not out:
        raise ConfigError("pairs is empty; give at least one (x, y) pair, or None for every setting against x")
    for _, px, py, _ in out:
        testbed.check_setting(px)
        testbed.check_setting(py)
    return out


def trend_diagnostics(
    testbed: Testbed,
    pairs: Iterable[object] | None = None,
    *,
    x: str | None = None,
    scales: Sequence[str] = SCALES,
    weak_r2: float = DEFAULT_WEAK_R2,
    better_by: float = DEFAULT_BETTER_BY,
    fit_on: str | Iterable[str] | None = DEFAULT_FIT_ON,
) -> pd.DataFrame:
    """r², slope and model count of the trend of every pair under every scaling, with flags.

    Parameters
    ----------
    pairs:
        ``(x, y)`` or ``(label, x, y)`` tuples or :class:`~shiftbench.report.shifts.ShiftPair`
        objects (their ``pivot`` models give a piecewise fit); default every setting of the
        testbed against ``x``.
    x:
        The in-distribution setting when ``pairs`` is omitted (default ``val``).
    scales:
        Scalings to fit under (default logit, probit, linear).
    weak_r2, better_by:
        The thresholds of the ``weak`` and ``better_scale`` flags (module docstring).
    fit_on:
        The models the trends are fitted on (default ``STANDARD``), as in :func:`fit_trend`.

    Returns
    -------
    DataFrame, one row per (pair, scale): ``shift, x, y, scale, kind, r2, slope, intercept,
    n_models, n_skipped, weak, better_scale, error``. ``better_scale`` is the best other scaling
    beating this row's r² by ``better_by`` (else empty); ``error`` says why a fit failed.

    Examples
    --------
    >>> tb = Testbed.from_frame(pd.DataFrame({"model": list("abcd"), "model_type": ["STANDARD"] * 4,
    ...                                       "id": [60.0, 70.0, 80.0, 90.0], "ood": [40.0, 50.0, 60.0, 70.0]}))
    >>> d = trend_diagnostics(tb, [("id", "ood")], scales=("linear",))
    >>> float(d.loc[0, "r2"]), bool(d.loc[0, "weak"])
    (1.0, False)
    """
    for s in scales:
        check_scale(s)
    if not scales:
        raise ConfigError("scales is empty; use some of logit, probit, linear")
    if not 0 <= weak_r2 <= 1:
        raise ConfigError(f"weak_r2={weak_r2!r} must be in [0, 1] (r² below it is flagged weak)")
    if better_by < 0:
        raise ConfigError(f"better_by={better_by!r} must be non-negative")
    rows = []
    for label, px, py, pivots in _pairs(testbed, pairs, x):
        pivot = next((m for m in pivots if m in testbed.models), None)
        for scale in dict.fromkeys(scales):
            row: dict[str, object] = {"shift": label, "x": px, "y": py, "scale": scale}
            try:
                fit = (fit_piecewise_trend(testbed, px, py, pivot, scale, fit_on=fit_on) if pivot is not None
                       else fit_trend(testbed, px, py, scale, fit_on=fit_on))
                row.update(kind=fit.kind, r2=fit.r2, slope=fit.slope, intercept=fit.intercept,
                           n_models=fit.n_models, n_skipped=fit.n_skipped, error="")
            except ShiftbenchError as exc:
                row.update(kind="", r2=np.nan, slope=np.nan, intercept=np.nan, n_models=0, n_skipped=0,
                           error=str(exc))
            rows.append(row)
    out = pd.DataFrame(rows)
    out["weak"] = out["r2"] < weak_r2            # NaN (no fit) is not "weak": its error says why
    best = out.loc[out["r2"].notna()].sort_values("r2", ascending=False).drop_duplicates(["shift", "x", "y"])
    best = best.set_index(["shift", "x", "y"])[["scale", "r2"]].rename(columns={"scale": "best", "r2": "r2_best"})
    out = out.join(best, on=["shift", "x", "y"])
    beaten = (out["r2_best"] - out["r2"] >= better_by) & (out["best"] != out["scale"])
    out["better_scale"] = np.where(beaten, out["best"], "")
    out["n_models"] = out["n_models"].astype(int)
    out["n_skipped"] = out["n_skipped"].astype(int)
    out = out[DIAGNOSTIC_COLUMNS]
    out.attrs.update(testbed=testbed.name, scales=tuple(dict.fromkeys(scales)), weak_r2=weak_r2, better_by=better_by)
    return out


def r2_table(diagnostics: pd.DataFrame) -> pd.DataFrame:
    """The r² of a :func:`trend_diagnostics` frame as a shift x scale table (shifts in order)."""
    order = list(dict.fromkeys(diagnostics["shift"]))
    scales = list(dict.fromkeys(diagnostics["scale"]))
    wide = diagnostics.pivot_table(index="shift", columns="scale", values="r2", dropna=False, sort=False)
    return wide.reindex(index=order, columns=scales)


def flagged(diagnostics: pd.DataFrame, scale: str = "logit") -> pd.DataFrame:
    """The rows of ``scale`` that are weak or beaten by another scaling."""
    check_scale(scale)
    rows = diagnostics[diagnostics["scale"] == scale]
    return rows[rows["weak"] | (rows["better_scale"] != "")].reset_index(drop=True)
