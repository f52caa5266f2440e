"""shiftbench.datasets: class maps, every on-disk layout (tiny real replicas), the registry,
and decoding of bad images."""
from __future__ import annotations

import os

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # before anything imports `datasets`
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import doctest  # noqa: E402
import pickle  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from PIL import Image, ImageFile  # noqa: E402

import layouts as L  # noqa: E402
import shiftbench.datasets as sd  # noqa: E402
from shiftbench.datasets import classmaps as cm  # noqa: E402
from shiftbench.errors import ConfigError, DataError  # noqa: E402


def as_dict(ds):
    return dict(zip(ds.ids, ds.targets))


# --------------------------------------------------------------------------- class maps
def test_imagenet_class_map_is_1000_sorted_wnids():
    wnids = cm.imagenet_wnids()
    assert len(wnids) == 1000 and list(wnids) == sorted(wnids)
    assert (wnids[0], cm.imagenet_names()[0]) == ("n01440764", "tench")
    assert cm.imagenet_wnid_to_index()["n15075141"] == 999


def test_imagenet_a_and_r_each_have_200_indices():
    assert len(cm.imagenet_a_indices()) == len(set(cm.imagenet_a_indices())) == 200
    assert len(cm.imagenet_r_indices()) == len(set(cm.imagenet_r_indices())) == 200
    assert all(0 <= i < 1000 for i in cm.imagenet_a_indices() + cm.imagenet_r_indices())


def test_objectnet_maps_125_imagenet_ids_onto_113_classes():
    classes = cm.objectnet_classes()
    assert len(classes) == 113 and list(classes) == sorted(classes)
    to_on = cm.imagenet_to_objectnet()
    assert len(to_on) == 125 and set(to_on.values()) == set(range(113))
    # by short name too: 'analog clock' and 'digital clock' are both 'Alarm clock'
    names = cm.imagenet_names()
    alarm = classes.index("Alarm clock")
    assert {names[i] for i, j in to_on.items() if j == alarm} == {"analog_clock", "digital_clock"}
    assert len(cm.objectnet_folder_to_index()) == 113
    assert len(cm.objectnet_folder_to_class()) == 313


def test_video_superclass_maps_have_30_and_24_classes():
    assert len(cm.video_class_names("imagenet-vid-robust")) == 30
    assert len(cm.video_class_names("ytbb-robust")) == 24
    vid, ytbb = cm.imagenet_to_superclass("imagenet-vid-robust"), cm.imagenet_to_superclass("ytbb-robust")
    assert set(vid.values()) == set(range(30)) and len(vid) == 288
    assert set(ytbb.values()) <= set(range(24)) and len(ytbb) == 231
    names = cm.imagenet_names()
    assert cm.VID_CLASS_NAMES[vid[names.index("zebra")]] == "zebra"
    assert cm.video_class_names("ytbb-robust")[ytbb[names.index("sports_car")]] == "car"
    assert cm.video_label_space("ytbb-robust") == "ytbb-robust-24"
    with pytest.raises(ConfigError, match="did you mean"):
        cm.video_class_names("ytbb")


def test_ytbb_anchor_labels_drop_status_words_and_rejected_anchors():
    labels = cm.ytbb_anchor_labels()
    assert len(labels) == 2169  # reviewed 'good', neither 'bad' nor 'unsure'
    assert all(lab and all(0 <= c < 24 for c in lab) for lab in labels.values())
    # the csv's id 22 is 'car' (class index 23), and 'none' (22) is never an anchor label
    assert any(23 in lab for lab in labels.values())
    assert not any(22 in lab for lab in labels.values())


def test_vid_pm_sets_cover_every_labelled_frame_once():
    sets, frame_labels = cm.vid_pmsets(), cm.vid_frame_labels()
    frames = [f for a, s in sets.items() for f in (a, *s)]
    assert len(sets) == 1109 and len(frames) == len(set(frames)) == len(frame_labels) == 22179


# --------------------------------------------------------------------------- folder layouts
def test_image_folder_has_torchvision_semantics_and_lists_non_images(tmp_path):
    L.write_image(tmp_path / "dog" / "b.JPG")
    L.write_image(tmp_path / "dog" / "a.png", fmt="PNG")
    L.write_image(tmp_path / "cat" / "sub" / "c.JpEg", fmt="JPEG")
    L.write_image(tmp_path / "cat" / "d.webp", fmt="WEBP")
    (tmp_path / "cat" / "notes.txt").write_text("x")
    (tmp_path / "cat" / ".DS_Store").write_text("x")
    L.write_image(tmp_path / "stray.jpg")
    ds = sd.image_folder(tmp_path, name="pets")
    assert ds.class_names == ["cat", "dog"] and ds.num_classes == 2 and ds.label_space == "custom:pets"
    assert ds.ids == ["cat/d.webp", "cat/sub/c.JpEg", "dog/a.png", "dog/b.JPG"]
    assert ds.targets == [0, 0, 1, 1]
    assert dict(ds.skipped_on_scan) == {"cat/notes.txt": "not an image file (extension '.txt')",
                                        "stray.jpg": "image outside any class folder"}
    assert ds.load(2).mode == "RGB"


