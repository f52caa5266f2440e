"""SI-SCORE-style compositing: the cross product enumerated lazily, objects of the requested
size, place and angle, per-factor accuracy and the location heatmap, and end to end through
``shiftbench.evaluate`` (a dataset object and a spec file)."""
from __future__ import annotations

import doctest
import json
import math
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image, ImageDraw

from shiftbench.datasets import ImageDecodeError, load_dataset
from shiftbench.errors import ConfigError, DataError
from shiftbench.datasets import composite as compositing
from shiftbench.datasets.composite import (CompositeDataset, Foreground, composite_dataset, composite_from_spec,
                                           location_grid, rotation_angles)
from shiftbench.studies.compositing import (composite_setting, compositing_study, factor_accuracy, heatmap_from_study,
                                            location_heatmap)
from shiftbench.store import Store
from shiftbench.studies import study_name

RED, GREEN, BLUE = (255, 0, 0), (0, 255, 0), (0, 0, 255)


@pytest.fixture(autouse=True)
def registries_restored():
    """Settings and datasets registered by a test do not outlive it."""
    from shiftbench import settings
    from shiftbench.datasets import DATASETS

    saved = (dict(DATASETS), dict(settings._SETTINGS))
    yield
    for registry, old in zip((DATASETS, settings._SETTINGS), saved):
        registry.clear()
        registry.update(old)


def disc_rgba(path: Path, colour, size: int = 60) -> Path:
    img = Image.new("RGBA", (size + 20, size + 10), (0, 0, 0, 0))  # transparent margin is cut away
    ImageDraw.Draw(img).ellipse((5, 3, 5 + size - 1, 3 + size - 1), fill=(*colour, 255))
    img.save(path)
    return path


def rect_with_mask(folder: Path, colour, w: int = 80, h: int = 20) -> tuple[Path, Path]:
    """An RGB image (object on a white surround) and a separate mask."""
    img = Image.new("RGB", (w + 10, h + 10), (255, 255, 255))
    mask = Image.new("L", img.size, 0)
    ImageDraw.Draw(img).rectangle((5, 5, 5 + w - 1, 5 + h - 1), fill=colour)
    ImageDraw.Draw(mask).rectangle((5, 5, 5 + w - 1, 5 + h - 1), fill=255)
    img.save(folder / "rect.png")
    mask.save(folder / "rect_mask.png")
    return folder / "rect.png", folder / "rect_mask.png"


def grey_background(path: Path, size=(300, 200), seed: int = 0, flat: bool = False) -> Path:
    rng = np.random.default_rng(seed)
    arr = np.full((size[1], size[0], 3), 128, np.uint8) if flat else rng.integers(80, 180, (size[1], size[0], 3))
    Image.fromarray(arr.astype(np.uint8)).save(path)
    return path


@pytest.fixture
def assets(tmp_path: Path) -> dict:
    fg = tmp_path / "fg"
    bg = tmp_path / "bg"
    fg.mkdir()
    bg.mkdir()
    rect, mask = rect_with_mask(fg, BLUE)
    return {"red": disc_rgba(fg / "red_disc.png", RED), "green": disc_rgba(fg / "green_disc.png", GREEN),
            "rect": rect, "mask": mask,
            "bgs": [grey_background(bg / "street.png", seed=1), grey_background(bg / "field.jpg", (180, 260), seed=2)],
            "flat": grey_background(tmp_path / "flat.png", (224, 224), flat=True), "root": tmp_path}


def object_pixels(img: Image.Image, colour) -> np.ndarray:
    a = np.asarray(img).astype(int)
    return (np.abs(a - np.array(colour)).sum(-1) < 60)


