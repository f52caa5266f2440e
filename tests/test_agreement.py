"""Label-free OOD accuracy estimates: agreement on the line (ALine-S, ALine-D), AC, DoC, ATC, and
``shiftbench estimate`` on a store of small seeded CNNs."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy import stats
from typer.testing import CliRunner

from shiftbench.analysis.agreement import (
    aline_d,
    aline_s,
    atc_estimate,
    atc_threshold,
    average_confidence,
    difference_of_confidences,
    estimate_ood_accuracy,
    fit_probit_line,
    pairwise_agreement,
    same_line_test,
)
from shiftbench.errors import ConfigError, DataError

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))


# ---------------------------------------------------------------------------- hand-worked
def test_pairwise_agreement_by_hand():
    pid = np.array([[0, 1, 2, 3], [0, 1, 0, 0], [1, 1, 2, 0]])
    pood = np.array([[0, 0], [0, 1], [1, 1]])
    pairs = pairwise_agreement(pid, pood, ["a", "b", "c"])
    assert list(zip(pairs.model_a, pairs.model_b)) == [("a", "b"), ("a", "c"), ("b", "c")]
    np.testing.assert_allclose(pairs.agreement_id, [50, 50, 50])
    np.testing.assert_allclose(pairs.agreement_ood, [50, 0, 50])


def test_probit_fit_matches_statsmodels_and_counts_left_out():
    rng = np.random.default_rng(0)
    x = rng.uniform(0.1, 0.95, 40)
    y = stats.norm.cdf(0.8 * stats.norm.ppf(x) - 0.3 + rng.normal(0, 0.05, 40))
    x = np.append(x, [0.99, 0.5])          # out of range on the x side, then the y side
    y = np.append(y, [0.5, 0.01])
    line = fit_probit_line(x, y)
    assert line.n_points == 40 and line.n_left_out == 2
    ols = sm.OLS(stats.norm.ppf(y[:40]), sm.add_constant(stats.norm.ppf(x[:40]))).fit()
    assert line.bias == pytest.approx(ols.params[0]) and line.slope == pytest.approx(ols.params[1])
    assert line.r2 == pytest.approx(ols.rsquared)


def test_aline_s_by_hand():
    line = fit_probit_line([0.5, stats.norm.cdf(1.0)], [stats.norm.cdf(-0.5), stats.norm.cdf(0.5)])
    assert line.slope == pytest.approx(1.0) and line.bias == pytest.approx(-0.5)
    np.testing.assert_allclose(aline_s([50.0], line), [100 * stats.norm.cdf(-0.5)])


def test_aline_d_solves_the_pair_system():
    """Three models, three pairs: the system is square; compare with a hand-built solve."""
    acc = np.array([60.0, 70.0, 80.0])
    pairs = pd.DataFrame({"model_a": ["a", "a", "b"], "model_b": ["b", "c", "c"],
                          "agreement_id": [75.0, 70.0, 80.0], "agreement_ood": [60.0, 55.0, 66.0]})
    slope = 0.9
    got = aline_d(acc, pairs, slope, ["a", "b", "c"])
    q = stats.norm.ppf
    pa, pb, pc = q(acc / 100)
    rhs = [q(.60) + slope * ((pa + pb) / 2 - q(.75)), q(.55) + slope * ((pa + pc) / 2 - q(.70)),
           q(.66) + slope * ((pb + pc) / 2 - q(.80))]
    x = np.linalg.solve(np.array([[.5, .5, 0], [.5, 0, .5], [0, .5, .5]]), rhs)
    np.testing.assert_allclose(got, 100 * stats.norm.cdf(x))
    # a model in no pair gets NaN
    assert np.isnan(aline_d(np.append(acc, 50.0), pairs, slope, ["a", "b", "c", "d"])[3])


def test_same_line_test_matches_statsmodels_f_test():
    rng = np.random.default_rng(1)
    ax = rng.normal(0, 1, 30)
    ay = 0.8 * ax - 0.2 + rng.normal(0, 0.1, 30)
    cx = rng.normal(0, 1, 8)
    cy = 0.7 * cx - 0.1 + rng.normal(0, 0.1, 8)
    t = same_line_test((ax, ay), (cx, cy))
    x, y = np.concatenate([ax, cx]), np.concatenate([ay, cy])
    d = np.r_[np.zeros(30), np.ones(8)]
    full = sm.OLS(y, np.column_stack([np.ones_like(x), x, d, d * x])).fit()
    rest = sm.OLS(y, sm.add_constant(x)).fit()
    f, p, df = full.compare_f_test(rest)
    assert t.f_statistic == pytest.approx(f) and t.p_value == pytest.approx(p) and t.df_num == df == 2
    assert t.slope_difference == pytest.approx(full.params[3]) and t.bias_difference == pytest.approx(full.params[2])


def test_confidence_baselines_by_hand():
    assert average_confidence(np.array([0.5, 0.7, 0.9])) == pytest.approx(70.0)
    assert difference_of_confidences(80.0, np.array([0.9, 0.7]), np.array([0.6, 0.6])) == pytest.approx(60.0)
    # ID: scores .9 .8 .7 .6, 2 right -> t = .8 (2nd largest), no tie, w = 1
    t, w = atc_threshold(np.array([.9, .8, .7, .6]), np.array([1, 0, 1, 0], bool))
    assert (t, w) == (.8, 1.0)
    assert atc_estimate(np.array([.9, .8, .7, .6]), np.array([1, 0, 1, 0], bool),
                        np.array([.95, .85, .8, .5, .1])) == pytest.approx(60.0)
    # independent: Garg et al.'s ">=" rule when there are no ties
    rng = np.random.default_rng(2)
    s, c, so = rng.random(200), rng.random(200) < 0.7, rng.random(300)
    t = np.sort(s)[::-1][c.sum() - 1]
    assert atc_estimate(s, c, so) == pytest.approx(100 * np.mean(so >= t))


def test_atc_threshold_on_ties_and_all_correct_and_all_wrong():
    s = np.array([.9, .5, .5, .5, .1])
    c = np.array([1, 1, 0, 0, 0], bool)             # k = 2: t = .5, one above, three tied -> w = 1/3
    t, w = atc_threshold(s, c)
    assert t == .5 and w == pytest.approx(1 / 3)
    assert atc_estimate(s, c, s) == pytest.approx(40.0)      # the ID share is the ID accuracy, ties and all
    assert atc_estimate(s, c, np.array([.5, .5, .5])) == pytest.approx(100 / 3)
    ones = np.ones(5, bool)                          # all right: t = the smallest ID score, w = 1
    assert atc_threshold(s, ones) == (.1, 1.0)
    assert atc_estimate(s, ones, np.array([.05, .1, .2, .3])) == pytest.approx(75.0)
    assert atc_estimate(s, np.zeros(5, bool), np.array([.95, .99])) == 0.0


# ---------------------------------------------------------------------------- a family on the line
def _family(n_models=8, n=20000, slope=0.7, bias=-0.4, seed=0):
    """Binary-correctness models built so accuracy and agreement are on lines by construction:
    each example has a latent difficulty z; model i is right when z < θ_i (ID) and z < a θ_i + b
    (OOD), with z ~ N(0, 1). Then acc = Φ(θ), and two models' correctness agree on ...; wrong
    predictions are drawn from many classes so wrong models rarely agree."""
    rng = np.random.default_rng(seed)
    theta = np.linspace(-0.3, 1.5, n_models)
    z_id, z_ood = rng.normal(size=n), rng.normal(size=n)
    y_id, y_ood = rng.integers(0, 1000, n), rng.integers(0, 1000, n)
    right_id = z_id[None] < theta[:, None]
    right_ood = z_ood[None] < (slope * theta + bias)[:, None]
    wrong_id = (y_id[None] + 1 + rng.integers(0, 999, (n_models, n))) % 1000
    wrong_ood = (y_ood[None] + 1 + rng.integers(0, 999, (n_models, n))) % 1000
    pred_id = np.where(right_id, y_id[None], wrong_id)
    pred_ood = np.where(right_ood, y_ood[None], wrong_ood)
    return pred_id, right_id, pred_ood, right_ood, 100 * stats.norm.cdf(slope * theta + bias)


def test_aline_recovers_known_ood_accuracy():
    pred_id, right_id, pred_ood, right_ood, truth = _family()
    models = [f"m{i}" for i in range(len(truth))]
    res = estimate_ood_accuracy(models, pred_id, right_id, pred_ood, right_ood, methods="aline-s,aline-d")
    # agreement of two threshold models = share right for both (the smaller accuracy) + a tiny chance term:
    # its probit line has the accuracy line's slope and bias, so both estimators are close to the truth
    assert res.agreement_line.slope == pytest.approx(0.7, abs=0.05)
    assert res.agreement_line.bias == pytest.approx(-0.4, abs=0.05)
    for m in ("aline-s", "aline-d"):
        assert np.abs(res.estimates[m] - truth).max() < 2.0, m
        assert res.mae[m] < 1.5
    assert res.line_test is not None and res.line_test.p_value > 1e-3
    np.testing.assert_allclose(res.estimates["accuracy_ood"], 100 * right_ood.mean(1))


def test_estimates_errors():
    pred_id, right_id, pred_ood, _, _ = _family(n_models=3, n=500)
    with pytest.raises(ConfigError, match="at least 3 models.*'val' -> 'x'"):
        estimate_ood_accuracy(["a", "b"], pred_id[:2], right_id[:2], pred_ood[:2], where="'val' -> 'x'")
    same = np.zeros((3, 50), int)                    # every pair agrees 100%: no pair in range
    with pytest.raises(DataError, match="0 of 3 model pairs.*'val' -> 'x'"):
        estimate_ood_accuracy(["a", "b", "c"], same, same == 0, same, where="'val' -> 'x'", methods="aline-s")
    with pytest.raises(DataError, match="shiftbench eval --force"):
        estimate_ood_accuracy(["a", "b", "c"], pred_id, right_id, pred_ood, methods="doc")
    with pytest.raises(ConfigError, match="unknown method"):
        estimate_ood_accuracy(["a", "b", "c"], pred_id, right_id, pred_ood, methods="foo")


# ---------------------------------------------------------------------------- a store and the command
MODELS = [f"python:agreement_models:red_{c}" for c in "abcde"]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> tuple[Path, str, str]:
    from test_multimodel import textured_folder

    from shiftbench.engine import evaluate
    root = tmp_path_factory.mktemp("agreement")
    data = textured_folder(root / "imgs", n=42)
    ind, ood = f"folder:{data}", f"folder:{data}+gaussian_noise.3"
    evaluate(MODELS, [ind, ood], store=root / "store", batch_size=16, workers=0, progress=False)
    evaluate(["python:multimodel_models:cnn_a"], [ind], store=root / "store", batch_size=16,
             workers=0, progress=False)
    return root / "store", ind, ood


def test_estimate_command_end_to_end(store):
    from shiftbench.cli import app
    from shiftbench.store import Store
    path, ind, ood = store
    r = CliRunner().invoke(app, ["estimate", "--store", str(path), "--x", ind, "--y", ood, "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert set(got) >= {"models", "mae", "agreement_line", "left_out", "methods", "same_line_test"}
    assert got["methods"] == ["aline-d", "aline-s", "atc", "doc", "ac"]
    assert got["left_out"] == ["multimodel_models.cnn_a"]          # ID predictions only: listed, left out
    res = Store(path).results()
    truth = res[res.setting == ood].set_index("model")["accuracy"]
    assert len(got["models"]) == 5 and got["agreement_line"]["n_pairs"] >= 2
    for row in got["models"]:
        assert row["accuracy_ood"] == pytest.approx(truth[row["model"]])
        assert set(row["estimates"]) == set(got["methods"])
        for m, e in row["estimates"].items():
            if e is not None:
                assert row["errors"][m] == pytest.approx(e - row["accuracy_ood"])
    print(json.dumps(got, indent=1))
    plain = CliRunner().invoke(app, ["estimate", "--store", str(path), "--x", ind, "--y", ood, "--method", "atc"])
    assert plain.exit_code == 0 and "mean absolute error" in plain.output


def test_estimate_command_errors(store, tmp_path, monkeypatch):
    from shiftbench.cli import app
    from shiftbench.correctness import label_free_inputs
    from shiftbench.store import Store
    path, ind, ood = store
    with pytest.raises(ConfigError, match="at least 3"):
        label_free_inputs(path, ind, ood, ["agreement_models.red_a", "agreement_models.red_b"])
    from shiftbench import correctness
    assert correctness._label_space("val", "restricted") != correctness._label_space("imagenet-a", "restricted")
    assert (correctness._label_space("val-on-imagenet-a-classes", "restricted")
            == correctness._label_space("imagenet-a", "restricted"))
    with monkeypatch.context() as mp:
        mp.setattr(correctness, "_label_space", lambda s, c: (s,))
        with pytest.raises(ConfigError, match="different label spaces"):
            label_free_inputs(path, ind, ood)
    # a store written before the entropy column: the confidence methods say to re-run, never a silent zero
    import shutil
    old = tmp_path / "old"
    shutil.copytree(path, old)
    import pyarrow.parquet as pq
    for f in old.rglob("*.parquet"):
        t = pq.read_table(f)
        if "entropy" in t.column_names:
            pq.write_table(t.drop(["entropy"]), f)
    r = CliRunner().invoke(app, ["estimate", "--store", str(old), "--x", ind, "--y", ood, "--method", "atc"])
    assert r.exit_code != 0
    assert "shiftbench eval --force" in str(r.exception) + r.output
    assert Store(old).results() is not None


def test_views_store_the_softmax_entropy():
    """``entropy`` is the entropy (nats) of the distribution the view's ``confidence`` comes from."""
    from shiftbench.views import FullView, MappedView, SubsetView
    rng = np.random.default_rng(3)
    logits = rng.normal(0, 3, (6, 10))
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    full = FullView().apply(logits, [0] * 6)
    np.testing.assert_allclose(full["entropy"], stats.entropy(p, axis=1), rtol=1e-5)
    np.testing.assert_allclose(full["confidence"], p.max(1), rtol=1e-5)
    sub = SubsetView("s", [1, 4, 7]).apply(logits, [1] * 6)
    q = np.exp(logits[:, [1, 4, 7]])
    np.testing.assert_allclose(sub["entropy"], stats.entropy(q / q.sum(1, keepdims=True), axis=1), rtol=1e-5)
    mapping = {0: 0, 1: 0, 3: 1, 5: 1}
    for conv in ("restricted", "argmax-all"):
        got = MappedView("m", mapping, num_target=2, convention=conv).apply(logits, [0] * 6)["entropy"]
        if conv == "restricted":
            e = np.exp(logits[:, [0, 1, 3, 5]])
            e /= e.sum(1, keepdims=True)
            dist = np.column_stack([e[:, 0] + e[:, 1], e[:, 2] + e[:, 3]])
        else:                                    # mapped classes pooled, unmapped ones kept as they are
            dist = np.column_stack([p[:, 0] + p[:, 1], p[:, 3] + p[:, 5], p[:, [2, 4, 6, 7, 8, 9]]])
        np.testing.assert_allclose(got, stats.entropy(dist, axis=1), rtol=1e-5)