def test_image_folder_with_explicit_classes_names_a_missing_one(tmp_path):
    L.write_image(tmp_path / "a" / "1.png", fmt="PNG")
    ds = sd.image_folder(tmp_path, classes=["b_absent", "a"][1:])
    assert ds.targets == [0]
    with pytest.raises(sd.LayoutError, match=f"missing {tmp_path}/zzz"):
        sd.image_folder(tmp_path, classes=["a", "zzz"])


def test_scan_opens_no_image_so_bad_files_fail_only_at_load(tmp_path, monkeypatch):
    folder = tmp_path / "c"
    folder.mkdir()
    for i in range(2000):
        (folder / f"{i:05d}.JPEG").touch()  # zero-byte: any decode would fail
    opened = []
    real_open = Image.open
    monkeypatch.setattr(Image, "open", lambda *a, **k: opened.append(a) or real_open(*a, **k))
    ds = sd.image_folder(tmp_path)
    assert opened == []  # the scan reads directory entries only (bench/ times it)
    assert len(ds) == 2000 and not ds.skipped_on_scan
    with pytest.raises(sd.ImageDecodeError, match="c/00000.JPEG: empty file"):
        ds.load(0)


def test_imagenet_val_reads_wnid_folders(tmp_path):
    expected = L.make_imagenet_val_folders(tmp_path)
    ds = sd.imagenet_val(tmp_path)
    assert as_dict(ds) == expected and ds.ids == sorted(expected)
    assert (ds.label_space, ds.num_classes, ds.class_names[0]) == ("imagenet-1k", 1000, "tench")
    assert ds.load(0).size == (12, 10)


@pytest.mark.parametrize("labels", ["kaggle", "csv"])
def test_imagenet_val_reads_flat_files_with_a_labels_file(tmp_path, labels):
    expected = L.make_imagenet_val_flat(tmp_path, labels)
    L.write_image(tmp_path / "unlabelled.JPEG", fmt="JPEG")
    ds = sd.imagenet_val(tmp_path)
    assert as_dict(ds) == expected
    assert ds.skipped_on_scan[0][0] == "unlabelled.JPEG"


def test_imagenet_val_accepts_the_kaggle_download_top_folder(tmp_path):
    expected = L.make_imagenet_val_flat(tmp_path / "ILSVRC" / "Data" / "CLS-LOC" / "val", "kaggle")
    (tmp_path / "ILSVRC" / "Data" / "CLS-LOC" / "val" / "LOC_val_solution.csv").rename(tmp_path / "LOC_val_solution.csv")
    ds = sd.imagenet_val(tmp_path)
    assert as_dict(ds) == expected and ds.root == tmp_path / "ILSVRC" / "Data" / "CLS-LOC" / "val"


def test_imagenet_val_flat_names_the_first_absent_labelled_image(tmp_path):
    L.make_imagenet_val_flat(tmp_path, "csv")
    (tmp_path / "ILSVRC2012_val_00000002.JPEG").unlink()
    with pytest.raises(sd.LayoutError, match=f"missing {tmp_path}/ILSVRC2012_val_00000002.JPEG; 1 of 3"):
        sd.imagenet_val(tmp_path)


def test_imagenet_val_without_folders_or_labels_names_the_expected_layout(tmp_path):
    L.write_image(tmp_path / "x.JPEG", fmt="JPEG")
    with pytest.raises(sd.LayoutError) as err:
        sd.imagenet_val(tmp_path)
    msg = str(err.value)
    assert msg.startswith(f"imagenet-val: expected {tmp_path}/<wnid>/*.JPEG (1000 wnid folders) or")
    assert "LOC_val_solution.csv" in msg and f"missing {tmp_path}/n01440764" in msg


def test_imagenet_val_strict_names_the_first_absent_wnid_folder(tmp_path):
    L.make_imagenet_val_folders(tmp_path)
    (tmp_path / "n01443537").rmdir()
    with pytest.raises(sd.LayoutError, match=f"missing {tmp_path}/n01443537; 1 of 1000"):
        sd.imagenet_val(tmp_path)
    assert len(sd.imagenet_val(tmp_path, strict=False)) == 4


