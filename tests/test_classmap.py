"""Zero-shot evaluation through class maps: max-logit pooling, map files, the shipped
ImageNet -> CIFAR-10 map, the ``@classmap:`` setting spelling and the engine end to end."""
from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from shiftbench.datasets import classmaps as cm
from shiftbench.datasets.arrays import CIFAR10_CLASSES
from shiftbench.errors import ConfigError, DataError
from shiftbench.settings import get_setting, list_settings
from shiftbench.views import ClassMapSpec, ClassMapView, read_class_map, resolve_class_map
from shiftbench.views.classmap import class_map_path

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
from oracle_models import colour_of  # noqa: E402

IMAGENET = list(cm.imagenet_names())     # 'tabby', 'Egyptian_cat', 'golden_retriever', two 'crane'
TABBY, EGYPTIAN_CAT, GOLDEN, COUGAR = 281, 285, 207, 286


# ---------------------------------------------------------------------------- pooling, by hand
def test_overlapping_sources_pool_by_max_and_softmax_is_over_pooled_scores():
    # target 0 <- sources {0, 1}; target 1 <- sources {1, 2, 3}: source 1 feeds both
    view = ClassMapView("toy", {0: [0, 1], 1: [1, 2, 3]}, num_source=4)
    logits = np.array([[1.0, 5.0, 2.0, 0.0],     # s = [5, 5]: a tie, the lower target id wins
                       [3.0, 1.0, 2.0, 4.0]])    # s = [3, 4]
    np.testing.assert_array_equal(view.scores(logits), [[5.0, 5.0], [3.0, 4.0]])
    cols = view.apply(logits, [1, 0])
    assert cols["pred"].tolist() == [0, 1]
    assert cols["correct"].tolist() == [False, False]
    assert cols["top5"].tolist() == [[0, 1, -1, -1, -1], [1, 0, -1, -1, -1]]
    assert cols["correct5"].tolist() == [True, True]
    # row 1: softmax([3, 4]) = [1/(1+e), e/(1+e)] = [0.268941, 0.731059]
    p0, p1 = 1 / (1 + math.e), math.e / (1 + math.e)
    assert cols["confidence"][1] == pytest.approx(p1, abs=1e-6)
    assert cols["p_true"][1] == pytest.approx(p0, abs=1e-6)
    assert cols["p_sq_sum"][1] == pytest.approx(p0 ** 2 + p1 ** 2, abs=1e-6)      # 0.606776
    assert cols["confidence"][0] == pytest.approx(0.5) and cols["p_true"][0] == pytest.approx(0.5)


def test_many_to_many_map_lets_one_source_win_several_targets_and_multilabel_targets_count():
    # 3 targets; source 2 feeds targets 0 and 2, source 0 feeds targets 1 and 2
    view = ClassMapView("m2m", {0: [2, 3], 1: [0], 2: [0, 2]}, num_source=4)
    assert view.target_to_sources == {0: [2, 3], 1: [0], 2: [0, 2]}
    logits = np.array([[0.0, 9.0, 7.0, 1.0],     # unmapped source 1 is ignored: s = [7, 0, 7]
                       [6.0, 0.0, 1.0, 2.0]])    # s = [2, 6, 6]
    s = view.scores(logits)
    np.testing.assert_array_equal(s, [[7.0, 0.0, 7.0], [2.0, 6.0, 6.0]])
    cols = view.apply(logits, [(2, 1), (2,)])    # row 0 accepts 2 or 1 (multi-label)
    assert cols["pred"].tolist() == [0, 1]       # ties go to the lower target id
    assert cols["correct"].tolist() == [False, False]
    assert cols["top5"][:, :3].tolist() == [[0, 2, 1], [1, 2, 0]]
    assert cols["correct5"].tolist() == [True, True]
    # row 0: softmax([7, 0, 7]) = [a, b, a] with b = 1/(1 + 2 e^7), a = (1 - b)/2
    b = 1 / (1 + 2 * math.exp(7))
    a = (1 - b) / 2
    assert cols["p_sq_sum"][0] == pytest.approx(2 * a * a + b * b, abs=1e-6)
    assert cols["p_true"][0] == pytest.approx(a, abs=1e-6)      # first label of (2, 1)


def test_views_from_the_same_map_are_equal_and_keep_drops_targets_outside_the_space():
    a = ClassMapView("v", {0: [1], 1: [0, 2]}, num_source=3)
    b = ClassMapView("v", {1: [2, 0, 0], 0: [1]}, num_source=3)
    assert a == b and hash(a) == hash(b)
    assert a != ClassMapView("v", {0: [1], 1: [0]}, num_source=3)
    assert a.keep([0, 1, 5]).tolist() == [True, True, False]


