"""Effective robustness against several in-distribution test sets (Shi et al. 2023, NeurIPS):
the plane ``t(y) = sum_k a_k t(x_k) + b`` of ``fit_trend`` with K >= 2 x settings, against
independent computations, on a testbed built so that models trained "on other data" sit above the
one-x line but on the two-x plane, and through the CLI."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy import stats
from scipy.special import ndtri
from typer.testing import CliRunner

from shiftbench import cli
from shiftbench import testbed as tbmod
from shiftbench.analysis.robustness import effective_robustness, trend_verdicts
from shiftbench.analysis.trend import (
    MultiTrendFit,
    TrendFit,
    bootstrap_band,
    bootstrap_interval,
    fit_piecewise_trend,
    fit_trend,
)
from shiftbench.errors import ConfigError, DataError

runner = CliRunner()
X2 = ["val", "other-id"]


def logit(acc: np.ndarray) -> np.ndarray:
    """Written out here, not shiftbench's transform: accuracies in percent to log-odds."""
    p = np.asarray(acc, dtype=float) / 100
    return np.log(p / (1 - p))


def expit100(z: np.ndarray) -> np.ndarray:
    return 100 / (1 + np.exp(-np.asarray(z, dtype=float)))


# --------------------------------------------------------------------------- fixtures
A1, A2, B = 0.7, 0.4, -0.6           # the true plane: logit(shift) = A1 logit(val) + A2 logit(other-id) + B


def two_data_testbed(n_standard: int = 20, seed: int = 0) -> tbmod.Testbed:
    """STANDARD models trained on the "val" distribution (other-id accuracy well below val, with
    scatter of its own) and MORE_DATA models trained on the other distribution (other-id accuracy
    high, val lower). Every model's shift accuracy lies on the same plane by construction (small
    noise for the standard ones), so the other-data models are above any line on val alone."""
    rng = np.random.default_rng(seed)
    val = rng.uniform(55, 85, n_standard)
    other = expit100(0.8 * logit(val) - 0.9 + rng.normal(0, 0.4, n_standard))
    shift = expit100(A1 * logit(val) + A2 * logit(other) + B + rng.normal(0, 0.015, n_standard))
    val_b = np.array([56.0, 60.0, 63.0, 66.0, 68.0, 71.0])
    other_b = np.array([79.0, 82.0, 84.0, 86.0, 87.5, 89.0])
    shift_b = expit100(A1 * logit(val_b) + A2 * logit(other_b) + B)
    frame = pd.DataFrame({
        "model": [f"std-{i}" for i in range(n_standard)] + [f"clip-{i}" for i in range(len(val_b))],
        "model_type": ["STANDARD"] * n_standard + ["MORE_DATA"] * len(val_b),
        "val": np.r_[val, val_b], "other-id": np.r_[other, other_b], "shift": np.r_[shift, shift_b],
    })
    frame.loc[3, "other-id"] = np.nan          # one standard model without the second ID accuracy
    return tbmod.Testbed.from_frame(frame, name="two-data")


@pytest.fixture(scope="module")
def tb() -> tbmod.Testbed:
    return two_data_testbed()


def standard_cells(tb: tbmod.Testbed, cols: list[str]) -> pd.DataFrame:
    return tb.accuracies[tb.model_types == "STANDARD"][cols].dropna()


# --------------------------------------------------------------------------- the fit
@pytest.mark.parametrize("scale", ["logit", "probit"])
def test_coefficients_match_lstsq_on_transformed_accuracies(tb: tbmod.Testbed, scale: str) -> None:
    fit = fit_trend(tb, X2, "shift", scale)
    cells = standard_cells(tb, [*X2, "shift"])
    t = logit if scale == "logit" else (lambda a: ndtri(np.asarray(a) / 100))
    design = np.column_stack([t(cells["val"]), t(cells["other-id"]), np.ones(len(cells))])
    coef, *_ = np.linalg.lstsq(design, t(cells["shift"]), rcond=None)
    assert isinstance(fit, MultiTrendFit) and fit.kind == "multi"
    assert fit.coefficients == pytest.approx(coef[:2], rel=1e-10)
    assert fit.intercept == pytest.approx(coef[2], rel=1e-10)
    assert fit.coefficient_by_x == pytest.approx({"val": coef[0], "other-id": coef[1]}, rel=1e-10)
    resid = t(cells["shift"]) - design @ coef
    ys = t(cells["shift"])
    assert fit.r2 == pytest.approx(1 - resid @ resid / ((ys - ys.mean()) ** 2).sum(), rel=1e-10)
    assert fit.n_models == len(cells) == 19 and fit.n_skipped == 1
    assert fit.x == ("val", "other-id") and fit.y == "shift" and fit.fit_on == ("STANDARD",)