@pytest.mark.parametrize("variant", sd.IMAGENETV2_VARIANTS)
def test_imagenetv2_folders_are_named_by_class_index(tmp_path, variant):
    root, expected = L.make_imagenetv2(tmp_path, variant)
    for given in (tmp_path, root):  # the tar's parent folder or its top folder
        ds = sd.imagenetv2(given, variant)
        assert as_dict(ds) == expected and ds.root == root and ds.name == f"imagenetv2-{variant}"
    with pytest.raises(ConfigError, match="did you mean 'threshold0.7'"):
        sd.imagenetv2(root, "threshold-0.7")


@pytest.mark.parametrize("which", ["imagenet-a", "imagenet-r", "imagenet-sketch"])
def test_wnid_folder_datasets_target_imagenet_indices(tmp_path, which):
    root = tmp_path / ("sketch" if which == "imagenet-sketch" else which)
    expected = L.make_wnid_dataset(root, which)
    ds = sd.wnid_folder(tmp_path if which == "imagenet-sketch" else root, which)
    assert as_dict(ds) == expected and ds.label_space == "imagenet-1k" and ds.num_classes == 1000
    first = next(iter(expected.values()))
    assert first in (cm.imagenet_a_indices() if which == "imagenet-a" else range(1000))


def test_imagenet_a_with_a_missing_class_folder_names_it(tmp_path):
    L.make_wnid_dataset(tmp_path, "imagenet-a")
    gone = cm.imagenet_wnids()[cm.imagenet_a_indices()[5]]
    (tmp_path / gone).rmdir()
    (tmp_path / "not_a_wnid").mkdir()
    with pytest.raises(sd.LayoutError) as err:
        sd.wnid_folder(tmp_path, "imagenet-a")
    assert str(err.value).startswith(f"imagenet-a: expected {tmp_path}/<wnid>/*.jpg (200 wnid folders); "
                                     f"missing {tmp_path / gone}")
    ds = sd.wnid_folder(tmp_path, "imagenet-a", strict=False)
    assert ("not_a_wnid", "unexpected folder (not one of the imagenet-a wnid folders)") in ds.skipped_on_scan


def test_objectnet_keeps_the_113_overlapping_folders_and_crops_the_red_border(tmp_path):
    expected, other = L.make_objectnet(tmp_path)
    for given in (tmp_path, tmp_path / "images"):
        ds = sd.objectnet(given)
        assert as_dict(ds) == expected and not any(i.startswith(other) for i in ds.ids)
    assert (ds.label_space, ds.num_classes, ds.crop) == ("objectnet-113", 113, 2)
    img = ds.load(0)
    assert img.size == (16, 12)
    assert (np.asarray(img) == L.BLUE).all()  # no red left
    assert ds.class_names[ds.targets[0]] == cm.objectnet_folder_to_class()[ds.ids[0].split("/")[0]]


def test_objectnet_too_small_for_the_border_crop_is_a_decode_error(tmp_path):
    L.make_objectnet(tmp_path)
    folder = next(iter(cm.objectnet_folder_to_index()))
    L.write_image(tmp_path / "images" / folder / "tiny.png", size=(4, 4), fmt="PNG")
    ds = sd.objectnet(tmp_path)
    with pytest.raises(sd.ImageDecodeError, match="too small for a 2px border crop"):
        ds.load(ds.ids.index(f"{folder}/tiny.png"))


def test_imagenet_c_on_disk_reads_one_corruption_and_severity(tmp_path):
    root = tmp_path / "fog" / "3"
    expected = L.make_wnid_folders(root, cm.imagenet_wnids(), {"n01440764": 2})
    ds = sd.imagenet_c_on_disk(tmp_path, "fog", 3)
    assert as_dict(ds) == expected and ds.name == "imagenet-c.fog.3"
    with pytest.raises(ConfigError, match="did you mean 'gaussian_noise'"):
        sd.imagenet_c_on_disk(tmp_path, "gaussian-noise", 3)
    for bad in (0, 6, "3x", 2.5):
        with pytest.raises(ConfigError, match="severity must be an integer 1..5"):
            sd.imagenet_c_on_disk(tmp_path, "fog", bad)
    with pytest.raises(sd.LayoutError, match=f"missing {tmp_path}/fog/2$"):
        sd.imagenet_c_on_disk(tmp_path, "fog", 2)


