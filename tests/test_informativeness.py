"""Metric informativeness (Djolonga et al. 2021, §3): the djolonga2021 recipe against a direct
scikit-learn computation, the one-vs-standard batched solver against scikit-learn, the minimums on
models per group and per metric, hand-worked cases, the CLI and the report section."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import balanced_accuracy_score
from sklearn.preprocessing import StandardScaler

import shiftbench

from shiftbench.analysis.informativeness import (
    METHODS, _cv_balanced_accuracy, _Plan, _solve_multinomial, _stratified_counts, _stratified_folds, cv_accuracy,
    cv_accuracy_batch, fit_logistic_batch, fit_multinomial_batch, informativeness_groups, informativeness_ranking,
    method_info, metric_informativeness, top_informative, with_method_columns)
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


def three_groups(n: int = 20, seed: int = 0) -> tbmod.Testbed:
    """STANDARD, MORE_DATA and LP_ADV, n models each, drawn from the same val distribution; ``sep``
    separates LP_ADV from the rest perfectly, ``noise`` is independent of the group."""
    rng = np.random.default_rng(seed)
    types = np.repeat(["STANDARD", "MORE_DATA", "LP_ADV"], n)
    val = rng.uniform(60, 80, len(types))
    sep = np.where(types == "LP_ADV", 70.0, 30.0) + rng.uniform(0, 5, len(types))
    noise = rng.uniform(20, 60, len(types))
    frame = pd.DataFrame({"model": [f"m{i}" for i in range(len(types))], "model_type": types, "val": val,
                          "sep": sep, "noise": noise})
    return tbmod.Testbed.from_frame(frame, name="three")


def test_djolonga_is_the_default_and_ranks_the_separating_metric_first_and_noise_near_zero():
    ranking = informativeness_ranking(three_groups(), scale="linear", n_resamples=40, n_repeats=3)
    assert ranking.attrs["method"]["name"] == "djolonga2021" and set(ranking["method"]) == {"djolonga2021"}
    assert ranking.attrs["groups"] == ["LP_ADV", "MORE_DATA", "STANDARD"]     # largest first, ties by name
    by = ranking.set_index("setting")
    assert list(ranking["setting"]) == ["sep", "noise"] and by.loc["sep", "rank"] == 1
    # val alone is at chance among 3 equal groups (~33%); sep identifies LP_ADV: +~33 points
    assert by.loc["sep", "score_id"] < 50 and by.loc["sep", "gain_mean"] > 20
    assert by.loc["sep", "gain_mean"] > by.loc["sep", "gain_sd"] * 3
    assert abs(by.loc["noise", "gain_mean"]) < 8 and abs(by.loc["noise", "gain_mean"]) < by.loc["sep", "gain_mean"] / 3
    assert by.loc["sep", "n_models"] == 60 and by.loc["sep", "models_per_group"] == "LP_ADV 20, MORE_DATA 20, STANDARD 20"
    assert by["n_group"].isna().all()                                  # a binary-task column only


def test_cv_accuracy_is_sklearn_cross_val_predict_on_the_same_folds():
    from sklearn.model_selection import StratifiedKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline

    rng = np.random.default_rng(0)
    y = np.repeat([0, 1, 2], 15)
    x = np.column_stack([rng.normal(size=45), y + rng.normal(scale=1.2, size=45)]) * [3, 1] + [70, 0]
    splits = list(StratifiedKFold(4, shuffle=True, random_state=3).split(x, y))
    folds = np.empty(len(y), dtype=int)
    for k, (_, test) in enumerate(splits):
        folds[test] = k
    pipe = make_pipeline(StandardScaler(), LogisticRegression(solver="newton-cholesky", max_iter=1000))
    expected = 100 * np.mean(cross_val_predict(pipe, x, y, cv=splits) == y)
    assert cv_accuracy(x, y, folds) == pytest.approx(expected)
    assert 40 < expected < 100                                         # not a degenerate case


def test_djolonga_scores_on_the_data_equal_a_direct_sklearn_computation():
    from sklearn.model_selection import StratifiedKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline

    tb = three_groups(12, seed=4)
    ranking = informativeness_ranking(tb, scale="linear", n_resamples=3, n_repeats=2, n_folds=3, seed=7)
    row = ranking.set_index("setting").loc["noise"]
    frame = tb.to_frame()
    y = pd.Categorical(frame["model_type"], categories=ranking.attrs["groups"]).codes
    pipe = make_pipeline(StandardScaler(), LogisticRegression(solver="newton-cholesky", max_iter=1000))

    def acc(cols):
        return np.mean([100 * np.mean(cross_val_predict(pipe, frame[cols].to_numpy(), y, cv=StratifiedKFold(
            3, shuffle=True, random_state=7 + r)) == y) for r in range(2)])

    assert row["score_id"] == pytest.approx(acc(["val"]))
    assert row["score_metric"] == pytest.approx(acc(["val", "noise"]))
    assert row["gain"] == pytest.approx(acc(["val", "noise"]) - acc(["val"]))


# --------------------------------------------------------------------------- djolonga2021: batched Newton
def multinomial_problems(seed: int, n: int = 90, n_classes: int = 5, n_problems: int = 8):
    """Weighted, per-problem standardised multinomial problems: bootstrap multiplicities times a
    training mask, with a class missing from some (and only two classes, or one, in others)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, n)
    x = rng.normal(size=(n, 2)) * [2.0, 0.3] + y[:, None] * [0.8, 0.1] + [1.0, -2.0]
    w = rng.poisson(1.0, (n_problems, n)).astype(float) * (rng.random((n_problems, n)) < 0.8)
    w[1, y == 2] = 0                                                   # a class absent from the training rows
    w[2, y >= 2] = 0                                                   # two classes: scikit-learn's binary model
    w[3, y >= 1] = 0                                                   # one class: nothing to fit
    mean = np.stack([np.average(x, axis=0, weights=wb) for wb in w])
    sd = np.sqrt(np.stack([np.average((x - m) ** 2, axis=0, weights=wb) for wb, m in zip(w, mean)]))
    return (x[None] - mean[:, None]) / sd[:, None], y, w


