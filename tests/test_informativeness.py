"""Metric informativeness (Djolonga et al. 2021, §4): the batched solver against scikit-learn,
the cross-validated balanced accuracy against cross_val_predict, and hand-worked cases."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import balanced_accuracy_score
from sklearn.preprocessing import StandardScaler

from shiftbench.analysis.informativeness import (
    _cv_balanced_accuracy, _Plan, _stratified_counts, _stratified_folds, fit_logistic_batch,
    informativeness_groups, informativeness_ranking, metric_informativeness, top_informative)
from shiftbench.errors import ConfigError, DataError
from shiftbench import testbed as tbmod


def sklearn_raw_coef(x: np.ndarray, y: np.ndarray, w: np.ndarray, C: float = 1.0,
                     class_weight: str | None = None) -> np.ndarray:
    """scikit-learn's standardised logistic regression, mapped back to raw-feature coefficients."""
    scaler = StandardScaler().fit(x, sample_weight=w)
    lr = LogisticRegression(C=C, tol=1e-12, max_iter=100_000, class_weight=class_weight).fit(
        scaler.transform(x), y, sample_weight=w)
    raw = lr.coef_[0] / scaler.scale_
    return np.concatenate([[lr.intercept_[0] - raw @ scaler.mean_], raw])


def noisy_problem(n: int = 80, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2)) * [3.0, 0.5] + [70.0, 1.0]
    y = (x[:, 0] / 3 + 2 * x[:, 1] + rng.normal(size=n) > 25.3).astype(float)
    return x, y


# --------------------------------------------------------------------------- the solver
@pytest.mark.parametrize("C", [1.0, 0.05])
def test_batched_solver_matches_sklearn_on_weighted_standardised_problems(C):
    x, y = noisy_problem()
    weights = np.random.default_rng(2).integers(0, 3, size=(5, len(y))).astype(float)
    ours = fit_logistic_batch(x, y, weights, C=C)
    for k in range(len(weights)):
        np.testing.assert_allclose(ours[k], sklearn_raw_coef(x, y, weights[k], C), rtol=1e-5, atol=1e-6)


def test_balanced_class_weights_match_sklearn_on_training_subsets():
    x, y = noisy_problem(90, seed=3)
    y[:60] = 0.0                                                    # imbalanced: few positives
    subsets = (np.random.default_rng(4).random((4, len(y))) < 0.7).astype(float)
    ours = fit_logistic_batch(x, y, subsets, balanced=True)
    for k, w in enumerate(subsets):
        keep = w > 0
        np.testing.assert_allclose(ours[k], sklearn_raw_coef(x[keep], y[keep], np.ones(keep.sum()),
                                                             class_weight="balanced"), rtol=1e-5, atol=1e-6)


def test_batched_solver_stays_finite_on_separable_data_and_matches_sklearn():
    x, _ = noisy_problem()
    y = (x[:, 0] > 70).astype(float)                 # perfectly separable: only the L2 penalty keeps b finite
    ours = fit_logistic_batch(x, y, np.ones((1, len(y))))[0]
    assert np.all(np.isfinite(ours))
    np.testing.assert_allclose(ours, sklearn_raw_coef(x, y, np.ones(len(y))), rtol=1e-5)


@pytest.mark.parametrize("class_weight", [None, "balanced"])
def test_cv_balanced_accuracy_equals_sklearn_cross_val_predict_on_the_same_folds(class_weight):
    x, y = noisy_problem(60, seed=4)
    rng = np.random.default_rng(0)
    folds = np.stack([_stratified_folds(y.astype(int), 4, rng) for _ in range(3)])
    plan = _Plan(np.ones((3, len(y))), folds, 4)
    ours = _cv_balanced_accuracy(x, y, plan, 1.0, balanced=class_weight == "balanced")
    for r in range(3):
        pred = np.empty(len(y))
        for k in range(4):
            test = folds[r] == k
            scaler = StandardScaler().fit(x[~test])
            lr = LogisticRegression(class_weight=class_weight).fit(scaler.transform(x[~test]), y[~test])
            pred[test] = lr.predict(scaler.transform(x[test]))
        assert ours[r] == pytest.approx(100 * balanced_accuracy_score(y, pred))


