"""Do robust models transfer better? Rank correlation of robustness metrics with transfer accuracy
per task group (Djolonga et al. 2021, "On Robustness and Transferability of Convolutional Neural
Networks", CVPR, §5 and its metrics x task-groups figure).

For a testbed that holds, per model, the robustness settings (an ID setting ``x`` and shifted
settings) and transfer results (``transfer:<task>`` cells, :mod:`shiftbench.studies.transfer`):

* **metrics** (one number per model): ID accuracy; accuracy on every other non-transfer setting
  (``acc:<setting>``); effective robustness on each of them (``er:<setting>``: accuracy minus the
  logit-scale trend fitted on the standard models, :func:`~shiftbench.analysis.robustness.effective_robustness`);
  the mean accuracy over every synthetic-corruption setting ``<base>+<corruption>.<severity>``
  (``acc:corruptions``, the quantity mCE ranks models by) and its effective robustness; plus any
  per-model columns the user passes (``extra``: ECE, pm-k, ...);
* **targets**: the mean transfer accuracy per task group (natural, specialized, structured, and
  the mean over all tasks; :func:`~shiftbench.analysis.transfer.transfer_group_means`);
* per (metric, group): **Spearman's rho** over the models that have both, with a 95% percentile
  **bootstrap interval over models** (resampling models with replacement, ``n_resamples`` times,
  ranks recomputed per resample), and the **partial** Spearman correlation with ID accuracy
  partialled out (the correlation of the rank residuals, ``(r_mt - r_mi r_ti) / sqrt((1 - r_mi²)(1 -
  r_ti²))`` on ranks; same bootstrap), which says whether the metric tells more about transfer
  than ImageNet (ID) accuracy already does. Cells with fewer than ``min_models`` models are NaN.

The paper's finding: robustness metrics track transfer on the *natural* group but say little about
the distant groups once ID accuracy is accounted for. Pure numpy/scipy/pandas.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from shiftbench.analysis.transfer import parse_transfer_setting, transfer_group_means
from shiftbench.errors import ConfigError, DataError

#: the suffix of a synthetic shift in a setting name: ``<base>+<corruption>.<severity>``
CORRUPTION_MARK = "+"
COLUMNS = ["metric", "kind", "setting", "group", "n_models", "rho", "low", "high",
           "partial_rho", "partial_low", "partial_high"]


@dataclass(frozen=True)
class TransferCorrelation:
    """Spearman correlations of robustness metrics with group-mean transfer accuracy.

    ``rows``: one row per (metric, group) with :data:`COLUMNS`; ``metrics``: the per-model metric
    table; ``targets``: the per-model group means; ``x``: the ID setting partialled out."""

    rows: pd.DataFrame
    metrics: pd.DataFrame
    targets: pd.DataFrame
    x: str
    n_resamples: int
    seed: int
    notes: list[str] = field(default_factory=list)

    def matrix(self, value: str = "rho") -> pd.DataFrame:
        """Metrics x groups of ``value`` (``rho``, ``partial_rho``, ``n_models``, ...), metrics in row order."""
        order = list(dict.fromkeys(self.rows["metric"]))
        groups = list(dict.fromkeys(self.rows["group"]))
        return self.rows.pivot(index="metric", columns="group", values=value).reindex(index=order, columns=groups)


def _ranks(a: np.ndarray) -> np.ndarray:
    return stats.rankdata(a, axis=-1)


def _pearson_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pearson correlation of each row of ``a`` with the same row of ``b`` (NaN for a constant row)."""
    a = a - a.mean(axis=-1, keepdims=True)
    b = b - b.mean(axis=-1, keepdims=True)
    den = np.sqrt((a * a).sum(axis=-1) * (b * b).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (a * b).sum(axis=-1) / np.where(den > 0, den, 1), np.nan)