@pytest.mark.parametrize("C", [1.0, 0.1])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_multinomial_solver_matches_sklearn_coefficients_and_predictions(C, seed):
    feats, y, w = multinomial_problems(seed)
    coef, intercept = fit_multinomial_batch(feats, y, w, C=C)
    for b in range(len(w)):
        rows = np.repeat(np.arange(len(y)), w[b].astype(int))          # the weights as copies
        classes = np.unique(y[rows])
        scores = feats[b] @ coef[b].T + intercept[b]
        assert np.isneginf(intercept[b][np.setdiff1d(np.arange(5), classes)]).all()
        if len(classes) == 1:
            assert (scores.argmax(axis=1) == classes[0]).all() and not coef[b].any()
            continue
        lr = LogisticRegression(C=C, solver="newton-cholesky", tol=1e-12, max_iter=1000).fit(feats[b][rows], y[rows])
        assert (scores.argmax(axis=1) == lr.predict(feats[b])).all()
        if len(classes) == 2:                                          # binary: one coefficient vector
            lo, hi = classes
            np.testing.assert_allclose(coef[b, hi] - coef[b, lo], lr.coef_[0], atol=1e-5)
            assert intercept[b, hi] - intercept[b, lo] == pytest.approx(lr.intercept_[0], abs=1e-5)
        else:                                                          # intercepts up to a common shift
            np.testing.assert_allclose(coef[b, classes], lr.coef_, atol=1e-5)
            np.testing.assert_allclose(intercept[b, classes], lr.intercept_ - lr.intercept_.mean(), atol=1e-5)
            assert not coef[b, np.setdiff1d(np.arange(5), classes)].any()