def test_weighted_balanced_accuracy_counts_a_resampled_model_once_per_copy():
    # 2 features, folds fixed; weight 3 on one model must equal three physical copies of it
    x, y = noisy_problem(40, seed=7)
    folds = _stratified_folds(y.astype(int), 4, np.random.default_rng(1))
    counts = np.ones(len(y))
    counts[[0, 5]] = [3, 0]
    weighted = _cv_balanced_accuracy(x, y, _Plan(counts[None], folds[None], 4), 1.0)[0]
    rows = np.repeat(np.arange(len(y)), counts.astype(int))
    copies = _cv_balanced_accuracy(x[rows], y[rows], _Plan(np.ones((1, len(rows))), folds[rows][None], 4), 1.0)[0]
    assert weighted == pytest.approx(copies)


def test_stratified_bootstrap_keeps_group_sizes_and_folds_spread_each_group():
    y = np.array([0] * 13 + [1] * 7)
    rng = np.random.default_rng(3)
    counts = _stratified_counts(y, rng)
    assert counts[y == 0].sum() == 13 and counts[y == 1].sum() == 7
    folds = _stratified_folds(y, 5, rng)
    assert sorted(np.bincount(folds[y == 1], minlength=5)) == [1, 1, 1, 2, 2]
    assert sorted(np.bincount(folds[y == 0], minlength=5)) == [2, 2, 3, 3, 3]


# --------------------------------------------------------------------------- hand-worked gains
ID = np.array([70.0, 72.0, 74.0, 76.0, 78.0, 80.0] * 4)
GROUP = np.array([0] * 12 + [1] * 12)


def test_a_metric_separating_groups_at_equal_id_accuracy_shows_a_large_gain():
    # both groups have exactly the same ID accuracies: ID alone is at chance, the metric is perfect
    metric = np.where(GROUP == 1, 1.0, 0.0) + np.linspace(0, 0.1, len(ID))
    res = metric_informativeness(ID, metric, GROUP, n_resamples=30, n_folds=4)
    assert res.score_metric == 100.0
    assert res.score_id <= 60.0
    assert res.gain >= 40.0 and res.gain_mean >= 40.0
    assert res.gain_sd < 15.0
    assert (res.n_group, res.n_baseline, res.n_resamples, len(res.gains)) == (12, 12, 30, 30)


@pytest.mark.parametrize("transform", [lambda x: 2.0 * x + 1.0, lambda x: -0.5 * x])
def test_a_metric_that_is_an_affine_function_of_id_accuracy_adds_nothing(transform):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(72, 3, 20), rng.normal(76, 3, 20)])   # groups overlap in ID accuracy
    y = np.array([0] * 20 + [1] * 20)
    res = metric_informativeness(x, transform(x), y, n_resamples=40)
    assert abs(res.gain) < 1.0
    assert abs(res.gain_mean) < 1.0
    assert res.score_metric == pytest.approx(res.score_id, abs=1.0)


def test_when_id_accuracy_already_separates_the_groups_both_scores_are_perfect_and_the_gain_is_zero():
    x = np.array([60.0, 61, 62, 63, 64, 65, 80, 81, 82, 83, 84, 85])
    y = np.array([0] * 6 + [1] * 6)
    res = metric_informativeness(x, x**2, y, n_resamples=10, n_folds=3)
    assert (res.score_id, res.score_metric, res.gain) == (100.0, 100.0, 0.0)
    assert abs(res.gain_mean) < 5.0            # resamples can still differ by a model near the boundary


def test_bootstrap_is_seeded_and_its_size_is_a_parameter():
    rng = np.random.default_rng(5)
    metric = GROUP + rng.normal(0, 0.8, len(GROUP))
    a = metric_informativeness(ID, metric, GROUP, n_resamples=25, n_folds=3, seed=1)
    b = metric_informativeness(ID, metric, GROUP, n_resamples=25, n_folds=3, seed=1)
    c = metric_informativeness(ID, metric, GROUP, n_resamples=25, n_folds=3, seed=2)
    np.testing.assert_array_equal(a.gains, b.gains)
    assert not np.array_equal(a.gains, c.gains)
    assert a.gain_sd == pytest.approx(np.std(a.gains, ddof=1))


def test_balanced_class_weights_let_a_small_group_be_predicted_at_all():
    rng = np.random.default_rng(0)
    x = rng.normal(75, 3, 130)
    y = np.array([1] * 10 + [0] * 120)
    metric = np.where(y == 1, 1.0, 0.0) + rng.normal(0, 0.6, len(y))   # informative but noisy
    weighted = metric_informativeness(x, metric, y, n_resamples=10)
    plain = metric_informativeness(x, metric, y, n_resamples=10, class_weight=None)
    assert plain.score_id == 50.0                          # the unweighted fit always says "baseline"
    assert weighted.gain > plain.gain + 5