def _partial(r_mt: np.ndarray, r_mi: np.ndarray, r_ti: np.ndarray) -> np.ndarray:
    den = np.sqrt((1 - r_mi ** 2) * (1 - r_ti ** 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 1e-12, (r_mt - r_mi * r_ti) / np.where(den > 1e-12, den, 1), np.nan)


def spearman_with_interval(metric: np.ndarray, target: np.ndarray, control: np.ndarray | None = None, *,
                           n_resamples: int = 1000, seed: int = 0, confidence: float = 0.95) -> dict[str, float]:
    """Spearman's rho of ``metric`` and ``target`` (1-D, same models, no NaN) with a percentile
    bootstrap interval over models; with ``control``, also the partial rho given ``control``.

    >>> r = spearman_with_interval(np.arange(10.0), np.arange(10.0) ** 2, n_resamples=0)
    >>> round(r["rho"], 6)
    1.0
    """
    m, t = np.asarray(metric, float), np.asarray(target, float)
    out = {"rho": float(stats.spearmanr(m, t).statistic), "low": np.nan, "high": np.nan,
           "partial_rho": np.nan, "partial_low": np.nan, "partial_high": np.nan}
    c = None if control is None else np.asarray(control, float)
    if c is not None:
        rm, rt, rc = _ranks(m), _ranks(t), _ranks(c)
        out["partial_rho"] = float(_partial(_pearson_rows(rm, rt), _pearson_rows(rm, rc), _pearson_rows(rt, rc)))
    if n_resamples > 0:
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, len(m), size=(n_resamples, len(m)))
        rm, rt = _ranks(m[idx]), _ranks(t[idx])
        boot = _pearson_rows(rm, rt)
        alpha = (1 - confidence) / 2
        out["low"], out["high"] = (float(v) for v in np.nanquantile(boot, [alpha, 1 - alpha]))
        if c is not None:
            rc = _ranks(c[idx])
            pboot = _partial(boot, _pearson_rows(rm, rc), _pearson_rows(rt, rc))
            out["partial_low"], out["partial_high"] = (float(v) for v in np.nanquantile(pboot, [alpha, 1 - alpha]))
    return out


class _Resampled:
    """Bootstrap resamples of one (target, control) pair of model columns, ranked once."""

    def __init__(self, target: np.ndarray, control: np.ndarray, n_resamples: int, seed: int) -> None:
        self.t, self.c, self.n_resamples = target, control, n_resamples
        self.idx = np.random.default_rng(seed).integers(0, len(target), size=(n_resamples, len(target))) if n_resamples else None
        if self.idx is not None:
            self.rt, self.rc = _ranks(target[self.idx]), _ranks(control[self.idx])
            self.r_tc = _pearson_rows(self.rt, self.rc)

    def correlate(self, metric: np.ndarray, *, partial: bool, confidence: float) -> dict[str, float]:
        out = spearman_with_interval(metric, self.t, self.c if partial else None, n_resamples=0)
        if self.idx is not None:
            rm = _ranks(metric[self.idx])
            boot = _pearson_rows(rm, self.rt)
            alpha = (1 - confidence) / 2
            out["low"], out["high"] = (float(v) for v in np.nanquantile(boot, [alpha, 1 - alpha]))
            if partial:
                pboot = _partial(boot, _pearson_rows(rm, self.rc), self.r_tc)
                out["partial_low"], out["partial_high"] = (float(v) for v in np.nanquantile(pboot, [alpha, 1 - alpha]))
        return out


def robustness_metrics(testbed: Any, x: str, *, extra: pd.DataFrame | Mapping[str, Mapping[str, float]] | None = None,
                       effective: bool = True) -> pd.DataFrame:
    """Per model (rows) the robustness metrics of the module docstring (columns, in this order:
    ``acc:<x>``, then per other setting ``acc:`` and ``er:``, then ``acc:corruptions`` /
    ``er:corruptions`` where corruption settings exist, then ``extra``'s columns)."""
    acc = testbed.accuracies
    if x not in acc.columns:
        raise ConfigError(f"ID setting {x!r} is not in testbed {testbed.name!r}; pass --x with one of its settings")
    shifted = [s for s in acc.columns if s != x and parse_transfer_setting(s) is None]
    out = pd.DataFrame(index=acc.index)
    out[f"acc:{x}"] = acc[x]
    corrupted = [s for s in shifted if CORRUPTION_MARK in s and s.split(CORRUPTION_MARK, 1)[0] == x]
    series: dict[str, pd.Series] = {s: acc[s] for s in shifted}
    if len(corrupted) >= 2:
        series["corruptions"] = acc[corrupted].mean(axis=1, skipna=False)
    for name, values in series.items():
        out[f"acc:{name}"] = values
        if effective:
            try:
                out[f"er:{name}"] = _er(testbed, x, name, values)
            except (ConfigError, DataError):  # too few standard models with both cells: no trend, no ER
                continue
    if extra is not None:
        frame = extra if isinstance(extra, pd.DataFrame) else pd.DataFrame(extra)
        for col in frame.columns:
            out[str(col)] = pd.to_numeric(frame[col], errors="coerce").reindex(out.index)
    return out