def test_the_shared_raw_design_path_is_the_standardised_fit_in_raw_coordinates():
    rng = np.random.default_rng(5)
    y = rng.integers(0, 4, 70)
    x = rng.normal(size=(70, 2)) * [3.0, 0.2] + y[:, None] * [1.0, 0.05] + [70.0, 1.0]
    w = rng.poisson(1.0, (6, 70)).astype(float)
    w[1, y == 3] = 0
    mean = (w @ x) / w.sum(axis=1, keepdims=True)
    sd = np.sqrt(np.einsum("pn,pnd->pd", w, (x[None] - mean[:, None]) ** 2) / w.sum(axis=1, keepdims=True))
    theta, _ = _solve_multinomial(np.column_stack([np.ones(70), x]), y, w, sd**2, 1.0, 100, 1e-9)
    coef, intercept = fit_multinomial_batch((x[None] - mean[:, None]) / sd[:, None], y, w)
    np.testing.assert_allclose(theta[:, :, 1:] * sd[:, None, :], coef, atol=1e-6)
    shifted = theta[:, :, 0] + np.einsum("pkd,pd->pk", theta[:, :, 1:], mean)
    ok = np.isfinite(intercept)
    np.testing.assert_allclose(shifted[ok], intercept[ok], atol=1e-6)


@pytest.mark.parametrize("seed", [0, 3])
def test_cv_accuracy_batch_equals_cv_accuracy_per_resample_with_a_class_missing_from_folds(seed):
    rng = np.random.default_rng(seed)
    y = np.repeat([0, 1, 2, 3], [30, 25, 12, 4])                       # class 3: absent from some training folds
    x = np.column_stack([y * 0.4 + rng.normal(size=len(y)), rng.normal(size=len(y))]) * [2, 0.5] + [1, 3]
    n_folds, reps = 5, 12
    counts = np.stack([np.bincount(rng.integers(0, len(y), len(y)), minlength=len(y)) for _ in range(reps)])
    counts[0] = 1
    folds = np.stack([rng.permutation(np.arange(len(y)) % n_folds) for _ in range(reps)])
    got = cv_accuracy_batch(x, y, counts.astype(float), folds, n_folds)
    rows = [np.repeat(np.arange(len(y)), c) for c in counts]
    expected = [cv_accuracy(x[r], y[r], f[r]) for r, f in zip(rows, folds)]
    np.testing.assert_array_equal(got, expected)
    missing = [(np.bincount(y[r][f[r] != k], minlength=4) == 0).any() for r, f in zip(rows, folds) for k in range(5)]
    assert any(missing)                                                # the case is exercised


def test_newton_and_sklearn_solvers_rank_the_reference_testbed_identically():
    tb = shiftbench.load_testbed("imagenet-reference")
    settings = [s for s in tb.settings if s != "val"]
    settings = settings[:2] + settings[-2:]
    kw = {"settings": settings, "n_resamples": 4, "n_repeats": 2, "seed": 3}
    newton = informativeness_ranking(tb, **kw)
    reference = informativeness_ranking(tb, solver="sklearn", **kw)
    assert newton.attrs["solver"] == "newton" and reference.attrs["solver"] == "sklearn"
    assert len(newton) >= 3
    pd.testing.assert_frame_equal(newton, reference, check_exact=True)


def test_an_unknown_solver_is_a_config_error():
    with pytest.raises(ConfigError, match="solver 'scipy'"):
        informativeness_ranking(three_groups(), solver="scipy")


def test_a_metric_on_21_plus_26_models_is_dropped_not_ranked_first():
    """The imagenet-reference case: a setting measured on 21 of 70 ROBUST_INTV and 26 of 87
    STANDARD models, separating them by luck, must not top the ranking."""
    rng = np.random.default_rng(1)
    types = np.array(["ROBUST_INTV"] * 70 + ["STANDARD"] * 87)
    val = rng.uniform(60, 80, len(types))
    few = np.full(len(types), np.nan)
    keep = np.r_[np.arange(21), 70 + np.arange(26)]
    few[keep] = np.where(types[keep] == "ROBUST_INTV", 60.0, 40.0) + rng.uniform(0, 5, len(keep))
    frame = pd.DataFrame({"model": [f"m{i}" for i in range(len(types))], "model_type": types, "val": val,
                          "few": few, "noise": rng.uniform(20, 60, len(types))})
    tb = tbmod.Testbed.from_frame(frame, name="sparse")
    for method in METHODS:
        ranking = informativeness_ranking(tb, method=method, n_resamples=10, n_repeats=2)
        assert list(ranking["setting"]) == ["noise"]
        (drop,) = ranking.attrs["dropped"]
        assert drop["setting"] == "few" and drop["n_models"] == 47
        assert drop["reason"] == "47 models < min_models=79"             # half of 70 + 87
        assert drop["models_per_group"] in ("ROBUST_INTV 21, STANDARD 26", "STANDARD 26, ROBUST_INTV 21")
        kept = informativeness_ranking(tb, method=method, n_resamples=10, n_repeats=2, min_models=40)
        assert kept.iloc[0]["setting"] == "few" and kept.iloc[0]["n_models"] == 47   # the minimum is what drops it


