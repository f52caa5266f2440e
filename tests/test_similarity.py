"""Model similarity: dominance probability, error consistency and unsolved examples, by hand
on tiny matrices and end to end from a store that ``shiftbench.evaluate`` wrote.

The hand-worked matrix (rows: models, columns: examples e0..e5)::

    a  1 1 1 1 0 0   4/6 right
    b  1 1 0 0 1 0   3/6
    c  0 1 1 0 0 1   3/6   (ties b)

Both right: ab 2 (e0, e1), ac 2 (e1, e2), bc 1 (e1). Both wrong: ab 1 (e5), ac 1 (e4), bc 1 (e3).
"""
from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from typer.testing import CliRunner

from shiftbench.analysis.similarity import (
    dominance_probability, error_consistency, model_similarity, standard_models, unsolved_examples)
from shiftbench.correctness import CorrectnessMatrix, correctness_matrix, similarity_settings
from shiftbench.errors import ConfigError, DataError
from shiftbench.store import Store
from shiftbench import testbed as testbed_module

HAND = np.array([[1, 1, 1, 1, 0, 0],
                 [1, 1, 0, 0, 1, 0],
                 [0, 1, 1, 0, 0, 1]], dtype=bool)
IDS = tuple(f"e{k}" for k in range(6))


@pytest.fixture
def hand() -> CorrectnessMatrix:
    return CorrectnessMatrix(HAND, ("a", "b", "c"), IDS, setting="toy",
                             model_types=("STANDARD", "STANDARD", "ROBUST_INTV"))