# ---------------------------------------------------------------------------- construction
def test_cross_product_is_enumerated_lazily_with_factor_ids_and_class_targets(assets, monkeypatch):
    opened = []
    real_open = Image.open
    monkeypatch.setattr(Image, "open", lambda *a, **k: opened.append(a[0]) or real_open(*a, **k))
    ds = composite_dataset([(assets["red"], 0), (assets["rect"], assets["mask"], 2)], assets["bgs"],
                           sizes=(0.05, 0.2), locations=location_grid(3), rotations=rotation_angles(4),
                           num_classes=3)
    assert opened == []  # nothing decoded until an example is loaded
    assert isinstance(ds, CompositeDataset) and len(ds) == 2 * 2 * 2 * 9 * 4 == len(set(ds.ids))
    assert ds.shape == (2, 2, 2, 9, 4) and ds.label_space == "3-classes" and ds.num_classes == 3
    assert ds.ids[0] == "fg=red_disc/bg=street/size=0.05/loc=0.1,0.1/rot=0"
    assert ds.ids[-1] == "fg=rect/bg=field/size=0.2/loc=0.9,0.9/rot=270"
    table = ds.factors
    assert list(table.columns) == ["id", "foreground", "background", "class_id", "size", "x", "y", "rotation"]
    assert table["class_id"].tolist() == ds.targets == [0] * 144 + [2] * 144
    assert sorted(table["rotation"].unique()) == [0, 90, 180, 270]
    assert table.groupby(["x", "y"]).size().eq(2 * 2 * 2 * 4).all()
    img = ds.load(len(ds) - 1)
    assert img.mode == "RGB" and img.size == (224, 224)
    # a subset keeps each example's composition
    sub = ds.subset([200, 3])
    assert sub.ids == [ds.ids[200], ds.ids[3]] and sub.targets == [2, 0]
    assert np.array_equal(np.asarray(sub.load(0)), np.asarray(ds.load(200)))
    assert sub.factors.iloc[1].to_dict() == table.iloc[3].to_dict()


def test_object_has_the_requested_area_centre_and_angle(assets):
    side = 200
    ds = composite_dataset([Foreground(assets["rect"], 1, mask=assets["mask"], name="bar")], [assets["flat"]],
                           sizes=(0.02, 0.08), locations=((0.5, 0.5), (0.3, 0.7)), rotations=(0.0, 90.0),
                           image_size=side, num_classes=2)
    for i in range(len(ds)):
        row = ds.factors.iloc[i]
        mask = object_pixels(ds.load(i), BLUE)
        assert mask.sum() == pytest.approx(row["size"] * side * side, rel=0.08)
        ys, xs = np.nonzero(mask)
        assert xs.mean() == pytest.approx(row["x"] * side, abs=1.5)
        assert ys.mean() == pytest.approx(row["y"] * side, abs=1.5)
        wide = xs.max() - xs.min() > ys.max() - ys.min()
        assert wide == (row["rotation"] == 0)  # the 4:1 bar stands upright after 90 degrees


def test_rgba_and_image_plus_mask_compose_the_same_object(assets, tmp_path):
    rgba = Image.open(assets["rect"]).convert("RGBA")
    rgba.putalpha(Image.open(assets["mask"]))
    rgba.save(tmp_path / "rect_rgba.png")
    common = dict(sizes=(0.1,), locations=((0.4, 0.6),), rotations=(30.0,), num_classes=3)
    a = composite_dataset([(tmp_path / "rect_rgba.png", 2)], [assets["flat"]], **common)
    b = composite_dataset([(assets["rect"], assets["mask"], 2)], [assets["flat"]], **common)
    c = composite_dataset([(np.asarray(Image.open(assets["rect"])), np.asarray(Image.open(assets["mask"])), 2)],
                          [Image.open(assets["flat"])], **common)
    assert np.array_equal(np.asarray(a.load(0)), np.asarray(b.load(0)))
    assert np.array_equal(np.asarray(b.load(0)), np.asarray(c.load(0)))
    assert [a.ids[0].split("/")[0], c.ids[0].split("/")[0]] == ["fg=rect_rgba", "fg=fg0"]


