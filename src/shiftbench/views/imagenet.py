"""The standard ImageNet-family views, built from the class maps shipped as package data.

The maps come from the public ImageNet testbed of Taori et al. 2020 (see
``shiftbench/data/classmaps/README.md``). Nothing is read at import time; each builder reads
the few small JSON files it needs.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shiftbench.errors import ConfigError, DataError, did_you_mean
from shiftbench.views.mapped import MappedView
from shiftbench.views.subset import SubsetView
from shiftbench.views.superclass import SuperclassView

CLASSMAPS = Path(__file__).parent.parent / "data" / "classmaps"

#: video robustness set (the class map's file prefix) -> number of superclasses
VIDEO_SETS = {"imagenet-vid-robust": 30, "ytbb-robust": 24}
OBJECTNET_CLASSES, OBJECTNET_IMAGENET_IDS = 113, 125


def _read(name: str) -> Any:
    path = CLASSMAPS / name
    try:
        with path.open(encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise DataError(f"class map {path} is missing; reinstall shiftbench (it ships as package data)") from None


def imagenet_a_view(convention: str = "restricted") -> SubsetView:
    """The 200 ImageNet-A classes (Hendrycks et al. 2021) as a :class:`SubsetView`."""
    return SubsetView("imagenet-a-classes", _read("imagenet-a_class_indices.json"), convention)


def imagenet_r_view(convention: str = "restricted") -> SubsetView:
    """The 200 ImageNet-R classes (Hendrycks et al. 2021) as a :class:`SubsetView`."""
    return SubsetView("imagenet-r-classes", _read("imagenet-r_class_indices.json"), convention)


def objectnet_imagenet_ids() -> dict[str, list[int]]:
    """ObjectNet class name -> the ImageNet-1k ids that map to it (113 classes, 125 ids).

    The map lists ImageNet classes by their full label strings (``"analog clock"``), which are
    matched exactly against ``objectnet__imagenet_to_labels.json`` (the published protocol);
    each matched id must also carry that name in ``imagenet_1k_classes.json``.
    """
    on_map: dict[str, str] = _read("objectnet__objectnet_to_imagenet_1k.json")
    labels: dict[str, str] = _read("objectnet__imagenet_to_labels.json")
    short: dict[str, list[str]] = _read("imagenet_1k_classes.json")
    by_label: dict[str, list[int]] = {}
    for idx, label in labels.items():
        by_label.setdefault(label, []).append(int(idx))
    out: dict[str, list[int]] = {}
    for on_name, in_names in on_map.items():
        ids = []
        for label in in_names.split("; "):
            hits = by_label.get(label, [])
            if len(hits) != 1:
                raise DataError(f"ObjectNet class {on_name!r}: ImageNet class {label!r} matches "
                                f"{len(hits)} ImageNet ids in objectnet__imagenet_to_labels.json (need 1)")
            first = label.split(", ")[0].replace(" ", "_")
            if short[str(hits[0])][1] != first:
                raise DataError(f"ObjectNet class {on_name!r}: ImageNet id {hits[0]} is "
                                f"{short[str(hits[0])][1]!r} in imagenet_1k_classes.json, not {first!r}")
            ids.append(hits[0])
        out[on_name] = ids
    n_ids = sum(len(v) for v in out.values())
    distinct = len({i for v in out.values() for i in v})
    if len(out) != OBJECTNET_CLASSES or n_ids != OBJECTNET_IMAGENET_IDS or distinct != n_ids:
        raise DataError(f"ObjectNet map: expected {OBJECTNET_CLASSES} classes over "
                        f"{OBJECTNET_IMAGENET_IDS} distinct ImageNet ids, got {len(out)} over {n_ids}")
    return out


def objectnet_view(convention: str = "restricted", targets_in_source_space: bool = False,
                   class_names: Sequence[str] | None = None) -> MappedView:
    """ObjectNet's 125 ImageNet ids -> 113 ObjectNet classes as a :class:`MappedView`.

    ObjectNet class ``i`` is ``class_names[i]``; by default the sorted ObjectNet class names
    (``"Alarm clock"``, ``"Backpack"``, ...). Pass the dataset's own order if it differs (the
    published ``val-on-objectnet-classes`` setting orders by sorted *folder* name, which is
    not the same order). ``targets_in_source_space=True`` is ``val-on-objectnet-classes``:
    ImageNet val targets, mapped by the view.
    """
    ids = objectnet_imagenet_ids()
    names = sorted(ids) if class_names is None else [str(n) for n in class_names]
    if sorted(names) != sorted(ids):
        unknown = sorted(set(names) - set(ids)) or sorted(set(ids) - set(names))
        raise ConfigError(f"class_names must be the {len(ids)} ObjectNet class names, each once; "
                          f"mismatch at {unknown[:3]}")
    index = {name: i for i, name in enumerate(names)}
    source_to_target = {imagenet_id: index[name] for name, members in ids.items() for imagenet_id in members}
    return MappedView("objectnet-classes", source_to_target, len(names), convention=convention,
                      target_names=names, targets_in_source_space=targets_in_source_space)


def video_view(which: str = "imagenet-vid-robust", targets_in_source_space: bool = False,
               merge: str = "max") -> SuperclassView:
    """ImageNet classes -> the superclasses of a video robustness set (Shankar et al. 2021).

    ``which`` is ``"imagenet-vid-robust"`` (30 superclasses) or ``"ytbb-robust"`` (24; five
    of them -- cow, giraffe, skateboard, toilet, none -- have no ImageNet member and are never
    predicted). ``targets_in_source_space=True`` scores ImageNet val images of the member
    classes (``val-on-vid-robust-classes``).
    """
    if which not in VIDEO_SETS:
        raise ConfigError(did_you_mean("video set", which, VIDEO_SETS))
    raw: dict[str, int] = _read(f"{which}__class_idx_map.json")
    names = None
    if which == "ytbb-robust":
        index: dict[str, str] = _read("ytbb-robust__ytbb_class_index.json")
        names = [index[str(i)] for i in range(VIDEO_SETS[which])]
    return SuperclassView(f"{which}-classes", {int(k): int(v) for k, v in raw.items()}, VIDEO_SETS[which],
                          targets_in_source_space=targets_in_source_space, merge=merge, target_names=names)
