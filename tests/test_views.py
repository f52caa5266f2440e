"""Views over one forward pass, against hand-worked examples and straightforward re-computations."""
from __future__ import annotations

import doctest
import importlib
import json
import pickle
from pathlib import Path

import numpy as np
import pytest

import shiftbench.views as sv
from shiftbench.errors import ConfigError, DataError
from shiftbench.views import (
    COLUMNS, FullView, MappedView, SubsetView, SuperclassView, calibration, imagenet_a_view, imagenet_r_view,
    objectnet_imagenet_ids, objectnet_view, pm_k, top1, top5, video_view)

CLASSMAPS = Path(sv.__file__).parent.parent / "data" / "classmaps"


def softmax(x):
    e = np.exp(np.asarray(x, dtype=np.float64) - np.max(x, axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def imagenet_ids_named(*names):
    classes = json.loads((CLASSMAPS / "imagenet_1k_classes.json").read_text())
    by_name = {v[1]: int(k) for k, v in classes.items()}
    return [by_name[n] for n in names]


# --- the contract -------------------------------------------------------------------------------

@pytest.mark.parametrize("view", [
    FullView(), SubsetView("s", [1, 3, 5]), SubsetView("s", [1, 3, 5], "argmax-all"),
    MappedView("m", {1: 0, 3: 0, 5: 1}, 2), MappedView("m", {1: 0, 3: 0, 5: 1}, 2, "argmax-all"),
    SuperclassView("v", {1: 0, 3: 0, 5: 1}, 2)])
def test_every_view_returns_the_contract_columns(view):
    rng = np.random.default_rng(0)
    cols = view.apply(rng.normal(size=(7, 8)).astype(np.float32), [1] * 7)
    assert tuple(cols) == COLUMNS
    assert cols["top5"].shape == (7, 5) and cols["top5"].dtype == np.int32 and cols["pred"].dtype == np.int32
    assert all(cols[c].shape == (7,) for c in COLUMNS if c != "top5")
    assert cols["correct"].dtype == bool and cols["confidence"].dtype == np.float32
    assert np.array_equal(cols["pred"], cols["top5"][:, 0])
    assert not (cols["correct"] & ~cols["correct5"]).any()


def test_full_view_matches_a_straightforward_softmax_and_sort():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(64, 1000)).astype(np.float32) * 3
    t = rng.integers(0, 1000, 64)
    t[:10] = x[:10].argmax(1)  # some right answers
    cols = FullView().apply(x, t)
    p = softmax(x)
    order = np.argsort(-x, axis=1, kind="stable")[:, :5]
    assert np.array_equal(cols["top5"], order)
    assert np.array_equal(cols["correct"], order[:, 0] == t)
    assert np.array_equal(cols["correct5"], (order == t[:, None]).any(1))
    np.testing.assert_allclose(cols["confidence"], p.max(1), rtol=1e-5)
    np.testing.assert_allclose(cols["p_true"], p[np.arange(64), t], rtol=1e-4, atol=1e-9)
    np.testing.assert_allclose(cols["p_sq_sum"], (p ** 2).sum(1), rtol=1e-5)


def test_top5_pads_minus_one_when_fewer_than_five_classes():
    cols = FullView().apply(np.array([[0.0, 2.0, 1.0]]), [0])
    assert cols["top5"].tolist() == [[1, 2, 0, -1, -1]]
    assert cols["correct5"].tolist() == [True] and cols["correct"].tolist() == [False]


def test_multi_label_target_is_correct_when_prediction_is_any_label():
    x = np.array([[0.0, 3.0, 1.0, 2.0], [3.0, 0.0, 1.0, 2.0]])
    cols = FullView().apply(x, [(3, 1), (2,)])
    assert cols["correct"].tolist() == [True, False]
    assert cols["correct5"].tolist() == [True, True]
    np.testing.assert_allclose(cols["p_true"], [softmax(x[0])[3], softmax(x[1])[2]], rtol=1e-6)  # first label


def test_float16_logits_give_the_same_predictions():
    rng = np.random.default_rng(2)
    x = (rng.normal(size=(128, 1000)) * 4).astype(np.float16)
    t = rng.integers(0, 1000, 128)
    for view in [FullView(), imagenet_a_view(), objectnet_view(targets_in_source_space=True), video_view()]:
        half, single = view.apply(x, t), view.apply(x.astype(np.float32), t)
        for c in ("pred", "top5", "correct", "correct5"):
            assert np.array_equal(half[c], single[c]), (view.name, c)
        np.testing.assert_allclose(half["confidence"], single["confidence"], rtol=1e-6)


def test_torch_tensors_work_as_logits_and_targets():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = rng.normal(size=(16, 1000)).astype(np.float32)
    t = rng.integers(0, 1000, 16)
    expected = FullView().apply(x, t)
    got = FullView().apply(torch.tensor(x, requires_grad=True), torch.tensor(t))
    for c in COLUMNS:
        assert np.array_equal(got[c], expected[c])
    bf16 = FullView().apply(torch.tensor(x).bfloat16(), torch.tensor(t))
    assert bf16["pred"].shape == (16,)


def test_bad_inputs_raise_data_errors_that_name_the_view():
    with pytest.raises(DataError, match="'full'.*2-D"):
        FullView().apply(np.zeros(5), [0] * 5)
    with pytest.raises(DataError, match="3 rows of logits but 2 targets"):
        FullView().apply(np.zeros((3, 4)), [0, 1])
    with pytest.raises(DataError, match="NaN or inf"):
        FullView().apply(np.array([[0.0, np.nan]]), [0])
    with pytest.raises(DataError, match="at least 6 classes"):
        SubsetView("s", [1, 5]).apply(np.zeros((1, 4)), [1])
    with pytest.raises(DataError, match="non-negative"):
        FullView().apply(np.zeros((1, 4)), [-1])
    with pytest.raises(ConfigError, match="unknown convention 'argmax'"):
        SubsetView("s", [1], convention="argmax")


# --- class subsets ------------------------------------------------------------------------------

def test_restricted_and_argmax_all_disagree_when_best_class_is_outside_the_subset():
    x = np.array([[5.0, 1.0, 2.0, 0.0]])  # best class 0 is not in the subset {1, 2}
    restricted = SubsetView("s", [1, 2], "restricted").apply(x, [2])
    strict = SubsetView("s", [1, 2], "argmax-all").apply(x, [2])
    assert restricted["pred"].tolist() == [2] and restricted["correct"].tolist() == [True]
    assert strict["pred"].tolist() == [0] and strict["correct"].tolist() == [False]
    sub, full = softmax([1.0, 2.0]), softmax(x[0])
    np.testing.assert_allclose(restricted["confidence"], [sub[1]], rtol=1e-6)
    np.testing.assert_allclose(restricted["p_true"], [sub[1]], rtol=1e-6)
    np.testing.assert_allclose(restricted["p_sq_sum"], [(sub ** 2).sum()], rtol=1e-6)
    np.testing.assert_allclose(strict["confidence"], [full[0]], rtol=1e-6)
    np.testing.assert_allclose(strict["p_true"], [full[2]], rtol=1e-6)
    np.testing.assert_allclose(strict["p_sq_sum"], [(full ** 2).sum()], rtol=1e-6)


def test_convention_is_stored_beside_the_view():
    assert imagenet_a_view().convention == "restricted"
    assert imagenet_r_view("argmax-all").convention == "argmax-all"
    assert FullView().convention == "full"
    assert video_view().convention == "superclass-max"


def test_restricted_subset_reports_full_space_ids_and_pads_top5():
    cols = SubsetView("s", [7, 3]).apply(np.array([[9.0, 0, 0, 1.0, 0, 0, 0, 2.0]]), [3])
    assert cols["top5"].tolist() == [[7, 3, -1, -1, -1]]
    assert cols["correct"].tolist() == [False] and cols["correct5"].tolist() == [True]


def test_subset_keep_serves_full_space_and_already_restricted_datasets():
    view = imagenet_a_view()
    ids = json.loads((CLASSMAPS / "imagenet-a_class_indices.json").read_text())
    assert len(ids) == 200 and view.class_ids.tolist() == sorted(ids)
    val_targets = np.repeat(np.arange(1000), 2)  # ImageNet val, full label space
    kept = view.keep(val_targets)
    assert kept.sum() == 400 and set(val_targets[kept]) == set(ids)
    assert view.keep(ids).all()  # ImageNet-A itself: every target already in the subset
    assert view.keep([(0, ids[0]), (0, 1)]).tolist() == [True, False]  # multi-label: any label


def test_subset_view_on_imagenet_a_scores_subset_logits_only():
    a_ids = imagenet_a_view().class_ids
    outside = next(i for i in range(1000) if i not in set(a_ids.tolist()))
    x = np.zeros((1, 1000), dtype=np.float32)
    x[0, outside], x[0, a_ids[5]] = 10.0, 5.0
    assert imagenet_a_view().apply(x, [a_ids[5]])["correct"].tolist() == [True]
    assert imagenet_a_view("argmax-all").apply(x, [a_ids[5]])["correct"].tolist() == [False]


# --- many-to-one maps (ObjectNet) ---------------------------------------------------------------

TOY_MAP = {0: 0, 1: 0, 3: 1, 4: 2}  # source 2 and 5 are unmapped; target 0 has two members


def test_mapped_view_restricts_to_mapped_classes_and_maps_many_to_one():
    x = np.array([[0.0, 4.0, 9.0, 1.0, 3.0, 8.0]])  # best overall (2, 5) are unmapped
    restricted = MappedView("toy", TOY_MAP, 3).apply(x, [0])
    assert restricted["pred"].tolist() == [0] and restricted["correct"].tolist() == [True]
    assert restricted["top5"].tolist() == [[0, 2, 1, -1, -1]]  # distinct targets by max member logit
    p = softmax(x[0, [0, 1, 3, 4]])
    agg = np.array([p[0] + p[1], p[2], p[3]])  # sum of member probabilities
    np.testing.assert_allclose(restricted["confidence"], [agg[0]], rtol=1e-6)
    np.testing.assert_allclose(restricted["p_true"], [agg[0]], rtol=1e-6)
    np.testing.assert_allclose(restricted["p_sq_sum"], [(agg ** 2).sum()], rtol=1e-6)

    strict = MappedView("toy", TOY_MAP, 3, "argmax-all").apply(x, [0])
    assert strict["pred"].tolist() == [-1] and strict["correct"].tolist() == [False]
    assert strict["top5"].tolist() == [[-1, -1, 0, 2, 1]]  # full-space top-5 (2, 5, 1, 4, 3), mapped
    assert strict["correct5"].tolist() == [True]
    full = softmax(x[0])
    np.testing.assert_allclose(strict["confidence"], [full[2]], rtol=1e-6)
    np.testing.assert_allclose(strict["p_true"], [full[0] + full[1]], rtol=1e-6)
    outcomes = np.array([full[0] + full[1], full[3], full[4], full[2], full[5]])  # targets + unmapped
    np.testing.assert_allclose(strict["p_sq_sum"], [(outcomes ** 2).sum()], rtol=1e-5)


def test_mapped_view_maps_source_space_targets_and_keeps_mapped_ones():
    view = MappedView("toy", TOY_MAP, 3, targets_in_source_space=True)
    assert view.keep([0, 1, 2, 3, 4, 5]).tolist() == [True, True, False, True, True, False]
    x = np.array([[0.0, 4.0, 9.0, 1.0, 3.0, 8.0]] * 3)
    assert view.apply(x, [1, 0, 3])["correct"].tolist() == [True, True, False]
    assert MappedView("toy", TOY_MAP, 3).keep([0, 2, 3]).tolist() == [True, True, False]  # target space


def test_mapped_view_rejects_a_map_outside_its_target_space():
    with pytest.raises(ConfigError, match="target id 3 outside 0..2"):
        MappedView("toy", {0: 3}, 3)


def test_objectnet_package_map_has_113_classes_over_125_imagenet_ids():
    ids = objectnet_imagenet_ids()
    assert len(ids) == 113 and sum(map(len, ids.values())) == 125
    assert sorted(ids["Alarm clock"]) == sorted(imagenet_ids_named("analog_clock", "digital_clock"))
    view = objectnet_view()
    assert view.num_target == 113 and view.source_ids.size == 125
    assert list(view.target_names) == sorted(ids)


@pytest.mark.parametrize("convention", ["restricted", "argmax-all"])
def test_objectnet_logit_peak_on_a_clock_predicts_alarm_clock(convention):
    digital = imagenet_ids_named("digital_clock")[0]
    view = objectnet_view(convention)
    x = np.random.default_rng(4).normal(size=(1, 1000)).astype(np.float32)
    x[0, digital] = 20.0
    alarm = view.target_names.index("Alarm clock")
    cols = view.apply(x, [alarm])
    assert cols["pred"].tolist() == [alarm] and cols["correct"].tolist() == [True]
    # val-on-objectnet-classes: ImageNet val targets mapped by the view
    val = objectnet_view(convention, targets_in_source_space=True)
    analog = imagenet_ids_named("analog_clock")[0]
    assert val.apply(x, [analog])["correct"].tolist() == [True]
    assert val.keep([analog, imagenet_ids_named("tench")[0]]).tolist() == [True, False]


def test_objectnet_view_follows_a_given_class_order():
    names = sorted(objectnet_imagenet_ids(), reverse=True)
    view = objectnet_view(class_names=names)
    assert view.target_names[0] == names[0] and view.source_to_target[imagenet_ids_named("digital_clock")[0]] == 112
    with pytest.raises(ConfigError, match="113 ObjectNet class names"):
        objectnet_view(class_names=names[:-1] + ["Not a class"])


# --- superclasses (video) -----------------------------------------------------------------------

def test_superclass_score_is_the_max_over_members_not_the_sum():
    view = SuperclassView("toy", {0: 0, 1: 0, 2: 0, 3: 1}, 2)
    x = np.array([[1.0, 1.0, 1.0, 2.0]])  # sum would pick superclass 0 (3.0); max picks 1 (2.0)
    cols = view.apply(x, [1])
    assert cols["pred"].tolist() == [1] and cols["correct"].tolist() == [True]
    np.testing.assert_allclose(cols["confidence"], [softmax([1.0, 2.0])[1]], rtol=1e-6)
    np.testing.assert_allclose(view.scores(x), [[1.0, 2.0]])
    assert SuperclassView("toy", {0: 0, 1: 0, 2: 0, 3: 1}, 2, merge="sum").apply(x, [1])["pred"].tolist() == [0]


def test_superclass_multi_label_targets_and_memberless_superclasses():
    view = SuperclassView("toy", {0: 0, 1: 0, 2: 2}, 3)  # superclass 1 has no members
    x = np.array([[5.0, 0.0, 1.0], [0.0, 0.0, 4.0]])
    cols = view.apply(x, [(1, 0), (1,)])
    assert cols["correct"].tolist() == [True, False]
    assert cols["top5"].tolist() == [[0, 2, 1, -1, -1], [2, 0, 1, -1, -1]]
    assert cols["p_true"].tolist() == [0.0, 0.0]  # first label has no members: probability 0
    np.testing.assert_allclose(cols["p_sq_sum"], [(softmax([5.0, 1.0]) ** 2).sum(), (softmax([0.0, 4.0]) ** 2).sum()],
                               rtol=1e-6)


def test_video_views_project_imagenet_classes_onto_their_superclasses():
    golden = imagenet_ids_named("golden_retriever")[0]
    x = np.zeros((1, 1000), dtype=np.float32)
    x[0, golden] = 10.0
    vid = video_view("imagenet-vid-robust")
    raw = json.loads((CLASSMAPS / "imagenet-vid-robust__class_idx_map.json").read_text())
    assert vid.num_super == 30 and vid.apply(x, [(raw[str(golden)],)])["correct"].tolist() == [True]
    ytbb = video_view("ytbb-robust")
    assert ytbb.num_super == 24 and ytbb.apply(x, [(3, ytbb.target_names.index("dog"))])["correct"].tolist() == [True]
    val = video_view("imagenet-vid-robust", targets_in_source_space=True)
    assert val.keep([golden, 999]).tolist() == [True, False]
    assert val.apply(x, [golden])["correct"].tolist() == [True]
    with pytest.raises(ConfigError, match="did you mean 'ytbb-robust'"):
        video_view("ytbb")


# --- pm-k ---------------------------------------------------------------------------------------

def test_pm_k_requires_every_neighbour_within_k_correct():
    correct = np.array([True, True, True, True, False])  # anchor, -1, +1, +2 right; +3 wrong
    groups, offsets = [9] * 5, [0, -1, 1, 2, 3]
    assert pm_k(correct, groups, offsets, 2) == (100.0, 1)
    assert pm_k(correct, groups, offsets, 3) == (0.0, 1)


def test_pm_0_is_anchor_accuracy():
    correct = np.array([True, False, False, True, False, True])
    groups = ["a", "a", "b", "b", "c", "c"]
    offsets = [0, 1, 0, -1, 0, 1]
    assert pm_k(correct, groups, offsets, 0) == (pytest.approx(100 / 3), 3)
    assert pm_k(correct, groups, offsets, 1) == (0.0, 3)


def test_pm_k_with_frames_shared_between_groups():
    # frames 0..5 of one video; anchors 1 and 4; frame 3 (wrong) is +2 from one, -1 from the other
    correct = np.array([True, True, True, False, True, True])
    args = dict(anchors=[1, 4], members=[[0, 2, 3], [2, 3, 5]], member_offsets=[[-1, 1, 2], [-2, -1, 1]])
    assert pm_k(correct, k=0, **args) == (100.0, 2)
    assert pm_k(correct, k=1, **args) == (50.0, 2)  # anchor 4 spoiled by its -1 neighbour
    assert pm_k(correct, k=2, **args) == (0.0, 2)


def test_pm_k_rejects_groups_without_exactly_one_anchor():
    with pytest.raises(DataError, match="group 'x' has 0 frames at offset 0"):
        pm_k([True, True], ["x", "x"], [1, 2], 1)


def _vid_robust_pmsets():
    pmsets = json.loads((CLASSMAPS / "imagenet-vid-robust__pmsets.json").read_text())
    frames = sorted({f for a, ms in pmsets.items() for f in [a, *ms]})
    index = {f: i for i, f in enumerate(frames)}
    number = lambda f: int(f.rsplit("/", 1)[1].split(".")[0])  # noqa: E731
    anchors = [index[a] for a in pmsets]
    members = [[index[m] for m in ms] for ms in pmsets.values()]
    offsets = [[number(m) - number(a) for m in ms] for a, ms in pmsets.items()]
    return len(frames), anchors, members, offsets


def test_pm_k_on_the_real_pm_sets_matches_a_loop():
    n, anchors, members, offsets = _vid_robust_pmsets()
    assert len(anchors) == 1109 and n > 20_000
    correct = np.random.default_rng(5).random(n) < 0.97
    for k in (0, 4, 10):
        expected = np.mean([correct[a] and all(correct[m] for m, o in zip(ms, os) if abs(o) <= k)
                            for a, ms, os in zip(anchors, members, offsets)]) * 100
        got, n_anchors = pm_k(correct, k=k, anchors=anchors, members=members, member_offsets=offsets)
        assert n_anchors == 1109 and got == pytest.approx(expected)
    # the per-frame form agrees when every frame belongs to one group
    group = np.repeat(np.arange(1109), [len(m) + 1 for m in members])
    frame = np.concatenate([[a, *m] for a, m in zip(anchors, members)])
    off = np.concatenate([[0, *o] for o in offsets])
    assert pm_k(correct[frame], group, off, 10) == pm_k(correct, k=10, anchors=anchors, members=members,
                                                        member_offsets=offsets)


# --- calibration --------------------------------------------------------------------------------

def _ece_loop(conf, correct, n_bins=15):
    total, n = 0.0, len(conf)
    for b in range(n_bins):
        lo, hi = b / n_bins, (b + 1) / n_bins
        members = [i for i in range(n) if (lo < conf[i] <= hi) or (b == 0 and conf[i] == 0)]
        if members:
            acc = sum(correct[i] for i in members) / len(members)
            avg = sum(conf[i] for i in members) / len(members)
            total += len(members) / n * abs(acc - avg)
    return 100 * total


def test_calibration_matches_a_straightforward_loop_and_full_probability_vectors():
    rng = np.random.default_rng(6)
    x = rng.normal(size=(500, 10)) * 2
    t = rng.integers(0, 10, 500)
    cols = FullView().apply(x, t)
    got = calibration(cols["confidence"], cols["correct"], cols["p_true"], cols["p_sq_sum"])
    p = softmax(x)
    y = np.eye(10)[t]
    assert got["n"] == 500
    assert got["ece"] == pytest.approx(_ece_loop(list(cols["confidence"].astype(float)), list(cols["correct"])),
                                       abs=1e-9)
    assert got["nll"] == pytest.approx(np.mean(-np.log(p[np.arange(500), t])), rel=1e-5)
    assert got["brier"] == pytest.approx(np.mean(((p - y) ** 2).sum(1)), rel=1e-5)


def test_brier_of_mapped_and_superclass_views_uses_their_full_probability_vectors():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(50, 6)) * 2
    t = rng.integers(0, 3, 50)
    cols = MappedView("toy", TOY_MAP, 3).apply(x, t)
    p = softmax(x[:, [0, 1, 3, 4]])
    agg = np.stack([p[:, 0] + p[:, 1], p[:, 2], p[:, 3]], axis=1)
    brier = calibration(cols["confidence"], cols["correct"], cols["p_true"], cols["p_sq_sum"])["brier"]
    assert brier == pytest.approx(np.mean(((agg - np.eye(3)[t]) ** 2).sum(1)), rel=1e-5)
    cols = SuperclassView("toy", TOY_MAP, 3).apply(x, t)
    s = softmax(np.stack([x[:, :2].max(1), x[:, 3], x[:, 4]], axis=1))
    brier = calibration(cols["confidence"], cols["correct"], cols["p_true"], cols["p_sq_sum"])["brier"]
    assert brier == pytest.approx(np.mean(((s - np.eye(3)[t]) ** 2).sum(1)), rel=1e-5)