# --------------------------------------------------------------------------- video pm-sets
def test_imagenet_vid_robust_frames_carry_labels_groups_and_offsets(tmp_path):
    anchors = L.vid_anchors(2)
    frames = L.make_vid(tmp_path, anchors)
    ds = sd.video_robust(tmp_path, "imagenet-vid-robust", strict=False)
    assert ds.ids == frames and ds.label_space == "imagenet-vid-robust-30" and ds.num_classes == 30
    assert ds.targets == [cm.vid_frame_labels()[f] for f in frames]
    assert all(isinstance(t, tuple) for t in ds.targets)
    assert ds.groups.count(anchors[0]) == 21
    a = ds.ids.index(anchors[0])
    assert (ds.groups[a], ds.offsets[a]) == (anchors[0], 0)
    assert sorted(o for g, o in zip(ds.groups, ds.offsets) if g == anchors[0]) == list(range(-10, 11))
    assert len(ds.skipped_on_scan) == 1109 - 2  # the other pm-sets are incomplete here
    sets = sd.pm_sets(ds)
    assert [ds.ids[s.anchor] for s in sets] == anchors
    assert sorted(off for _, off in sets[0].neighbours) == [o for o in range(-10, 11) if o]
    assert ds.load(a).size == (8, 8)


def test_imagenet_vid_robust_strict_names_the_first_absent_frame(tmp_path):
    anchors = L.vid_anchors(1)
    L.make_vid(tmp_path, anchors)
    first = sorted(cm.vid_pmsets())[0]
    missing = first if first != anchors[0] else sorted(cm.vid_pmsets())[1]
    with pytest.raises(sd.LayoutError, match=f"missing {tmp_path}/{missing}"):
        sd.video_robust(tmp_path, "imagenet-vid-robust")
    with pytest.raises(sd.LayoutError, match=f"missing {tmp_path}/elsewhere/val"):
        sd.video_robust(tmp_path / "elsewhere", "imagenet-vid-robust")


def test_pm_k_requires_every_neighbour_within_k_correct(tmp_path):
    L.make_vid(tmp_path, L.vid_anchors(2))
    ds = sd.video_robust(tmp_path, "imagenet-vid-robust", strict=False)
    sets = sd.pm_sets(ds)
    correct = np.ones(len(ds), bool)
    assert sd.pm_k_accuracy(correct, sets, 10) == 1.0
    # a wrong neighbour at offset +7 in the first set: pm-6 still holds, pm-7 and pm-10 fail
    far = next(i for i, off in sets[0].neighbours if off == 7)
    correct[far] = False
    assert [sd.pm_k_accuracy(correct, sets, k) for k in (0, 6, 7, 10)] == [1.0, 1.0, 0.5, 0.5]
    correct[sets[1].anchor] = False  # a wrong anchor fails every k
    assert sd.pm_k_accuracy(correct, sets, 0) == 0.5
    # after a subset that cuts a pm-set, that set cannot be scored exactly
    sub = ds.subset(range(len(ds) - 1))
    assert len(sd.pm_sets(sub)) == 1
    with pytest.raises(DataError, match="incomplete"):
        sd.pm_sets(sub, on_incomplete="raise")


def test_pm_sets_fall_back_to_groups_and_offsets():
    ds = sd.from_arrays(np.zeros((4, 4, 4, 3), np.uint8), [0, 0, 1, 1])
    ds.groups, ds.offsets = ["00000", "00000", "00002", "00002"], [0, 1, 0, -1]
    assert sd.pm_sets(ds) == [(0, [(1, 1)]), (2, [(3, -1)])]


def test_ytbb_robust_neighbours_share_the_anchor_labels(tmp_path):
    anchors = L.ytbb_anchors()
    L.make_ytbb(tmp_path, anchors)
    ds = sd.video_robust(tmp_path, "ytbb-robust", strict=False)
    labels = cm.ytbb_anchor_labels()
    assert ds.label_space == "ytbb-robust-24" and ds.class_names[23] == "car"
    assert len(ds) == 10 and set(ds.groups) == set(anchors)
    for i, g in enumerate(ds.groups):
        assert ds.targets[i] == labels[g]
    assert len(ds.targets[ds.ids.index(anchors[1])]) >= 2
    a0 = anchors[0]
    n0 = int(a0.split("frame-")[1][:-4])
    offs = {ds.ids[i]: ds.offsets[i] for i in range(len(ds)) if ds.groups[i] == a0}
    assert offs == {f"{a0.split('/')[0]}/frame-{n0 + o}.jpg": o for o in (-2, -1, 0, 1, 3)}
    assert ("not_an_anchor_123", "folder is not a YTBB-Robust anchor") in ds.skipped_on_scan
    sets = sd.pm_sets(ds)
    assert sorted(ds.ids[s.anchor] for s in sets) == sorted(anchors)
    with pytest.raises(sd.LayoutError, match="missing .*ytbb_videos/"):
        sd.video_robust(tmp_path, "ytbb-robust")  # strict: the other anchors are absent


