"""Fast, image-free directory scanning and the one-line layout error.

Scanning never opens an image: it lists directory entries with :func:`os.scandir` (one
``getdents`` per folder, no ``stat`` for plain files), keeps names with an image extension and
notes everything else in ``skipped_on_scan``. A 50,000-file ImageNet folder scans in well under
a second; bad images surface later, in ``load``.

A scan stays inside its data root, as a manifest does: a symlink (to a folder or a file) that
resolves outside the root is not followed but listed in ``skipped_on_scan`` and named in the
dataset's ``notes``. A file name that is not valid UTF-8 gets an id with its undecodable bytes
written ``\\xNN`` (:func:`text_name`), so every example can be stored.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from shiftbench.datasets.base import FileDataset, Target, text_name
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


def inside(real: str, root_real: str) -> bool:
    """The resolved path ``real`` is ``root_real`` or lies under it."""
    return real == root_real or real.startswith(root_real.rstrip(os.sep) + os.sep)


def outside_root(path: str, root_real: str) -> str | None:
    """Where the symlink ``path`` resolves to if that is outside ``root_real`` (else ``None``)."""
    real = os.path.realpath(path)
    return None if inside(real, root_real) else real


def outside_reason(real: str, root_real: str) -> str:
    return f"symlink to {text_name(real)}, outside the data root {text_name(root_real)} (not followed)"


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
    #: ids of the symlinks left out because they resolve outside the data root (also in ``skipped``)
    outside: list[str] = field(default_factory=list)

    def add(self, id_: str, target: Target, path: Path) -> None:
        self.ids.append(id_)
        self.targets.append(target)
        self.paths.append(path)

    def order(self) -> list[int]:
        """Indices that sort the examples by id (the deterministic example order)."""
        return sorted(range(len(self.ids)), key=self.ids.__getitem__)


def walk_images(folder: Path, rel: str, out: Examples, target: Target, _seen: set | None = None, *,
                root: str | None = None) -> None:
    """Add every image file under ``folder`` (recursively, symlinks followed, cycles cut) with
    id ``<rel>/<sub path>`` (:func:`text_name` of each part); non-image files go to
    ``out.skipped``; dot-files are ignored. ``root`` (a resolved path, default ``folder``'s):
    a symlink resolving outside it is not followed but listed in ``out.skipped`` and ``out.outside``."""
    seen = set() if _seen is None else _seen
    root_real = os.path.realpath(folder) if root is None else root
    st = folder.stat()
    if (st.st_dev, st.st_ino) in seen:
        return
    seen.add((st.st_dev, st.st_ino))
    with os.scandir(folder) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        if e.name.startswith("."):
            continue
        id_ = f"{rel}/{text_name(e.name)}" if rel else text_name(e.name)
        if e.is_symlink() and (real := outside_root(e.path, root_real)) is not None:
            out.skipped.append((id_, outside_reason(real, root_real)))
            out.outside.append(id_)
        elif e.is_dir():
            walk_images(Path(e.path), id_, out, target, seen, root=root_real)
        elif is_image_name(e.name):
            out.add(id_, target, Path(e.path))
        else:
            out.skipped.append((id_, f"not an image file (extension {text_name(os.path.splitext(e.name)[1]) or 'none'!r})"))


def scan_class_folders(root: Path, folder_targets: Mapping[str, Target] | Iterable[tuple[str, Target]]) -> Examples:
    """Images of each ``root/<folder>`` with that folder's target; ids are ``<folder>/<file>``.
    A class folder that is a symlink resolving outside ``root`` is listed, not read."""
    out = Examples()
    root_real = os.path.realpath(root)
    items = folder_targets.items() if isinstance(folder_targets, Mapping) else folder_targets
    for folder, target in items:
        path = root / folder
        if path.is_symlink() and (real := outside_root(str(path), root_real)) is not None:
            out.skipped.append((text_name(folder), outside_reason(real, root_real)))
            out.outside.append(text_name(folder))
            continue
        walk_images(path, text_name(folder), out, target, root=root_real)
    return out


def _escaped_duplicates(ex: Examples) -> Examples:
    """``ex`` without the examples whose escaped id (:func:`text_name`) is also another example's
    id (a file literally named ``caf\\xe9.png`` beside one whose name holds the byte 0xE9): those
    are listed as skipped, so ids stay unique."""
    counts: dict[str, int] = {}
    for id_ in ex.ids:
        counts[id_] = counts.get(id_, 0) + 1
    if all(n == 1 for n in counts.values()):
        return ex
    kept = Examples(skipped=list(ex.skipped), outside=list(ex.outside))
    for id_, target, path in zip(ex.ids, ex.targets, ex.paths):
        if counts[id_] > 1 and text_name(str(path)) != str(path):
            kept.skipped.append((id_, "its name is not UTF-8 and, escaped, equals another file's name"))
        else:
            kept.add(id_, target, path)
    return kept


def outside_note(name: str, root: Path, outside: list[str]) -> tuple[str, ...]:
    """The note naming the symlinks a scan of ``root`` did not follow (none: no note)."""
    if not outside:
        return ()
    listed = ", ".join(outside[:5]) + (f", ... ({len(outside) - 5} more)" if len(outside) > 5 else "")
    return (f"{name}: {len(outside)} symlink(s) under {text_name(str(root))} resolve outside it and were skipped "
            f"(listed with the skipped files): {listed}",)


def file_dataset(name: str, root: Path, ex: Examples, *, label_space: str, num_classes: int,
                 class_names: list[str] | None, crop: int = 0, skipped: list[tuple[str, str]] | None = None,
                 expected: str = "") -> FileDataset:
    """A :class:`FileDataset` from scanned examples, sorted by id; an empty scan is a LayoutError."""
    if not ex.ids:
        raise LayoutError(name, expected or f"image files under {root}", None, f"no image files found under {root}"
                          + (f" ({len(ex.outside)} symlink(s) resolving outside it not followed)" if ex.outside else ""))
    ex = _escaped_duplicates(ex)
    order = ex.order()
    return FileDataset(
        name=name, ids=[ex.ids[i] for i in order], targets=[ex.targets[i] for i in order],
        label_space=label_space, num_classes=num_classes, class_names=class_names, root=root,
        skipped_on_scan=sorted(ex.skipped) + list(skipped or []),
        paths=[ex.paths[i] for i in order], crop=crop, notes=outside_note(name, root, ex.outside),
    )