def test_plane_recovers_the_construction(tb: tbmod.Testbed) -> None:
    fit = fit_trend(tb, X2, "shift")
    assert np.abs(np.subtract(fit.coefficients, (A1, A2))) == pytest.approx([0, 0], abs=4 * max(fit.coefficient_se))
    assert fit.intercept == pytest.approx(B, abs=4 * fit.intercept_se)
    assert fit.r2 > 0.99


def test_standard_errors_and_intervals_match_statsmodels(tb: tbmod.Testbed) -> None:
    fit = fit_trend(tb, X2, "shift")
    cells = standard_cells(tb, [*X2, "shift"])
    design = sm.add_constant(np.column_stack([logit(cells["val"]), logit(cells["other-id"])]))
    ols = sm.OLS(logit(cells["shift"]), design).fit()
    assert fit.coefficient_se == pytest.approx(ols.bse[1:], rel=1e-8)
    assert fit.intercept_se == pytest.approx(ols.bse[0], rel=1e-8)
    points = np.array([[60.0, 40.0], [75.0, 55.0], [66.0, 86.0]])
    new = sm.add_constant(logit(points), has_constant="add")
    frame = ols.get_prediction(new).summary_frame(alpha=0.1)
    lo, hi = fit.prediction_interval(points, confidence=0.9)
    assert lo == pytest.approx(expit100(frame["obs_ci_lower"]), rel=1e-8)
    assert hi == pytest.approx(expit100(frame["obs_ci_upper"]), rel=1e-8)
    clo, chi = fit.confidence_interval(points, confidence=0.9)
    assert clo == pytest.approx(expit100(frame["mean_ci_lower"]), rel=1e-8)
    assert chi == pytest.approx(expit100(frame["mean_ci_upper"]), rel=1e-8)
    assert fit.predict(points) == pytest.approx(expit100(frame["mean"]), rel=1e-10)


def test_predict_takes_arrays_dataframes_and_one_model(tb: tbmod.Testbed) -> None:
    fit = fit_trend(tb, X2, "shift")
    points = np.array([[60.0, 40.0], [75.0, 55.0]])
    by_array = fit.predict(points)
    assert by_array.shape == (2,)
    expected = expit100(fit.coefficients[0] * logit(points[:, 0]) + fit.coefficients[1] * logit(points[:, 1])
                        + fit.intercept)
    assert by_array == pytest.approx(expected, rel=1e-12)
    # a DataFrame's columns are matched by name, whatever their order
    frame = pd.DataFrame(points[:, ::-1], columns=["other-id", "val"])
    assert fit.predict(frame) == pytest.approx(by_array, rel=1e-12)
    assert fit.predict(points[1]) == pytest.approx(by_array[1], rel=1e-12)
    with pytest.raises(ConfigError, match="needs 2 accuracies"):
        fit.predict(np.array([[60.0, 40.0, 30.0]]))


def test_to_dict_is_json_ready(tb: tbmod.Testbed) -> None:
    d = fit_trend(tb, X2, "shift").to_dict()
    assert d["kind"] == "multi" and d["x"] == X2 and set(d["coefficients"]) == set(X2)
    json.dumps(d)