def naive_pair(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """The definitions read literally, one pair at a time (the reference for the vectorised code)."""
    lo, hi = (x, y) if x.mean() <= y.mean() else (y, x)
    dom = float(np.mean(lo & ~hi))
    c_obs = float(np.mean(x == y))
    p, q = x.mean(), y.mean()
    c_exp = p * q + (1 - p) * (1 - q)
    kappa = float("nan") if c_exp == 1 else (c_obs - c_exp) / (1 - c_exp)
    return dom, kappa


# ---------------------------------------------------------------------------- hand-worked
def test_dominance_probability_counts_less_accurate_right_and_more_accurate_wrong(hand):
    d = dominance_probability(hand)
    assert d.loc["b", "a"] == pytest.approx(1 / 6)        # e4: b right, a wrong
    assert d.loc["c", "a"] == pytest.approx(1 / 6)        # e5: c right, a wrong
    assert d.loc["a", "b"] == d.loc["b", "a"]             # symmetric: always the less accurate one's view
    assert np.all(np.diag(d.to_numpy()) == 0)


def test_dominance_probability_of_tied_models_is_the_same_either_way(hand):
    d = dominance_probability(hand)
    # b right & c wrong: e0, e4; c right & b wrong: e2, e5 -> 2/6 both ways
    assert d.loc["b", "c"] == pytest.approx(2 / 6) and d.loc["c", "b"] == pytest.approx(2 / 6)


def test_error_consistency_is_cohens_kappa_beyond_chance(hand):
    k = error_consistency(hand)
    # ab: c_obs 3/6, c_exp = 2/3*1/2 + 1/3*1/2 = 1/2 -> 0; bc: c_obs 2/6, c_exp 1/2 -> -1/3
    assert k.loc["a", "b"] == pytest.approx(0.0, abs=1e-12)
    assert k.loc["a", "c"] == pytest.approx(0.0, abs=1e-12)
    assert k.loc["b", "c"] == pytest.approx(-1 / 3)
    assert np.allclose(np.diag(k.to_numpy()), 1.0)
    # a nested pair: d right exactly where a is right on e0..e2 -> c_obs 5/6, c_exp 1/2 -> 2/3
    nested = CorrectnessMatrix(np.array([HAND[0], [1, 1, 1, 0, 0, 0]], dtype=bool), ("a", "d"))
    assert error_consistency(nested).loc["a", "d"] == pytest.approx(2 / 3)
    assert dominance_probability(nested).loc["a", "d"] == 0.0


def test_error_consistency_is_nan_only_when_expected_agreement_is_one():
    c = CorrectnessMatrix(np.array([[1, 1, 1, 1], [1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 1, 0]],
                                   dtype=bool), ("right1", "right2", "wrong1", "wrong2", "half"))
    k = error_consistency(c)
    assert np.isnan(k.loc["right1", "right2"]) and np.isnan(k.loc["wrong1", "wrong2"])
    assert np.isnan(k.loc["right1", "right1"])             # even with itself: no errors to compare
    assert k.loc["right1", "wrong1"] == 0.0                # c_exp = 0, c_obs = 0
    assert k.loc["right1", "half"] == pytest.approx(0.0)   # c_exp = c_obs = 1/2
    assert k.loc["half", "half"] == pytest.approx(1.0)


def test_model_similarity_orders_by_accuracy_and_its_counts_add_up(hand):
    sim = model_similarity(hand)
    assert sim.models == ["b", "c", "a"]                   # accuracy, ties by name
    assert list(sim.dominance.index) == sim.models == list(sim.error_consistency.columns)
    p = sim.pairs.set_index(["model_a", "model_b"])
    assert set(p.index) == {("b", "c"), ("b", "a"), ("c", "a")}
    row = p.loc[("c", "a")]
    assert (row["both_right"], row["only_a"], row["only_b"], row["both_wrong"]) == (2, 1, 2, 1)
    assert (p[["both_right", "only_a", "only_b", "both_wrong"]].sum(axis=1) == 6).all()
    assert row["dominance_probability"] == pytest.approx(1 / 6)
    assert p.loc[("b", "c"), "error_consistency"] == pytest.approx(-1 / 3)
    assert p.loc[("b", "c"), "expected_consistency"] == pytest.approx(0.5)
    assert (sim.pairs["accuracy_a"] <= sim.pairs["accuracy_b"]).all()
    assert sim.accuracy["a"] == pytest.approx(400 / 6)


def test_vectorised_matrices_equal_a_naive_per_pair_loop_across_chunks():
    rng = np.random.default_rng(3)
    correct = rng.random((12, 1003)) < rng.uniform(0.2, 0.9, size=(12, 1))
    correct[4] = True                                       # an always-right model
    sim = model_similarity(correct, chunk_size=97)          # 11 chunks, the last one short
    for i in range(12):
        for j in range(i + 1, 12):
            a, b = f"model{i}", f"model{j}"
            dom, kappa = naive_pair(correct[i], correct[j])
            assert sim.dominance.loc[a, b] == pytest.approx(dom, abs=1e-12)
            assert sim.error_consistency.loc[a, b] == pytest.approx(kappa, abs=1e-12)


def test_unsolved_examples_lists_the_models_that_do_solve_them(hand):
    table = unsolved_examples(hand)                         # standard: a, b (by type)
    assert list(table["id"]) == ["e5"]                      # a and b both miss only e5
    assert table.loc[0, "solved_by"] == "c" and table.loc[0, "n_right"] == 1
    assert table.loc[0, "solved_by_types"] == "ROBUST_INTV"
    only_a = unsolved_examples(hand, ["a"])
    assert list(only_a["id"]) == ["e4", "e5"] and list(only_a["solved_by"]) == ["b", "c"]
    assert only_a.attrs["n_standard"] == 1
    nobody = unsolved_examples(CorrectnessMatrix(HAND[:, :5], ("a", "b", "c"), IDS[:5]), ["b", "c"])
    assert list(nobody["id"]) == ["e3"] and nobody.loc[0, "solved_by"] == "a"


def test_standard_models_come_from_types_a_testbed_or_names(hand):
    assert standard_models(hand) == ["a", "b"]
    tb = testbed_module.Testbed.from_frame(pd.DataFrame({"model": ["c", "a", "x"], "model_type": ["STANDARD", "MORE_DATA", "STANDARD"],
                                          "val": [1.0, 2.0, 3.0]}))
    assert standard_models(hand, tb) == ["c"]
    assert standard_models(hand, "b") == ["b"]
    with pytest.raises(ConfigError, match=r"unknown model 'aa'.*did you mean 'a'"):
        standard_models(hand, ["aa"])
    untyped = CorrectnessMatrix(HAND, ("a", "b", "c"), setting="toy")
    with pytest.raises(ConfigError, match=r"no model has type STANDARD on setting 'toy'.*--standard"):
        unsolved_examples(untyped)


@pytest.mark.parametrize("bad, message", [
    (np.array([[0.0, 1.0, np.nan]]), "True/False or 0/1"),
    (np.array([[0, 2, 1]]), "True/False or 0/1"),
    (np.array([1, 0, 1]), "must be 2-D"),
    (np.zeros((2, 0), dtype=bool), "at least one model and one example"),
])
def test_bad_correctness_is_refused_with_the_reason(bad, message):
    with pytest.raises(DataError, match=message):
        dominance_probability(bad)


def test_labels_must_fit_the_matrix():
    with pytest.raises(DataError, match="3 rows of correctness but 2 model names"):
        CorrectnessMatrix(HAND, ("a", "b"))
    with pytest.raises(DataError, match="model 'a' appears twice"):
        CorrectnessMatrix(HAND, ("a", "b", "a"))
    with pytest.raises(DataError, match="6 examples but 2 example ids"):
        CorrectnessMatrix(HAND, ("a", "b", "c"), ("x", "y"))
    with pytest.raises(ConfigError, match="chunk_size=0"):
        dominance_probability(HAND, chunk_size=0)


def test_a_dataframe_of_zeros_and_ones_is_accepted(hand):
    frame = pd.DataFrame(HAND.astype(int), index=["a", "b", "c"], columns=list(IDS))
    pd.testing.assert_frame_equal(dominance_probability(frame), dominance_probability(hand))


# ---------------------------------------------------------------------------- figures
def test_figures_are_sorted_by_accuracy_and_capped_evenly(hand):
    from shiftbench.report.similarity_figures import plot_similarity_matrices, similarity_heatmap, spread_models

    rng = np.random.default_rng(0)
    big = model_similarity(rng.random((9, 200)) < np.linspace(0.1, 0.9, 9)[:, None])
    picked = spread_models(big, 4)
    assert len(picked) == 4 and picked[0] == big.models[0] and picked[-1] == big.models[-1]
    fig = similarity_heatmap(big, "error_consistency", max_models=4)
    assert [x.split(" (")[0] for x in fig.data[0].x] == picked and "4 of 9 models" in fig.layout.title.text
    sim = model_similarity(hand)
    fig = similarity_heatmap(sim, "dominance_probability")
    assert list(fig.data[0].y) == ["b (50.0%)", "c (50.0%)", "a (66.7%)"]
    assert fig.data[0].z[0][2] == pytest.approx(round(1 / 6, 4))
    mpl = plot_similarity_matrices(sim)
    assert len(mpl.axes) == 4                               # two matrices and their colour bars
    # too many models for names: the axes say what runs along them, variants past the line
    names = [f"m{i}" for i in range(30)] + [f"m{i}@{k}" for i in range(3) for k in (1, 2, 3, 4, 5)]
    many = model_similarity(pd.DataFrame(rng.random((45, 200)) < np.linspace(0.1, 0.9, 45)[:, None], index=names))
    fig = plot_similarity_matrices(many)
    assert fig.axes[0].get_xlabel() == "30 models | 15 variants (name@…), by accuracy"
    assert similarity_heatmap(many).layout.xaxis.title.text == fig.axes[0].get_xlabel()
    import matplotlib.pyplot as plt

    plt.close("all")
    with pytest.raises(ConfigError, match="unknown similarity matrix 'kappa'"):
        similarity_heatmap(sim, "kappa")


# ---------------------------------------------------------------------------- from a real store
MODELS_SOURCE = textwrap.dedent('''
    """Models that get exactly the examples of the hand-worked matrix right: an image's red
    channel encodes its example number n (red = 20 n), its folder the true class n % 3."""
    import torch
    from torch import nn
    from shiftbench.models import Preprocessing

    PRE = Preprocessing(input_size=16, resize=16, interpolation="bilinear", mean=(0.0, 0.0, 0.0),
                        std=(1.0, 1.0, 1.0))
    RIGHT = {"a": [1, 1, 1, 1, 0, 0], "b": [1, 1, 0, 0, 1, 0], "c": [0, 1, 1, 0, 0, 1]}

    class Table(nn.Module):
        def __init__(self, right):
            super().__init__()
            self.right = right

        def forward(self, x):
            n = torch.round(x.float().mean(dim=(2, 3))[:, 0] * 255 / 20).long()
            out = torch.zeros(x.shape[0], 3)
            for i, k in enumerate(n.tolist()):
                out[i, k % 3 if self.right[k] else (k + 1) % 3] = 5.0
            return out

    def make(name, model_type):
        def build():
            m = Table(RIGHT[name])
            m.preprocessing, m.num_classes = PRE, 3
            return m
        build.metadata = {"model_type": model_type}
        return build

    a = make("a", "STANDARD")
    b = make("b", "STANDARD")
    c = make("c", "ROBUST_INTV")
''')


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory) -> tuple[Path, str]:
    """A store with models a, b, c on a 6-image folder (plus one undecodable file), and model a
    again with --limit 3 on the same folder."""
    from shiftbench.engine import evaluate

    root = tmp_path_factory.mktemp("similarity")
    (root / "simmodels_fixture.py").write_text(MODELS_SOURCE)
    sys.path.insert(0, str(root))
    try:
        images = root / "imgs"
        for n in range(6):
            d = images / f"class{n % 3}"
            d.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (16, 16), (20 * n, 0, 0)).save(d / f"e{n}.png")
        (images / "class0" / "broken.png").write_bytes(b"")
        setting = f"folder:{images}"
        for m in "abc":
            evaluate(f"python:simmodels_fixture:{m}", [setting], store=root / "store", workers=0, batch_size=4,
                     progress=False, partial=True)
    finally:
        sys.path.remove(str(root))
    return root / "store", setting