def test_a_target_without_any_source_is_an_error_at_construction():
    with pytest.raises(ConfigError, match=r"1 of 3 target classes have no source class: 'b'"):
        ClassMapView("v", {0: [0], 2: [1]}, num_target=3, num_source=2, target_names=["a", "b", "c"])


def test_source_ids_outside_the_model_and_logits_of_the_wrong_width_are_errors():
    with pytest.raises(ConfigError, match=r"source id 5 outside 0\.\.3 \(the model's 4 classes\)"):
        ClassMapView("v", {0: [5]}, num_source=4)
    view = ClassMapView("v", {0: [0], 1: [1]}, num_source=4)
    with pytest.raises(DataError, match=r"over 4 source classes but the logits have 3"):
        view.apply(np.zeros((1, 3)), [0])
    with pytest.raises(ConfigError, match="non-empty dict"):
        ClassMapView("v", {})


# ---------------------------------------------------------------------------- map files
def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_csv_and_json_maps_give_the_same_view_with_names_ids_and_loose_spelling(tmp_path):
    src = ["tench", "great white shark", "tabby", "tiger cat"]
    tgt = ["fish", "cat"]
    c = write(tmp_path / "m.csv", "# a comment\nsource,target,note\ntench,fish,x\ngreat_white_shark,fish,\n"
                                  "2,cat,\nTiger Cat,1,\n")
    j = write(tmp_path / "m.json", json.dumps({"fish": ["tench", "Great White Shark"], "cat": [2, "tiger_cat"]}))
    vc = ClassMapView.from_file(c, src, tgt)
    vj = ClassMapView.from_file(j, src, tgt)
    assert vc.target_to_sources == vj.target_to_sources == {0: [0, 1], 1: [2, 3]}
    assert vc.target_names == ("fish", "cat") and vc.num_source == 4
    assert vc.name.startswith("classmap:m@")     # the file's digest keys the results


def test_a_class_name_wins_over_an_integer_id_with_the_same_spelling(tmp_path):
    # folder datasets with numbered class folders: '10' is the folder '10' (index 2), not id 10
    targets = ["0", "1", "10", "2"]
    f = write(tmp_path / "m.csv", "source,target\na,10\nb,0\nc,1\nd,3\n")
    view = ClassMapView.from_file(f, ["a", "b", "c", "d"], targets)
    assert view.target_to_sources == {0: [1], 1: [2], 2: [0], 3: [3]}


def test_unknown_source_names_are_one_error_naming_the_file_the_names_the_count_and_a_suggestion(tmp_path):
    rows = "".join(f"{s},cat\n" for s in ["tabby", "taby", "zzz1", "zzz2", "zzz3", "zzz4", "zzz5"])
    f = write(tmp_path / "bad.csv", "source,target\n" + rows)
    with pytest.raises(ConfigError) as err:
        ClassMapView.from_file(f, IMAGENET, ["cat"])
    msg = str(err.value)
    assert "\n" not in msg
    assert str(f) in msg and "6 unknown source classes" in msg
    assert "'taby' (did you mean 'tabby'?)" in msg and "and 1 more" in msg and "'zzz5'" not in msg
    assert "ids 0..999" in msg


def test_unknown_target_names_name_the_dataset_side(tmp_path):
    f = write(tmp_path / "m.csv", "source,target\ntabby,kat\ngolden_retriever,dog\n")
    with pytest.raises(ConfigError, match=r"m\.csv: 1 unknown target class: 'kat' \(did you mean 'cat'\?\); "
                                          r"use the dataset's class names or ids 0\.\.9"):
        ClassMapView.from_file(f, IMAGENET, list(CIFAR10_CLASSES))


def test_unknown_names_on_both_sides_are_reported_together_in_one_line(tmp_path):
    f = write(tmp_path / "m.csv", "source,target\ntabby,cat\nsprots car,automobile\ngolden retriever,dogg\n")
    with pytest.raises(ConfigError) as err:
        ClassMapView.from_file(f, IMAGENET, list(CIFAR10_CLASSES))
    assert str(err.value) == (
        f"class map {f}: 1 unknown source class: 'sprots car' (did you mean 'sports_car'?); use the model's "
        "class names or ids 0..999; 1 unknown target class: 'dogg' (did you mean 'dog'?); use the dataset's "
        "class names or ids 0..9")


