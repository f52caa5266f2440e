"""Clopper-Pearson intervals against statsmodels' exact (beta) binomial interval."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from statsmodels.stats.proportion import proportion_confint

from shiftbench.analysis.intervals import accuracy_interval, clopper_pearson
from shiftbench.errors import ConfigError

CONFIDENCES = [0.5, 0.8, 0.9, 0.95, 0.99, 0.995, 0.999]


def reference(k: int, n: int, confidence: float) -> tuple[float, float]:
    lo, hi = proportion_confint(k, n, alpha=1 - confidence, method="beta")
    return float(lo), float(hi)


@pytest.mark.parametrize("confidence", CONFIDENCES)
def test_clopper_pearson_matches_statsmodels_on_a_grid(confidence: float) -> None:
    rng = np.random.default_rng(7)
    ns = np.concatenate([[1, 2, 3, 10, 100, 1109, 10_000, 50_000], rng.integers(1, 60_000, size=40)])
    ks = np.array([rng.integers(0, n + 1) for n in ns])
    lo, hi = clopper_pearson(ks, ns, confidence)
    ref_lo, ref_hi = proportion_confint(ks, ns, alpha=1 - confidence, method="beta")
    np.testing.assert_allclose(lo, ref_lo, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(hi, ref_hi, rtol=1e-9, atol=1e-12)


@settings(max_examples=150, deadline=None)
@given(n=st.integers(min_value=1, max_value=100_000), data=st.data(),
       confidence=st.sampled_from(CONFIDENCES))
def test_clopper_pearson_matches_statsmodels_for_any_count(n: int, data: st.DataObject, confidence: float) -> None:
    k = data.draw(st.integers(min_value=0, max_value=n))
    lo, hi = clopper_pearson(k, n, confidence)
    ref_lo, ref_hi = reference(k, n, confidence)
    assert float(lo) == pytest.approx(ref_lo, rel=1e-9, abs=1e-12)
    assert float(hi) == pytest.approx(ref_hi, rel=1e-9, abs=1e-12)
    assert 0.0 <= lo <= k / n <= hi <= 1.0


@pytest.mark.parametrize("n", [1, 5, 100, 10_000])
@pytest.mark.parametrize("confidence", [0.95, 0.995])
def test_zero_successes_has_lower_bound_zero(n: int, confidence: float) -> None:
    lo, hi = clopper_pearson(0, n, confidence)
    assert lo == 0.0
    # closed form for k = 0: upper = 1 - (alpha / 2) ** (1 / n)
    alpha = 1 - confidence
    assert float(hi) == pytest.approx(1 - (alpha / 2) ** (1 / n), rel=1e-9)
    assert float(hi) == pytest.approx(reference(0, n, confidence)[1], rel=1e-9)


@pytest.mark.parametrize("n", [1, 5, 100, 10_000])
@pytest.mark.parametrize("confidence", [0.95, 0.995])
def test_all_successes_has_upper_bound_one(n: int, confidence: float) -> None:
    lo, hi = clopper_pearson(n, n, confidence)
    assert hi == 1.0
    alpha = 1 - confidence
    assert float(lo) == pytest.approx((alpha / 2) ** (1 / n), rel=1e-9)
    assert float(lo) == pytest.approx(reference(n, n, confidence)[0], rel=1e-9)


def test_interval_widens_with_confidence_and_narrows_with_n() -> None:
    lo95, hi95 = clopper_pearson(700, 1000, 0.95)
    lo995, hi995 = clopper_pearson(700, 1000, 0.995)
    assert lo995 < lo95 < 0.7 < hi95 < hi995
    lo_big, hi_big = clopper_pearson(7000, 10_000, 0.95)
    assert hi_big - lo_big < hi95 - lo95


def test_default_confidence_is_95_percent() -> None:
    np.testing.assert_allclose(clopper_pearson(30, 80), clopper_pearson(30, 80, 0.95))
    np.testing.assert_allclose(clopper_pearson(30, 80), reference(30, 80, 0.95), rtol=1e-9)


def test_unknown_or_zero_size_gives_nan() -> None:
    lo, hi = clopper_pearson([3, 0, 5], [np.nan, 0, 10])
    assert np.isnan(lo[:2]).all() and np.isnan(hi[:2]).all()
    assert np.isfinite(lo[2]) and np.isfinite(hi[2])


# --------------------------------------------------------------------------- percent API
@pytest.mark.parametrize("confidence", [0.95, 0.995])
def test_accuracy_interval_is_clopper_pearson_in_percent(confidence: float) -> None:
    acc = np.array([76.13, 0.0, 100.0, 63.302, 12.5])
    n = np.array([50_000, 7500, 1109, 10_000, 8])
    lo, hi = accuracy_interval(acc, n, confidence)
    k = np.round(acc * n / 100)
    ref_lo, ref_hi = proportion_confint(k, n, alpha=1 - confidence, method="beta")
    np.testing.assert_allclose(lo, 100 * ref_lo, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(hi, 100 * ref_hi, rtol=1e-9, atol=1e-10)
    assert lo[1] == 0.0 and hi[2] == 100.0
    assert np.all(lo <= acc) and np.all(acc <= hi)


def test_accuracy_interval_hand_worked() -> None:
    # 1 correct of 2 at 50%: [Beta(alpha/2; 1, 2), Beta(1-alpha/2; 2, 1)] = [1 - sqrt(1-a/2), sqrt(1-a/2)]
    lo, hi = accuracy_interval(50.0, 2, 0.95)
    assert float(lo) == pytest.approx(100 * (1 - np.sqrt(0.975)), rel=1e-9)
    assert float(hi) == pytest.approx(100 * np.sqrt(0.975), rel=1e-9)


def test_accuracy_interval_recovers_the_count_from_a_rounded_accuracy() -> None:
    # accuracies are stored as float32-ish percentages; k = round(acc * n / 100)
    n = 10_000
    acc = 100 * 6331 / n + 3e-6
    lo, hi = accuracy_interval(acc, n)
    ref = reference(6331, n, 0.95)
    assert float(lo) == pytest.approx(100 * ref[0], rel=1e-9)
    assert float(hi) == pytest.approx(100 * ref[1], rel=1e-9)


def test_accuracy_interval_is_nan_when_size_unknown() -> None:
    lo, hi = accuracy_interval([70.0, 80.0], [np.nan, 1000])
    assert np.isnan(lo[0]) and np.isnan(hi[0])
    assert lo[1] < 80.0 < hi[1]


# --------------------------------------------------------------------------- errors
@pytest.mark.parametrize("bad", [0.0, 1.0, -0.5, 1.5, 95, 99.5, float("nan")])
def test_bad_confidence_is_a_config_error(bad: float) -> None:
    with pytest.raises(ConfigError, match="confidence"):
        clopper_pearson(5, 10, bad)
    with pytest.raises(ConfigError, match="confidence"):
        accuracy_interval(50.0, 10, bad)