def test_store_matrix_is_aligned_on_ids_with_skipped_examples_left_out(evaluated):
    store, setting = evaluated
    c = correctness_matrix(store, setting)
    assert c.models == ("simmodels_fixture.a", "simmodels_fixture.b", "simmodels_fixture.c")
    assert c.model_types == ("STANDARD", "STANDARD", "ROBUST_INTV")
    assert c.n_examples == 6 and c.n_skipped == 1 and c.n_unshared == 0   # broken.png out for everyone
    frame = c.to_frame().rename(index=lambda m: m.split(".")[-1], columns=lambda i: Path(i).stem)
    assert (frame[list(IDS)].to_numpy() == HAND).all()
    sim = model_similarity(c)
    assert sim.dominance.loc["simmodels_fixture.b", "simmodels_fixture.a"] == pytest.approx(1 / 6)
    assert sim.error_consistency.loc["simmodels_fixture.b", "simmodels_fixture.c"] == pytest.approx(-1 / 3)
    assert list(unsolved_examples(c)["id"]) == ["class2/e5.png"]
    assert similarity_settings(store).to_dict() == {setting: 3}


def test_store_matrix_of_chosen_models_and_unshared_examples(evaluated, tmp_path):
    store, setting = evaluated
    two = correctness_matrix(store, setting, ["simmodels_fixture.c", "simmodels_fixture.a"])
    assert two.models == ("simmodels_fixture.c", "simmodels_fixture.a")
    # a copy of the store where model b only has its first 4 rows: 3 examples then are not shared
    copy = Store(tmp_path / "store")
    src = Store(store)
    for r in src.results().itertuples():
        pred = src.read_predictions(r.key)
        if r.model.endswith(".b"):
            pred = pred.iloc[:4]
        import pyarrow as pa

        copy.write_part(r.key, 0, pa.Table.from_pandas(pred, preserve_index=False))
        copy.finish(r.key, json.loads((src.root / "done" / f"{r.key}.json").read_text()))
    c = correctness_matrix(copy, setting)
    assert c.n_skipped == 1 and c.n_unshared == 3 and c.n_examples == 3
    assert set(c.example_ids) == {"class0/e0.png", "class0/e3.png", "class1/e1.png"}