def test_objects_partly_outside_the_image_are_cut_off(assets):
    ds = composite_dataset([(assets["red"], 0)], [assets["flat"]], sizes=(0.1,), locations=((0.0, 0.5), (1.0, 1.0)),
                           num_classes=1)
    full = 0.1 * 224 * 224
    assert object_pixels(ds.load(0), RED).sum() == pytest.approx(full / 2, rel=0.1)
    assert object_pixels(ds.load(1), RED).sum() == pytest.approx(full / 4, rel=0.1)


def test_bad_inputs_fail_at_the_boundary_and_bad_files_when_loaded(assets, tmp_path):
    with pytest.raises(ConfigError, match="sizes"):
        composite_dataset([(assets["red"], 0)], assets["bgs"], sizes=(0.0,))
    with pytest.raises(ConfigError, match="locations"):
        composite_dataset([(assets["red"], 0)], assets["bgs"], locations=((1.5, 0.5),))
    with pytest.raises(ConfigError, match="class ids"):
        composite_dataset([(assets["red"], 5)], assets["bgs"], num_classes=3)
    with pytest.raises(ConfigError, match="class_id"):
        composite_dataset([(assets["red"], "cat")], assets["bgs"])
    with pytest.raises(DataError, match="no such file"):
        composite_dataset([(tmp_path / "missing.png", 0)], assets["bgs"])
    with pytest.raises(ConfigError, match="repeated"):
        composite_dataset([(assets["red"], 0)], assets["bgs"], rotations=(0, 0))
    (tmp_path / "broken.png").write_bytes(b"not an image")
    Image.new("RGB", (30, 30), RED).save(tmp_path / "opaque.png")
    Image.new("RGBA", (30, 30), (0, 0, 0, 0)).save(tmp_path / "empty.png")
    ds = composite_dataset([(tmp_path / "opaque.png", 0), (tmp_path / "empty.png", 0), (assets["red"], 0)],
                           [assets["bgs"][0], tmp_path / "broken.png"], num_classes=1)
    with pytest.raises(ImageDecodeError, match="no alpha"):
        ds.load(0)
    with pytest.raises(ImageDecodeError, match="empty"):
        ds.load(2)
    with pytest.raises(ImageDecodeError, match="cannot decode"):
        ds.load(5)
    assert ds.load(4).size == (224, 224)


# ---------------------------------------------------------------------------- analysis
def test_factor_accuracy_and_the_normalised_location_heatmap(assets):
    ds = composite_dataset([(assets["red"], 0), (assets["green"], 1)], [assets["bgs"][0]], sizes=(0.05, 0.2),
                           locations=location_grid(3, margin=0.0), rotations=(0, 90), num_classes=2)
    t = ds.factors
    # correct iff the object is large, or centred horizontally
    correct = (t["size"] == 0.2) | (t["x"] == 0.5)
    acc = factor_accuracy(correct.to_numpy(), ds)
    assert set(acc) == {"size", "location", "rotation", "foreground", "background"}
    assert acc["size"]["size"].tolist() == [0.05, 0.2] and acc["size"]["n"].tolist() == [36, 36]
    assert acc["size"]["accuracy"].tolist() == pytest.approx([100 / 3, 100.0])
    assert acc["rotation"]["accuracy"].tolist() == pytest.approx([200 / 3, 200 / 3])
    loc = acc["location"].set_index(["x", "y"])["accuracy"]
    assert loc[(0.5, 0.0)] == 100 and loc[(0.0, 1.0)] == 50
    heat = location_heatmap(correct.to_numpy(), ds)
    assert heat.shape == (3, 3) and heat.index.tolist() == [0.0, 0.5, 1.0] == heat.columns.tolist()
    p95 = np.percentile([50, 100, 50] * 3, 95) / 100
    expected = np.array([[0.5, 1.0, 0.5]] * 3) / p95
    np.testing.assert_allclose(heat.to_numpy(), expected)
    # per-example rows as the store holds them (skipped rows ignored), in any order
    rows = pd.DataFrame({"id": ds.ids, "correct": correct.to_numpy(), "status": "ok"}).iloc[::-1]
    rows.loc[rows.index[0], ["status", "correct"]] = ["skipped", False]
    by_rows = factor_accuracy(rows, ds)
    assert by_rows["size"]["n"].tolist() == [36, 35]
    with pytest.raises(DataError, match="not examples"):
        factor_accuracy(pd.DataFrame({"id": ["nope"], "correct": [True]}), ds)
    with pytest.raises(DataError, match="correctness values"):
        factor_accuracy(np.ones(3, bool), ds)