def test_fit_on_arrays_matches_fit_on_the_testbed(tb: tbmod.Testbed) -> None:
    cells = standard_cells(tb, [*X2, "shift"])
    on_tb = fit_trend(tb, X2, "shift")
    on_frame = fit_trend(x=cells[X2], y=cells["shift"].to_numpy())
    on_array = fit_trend(x=cells[X2].to_numpy(), y=cells["shift"].to_numpy())
    for fit in (on_frame, on_array):
        assert fit.coefficients == pytest.approx(on_tb.coefficients, rel=1e-12)
        assert fit.intercept == pytest.approx(on_tb.intercept, rel=1e-12)
    assert on_frame.x == tuple(X2) and on_array.x is None and on_array.x_labels == ("x1", "x2")


# --------------------------------------------------------------------------- K = 1 is today's fit
def test_one_x_in_a_list_is_exactly_the_single_axis_fit(tb: tbmod.Testbed) -> None:
    today = fit_trend(tb, "val", "shift")
    listed = fit_trend(tb, ["val"], "shift")
    assert type(listed) is TrendFit and listed == today
    assert np.array_equal(listed.xs, today.xs) and np.array_equal(listed.ys, today.ys)
    cells = standard_cells(tb, ["val", "shift"])
    ref = stats.linregress(logit(cells["val"]), logit(cells["shift"]))
    assert today.slope == pytest.approx(ref.slope, rel=1e-10)
    assert today.intercept == pytest.approx(ref.intercept, rel=1e-10)
    assert today.r2 == pytest.approx(ref.rvalue ** 2, rel=1e-10)


def test_one_column_arrays_are_the_single_axis_fit() -> None:
    x, y = [60.0, 70.0, 80.0, 75.0], [45.0, 56.0, 67.0, 60.0]
    assert fit_trend(x=np.array(x)[:, None], y=y) == fit_trend(x=x, y=y)
    assert fit_trend(x=pd.DataFrame({"val": x}), y=y) == fit_trend(x=x, y=y)


def test_one_x_in_a_list_gives_today_s_effective_robustness(tb: tbmod.Testbed) -> None:
    today = effective_robustness(tb, "val", "shift", n_resamples=300)
    listed = effective_robustness(tb, ["val"], "shift", n_resamples=300)
    pd.testing.assert_frame_equal(listed, today)


# --------------------------------------------------------------------------- the paper's point
def test_other_data_models_are_robust_against_one_x_but_not_against_the_plane(tb: tbmod.Testbed) -> None:
    one = effective_robustness(tb, "val", "shift", n_resamples=500)
    two = effective_robustness(tb, X2, "shift", n_resamples=500)
    both = effective_robustness(tb, X2, "shift", fit_on=["STANDARD", "MORE_DATA"], n_resamples=500)
    clips = [m for m in tb.models if m.startswith("clip-")]
    assert (one.loc[clips, "effective_robustness"] > 10).all()
    assert (one.loc[clips, "er_low"] > 5).all()               # "significantly" robust against val alone
    assert one.loc[clips, "effective_robustness"].mean() > 15
    assert two.loc[clips, "effective_robustness"].abs().max() < 1.5    # extrapolated plane, STANDARD only
    assert both.loc[clips, "effective_robustness"].abs().max() < 0.5   # the paper's fit: both training sets
    assert ((two.loc[clips, "er_low"] < 0) & (two.loc[clips, "er_high"] > 0)).all()
    assert both.attrs["fit"].n_models == 25


def test_multi_effective_robustness_columns_and_values(tb: tbmod.Testbed) -> None:
    er = effective_robustness(tb, X2, "shift", n_resamples=0)
    assert list(er.columns) == ["model_type", "x_acc:val", "x_acc:other-id", "y_acc", "predicted_y_acc",
                                "effective_robustness", "er_low", "er_high", "in_fit"]
    assert er.attrs["x"] == tuple(X2) and er.attrs["y"] == "shift" and er.attrs["n_skipped"] == 1
    assert "std-3" not in er.index and er["in_fit"].sum() == 19
    fit = er.attrs["fit"]
    pred = fit.predict(er[["x_acc:val", "x_acc:other-id"]].to_numpy())
    assert er["effective_robustness"].to_numpy() == pytest.approx(er["y_acc"].to_numpy() - pred, rel=1e-12)
    # without a bootstrap and without test-set sizes the interval is the point
    assert (er["er_low"] == er["effective_robustness"]).all()


