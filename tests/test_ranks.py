"""Recht et al.'s statistics (2019): the rank table (Table 1) and percentile bootstrap intervals of
a fit's slope and intercept, in Python, on the command line and in the report."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.proportion import proportion_confint

import shiftbench
from shiftbench.analysis import coefficient_intervals, rank_table
from shiftbench.analysis.trend import bootstrap_coefficients, fit_piecewise_trend, fit_trend
from shiftbench.errors import ConfigError, DataError
from shiftbench.testbed import Testbed as Bed

from clirun import run_main

V2 = "imagenetv2-matched-frequency-format-val"

# five models: d falls from 3rd to 5th, b and c tie on val (both rank 2); e has no v2 accuracy
VAL = {"a": 80.0, "b": 75.0, "c": 75.0, "d": 70.0, "e": 60.0, "f": 65.0}
NEW = {"a": 70.0, "b": 66.0, "c": 64.0, "d": 52.0, "e": np.nan, "f": 55.0}


def hand_testbed() -> Bed:
    frame = pd.DataFrame({"model": list(VAL), "model_type": ["STANDARD", "STANDARD", "MORE_DATA", "STANDARD",
                                                              "STANDARD", "ROBUST_INTV"],
                          "val": list(VAL.values()), V2: list(NEW.values())})
    frame["val_dataset_size"] = 50_000
    frame[f"{V2}_dataset_size"] = 10_000
    return Bed.from_frame(frame, name="hand")


@pytest.fixture(scope="module")
def hand_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ranks") / "hand.csv"
    hand_testbed().save(path)
    return path


# ---------------------------------------------------------------------------- rank table
def test_ranks_and_delta_rank_follow_recht_et_al_table_1() -> None:
    table = rank_table(hand_testbed(), "val", V2)
    # sorted by original rank; ties share the best rank; e (no v2 accuracy) is left out
    assert list(table.index) == ["a", "b", "c", "d", "f"]
    assert table["x_rank"].tolist() == [1, 2, 2, 4, 5]
    assert table["y_rank"].tolist() == [1, 2, 3, 5, 4]
    # delta rank = original rank - new rank: negative = fell on the new test set
    assert table["delta_rank"].tolist() == [0, 0, -1, -1, 1]
    np.testing.assert_allclose(table["gap"], [10.0, 9.0, 11.0, 18.0, 10.0])
    assert table.attrs["n_models"] == 5 and table.attrs["n_skipped"] == 1


def test_kendall_tau_is_scipys_over_the_ranked_models() -> None:
    table = rank_table(hand_testbed(), "val", V2)
    keep = [m for m in VAL if np.isfinite(NEW[m])]
    expected = stats.kendalltau([VAL[m] for m in keep], [NEW[m] for m in keep])
    assert table.attrs["kendall_tau"] == pytest.approx(expected.statistic, abs=1e-12)
    assert table.attrs["kendall_p"] == pytest.approx(expected.pvalue, rel=1e-9)


def test_models_selects_whom_to_rank_and_ranks_among_them() -> None:
    table = rank_table(hand_testbed(), "val", V2, models="STANDARD")
    assert list(table.index) == ["a", "b", "d"] and table["y_rank"].tolist() == [1, 2, 3]


@pytest.mark.parametrize("confidence", [0.95, 0.99])
def test_intervals_are_clopper_pearson_as_statsmodels_and_scipy_compute_them(confidence: float) -> None:
    table = rank_table(hand_testbed(), "val", V2, confidence=confidence)
    for model, r in table.iterrows():
        for acc, n, lo, hi in ((r.x_acc, 50_000, r.x_low, r.x_high), (r.y_acc, 10_000, r.y_low, r.y_high)):
            k = round(acc * n / 100)
            sm_lo, sm_hi = proportion_confint(k, n, alpha=1 - confidence, method="beta")
            ci = stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
            assert (lo, hi) == pytest.approx((100 * sm_lo, 100 * sm_hi), abs=1e-9), model
            assert (lo, hi) == pytest.approx((100 * ci.low, 100 * ci.high), abs=1e-9), model


def test_rank_table_on_the_reference_testbed() -> None:
    table = shiftbench.rank_table(shiftbench.load_testbed("imagenet-reference"), "val", V2)
    assert len(table) == 335 and table.index[0] == "efficientnet-l2-noisystudent"
    assert (table["x_acc"].diff().dropna() <= 0).all()
    assert table.attrs["kendall_tau"] == pytest.approx(0.980, abs=5e-4)


def test_rank_table_is_public_and_lazy() -> None:
    assert "rank_table" in shiftbench.__all__ and "rank_table" in shiftbench.analysis.__all__
    assert "coefficient_intervals" in shiftbench.analysis.__all__


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda tb: rank_table("val", V2, tb), ConfigError, "takes the testbed first"),
    (lambda tb: rank_table(tb, "val", "val"), ConfigError, "two different settings"),
    (lambda tb: rank_table(tb, "val", "imagenetv3"), ConfigError, "unknown setting .imagenetv3."),
    (lambda tb: rank_table(tb, "val", V2, models="LP_ADV"), ConfigError, "model type"),
    (lambda tb: rank_table(tb, "val", V2, models="a"), DataError, "at least 2 models"),
    (lambda tb: rank_table(tb, "val", V2, confidence=95), ConfigError, "must be in"),
])
def test_bad_rank_table_input_is_a_one_line_error(call, error, match) -> None:
    with pytest.raises(error, match=match) as info:
        call(hand_testbed())
    assert "\n" not in str(info.value)


# ---------------------------------------------------------------------------- coefficient intervals
def _noisy(n: int = 12, seed: int = 4) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = np.linspace(55, 85, n)
    return x, x - 12 + rng.normal(0, 1.5, n)


def numpy_bootstrap(xs: np.ndarray, ys: np.ndarray, n_resamples: int, seed: int, confidence: float) -> np.ndarray:
    """The textbook percentile bootstrap: resample the models with replacement (drawn as shiftbench
    draws them: 8,192 resamples per draw, 16-bit indices), np.polyfit each, np.quantile."""
    rng = np.random.default_rng(seed)
    coefs = []
    for start in range(0, n_resamples, 8192):
        for row in rng.integers(0, len(xs), size=(min(8192, n_resamples - start), len(xs)), dtype=np.int16):
            slope, intercept = np.polyfit(xs[row], ys[row], 1)
            coefs.append((intercept, slope))
    alpha = 1 - confidence
    return np.quantile(np.array(coefs), [alpha / 2, 1 - alpha / 2], axis=0)


@pytest.mark.parametrize(("n_resamples", "seed", "confidence"), [(500, 0, 0.95), (9000, 3, 0.9)])
def test_coefficient_intervals_match_a_straightforward_numpy_bootstrap(n_resamples, seed, confidence) -> None:
    x, y = _noisy()
    fit = fit_trend(x=x, y=y, scale="linear")
    ci = coefficient_intervals(fit, n_resamples=n_resamples, seed=seed, confidence=confidence)
    expected = numpy_bootstrap(fit.xs, fit.ys, n_resamples, seed, confidence)
    assert ci.names == ("intercept", "slope") and ci.n_kept == n_resamples
    np.testing.assert_allclose([ci.lower, ci.upper], expected, rtol=1e-9, atol=1e-9)
    assert ci["slope"] == (ci.lower[1], ci.upper[1]) and ci.lower[1] < fit.slope < ci.upper[1]


def test_coefficient_intervals_are_quantiles_of_every_coefficient_of_a_piecewise_fit() -> None:
    x, y = _noisy(20)
    fit = fit_piecewise_trend(x=x, y=y, pivot=70.0)
    ci = coefficient_intervals(fit, n_resamples=3000, seed=5)
    coefs = bootstrap_coefficients(fit, 3000, seed=5)
    assert ci.names == ("intercept", "slope_below", "slope")
    np.testing.assert_allclose([ci.lower, ci.upper], np.quantile(coefs, [0.025, 0.975], axis=0), rtol=1e-12)
    with pytest.raises(ConfigError, match="no coefficient 'bias'"):
        ci["bias"]


def test_coefficient_intervals_default_to_recht_et_al_100000_resamples_and_are_seeded() -> None:
    x, y = _noisy()
    fit = fit_trend(x=x, y=y)
    ci = coefficient_intervals(fit)
    assert ci.n_resamples == 100_000 and ci.confidence == 0.95
    assert coefficient_intervals(fit, seed=1) != coefficient_intervals(fit, seed=2)
    assert coefficient_intervals(fit, n_resamples=2000, seed=1) == coefficient_intervals(fit, n_resamples=2000, seed=1)


# ---------------------------------------------------------------------------- command line
def test_fit_coef_ci_in_the_table_and_the_json(monkeypatch, capsys, hand_csv: Path) -> None:
    args = ["fit", "--x", "val", "--y", V2, "-t", str(hand_csv), "--fit-on", "all", "--coef-ci", "--resamples", "500"]
    code, out, _ = run_main(monkeypatch, capsys, *args)
    assert code == 0 and "slope 95% CI" in out and "intercept 95% CI" in out and "500 resamples" in out
    code, out, _ = run_main(monkeypatch, capsys, *args, "--json", "--confidence", "0.9", "--seed", "2")
    d = json.loads(out)
    fit = fit_trend(hand_testbed(), "val", V2, fit_on="all")
    ci = coefficient_intervals(fit, n_resamples=500, confidence=0.9, seed=2)
    assert d["coef_ci"]["slope"] == pytest.approx(list(ci["slope"]))
    assert d["coef_ci"]["intercept"] == pytest.approx(list(ci["intercept"]))
    assert {k: d["coef_ci"][k] for k in ("confidence", "n_resamples", "seed")} == {
        "confidence": 0.9, "n_resamples": 500, "seed": 2}
    code, out, _ = run_main(monkeypatch, capsys, *args[:-3], "--json")
    assert "coef_ci" not in json.loads(out)


def test_ranks_command_table_json_and_output(monkeypatch, capsys, hand_csv: Path, tmp_path: Path) -> None:
    code, out, _ = run_main(monkeypatch, capsys, "ranks", "--x", "val", "--y", V2, "-t", str(hand_csv))
    assert code == 0 and "Δ rank" in out and "Kendall's τ" in out and "1 models skipped" in out
    assert "70.00 [" in out                                  # accuracy [Clopper-Pearson interval]
    code, out, _ = run_main(monkeypatch, capsys, "ranks", "--x", "val", "--y", V2, "-t", str(hand_csv), "--json",
                            "--top", "2", "-o", str(tmp_path / "ranks.csv"))
    d = json.loads(out)
    assert set(d) == {"testbed", "x", "y", "confidence", "kendall_tau", "kendall_p", "n_models", "n_skipped",
                      "models"}
    assert d["n_models"] == 5 and [m["model"] for m in d["models"]] == ["a", "b"]
    assert set(d["models"][0]) == {"model", "model_type", "x_rank", "x_acc", "x_low", "x_high", "y_acc", "y_low",
                                   "y_high", "gap", "y_rank", "delta_rank"}
    written = pd.read_csv(tmp_path / "ranks.csv")
    assert len(written) == 5 and written["delta_rank"].tolist() == [0, 0, -1, -1, 1]


@pytest.mark.parametrize(("args", "match"), [
    (["fit", "--resamples", "100"], "--resamples set the bootstrap of --coef-ci; add --coef-ci"),
    (["fit", "--coef-ci", "--resamples", "0"], "--resamples 0: give a positive number"),
    (["fit", "--coef-ci", "--confidence", "95"], "--confidence 95: give a level strictly between 0 and 1"),
    (["ranks", "--confidence", "1"], "--confidence 1: give a level strictly between 0 and 1"),
    (["ranks", "--top", "0"], "--top 0: give a positive number"),
    (["ranks", "-o", "ranks.xlsx"], "give a file name ending in .csv, .md, .tex"),
    (["ranks", "--model", "STANDRD"], "did you mean 'STANDARD'"),
])
def test_bad_command_line_input_is_one_line(monkeypatch, capsys, hand_csv: Path, args, match) -> None:
    code, _, err = run_main(monkeypatch, capsys, args[0], "--x", "val", "--y", V2, "-t", str(hand_csv), *args[1:])
    assert code != 0 and match in err and err.count("\n") == 1 and err.startswith("error: ")


# ---------------------------------------------------------------------------- report
def test_report_section_shows_the_top_rows_and_your_models(tmp_path: Path) -> None:
    from shiftbench.report.section_ranks import RankTableSection
    from shiftbench.report.sections import ReportContext, TestbedReport

    section = RankTableSection()
    section.top = 2
    ctx = ReportContext(out_dir=tmp_path, testbeds=[], highlight=("f",))
    tb = TestbedReport(testbed=hand_testbed(), analyses=[], dir=tmp_path / "hand", anchor="hand")
    assert section.available(ctx, tb)
    html = section.render(ctx, tb)[0].html
    assert "<td>a</td>" in html and "<td>b</td>" in html and "<td>f</td>" in html and "<td>d</td>" not in html
    assert "then your models below them" in html and "Kendall" in html
    assert len(pd.read_csv(tmp_path / "hand" / "ranks_imagenetv2.csv")) == 5
    without_v2 = TestbedReport(testbed=hand_testbed().select(settings=["val"]), analyses=[], dir=tmp_path,
                               anchor="x")
    assert not section.available(ctx, without_v2)