# ---------------------------------------------------------------------------- end to end
COLOUR_MODEL = textwrap.dedent('''
    import torch

    class ColourCounter(torch.nn.Module):
        """Logits = how many pixels are pure red / green / blue; a constant for 'no object' (class 3)."""

        def forward(self, x):
            r, g, b = x[:, 0], x[:, 1], x[:, 2]
            hi, lo = 0.8, 0.2
            counts = [((r > hi) & (g < lo) & (b < lo)), ((g > hi) & (r < lo) & (b < lo)),
                      ((b > hi) & (r < lo) & (g < lo))]
            logits = torch.stack([c.flatten(1).float().sum(1) for c in counts] + [torch.full_like(r[:, 0, 0], 0.5)], 1)
            return logits

    def build():
        return ColourCounter()
''')


@pytest.fixture
def colour_model(tmp_path, monkeypatch) -> str:
    (tmp_path / "colour_models.py").write_text(COLOUR_MODEL)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "python:colour_models:build"


def accuracy_by(preds: pd.DataFrame, ds: CompositeDataset, *cols: str) -> dict:
    table = ds.factors.merge(preds[["id", "correct"]], on="id")
    return (100 * table.groupby(list(cols))["correct"].mean()).to_dict()


def test_composite_dataset_evaluates_through_the_runner(assets, colour_model, tmp_path):
    """Objects centred on the border vanish under the model's 256 -> 224 centre crop (14 canvas
    pixels on each side) unless they are large enough: a disc of 1% of the image (radius 12.6 px)
    only survives at the centre, one of 5% (radius 28 px) everywhere, corners included."""
    import shiftbench

    ds = composite_dataset([(assets["red"], 0), (assets["green"], 1)], [assets["bgs"][0]],
                           sizes=(0.01, 0.05), locations=location_grid(3, margin=0.0), num_classes=4)
    setting = composite_setting(ds)
    assert setting == f"composite:{ds.name}"
    res = shiftbench.evaluate(colour_model, setting, store=tmp_path / "store", progress=False, batch_size=8)
    assert res["n_examples"][0] == len(ds) == 36 and res["n_skipped"][0] == 0
    assert res["accuracy"][0] == pytest.approx(100 * 20 / 36)
    preds = Store(tmp_path / "store").read_predictions(res["key"][0])
    assert preds["id"].tolist() == ds.ids
    by = factor_accuracy(preds, ds)
    assert by["size"]["accuracy"].tolist() == pytest.approx([100 / 9, 100.0])
    assert by["foreground"]["accuracy"].tolist() == pytest.approx([100 * 10 / 18] * 2)
    heat = location_heatmap(preds, ds)
    p95 = np.percentile([50] * 8 + [100], 95)  # 80: between the edge/corner 50% and the centre's 100%
    expected = np.full((3, 3), 50 / p95)
    expected[1, 1] = 100 / p95
    np.testing.assert_allclose(heat.to_numpy(), expected)


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_spec_file_builds_the_dataset_and_a_setting(assets, colour_model, tmp_path, fmt):
    spec = {"name": "mini-si-score", "num_classes": 4,
            "foregrounds": [{"image": "fg/red_disc.png", "class_id": 0},
                            {"image": "fg/rect.png", "mask": "fg/rect_mask.png", "class_id": 2, "name": "bar"}],
            "backgrounds": "bg", "sizes": [0.01, 0.05], "locations": {"grid": 3, "margin": 0.0},
            "rotations": {"count": 2}}
    path = assets["root"] / f"spec.{fmt}"
    if fmt == "json":
        path.write_text(json.dumps(spec))
    else:
        import yaml

        path.write_text(yaml.safe_dump(spec))
    ds = composite_from_spec(path)
    compositing.register_composite_dataset()
    assert ds.name == "mini-si-score" and ds.shape == (2, 2, 2, 9, 2) and ds.foreground_names == ["red_disc", "bar"]
    assert ds.background_names == ["field", "street"]  # a folder: its images, sorted
    same = load_dataset("composite", path=path)
    assert same.ids == ds.ids
    import shiftbench

    res = shiftbench.evaluate(colour_model, composite_setting(path), store=tmp_path / "store", progress=False)
    assert res["setting"][0] == f"composite:{path}" and res["n_examples"][0] == len(ds)
    preds = Store(tmp_path / "store").read_predictions(res["key"][0])
    assert factor_accuracy(preds, ds)["rotation"]["rotation"].tolist() == [0.0, 180.0]
    # the disc as above; the 4:1 bar (100 x 25 px at 5%) is cut off at the top and bottom edges
    # at both sizes, and at 1% (45 x 11 px) survives at the left and right edges too
    assert accuracy_by(preds, ds, "foreground", "size") == pytest.approx(
        {("red_disc", 0.01): 100 / 9, ("red_disc", 0.05): 100.0, ("bar", 0.01): 100 / 3, ("bar", 0.05): 100 / 3})