def test_ytbb_robust_applies_an_optional_pmk_review(tmp_path):
    anchors = L.ytbb_anchors()
    L.make_ytbb(tmp_path, anchors)
    d0, f0 = anchors[0].split("/")
    n0 = int(f0[6:-4])
    review = {"labels": ["similar", "dissimilar", "bad-anchor"], "annotations": [
        {"key": f"/x/{anchors[0]},/x/{d0}/frame-{n0 + 1}.jpg", "labels": [0]},
        {"key": f"/x/{anchors[0]},/x/{d0}/frame-{n0 - 1}.jpg", "labels": [1]},
        {"key": f"{anchors[1]},{anchors[1].split('/')[0]}/frame-1.jpg", "labels": [2]},
    ]}
    path = L.write_json(tmp_path / "pmk_labels.json", review)
    ds = sd.video_robust(tmp_path, "ytbb-robust", strict=False, pmk_labels=path)
    assert set(ds.groups) == {anchors[0]}  # the bad anchor is dropped
    assert sorted(ds.offsets) == [0, 1]  # only the 'similar' neighbour stays


# --------------------------------------------------------------------------- arrays
def test_cifar10_reads_the_python_batch(tmp_path):
    images, labels = L.cifar_arrays()
    L.make_cifar10(tmp_path, images, labels)
    for given in (tmp_path, tmp_path / "cifar-10-batches-py"):
        ds = sd.cifar10(given)
        assert ds.targets == labels.tolist() and ds.label_space == "cifar10" and ds.num_classes == 10
    assert ds.ids[:2] == ["00000", "00001"] and ds.class_names[0] == "airplane"
    assert np.array_equal(np.asarray(ds.load(3)), images[3])


def test_cifar_batch_loader_refuses_anything_but_numpy_arrays(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "pwned"),))

    d = tmp_path / "cifar-10-batches-py"
    d.mkdir()
    (d / "test_batch").write_bytes(pickle.dumps({b"data": Evil(), b"labels": []}, protocol=2))
    with pytest.raises(DataError, match="refusing to load"):
        sd.cifar10(tmp_path)
    assert not (tmp_path / "pwned").exists()


def test_cifar10_1_and_10_2_read_npy_and_npz_without_pickle(tmp_path):
    images, labels = L.cifar_arrays(5)
    np.save(tmp_path / "cifar10.1_v6_data.npy", images)
    np.save(tmp_path / "cifar10.1_v6_labels.npy", labels)
    np.savez(tmp_path / "cifar102_test.npz", images=images, labels=labels)
    for ds in (sd.cifar10_1(tmp_path), sd.cifar10_2(tmp_path)):
        assert ds.targets == labels.tolist() and ds.label_space == "cifar10"
        assert np.array_equal(np.asarray(ds.load(4)), images[4])
    np.save(tmp_path / "cifar10.1_v6_labels.npy", np.array([object()] * 5), allow_pickle=True)
    with pytest.raises(DataError, match="without pickle"):
        sd.cifar10_1(tmp_path)
    (tmp_path / "none").mkdir()
    with pytest.raises(sd.LayoutError, match=f"missing {tmp_path}/none/cifar102_test.npz"):
        sd.cifar10_2(tmp_path / "none")


def test_from_arrays_validates_shapes_and_labels():
    imgs = np.zeros((3, 5, 6), np.uint8)
    ds = sd.from_arrays(imgs, [0, 2, 1], name="grey", class_names=["a", "b", "c"])
    assert ds.load(0).size == (6, 5) and ds.load(0).mode == "RGB" and ds.label_space == "custom:grey"
    chw = sd.from_arrays(np.zeros((2, 3, 7, 9), np.float32), [0, 0])
    assert chw.load(1).size == (9, 7)
    with pytest.raises(DataError, match="label 3 at index 1 is outside 0..2"):
        sd.from_arrays(imgs, [0, 3, 1], class_names=["a", "b", "c"])
    with pytest.raises(DataError, match="3 images but labels"):
        sd.from_arrays(imgs, [0, 1])
    with pytest.raises(DataError, match="must be uint8"):
        sd.from_arrays(imgs.astype(np.int64) + 300, [0, 1, 2])
    assert doctest.testmod(sd.arrays).failed == 0