def test_dataset_classes_the_map_never_feeds_are_named(tmp_path):
    f = write(tmp_path / "m.csv", "source,target\ntabby,cat\n")
    with pytest.raises(ConfigError, match=r"m\.csv: 9 of 10 target classes have no source class: 'airplane', "
                                          r"'automobile', 'bird', 'deer', 'dog' and 4 more"):
        ClassMapView.from_file(f, IMAGENET, list(CIFAR10_CLASSES))


def test_an_ambiguous_name_asks_for_the_integer_id(tmp_path):
    f = write(tmp_path / "m.json", json.dumps({"bird": ["crane"]}))
    with pytest.raises(ConfigError, match=r"source class 'crane' names 2 of the model's classes \(ids 134, 517\); "
                                          r"write the integer id"):
        ClassMapView.from_file(f, IMAGENET, ["bird"])


def test_a_model_without_class_names_takes_ids_only(tmp_path):
    f = write(tmp_path / "m.csv", "source,target\n3,a\ntabby,b\n")
    with pytest.raises(ConfigError, match=r"unknown source class: 'tabby'; the model's classes have no names: "
                                          r"use ids 0\.\.9"):
        ClassMapView.from_file(f, 10, ["a", "b"])
    assert resolve_class_map([("3", "a"), (4, "b")], 10, ["a", "b"]) == {0: [3], 1: [4]}


@pytest.mark.parametrize("name, text, match", [
    ("m.csv", "", r"m\.csv is empty"),
    ("m.csv", "from,to\na,b\n", r"the header must name 'source' and 'target' columns, got 'from,to'"),
    ("m.csv", "source,target\na,\n", r"m\.csv, line 2: needs a source and a target"),
    ("m.csv", "source,target\n", r"m\.csv lists no \(source, target\) pair"),
    ("m.json", "[1, 2]", r"expected an object \{target: \[sources, \.\.\.\]\}, got list"),
    ("m.json", "{\"a\": [1.5]}", r"target 'a' lists 1\.5; sources must be names or integer ids"),
    ("m.json", "{\"a\": []}", r"target 'a' has an empty source list"),
    ("m.json", "{oops", r"m\.json: invalid JSON"),
    ("m.txt", "a b", r"unknown format '\.txt'; use \.csv"),
])
def test_malformed_map_files_are_one_line_errors_naming_the_file(tmp_path, name, text, match):
    f = write(tmp_path / name, text)
    with pytest.raises(ConfigError, match=match):
        read_class_map(f)


def test_map_references_resolve_to_shipped_names_or_existing_files(tmp_path):
    assert class_map_path("imagenet-to-cifar10").name == "imagenet_to_cifar10.csv"
    with pytest.raises(ConfigError, match=r"unknown class map 'imagenet-to-cifar'; did you mean 'imagenet-to-cifar10'"):
        class_map_path("imagenet-to-cifar")
    with pytest.raises(ConfigError, match=r"class map file .*nope\.csv not found"):
        class_map_path(tmp_path / "nope.csv")


# ---------------------------------------------------------------------------- the shipped map
def shipped_rows() -> list[tuple[int, str]]:
    text = class_map_path("imagenet-to-cifar10").read_text()
    return [(int(r["source"]), r["target"]) for r in csv.DictReader(l for l in text.splitlines() if not l.startswith("#"))]


def test_shipped_cifar10_map_follows_its_documented_rule():
    vid = json.loads((cm.CLASSMAP_DIR / "imagenet-vid-robust__class_idx_map.json").read_text())
    from_vid = {"airplane": "airplane", "automobile": "car", "bird": "bird", "cat": "domestic_cat",
                "deer": "antelope", "dog": "dog", "horse": "horse", "ship": "watercraft"}
    extra = {"airplane": {895, 908}, "frog": {30, 31, 32}, "truck": {555, 569, 675, 864, 867}}
    expected = {(int(k), c) for c, v in from_vid.items() for k, i in vid.items() if cm.VID_CLASS_NAMES[i] == v}
    expected |= {(i, c) for c, ids in extra.items() for i in ids}
    rows = shipped_rows()
    assert len(rows) == len(set(rows)) == 222 and set(rows) == expected
    per = {c: sorted(i for i, t in rows if t == c) for c in CIFAR10_CLASSES}
    assert per["dog"] == list(range(151, 269)) and per["cat"] == list(range(281, 286))
    assert len(per["bird"]) == 59 and per["frog"] == [30, 31, 32] and per["deer"] == [351, 352, 353]
    assert 717 not in per["truck"] and 726 not in per["airplane"]     # pickup, carpenter's plane
    names = {i: IMAGENET[i] for i, _ in rows}
    assert {names[i] for i in per["automobile"]} >= {"sports_car", "convertible", "cab"}