def test_bad_spec_files_name_the_problem(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        composite_from_spec(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(DataError, match="invalid JSON"):
        composite_from_spec(tmp_path / "bad.json")
    (tmp_path / "typo.json").write_text(json.dumps({"foregrounds": [], "backgrounds": [], "size": [0.1]}))
    with pytest.raises(ConfigError, match="unknown keys"):
        composite_from_spec(tmp_path / "typo.json")
    with pytest.raises(ConfigError, match="CompositeDataset or a spec"):
        composite_setting(42)


def test_grid_helpers_and_docstring_examples():
    assert len(location_grid(5)) == 25 and location_grid(1) == ((0.5, 0.5),)
    assert rotation_angles() == tuple(float(a) for a in range(0, 360, 20))
    assert math.isclose(location_grid(3, margin=0.1)[-1][0], 0.9)
    result = doctest.testmod(compositing)
    assert result.attempted > 0 and result.failed == 0


# ---------------------------------------------------------------------------- the composite: setting and the study
def mini_spec(assets) -> Path:
    spec = {"name": "mini-si-score", "num_classes": 4, "foregrounds": [{"image": "fg/red_disc.png", "class_id": 0}],
            "backgrounds": ["bg/street.png"], "sizes": [0.01, 0.05], "locations": {"grid": 3, "margin": 0.0},
            "rotations": [0, 90]}
    path = assets["root"] / "mini.json"
    path.write_text(json.dumps(spec))
    return path


def test_composite_spelling_is_a_setting_whose_accuracies_equal_factor_accuracy(assets, colour_model, tmp_path):
    """``composite:<spec>`` needs no registration: the CLI's `eval --setting composite:spec.json`."""
    import shiftbench
    from shiftbench.settings import get_setting

    path = mini_spec(assets)
    setting = get_setting(f"composite:{path}")
    assert setting.dataset == "composite" and setting.dataset_args == (("path", str(path)),)
    res = shiftbench.evaluate(colour_model, f"composite:{path}", store=tmp_path / "store", progress=False)
    assert res["n_examples"][0] == 36
    # the disc survives the 256 -> 224 centre crop at 5% everywhere, at 1% only at the centre (as above)
    assert res["accuracy"][0] == pytest.approx(100 * (18 + 2) / 36)
    study = compositing_study(colour_model, path, store=tmp_path / "store")
    preds = Store(tmp_path / "store").read_predictions(res["key"][0])
    expected = factor_accuracy(preds, composite_from_spec(path))
    size = study[study["factor"] == "size"]
    assert size["value"].tolist() == [0.01, 0.05] and size["label"].tolist() == ["0.01", "0.05"]
    assert size["accuracy"].tolist() == pytest.approx(expected["size"]["accuracy"].tolist())
    assert size["accuracy"].tolist() == pytest.approx([100 / 9, 100.0])
    rot = study[study["factor"] == "rotation"]
    assert rot["accuracy"].tolist() == pytest.approx(expected["rotation"]["accuracy"].tolist())
    assert study.attrs["accuracy"] == res["accuracy"][0] and study.attrs["key"] == res["key"][0]
    heat = heatmap_from_study(study)
    np.testing.assert_allclose(heat.to_numpy(), location_heatmap(preds, composite_from_spec(path)).to_numpy())
    p95 = np.percentile([50] * 8 + [100], 95)
    assert heat.loc[0.5, 0.5] == pytest.approx(100 / p95) and heat.loc[0.0, 0.0] == pytest.approx(50 / p95)
    assert set(study["setting"]) == {f"composite:{path}"} and set(study["dataset"]) == {"mini-si-score"}


def test_compositing_study_is_stored_and_a_rerun_replaces_it_without_a_forward_pass(assets, colour_model, tmp_path):
    path = mini_spec(assets)
    store = Store(tmp_path / "store")
    first = compositing_study(colour_model, path, store=store)
    name = first.attrs["study"]
    assert name == study_name("colour_models.build", "mini-si-score") and store.study_names("compositing") == [name]
    assert name.startswith("colour_models.build__mini-si-score-")
    stored = store.read_study("compositing", name)
    pd.testing.assert_frame_equal(stored, first.reset_index(drop=True), check_like=True)
    meta = store.study_meta("compositing", name)
    assert meta["n_examples"] == 36 and meta["key"] == first.attrs["key"] and meta["shape"] == [1, 1, 2, 9, 2]
    again = compositing_study(colour_model, path, store=store, percentile=50)
    assert store.study_names("compositing") == [name] and len(store.read_study("compositing", name)) == len(first)
    assert store.runs().sort_values("finished")["chunks"].tolist() == [1, 0]  # the finished key was reused
    assert store.study_meta("compositing", name)["percentile"] == 50.0
    assert heatmap_from_study(again).loc[0.5, 0.5] == pytest.approx(2.0)  # 100% over the median 50%


def test_a_limited_study_covers_the_evaluated_examples_only(assets, colour_model, tmp_path):
    study = compositing_study(colour_model, mini_spec(assets), store=tmp_path / "store", limit=4)
    assert study.attrs["n_examples"] == 4
    # the first 4 examples: size 0.01, locations (0,0) and (0.5,0), both rotations
    assert study.loc[study["factor"] == "size", "n"].tolist() == [4]
    assert study.loc[study["factor"] == "location", "label"].tolist() == ["0,0", "0.5,0"]


def test_bad_composite_settings_and_study_arguments_name_the_fix(tmp_path):
    from shiftbench.settings import get_setting

    with pytest.raises(ConfigError, match=r"composite:<spec.json\|yaml>"):
        get_setting("composite:")
    with pytest.raises(DataError, match="no such file"):
        compositing_study("python:nope:nope", tmp_path / "missing.json", store=tmp_path / "s")
    with pytest.raises(ConfigError, match="percentile"):
        compositing_study("python:nope:nope", tmp_path / "missing.json", percentile=0)
    with pytest.raises(DataError, match="no location rows"):
        heatmap_from_study(pd.DataFrame({"factor": ["size"], "accuracy": [1.0]}))