def test_ece_is_zero_when_perfectly_calibrated():
    conf = [0.8] * 10 + [0.4] * 5
    correct = [True] * 8 + [False] * 2 + [True] * 2 + [False] * 3
    got = calibration(conf, correct, p_true=[0.5] * 15, p_sq_sum=[0.5] * 15)
    assert got["ece"] == pytest.approx(0.0, abs=1e-9)
    assert got["nll"] == pytest.approx(np.log(2)) and got["brier"] == pytest.approx(0.5)


def test_ece_puts_boundary_confidences_in_the_lower_bin():
    # 1/15 sits on the first edge: bin ((0, 1/15]); with 2/15 it would be a separate bin
    got = calibration([1 / 15, 0.0], [True, False], [1, 1], [1, 1])
    assert got["ece"] == pytest.approx(100 * abs(0.5 - 1 / 30))


def test_nll_clips_zero_probability_and_accuracy_helpers_take_columns():
    assert calibration([0.5], [False], [0.0], [0.5])["nll"] == pytest.approx(-np.log(1e-12))
    cols = FullView().apply(np.array([[0.0, 1.0], [1.0, 0.0]]), [1, 1])
    assert top1(cols) == 50.0 and top1(cols["correct"]) == 50.0 and top5(cols) == 100.0
    with pytest.raises(DataError, match="no examples"):
        top1([])


# --- values, speed, docs ------------------------------------------------------------------------

def test_views_are_values_hashable_and_picklable():
    assert objectnet_view() == objectnet_view() and hash(objectnet_view()) == hash(objectnet_view())
    assert objectnet_view() != objectnet_view("argmax-all")
    assert SubsetView("s", [1, 2]) != SubsetView("s", [1, 3])
    view = video_view("ytbb-robust")
    assert pickle.loads(pickle.dumps(view)) == view
    assert "convention='superclass-max'" in repr(view)


# speed of View.apply and pm_k: bench/views.py (timings vary with load; the suite asserts none)


@pytest.mark.parametrize("module", ["shiftbench.views", "shiftbench.views.full", "shiftbench.views.subset",
                                    "shiftbench.views.mapped", "shiftbench.views.superclass",
                                    "shiftbench.views.pmk", "shiftbench.views.metrics"])
def test_docstring_examples_run(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
