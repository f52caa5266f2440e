"""Class maps shipped as package data (``shiftbench/data/classmaps``), loaded once and cached.

Label spaces:

- ``imagenet-1k``: 1000 classes; index order = sorted wnids = torchvision's ``ImageFolder`` order.
- ``objectnet-113``: the 113 ObjectNet classes that overlap ImageNet, sorted by name; 125
  ImageNet classes map onto them (many-to-one; Barbu et al. 2019).
- ``imagenet-vid-robust-30``: the 30 ImageNet-VID classes (alphabetical synset order of
  ILSVRC2015-VID); 288 ImageNet classes map onto them (Shankar et al. 2021).
- ``ytbb-robust-24``: the 24 YouTube-BoundingBoxes classes (23 objects + ``none``); 231
  ImageNet classes map onto 19 of them.

The files come from the public ImageNet testbed of Taori et al. 2020 (see the README beside
them). Loaders are cached (``functools.lru_cache``) and return tuples and read-only mappings.
"""
from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from shiftbench.errors import ConfigError, DataError, did_you_mean

CLASSMAP_DIR = Path(__file__).parent.parent / "data" / "classmaps"

#: The 30 ImageNet-VID classes in the index order of ``imagenet-vid-robust__class_idx_map.json``
#: (checked against ImageNet names: 4 = bird <- cock/hen/..., 22 = snake, 26 = turtle, ...).
VID_CLASS_NAMES = (
    "airplane", "antelope", "bear", "bicycle", "bird", "bus", "car", "cattle", "dog", "domestic_cat",
    "elephant", "fox", "giant_panda", "hamster", "horse", "lion", "lizard", "monkey", "motorcycle",
    "rabbit", "red_panda", "sheep", "snake", "squirrel", "tiger", "train", "turtle", "watercraft",
    "whale", "zebra",
)

#: Status words of the YTBB-Robust anchor review (``ytbb-robust__anchor_labels.json``); an
#: anchor is valid iff it is ``good`` and neither ``bad`` nor ``unsure``.
YTBB_STATUS_WORDS = ("good", "unsure", "bad")


