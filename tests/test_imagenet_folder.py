"""A user's own folder of photos of ImageNet classes, evaluated with an ImageNet model.

Sub-folders named by wnid or ImageNet class name are read as a subset of the ImageNet label
space and scored on the 1,000-way logits (with a note saying so), automatically when the model
has 1000 outputs and the folder a different number of classes, or explicitly with
``folder:DIR?classes=imagenet-1k``. Real photos (scikit-image's samples) and the real
``efficientnet-lite0`` ImageNet weights, through the CLI.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from shiftbench import cli
from shiftbench.datasets import load_dataset
from shiftbench.errors import ConfigError, DataError
from shiftbench.settings import get_setting
from shiftbench.store import Store

SCRIPT = Path(sys.executable).with_name("shiftbench")
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "MPLBACKEND": "Agg"}
#: scikit-image sample -> (wnid, ImageNet index, a class name for the same class); efficientnet-lite0
#: gets all three right (see shiftbench.models.builtin)
PHOTOS = {"chelsea": ("n02124075", 285, "Egyptian cat"), "coffee": ("n07920052", 967, "espresso"),
          "rocket": ("n03773504", 657, "missile")}
NOTE = "3 sub-folders are ImageNet classes ({}); scored on the 1,000-way logits"


def _folder(root: Path, names: dict[str, str]) -> Path:
    """``root/<names[photo]>/<photo>.jpg`` for each scikit-image photo."""
    from skimage import data as skdata

    for photo, folder in names.items():
        (root / folder).mkdir(parents=True, exist_ok=True)
        Image.fromarray(getattr(skdata, photo)()).save(root / folder / f"{photo}.jpg", quality=90)
    return root


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("imagenet_folder")
    return {"wnids": _folder(base / "wnids", {p: w for p, (w, _, _) in PHOTOS.items()}),
            "names": _folder(base / "names", {p: n for p, (_, _, n) in PHOTOS.items()})}


def _eval(store: Path, *settings: str, extra: tuple[str, ...] = ()):
    args = ["eval", "-m", "efficientnet-lite0", "--store", str(store), "--workers", "0", *extra]
    for s in settings:
        args += ["-s", s]
    return CliRunner().invoke(cli.app, args)


def _predictions(store: Path, setting: str):
    st = Store(store)
    row = st.results().set_index("setting").loc[setting]
    return row, st.read_predictions(row["key"]).set_index("id")


# --------------------------------------------------------------------------- end to end
def test_wnid_folder_is_scored_on_the_1000_way_logits_with_a_note(folders, tmp_path):
    setting, note = f"folder:{folders['wnids']}", f"folder {folders['wnids']}: {NOTE.format('wnids')}"
    res = _eval(tmp_path / "store", setting)
    assert res.exit_code == 0, (res.output, res.exception)
    assert f"note: {note}" in res.output
    row, pred = _predictions(tmp_path / "store", setting)
    assert row["label_space"] == "imagenet-1k" and row["notes"] == [note]
    assert row["accuracy"] == 100.0 and row["n_examples"] == 3
    for photo, (wnid, index, _) in PHOTOS.items():       # targets are ImageNet indices, not 0..2
        assert list(pred.loc[f"{wnid}/{photo}.jpg", "target"]) == [index]
        assert pred.loc[f"{wnid}/{photo}.jpg", "pred"] == index


def test_class_name_folders_auto_and_explicit_give_the_same_imagenet_labels(folders, tmp_path):
    auto, explicit = f"folder:{folders['names']}", f"folder:{folders['names']}?classes=imagenet-1k"
    res = _eval(tmp_path / "store", auto, explicit, extra=("--limit", "2"))
    assert res.exit_code == 0, (res.output, res.exception)
    assert f"note: folder {folders['names']}: {NOTE.format('class names')}" in res.output
    ids = {f"{n}/{p}.jpg": i for p, (_, i, n) in PHOTOS.items()}
    for setting in (auto, explicit):
        row, pred = _predictions(tmp_path / "store", setting)
        assert row["label_space"] == "imagenet-1k" and row["n_examples"] == 2 and row["notes"]
        assert {i: list(t) for i, t in pred["target"].items()} == {i: [ids[i]] for i in pred.index}
    assert get_setting(explicit).dataset_args == (("path", str(folders["names"])), ("classes", "imagenet-1k"))


def test_a_folder_that_is_not_an_imagenet_class_is_a_one_line_error(tmp_path):
    root = _folder(tmp_path / "typo", {"chelsea": "tabbby", "coffee": "espresso"})
    proc = subprocess.run([str(SCRIPT), "eval", "-m", "efficientnet-lite0", "-s", f"folder:{root}?classes=imagenet-1k",
                           "--store", str(tmp_path / "store"), "--workers", "0"],
                          capture_output=True, text=True, env=ENV, timeout=120)
    assert proc.returncode == 1 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: folder ")
    assert f"folder {root}: unknown ImageNet class 'tabbby'; did you mean 'tabby'" in lines[0]
    assert "rename it, or drop ?classes=imagenet-1k" in lines[0]


def test_an_ambiguous_class_name_asks_for_the_wnid(tmp_path):
    root = _folder(tmp_path / "birds", {"chelsea": "crane", "coffee": "espresso"})
    msg = r"sub-folder 'crane' is ambiguous among ImageNet classes \(n02012849 = crane, n03126707 = crane\); " \
          r"rename it to the wnid"
    with pytest.raises(DataError, match=msg):                      # auto-detection with a 1000-output model
        load_dataset("folder", path=root, model_outputs=1000)
    with pytest.raises(DataError, match=msg):                      # explicit
        load_dataset("folder", path=root, classes="imagenet-1k")
    res = _eval(tmp_path / "store", f"folder:{root}")
    assert isinstance(res.exception, DataError) and "'crane' is ambiguous" in str(res.exception)
    (root / "crane").rename(root / "n02012849")                    # the wnid resolves it
    assert sorted(load_dataset("folder", path=root, model_outputs=1000).targets) == [134, 967]


# --------------------------------------------------------------------------- the rule
def test_a_model_with_as_many_outputs_as_folders_keeps_the_folders_own_classes(folders):
    for outputs in (None, 3):          # no model known, or a model fine-tuned on these 3 folders
        ds = load_dataset("folder", path=folders["wnids"], model_outputs=outputs)
        assert ds.label_space == "custom:wnids" and ds.num_classes == 3 and sorted(ds.targets) == [0, 1, 2]
        assert ds.notes == ()
    ds = load_dataset("folder", path=folders["wnids"], model_outputs=1000)
    assert ds.label_space == "imagenet-1k" and ds.num_classes == 1000 and sorted(ds.targets) == [285, 657, 967]


def test_folders_of_other_names_keep_their_own_classes_and_mostly_imagenet_ones_name_the_odd_one(tmp_path):
    other = _folder(tmp_path / "other", {"chelsea": "pets", "coffee": "drinks"})
    assert load_dataset("folder", path=other, model_outputs=1000).label_space == "custom:other"
    mostly = _folder(tmp_path / "mostly", {"chelsea": "tabby", "coffee": "espresso", "rocket": "rockets"})
    with pytest.raises(DataError, match=r"unknown ImageNet class 'rockets'.*2 of 3 sub-folders are "
                                        r"ImageNet classes"):
        load_dataset("folder", path=mostly, model_outputs=1000)


def test_imagenet_names_in_any_spelling_and_indices_when_explicit(tmp_path):
    root = _folder(tmp_path / "spellings", {"chelsea": "tabby cat", "coffee": "CUP", "rocket": "417"})
    ds = load_dataset("folder", path=root, classes="imagenet-1k")
    assert dict(zip(ds.ids, ds.targets)) == {"tabby cat/chelsea.jpg": 281, "CUP/coffee.jpg": 968,
                                             "417/rocket.jpg": 417}
    # a number is a class index only when the label space is declared
    with pytest.raises(DataError, match=r"unknown ImageNet class '417'.*\?classes=imagenet-1k also reads indices"):
        load_dataset("folder", path=root, model_outputs=1000)


def test_setting_options_are_checked_before_any_model_runs():
    with pytest.raises(ConfigError, match=r"unknown option 'clases'; did you mean 'classes'"):
        get_setting("folder:/data/photos?clases=imagenet-1k")
    with pytest.raises(ConfigError, match=r"unknown label space 'imagenet'; did you mean 'imagenet-1k'"):
        get_setting("folder:/data/photos?classes=imagenet")
    with pytest.raises(ConfigError, match=r"hf: settings take no \?options"):
        get_setting("hf:/data/ds?classes=imagenet-1k")
    assert get_setting("folder:/data/what?").dataset_args == (("path", "/data/what?"),)
    assert get_setting("manifest:/data/m.csv?classes=imagenet-1k").dataset_args == (("path", "/data/m.csv"),
                                                                                    ("classes", "imagenet-1k"))