def test_a_group_short_on_a_metric_leaves_its_task_and_a_metric_with_one_group_is_dropped():
    tb = three_groups(12)
    frame = tb.to_frame()
    frame.loc[frame["model_type"] == "LP_ADV", "noise"] = np.nan       # LP_ADV not measured on noise
    frame.loc[frame["model_type"] != "STANDARD", "sep"] = np.nan        # sep: STANDARD only
    ranking = informativeness_ranking(tbmod.Testbed.from_frame(frame, name="holes"), n_resamples=5, n_repeats=2,
                                      min_models=0.3)
    assert list(ranking["setting"]) == ["noise"]
    assert ranking.iloc[0]["models_per_group"] == "MORE_DATA 12, STANDARD 12"
    (drop,) = ranking.attrs["dropped"]
    assert drop["setting"] == "sep" and drop["reason"] == "groups below min_models_per_group=10: LP_ADV 0, MORE_DATA 0"


def test_one_vs_standard_ranks_the_separating_setting_first_and_reports_the_models_used():
    tb = tiny_testbed()
    ranking = informativeness_ranking(tb, method="one-vs-standard", scale="linear", n_resamples=20, n_folds=3)
    assert list(ranking["group"].unique()) == ["MORE_DATA"]               # ROBUST_INTV has 3 < 10 models
    assert set(ranking["method"]) == {"one-vs-standard"}
    by = ranking.set_index("setting")
    assert by.loc["sep", "rank"] == 1 and by.loc["sep", "gain_mean"] > 40
    assert abs(by.loc["same", "gain"]) < 1.0 and by.loc["same", "gain_mean"] < 10
    assert (by.loc["partial", "n_group"], by.loc["partial", "n_baseline"], by.loc["partial", "n_models"]) == (11, 10, 21)
    assert ranking.attrs["groups"] == ["MORE_DATA"] and ranking.attrs["n_resamples"] == 20
    assert ranking.attrs["seconds"] > 0


def test_djolonga_on_the_tiny_testbed_uses_the_two_groups_with_enough_models():
    ranking = informativeness_ranking(tiny_testbed(), scale="linear", n_resamples=20, n_folds=3)
    assert sorted(ranking.attrs["groups"]) == ["MORE_DATA", "STANDARD"]  # ROBUST_INTV: 3 < 10
    by = ranking.set_index("setting")
    assert by.loc["sep", "rank"] == 1 and by.loc["sep", "gain_mean"] > 40 and by.loc["sep", "score_metric"] == 100
    assert by.loc["partial", "n_models"] == 21 and by.loc["sep", "n_models"] == 24


@pytest.mark.parametrize("method", list(METHODS))
def test_one_setting_alone_scores_as_in_the_full_ranking(method):
    tb = tiny_testbed()
    full = informativeness_ranking(tb, method=method, n_resamples=15, n_folds=3).set_index("setting")
    alone = informativeness_ranking(tb, method=method, settings=["sep"], n_resamples=15, n_folds=3).set_index("setting")
    assert alone.loc["sep", "gain_mean"] == full.loc["sep", "gain_mean"]
    assert alone.loc["sep", "gain"] == full.loc["sep", "gain"]


def test_one_vs_standard_pairs_with_too_few_models_are_dropped_and_listed():
    tb = tiny_testbed()
    ranking = informativeness_ranking(tb, method="one-vs-standard", groups=["MORE_DATA", "ROBUST_INTV"],
                                      n_resamples=5, n_folds=3, min_models_per_group=11)
    assert ("MORE_DATA", "partial") in ranking.attrs["skipped"]          # 10 STANDARD models left
    assert ("ROBUST_INTV", "sep") in ranking.attrs["skipped"]
    assert set(ranking["setting"]) == {"sep", "same"}
    reasons = {(d["group"], d["setting"]): d["reason"] for d in ranking.attrs["dropped"]}
    assert reasons[("MORE_DATA", "partial")] == "groups below min_models_per_group=11: STANDARD 10"