# --------------------------------------------------------------------------- manifest
def _manifest_tree(tmp_path):
    root = tmp_path / "data"
    L.write_image(root / "a" / "1.png", fmt="PNG")
    L.write_image(root / "b" / "2.jpg", fmt="JPEG")
    L.write_image(tmp_path / "outside.png", fmt="PNG")
    return root


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_manifest_reads_paths_labels_and_groups(tmp_path, fmt):
    root = _manifest_tree(tmp_path)
    df = pd.DataFrame({"path": ["b/2.jpg", "a/./1.png"], "label": ["dog", "cat"], "group": ["g1", "g2"]})
    path = root / f"m.{fmt}"
    df.to_csv(path, index=False) if fmt == "csv" else df.to_parquet(path)
    ds = sd.manifest(path)
    assert ds.ids == ["b/2.jpg", "a/1.png"]  # row order
    assert ds.class_names == ["cat", "dog"] and ds.targets == [1, 0] and ds.groups == ["g1", "g2"]
    assert ds.label_space == "custom:m" and ds.load(1).mode == "RGB"
    ints = pd.DataFrame({"path": [str(root / "a" / "1.png")], "label": [417]})
    ints.to_csv(root / "i.csv", index=False)
    ds = sd.manifest(root / "i.csv", label_space="imagenet-1k")
    assert ds.ids == ["a/1.png"] and ds.targets == [417] and ds.num_classes == 1000


@pytest.mark.parametrize("culprit", ["../outside.png", "ABS", "link.png", "a/../../outside.png"])
def test_manifest_path_escaping_the_root_names_the_row_and_path(tmp_path, culprit):
    root = _manifest_tree(tmp_path)
    (root / "link.png").symlink_to(tmp_path / "outside.png")
    culprit = str(tmp_path / "outside.png") if culprit == "ABS" else culprit
    pd.DataFrame({"path": ["a/1.png", culprit], "label": [0, 1]}).to_csv(root / "m.csv", index=False)
    with pytest.raises(DataError) as err:
        sd.manifest(root / "m.csv")
    msg = str(err.value)
    assert "line 3" in msg and repr(culprit) in msg and "outside the data root" in msg


def test_manifest_errors_name_the_problem(tmp_path):
    root = _manifest_tree(tmp_path)
    pd.DataFrame({"file": ["a/1.png"], "label": [0]}).to_csv(root / "m.csv", index=False)
    with pytest.raises(DataError, match="no column 'path'"):
        sd.manifest(root / "m.csv")
    pd.DataFrame({"path": ["a/1.png", "a/9.png"], "label": [0, 1]}).to_csv(root / "m.csv", index=False)
    with pytest.raises(DataError, match="line 3: image 'a/9.png' not found"):
        sd.manifest(root / "m.csv")
    pd.DataFrame({"path": ["a/1.png", "a/1.png"], "label": [0, 1]}).to_csv(root / "m.csv", index=False)
    with pytest.raises(DataError, match="repeats line 2"):
        sd.manifest(root / "m.csv")
    (root / "m.txt").write_text("x")
    with pytest.raises(DataError, match="use .csv or .parquet"):
        sd.manifest(root / "m.txt")


# --------------------------------------------------------------------------- Hugging Face
def test_hf_dataset_loads_a_saved_dataset_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import datasets

    feats = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["cat", "dog"])})
    imgs = [Image.new("RGB", (9, 7), L.RED), Image.new("L", (5, 4), 128)]
    datasets.Dataset.from_dict({"image": imgs, "label": [1, 0]}, features=feats).save_to_disk(tmp_path / "hfds")
    ds = sd.hf_dataset(tmp_path / "hfds")
    assert ds.targets == [1, 0] and ds.class_names == ["cat", "dog"] and ds.label_space == "custom:hfds"
    assert ds.load(0).getpixel((0, 0)) == L.RED and ds.load(1).mode == "RGB"
    sub = ds.subset([1])
    assert sub.ids == ["00001"] and sub.load(0).size == (5, 4)
    dd = datasets.DatasetDict({"test": datasets.load_from_disk(str(tmp_path / "hfds"))})
    dd.save_to_disk(tmp_path / "dd")
    assert len(sd.hf_dataset(tmp_path / "dd")) == 2
    with pytest.raises(DataError, match="split 'train' not in"):
        sd.hf_dataset(tmp_path / "dd", split="train")
    with pytest.raises(DataError, match="no column 'img'"):
        sd.hf_dataset(tmp_path / "hfds", image_key="img")