def test_multi_effective_robustness_on_arrays(tb: tbmod.Testbed) -> None:
    cells = tb.accuracies[[*X2, "shift"]].dropna()
    fit = fit_trend(tb, X2, "shift")
    er = effective_robustness(x=cells[X2].to_numpy(), y=cells["shift"].to_numpy(), fit=fit, n_resamples=0)
    on_tb = effective_robustness(tb, X2, "shift", n_resamples=0)
    assert er["effective_robustness"].to_numpy() == pytest.approx(on_tb["effective_robustness"].to_numpy())
    assert list(er.columns[1:3]) == ["x_acc:val", "x_acc:other-id"]


def test_bootstrap_interval_is_seeded_and_brackets_the_plane(tb: tbmod.Testbed) -> None:
    fit = fit_trend(tb, X2, "shift")
    points = np.array([[60.0, 40.0], [75.0, 55.0]])
    lo, hi = bootstrap_interval(fit, points, n_resamples=400, seed=1)
    lo2, hi2 = bootstrap_interval(fit, points, n_resamples=400, seed=1)
    assert np.array_equal(lo, lo2) and np.array_equal(hi, hi2)
    pred = fit.predict(points)
    assert (lo < pred).all() and (pred < hi).all()


def test_bootstrap_interval_of_a_line_equals_its_band_on_the_grid() -> None:
    rng = np.random.default_rng(2)
    x = rng.uniform(55, 85, 15)
    y = expit100(0.9 * logit(x) - 0.4 + rng.normal(0, 0.05, 15))
    fit = fit_trend(x=x, y=y)
    grid = np.array([60.0, 70.0, 80.0])
    band = bootstrap_band(fit, grid=grid, n_resamples=500, seed=4)
    lo, hi = bootstrap_interval(fit, grid, n_resamples=500, seed=4)
    assert lo == pytest.approx(band.lower, rel=1e-12)
    assert hi == pytest.approx(band.upper, rel=1e-12)


def test_trend_verdicts_against_a_plane(tb: tbmod.Testbed) -> None:
    er = effective_robustness(tb, X2, "shift", fit_on=["STANDARD", "MORE_DATA"], n_resamples=300)
    verdicts = trend_verdicts(er)
    assert set(verdicts) <= {"on", "outside"} and (verdicts[[m for m in er.index if m.startswith("clip")]] == "on").all()
    alone = effective_robustness(tb, X2, "shift", n_resamples=300)
    assert (trend_verdicts(alone)[[m for m in alone.index if m.startswith("clip")]] == "outside").all()


# --------------------------------------------------------------------------- errors
def test_too_few_models_is_a_config_error_naming_the_settings_and_count(tb: tbmod.Testbed) -> None:
    with pytest.raises(ConfigError) as info:
        fit_trend(tb, X2, "shift", fit_on=["std-0", "std-1", "std-2", "std-3"])
    msg = str(info.value)
    assert "'val'" in msg and "'other-id'" in msg and "'shift'" in msg
    assert "at least 4" in msg and "gave 3" in msg and "1 skipped" in msg and "\n" not in msg


def test_repeated_x_and_y_among_x_are_config_errors(tb: tbmod.Testbed) -> None:
    with pytest.raises(ConfigError, match="'val' twice"):
        fit_trend(tb, ["val", "other-id", "val"], "shift")
    with pytest.raises(ConfigError, match="y='shift' is also among the x"):
        fit_trend(tb, ["val", "shift"], "shift")
    with pytest.raises(ConfigError, match="twice"):
        effective_robustness(tb, ["val", "val"], "shift")


def test_unknown_setting_among_x_is_a_config_error(tb: tbmod.Testbed) -> None:
    with pytest.raises(ConfigError, match="did you mean 'other-id'"):
        fit_trend(tb, ["val", "other-ids"], "shift")


def test_collinear_x_is_a_data_error() -> None:
    frame = pd.DataFrame({"model": list("abcde"), "model_type": "STANDARD", "val": [60.0, 65, 70, 75, 80],
                          "copy": [60.0, 65, 70, 75, 80], "shift": [50.0, 54, 59, 66, 70]})
    tb = tbmod.Testbed.from_frame(frame)
    with pytest.raises(DataError, match="collinear"):
        fit_trend(tb, ["val", "copy"], "shift")