def test_store_errors_name_the_setting_and_the_fix(evaluated, tmp_path):
    store, setting = evaluated
    with pytest.raises(ConfigError, match=r"unknown setting 'folder:.*imgz'; did you mean 'folder:"):
        correctness_matrix(store, setting[:-1] + "z")
    with pytest.raises(ConfigError, match=r"unknown model 'simmodels_fixture.d'.*did you mean"):
        correctness_matrix(store, setting, ["simmodels_fixture.d"])
    with pytest.raises(ConfigError, match="no results store there"):
        correctness_matrix(tmp_path / "nowhere", setting)
    (tmp_path / "empty" / "done").mkdir(parents=True)       # a store without results (a bare folder is not one)
    with pytest.raises(DataError, match="no finished results; run `shiftbench eval` first"):
        correctness_matrix(tmp_path / "empty", setting)


def test_cli_writes_tables_figure_and_study_and_prints_the_pairs(evaluated, tmp_path, monkeypatch):
    from shiftbench import cli

    monkeypatch.setenv("MPLBACKEND", "Agg")
    store, setting = evaluated
    out = tmp_path / "sim"
    res = CliRunner().invoke(cli.app, ["similarity", "--store", str(store), "--setting", setting, "-o", str(out)])
    assert res.exit_code == 0, (res.output, res.exception)
    assert "3 models, 6 examples (1 skipped for some model, left out)" in res.stdout
    assert "1 examples no standard model (2) gets right; 1 of them solved by another model" in res.stdout
    assert "class2/e5.png: 1 right (simmodels_fixture.c)" in res.stdout
    pairs = pd.read_csv(out / "pairs.csv")
    assert len(pairs) == 3 and pairs["dominance_probability"].max() == pytest.approx(2 / 6)
    dom = pd.read_csv(out / "dominance_probability.csv", index_col=0)
    assert list(dom.index) == ["simmodels_fixture.b", "simmodels_fixture.c", "simmodels_fixture.a"]
    assert (out / "similarity.png").stat().st_size > 5000 and (out / "unsolved.csv").exists()
    study = Store(store).read_studies("similarity")
    assert len(study) == 3 and set(study["setting"]) == {setting}
    res = CliRunner().invoke(cli.app, ["similarity", "--store", str(store), "--setting", setting, "-o", str(out),
                                       "--standard", "simmodels_fixture.c", "--json", "--no-save-study"])
    data = json.loads(res.stdout)
    assert data["standard"] == ["simmodels_fixture.c"] and data["n_unsolved_by_standard"] == 3
    assert data["n_unsolved_solved_by_others"] == 3                  # c misses e0, e3, e4; a or b gets each and data["n_skipped"] == 1
    res = CliRunner().invoke(cli.app, ["similarity", "--store", str(store), "--setting", setting, "-o", str(out),
                                       "--standard", "a", "--testbed", "imagenet-reference"])
    assert isinstance(res.exception, ConfigError) and "either --standard NAMES or --testbed T" in str(res.exception)


