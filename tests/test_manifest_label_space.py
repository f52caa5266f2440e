"""A manifest's declared label space: sidecar ``<manifest>.classes.txt/.json`` or ``classes=``.

The end-to-end case is the reason it exists: a manifest of three ImageNet classes (labelled by
wnid, name and index) scored through ``shiftbench.evaluate`` by a 1000-logit model.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from shiftbench.datasets import load_dataset
from shiftbench.datasets import manifest as read_manifest
from shiftbench.datasets.manifest import (
    LabelSpace,
    known_label_space,
    label_space_of,
    read_classes_file,
    sidecar_of,
    write_label_space,
)
from shiftbench.errors import ConfigError, DataError, ModelError

from oracle_models import colour_of  # tests/fixtures, on sys.path via conftest.py


#: (image file, ImageNet class the image shows, label written in the manifest)
ROWS = [
    ("img/tench.png", 0, "n01440764"),        # wnid of 0
    ("img/goldfish.png", 1, "goldfish"),      # name of 1
    ("img/balloon.png", 417, "417"),          # index, as text in a column of names
    ("img/wrong.png", 0, "goldfish"),         # shows a tench, labelled goldfish: top-1 wrong, top-5 right
]


def _tree(tmp_path: Path, rows=ROWS) -> Path:
    for p, shown, _ in rows:
        (tmp_path / p).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (16, 16), colour_of(shown)).save(tmp_path / p)
    path = tmp_path / "v2.csv"
    pd.DataFrame({"path": [r[0] for r in rows], "label": [r[2] for r in rows]}).to_csv(path, index=False)
    return path


# --------------------------------------------------------------------------- end to end
def test_imagenet_sidecar_scores_a_1000_logit_model_exactly(tmp_path, monkeypatch):
    from shiftbench.engine import evaluate

    mf = _tree(tmp_path)
    (tmp_path / "v2.csv.classes.json").write_text(json.dumps({"label_space": "imagenet-1k"}))
    ds = read_manifest(mf)
    assert ds.targets == [0, 1, 417, 1] and ds.num_classes == 1000 and ds.label_space == "imagenet-1k"
    assert ds.class_names[417] == "balloon"
    res = evaluate("python:oracle_models:oracle", [f"manifest:{mf}"], store=tmp_path / "store",
                   workers=0, batch_size=8, progress=False).iloc[0]
    # the oracle puts 5 on the shown class and 2 on the next: the tench labelled goldfish is
    # wrong at top-1 and right at top-5 (goldfish = tench + 1)
    assert res["accuracy"] == pytest.approx(75.0) and res["top5"] == pytest.approx(100.0)
    assert res["n_examples"] == 4


def test_without_a_sidecar_names_are_sorted_and_a_1000_logit_model_is_refused(tmp_path, monkeypatch):
    from shiftbench.engine import evaluate

    mf = _tree(tmp_path)
    ds = read_manifest(mf)
    assert ds.class_names == ["417", "goldfish", "n01440764"] and ds.targets == [2, 1, 0, 1]
    assert ds.num_classes == 3 and ds.label_space == "custom:v2"
    with pytest.raises(ModelError, match="outputs 1000 logits per example but the dataset has 3 classes"):
        evaluate("python:oracle_models:oracle", [f"manifest:{mf}"], store=tmp_path / "store",
                 workers=0, batch_size=8, progress=False)


def test_integer_labels_without_a_sidecar_still_give_max_plus_one_classes(tmp_path):
    rows = [("a.png", 3, 3), ("b.png", 5, 5)]
    mf = _tree(tmp_path, rows)
    pd.DataFrame({"path": ["a.png", "b.png"], "label": [3, 5]}).to_csv(mf, index=False)
    ds = read_manifest(mf)
    assert ds.targets == [3, 5] and ds.num_classes == 6 and ds.class_names is None
    (tmp_path / "v2.csv.classes.json").write_text('{"label_space": "imagenet-1k"}')
    assert read_manifest(mf).num_classes == 1000


# --------------------------------------------------------------------------- label lookup
def test_imagenet_labels_may_be_index_wnid_or_name_in_any_case():
    space = known_label_space("imagenet-1k")
    assert [space.index(x) for x in (0, "0", "n01443537", "goldfish", "Great white-shark", " balloon ")] \
        == [0, 0, 1, 1, 2, 417]


def test_ambiguous_imagenet_name_asks_for_the_wnid():
    with pytest.raises(DataError, match=r"'crane' is ambiguous in imagenet-1k \(n02012849 = 134, n03126707 = 517\); "
                                        "use the wnid"):
        known_label_space("imagenet-1k").index("crane")


def test_unknown_label_names_the_manifest_line_label_and_closest_classes(tmp_path):
    rows = [*ROWS[:2], ("img/x.png", 1, "goldfsh")]
    mf = _tree(tmp_path, rows)
    (tmp_path / "v2.csv.classes.json").write_text('{"label_space": "imagenet-1k"}')
    with pytest.raises(DataError) as err:
        read_manifest(mf)
    msg = str(err.value)
    assert msg.startswith(f"manifest {mf} line 4: label 'goldfsh' is not a class of imagenet-1k; "
                          "did you mean 'goldfish'")
    assert "\n" not in msg


def test_out_of_range_index_is_an_error(tmp_path):
    mf = _tree(tmp_path, [("a.png", 0, 0)])
    pd.DataFrame({"path": ["a.png"], "label": [3]}).to_csv(mf, index=False)
    (tmp_path / "v2.csv.classes.txt").write_text("a\nb\nc\n")
    with pytest.raises(DataError, match=r"line 2: label 3 is outside 0\.\.2 of the 3 classes of .*v2.csv.classes.txt"):
        read_manifest(mf)


# --------------------------------------------------------------------------- sidecars and classes=
def test_txt_sidecar_indexes_names_by_line(tmp_path):
    mf = _tree(tmp_path)
    (tmp_path / "v2.csv.classes.txt").write_text("n01440764\ngoldfish\nshark\n\n")
    labels = ["n01440764", "goldfish", "2", "Shark"]
    pd.DataFrame({"path": [r[0] for r in ROWS], "label": labels}).to_csv(mf, index=False)
    ds = read_manifest(mf)
    assert ds.targets == [0, 1, 2, 2] and ds.num_classes == 3 and ds.class_names == ["n01440764", "goldfish", "shark"]
    assert ds.label_space == "custom:v2"


def test_classes_argument_equals_the_sidecar_and_reaches_load_dataset(tmp_path):
    mf = _tree(tmp_path)
    assert read_manifest(mf, classes="imagenet-1k").targets == [0, 1, 417, 1]
    ds = load_dataset("manifest", path=mf, classes="imagenet-1k")
    assert ds.num_classes == 1000
    names = ["n01440764", "goldfish", "417"]   # a list: "417" is now a name, index 2
    assert read_manifest(mf, classes=names).targets == [0, 1, 2, 1]
    write_label_space(mf, "imagenet-1k")
    assert read_manifest(mf, classes="imagenet-1k").num_classes == 1000     # agrees with the sidecar
    with pytest.raises(DataError, match=r"classes= \(the 3 classes of the classes= list\) disagrees with its sidecar "
                                        r".*v2.csv.classes.json \(imagenet-1k\); drop one"):
        read_manifest(mf, classes=names)


def test_old_label_space_and_class_names_arguments_still_work(tmp_path):
    mf = _tree(tmp_path)
    assert read_manifest(mf, label_space="imagenet-1k").targets == [0, 1, 417, 1]
    ds = read_manifest(mf, class_names=["417", "goldfish", "n01440764"], label_space="mine")
    assert ds.targets == [2, 1, 0, 1] and ds.label_space == "mine"


@pytest.mark.parametrize(("name", "text", "needle"), [
    ("v2.csv.classes.txt", "a\n\nb\n", "line 2 is blank"),
    ("v2.csv.classes.txt", "a\nb\na\n", "class 'a' appears twice (indices 0 and 2)"),
    ("v2.csv.classes.json", '{"label_space": "imagenet1k"}',
     "unknown label space 'imagenet1k'; did you mean 'imagenet-1k'?"),
    ("v2.csv.classes.json", '{"classes": "abc"}', "classes must be a non-empty list of class names"),
    ("v2.csv.classes.json", '{"classes": ["a"], "label_space": "cifar10"}', 'expected {"classes"'),
    ("v2.csv.classes.json", "[1,", "invalid JSON"),
])
def test_bad_sidecar_names_the_file_and_the_problem(tmp_path, name, text, needle):
    mf = _tree(tmp_path)
    (tmp_path / name).write_text(text)
    with pytest.raises(DataError) as err:
        read_manifest(mf)
    assert str(tmp_path / name) in str(err.value) and needle in str(err.value)


def test_two_sidecars_are_an_error_and_the_writer_keeps_one(tmp_path):
    mf = _tree(tmp_path)
    (tmp_path / "v2.csv.classes.txt").write_text("a\n")
    (tmp_path / "v2.csv.classes.json").write_text('{"classes": ["a"]}')
    with pytest.raises(DataError, match="two label-space sidecars .*; keep one"):
        read_manifest(mf)
    assert write_label_space(mf, ["x", "y"]) == tmp_path / "v2.csv.classes.json"
    assert sidecar_of(mf) == tmp_path / "v2.csv.classes.json"
    assert json.loads((tmp_path / "v2.csv.classes.json").read_text()) == {"classes": ["x", "y"]}


def test_label_space_of_reads_names_files_and_lists(tmp_path):
    (tmp_path / "c.txt").write_text("cat\ndog\n")
    assert label_space_of(tmp_path / "c.txt").classes == ("cat", "dog")
    assert label_space_of(str(tmp_path / "c.txt")).index("Dog") == 1
    assert label_space_of(["cat", "dog"]) == LabelSpace(None, ("cat", "dog"))
    assert label_space_of("cifar10").index("truck") == 9
    assert read_classes_file(tmp_path / "c.txt").describe() == f"the 2 classes of {tmp_path / 'c.txt'}"
    with pytest.raises(ConfigError, match="unknown label space 'imagenet'; did you mean 'imagenet-1k'"):
        label_space_of("imagenet")



def test_relabelled_manifest_is_rescored_not_served_from_the_store(tmp_path):
    """Changing only the labels of a manifest (same image paths) changes the result key."""
    from shiftbench.engine import evaluate

    (tmp_path / "imgs").mkdir()
    for i in range(4):
        Image.new("RGB", (16, 16), colour_of(i)).save(tmp_path / "imgs" / f"{i}.png")
    mf = tmp_path / "m.csv"
    (tmp_path / "m.csv.classes.json").write_text(json.dumps({"label_space": "imagenet-1k"}))
    run = lambda: evaluate("python:oracle_models:oracle", [f"manifest:{mf}"], store=tmp_path / "store",
                           progress=False)["accuracy"].iloc[0]
    mf.write_text("path,label\n" + "".join(f"imgs/{i}.png,{i}\n" for i in range(4)))
    assert run() == 100.0
    mf.write_text("path,label\n" + "".join(f"imgs/{i}.png,0\n" for i in range(4)))
    assert run() == 25.0