def test_shipped_map_readable_columns_agree_with_the_imagenet_index():
    text = class_map_path("imagenet-to-cifar10").read_text()
    for r in csv.DictReader(l for l in text.splitlines() if not l.startswith("#")):
        assert (r["wnid"], r["imagenet_name"]) == cm.imagenet_classes()[int(r["source"])]


def test_shipped_map_binds_to_torchvision_names_and_to_a_nameless_imagenet_model():
    from types import SimpleNamespace

    from shiftbench.models.builtin import imagenet_class_names

    ds = SimpleNamespace(class_names=list(CIFAR10_CLASSES), num_classes=10, name="cifar10")
    named = SimpleNamespace(class_names=imagenet_class_names(), num_classes=1000, label_space="imagenet-1k")
    nameless = SimpleNamespace(class_names=None, num_classes=1000, label_space="imagenet-1k")
    a = ClassMapSpec("imagenet-to-cifar10").bind(named, ds)
    b = ClassMapSpec("imagenet-to-cifar10").bind(nameless, ds)
    assert a == b and a.num_target == 10 and a.source_width == 1000
    assert a.name.startswith("classmap:imagenet-to-cifar10@")


# ---------------------------------------------------------------------------- settings
def test_classmap_settings_are_spelled_on_any_full_space_setting_and_combine_with_shifts(tmp_path):
    assert "cifar10@classmap:imagenet-to-cifar10" in list_settings()
    s = get_setting("cifar10@classmap:imagenet-to-cifar10")
    assert s.dataset == "cifar10" and isinstance(s.view("restricted"), ClassMapSpec)
    f = write(tmp_path / "m.csv", "source,target\ntabby,cat\n")
    custom = get_setting(f"folder:{tmp_path}/imgs@classmap:{f}")
    assert custom.dataset == "folder" and dict(custom.dataset_args) == {"path": f"{tmp_path}/imgs"}
    assert custom.view("restricted").ref == str(f)
    for name in ("cifar10@classmap:imagenet-to-cifar10+fog.3", "cifar10+fog.3@classmap:imagenet-to-cifar10"):
        s = get_setting(name)
        assert s.shift == ("fog", 3) and isinstance(s.view("restricted"), ClassMapSpec), name


def test_classmap_setting_errors_come_before_any_model_runs(tmp_path):
    with pytest.raises(ConfigError, match=r"class map file .*missing\.csv not found"):
        get_setting(f"cifar10@classmap:{tmp_path}/missing.csv")
    bad = write(tmp_path / "bad.csv", "a,b\n1,2\n")
    with pytest.raises(ConfigError, match=r"bad\.csv: the header must name 'source' and 'target'"):
        get_setting(f"folder:{tmp_path}@classmap:{bad}")
    with pytest.raises(ConfigError, match=r"'imagenet-a' is scored through its own view"):
        get_setting("imagenet-a@classmap:imagenet-to-cifar10")
    with pytest.raises(ConfigError, match=r"unknown setting 'cifar11'"):
        get_setting("cifar11@classmap:imagenet-to-cifar10")


# ---------------------------------------------------------------------------- engine end to end
def folder(root: Path, images: dict[str, list[int]]) -> Path:
    """``root/<class>/<i>.png``, each image coloured so the oracle predicts the given ImageNet class."""
    for cls, imagenet_ids in images.items():
        (root / cls).mkdir(parents=True, exist_ok=True)
        for i, k in enumerate(imagenet_ids):
            Image.new("RGB", (20, 20), colour_of(k)).save(root / cls / f"{i}.png")
    return root


def evaluate(settings, store: Path, model: str = "python:oracle_models:oracle"):
    from shiftbench import evaluate as ev

    return ev(model, settings, store=store, workers=0, batch_size=2, progress=False).set_index("setting")