def test_report_shows_similarity_only_with_two_models_in_the_store(evaluated, tmp_path):
    from shiftbench.report import write_html_report

    store, setting = evaluated
    tb = testbed_module.Testbed.from_frame(pd.DataFrame({"model": ["x", "y"], "model_type": ["STANDARD"] * 2, "val": [70.0, 75.0]}))
    path = write_html_report([tb], tmp_path / "rep", store=store, shifts=[], n_resamples=10, figure_formats=[".png"])
    page = path.read_text()
    assert "Model similarity (results store)" in page and f"Similarity on {setting}" in page
    assert "3 models, 6 examples (1 skipped (not decodable) for some model, left out)" in page
    assert "1 of 6 examples are missed by all 2 standard models; 1 of them" in page
    stem = tmp_path / "rep" / "similarity" / setting.lower().replace("/", "-").replace(":", "-").replace("_", "-")
    files = {p.name for p in (tmp_path / "rep" / "similarity").iterdir()}
    assert any(f.endswith("-pairs.csv") for f in files) and any(f.endswith("-unsolved.csv") for f in files)
    assert any(f.endswith(".png") for f in files), (stem, files)
    without = write_html_report([tb], tmp_path / "rep2", shifts=[], n_resamples=10, figure_formats=[])
    assert "Model similarity" not in without.read_text()


