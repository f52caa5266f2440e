"""Effective and relative robustness (Taori et al. 2020, §2): hand-worked cases and the shipped testbed."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.proportion import proportion_confint

from shiftbench import testbed as tbmod
from shiftbench.analysis.robustness import (
    ER_COLUMNS, effective_robustness, most_effectively_robust, relative_robustness)
from shiftbench.analysis.scaling import inverse, transform
from shiftbench.analysis.trend import bootstrap_band, fit_trend
from shiftbench.errors import ConfigError, DataError

V2 = "imagenetv2-matched-frequency-format-val"
CLIP_MODELS = ("vit_b_32_clip_zeroshot", "resnet50_clip_zeroshot")


# --------------------------------------------------------------------------- fixtures
def line_testbed() -> tbmod.Testbed:
    """STANDARD models exactly on ``y = x - 10`` (percent), plus models off the line.

    On the linear scale the trend is ``t(y) = t(x) - 0.1``: slope 1, intercept -0.1.
    """
    rows = [
        # model,      type,          tags,      x,    y,    z,    x_n,  y_n
        ("std-60", "STANDARD", "", 60.0, 50.0, 40.0, 1000, 2000),
        ("std-70", "STANDARD", "", 70.0, 60.0, 44.0, 1000, 2000),
        ("std-80", "STANDARD", "", 80.0, 70.0, 52.0, 1000, 2000),
        ("std-90", "STANDARD", "", 90.0, 80.0, 55.0, 1000, 2000),
        ("std-empty", "STANDARD", "", 75.0, np.nan, 50.0, 1000, 2000),
        ("robust", "ROBUST_INTV", "aug", 65.0, 60.0, 50.0, 1000, 2000),   # 5 points above the line
        ("worse", "ROBUST_INTV", "aug", 75.0, 60.0, 47.0, 1000, 2000),    # 5 points below
        ("big-data", "MORE_DATA", "", 72.0, 70.0, 60.0, 1000, 2000),      # 8 above
        ("adv", "LP_ADV", "", 55.0, 44.0, 35.0, 1000, 2000),              # 1 below
        ("no-x", "MORE_DATA", "", np.nan, 50.0, 40.0, 1000, 2000),
    ]
    frame = pd.DataFrame(rows, columns=["model", "model_type", "tags", "x", "y", "z",
                                        "x_dataset_size", "y_dataset_size"])
    frame["z_dataset_size"] = 5000
    return tbmod.Testbed.from_frame(frame, name="line")


@pytest.fixture
def tb() -> tbmod.Testbed:
    return line_testbed()


@pytest.fixture(scope="module")
def reference():
    from shiftbench.reference import load_testbed
    return load_testbed("imagenet-reference")


@pytest.fixture(scope="module")
def reference_er(reference):
    return effective_robustness(reference, "val", V2, n_resamples=500)


# --------------------------------------------------------------------------- effective robustness
def test_effective_robustness_hand_worked_linear(tb: tbmod.Testbed) -> None:
    er = effective_robustness(tb, "x", "y", "linear", n_resamples=0)
    fit = er.attrs["fit"]
    assert fit.slope == pytest.approx(1.0) and fit.intercept == pytest.approx(-0.1)
    expected = {"robust": 5.0, "worse": -5.0, "big-data": 8.0, "adv": 1.0 - 2.0}
    for model, rho in expected.items():
        assert er.at[model, "effective_robustness"] == pytest.approx(rho, abs=1e-9)
    assert er.at["robust", "predicted_y_acc"] == pytest.approx(55.0)
    # rho = y - predicted for every row
    np.testing.assert_allclose(er["effective_robustness"], er["y_acc"] - er["predicted_y_acc"], atol=1e-12)


def test_models_on_the_line_have_zero_effective_robustness(tb: tbmod.Testbed) -> None:
    er = effective_robustness(tb, "x", "y", "linear", n_resamples=0)
    on_line = er[er["model_type"] == "STANDARD"]
    assert len(on_line) == 4
    np.testing.assert_allclose(on_line["effective_robustness"], 0.0, atol=1e-9)
    assert on_line["in_fit"].all() and not er.loc[["robust", "worse", "big-data", "adv"], "in_fit"].any()


@pytest.mark.parametrize("scale", ["logit", "probit"])
def test_models_on_a_nonlinear_line_have_zero_effective_robustness(scale: str) -> None:
    x = np.array([55.0, 62.0, 70.0, 77.0, 84.0])
    y = inverse(0.9 * transform(x, scale) - 0.5, scale)
    er = effective_robustness(x=x, y=y, scale=scale, n_resamples=0)
    np.testing.assert_allclose(er["effective_robustness"], 0.0, atol=1e-9)
    # a point lifted off the line by 3 points has rho = 3
    er2 = effective_robustness(x=np.append(x, 66.0),
                               y=np.append(y, float(inverse(0.9 * transform(66.0, scale) - 0.5,
                                                                               scale)) + 3.0),
                               scale=scale, fit=er.attrs["fit"], n_resamples=0)
    assert er2["effective_robustness"].iloc[-1] == pytest.approx(3.0, abs=1e-9)


def test_effective_robustness_columns_order_and_attrs(tb: tbmod.Testbed) -> None:
    er = effective_robustness(tb, "x", "y", "linear", n_resamples=100)
    assert list(er.columns) == ER_COLUMNS
    assert er.index.name == "model"
    assert list(er.index) == [m for m in tb.models if m not in ("std-empty", "no-x")]  # testbed order
    assert er.attrs["n_skipped"] == 2
    assert er.attrs["x"] == "x" and er.attrs["y"] == "y" and er.attrs["scale"] == "linear"


def test_effective_robustness_counts_empty_cells_when_models_are_chosen(tb: tbmod.Testbed) -> None:
    er = effective_robustness(tb, "x", "y", "linear", models=["robust", "std-empty", "no-x"], n_resamples=0)
    assert list(er.index) == ["robust"] and er.attrs["n_skipped"] == 2
    assert er.attrs["fit"].n_skipped == 1  # the fit itself skipped std-empty


def test_effective_robustness_with_arrays_counts_skipped_points() -> None:
    fit = fit_trend(x=[60, 70, 80], y=[50, 60, 70], scale="linear")
    er = effective_robustness(x=[60, 70, np.nan, 80, 65], y=[50, 60, 55, 70, 60], fit=fit, n_resamples=0)
    assert er.attrs["n_skipped"] == 1 and len(er) == 4
    assert list(er.index) == ["0", "1", "3", "4"]
    assert er.at["4", "effective_robustness"] == pytest.approx(5.0, abs=1e-9)


def test_interval_contains_rho(tb: tbmod.Testbed) -> None:
    er = effective_robustness(tb, "x", "z", "logit", n_resamples=1000)
    assert (er["er_low"] <= er["effective_robustness"]).all()
    assert (er["effective_robustness"] <= er["er_high"]).all()
    assert (er["er_low"] < er["er_high"]).all()


def test_interval_is_clopper_pearson_minus_the_band(tb: tbmod.Testbed) -> None:
    fit = fit_trend(tb, "x", "z", "logit")
    band = bootstrap_band(fit, n_resamples=800, confidence=0.995, seed=3)
    er = effective_robustness(tb, "x", "z", fit=fit, band=band, confidence=0.995)
    # independent: Clopper-Pearson from statsmodels, band limits from the band's grid
    n = tb.sizes.loc[er.index, "z"].to_numpy()
    k = np.round(er["y_acc"].to_numpy() * n / 100)
    y_lo, y_hi = proportion_confint(k, n, alpha=0.005, method="beta")
    gx = transform(band.grid, "logit")
    xs = transform(er["x_acc"].to_numpy(), "logit")
    b_lo = inverse(np.interp(xs, gx, transform(band.lower, "logit")), "logit")
    b_hi = inverse(np.interp(xs, gx, transform(band.upper, "logit")), "logit")
    np.testing.assert_allclose(er["er_low"], 100 * y_lo - b_hi, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(er["er_high"], 100 * y_hi - b_lo, rtol=1e-9, atol=1e-9)


def test_without_band_or_sizes_the_interval_collapses_to_rho() -> None:
    er = effective_robustness(x=[60, 70, 80, 65], y=[50, 60, 70, 62], scale="linear", n_resamples=0)
    np.testing.assert_allclose(er["er_low"], er["effective_robustness"])
    np.testing.assert_allclose(er["er_high"], er["effective_robustness"])


def test_given_fit_keeps_its_scale(tb: tbmod.Testbed) -> None:
    fit = fit_trend(tb, "x", "y", "linear")
    er = effective_robustness(tb, "x", "y", "logit", fit=fit, n_resamples=0)
    assert er.attrs["scale"] == "linear"
    assert er.at["robust", "effective_robustness"] == pytest.approx(5.0, abs=1e-9)


def test_fit_on_is_passed_to_the_trend(tb: tbmod.Testbed) -> None:
    er = effective_robustness(tb, "x", "y", "linear", fit_on=["STANDARD", "big-data"], n_resamples=0)
    assert er.at["big-data", "in_fit"]
    assert er.attrs["fit"].n_models == 5


def test_effective_robustness_is_seeded(tb: tbmod.Testbed) -> None:
    a = effective_robustness(tb, "x", "z", n_resamples=300, seed=1)
    b = effective_robustness(tb, "x", "z", n_resamples=300, seed=1)
    pd.testing.assert_frame_equal(a, b)


def test_effective_robustness_errors(tb: tbmod.Testbed) -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'robust'") as info:
        effective_robustness(tb, "x", "y", models=["robustt"])
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match=r"did you mean 'y'"):
        effective_robustness(tb, "x", "yy")
    with pytest.raises(DataError, match="at least 3"):
        effective_robustness(tb, "x", "y", fit_on="LP_ADV")


def test_effective_robustness_rejects_out_of_range_arrays_with_a_given_fit() -> None:
    fit = fit_trend(x=[60, 70, 80], y=[50, 60, 70], scale="linear")
    with pytest.raises(DataError, match=r"\[0, 100\]"):
        effective_robustness(x=[60, 170], y=[50, 60], fit=fit, n_resamples=0)


def test_interval_contains_rho_when_the_trend_predicts_below_the_default_clip() -> None:
    # an ImageNet-A-like shift: low accuracies, the trend predicts ~0.006% at x = 20%
    x = np.array([20.0, 30, 40, 50, 60, 70])
    noise = np.random.default_rng(0).normal(0, 0.3, size=x.size)
    y = inverse(2.0 * transform(x, "logit") - 8.0 + noise, "logit")
    er = effective_robustness(x=x, y=y, n_resamples=500)
    assert er.at["0", "predicted_y_acc"] < 0.01
    assert (er["er_low"] <= er["effective_robustness"]).all()
    assert (er["effective_robustness"] <= er["er_high"]).all()


# --------------------------------------------------------------------------- the shipped testbed
def test_reference_logit_fit_on_imagenetv2(reference) -> None:
    fit = fit_trend(reference, "val", V2)
    assert fit.n_models == 87 and fit.fit_on == ("STANDARD",)
    assert set(reference.model_types[list(fit.models)]) == {"STANDARD"}
    assert fit.slope == pytest.approx(0.92, abs=0.01)
    assert fit.r2 > 0.99


def test_reference_clip_zero_shot_models_are_effectively_robust(reference_er) -> None:
    for model in CLIP_MODELS:
        assert reference_er.at[model, "effective_robustness"] > 0
        assert reference_er.at[model, "er_low"] > 0  # significantly so
        assert not reference_er.at[model, "in_fit"]
    top = most_effectively_robust(reference_er, top=5)
    assert set(CLIP_MODELS) <= set(top.index)
    assert set(CLIP_MODELS) <= set(most_effectively_robust(reference_er, top=5, exclude_fit=True).index)


def test_reference_standard_models_scatter_around_zero(reference_er) -> None:
    std = reference_er[reference_er["in_fit"]]
    assert len(std) == 87
    assert abs(std["effective_robustness"].mean()) < 0.5
    assert (reference_er["er_low"] <= reference_er["effective_robustness"]).all()
    assert (reference_er["effective_robustness"] <= reference_er["er_high"]).all()


def test_reference_skipped_models_are_counted(reference, reference_er) -> None:
    pair = reference.accuracies[["val", V2]]
    assert reference_er.attrs["n_skipped"] == int(pair.isna().any(axis=1).sum()) > 0
    assert len(reference_er) == len(reference) - reference_er.attrs["n_skipped"]


def test_reference_unknown_model_suggests_the_closest_names(reference) -> None:
    with pytest.raises(ConfigError, match="resnet50") as info:
        effective_robustness(reference, "val", V2, models=["resnet-50"], n_resamples=0)
    assert "did you mean" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ConfigError, match=r"did you mean .*'imagenet-sketch'") as info:
        effective_robustness(reference, "val", "imagenet-sketchh", n_resamples=0)
    assert "unknown setting" in str(info.value) and "\n" not in str(info.value)


def test_reference_abbreviated_setting_suggests_the_design_example(reference) -> None:
    with pytest.raises(ConfigError, match=r"did you mean .*'imagenetv2-matched-frequency"):
        effective_robustness(reference, "val", "imagenetv2-mf", n_resamples=0)


# --------------------------------------------------------------------------- most_effectively_robust
def test_most_effectively_robust_orders_by_effective_robustness(tb: tbmod.Testbed) -> None:
    er = effective_robustness(tb, "x", "y", "linear", n_resamples=0)
    top = most_effectively_robust(er, top=3)
    assert list(top.index[:2]) == ["big-data", "robust"]
    assert top.index[2] in {"std-60", "std-70", "std-80", "std-90"}  # rho ~ 0, ahead of adv (-1) and worse (-5)
    assert top["effective_robustness"].is_monotonic_decreasing
    assert len(top) == 3 and top.attrs["n_skipped"] == er.attrs["n_skipped"]
    assert list(most_effectively_robust(er, top=100).index[-2:]) == ["adv", "worse"]


def test_most_effectively_robust_filters_model_types(tb: tbmod.Testbed) -> None:
    er = effective_robustness(tb, "x", "y", "linear", n_resamples=0)
    top = most_effectively_robust(er, top=10, model_types=["ROBUST_INTV", "LP_ADV"])
    assert list(top.index) == ["robust", "adv", "worse"]


def test_most_effectively_robust_can_exclude_the_fitted_models(tb: tbmod.Testbed) -> None:
    er = effective_robustness(tb, "x", "y", "linear", n_resamples=0)
    top = most_effectively_robust(er, top=10, exclude_fit=True)
    assert list(top.index) == ["big-data", "robust", "adv", "worse"]
    assert not top["in_fit"].any()
    with pytest.raises(ConfigError, match="top"):
        most_effectively_robust(er, top=0)


# --------------------------------------------------------------------------- relative robustness
def test_relative_robustness_against_a_single_baseline(tb: tbmod.Testbed) -> None:
    rr = relative_robustness(tb, "y", "std-70", models=["robust", "worse", "big-data", "std-70"])
    assert list(rr.index) == ["robust", "worse", "big-data"]  # the baseline itself is left out
    np.testing.assert_allclose(rr["relative_robustness"], [0.0, 0.0, 10.0])
    assert (rr["baseline"] == "std-70").all() and (rr["baseline_y_acc"] == 60.0).all()
    assert rr.at["big-data", "model_type"] == "MORE_DATA"


def test_relative_robustness_against_every_model_by_default(tb: tbmod.Testbed) -> None:
    rr = relative_robustness(tb, "y", "std-60")
    assert "std-60" not in rr.index
    assert rr.attrs["n_skipped"] == 1 and "std-empty" not in rr.index  # empty cell skipped, counted
    assert rr.at["std-90", "relative_robustness"] == pytest.approx(30.0)
    assert rr.at["adv", "relative_robustness"] == pytest.approx(-6.0)


def test_relative_robustness_with_a_mapping_and_x_gain(tb: tbmod.Testbed) -> None:
    rr = relative_robustness(tb, "y", {"robust": "std-60", "worse": "std-80", "adv": "std-60"}, x="x")
    assert rr.at["robust", "relative_robustness"] == pytest.approx(10.0)   # 60 - 50
    assert rr.at["worse", "relative_robustness"] == pytest.approx(-10.0)  # 60 - 70
    assert rr.at["adv", "relative_robustness"] == pytest.approx(-6.0)     # 44 - 50
    assert rr.at["robust", "x_gain"] == pytest.approx(5.0)               # 65 - 60
    assert rr.at["worse", "x_gain"] == pytest.approx(-5.0)               # 75 - 80
    assert rr.at["worse", "baseline"] == "std-80"
    only = relative_robustness(tb, "y", {"robust": "std-60", "worse": "std-80"}, models=["worse"])
    assert list(only.index) == ["worse"]


def test_relative_robustness_errors(tb: tbmod.Testbed) -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'std-60'") as info:
        relative_robustness(tb, "y", "std-6O")
    assert "unknown model" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="std-80"):
        relative_robustness(tb, "y", {"robust": "std-8"})
    with pytest.raises(ConfigError, match="robust"):
        relative_robustness(tb, "y", {"robustt": "std-80"})
    with pytest.raises(ConfigError, match=r"did you mean 'y'"):
        relative_robustness(tb, "yy", "std-60")
    with pytest.raises(ConfigError, match=r"did you mean 'x'"):
        relative_robustness(tb, "y", "std-60", x="xx")
    with pytest.raises(DataError, match="std-empty"):
        relative_robustness(tb, "y", "std-empty")


def test_prediction_interval_is_statsmodels_ols_obs_interval_in_scaled_coordinates():
    import statsmodels.api as sm

    from shiftbench.analysis.scaling import inverse, transform

    rng = np.random.default_rng(3)
    x = rng.uniform(55, 85, 40)
    y = inverse(0.9 * transform(x, "logit") - 0.4 + rng.normal(0, 0.05, 40), "logit")
    fit = fit_trend(x=x, y=y, scale="logit")
    at = np.array([50.0, 70.0, 90.0])
    lo, hi = fit.prediction_interval(at, confidence=0.95)
    ols = sm.OLS(transform(y, "logit"), sm.add_constant(transform(x, "logit"))).fit()
    frame = ols.get_prediction(sm.add_constant(transform(at, "logit"))).summary_frame(alpha=0.05)
    np.testing.assert_allclose(lo, inverse(frame["obs_ci_lower"].to_numpy(), "logit"), rtol=1e-9)
    np.testing.assert_allclose(hi, inverse(frame["obs_ci_upper"].to_numpy(), "logit"), rtol=1e-9)


def test_significantly_above_counts_only_models_inside_the_fitted_range_and_beyond_the_scatter():
    from shiftbench import load_testbed
    from shiftbench.analysis.robustness import trend_verdicts

    tb = load_testbed("imagenet-reference")
    er = effective_robustness(tb, "val-on-vid-robust-classes", "imagenet-vid-robust_pm10", n_resamples=200)
    verdict = trend_verdicts(er)
    fit = er.attrs["fit"]
    outside = (er["x_acc"] < fit.x_range[0]) | (er["x_acc"] > fit.x_range[1])
    assert (verdict[outside] == "outside").all() and (verdict[~outside] != "outside").all()
    above_by_bar = int(((er["er_low"] > 0) & ~outside).sum())      # 46 of the 158 the bar alone counts
    assert 0 < (verdict == "above").sum() < above_by_bar             # the standard models' scatter counts too
    assert (er["er_low"] > 0).sum() > 3 * (verdict == "above").sum()
    lo, hi = fit.prediction_interval(er.loc[verdict == "above", "x_acc"].to_numpy())
    assert (er.loc[verdict == "above", "y_acc"] > hi).all()
    assert (verdict[er["in_fit"]] == "above").sum() <= 0.1 * er["in_fit"].sum()