def test_groups_default_to_typed_groups_with_enough_models():
    assert informativeness_groups(tiny_testbed(), "val") == ["MORE_DATA"]
    assert sorted(informativeness_groups(tiny_testbed(), "val", baseline=None)) == ["MORE_DATA", "STANDARD"]
    untyped = tiny_testbed().with_metadata(model_type={f"m{i}": "UNKNOWN" for i in range(12, 24)})
    assert informativeness_groups(untyped, "val") == []
    assert informativeness_groups(tiny_testbed(), "val", min_models=13) == []


def test_top_informative_keeps_the_best_settings_per_group():
    ranking = informativeness_ranking(tiny_testbed(), n_resamples=5, n_folds=3)
    top = top_informative(ranking, 1)
    assert list(top["setting"]) == ["sep"]
    with pytest.raises(ConfigError, match="top=0"):
        top_informative(ranking, 0)


def test_methods_name_a_description_and_a_paper_in_attrs_and_csv_columns():
    assert set(METHODS) == {"djolonga2021", "one-vs-standard"}
    info = method_info("djolonga2021")
    assert "Djolonga et al. 2021" in info["paper"] and "Fig. 4" in info["paper"] and "multinomial" in info["description"]
    ranking = informativeness_ranking(tiny_testbed(), n_resamples=5, n_folds=3)
    csv = with_method_columns(ranking)
    assert list(csv.columns[:3]) == ["method", "method_description", "method_paper"]
    assert set(csv["method_paper"]) == {info["paper"]}


def test_ranking_errors_name_the_fix():
    tb = tiny_testbed()
    with pytest.raises(ConfigError, match="unknown informativeness method 'djolonga'; did you mean 'djolonga2021'"):
        informativeness_ranking(tb, method="djolonga")
    with pytest.raises(ConfigError, match="unknown group 'MORE_DAT'; did you mean 'MORE_DATA'"):
        informativeness_ranking(tb, groups="MORE_DAT")
    with pytest.raises(ConfigError, match="unknown baseline model type 'STD'"):
        informativeness_ranking(tb, method="one-vs-standard", baseline="STD")
    with pytest.raises(ConfigError, match="unknown setting 'sepp'"):
        informativeness_ranking(tb, settings=["sepp"])
    with pytest.raises(DataError, match=r"djolonga2021: testbed 'tiny' has no two model types with "
                       r"min_models_per_group=30 models on 'val' \(types: "):
        informativeness_ranking(tb, min_models_per_group=30)
    with pytest.raises(DataError, match="one-vs-standard: testbed 'tiny' has no a model type besides STANDARD"):
        informativeness_ranking(tb, method="one-vs-standard", min_models_per_group=30)
    with pytest.raises(ConfigError, match="min_models_per_group=2 must be at least n_folds=5"):
        informativeness_ranking(tb, min_models_per_group=2)
    with pytest.raises(ConfigError, match=r"min_models=1.5: give a count"):
        informativeness_ranking(tb, min_models=1.5)
    with pytest.raises(DataError, match=r"djolonga2021: no metric of testbed 'tiny' has enough models \(3 dropped, "
                       r"e\.g\. sep: 24 models < min_models=100.*lower min_models_per_group \(10\) or min_models"):
        informativeness_ranking(tb, min_models=100, n_resamples=2)