def _er(testbed: Any, x: str, name: str, values: pd.Series) -> pd.Series:
    """Effective robustness of every model on ``values`` against the trend on the standard models."""
    from shiftbench.analysis.robustness import effective_robustness  # deferred: loads scipy
    from shiftbench.testbed import Testbed  # deferred: loads pandas

    if name in testbed.accuracies.columns:
        tb, y = testbed, name
    else:  # a derived column (the corruption average): a two-column testbed with the same metadata
        tb = Testbed(pd.DataFrame({x: testbed.accuracies[x], "__y": values}), metadata=testbed.metadata,
                     name=testbed.name)
        y = "__y"
    er = effective_robustness(tb, x, y, n_resamples=0)
    return er["effective_robustness"].reindex(testbed.accuracies.index)


def robustness_transfer_correlation(
    testbed: Any,
    x: str,
    *,
    groups: Mapping[str, str] | pd.DataFrame | str | Path | None = None,
    protocol: str = "linear",
    extra: pd.DataFrame | None = None,
    metrics: Sequence[str] | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
    min_models: int = 5,
    confidence: float = 0.95,
) -> TransferCorrelation:
    """Spearman correlation (and partial correlation given ID accuracy on ``x``) of every robustness
    metric with the mean transfer accuracy of every task group, with bootstrap intervals over
    models (module docstring; Djolonga et al. 2021). ``metrics`` keeps only those metric columns."""
    table = robustness_metrics(testbed, x, extra=extra)
    if metrics is not None:
        unknown = [m for m in metrics if m not in table.columns]
        if unknown:
            raise ConfigError(f"unknown metric {unknown[0]!r}; metrics: {', '.join(table.columns[:12])} ...")
        table = table[[f"acc:{x}", *[m for m in metrics if m != f"acc:{x}"]]]
    targets = transfer_group_means(testbed, groups, protocol=protocol).drop(columns="n_tasks")
    targets = targets.reindex(table.index)
    if targets.notna().sum().max() < min_models:
        raise DataError(f"testbed {testbed.name!r}: fewer than {min_models} models have transfer results for every "
                        f"task of a group; run `shiftbench transfer` on more models")
    rows, notes = [], []
    control = table[f"acc:{x}"]
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for group in targets.columns:
        base = pd.DataFrame({"t": targets[group], "c": control}).dropna()
        # one set of resamples per group (common random numbers across metrics); the target's and
        # ID accuracy's resampled ranks are computed once and shared by every metric with the same models
        shared = _Resampled(base["t"].to_numpy(), base["c"].to_numpy(), n_resamples, seed) if len(base) else None
        for metric in table.columns:
            both = base.assign(m=table[metric].reindex(base.index)).dropna()
            row: dict[str, Any] = {"n_models": len(both)}
            if len(both) >= min_models and both["m"].nunique() > 1 and both["t"].nunique() > 1:
                is_control = metric == f"acc:{x}"
                if len(both) == len(base) and shared is not None:
                    row.update(shared.correlate(both["m"].to_numpy(), partial=not is_control, confidence=confidence))
                else:
                    row.update(spearman_with_interval(both["m"].to_numpy(), both["t"].to_numpy(),
                                                      None if is_control else both["c"].to_numpy(),
                                                      n_resamples=n_resamples, seed=seed, confidence=confidence))
            cells[(metric, group)] = row
    for metric in table.columns:
        kind, _, setting = metric.partition(":")
        for group in targets.columns:
            rows.append({"metric": metric, "kind": kind if setting else "extra", "setting": setting or metric,
                         "group": group, **cells[(metric, group)]})
    frame = pd.DataFrame(rows).reindex(columns=COLUMNS)
    if (frame["n_models"] < min_models).any():
        notes.append(f"cells with fewer than {min_models} models are left empty")
    return TransferCorrelation(frame, table, targets, x, n_resamples, seed, notes)