def test_models_with_a_missing_value_are_dropped_and_counted():
    metric = np.where(GROUP == 1, 1.0, 0.0)
    metric[[0, 13]] = np.nan
    res = metric_informativeness(ID, metric, GROUP, n_resamples=5, n_folds=3)
    assert (res.n_group, res.n_baseline) == (11, 11)


@pytest.mark.parametrize("kwargs, message", [
    ({"n_resamples": 0}, "n_resamples=0 must be at least 1"),
    ({"n_folds": 1}, "n_folds=1 must be at least 2"),
    ({"C": 0.0}, "C=0.0 must be positive"),
    ({"class_weight": "even"}, "class_weight='even': use 'balanced'"),
])
def test_bad_parameters_are_config_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        metric_informativeness(ID, ID, GROUP, **kwargs)


def test_bad_inputs_are_data_errors_naming_the_fix():
    with pytest.raises(DataError, match="different lengths"):
        metric_informativeness(ID, ID[:-1], GROUP)
    with pytest.raises(DataError, match="booleans or 0/1"):
        metric_informativeness(ID, ID, np.where(GROUP == 1, 2, 0))
    with pytest.raises(DataError, match="at least 5 models in each group; the smaller group has 3"):
        metric_informativeness(ID[:15], ID[:15], GROUP[9:])


# --------------------------------------------------------------------------- ranking over a testbed
def tiny_testbed() -> tbmod.Testbed:
    """12 STANDARD and 12 MORE_DATA models at the same val accuracies; 3 ROBUST_INTV (too few)."""
    val = list(ID) + [71.0, 75.0, 79.0]
    types = ["STANDARD"] * 12 + ["MORE_DATA"] * 12 + ["ROBUST_INTV"] * 3
    more = np.array([t == "MORE_DATA" for t in types])
    sep = np.where(more, 60.0, 40.0) + np.linspace(0, 2, len(val))       # separates the groups
    same = np.array(val) - 10.0                                         # ID accuracy shifted: nothing new
    partial = same + np.linspace(0, 1, len(val))
    partial[[0, 1, 12]] = np.nan                                        # 3 models not evaluated
    frame = pd.DataFrame({"model": [f"m{i}" for i in range(len(val))], "model_type": types, "val": val,
                          "sep": sep, "same": same, "partial": partial})
    return tbmod.Testbed.from_frame(frame, name="tiny")


def test_ranking_puts_the_separating_setting_first_and_reports_the_models_used():
    tb = tiny_testbed()
    ranking = informativeness_ranking(tb, scale="linear", n_resamples=20, n_folds=3)
    assert list(ranking["group"].unique()) == ["MORE_DATA"]               # ROBUST_INTV has 3 < 10 models
    by = ranking.set_index("setting")
    assert by.loc["sep", "rank"] == 1 and by.loc["sep", "gain_mean"] > 40
    assert abs(by.loc["same", "gain"]) < 1.0 and by.loc["same", "gain_mean"] < 10
    assert (by.loc["partial", "n_group"], by.loc["partial", "n_baseline"]) == (11, 10)
    assert ranking.attrs["groups"] == ["MORE_DATA"] and ranking.attrs["n_resamples"] == 20
    assert ranking.attrs["seconds"] > 0


def test_one_setting_alone_scores_as_in_the_full_ranking():
    tb = tiny_testbed()
    full = informativeness_ranking(tb, n_resamples=15, n_folds=3).set_index("setting")
    alone = informativeness_ranking(tb, settings=["sep"], n_resamples=15, n_folds=3).set_index("setting")
    assert alone.loc["sep", "gain_mean"] == full.loc["sep", "gain_mean"]
    assert alone.loc["sep", "gain"] == full.loc["sep", "gain"]


def test_pairs_with_too_few_models_are_skipped_and_listed():
    tb = tiny_testbed()
    ranking = informativeness_ranking(tb, groups=["MORE_DATA", "ROBUST_INTV"], n_resamples=5, n_folds=3,
                                      min_models=11)
    assert ("MORE_DATA", "partial") in ranking.attrs["skipped"]          # 10 STANDARD models left
    assert ("ROBUST_INTV", "sep") in ranking.attrs["skipped"]
    assert set(ranking["setting"]) == {"sep", "same"}


def test_groups_default_to_typed_groups_with_enough_models():
    assert informativeness_groups(tiny_testbed(), "val") == ["MORE_DATA"]
    untyped = tiny_testbed().with_metadata(model_type={f"m{i}": "UNKNOWN" for i in range(12, 24)})
    assert informativeness_groups(untyped, "val") == []
    assert informativeness_groups(tiny_testbed(), "val", min_models=13) == []