# --------------------------------------------------------------------------- registry
def test_load_dataset_uses_data_root_default_folders_and_overrides(tmp_path):
    expected = L.make_wnid_dataset(tmp_path / "imagenet-a", "imagenet-a")
    ds = sd.load_dataset("imagenet-a", tmp_path)
    assert as_dict(ds) == expected and ds.name == "imagenet-a"
    moved = tmp_path / "fast" / "ia"
    moved.parent.mkdir()
    (tmp_path / "imagenet-a").rename(moved)
    assert as_dict(sd.load_dataset("imagenet-a", tmp_path / "nowhere", overrides={"imagenet-a": moved})) == expected
    images, labels = L.cifar_arrays(3)
    L.make_cifar10(tmp_path, images, labels)  # torchvision's folder name is an accepted default
    assert sd.load_dataset("cifar10", tmp_path).targets == labels.tolist()


def test_load_dataset_missing_layout_names_dataset_layout_and_path(tmp_path):
    with pytest.raises(sd.LayoutError) as err:
        sd.load_dataset("imagenet-a", tmp_path)
    assert str(err.value) == (f"imagenet-a: expected {tmp_path}/imagenet-a/<wnid>/*.jpg (200 wnid folders); "
                              f"missing {tmp_path}/imagenet-a")
    assert isinstance(err.value, DataError) and err.value.missing == tmp_path / "imagenet-a"
    for name in sd.DATASETS:
        entry = sd.DATASETS[name]
        if entry.default_dir is None:
            continue
        kwargs = {"corruption": "fog", "severity": 1} if name == "imagenet-c" else {}
        with pytest.raises(sd.LayoutError, match=f"^{name}.*: expected .*; missing {tmp_path}/"):
            sd.load_dataset(name, tmp_path, **kwargs)


def test_load_dataset_unknown_names_suggest_the_closest(tmp_path):
    with pytest.raises(ConfigError, match="unknown dataset 'imagenetv2-mf'; did you mean 'imagenetv2-matched-frequency'"):
        sd.load_dataset("imagenetv2-mf", tmp_path)
    with pytest.raises(ConfigError, match="did you mean 'imagenet-sketch'"):
        sd.load_dataset("imagenet-a", tmp_path, overrides={"imagenet-skech": tmp_path})
    with pytest.raises(ConfigError, match="needs corruption, severity"):
        sd.load_dataset("imagenet-c", tmp_path)


def test_registry_has_every_named_dataset_and_custom_sources(tmp_path):
    names = {"imagenet-val", "imagenetv2-matched-frequency", "imagenetv2-threshold0.7", "imagenetv2-top-images",
             "imagenet-a", "imagenet-r", "imagenet-sketch", "objectnet", "imagenet-vid-robust", "ytbb-robust",
             "cifar10", "cifar10.1", "cifar10.2", "imagenet-c", "folder", "manifest", "hf"}
    # other tests may have registered more (the digits testbed, composite datasets): these are built in
    assert names <= set(sd.DATASETS)
    assert all(sd.list_datasets()[n] for n in names)
    L.write_image(tmp_path / "imgs" / "k" / "x.png", fmt="PNG")
    assert sd.load_dataset("folder", tmp_path, path="imgs").ids == ["k/x.png"]
    with pytest.raises(ConfigError, match="needs path="):
        sd.load_dataset("manifest", tmp_path)
    assert doctest.testmod(sd.registry).failed == 0


# --------------------------------------------------------------------------- bad images
def _bad(kind, path):
    if kind == "truncated-jpeg":
        return L.truncated_jpeg(path.with_suffix(".jpg"))
    if kind == "zero-byte":
        p = path.with_suffix(".jpg")
        p.touch()
        return p
    if kind == "not-an-image":
        p = path.with_suffix(".png")
        p.write_bytes(b"<html>404</html>")
        return p
    if kind == "bomb-20000x20000":
        return L.png_header_only(path.with_suffix(".png"), 20000, 20000)
    if kind == "bomb-7000x7000":  # above shiftbench's 40 M limit, below PIL's own
        return L.png_header_only(path.with_suffix(".png"), 7000, 7000)
    raise AssertionError(kind)


@pytest.mark.parametrize("kind,reason", [
    ("truncated-jpeg", "truncated"), ("zero-byte", "empty file"), ("not-an-image", "cannot decode"),
    ("bomb-20000x20000", "decompression bomb"), ("bomb-7000x7000", "decompression bomb"),
])
def test_undecodable_images_raise_image_decode_error_naming_the_file(tmp_path, kind, reason, monkeypatch):
    path = _bad(kind, tmp_path / "bad")
    decoded = []
    real_load = ImageFile.ImageFile.load
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: decoded.append(self.size) or real_load(self))
    with pytest.raises(sd.ImageDecodeError, match=reason) as err:
        sd.open_image(path, f"cls/{path.name}")
    if kind.startswith("bomb"):
        assert decoded == []  # refused from the header: no pixel decoded, nothing allocated
    assert err.value.example_id == f"cls/{path.name}" and str(err.value).startswith(f"cls/{path.name}: ")
    assert isinstance(err.value, DataError)


