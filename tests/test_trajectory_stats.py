"""Effective robustness during fine-tuning over several runs of one recipe (Andreassen et al. 2022):
binning on ID accuracy, the maximum over bins, the percentage of the gap to y = x, the y = x
curve, the mixed-classifier baseline, bad input, and ``shiftbench trajectory --bins/--mix --json``."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from shiftbench.analysis import effective_robustness, fit_trend
from shiftbench.analysis.trajectory import (
    bin_by_id_accuracy,
    mixed_classifier_curve,
    mixed_classifier_draw,
    no_gap_effective_robustness,
    percent_of_gap,
    run_recipe,
    trajectory_summary,
)
from shiftbench.errors import ConfigError
from shiftbench.testbed import Testbed as TB

LINEAR = fit_trend(x=[20, 50, 80], y=[10, 40, 70], scale="linear")          # exactly y = x - 10: the gap is 10 pp


def _run(points: list[tuple[float, float]], name: str = "r") -> pd.DataFrame:
    """A trajectory with one checkpoint per (ID accuracy, effective robustness against LINEAR)."""
    rows = []
    for step, (x, er) in enumerate(points):
        for setting, acc in (("id", x), ("ood", x - 10 + er)):
            rows.append(dict(step=step, epoch=float(step), setting=setting, accuracy=acc, n_examples=1000,
                             model=f"{name}@step{step}"))
    return pd.DataFrame(rows)


def _logit_testbed() -> TB:
    """Standard models exactly on logit(y) = logit(x) - 1, 10,000 examples per setting."""
    xs = np.array([20.0, 40.0, 60.0, 75.0, 90.0])
    ys = 100 / (1 + np.exp(-(np.log(xs / (100 - xs)) - 1)))
    rows = [dict(model=f"m{i}", model_type="STANDARD", setting=s, accuracy=a, n_examples=10_000)
            for i, (x, y) in enumerate(zip(xs, ys)) for s, a in (("id", x), ("ood", y))]
    return TB.from_frame(pd.DataFrame(rows), fractions=False)


# ----------------------------------------------------------------------------- binning
def test_binning_three_seeds_gives_each_bins_mean_and_sample_sd():
    # bins [20, 50) and [50, 80]: each run has two checkpoints in the first and one in the second
    ers = {0: (1.0, 3.0, 10.0), 1: (2.0, 6.0, 4.0), 2: (0.0, 0.0, 7.0)}
    runs = {f"ft-seed{k}": _run([(25, a), (45, b), (70, c)], f"ft-seed{k}") for k, (a, b, c) in ers.items()}
    s = trajectory_summary(runs=runs, x="id", y="ood", fit=LINEAR, bins=[20, 50, 80])
    low = [v for a, b, _ in ers.values() for v in (a, b)]
    high = [c for _, _, c in ers.values()]
    assert s.recipe == "ft" and len(s.runs) == 3
    assert s.bins["n_checkpoints"].tolist() == [6, 3] and s.bins["n_runs"].tolist() == [3, 3]
    assert s.bins["er_mean"].tolist() == pytest.approx([np.mean(low), np.mean(high)])
    assert s.bins["er_sd"].tolist() == pytest.approx([np.std(low, ddof=1), np.std(high, ddof=1)])
    assert s.bins["x_acc_mean"].tolist() == pytest.approx([35.0, 70.0])
    # the maximum over bins is the largest bin mean (7.0 at 50-80%), not the largest checkpoint (10.0)
    assert s.max_er == pytest.approx(7.0) and s.max_er_bin == 1


def test_equal_width_bins_span_the_pooled_range_and_keep_empty_bins():
    runs = {"a-seed0": _run([(10, 1.0), (90, 3.0)], "a0"), "a-seed1": _run([(30, 5.0), (50, -1.0)], "a1")}
    s = trajectory_summary(runs=runs, x="id", y="ood", fit=LINEAR, bins=4)       # edges 10, 30, 50, 70, 90
    assert s.bins["x_low"].tolist() == pytest.approx([10, 30, 50, 70])
    assert s.bins["n_checkpoints"].tolist() == [1, 1, 1, 1]
    assert s.bins["er_mean"].tolist() == pytest.approx([1.0, 5.0, -1.0, 3.0])
    assert s.bins["er_sd"].isna().all()                         # one checkpoint per bin: no sample s.d.
    assert s.max_er == pytest.approx(5.0)
    with_empty = trajectory_summary(runs=runs, x="id", y="ood", fit=LINEAR, bins=[0, 20, 40, 60, 80, 100])
    assert with_empty.bins["n_checkpoints"].tolist() == [1, 1, 1, 0, 1]
    assert np.isnan(with_empty.bins.loc[3, "er_mean"])
    assert with_empty.max_er == pytest.approx(5.0)


def test_checkpoints_outside_given_edges_are_left_out():
    cps = pd.DataFrame({"run": ["a", "a", "b"], "x_acc": [5.0, 55.0, 95.0], "effective_robustness": [9.0, 2.0, 4.0]})
    table = bin_by_id_accuracy(cps, [50, 60], values=("effective_robustness",))
    assert table["n_checkpoints"].tolist() == [1] and table["er_mean"].tolist() == [2.0]


# ----------------------------------------------------------------------------- percentage of the gap, y = x
def test_percent_of_gap_on_a_hand_computed_case():
    fit = fit_trend(x=[20, 60, 100], y=[10, 30, 50], scale="linear")          # beta(x) = x / 2
    # at 60% ID the trend predicts 30%: the gap to y = x is 30 pp; 39% shifted is 9 pp = 30% of it
    # at 40% ID: gap 20 pp; 25% shifted is 5 pp = 25%
    runs = {"ft": pd.concat([_run([(60, 0.0)])]).assign(accuracy=[60, 39]),
            "ft-seed1": _run([(40, 0.0)]).assign(accuracy=[40, 25])}
    s = trajectory_summary(runs=runs, x="id", y="ood", fit=fit, bins=[0, 50, 100])
    cps = s.checkpoints.set_index("x_acc")
    assert cps.loc[60.0, "no_gap_er"] == pytest.approx(30.0) and cps.loc[60.0, "percent_of_gap"] == pytest.approx(30.0)
    assert cps.loc[40.0, "no_gap_er"] == pytest.approx(20.0) and cps.loc[40.0, "percent_of_gap"] == pytest.approx(25.0)
    assert s.bins["percent_of_gap_mean"].tolist() == pytest.approx([25.0, 30.0])
    assert s.max_percent_of_gap == pytest.approx(30.0)
    # where the trend is at or above y = x there is no gap: NaN, not a division by ~0
    assert np.isnan(percent_of_gap([1.0, 1.0], [0.0, -2.0])).all()


def test_the_y_equals_x_curve_has_the_effective_robustness_of_a_model_with_no_drop():
    tb = _logit_testbed()
    fit = fit_trend(tb, "id", "ood")
    xs = np.array([10.0, 50.0, 90.0])
    ng = no_gap_effective_robustness(fit, xs)
    # logit(y) = logit(x) - 1: at 50% the trend predicts sigmoid(-1) = 26.894%, so y = x is 23.106 pp above it
    assert ng[1] == pytest.approx(50 - 100 / (1 + np.e), abs=1e-6)
    # the same as effective_robustness of models that lose nothing under the shift (another code path)
    direct = effective_robustness(x=xs, y=xs, fit=fit, n_resamples=0)["effective_robustness"]
    assert ng == pytest.approx(direct.to_numpy())
    assert ng[1] > ng[0] and ng[1] > ng[2]                # under a logit trend it peaks mid-range
    runs = {"ft": _run([(30, 0.0), (80, 0.0)]).assign(accuracy=[30, 30, 80, 80])}    # both checkpoints on y = x
    s = trajectory_summary(tb, runs, "id", "ood", bins=2)
    assert s.checkpoints["percent_of_gap"].tolist() == pytest.approx([100.0, 100.0])
    assert s.no_gap["effective_robustness"].to_numpy() == pytest.approx(
        s.no_gap["x_acc"].to_numpy() - fit.predict(s.no_gap["x_acc"].to_numpy()))
    assert s.no_gap["x_acc"].iloc[0] == pytest.approx(30.0) and s.no_gap["x_acc"].iloc[-1] == pytest.approx(80.0)


# ----------------------------------------------------------------------------- the mixed classifier
def test_mixed_classifier_accuracies_are_the_alpha_mixture_exactly_in_expectation():
    tb = _logit_testbed()
    alphas = np.linspace(0, 1, 11)
    curve = mixed_classifier_curve(tb, "m0", "m4", "id", "ood", alphas=alphas)
    acc = tb.accuracies
    assert curve["x_acc"].to_numpy() == pytest.approx(alphas * acc.at["m4", "id"] + (1 - alphas) * acc.at["m0", "id"],
                                                      rel=0, abs=1e-12)
    assert curve["y_acc"].to_numpy() == pytest.approx(alphas * acc.at["m4", "ood"] + (1 - alphas) * acc.at["m0", "ood"],
                                                      rel=0, abs=1e-12)
    fit = curve.attrs["fit"]
    assert curve["effective_robustness"].to_numpy() == pytest.approx(
        curve["y_acc"].to_numpy() - fit.predict(curve["x_acc"].to_numpy()))
    # both end points are on the logit trend; the straight mixture between them is above it by convexity alone
    assert curve["effective_robustness"].iloc[[0, -1]].to_numpy() == pytest.approx([0, 0], abs=1e-9)
    assert (curve["effective_robustness"].iloc[1:-1] > 0.5).all()


def test_a_finite_draw_lies_within_the_binomial_error_and_averages_to_the_mixture():
    tb = _logit_testbed()
    curve = mixed_classifier_curve(tb, "m1", "m3", "id", "ood", alphas=[0.0, 0.3, 0.7, 1.0], seed=3)
    assert (curve["x_n"] == 10_000).all()
    for axis in ("x", "y"):
        dev = (curve[f"{axis}_acc_drawn"] - curve[f"{axis}_acc"]).abs()
        assert (dev <= 4 * curve[f"{axis}_se"] + 0.01 + 1e-9).all()           # 0.01: one example in 10,000
    assert curve.loc[[0, 3], "x_acc_drawn"].tolist() == pytest.approx(curve.loc[[0, 3], "x_acc"].tolist(), abs=0.01)
    smaller = mixed_classifier_curve(tb, "m1", "m3", "id", "ood", alphas=[0.5], n_examples=200, seed=1)
    assert (smaller["x_n"] == 200).all() and smaller["x_se"].iloc[0] > curve["x_se"].iloc[1]
    # the draw itself: over many draws with fixed correctness its mean is alpha*mean(high) + (1-alpha)*mean(low)
    rng = np.random.default_rng(0)
    low, high = rng.random(500) < 0.3, rng.random(500) < 0.8
    draws = np.array([mixed_classifier_draw(low, high, 0.4, rng).mean() for _ in range(4000)])
    expected = 0.4 * high.mean() + 0.6 * low.mean()
    assert abs(draws.mean() - expected) < 4 * draws.std() / np.sqrt(len(draws))
    same = mixed_classifier_curve(tb, "m1", "m3", "id", "ood", alphas=[0.3], seed=3)
    again = mixed_classifier_curve(tb, "m1", "m3", "id", "ood", alphas=[0.3], seed=3)
    pd.testing.assert_frame_equal(same, again)


def test_the_summary_carries_the_mixed_curve_against_its_own_trend():
    tb = _logit_testbed()
    s = trajectory_summary(tb, {"ft-seed0": _run([(50, 0.0)])}, "id", "ood", bins=1, mix=("m0", "m4"),
                           alphas=[0, 0.5, 1])
    assert s.mixed is not None and s.mixed["alpha"].tolist() == [0, 0.5, 1]
    assert s.mixed.attrs["fit"] is s.fit


# ----------------------------------------------------------------------------- bad input
def test_runs_of_different_recipes_passed_as_one_are_a_one_line_error():
    runs = {"scratch-seed0": _run([(50, 0.0)]), "pretrained-seed0": _run([(50, 1.0)])}
    with pytest.raises(ConfigError, match="different recipes") as exc:
        trajectory_summary(runs=runs, x="id", y="ood", fit=LINEAR)
    assert "\n" not in str(exc.value) and "'scratch'" in str(exc.value) and "'pretrained'" in str(exc.value)
    # a recipe column / attr / tag states the recipe, and wins over the name
    a, b = _run([(50, 0.0)]).assign(recipe="lr-1e-3"), _run([(60, 0.0)])
    b.attrs["recipe"] = "lr-1e-2"
    with pytest.raises(ConfigError, match="different recipes"):
        trajectory_summary(runs={"x-seed0": a, "x-seed1": b}, x="id", y="ood", fit=LINEAR)
    with pytest.raises(ConfigError, match="not 'lr-1e-2'"):
        trajectory_summary(runs={"x-seed0": a, "x-seed1": b}, x="id", y="ood", fit=LINEAR, recipe="lr-1e-2")
    # recipe= names one recipe whose run names do not say so
    ok = trajectory_summary(runs={"run-a": _run([(50, 0.0)]), "run-b": _run([(60, 1.0)])}, x="id", y="ood",
                            fit=LINEAR, recipe="mine", bins=1)
    assert ok.recipe == "mine"

    class Stored:
        frame, tags = _run([(50, 0.0)]), ("digits", "recipe:scratch")

    assert run_recipe("anything", Stored()) == ("scratch", True)
    assert run_recipe("cnn-scratch-seed2", _run([(50, 0.0)])) == ("cnn-scratch", False)


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(bins=0), "at least 1 bin"),
    (dict(bins=[50, 40]), "increasing"),
    (dict(bins="ten"), "bin edges"),
])
def test_bad_bins_are_one_line_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        trajectory_summary(runs={"a": _run([(50, 0.0)])}, x="id", y="ood", fit=LINEAR, **kwargs)


def test_bad_summary_and_mixture_input_are_one_line_errors():
    tb = _logit_testbed()
    with pytest.raises(ConfigError, match="needs runs"):
        trajectory_summary(tb, {}, "id", "ood")
    with pytest.raises(ConfigError, match="takes the testbed first"):
        trajectory_summary("id", {"a": _run([(50, 0.0)])}, "ood")
    with pytest.raises(ConfigError, match="mapping"):
        trajectory_summary(tb, [_run([(50, 0.0)])], "id", "ood")
    with pytest.raises(ConfigError, match="two different models"):
        mixed_classifier_curve(tb, "m1", "m1", "id", "ood")
    with pytest.raises(ConfigError, match=r"\[0, 1\]"):
        mixed_classifier_curve(tb, "m1", "m3", "id", "ood", alphas=[0.5, 1.5])
    with pytest.raises(ConfigError, match="n_examples"):
        mixed_classifier_curve(tb, "m1", "m3", "id", "ood", n_examples=0)
    with pytest.raises(ConfigError, match="m9"):
        mixed_classifier_curve(tb, "m1", "m9", "id", "ood")
    with pytest.raises(ConfigError, match="takes the testbed first"):
        mixed_classifier_curve("m1", "m3", "id", "ood")
    with pytest.raises(ConfigError, match="two model names"):
        trajectory_summary(tb, {"a": _run([(50, 0.0)])}, "id", "ood", mix=("m1",))


# ----------------------------------------------------------------------------- figures and the CLI
def test_the_stats_figures_draw_models_bins_the_no_gap_curve_and_the_mixture():
    import matplotlib.pyplot as plt

    from shiftbench.report.trajectory_figures import plot_trajectory_stats, trajectory_stats_figure

    tb = _logit_testbed()
    runs = {f"ft-seed{k}": _run([(30, k), (50, 2 * k), (80, 1.0)], f"ft{k}") for k in range(3)}
    s = trajectory_summary(tb, runs, "id", "ood", bins=3, mix=("m0", "m4"))
    fig = plot_trajectory_stats(tb, s)
    gids = {a.get_gid() for ax in fig.axes for a in ax.get_children() if a.get_gid()}
    assert {"no_gap", "mixed"} <= gids and len(fig.axes) == 2
    plt.close(fig)
    pfig = trajectory_stats_figure(tb, s)
    names = [t.name for t in pfig.data if t.name]
    assert any(n.startswith("testbed models (5") for n in names) and "y = x (no gap)" in names
    assert any(n.startswith("mixed m0") for n in names)


def _store(root, tb_path) -> None:
    from shiftbench.store import Store

    for name, recipe in (("ft-seed0", "ft"), ("ft-seed1", "ft"), ("ft-seed2", "ft"), ("scratch", "scratch")):
        k = int(name[-1]) if name[-1].isdigit() else 5
        rows = _run([(30, k), (60, 1.0 + k), (85, -1.0)], name)
        Store(root).write_study("trajectory", name, rows, {"settings": ["id", "ood"], "id_setting": "id",
                                                            "tags": [f"recipe:{recipe}"]})


def test_cli_summarises_each_recipe_as_json_and_refuses_mixed_names(tmp_path):
    from typer.testing import CliRunner

    from shiftbench import cli

    table = _logit_testbed().save(tmp_path / "tb.csv")
    _store(tmp_path / "store", table)
    base = ["trajectory", "--store", str(tmp_path / "store"), "-t", str(table)]
    res = CliRunner().invoke(cli.app, [*base, "--bins", "3", "--mix", "m0,m4", "--json", "-o", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert list(doc) == ["summaries"]
    by = {s["recipe"]: s for s in doc["summaries"]}
    assert set(by) == {"ft", "scratch"} and by["ft"]["n_runs"] == 3 and by["scratch"]["n_runs"] == 1
    ft = by["ft"]
    assert {"recipe", "x", "y", "runs", "bins", "max_er", "max_er_bin", "max_percent_of_gap", "no_gap",
            "mixed", "trend"} <= set(ft)
    assert len(ft["bins"]) == 3 and {"x_low", "x_high", "n_checkpoints", "er_mean", "er_sd",
                                     "percent_of_gap_mean"} <= set(ft["bins"][0])
    assert [b["n_checkpoints"] for b in ft["bins"]] == [3, 3, 3]
    fit = fit_trend(_logit_testbed(), "id", "ood")                  # the CLI's trend: the testbed's logit fit
    assert ft["bins"][0]["er_mean"] == pytest.approx(21.0 - float(fit.predict(30.0)))      # ft-seed<k>: 20 + k at 30%
    assert ft["bins"][0]["er_sd"] == pytest.approx(1.0)
    assert len(ft["mixed"]) == 11 and ft["mixed"][5]["alpha"] == pytest.approx(0.5)
    assert ft["x"] == "id" and ft["y"] == "ood"
    assert any(p.name.endswith("_bins.csv") for p in (tmp_path / "out").iterdir())
    assert any(p.suffix == ".png" for p in (tmp_path / "out").iterdir())
    text = CliRunner().invoke(cli.app, [*base, "--bins", "3", "--name", "ft-seed0", "--name", "ft-seed1"])
    assert text.exit_code == 0, text.output
    assert "recipe ft: 2 runs" in text.stdout and "maximum effective robustness over bins" in text.stdout
    mixed = CliRunner().invoke(cli.app, [*base, "--bins", "3", "--name", "ft-seed0", "--name", "scratch"])
    assert mixed.exit_code != 0 and "different recipes" in str(mixed.exception)
    bad = CliRunner().invoke(cli.app, [*base, "--mix", "m0"])
    assert bad.exit_code != 0 and "two testbed models" in str(bad.exception)
    zero = CliRunner().invoke(cli.app, [*base, "--bins", "0"])
    assert zero.exit_code != 0 and "--bins" in str(zero.exception)


def test_report_draws_the_statistics_of_a_recipe_with_several_runs(tmp_path):
    from report_testbed import V2, tiny_testbed

    from shiftbench.report import write_html_report
    from shiftbench.report.tables import file_slug, trajectory_stem
    from shiftbench.store import Store

    store = Store(tmp_path / "store")
    for k in range(3):
        rows = _run([(15, k), (60, 1.0 + k), (80, -1.0)], f"ft-seed{k}").replace({"id": "val", "ood": V2})
        store.write_study("trajectory", f"ft-seed{k}", rows, {"settings": ["val", V2], "id_setting": "val",
                                                             "tags": ["recipe:ft"]})
    rows = _run([(20, 0.0), (70, 0.0)], "lonely").replace({"id": "val", "ood": V2})
    store.write_study("trajectory", "lonely", rows, {"settings": ["val", V2], "id_setting": "val"})
    doc = write_html_report([tiny_testbed()], tmp_path / "r", store=tmp_path / "store", n_resamples=50,
                            figure_formats=(".png",)).read_text()
    assert "ft: 3 runs, binned on val accuracy" in doc and "lonely: " not in doc.split("binned on")[-1][:200]
    assert "Maximum over bins" in doc and "% of the gap to y = x" in doc
    stem = f"{trajectory_stem('val', V2)}_stats_{file_slug('ft')}"
    assert (tmp_path / "r" / "tiny" / f"{stem}.png").exists()
    bins = pd.read_csv(tmp_path / "r" / "tiny" / f"{stem}.csv")
    assert bins["n_checkpoints"].sum() == 9 and set(bins["recipe"]) == {"ft"}


def test_the_old_one_run_call_names_its_new_name():
    er = pd.DataFrame({"step": [0], "x_acc": [50.0], "y_acc": [40.0], "effective_robustness": [0.0]})
    with pytest.raises(ConfigError, match=r"trajectory_endpoints\(er\)"):
        trajectory_summary(er)
