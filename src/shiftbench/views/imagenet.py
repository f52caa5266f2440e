"""The standard ImageNet-family views, built from the class maps shipped as package data.

The maps come from the public ImageNet testbed of Taori et al. 2020 (see
``shiftbench/data/classmaps/README.md``); they are read, checked and cached once, by
:mod:`shiftbench.datasets.classmaps`. Nothing is read at import time.
"""
from __future__ import annotations

from collections.abc import Sequence

from shiftbench.errors import ConfigError, did_you_mean
from shiftbench.views.mapped import MappedView
from shiftbench.views.subset import SubsetView
from shiftbench.views.superclass import SuperclassView

#: video robustness set (the class map's file prefix) -> number of superclasses
VIDEO_SETS = {"imagenet-vid-robust": 30, "ytbb-robust": 24}


def imagenet_a_view(convention: str = "restricted") -> SubsetView:
    """The 200 ImageNet-A classes (Hendrycks et al. 2021) as a :class:`SubsetView`."""
    from shiftbench.datasets import classmaps as cm  # deferred: loads Pillow

    return SubsetView("imagenet-a-classes", cm.imagenet_a_indices(), convention)


def imagenet_r_view(convention: str = "restricted") -> SubsetView:
    """The 200 ImageNet-R classes (Hendrycks et al. 2021) as a :class:`SubsetView`."""
    from shiftbench.datasets import classmaps as cm  # deferred: loads Pillow

    return SubsetView("imagenet-r-classes", cm.imagenet_r_indices(), convention)


def objectnet_imagenet_ids() -> dict[str, list[int]]:
    """ObjectNet class name -> the ImageNet-1k ids that map to it (113 classes, 125 ids), both
    sorted.

    The map lists ImageNet classes by their full label strings (``"analog clock"``), which are
    matched exactly against ``objectnet__imagenet_to_labels.json`` (the published protocol) and
    checked against the short names of ``imagenet_1k_classes.json``
    (:func:`shiftbench.datasets.classmaps.imagenet_to_objectnet`).
    """
    from shiftbench.datasets import classmaps as cm  # deferred: loads Pillow

    classes = cm.objectnet_classes()
    out: dict[str, list[int]] = {c: [] for c in classes}
    for imagenet_id, target in cm.imagenet_to_objectnet().items():
        out[classes[target]].append(imagenet_id)
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
    from shiftbench.datasets import classmaps as cm  # deferred: loads Pillow

    names = list(cm.video_class_names(which)) if which == "ytbb-robust" else None
    return SuperclassView(f"{which}-classes", dict(cm.imagenet_to_superclass(which)), VIDEO_SETS[which],
                          targets_in_source_space=targets_in_source_space, merge=merge, target_names=names)