def test_top_informative_keeps_the_best_settings_per_group():
    ranking = informativeness_ranking(tiny_testbed(), n_resamples=5, n_folds=3)
    top = top_informative(ranking, 1)
    assert list(top["setting"]) == ["sep"]
    with pytest.raises(ConfigError, match="top=0"):
        top_informative(ranking, 0)


def test_ranking_errors_name_the_fix():
    tb = tiny_testbed()
    with pytest.raises(ConfigError, match="unknown group 'MORE_DAT'; did you mean 'MORE_DATA'"):
        informativeness_ranking(tb, groups="MORE_DAT")
    with pytest.raises(ConfigError, match="unknown baseline model type 'STD'"):
        informativeness_ranking(tb, baseline="STD")
    with pytest.raises(ConfigError, match="unknown setting 'sepp'"):
        informativeness_ranking(tb, settings=["sepp"])
    with pytest.raises(DataError, match="no model type besides STANDARD with 30 models"):
        informativeness_ranking(tb, min_models=30)
    with pytest.raises(ConfigError, match="min_models=2 must be at least n_folds=5"):
        informativeness_ranking(tb, min_models=2)


# --------------------------------------------------------------------------- CLI and report
def test_cli_informativeness_json_is_the_api_top_k(tmp_path):
    import json

    from typer.testing import CliRunner

    from shiftbench.cli import app

    path = tiny_testbed().save(tmp_path / "tiny.csv")
    res = CliRunner().invoke(app, ["informativeness", "-t", str(path), "--group", "MORE_DATA", "--resamples", "7",
                                   "--folds", "3", "--top", "2", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    api = top_informative(informativeness_ranking(tbmod.Testbed.read(path), groups="MORE_DATA", n_resamples=7,
                                                  n_folds=3), 2)
    assert [r["setting"] for r in rows] == list(api["setting"]) and rows[0]["setting"] == "sep"
    assert rows[0]["gain_mean"] == pytest.approx(api["gain_mean"].iloc[0])


def test_cli_informativeness_prints_a_table_per_group_and_one_line_errors(tmp_path, capsys, monkeypatch):
    import sys

    from typer.testing import CliRunner

    from shiftbench.cli import app, main

    path = tiny_testbed().save(tmp_path / "tiny.csv")
    res = CliRunner().invoke(app, ["informativeness", "-t", str(path), "--resamples", "5", "--folds", "3"])
    assert res.exit_code == 0, res.output
    assert "tell MORE_DATA from STANDARD" in res.stdout and "ranked 3 settings for 1 groups" in res.stdout
    monkeypatch.setattr(sys, "argv", ["shiftbench", "informativeness", "-t", str(path), "--group", "MORE_DAT"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 1
    assert err[-1].startswith("error: unknown group 'MORE_DAT'; did you mean 'MORE_DATA'")


def test_report_shows_the_informativeness_section_only_with_two_groups(tmp_path):
    from shiftbench.report import write_html_report
    from shiftbench.report.shifts import ShiftPair

    shifts = [ShiftPair("Sep", "val", "sep")]
    tb = tiny_testbed()
    html = write_html_report([tb], tmp_path / "a", shifts=shifts, n_resamples=10, figure_formats=()).read_text()
    assert "Metric informativeness" in html and "Most informative settings beyond val accuracy" in html
    assert (tmp_path / "a" / "tiny" / "informativeness.csv").exists()
    alone = tb.select(model_types=["STANDARD", "ROBUST_INTV"])
    html = write_html_report([alone], tmp_path / "b", shifts=shifts, n_resamples=10, figure_formats=()).read_text()
    assert "Metric informativeness" not in html


def test_report_section_says_so_when_no_setting_has_enough_models(tmp_path):
    from shiftbench.report import write_html_report
    from shiftbench.report.shifts import ShiftPair

    tb = tiny_testbed()
    frame = tb.to_frame()
    more = frame["model_type"] == "MORE_DATA"
    for s in ("sep", "same", "partial"):
        frame.loc[more[more].index[:4], s] = np.nan                      # 8 MORE_DATA models left per setting
    html = write_html_report([tbmod.Testbed.from_frame(frame, name="tiny")], tmp_path,
                             shifts=[ShiftPair("Same", "val", "same")], n_resamples=10, figure_formats=()).read_text()
    assert "Metric informativeness" in html and "nothing to rank" in html