def test_on_a_pm_k_setting_the_examples_are_pm_sets_scored_by_the_pm_k_rule(tmp_path):
    """Frames -> pm-sets: an anchor counts as right only with every frame within k right; a set
    whose anchor frame was not decoded is skipped for every model."""
    import pyarrow as pa

    from shiftbench.views import pm_k

    setting = "imagenet-vid-robust_pm10"
    frames = [("g1", 0), ("g1", -3), ("g1", 8), ("g2", 0), ("g2", 5), ("g2", 12),
              ("g3", 0), ("g3", 2), ("g4", 0), ("g4", 1)]
    right = {"m.a": [1, 1, 1, 1, 0, 1, 0, 1, 1, 1],      # g2 spoiled by +5; g3's anchor wrong
             "m.b": [1, 1, 1, 1, 1, 0, 1, 1, 1, 1]}      # g2's wrong frame is 12 away: beyond k
    store = Store(tmp_path / "store")
    for i, (model, flags) in enumerate(right.items()):
        status = ["ok"] * 8 + ["error", "ok"]             # g4's anchor frame failed to decode
        pred = pd.DataFrame({"index": np.arange(len(frames)), "id": [f"{g}/frame{o}" for g, o in frames], "status": status,
                             "correct": [bool(f) for f in flags], "group": [g for g, _ in frames],
                             "offset": pd.array([o for _, o in frames], dtype="int32")})
        key = f"k{i}"
        store.write_part(key, 0, pa.Table.from_pandas(pred, preserve_index=False))
        store.finish(key, {"model": model, "setting": setting, "convention": "full", "model_type": "STANDARD",
                           "n_examples": 3})
    c = correctness_matrix(store, setting)
    assert c.example_ids == ("g1", "g2", "g3") and c.n_skipped == 1
    assert c.correct.tolist() == [[True, False, False], [True, True, True]]
    # the matrix agrees with the setting's own pm-10 accuracy over the scored sets
    a = right["m.a"][:8]
    acc, n = pm_k(np.array(a, bool), [g for g, _ in frames[:8]], [o for _, o in frames[:8]], 10)
    assert c.accuracy["m.a"] == pytest.approx(acc) and n == 3          # both in percent
    # per frame, m.a gets one frame right that m.b gets wrong (g2 at +12); per pm-set, none
    assert dominance_probability(c).loc["m.a", "m.b"] == 0.0


def test_the_report_draws_unshifted_settings_and_not_one_matrix_per_corruption():
    from shiftbench.report.section_similarity import MAX_SETTINGS, MAX_SHIFTED, drawn_settings

    corrupted = [f"mnist-test+{c}.{k}" for c in ("fog", "contrast") for k in range(1, 6)]
    shown, shifted = drawn_settings(corrupted[:3] + ["mnist-test", "uci-digits"] + corrupted[3:])
    assert shown == ["mnist-test", "uci-digits"] and len(shifted) == 10
    only_shifted, _ = drawn_settings(corrupted)
    assert only_shifted == corrupted[:MAX_SHIFTED]
    many = [f"s{i}" for i in range(20)]
    assert drawn_settings(many)[0] == many[:MAX_SETTINGS]