def _read_json(name: str) -> Any:
    path = CLASSMAP_DIR / name
    try:
        with path.open(encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError as exc:
        raise DataError(f"package class map {path} is missing; reinstall shiftbench") from exc


# --------------------------------------------------------------------------- ImageNet-1k
@lru_cache(maxsize=None)
def imagenet_classes() -> tuple[tuple[str, str], ...]:
    """``(wnid, name)`` for ImageNet-1k indices 0..999 (sorted wnids)."""
    raw = _read_json("imagenet_1k_classes.json")
    classes = tuple((raw[str(i)][0], raw[str(i)][1]) for i in range(len(raw)))
    wnids = [w for w, _ in classes]
    if len(classes) != 1000 or wnids != sorted(wnids):
        raise DataError("imagenet_1k_classes.json: expected 1000 classes in sorted-wnid order")
    return classes


def imagenet_wnids() -> tuple[str, ...]:
    """The 1000 ImageNet wnids in index order (``n01440764`` = 0, tench)."""
    return tuple(w for w, _ in imagenet_classes())


def imagenet_names() -> tuple[str, ...]:
    """The 1000 short ImageNet class names in index order (``tench``, ``goldfish``, ...)."""
    return tuple(n for _, n in imagenet_classes())


@lru_cache(maxsize=None)
def imagenet_wnid_to_index() -> Mapping[str, int]:
    """wnid -> ImageNet-1k index."""
    return MappingProxyType({w: i for i, w in enumerate(imagenet_wnids())})


@lru_cache(maxsize=None)
def imagenet_a_indices() -> tuple[int, ...]:
    """The 200 ImageNet-1k indices of ImageNet-A (Hendrycks et al. 2021), ascending."""
    return tuple(sorted(int(i) for i in _read_json("imagenet-a_class_indices.json")))


@lru_cache(maxsize=None)
def imagenet_r_indices() -> tuple[int, ...]:
    """The 200 ImageNet-1k indices of ImageNet-R (Hendrycks et al. 2021), ascending."""
    return tuple(sorted(int(i) for i in _read_json("imagenet-r_class_indices.json")))


# --------------------------------------------------------------------------- ObjectNet
@lru_cache(maxsize=None)
def objectnet_folder_to_class() -> Mapping[str, str]:
    """ObjectNet 1.0 image folder (``alarm_clock``) -> ObjectNet class name (``Alarm clock``);
    all 313 ObjectNet classes."""
    return MappingProxyType(dict(_read_json("objectnet__folder_to_objectnet_label.json")))


@lru_cache(maxsize=None)
def _objectnet_to_imagenet() -> Mapping[str, tuple[int, ...]]:
    """ObjectNet class -> ImageNet-1k indices, matching the full ImageNet names of
    ``objectnet__objectnet_to_imagenet_1k.json`` (``;``-separated) against
    ``objectnet__imagenet_to_labels.json``; an unknown or ambiguous name, or a matched index
    whose short name in ``imagenet_1k_classes.json`` differs, is an error."""
    full_names: dict[str, list[int]] = {}
    for k, v in _read_json("objectnet__imagenet_to_labels.json").items():
        full_names.setdefault(v, []).append(int(k))
    short = imagenet_names()
    out: dict[str, tuple[int, ...]] = {}
    for on_class, names in _read_json("objectnet__objectnet_to_imagenet_1k.json").items():
        ids = []
        for name in names.split("; "):
            hits = full_names.get(name.strip(), [])
            first = name.strip().split(", ")[0].replace(" ", "_")
            if len(hits) != 1 or short[hits[0]] != first:
                found = f"matches {len(hits)} classes" if len(hits) != 1 else f"is {short[hits[0]]!r}, not {first!r}"
                raise DataError(f"ObjectNet class {on_class!r}: ImageNet name {name!r} {found} "
                                "in the package class maps; reinstall shiftbench")
            ids.append(hits[0])
        out[on_class] = tuple(sorted(ids))
    return MappingProxyType(out)


@lru_cache(maxsize=None)
def objectnet_classes() -> tuple[str, ...]:
    """The 113 ObjectNet classes that overlap ImageNet, sorted: label space ``objectnet-113``."""
    classes = tuple(sorted(_objectnet_to_imagenet()))
    if len(classes) != 113:
        raise DataError(f"ObjectNet map: expected 113 overlapping classes, found {len(classes)}")
    return classes


@lru_cache(maxsize=None)
def imagenet_to_objectnet() -> Mapping[int, int]:
    """ImageNet-1k index -> ``objectnet-113`` index, for the 125 ImageNet classes that map."""
    index = {c: i for i, c in enumerate(objectnet_classes())}
    out: dict[int, int] = {}
    for on_class, ids in _objectnet_to_imagenet().items():
        for i in ids:
            if i in out and out[i] != index[on_class]:
                raise DataError(f"ImageNet class {i} maps to two ObjectNet classes")
            out[i] = index[on_class]
    if len(out) != 125:
        raise DataError(f"ObjectNet map: expected 125 ImageNet classes, found {len(out)}")
    return MappingProxyType(dict(sorted(out.items())))


@lru_cache(maxsize=None)
def objectnet_folder_to_index() -> Mapping[str, int]:
    """ObjectNet folder -> ``objectnet-113`` index, for the folders of the 113 overlapping classes."""
    index = {c: i for i, c in enumerate(objectnet_classes())}
    return MappingProxyType({f: index[c] for f, c in sorted(objectnet_folder_to_class().items()) if c in index})


# --------------------------------------------------------------------------- video
VIDEO_SETS = ("imagenet-vid-robust", "ytbb-robust")


def _check_video(which: str) -> None:
    if which not in VIDEO_SETS:

        raise ConfigError(did_you_mean("video dataset", which, VIDEO_SETS))


@lru_cache(maxsize=None)
def video_class_names(which: str) -> tuple[str, ...]:
    """Superclass names: 30 for ``imagenet-vid-robust``, 24 for ``ytbb-robust``."""
    _check_video(which)
    if which == "imagenet-vid-robust":
        return VID_CLASS_NAMES
    raw = _read_json("ytbb-robust__ytbb_class_index.json")
    return tuple(raw[str(i)] for i in range(len(raw)))


@lru_cache(maxsize=None)
def imagenet_to_superclass(which: str) -> Mapping[int, int]:
    """ImageNet-1k index -> superclass index of ``which`` (288 ids for VID, 231 for YTBB)."""
    _check_video(which)
    raw = _read_json(f"{which}__class_idx_map.json")
    return MappingProxyType({int(k): int(v) for k, v in sorted(raw.items(), key=lambda kv: int(kv[0]))})


def video_label_space(which: str) -> str:
    """``imagenet-vid-robust-30`` or ``ytbb-robust-24``."""
    return f"{which}-{len(video_class_names(which))}"


@lru_cache(maxsize=None)
def vid_frame_labels() -> Mapping[str, tuple[int, ...]]:
    """ImageNet-Vid-Robust: frame path (``val/ILSVRC2015_val_00000000/000432.JPEG``) ->
    sorted tuple of acceptable superclass indices (22,179 frames)."""
    raw = _read_json("imagenet-vid-robust__labels.json")
    return MappingProxyType({k: tuple(sorted(int(x) for x in v)) for k, v in raw.items()})


@lru_cache(maxsize=None)
def vid_pmsets() -> Mapping[str, tuple[str, ...]]:
    """ImageNet-Vid-Robust: anchor frame -> its pm-set neighbours (the anchor excluded;
    1,109 anchors, neighbours within +-10 frames in the same video)."""
    return MappingProxyType({k: tuple(v) for k, v in _read_json("imagenet-vid-robust__pmsets.json").items()})


def ytbb_frame_key(key: str) -> str:
    """``<anchor dir>/frame-N.jpg`` from a YTBB review key that may carry an absolute prefix."""
    return "/".join(key.replace("\\", "/").split("/")[-2:])


@lru_cache(maxsize=None)
def ytbb_anchor_labels() -> Mapping[str, tuple[int, ...]]:
    """YTBB-Robust: valid anchor frame (``<ytid>_<time_ms>/frame-N.jpg``) -> sorted tuple of
    acceptable ``ytbb-robust-24`` indices.

    ``ytbb-robust__anchor_labels.json`` holds the human review of each anchor: ``labels`` are
    indices into its 27-entry ``labels`` list, whose first three entries are the status words
    ``good``, ``unsure``, ``bad`` and whose remaining 24 entries are the YTBB class names in the
    order of ``ytbb-robust__ytbb_class_index.json`` (entry ``3 + c`` is class ``c``). As in the
    published testbed (Taori et al. 2020, after Shankar et al. 2021):

    - an anchor is kept iff its review says ``good`` and neither ``bad`` nor ``unsure``
      (2,169 of 2,467 anchors); a key reviewed twice keeps its last review;
    - its labels are the original YTBB label from ``ytbb_robustness_test_anchors_full.csv``
      (whose ids 22 and 23 are swapped relative to the class index: csv 22 = car = index 23)
      plus every class the reviewers added, matched by name (status words carry no class).
    """
    raw = _read_json("ytbb-robust__anchor_labels.json")
    words: list[str] = raw["labels"]
    names = video_class_names("ytbb-robust")
    by_name = {n: i for i, n in enumerate(names)}
    if tuple(words[:3]) != YTBB_STATUS_WORDS or tuple(words[3:]) != names:
        raise DataError("ytbb-robust__anchor_labels.json: label list is not status words + the 24 YTBB classes")
    initial: dict[str, int] = {}
    with (CLASSMAP_DIR / "ytbb-robust__ytbb_robustness_test_anchors_full.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            label = int(row["label"])
            initial[f"{row['ytid']}_{row['time_ms']}"] = {22: 23, 23: 22}.get(label, label)
    reviews: dict[str, set[str]] = {}
    for ann in raw["annotations"]:
        reviews[ytbb_frame_key(ann["key"])] = {words[i] for i in ann["labels"]}
    out: dict[str, tuple[int, ...]] = {}
    for key, said in sorted(reviews.items()):
        if "good" not in said or said & {"bad", "unsure"}:
            continue
        labels = {by_name[w] for w in said if w in by_name}
        anchor_dir = key.split("/")[0]
        if anchor_dir in initial:
            labels.add(initial[anchor_dir])
        out[key] = tuple(sorted(labels))
    return MappingProxyType(out)


@lru_cache(maxsize=None)
def ytbb_anchor_dirs() -> tuple[str, ...]:
    """Every anchor folder (``<ytid>_<time_ms>``) of the YTBB-Robust test set, reviewed valid
    or not (``ytbb_robustness_test_anchors_full.csv`` and the review), sorted."""
    with (CLASSMAP_DIR / "ytbb-robust__ytbb_robustness_test_anchors_full.csv").open(newline="") as f:
        dirs = {f"{row['ytid']}_{row['time_ms']}" for row in csv.DictReader(f)}
    dirs |= {ytbb_frame_key(a["key"]).split("/")[0] for a in _read_json("ytbb-robust__anchor_labels.json")["annotations"]}
    return tuple(sorted(dirs))