def test_engine_scores_a_folder_in_the_target_space_through_a_user_map(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    data = folder(tmp_path / "imgs", {"cat": [TABBY, EGYPTIAN_CAT], "dog": [GOLDEN, EGYPTIAN_CAT]})
    m = write(tmp_path / "m.csv", "source,target\ntabby,cat\nEgyptian cat,cat\ngolden retriever,dog\n")
    name = f"folder:{data}@classmap:{m}"
    res = evaluate([name], tmp_path / "store")
    # the oracle's logits: 5 at its class, 2 at class+1 (unmapped here), -5 elsewhere.
    # cat/0 tabby -> cat, cat/1 Egyptian cat -> cat, dog/0 golden -> dog, dog/1 Egyptian cat -> cat (wrong)
    assert res.loc[name, "accuracy"] == 75.0 and res.loc[name, "top5"] == 100.0
    assert res.loc[name, "n_examples"] == 4
    # each row's pooled scores are [5, -5] or [-5, 5]: confidence = p_true (right) = 1/(1+e^-10)
    sure = 1 / (1 + math.exp(-10))
    assert res.loc[name, "nll"] == pytest.approx((3 * -math.log(sure) - math.log(1 - sure)) / 4, rel=1e-4)

    # editing the map changes the view's key: the result is recomputed, not reused
    # (now right: cat/0 tabby -> cat and dog/1 Egyptian cat -> dog; wrong: the other two)
    write(m, "source,target\ntabby,cat\nEgyptian cat,dog\ngolden retriever,cat\n")
    assert evaluate([name], tmp_path / "store").loc[name, "accuracy"] == 50.0


def test_a_second_map_over_kept_logits_needs_no_forward_pass(tmp_path, monkeypatch):
    from shiftbench import evaluate as ev

    monkeypatch.syspath_prepend(str(FIXTURES))
    from oracle_models import Oracle

    data = folder(tmp_path / "imgs", {"cat": [TABBY, COUGAR], "dog": [GOLDEN]})
    a = write(tmp_path / "a.csv", "source,target\ntabby,cat\ngolden_retriever,dog\n")
    b = write(tmp_path / "b.json", json.dumps({"cat": ["tabby", "cougar"], "dog": ["golden_retriever"]}))
    kw = dict(store=tmp_path / "store", workers=0, batch_size=2, progress=False, keep_logits=True)
    Oracle.seen = 0
    ra = ev("python:oracle_models:oracle", [f"folder:{data}@classmap:{a}"], **kw)
    assert Oracle.seen == 3
    rb = ev("python:oracle_models:oracle", [f"folder:{data}@classmap:{b}"], **kw)
    assert Oracle.seen == 3                       # b was scored from the stored logits
    # the cougar image: under a its pooled scores tie at -5 (cat wins the tie), under b it is a cat
    assert ra.iloc[0]["accuracy"] == 100.0 and rb.iloc[0]["accuracy"] == 100.0
    assert ra.iloc[0]["nll"] > rb.iloc[0]["nll"]


def test_engine_refuses_a_class_map_and_the_datasets_own_space_in_one_pass(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    data = folder(tmp_path / "imgs", {"cat": [TABBY], "dog": [GOLDEN]})
    m = write(tmp_path / "m.csv", "source,target\ntabby,cat\ngolden_retriever,dog\n")
    with pytest.raises(ConfigError, match=r"need \[2, 1000\] model outputs at once"):
        evaluate([f"folder:{data}", f"folder:{data}@classmap:{m}"], tmp_path / "store")


def test_engine_names_the_map_and_the_dataset_classes_it_misses(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    data = folder(tmp_path / "imgs", {"cat": [TABBY], "horse": [GOLDEN]})
    m = write(tmp_path / "m.csv", "source,target\ntabby,cat\n")
    with pytest.raises(ConfigError, match=r"m\.csv: 1 of 2 target classes have no source class: 'horse'"):
        evaluate([f"folder:{data}@classmap:{m}"], tmp_path / "store")


@pytest.mark.slow
def test_real_efficientnet_lite0_sees_the_cat_photo_as_a_cifar10_cat(tmp_path):
    from skimage import data as skdata

    root = tmp_path / "photos"
    for c in CIFAR10_CLASSES:                    # CIFAR-10's label space: one folder per class
        (root / c).mkdir(parents=True)
    Image.fromarray(skdata.chelsea()).save(root / "cat" / "chelsea.jpg", quality=95)
    name = f"folder:{root}@classmap:imagenet-to-cifar10"
    res = evaluate([name], tmp_path / "store", model="efficientnet-lite0")
    assert res.loc[name, "accuracy"] == 100.0 and res.loc[name, "n_examples"] == 1

    from shiftbench.store import Store

    st = Store(tmp_path / "store")
    row = st.read_predictions(st.results()["key"].iloc[0]).iloc[0]
    assert CIFAR10_CLASSES[row["pred"]] == "cat" and row["confidence"] > 0.9


def test_docstring_examples_of_the_classmap_module_run():
    import doctest

    import shiftbench.views.classmap as mod

    result = doctest.testmod(mod)
    assert result.attempted >= 4 and result.failed == 0
