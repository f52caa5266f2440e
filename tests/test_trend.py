"""Trend fits (shiftbench.analysis.trend) against scipy / statsmodels and a plain bootstrap loop."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy import special, stats

from shiftbench.analysis.scaling import SCALES, inverse, transform
from shiftbench.analysis.trend import (
    Band, PiecewiseTrendFit, TrendFit, as_frame, bootstrap_band, bootstrap_coefficients, fit_piecewise_trend,
    fit_trend)
from shiftbench.errors import ConfigError, DataError
from shiftbench import testbed as tbmod



# --------------------------------------------------------------------------- fixtures
def small_testbed() -> tbmod.Testbed:
    """8 STANDARD models (one with an empty 'v2' cell), plus models of other types far off the line."""
    rows = [
        # model,        type,           tags,          val,  v2,   v3
        ("std-a", "STANDARD", "cnn", 62.0, 49.0, 30.0),
        ("std-b", "STANDARD", "cnn", 66.5, 53.2, 33.0),
        ("std-c", "STANDARD", "cnn;small", 70.1, 57.9, 36.5),
        ("std-d", "STANDARD", "", 73.4, 61.0, 40.0),
        ("std-e", "STANDARD", "", 76.2, 64.6, np.nan),
        ("std-f", "STANDARD", "", 79.0, 67.1, 47.0),
        ("std-g", "STANDARD", "", 81.3, 70.4, 49.5),
        ("std-empty", "STANDARD", "", 77.0, np.nan, 44.0),
        ("robust-1", "ROBUST_INTV", "cnn", 71.0, 66.0, 50.0),
        ("more-1", "MORE_DATA", "clip", 64.0, 62.0, 55.0),
        ("more-2", "MORE_DATA", "clip", 75.0, 72.5, 60.0),
        ("adv-1", "LP_ADV", "", 55.0, 30.0, 20.0),
    ]
    frame = pd.DataFrame(rows, columns=["model", "model_type", "tags", "val", "v2", "v3"])
    frame["val_dataset_size"] = 50_000
    frame["v2_dataset_size"] = 10_000
    return tbmod.Testbed.from_frame(frame, name="tiny")


@pytest.fixture
def tb() -> tbmod.Testbed:
    return small_testbed()


def standard_points(tb: tbmod.Testbed, x: str = "val", y: str = "v2") -> tuple[np.ndarray, np.ndarray]:
    std = tb.accuracies[tb.model_types == "STANDARD"][[x, y]].dropna()
    return std[x].to_numpy(), std[y].to_numpy()


def noisy_line(n: int, seed: int, slope: float = 0.9, intercept: float = -0.4, noise: float = 0.05,
               scale: str = "logit") -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(55, 88, size=n)
    z = slope * transform(x, scale) + intercept + rng.normal(0, noise, size=n)
    return x, inverse(z, scale)


# --------------------------------------------------------------------------- fit_trend vs scipy / statsmodels
@pytest.mark.parametrize("scale", SCALES)
def test_fit_trend_matches_linregress_and_ols(scale: str) -> None:
    x, y = noisy_line(40, seed=1, scale=scale if scale != "linear" else "logit")
    fit = fit_trend(x=x, y=y, scale=scale)
    tx, ty = transform(x, scale), transform(y, scale)
    lr = stats.linregress(tx, ty)
    assert fit.slope == pytest.approx(lr.slope, rel=1e-10)
    assert fit.intercept == pytest.approx(lr.intercept, rel=1e-10, abs=1e-12)
    assert fit.r2 == pytest.approx(lr.rvalue ** 2, rel=1e-10)
    assert fit.slope_se == pytest.approx(lr.stderr, rel=1e-8)
    assert fit.intercept_se == pytest.approx(lr.intercept_stderr, rel=1e-8)
    ols = sm.OLS(ty, sm.add_constant(tx)).fit()
    np.testing.assert_allclose([fit.intercept, fit.slope], ols.params, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose([fit.intercept_se, fit.slope_se], ols.bse, rtol=1e-8)
    assert fit.r2 == pytest.approx(ols.rsquared, rel=1e-10)
    assert fit.residual_std == pytest.approx(np.sqrt(ols.scale), rel=1e-10)
    assert fit.n_models == 40 and fit.scale == scale and fit.n_skipped == 0
    assert fit.x_range == (pytest.approx(x.min()), pytest.approx(x.max()))


def test_fit_trend_docstring_example() -> None:
    fit = fit_trend(x=[60, 70, 80], y=[45, 56, 67], scale="linear")
    assert fit.slope == pytest.approx(1.1)
    assert fit.intercept == pytest.approx(-0.21)
    assert fit.r2 == pytest.approx(1.0)


def test_fit_trend_hand_worked_linear() -> None:
    # y = 0.5 x + 20 exactly (percent) -> on fractions: t(y) = 0.5 t(x) + 0.2
    fit = fit_trend(x=[40, 60, 80, 90], y=[40, 50, 60, 65], scale="linear")
    assert fit.slope == pytest.approx(0.5)
    assert fit.intercept == pytest.approx(0.2)
    assert fit.r2 == pytest.approx(1.0)
    assert fit.residual_std == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("scale", SCALES)
def test_fit_trend_on_testbed_matches_scipy_on_standard_models_only(tb: tbmod.Testbed, scale: str) -> None:
    fit = fit_trend(tb, "val", "v2", scale)
    x, y = standard_points(tb)
    # sizes are known, but none of these accuracies is within half an example of 0/100
    lr = stats.linregress(transform(x, scale), transform(y, scale))
    assert fit.slope == pytest.approx(lr.slope, rel=1e-10)
    assert fit.intercept == pytest.approx(lr.intercept, rel=1e-10, abs=1e-12)
    assert fit.r2 == pytest.approx(lr.rvalue ** 2, rel=1e-10)
    assert fit.slope_se == pytest.approx(lr.stderr, rel=1e-8)
    assert fit.n_models == 7
    assert set(fit.models) == {"std-a", "std-b", "std-c", "std-d", "std-e", "std-f", "std-g"}
    assert fit.fit_on == ("STANDARD",)
    assert (fit.x, fit.y) == ("val", "v2")


def test_default_fit_ignores_other_model_types(tb: tbmod.Testbed) -> None:
    default = fit_trend(tb, "val", "v2")
    only_std = fit_trend(tb.select(model_types=["STANDARD"]), "val", "v2", fit_on="all")
    assert default.slope == pytest.approx(only_std.slope, rel=1e-12)
    assert default.intercept == pytest.approx(only_std.intercept, rel=1e-12)
    assert not {"robust-1", "more-1", "more-2", "adv-1"} & set(default.models)


def test_empty_cells_are_skipped_and_counted(tb: tbmod.Testbed) -> None:
    fit = fit_trend(tb, "val", "v2")
    assert fit.n_skipped == 1 and "std-empty" not in fit.models
    fit3 = fit_trend(tb, "val", "v3")
    assert fit3.n_skipped == 1 and "std-e" not in fit3.models and "std-empty" in fit3.models
    assert fit_trend(tb, "val", "v2", fit_on="all").n_skipped == 1


def test_empty_cells_in_arrays_are_skipped_and_counted() -> None:
    fit = fit_trend(x=[60, np.nan, 70, 80, 75], y=[45, 50, 56, 67, np.nan], scale="linear")
    assert fit.n_skipped == 2 and fit.n_models == 3
    assert fit.models == ("0", "2", "3")
    assert fit.slope == pytest.approx(1.1)


def test_empty_cells_from_a_csv_are_skipped(tmp_path) -> None:
    path = tmp_path / "tb.csv"
    path.write_text("model,model_type,val,v2\na,STANDARD,60,45\nb,STANDARD,70,\nc,STANDARD,80,67\n"
                    "d,STANDARD,75,61.5\ne,STANDARD,,50\n")
    fit = fit_trend(tbmod.Testbed.read(path), "val", "v2", "linear")
    assert fit.n_models == 3 and fit.n_skipped == 2
    assert fit.slope == pytest.approx(1.1)


def test_fit_on_all_uses_every_model(tb: tbmod.Testbed) -> None:
    fit = fit_trend(tb, "val", "v2", fit_on="all")
    acc = tb.accuracies[["val", "v2"]].dropna()
    lr = stats.linregress(transform(acc["val"], "logit"), transform(acc["v2"], "logit"))
    assert fit.n_models == len(acc) == 11
    assert fit.slope == pytest.approx(lr.slope, rel=1e-10)


def test_fit_on_a_tag(tb: tbmod.Testbed) -> None:
    fit = fit_trend(tb, "val", "v2", "linear", fit_on="cnn")
    assert set(fit.models) == {"std-a", "std-b", "std-c", "robust-1"}
    acc = tb.accuracies.loc[list(fit.models)]
    lr = stats.linregress(acc["val"] / 100, acc["v2"] / 100)
    assert fit.slope == pytest.approx(lr.slope, rel=1e-10)
    assert fit.fit_on == ("cnn",)
    assert fit_trend(tb, "val", "v2", "linear", fit_on="tag:cnn").models == fit.models


def test_fit_on_model_names_and_a_union(tb: tbmod.Testbed) -> None:
    names = ["std-a", "more-1", "adv-1"]
    fit = fit_trend(tb, "val", "v2", "linear", fit_on=names)
    assert set(fit.models) == set(names)
    acc = tb.accuracies.loc[names]
    assert fit.slope == pytest.approx(stats.linregress(acc["val"] / 100, acc["v2"] / 100).slope, rel=1e-10)
    union = fit_trend(tb, "val", "v2", fit_on=["MORE_DATA", "adv-1"])
    assert set(union.models) == {"more-1", "more-2", "adv-1"}
    assert fit_trend(tb, "val", "v2", fit_on=("STANDARD", "robust-1")).n_models == 8


def test_predict_round_trips(tb: tbmod.Testbed) -> None:
    fit = fit_trend(tb, "val", "v2")
    x, _ = standard_points(tb)
    # predict = inverse(slope * t(x) + intercept)
    expected = special.expit(fit.slope * special.logit(x / 100) + fit.intercept) * 100
    np.testing.assert_allclose(fit.predict(x), expected, rtol=1e-12)
    # a point lying on the trend is predicted exactly
    on_line = inverse(fit.predict_scaled(transform(68.0, "logit")), "logit")
    assert fit.predict(68.0) == pytest.approx(on_line, rel=1e-12)
    assert transform(fit.predict(68.0), "logit") == pytest.approx(fit.slope * transform(68.0, "logit")
                                                                  + fit.intercept, rel=1e-12)
    # noise-free data is reproduced exactly
    xs = np.array([55.0, 63.0, 71.0, 80.0])
    ys = inverse(0.8 * transform(xs, "probit") - 0.3, "probit")
    exact = fit_trend(x=xs, y=ys, scale="probit")
    np.testing.assert_allclose(exact.predict(xs), ys, rtol=1e-10)
    assert exact.slope == pytest.approx(0.8) and exact.intercept == pytest.approx(-0.3)


def test_to_dict_is_json_ready_with_the_documented_keys(tb: tbmod.Testbed) -> None:
    fit = fit_trend(tb, "val", "v2")
    d = fit.to_dict()
    assert {"slope", "intercept", "r2", "n_models", "scale", "x", "y"} <= set(d)
    assert d["slope"] == fit.slope and d["n_models"] == 7 and d["scale"] == "logit"
    assert d["x"] == "val" and d["y"] == "v2" and d["n_skipped"] == 1 and d["kind"] == "linear"
    json.dumps(d)
    frame = as_frame(fit)
    assert len(frame) == 1 and frame.loc[0, "slope"] == fit.slope


# --------------------------------------------------------------------------- errors
def test_fewer_than_three_models_is_a_data_error_naming_the_settings(tb: tbmod.Testbed) -> None:
    with pytest.raises(DataError) as info:
        fit_trend(tb, "val", "v2", fit_on="MORE_DATA")
    msg = str(info.value)
    assert "'v2'" in msg and "'val'" in msg and "3" in msg and "MORE_DATA" in msg and "\n" not in msg


def test_empty_cells_can_leave_too_few_models(tb: tbmod.Testbed) -> None:
    with pytest.raises(DataError, match="1 skipped"):
        fit_trend(tb, "val", "v2", fit_on=["std-a", "std-b", "std-empty"])


def test_fewer_than_three_points_in_arrays_is_a_data_error() -> None:
    with pytest.raises(DataError, match="at least 3"):
        fit_trend(x=[60, 70, np.nan], y=[50, 60, 70])


def test_identical_x_accuracies_is_a_data_error() -> None:
    with pytest.raises(DataError, match="spread"):
        fit_trend(x=[70, 70, 70], y=[50, 55, 60])


def test_setting_typo_is_a_config_error_with_did_you_mean(tb: tbmod.Testbed) -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'v2'") as info:
        fit_trend(tb, "val", "v22")
    assert "unknown setting" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ConfigError, match=r"did you mean 'val'"):
        fit_trend(tb, "vall", "v2")


def test_unknown_fit_on_selector_is_a_config_error_with_closest_names(tb: tbmod.Testbed) -> None:
    with pytest.raises(ConfigError, match="STANDARD") as info:
        fit_trend(tb, "val", "v2", fit_on="STANDART")
    assert "did you mean" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="std-a"):
        fit_trend(tb, "val", "v2", fit_on=["std-aa"])


def test_unknown_scale_is_a_config_error(tb: tbmod.Testbed) -> None:
    with pytest.raises(ConfigError, match="logit"):
        fit_trend(tb, "val", "v2", "logits")


def test_setting_names_without_a_testbed_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="testbed"):
        fit_trend(x="val", y="v2")


@pytest.mark.parametrize("x, y", [([60, 70, 180], [50, 55, 60]), ([0.6, 0.7, 0.8], [-0.5, 0.55, 0.6])])
def test_accuracies_outside_percent_range_are_a_data_error(x: list, y: list) -> None:
    with pytest.raises(DataError, match=r"outside \[0, 100\]"):
        fit_trend(x=x, y=y)


def test_arrays_of_different_lengths_are_a_data_error() -> None:
    with pytest.raises(DataError, match="different lengths"):
        fit_trend(x=[60, 70, 80], y=[50, 60])


def test_table_with_non_numeric_cell_names_the_model_and_setting() -> None:
    frame = pd.DataFrame({"model": ["a", "b", "c"], "val": [60, "n/a", 80], "v2": [50, 55, 60]})
    with pytest.raises(DataError) as info:
        tbmod.Testbed.from_frame(frame)
    msg = str(info.value)
    assert "'b'" in msg and "'val'" in msg and "'n/a'" in msg and "\n" not in msg


def test_table_with_out_of_range_accuracy_names_the_model_and_setting() -> None:
    frame = pd.DataFrame({"model": ["a", "b", "c"], "val": [60, 70, 80], "v2": [0.5, 0.55, 101.0]})
    with pytest.raises(DataError) as info:
        tbmod.Testbed.from_frame(frame)
    msg = str(info.value)
    assert "'c'" in msg and "'v2'" in msg and "[0, 100]" in msg


# --------------------------------------------------------------------------- piecewise
def hinge_points(scale: str = "logit", noise: float = 0.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = np.concatenate([np.linspace(20, 74, 9), np.linspace(76.5, 88, 8)])
    d = transform(x, scale) - transform(76.0, scale)
    z = -3.0 + 0.2 * np.minimum(d, 0) + 2.5 * np.maximum(d, 0) + rng.normal(0, noise, size=x.size)
    return x, inverse(z, scale), d


@pytest.mark.parametrize("scale", ["logit", "probit"])
def test_piecewise_recovers_exact_hinge_coefficients(scale: str) -> None:
    x, y, _ = hinge_points(scale)
    fit = fit_piecewise_trend(x=x, y=y, pivot=76.0, scale=scale)
    assert isinstance(fit, PiecewiseTrendFit) and fit.kind == "piecewise"
    assert fit.intercept == pytest.approx(-3.0, abs=1e-9)
    assert fit.slope_below == pytest.approx(0.2, abs=1e-9)
    assert fit.slope == pytest.approx(2.5, abs=1e-9)
    assert fit.r2 == pytest.approx(1.0)
    assert fit.pivot == 76.0
    np.testing.assert_allclose(fit.predict(x), y, rtol=1e-9)
    # continuous at the pivot, where the trend equals the intercept
    assert transform(fit.predict(76.0), scale) == pytest.approx(-3.0, abs=1e-9)


def test_piecewise_matches_statsmodels_on_the_hinge_design() -> None:
    x, y, d = hinge_points("logit", noise=0.08, seed=3)
    fit = fit_piecewise_trend(x=x, y=y, pivot=76.0)
    design = np.column_stack([np.ones_like(d), np.minimum(d, 0), np.maximum(d, 0)])
    ols = sm.OLS(transform(y, "logit"), design).fit()
    np.testing.assert_allclose([fit.intercept, fit.slope_below, fit.slope], ols.params, rtol=1e-9)
    np.testing.assert_allclose([fit.intercept_se, fit.slope_below_se, fit.slope_se], ols.bse, rtol=1e-8)
    assert fit.r2 == pytest.approx(ols.rsquared, rel=1e-10)
    assert fit.residual_std == pytest.approx(np.sqrt(ols.scale), rel=1e-10)
    d_ = fit.to_dict()
    assert d_["kind"] == "piecewise" and d_["pivot"] == 76.0 and d_["slope_below"] == fit.slope_below
    json.dumps(d_)


def test_piecewise_pivot_given_as_a_model_uses_its_x_accuracy(tb: tbmod.Testbed) -> None:
    by_name = fit_piecewise_trend(tb, "val", "v2", pivot="std-d", fit_on="all")
    assert by_name.pivot == pytest.approx(73.4)
    by_value = fit_piecewise_trend(tb, "val", "v2", pivot=73.4, fit_on="all")
    np.testing.assert_allclose(by_name.coef, by_value.coef, rtol=1e-12)
    # the pivot model need not be one the trend is fitted on
    other = fit_piecewise_trend(tb, "val", "v2", pivot="robust-1")
    assert other.pivot == pytest.approx(71.0) and "robust-1" not in other.models


def test_piecewise_too_few_points_on_one_side_is_a_data_error() -> None:
    x = [50.0, 60.0, 70.0, 80.0, 85.0]
    y = [40.0, 50.0, 60.0, 70.0, 76.0]
    with pytest.raises(DataError, match="each side"):
        fit_piecewise_trend(x=x, y=y, pivot=82.0)  # only 85 above
    with pytest.raises(DataError, match="each side"):
        fit_piecewise_trend(x=x, y=y, pivot=55.0)  # only 50 below
    fit_piecewise_trend(x=x, y=y, pivot=65.0)  # two on each side is enough


def test_piecewise_pivot_errors(tb: tbmod.Testbed) -> None:
    with pytest.raises(ConfigError, match="did you mean 'std-d'"):
        fit_piecewise_trend(tb, "val", "v2", pivot="std-dd")
    with pytest.raises(ConfigError, match="testbed"):
        fit_piecewise_trend(x=[50, 60, 70, 80], y=[40, 50, 60, 70], pivot="resnet50")
    with pytest.raises(ConfigError, match="strictly between 0 and 100"):
        fit_piecewise_trend(x=[50, 60, 70, 80], y=[40, 50, 60, 70], pivot=-5.0)
    with pytest.raises(ConfigError, match="strictly between 0 and 100"):
        fit_piecewise_trend(x=[50, 60, 70, 80], y=[40, 50, 60, 70], pivot=100.0)
    acc = tb.accuracies.copy()
    acc.loc["adv-1", "val"] = np.nan
    tb2 = tbmod.Testbed(acc, tb.sizes, tb.metadata, name="tiny")
    with pytest.raises(DataError, match="no accuracy"):
        fit_piecewise_trend(tb2, "val", "v2", pivot="adv-1")


# --------------------------------------------------------------------------- bootstrap
@pytest.fixture(scope="module")
def noisy_fit() -> TrendFit:
    x, y = noisy_line(30, seed=11, noise=0.08)
    return fit_trend(x=x, y=y)


def test_bootstrap_band_same_seed_is_identical(noisy_fit: TrendFit) -> None:
    a = bootstrap_band(noisy_fit, n_resamples=500, seed=5)
    b = bootstrap_band(noisy_fit, n_resamples=500, seed=5)
    np.testing.assert_array_equal(a.lower, b.lower)
    np.testing.assert_array_equal(a.upper, b.upper)
    c = bootstrap_band(noisy_fit, n_resamples=500, seed=6)
    assert not np.array_equal(a.lower, c.lower)
    assert not np.array_equal(a.upper, c.upper)


def test_bootstrap_coefficients_same_seed_is_identical(noisy_fit: TrendFit) -> None:
    np.testing.assert_array_equal(bootstrap_coefficients(noisy_fit, 300, seed=1),
                                  bootstrap_coefficients(noisy_fit, 300, seed=1))
    assert not np.array_equal(bootstrap_coefficients(noisy_fit, 300, seed=1),
                              bootstrap_coefficients(noisy_fit, 300, seed=2))


def test_bootstrap_is_independent_of_chunking(noisy_fit: TrendFit) -> None:
    # fewer resamples per chunk changes memory use, not the draws
    whole = bootstrap_coefficients(noisy_fit, 1000, seed=3)
    chunked = bootstrap_coefficients(noisy_fit, 1000, seed=3, chunk=1000)
    np.testing.assert_array_equal(whole, chunked)


def test_bootstrap_band_contains_the_fitted_line(noisy_fit: TrendFit) -> None:
    band = bootstrap_band(noisy_fit, n_resamples=2000, seed=0)
    # default grid: sorted accuracies spanning 0.1-99.9%
    assert isinstance(band, Band) and band.grid.size >= 50 and np.all(np.diff(band.grid) > 0)
    assert band.grid[0] == pytest.approx(0.1) and band.grid[-1] == pytest.approx(99.9)
    assert band.lower.shape == band.upper.shape == band.grid.shape
    line = noisy_fit.predict(band.grid)
    assert np.all(band.lower <= line) and np.all(line <= band.upper)
    assert np.all(band.lower < band.upper)
    assert band.confidence == 0.95 and band.scale == "logit" and band.n_resamples == 2000


def test_band_at_interpolates_on_the_grid(noisy_fit: TrendFit) -> None:
    band = bootstrap_band(noisy_fit, grid=[80, 50, 60, 70], n_resamples=500)
    np.testing.assert_array_equal(band.grid, [50, 60, 70, 80])
    lo, hi = band.at([60.0, 70.0])
    np.testing.assert_allclose(lo, band.lower[1:3], rtol=1e-9)
    np.testing.assert_allclose(hi, band.upper[1:3], rtol=1e-9)
    lo65, hi65 = band.at(65.0)
    assert band.lower[1] <= lo65 <= band.lower[2] or band.lower[2] <= lo65 <= band.lower[1]
    assert lo65 < noisy_fit.predict(65.0) < hi65


def test_band_at_returns_the_band_on_its_grid_points() -> None:
    x = np.array([20.0, 30, 40, 50, 60, 70])
    noise = np.random.default_rng(0).normal(0, 0.3, size=x.size)
    fit = fit_trend(x=x, y=inverse(2.0 * transform(x, "logit") - 8.0 + noise, "logit"))
    band = bootstrap_band(fit, grid=[5.0, 20.0, 50.0, 80.0], n_resamples=500)
    assert band.lower[0] < 0.01
    lo, hi = band.at(band.grid)
    np.testing.assert_allclose(lo, band.lower, rtol=1e-9)
    np.testing.assert_allclose(hi, band.upper, rtol=1e-9)


def test_bootstrap_band_widens_with_confidence(noisy_fit: TrendFit) -> None:
    narrow = bootstrap_band(noisy_fit, n_resamples=1000, confidence=0.8, seed=1)
    wide = bootstrap_band(noisy_fit, n_resamples=1000, confidence=0.99, seed=1)
    assert np.all(wide.upper - wide.lower >= narrow.upper - narrow.lower)


def test_bootstrap_band_narrows_as_n_grows() -> None:
    widths = []
    for n in (12, 60, 300):
        x, y = noisy_line(n, seed=20 + n, noise=0.08)
        band = bootstrap_band(fit_trend(x=x, y=y), grid=[60.0, 70.0, 80.0], n_resamples=2000, seed=0)
        widths.append(band.upper - band.lower)
    assert np.all(widths[1] < widths[0]) and np.all(widths[2] < widths[1])
    # width shrinks like 1/sqrt(n): 25x the models, about a fifth of the width
    assert np.all(widths[2] < 0.4 * widths[0])


def test_bootstrap_coefficient_means_are_close_to_the_ols_fit(noisy_fit: TrendFit) -> None:
    coefs = bootstrap_coefficients(noisy_fit, 4000, seed=0)
    assert coefs.shape == (4000, 2)
    intercept, slope = coefs.mean(axis=0)
    assert slope == pytest.approx(noisy_fit.slope, abs=0.1 * coefs[:, 1].std() + 1e-3)
    assert intercept == pytest.approx(noisy_fit.intercept, abs=0.1 * coefs[:, 0].std() + 1e-3)
    # and the bootstrap spread is of the order of the OLS standard error
    assert 0.5 < coefs[:, 1].std() / noisy_fit.slope_se < 2.0


def plain_bootstrap_slopes(xs: np.ndarray, ys: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = len(xs)
    slopes = []
    for _ in range(n_resamples):
        idx = rng.integers(0, n, size=n)
        if np.ptp(xs[idx]) == 0:
            continue
        slopes.append(np.polyfit(xs[idx], ys[idx], 1)[0])
    return np.array(slopes)


def test_bootstrap_agrees_in_distribution_with_a_plain_loop(noisy_fit: TrendFit) -> None:
    fast = bootstrap_coefficients(noisy_fit, 4000, seed=0)[:, 1]
    slow = plain_bootstrap_slopes(noisy_fit.xs, noisy_fit.ys, 4000, seed=12345)
    spread = slow.std()
    for q in (0.025, 0.5, 0.975):
        assert np.quantile(fast, q) == pytest.approx(np.quantile(slow, q), abs=0.25 * spread)
    assert fast.std() == pytest.approx(spread, rel=0.1)


def test_bootstrap_piecewise_fit_agrees_with_a_plain_loop() -> None:
    x, y, _ = hinge_points("logit", noise=0.08, seed=4)
    fit = fit_piecewise_trend(x=x, y=y, pivot=76.0)
    fast = bootstrap_coefficients(fit, 3000, seed=0)
    assert fast.shape[1] == 3
    rng = np.random.default_rng(99)
    design = fit.basis(fit.xs)
    slow = []
    for _ in range(3000):
        idx = rng.integers(0, len(fit.xs), size=len(fit.xs))
        if np.linalg.matrix_rank(design[idx]) < 3:
            continue
        slow.append(np.linalg.lstsq(design[idx], fit.ys[idx], rcond=None)[0])
    slow = np.array(slow)
    for j in range(3):
        for q in (0.1, 0.5, 0.9):
            assert np.quantile(fast[:, j], q) == pytest.approx(np.quantile(slow[:, j], q),
                                                               abs=0.25 * slow[:, j].std())


def enumerate_resamples(design: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """OLS coefficients of every non-degenerate bootstrap multiset of the rows, with its probability."""
    from itertools import combinations_with_replacement
    from math import factorial
    n, p = design.shape
    coefs, probs = [], []
    for multiset in combinations_with_replacement(range(n), n):
        idx = np.array(multiset)
        if np.linalg.matrix_rank(design[idx]) < p:
            continue
        counts = np.bincount(idx, minlength=n)
        prob = factorial(n) / np.prod([factorial(c) for c in counts]) / n ** n
        coefs.append(np.linalg.lstsq(design[idx], ys[idx], rcond=None)[0])
        probs.append(prob)
    return np.array(coefs), np.array(probs)


@pytest.mark.parametrize("kind", ["linear", "piecewise"])
def test_every_bootstrap_refit_is_an_exact_ols_fit_of_a_resample(kind: str) -> None:
    x = np.array([52.0, 61.0, 70.5, 78.0, 85.0])
    y = np.array([40.0, 47.5, 59.0, 68.0, 77.0])
    fit = fit_trend(x=x, y=y) if kind == "linear" else fit_piecewise_trend(x=x, y=y, pivot=66.0)
    exact, probs = enumerate_resamples(fit.basis(fit.xs), fit.ys)
    coefs = bootstrap_coefficients(fit, 20_000, seed=0)
    # each refit is the OLS of one of the possible resamples
    dist = np.abs(coefs[:, None, :] - exact[None, :, :]).max(axis=2)
    which = dist.argmin(axis=1)
    assert dist.min(axis=1).max() < 1e-8
    # the kept share and the frequency of each distinct refit follow the multinomial law
    # (multisets with the same OLS fit, e.g. any two distinct points, are pooled)
    assert len(coefs) / 20_000 == pytest.approx(probs.sum(), abs=0.01)
    group = np.array([np.flatnonzero(np.abs(exact - e).max(axis=1) < 1e-8)[0] for e in exact])
    observed = np.bincount(group[which], minlength=len(exact))
    expected = np.bincount(group, weights=probs, minlength=len(exact)) / probs.sum() * len(coefs)
    big = expected > 20
    assert big.sum() > 10
    rescaled = expected[big] * observed[big].sum() / expected[big].sum()
    assert stats.chisquare(observed[big], rescaled).pvalue > 1e-4


def test_degenerate_resamples_are_dropped() -> None:
    # with 3 models a resample of a single model (prob 3/27) has a singular design
    fit = fit_trend(x=[60, 70, 80], y=[50, 58, 70])
    coefs = bootstrap_coefficients(fit, 2000, seed=0)
    assert 1600 < len(coefs) < 1900
    assert np.isfinite(coefs).all()
    band = bootstrap_band(fit, n_resamples=2000, seed=0)
    assert band.n_resamples == len(coefs)


def test_bootstrap_errors(noisy_fit: TrendFit) -> None:
    with pytest.raises(ConfigError, match="n_resamples"):
        bootstrap_coefficients(noisy_fit, 0)
    with pytest.raises(ConfigError, match="confidence"):
        bootstrap_band(noisy_fit, confidence=95)
    with pytest.raises(ConfigError, match="confidence"):
        bootstrap_band(noisy_fit, confidence=0.0)


@pytest.mark.parametrize("m", [1000, 50_001, 100_000])
def test_row_quantiles_equal_numpy_quantile_exactly(m):
    from shiftbench.analysis.trend import _row_quantiles

    rng = np.random.default_rng(7)
    values = rng.normal(size=(12, m))
    values[3] = np.round(values[3])      # heavy ties
    values[4] = 1.0                      # constant row
    values[5] = np.sort(values[5])       # sorted row: the strided sample is not random
    for qs in ([0.025, 0.975], [0.0, 1.0], [0.5], [0.001, 0.999]):
        assert np.array_equal(_row_quantiles(values, qs), np.quantile(values, qs, axis=1).T)
