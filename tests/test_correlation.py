"""Correlation of effective robustness between two shifts, against scipy.stats directly."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from shiftbench import testbed as tbmod
from shiftbench.analysis.correlation import Correlation, robustness_correlation
from shiftbench.analysis.robustness import effective_robustness
from shiftbench.errors import DataError, ShiftbenchError


def er_table(values: dict[str, float], types: dict[str, str] | None = None) -> pd.DataFrame:
    """A minimal effective-robustness table: ``effective_robustness`` and ``model_type`` by model."""
    types = types or {}
    frame = pd.DataFrame({
        "model_type": [types.get(m, "ROBUST_INTV") for m in values],
        "effective_robustness": list(values.values()),
    }, index=pd.Index(list(values), name="model"))
    return frame


A = {"m1": 1.0, "m2": 2.5, "m3": -0.5, "m4": 4.0, "m5": 0.2, "m6": 3.1, "only-a": 9.0}
B = {"m6": 2.0, "m5": 0.9, "m4": 3.0, "m3": -1.2, "m2": 0.4, "m1": 1.5, "only-b": -7.0}
COMMON = ["m1", "m2", "m3", "m4", "m5", "m6"]


def test_correlation_matches_scipy_on_aligned_common_models() -> None:
    res = robustness_correlation(er_table(A), er_table(B))
    a = np.array([A[m] for m in COMMON])
    b = np.array([B[m] for m in COMMON])
    pr, sr = stats.pearsonr(a, b), stats.spearmanr(a, b)
    assert res.pearson_r == pytest.approx(pr.statistic, rel=1e-12)
    assert res.pearson_p == pytest.approx(pr.pvalue, rel=1e-9)
    assert res.spearman_rho == pytest.approx(sr.statistic, rel=1e-12)
    assert res.spearman_p == pytest.approx(sr.pvalue, rel=1e-9)
    assert res.n_models == 6 and sorted(res.models) == COMMON


def test_correlation_aligns_by_model_name_not_position() -> None:
    # B is listed in reverse order; a positional pairing would give a different answer
    res = robustness_correlation(er_table(A), er_table(B))
    naive = stats.pearsonr(list(A.values())[:6], list(B.values())[:6]).statistic
    assert res.pearson_r != pytest.approx(naive)
    # hand-checkable: perfectly monotone related columns have Spearman 1
    mono = robustness_correlation(pd.Series({"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}),
                                  pd.Series({"d": 100.0, "c": 9.0, "b": 3.0, "a": 1.0}))
    assert mono.spearman_rho == pytest.approx(1.0)
    assert mono.pearson_r < 1.0


def test_hand_worked_pearson() -> None:
    # a = (1, 2, 3), b = (1, 3, 2): centred (-1, 0, 1), (-1, 1, 0) -> r = 1 / 2
    res = robustness_correlation(pd.Series({"x": 1.0, "y": 2.0, "z": 3.0}),
                                 pd.Series({"x": 1.0, "y": 3.0, "z": 2.0}))
    assert res.pearson_r == pytest.approx(0.5)
    assert res.spearman_rho == pytest.approx(0.5)


def test_missing_values_are_dropped_before_correlating() -> None:
    b = dict(B, m2=np.nan)
    res = robustness_correlation(er_table(A), er_table(b))
    kept = [m for m in COMMON if m != "m2"]
    assert sorted(res.models) == kept
    assert res.pearson_r == pytest.approx(stats.pearsonr([A[m] for m in kept], [B[m] for m in kept]).statistic)


def test_series_and_tables_give_the_same_answer() -> None:
    t = robustness_correlation(er_table(A), er_table(B))
    s = robustness_correlation(pd.Series(A), pd.Series(B))
    assert t.to_dict() == s.to_dict()


def test_type_filters_on_series_without_types_are_an_error() -> None:
    with pytest.raises(ShiftbenchError):
        robustness_correlation(pd.Series(A), pd.Series(B), exclude_types=["STANDARD"])


def test_exclude_types_drops_models_of_those_types() -> None:
    types = {"m1": "STANDARD", "m2": "STANDARD", "m5": "MORE_DATA"}
    res = robustness_correlation(er_table(A, types), er_table(B), exclude_types=["STANDARD"])
    kept = ["m3", "m4", "m5", "m6"]
    assert sorted(res.models) == kept and res.n_models == 4
    a, b = [A[m] for m in kept], [B[m] for m in kept]
    assert res.pearson_r == pytest.approx(stats.pearsonr(a, b).statistic, rel=1e-12)
    assert res.spearman_rho == pytest.approx(stats.spearmanr(a, b).statistic, rel=1e-12)


def test_model_types_keeps_only_those_types() -> None:
    types = {"m1": "STANDARD", "m2": "STANDARD", "m5": "MORE_DATA", "m6": "MORE_DATA", "m4": "MORE_DATA"}
    res = robustness_correlation(er_table(A, types), er_table(B), model_types=["MORE_DATA"])
    assert sorted(res.models) == ["m4", "m5", "m6"]


def test_fewer_than_three_common_models_is_a_data_error() -> None:
    with pytest.raises(DataError, match="at least 3") as info:
        robustness_correlation(pd.Series({"a": 1.0, "b": 2.0, "c": 0.0}), pd.Series({"a": 1.0, "b": 3.0, "d": 1.0}))
    assert "got 2" in str(info.value) and "\n" not in str(info.value)
    types = {m: "STANDARD" for m in ["m1", "m2", "m3", "m4"]}
    with pytest.raises(DataError, match="at least 3"):
        robustness_correlation(er_table(A, types), er_table(B), exclude_types=["STANDARD"])


def test_constant_effective_robustness_is_a_data_error() -> None:
    with pytest.raises(DataError, match="constant"):
        robustness_correlation(pd.Series({"a": 1.0, "b": 1.0, "c": 1.0}), pd.Series({"a": 1.0, "b": 2.0, "c": 0.0}))


def test_to_dict_is_json_ready() -> None:
    res = robustness_correlation(er_table(A), er_table(B))
    assert isinstance(res, Correlation)
    d = res.to_dict()
    assert set(d) == {"pearson_r", "pearson_p", "spearman_rho", "spearman_p", "n_models", "models"}
    json.dumps(d)


def test_correlation_of_effective_robustness_tables_from_a_testbed() -> None:
    rng = np.random.default_rng(0)
    n_std, n_other = 10, 8
    x = rng.uniform(55, 85, size=n_std + n_other)
    boost = np.r_[np.zeros(n_std), rng.uniform(0, 8, size=n_other)]
    frame = pd.DataFrame({
        "model": [f"s{i}" for i in range(n_std)] + [f"r{i}" for i in range(n_other)],
        "model_type": ["STANDARD"] * n_std + ["ROBUST_INTV"] * n_other,
        "val": x,
        "shift1": np.clip(x - 12 + boost + rng.normal(0, 0.5, x.size), 0, 100),
        "shift2": np.clip(x - 20 + 0.5 * boost + rng.normal(0, 0.5, x.size), 0, 100),
    })
    frame.loc[frame["model"] == "r3", "shift2"] = np.nan  # an empty cell
    tb = tbmod.Testbed.from_frame(frame)
    er1 = effective_robustness(tb, "val", "shift1", "linear", n_resamples=0)
    er2 = effective_robustness(tb, "val", "shift2", "linear", n_resamples=0)
    res = robustness_correlation(er1, er2, exclude_types=["STANDARD"])
    kept = [f"r{i}" for i in range(n_other) if i != 3]
    assert sorted(res.models) == kept
    a = er1.loc[kept, "effective_robustness"]
    b = er2.loc[kept, "effective_robustness"]
    assert res.pearson_r == pytest.approx(stats.pearsonr(a, b).statistic, rel=1e-12)
    assert res.spearman_rho == pytest.approx(stats.spearmanr(a, b).statistic, rel=1e-12)
    assert res.pearson_r > 0.8  # both shifts reward the same intervention