def test_what_a_plane_does_not_offer(tb: tbmod.Testbed) -> None:
    fit = fit_trend(tb, X2, "shift")
    with pytest.raises(ConfigError, match="bootstrap band"):
        bootstrap_band(fit)
    with pytest.raises(ConfigError, match="piecewise trend takes one x"):
        fit_piecewise_trend(tb, X2, "shift", 65.0)
    with pytest.raises(ConfigError, match="band="):
        effective_robustness(tb, X2, "shift", band=bootstrap_band(fit_trend(tb, "val", "shift")))
    with pytest.raises(ConfigError, match="not over"):
        effective_robustness(tb, ["other-id", "val"], "shift", fit=fit)
    with pytest.raises(ConfigError, match="one x"):
        effective_robustness(tb, X2, "shift", fit=fit_trend(tb, "val", "shift"))
    with pytest.raises(ConfigError, match="testbed"):
        fit_trend(x=X2, y="shift")


# --------------------------------------------------------------------------- CLI
@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory, tb: tbmod.Testbed) -> str:
    path = tmp_path_factory.mktemp("multi") / "two-data.csv"
    tb.save(path)
    return str(path)


def ok(*args: str) -> str:
    result = runner.invoke(cli.app, list(args))
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout


def test_cli_fit_with_two_x_agrees_with_the_api(table: str) -> None:
    tb = tbmod.Testbed.read(table)
    d = json.loads(ok("fit", "--testbed", table, "--x", "val", "--x", "other-id", "--y", "shift", "--json"))
    fit = fit_trend(tb, X2, "shift")
    assert d["kind"] == "multi" and d["x"] == X2 and d["n_models"] == fit.n_models
    assert d["coefficients"] == pytest.approx(fit.coefficient_by_x, rel=1e-12)
    assert d["intercept"] == pytest.approx(fit.intercept, rel=1e-12)
    text = ok("fit", "--testbed", table, "--x", "val", "--x", "other-id", "--y", "shift")
    assert "coef[val]" in text and "coef[other-id]" in text and "val + other-id" in text


def test_cli_one_x_is_unchanged(table: str) -> None:
    tb = tbmod.Testbed.read(table)
    d = json.loads(ok("fit", "--testbed", table, "--x", "val", "--y", "shift", "--json"))
    assert d == json.loads(json.dumps(fit_trend(tb, "val", "shift").to_dict()))
    rows = json.loads(ok("effective-robustness", "--testbed", table, "--x", "val", "--y", "shift", "--json"))
    assert "x_acc" in rows[0] and rows[0]["model"].startswith("clip-")


def test_cli_effective_robustness_with_two_x(table: str) -> None:
    tb = tbmod.Testbed.read(table)
    args = ["effective-robustness", "--testbed", table, "--x", "val", "--x", "other-id", "--y", "shift"]
    rows = json.loads(ok(*args, "--json"))
    api = effective_robustness(tb, X2, "shift")
    assert {"x_acc:val", "x_acc:other-id", "effective_robustness", "er_low", "er_high"} <= set(rows[0])
    for r in rows:
        assert r["effective_robustness"] == pytest.approx(api.at[r["model"], "effective_robustness"], rel=1e-12)
    top = json.loads(ok(*args, "--fit-on", "STANDARD,MORE_DATA", "--top", "3", "--json"))
    assert len(top) == 3
    text = ok(*args)
    assert "other-id %" in text and "1 models skipped: no accuracy on all settings." in text


def test_cli_errors_with_two_x(table: str) -> None:
    result = runner.invoke(cli.app, ["fit", "--testbed", table, "--x", "val", "--x", "val", "--y", "shift"])
    assert result.exit_code != 0 and isinstance(result.exception, ConfigError)
    result = runner.invoke(cli.app, ["fit", "--testbed", table, "--x", "val", "--x", "other-id", "--y", "shift",
                                     "--pivot", "65"])
    assert result.exit_code != 0 and "piecewise" in str(result.exception)