def test_bad_images_in_a_layout_are_kept_at_scan_and_fail_at_load(tmp_path):
    (tmp_path / "c").mkdir()
    for kind in ("truncated-jpeg", "zero-byte", "bomb-20000x20000"):
        _bad(kind, tmp_path / "c" / kind)
    L.write_image(tmp_path / "c" / "good.png", fmt="PNG")
    ds = sd.image_folder(tmp_path)
    assert len(ds) == 4
    outcomes = {}
    for i, id_ in enumerate(ds.ids):
        try:
            ds.load(i)
            outcomes[id_] = "ok"
        except sd.ImageDecodeError as e:
            outcomes[id_] = e.example_id
    assert outcomes == {"c/good.png": "ok", "c/bomb-20000x20000.png": "c/bomb-20000x20000.png",
                        "c/truncated-jpeg.jpg": "c/truncated-jpeg.jpg", "c/zero-byte.jpg": "c/zero-byte.jpg"}


def test_cmyk_jpeg_becomes_rgb(tmp_path):
    p = L.write_image(tmp_path / "cmyk.jpg", color=(0, 255, 255, 0), mode="CMYK", fmt="JPEG")
    img = sd.open_image(p, "cmyk.jpg")
    assert img.mode == "RGB" and img.size == (12, 10)
    r, g, b = img.getpixel((5, 5))
    assert r > 200 and g < 60 and b < 60  # cyan 0, magenta+yellow full = red


def test_greyscale_and_one_bit_images_become_rgb(tmp_path):
    grey = sd.open_image(L.write_image(tmp_path / "g.png", color=77, mode="L", fmt="PNG"), "g")
    assert grey.mode == "RGB" and grey.getpixel((0, 0)) == (77, 77, 77)
    bw = sd.open_image(L.write_image(tmp_path / "b.png", color=1, mode="1", fmt="PNG"), "b")
    assert bw.getpixel((0, 0)) == (255, 255, 255)


def test_16_bit_png_is_scaled_to_8_bit(tmp_path):
    arr = np.array([[0, 32768, 65535]], dtype=np.uint16).repeat(2, 0)
    p = tmp_path / "deep.png"
    Image.fromarray(arr).save(p)
    assert Image.open(p).mode.startswith("I")
    img = sd.open_image(p, "deep.png")
    assert img.mode == "RGB" and [img.getpixel((x, 0))[0] for x in range(3)] == [0, 128, 255]
    dark = tmp_path / "dark.png"
    Image.fromarray(np.full((2, 2), 200, np.uint16)).save(dark)
    assert sd.open_image(dark, "dark.png").getpixel((0, 0)) == (1, 1, 1)  # 200/65535, not stretched


def test_alpha_channel_is_dropped_like_torchvision(tmp_path):
    p = L.write_image(tmp_path / "a.png", color=(10, 20, 30, 0), mode="RGBA", fmt="PNG")
    img = sd.open_image(p, "a.png")
    assert img.mode == "RGB" and img.getpixel((0, 0)) == (10, 20, 30)
    pal = Image.new("P", (4, 4), 0)
    pal.putpalette([200, 100, 50] * 256)
    pal.info["transparency"] = 0
    pal.save(tmp_path / "p.png", transparency=0)
    assert sd.open_image(tmp_path / "p.png", "p.png").getpixel((0, 0)) == (200, 100, 50)


def test_exif_orientation_is_applied(tmp_path):
    p = L.exif_rotated_jpeg(tmp_path / "rot.jpg", size=(30, 10), orientation=6)
    assert Image.open(p).size == (30, 10)
    assert sd.open_image(p, "rot.jpg").size == (10, 30)


def test_decode_image_accepts_bytes(tmp_path):
    p = L.write_image(tmp_path / "x.png", fmt="PNG")
    assert sd.decode_image(p.read_bytes(), "x").size == (12, 10)
    with pytest.raises(sd.ImageDecodeError, match="x: empty image"):
        sd.decode_image(b"", "x")


def test_wnid_folder_with_another_name_accepts_any_wnid_subset(tmp_path):
    L.write_image(tmp_path / "n15075141" / "x.jpg", fmt="JPEG")
    (tmp_path / "n01440764").mkdir()
    ds = sd.wnid_folder(tmp_path, "my-imagenet-subset")
    assert ds.ids == ["n15075141/x.jpg"] and ds.targets == [999] and ds.name == "my-imagenet-subset"