# --------------------------------------------------------------------------- CLI and report
def test_cli_informativeness_json_names_the_method_and_is_the_api_top_k(tmp_path):
    import json

    from typer.testing import CliRunner

    from shiftbench.cli import app

    path = tiny_testbed().save(tmp_path / "tiny.csv")
    res = CliRunner().invoke(app, ["informativeness", "-t", str(path), "--resamples", "7", "--folds", "3",
                                   "--top", "2", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["method"] == method_info("djolonga2021")
    rows = doc["ranking"]
    api = top_informative(informativeness_ranking(tbmod.Testbed.read(path), n_resamples=7, n_folds=3), 2)
    assert [r["setting"] for r in rows] == list(api["setting"]) and rows[0]["setting"] == "sep"
    assert rows[0]["gain_mean"] == pytest.approx(api["gain_mean"].iloc[0])
    assert rows[0]["method"] == "djolonga2021" and rows[0]["n_models"] == 24 and rows[0]["n_group"] is None
    res = CliRunner().invoke(app, ["informativeness", "-t", str(path), "--method", "one-vs-standard",
                                   "--group", "MORE_DATA", "--resamples", "7", "--folds", "3", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["method"]["name"] == "one-vs-standard" and doc["ranking"][0]["n_group"] == 12


def test_cli_informativeness_prints_the_method_and_models_per_metric_and_one_line_errors(tmp_path, capsys,
                                                                                         monkeypatch):
    import sys

    from typer.testing import CliRunner

    from shiftbench.cli import app, main

    path = tiny_testbed().save(tmp_path / "tiny.csv")
    res = CliRunner().invoke(app, ["informativeness", "-t", str(path), "--resamples", "5", "--folds", "3",
                                   "--min-models", "22"], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    text = res.stdout
    assert "method djolonga2021:" in text and "Djolonga et al. 2021" in text
    assert "n models" in text and "MORE_DATA 12, STANDARD 12" in text
    assert "ranked 2 settings over 2 groups" in text and "1 dropped" in text
    assert "dropped partial: 21 models < min_models=22" in text
    res = CliRunner().invoke(app, ["informativeness", "-t", str(path), "--method", "one-vs-standard",
                                   "--resamples", "5", "--folds", "3"], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    assert "tell MORE_DATA from STANDARD" in res.stdout and "ranked 3 settings for 1 groups" in res.stdout
    for args, message in ((["--group", "MORE_DAT"], "error: unknown group 'MORE_DAT'; did you mean 'MORE_DATA'"),
                          (["--method", "djolonga"], ("error: unknown --method 'djolonga' for informativeness "
                                                      "(did you mean 'djolonga2021'?)")),
                          (["--min-models-per-group", "20"], ("error: djolonga2021: testbed 'tiny' has no two model "
                                                              "types with min_models_per_group=20"))):
        monkeypatch.setattr(sys, "argv", ["shiftbench", "informativeness", "-t", str(path), *args])
        with pytest.raises(SystemExit) as exit_info:
            main()
        err = capsys.readouterr().err.strip().splitlines()
        assert exit_info.value.code == 1
        assert err[-1].startswith(message), err


def test_report_shows_the_informativeness_section_with_its_recipe_only_with_two_groups(tmp_path):
    from shiftbench.report import write_html_report
    from shiftbench.report.shifts import ShiftPair

    shifts = [ShiftPair("Sep", "val", "sep")]
    tb = tiny_testbed()
    html = write_html_report([tb], tmp_path / "a", shifts=shifts, n_resamples=10, figure_formats=()).read_text()
    assert "Metric informativeness" in html and "Most informative settings beyond val accuracy" in html
    assert "Recipe <code>djolonga2021</code>" in html and "Djolonga et al. 2021" in html
    csv = pd.read_csv(tmp_path / "a" / "tiny" / "informativeness.csv")
    assert set(csv["method"]) == {"djolonga2021"} and csv["method_paper"].str.contains("Fig. 4").all()
    assert "n_models" in csv
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
    assert "Metric informativeness" in html and "Nothing to rank" in html


def test_djolonga_result_does_not_depend_on_the_number_of_processes():
    tb = three_groups(12)
    steps: list[str] = []
    one = informativeness_ranking(tb, n_resamples=6, n_repeats=2, on_step=steps.append)
    two = informativeness_ranking(tb, n_resamples=6, n_repeats=2, n_jobs=2)
    pd.testing.assert_frame_equal(one, two)
    assert sorted(steps) == ["noise", "sep"]
    with pytest.raises(ConfigError, match="n_jobs=0"):
        informativeness_ranking(tb, n_jobs=0)
