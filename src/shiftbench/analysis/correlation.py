"""Correlation of effective robustness between two shifts.

E.g. does robustness to synthetic corruptions predict robustness to natural shifts? Taori et
al. (2020, §4) find it mostly does not. Pearson's r and Spearman's rho with their two-sided
p-values (scipy.stats), over the models present in both tables.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from shiftbench.errors import ConfigError, DataError


@dataclass(frozen=True)
class Correlation:
    """Pearson and Spearman correlation of two effective-robustness columns."""

    pearson_r: float
    pearson_p: float
    spearman_rho: float
    spearman_p: float
    n_models: int
    models: tuple[str, ...] = field(repr=False)

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["models"] = list(self.models)
        return out


def _series(er: pd.DataFrame | pd.Series) -> pd.Series:
    return er["effective_robustness"] if isinstance(er, pd.DataFrame) else er


def robustness_correlation(
    er_a: pd.DataFrame | pd.Series,
    er_b: pd.DataFrame | pd.Series,
    *,
    model_types: Iterable[str] | None = None,
    exclude_types: Iterable[str] | None = None,
) -> Correlation:
    """Correlate effective robustness on two shifts over their common models.

    ``er_a`` / ``er_b`` are :func:`effective_robustness` tables (or Series indexed by model).
    ``model_types`` keeps only those types, ``exclude_types`` drops some (e.g. ``STANDARD``,
    whose effective robustness is ~0 by construction).
    """
    a, b = _series(er_a), _series(er_b)
    both = pd.concat([a.rename("a"), b.rename("b")], axis=1, join="inner").dropna()
    types = er_a["model_type"] if isinstance(er_a, pd.DataFrame) else None
    if types is None and (model_types is not None or exclude_types is not None):
        raise ConfigError("model_types / exclude_types need effective_robustness tables (with a "
                          "model_type column), not Series")
    if types is not None:
        if model_types is not None:
            both = both[types.reindex(both.index).isin(list(model_types))]
        if exclude_types is not None:
            both = both[~types.reindex(both.index).isin(list(exclude_types))]
    if len(both) < 3:
        raise DataError(f"a correlation needs at least 3 models with effective robustness on both shifts; got {len(both)}")
    if np.ptp(both["a"]) == 0 or np.ptp(both["b"]) == 0:
        raise DataError("effective robustness is constant on one shift; the correlation is undefined")
    pr = stats.pearsonr(both["a"], both["b"])
    sr = stats.spearmanr(both["a"], both["b"])
    return Correlation(float(pr.statistic), float(pr.pvalue), float(sr.statistic), float(sr.pvalue),
                       len(both), tuple(both.index))
