"""Properties of the axis scalings (shiftbench.analysis.scaling).

The transform must be finite on all of [0, 100], strictly monotone, invertible away from the
clip, symmetric for logit/probit, clip to half an example when ``n`` is known, and leave the
linear scale alone.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special, stats

from shiftbench.analysis.scaling import DEFAULT_CLIP, SCALES, check_scale, clip_bounds, inverse, transform
from shiftbench.errors import ConfigError, ShiftbenchError

FAST = settings(max_examples=200, deadline=None)
NONLINEAR = ("logit", "probit")

accuracies = st.floats(min_value=0.0, max_value=100.0, allow_nan=False, allow_infinity=False)
scales = st.sampled_from(SCALES)
nonlinear = st.sampled_from(NONLINEAR)
sizes = st.integers(min_value=2, max_value=10**6)


# --------------------------------------------------------------------------- finiteness
@FAST
@given(a=accuracies, scale=scales)
def test_transform_is_finite_on_the_whole_percent_range(a: float, scale: str) -> None:
    assert np.isfinite(transform(a, scale))


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("n", [None, 1250, 10_000, 50_000])
def test_transform_is_finite_at_exactly_zero_and_hundred(scale: str, n: int | None) -> None:
    out = transform(np.array([0.0, 100.0]), scale, n)
    assert np.isfinite(out).all()


@FAST
@given(a=accuracies, n=sizes, scale=scales)
def test_transform_with_known_size_is_finite(a: float, n: int, scale: str) -> None:
    assert np.isfinite(transform(a, scale, n))


# --------------------------------------------------------------------------- monotonicity
@FAST
@given(a=accuracies, b=accuracies, scale=scales)
def test_transform_is_strictly_monotone_outside_the_clip(a: float, b: float, scale: str) -> None:
    lo, hi = sorted((a, b))
    ta, tb = transform(lo, scale), transform(hi, scale)
    assert ta <= tb  # never decreasing, even inside the clip
    inside = scale == "linear" or (lo >= DEFAULT_CLIP and hi <= 100 - DEFAULT_CLIP)
    if inside and hi - lo > 1e-6:
        assert ta < tb


@FAST
@given(n=st.integers(min_value=2, max_value=100_000), data=st.data(), scale=nonlinear)
def test_transform_of_measured_accuracies_is_strictly_monotone(n: int, data: st.DataObject, scale: str) -> None:
    # every accuracy k/n that can be measured on n examples keeps its order, 0 and n included
    k1 = data.draw(st.integers(min_value=0, max_value=n - 1))
    k2 = data.draw(st.integers(min_value=k1 + 1, max_value=n))
    assert transform(100.0 * k1 / n, scale, n) < transform(100.0 * k2 / n, scale, n)


@pytest.mark.parametrize("scale", SCALES)
def test_transform_is_increasing_on_a_dense_grid(scale: str) -> None:
    grid = np.linspace(0.0, 100.0, 10_001)
    t = transform(grid, scale, 10_000)
    assert np.all(np.diff(t) > 0)


# --------------------------------------------------------------------------- inverse
@FAST
@given(a=st.floats(min_value=DEFAULT_CLIP, max_value=100 - DEFAULT_CLIP), scale=scales)
def test_inverse_undoes_transform_away_from_the_clip(a: float, scale: str) -> None:
    assert inverse(transform(a, scale), scale) == pytest.approx(a, rel=1e-9, abs=1e-9)


@FAST
@given(n=sizes, data=st.data(), scale=scales)
def test_inverse_undoes_transform_for_every_measurable_accuracy(n: int, data: st.DataObject, scale: str) -> None:
    # "the clip only moves values within half an example of 0 or 100": k/n for 0 < k < n is kept
    k = data.draw(st.integers(min_value=1, max_value=n - 1))
    a = 100.0 * k / n
    assert inverse(transform(a, scale, n), scale) == pytest.approx(a, rel=1e-9, abs=1e-9)


@FAST
@given(z=st.floats(min_value=-8, max_value=8), scale=scales)
def test_transform_undoes_inverse(z: float, scale: str) -> None:
    a = inverse(z, scale)
    if scale != "linear":
        assert 0 < a < 100
    if scale == "linear" or DEFAULT_CLIP < a < 100 - DEFAULT_CLIP:
        assert transform(a, scale) == pytest.approx(z, rel=1e-7, abs=1e-7)


# --------------------------------------------------------------------------- symmetry
@FAST
@given(a=accuracies, scale=nonlinear)
def test_logit_and_probit_are_symmetric_about_fifty(a: float, scale: str) -> None:
    assert transform(100.0 - a, scale) == pytest.approx(-transform(a, scale), rel=1e-9, abs=1e-9)


@FAST
@given(a=accuracies, n=sizes, scale=nonlinear)
def test_symmetry_holds_with_a_known_size(a: float, n: int, scale: str) -> None:
    assert transform(100.0 - a, scale, n) == pytest.approx(-transform(a, scale, n), rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("scale", NONLINEAR)
def test_fifty_percent_maps_to_zero(scale: str) -> None:
    assert transform(50.0, scale) == 0.0
    assert inverse(0.0, scale) == 50.0


# --------------------------------------------------------------------------- values
def test_transform_matches_scipy_logit_and_probit() -> None:
    a = np.array([0.5, 10.0, 37.5, 76.13, 99.0])
    np.testing.assert_allclose(transform(a, "logit"), special.logit(a / 100), rtol=1e-12)
    np.testing.assert_allclose(transform(a, "probit"), stats.norm.ppf(a / 100), rtol=1e-12)
    np.testing.assert_allclose(transform(a, "linear"), a / 100, rtol=0)


def test_hand_worked_logit_value() -> None:
    # logit(0.75) = ln(0.75 / 0.25) = ln 3
    assert transform(75.0, "logit") == pytest.approx(np.log(3.0), rel=1e-12)
    assert inverse(np.log(3.0), "logit") == pytest.approx(75.0, rel=1e-12)
    # probit(0.975) = 1.959963984540054
    assert transform(97.5, "probit") == pytest.approx(1.959963984540054, rel=1e-12)


# --------------------------------------------------------------------------- clip
@pytest.mark.parametrize("scale", NONLINEAR)
@pytest.mark.parametrize("n", [2, 7, 1250, 10_000, 50_000])
def test_clip_with_known_size_is_half_an_example(scale: str, n: int) -> None:
    half = 50.0 / n  # percent
    assert clip_bounds(n) == pytest.approx(half)
    f = special.logit if scale == "logit" else special.ndtri
    assert transform(0.0, scale, n) == pytest.approx(f(0.5 / n), rel=1e-12)
    assert transform(100.0, scale, n) == pytest.approx(f(1 - 0.5 / n), rel=1e-12)
    # anything within half an example of the edge lands on the clip, nothing beyond it does
    assert transform(half / 2, scale, n) == transform(0.0, scale, n)
    assert transform(1.5 * half, scale, n) > transform(0.0, scale, n)


@pytest.mark.parametrize("scale", NONLINEAR)
def test_clip_without_size_uses_the_default(scale: str) -> None:
    f = special.logit if scale == "logit" else special.ndtri
    assert transform(0.0, scale) == pytest.approx(f(DEFAULT_CLIP / 100), rel=1e-12)
    assert transform(100.0, scale) == pytest.approx(f(1 - DEFAULT_CLIP / 100), rel=1e-12)


def test_clip_bounds_fall_back_to_default_for_unknown_sizes() -> None:
    np.testing.assert_allclose(clip_bounds([np.nan, 0, 1000]), [DEFAULT_CLIP, DEFAULT_CLIP, 0.05])
    assert clip_bounds(None) == DEFAULT_CLIP


def test_clip_broadcasts_per_cell_sizes() -> None:
    acc = np.array([0.0, 0.0, 100.0])
    n = np.array([100.0, 10_000.0, np.nan])
    expected = special.logit(np.array([0.005, 0.00005, 1 - DEFAULT_CLIP / 100]))
    np.testing.assert_allclose(transform(acc, "logit", n), expected, rtol=1e-12)


@FAST
@given(a=st.floats(min_value=-50, max_value=150), n=st.one_of(st.none(), sizes))
def test_linear_is_the_identity_on_fractions_and_never_clips(a: float, n: int | None) -> None:
    assert transform(a, "linear", n) == pytest.approx(a / 100.0, rel=1e-15, abs=0)
    assert inverse(transform(a, "linear", n), "linear") == pytest.approx(a, rel=1e-12, abs=1e-12)


def test_linear_keeps_zero_and_hundred() -> None:
    np.testing.assert_array_equal(transform([0.0, 100.0], "linear", 50_000), [0.0, 1.0])


def test_nan_stays_nan() -> None:
    for scale in SCALES:
        assert np.isnan(transform(np.nan, scale))


# --------------------------------------------------------------------------- errors
@pytest.mark.parametrize("bad", ["logti", "Logit", "log", "probitt", ""])
def test_unknown_scale_is_a_config_error_mentioning_logit(bad: str) -> None:
    with pytest.raises(ConfigError, match="logit") as info:
        transform(50.0, bad)
    assert isinstance(info.value, ShiftbenchError)
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="logit"):
        inverse(0.0, bad)
    with pytest.raises(ConfigError, match="logit"):
        check_scale(bad)


def test_typo_in_scale_suggests_the_closest_name() -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'probit'"):
        transform(50.0, "probt")
