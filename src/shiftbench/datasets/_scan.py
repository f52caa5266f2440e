"""Fast, image-free directory scanning and the one-line layout error.

Scanning never opens an image: it lists directory entries with :func:`os.scandir` (one
``getdents`` per folder, no ``stat`` for plain files), keeps names with an image extension and
notes everything else in ``skipped_on_scan``. A 50,000-file ImageNet folder scans in well under
a second; bad images surface later, in ``load``.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from shiftbench.datasets.base import FileDataset, Target
from shiftbench.errors import DataError

#: Image file extensions (lower case) recognised by every folder layout: torchvision's
#: ``IMG_EXTENSIONS``; matching is case-insensitive (``.JPEG`` in ImageNet).
IMG_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".ppm", ".pgm"})


class LayoutError(DataError):
    """A dataset is missing or not in the expected on-disk layout.

    The one-line message names the dataset, the expected layout and the first missing path:
    ``imagenet-a: expected /data/imagenet-a/<wnid>/*.jpg (200 wnid folders); missing /data/imagenet-a``.
    """

    def __init__(self, dataset: str, expected: str, missing: Path | str | None = None, detail: str = "") -> None:
        msg = f"{dataset}: expected {expected}"
        if missing is not None:
            msg += f"; missing {missing}"
        if detail:
            msg += f"; {detail}"
        super().__init__(msg)
        self.dataset = dataset
        self.expected = expected
        self.missing = None if missing is None else Path(missing)


def is_image_name(name: str) -> bool:
    return os.path.splitext(name)[1].lower() in IMG_EXTENSIONS


def require_dir(path: Path, dataset: str, expected: str) -> Path:
    """``path`` if it is a directory, else :class:`LayoutError` naming it as missing."""
    if not path.is_dir():
        raise LayoutError(dataset, expected, path, "it is a file, not a folder" if path.exists() else "")
    return path


def subdirs(root: Path) -> list[str]:
    """Names of the visible sub-folders of ``root`` (symlinks followed), sorted."""
    with os.scandir(root) as it:
        return sorted(e.name for e in it if not e.name.startswith(".") and e.is_dir())


@dataclass
class Examples:
    """Examples collected by a scan, before sorting into a dataset."""

    ids: list[str] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def add(self, id_: str, target: Target, path: Path) -> None:
        self.ids.append(id_)
        self.targets.append(target)
        self.paths.append(path)

    def order(self) -> list[int]:
        """Indices that sort the examples by id (the deterministic example order)."""
        return sorted(range(len(self.ids)), key=self.ids.__getitem__)


def walk_images(folder: Path, rel: str, out: Examples, target: Target, _seen: set | None = None) -> None:
    """Add every image file under ``folder`` (recursively, symlinks followed, cycles cut) with
    id ``<rel>/<sub path>``; non-image files go to ``out.skipped``; dot-files are ignored."""
    seen = set() if _seen is None else _seen
    st = folder.stat()
    if (st.st_dev, st.st_ino) in seen:
        return
    seen.add((st.st_dev, st.st_ino))
    with os.scandir(folder) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        if e.name.startswith("."):
            continue
        id_ = f"{rel}/{e.name}" if rel else e.name
        if e.is_dir():
            walk_images(Path(e.path), id_, out, target, seen)
        elif is_image_name(e.name):
            out.add(id_, target, Path(e.path))
        else:
            out.skipped.append((id_, f"not an image file (extension {os.path.splitext(e.name)[1] or 'none'!r})"))


def scan_class_folders(root: Path, folder_targets: Mapping[str, Target] | Iterable[tuple[str, Target]]) -> Examples:
    """Images of each ``root/<folder>`` with that folder's target; ids are ``<folder>/<file>``."""
    out = Examples()
    items = folder_targets.items() if isinstance(folder_targets, Mapping) else folder_targets
    for folder, target in items:
        walk_images(root / folder, folder, out, target)
    return out


def file_dataset(name: str, root: Path, ex: Examples, *, label_space: str, num_classes: int,
                 class_names: list[str] | None, crop: int = 0, skipped: list[tuple[str, str]] | None = None,
                 expected: str = "") -> FileDataset:
    """A :class:`FileDataset` from scanned examples, sorted by id; an empty scan is a LayoutError."""
    if not ex.ids:
        raise LayoutError(name, expected or f"image files under {root}", None, f"no image files found under {root}")
    order = ex.order()
    return FileDataset(
        name=name, ids=[ex.ids[i] for i in order], targets=[ex.targets[i] for i in order],
        label_space=label_space, num_classes=num_classes, class_names=class_names, root=root,
        skipped_on_scan=sorted(ex.skipped) + list(skipped or []),
        paths=[ex.paths[i] for i in order], crop=crop,
    )
