"""Class-folder layouts: any image folder (on disk or in a bucket), ImageNet validation, ImageNetV2,
ImageNet-A/-R/-Sketch, ObjectNet 1.0 and ImageNet-C on disk.

Every builder scans with :func:`os.scandir` only (no image is opened), returns a
:class:`~shiftbench.datasets.base.FileDataset` sorted by id (the POSIX path relative to the
dataset's root), and raises :class:`~shiftbench.datasets.LayoutError` naming the expected
layout and the first missing path when the folder is absent or incomplete. ``strict=False``
accepts a partial copy (some class folders missing) of the named datasets.
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

import pandas as pd

from shiftbench.datasets import classmaps as cm
from shiftbench.datasets._scan import (
    Examples,
    LayoutError,
    file_dataset,
    is_image_name,
    outside_reason,
    outside_root,
    require_dir,
    scan_class_folders,
    subdirs,
)
from shiftbench.datasets.base import FileDataset, text_name
from shiftbench.datasets.manifest import LabelSpace, _norm, known_label_space, label_space_of
from shiftbench.datasets.registry import register_dataset
from shiftbench.errors import ConfigError, DataError, did_you_mean
from shiftbench.setting_names import is_data_uri, local_uri_path
from shiftbench.shifts.corruptions import CORRUPTIONS, SEVERITIES

IMAGENET = "imagenet-1k"
#: A WordNet id as ImageNet names its class folders: ``n`` and eight digits.
WNID = re.compile(r"n\d{8}")
IMAGENETV2_VARIANTS = ("matched-frequency", "threshold0.7", "top-images")
#: The 15 ImageNet-C corruptions plus the 4 extra ones (Hendrycks & Dietterich 2019): the one list,
#: :data:`shiftbench.shifts.corruptions.CORRUPTIONS`.
IMAGENET_C_CORRUPTIONS = CORRUPTIONS
#: Labels files recognised beside flat ImageNet validation images, in order of preference.
IMAGENET_VAL_LABEL_FILES = ("LOC_val_solution.csv", "labels.csv", "val_labels.csv")


def _stray_images(root: Path, folders: set[str]) -> list[tuple[str, str]]:
    """Image files lying directly in ``root`` (outside any class folder), for ``skipped_on_scan``."""
    with os.scandir(root) as it:
        return sorted((text_name(e.name), "image outside any class folder") for e in it
                      if not e.name.startswith(".") and e.name not in folders and is_image_name(e.name) and e.is_file())


def _class_folders(root: Path, name: str, expected: str, wanted: dict[str, int], strict: bool,
                   what: str) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """The folders of ``wanted`` present under ``root``; with ``strict`` every one must exist.
    Visible folders not in ``wanted`` are listed as skipped."""
    require_dir(root, name, expected)
    present = set(subdirs(root))
    if strict:
        for folder in wanted:
            if folder not in present:
                n_missing = sum(f not in present for f in wanted)
                raise LayoutError(name, expected, root / folder,
                                  f"{n_missing} of {len(wanted)} {what} folders absent (strict=False accepts a partial copy)")
    found = {f: t for f, t in wanted.items() if f in present}
    if not found:
        raise LayoutError(name, expected, root / next(iter(wanted)), f"no {what} folder found in {root}")
    skipped = [(f, f"unexpected folder (not one of the {what} folders)") for f in sorted(present - set(wanted))]
    return found, skipped + _stray_images(root, present)


# --------------------------------------------------------------------------- generic folder
IMAGENET_WIDTH = 1000
#: torchvision's ImageNet category names that differ from the shipped short names once case and
#: separators are folded (torchvision >= 0.13 renamed the two duplicated names).
TORCHVISION_RENAMES = {134: "crane bird", 639: "maillot tank suit"}


@dataclass
class FolderDataset(FileDataset):
    """A class-folder dataset; ``notes`` say how its sub-folders were read (printed and stored
    beside every result, e.g. that they are ImageNet classes scored on the 1,000-way logits;
    ``notes`` is a field of every dataset)."""


@lru_cache(maxsize=None)
def _imagenet_name_tables() -> tuple[dict[str, frozenset[int]], ...]:
    """ImageNet-1k indices by folder name, tried in order: (1) exact wnid, short name
    (``Egyptian_cat``) or torchvision category name; (2) the same with case and ``_``/``-``/space
    folded; (3) any lemma of the synset description, or the whole description (timm's
    ``ImageNetInfo`` descriptions: ``tabby, tabby cat``), folded."""
    exact: dict[str, set[int]] = {}
    folded: dict[str, set[int]] = {}
    lemmas: dict[str, set[int]] = {}
    descriptions = cm._read_json("objectnet__imagenet_to_labels.json")
    for i, (wnid, short) in enumerate(cm.imagenet_classes()):
        for n in (wnid, short, TORCHVISION_RENAMES.get(i)):
            if n:
                exact.setdefault(n, set()).add(i)
                folded.setdefault(_norm(n), set()).add(i)
        desc = descriptions[str(i)]
        for n in (desc, *desc.split(",")):
            lemmas.setdefault(_norm(n), set()).add(i)
    return tuple({k: frozenset(v) for k, v in t.items()} for t in (exact, folded, lemmas))


def imagenet_classes_named(folder: str) -> frozenset[int]:
    """The ImageNet-1k indices a folder name may mean: one for a wnid (``n02123045``) or a class
    name (``tabby``, ``Egyptian cat``, ``tabby cat``), several for an ambiguous name (``crane``:
    the bird and the machine), none for anything else. Integers are not class names here."""
    exact, folded, lemmas = _imagenet_name_tables()
    return exact.get(folder.strip()) or folded.get(_norm(folder)) or lemmas.get(_norm(folder)) or frozenset()


def _ambiguous(root: Path, folder: str, hits: frozenset[int]) -> DataError:
    classes = cm.imagenet_classes()
    which = ", ".join(f"{classes[i][0]} = {classes[i][1]}" for i in sorted(hits))
    return DataError(f"folder {root}: sub-folder {folder!r} is ambiguous among ImageNet classes ({which}); "
                     f"rename it to the wnid of the class it holds")


def _not_imagenet(root: Path, folder: str, hint: str) -> DataError:
    choices = [*cm.imagenet_names(), *TORCHVISION_RENAMES.values()]
    return DataError(f"folder {root}: " + did_you_mean("ImageNet class", folder, choices, hint))


def _space_targets(root: Path, folders: list[str], space: LabelSpace) -> dict[str, int]:
    """Each sub-folder's index in a declared label space (ImageNet: wnid, class name or index
    0..999); a folder that is not a class of the space is a :class:`DataError` naming it."""
    targets: dict[str, int] = {}
    for f in folders:
        if space.name != IMAGENET:
            try:
                targets[f] = space.index(f)
            except DataError as exc:
                raise DataError(f"folder {root}, sub-folder {f!r}: {exc}") from None
            continue
        hits = imagenet_classes_named(f)
        if not hits and f.isdigit() and int(f) < IMAGENET_WIDTH:
            hits = frozenset({int(f)})
        if not hits:
            raise _not_imagenet(root, f, "sub-folders are read as ImageNet wnids, e.g. n02123045, class names or "
                                         "indices 0..999: rename it, or drop ?classes=imagenet-1k")
        if len(hits) > 1:
            raise _ambiguous(root, f, hits)
        targets[f] = next(iter(hits))
    return targets


def _detect_imagenet(root: Path, folders: list[str]) -> dict[str, int] | None:
    """ImageNet-1k targets if every sub-folder is an ImageNet wnid or class name, else ``None``.
    A folder mostly of ImageNet classes with a few other names, or with an ambiguous name, is a
    :class:`DataError` naming the folder (it could not be scored by a 1000-output model anyway)."""
    hits = {f: imagenet_classes_named(f) for f in folders}
    unknown = [f for f, h in hits.items() if not h]
    if unknown:
        if 2 * len(unknown) < len(folders):
            raise _not_imagenet(root, unknown[0], f"{len(folders) - len(unknown)} of {len(folders)} sub-folders are "
                                                  "ImageNet classes: name the others by wnid or class name to score "
                                                  "the folder on an ImageNet model's 1000 logits; "
                                                  "?classes=imagenet-1k also reads indices 0..999")
        return None
    for f, h in hits.items():
        if len(h) > 1:
            raise _ambiguous(root, f, h)
    return {f: next(iter(h)) for f, h in hits.items()}


def _label_space_note(root: Path, targets: dict[str, int], space: LabelSpace) -> str:
    n = len(targets)
    if space.name != IMAGENET:
        return (f"folder {root}: {n} sub-folders are classes of {space.describe()}; "
                f"scored on its {len(space.classes)} classes")
    wnids = sum(bool(WNID.fullmatch(f)) for f in targets)
    kind = "wnids" if wnids == n else "class names" if wnids == 0 else "wnids and class names"
    return f"folder {root}: {n} sub-folders are ImageNet classes ({kind}); scored on the 1,000-way logits"


def image_folder(root: Path | str, name: str | None = None, classes: list[str] | str | Path | None = None,
                 label_space: str | None = None, model_outputs: int | None = None,
                 storage_options: Mapping[str, Any] | None = None) -> FolderDataset:
    """Any ``root/<class>/**/<image>`` folder (torchvision ``ImageFolder`` semantics), on disk or
    in a bucket.

    Class ``i`` is ``classes[i]`` if ``classes`` is a list (each must exist), else the ``i``-th
    sub-folder in sorted order. Extensions (case-insensitive): jpg, jpeg, png, bmp, webp, tif,
    tiff, ppm, pgm; other files are listed in ``skipped_on_scan``; dot-files are ignored.
    ``label_space`` defaults to ``custom:<name>`` (``name`` defaults to the folder's name).

    **A subset of a known label space.** ``classes="imagenet-1k"`` (the setting
    ``folder:DIR?classes=imagenet-1k``; also ``cifar10`` or a ``.txt``/``.json`` class list, as
    for a manifest, :func:`~shiftbench.datasets.manifest.label_space_of`) reads every sub-folder
    name as a class of that space: for ImageNet a wnid (``n02123045``), a class name in any case
    with ``_``/``-``/spaces (the shipped short names, torchvision's category names, any lemma of
    timm's synset descriptions, e.g. ``tabby cat``) or an index 0..999. Targets are then that
    space's indices and ``num_classes`` its size (1000), so a 1000-output model is scored on all
    its logits. A sub-folder that is not a class is a :class:`DataError` naming it and the
    closest classes; an ambiguous name (``crane``: bird or machine) one naming the wnids.

    **Auto-detection** (``classes`` not given): when ``model_outputs`` -- the output width of
    the ImageNet model the folder is evaluated with, passed by the runner -- is 1000 *and*
    differs from the number of sub-folders, and every sub-folder is an ImageNet wnid or class
    name (not an index), the folder is read as ``classes="imagenet-1k"``. When the model has
    as many outputs as there are sub-folders (a model fine-tuned on this folder, or 1000 wnid
    folders, where both readings agree), the folder keeps its own sorted-folder label space,
    as it does when fewer than half of the sub-folders are ImageNet classes (the model's width
    check then fails as before); between the two (most, not all) is a :class:`DataError` naming
    the first other sub-folder. Read in a declared or detected space, the dataset's ``notes``
    say so ("N sub-folders are ImageNet classes (wnids); scored on the 1,000-way logits"); the
    runner prints them and stores them, with ``label_space``, beside every result.

    **In a bucket.** ``root`` may be an fsspec URI (``s3://bucket/prefix``, ``gs://``, ``az://``,
    ``memory://``; ``file://`` is the local path): the same layout and rules under the prefix,
    listed once and each image fetched with one GET (:mod:`shiftbench.datasets.remote`), so the
    same images give the same ids, classes and results as a local copy. Credentials and endpoint
    are found the standard way (``AWS_ENDPOINT_URL``, ``AWS_PROFILE``, ``~/.aws``, ...) or given as
    ``storage_options`` (the filesystem's keyword arguments).
    """
    root = local_uri_path(root)
    if is_data_uri(root):
        from shiftbench.datasets.remote import BucketFolder  # deferred: only a bucket's folder needs fsspec

        folder: Any = BucketFolder(str(root), storage_options)
    elif storage_options:
        raise ConfigError(f"{root}: storage_options are for a folder in a bucket (s3://bucket/prefix, ...), "
                          "not a local folder")
    else:
        folder = _LocalFolder(Path(root))
    root = folder.root
    name = name or folder.name or "folder"
    expected = f"{root}/<class>/<image> (one folder per class)"
    folder.require(name, expected)
    present = folder.subdirs()
    if not present and (classes is None or isinstance(classes, str | Path)):
        raise LayoutError(name, expected, folder.where("<class>"), f"no class folders in {root}")
    space, targets = None, None
    if isinstance(classes, str | Path):
        space = label_space_of(classes)
        targets = _space_targets(root, present, space)
    elif classes is None and model_outputs == IMAGENET_WIDTH and len(present) != IMAGENET_WIDTH:
        targets = _detect_imagenet(root, present)
        space = known_label_space(IMAGENET) if targets is not None else None
    if space is not None and targets is not None:
        ex = folder.scan(targets)
        ds = file_dataset(name, root, ex, label_space=space.name or label_space or f"custom:{name}",
                          num_classes=len(space.classes), class_names=list(space.classes),
                          skipped=folder.stray(set(present)), expected=expected)
        return folder.finish(ds, (_label_space_note(root, targets, space),))
    if classes is not None:
        for c in classes:
            if c not in present:
                raise LayoutError(name, expected, folder.where(c), "class folder given in classes= is absent")
    names = list(classes) if classes is not None else present
    if not names:
        raise LayoutError(name, expected, folder.where("<class>"), f"no class folders in {root}")
    ex = folder.scan({c: i for i, c in enumerate(names)})
    ds = file_dataset(name, root, ex, label_space=label_space or f"custom:{name}", num_classes=len(names),
                      class_names=[text_name(n) for n in names], skipped=folder.stray(set(present)),
                      expected=expected)
    return folder.finish(ds, ())


def _with_notes(ds: FileDataset, notes: tuple[str, ...], cls: type[FolderDataset] = FolderDataset,
                **extra: Any) -> FolderDataset:
    """``ds`` as a :class:`FolderDataset` (or ``cls``, with the fields ``extra``) with ``notes``
    added to its own (the scan's)."""
    return cls(**{**{f.name: getattr(ds, f.name) for f in fields(ds)}, **extra, "notes": (*notes, *ds.notes)})


class _LocalFolder:
    """A class folder on disk, read with :func:`os.scandir` (what :func:`image_folder` reads of a
    folder; :class:`shiftbench.datasets.remote.BucketFolder` reads the same of a bucket's prefix)."""

    def __init__(self, root: Path) -> None:
        self.root, self.name = root, root.name

    def where(self, rel: str) -> Path:
        return self.root / rel

    def require(self, name: str, expected: str) -> None:
        require_dir(self.root, name, expected)

    def subdirs(self) -> list[str]:
        return subdirs(self.root)

    def stray(self, present: set[str]) -> list[tuple[str, str]]:
        return _stray_images(self.root, present)

    def scan(self, folder_targets: dict[str, int]) -> Examples:
        return scan_class_folders(self.root, folder_targets)

    def finish(self, ds: FileDataset, notes: tuple[str, ...]) -> FolderDataset:
        return _with_notes(ds, notes)


# --------------------------------------------------------------------------- ImageNet val
def _wnid_targets(wnids: list[str] | tuple[str, ...] | None = None) -> dict[str, int]:
    index = cm.imagenet_wnid_to_index()
    return {w: index[w] for w in (wnids if wnids is not None else cm.imagenet_wnids())}


def _read_val_labels(path: Path, name: str) -> list[tuple[str, int]]:
    """``(file name or stem, ImageNet index)`` rows of a validation labels file.

    ``LOC_val_solution.csv`` (Kaggle): ``ImageId,PredictionString``, the first token of the
    prediction string is the wnid. Otherwise ``filename,label`` with an int index or a wnid
    (a header row is optional).
    """
    index = cm.imagenet_wnid_to_index()
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except Exception as exc:  # noqa: BLE001 - unreadable table
        raise DataError(f"{name}: cannot read labels file {path} ({type(exc).__name__}: {exc})") from exc
    cols = [c.strip() for c in df.columns]
    if "ImageId" in cols and "PredictionString" in cols:
        files, labels = df["ImageId"], df["PredictionString"].str.split().str[0].fillna("")
    elif len(cols) >= 2 and not (cols[1].isdigit() or cols[1] in index):
        files, labels = df.iloc[:, 0], df.iloc[:, 1]
    else:  # no header row
        df = pd.read_csv(path, dtype=str, keep_default_na=False, header=None)
        files, labels = df.iloc[:, 0], df.iloc[:, 1]
    rows = []
    for r, (f, lab) in enumerate(zip(files, labels)):
        lab = str(lab).strip()
        if lab.isdigit() and int(lab) < 1000:
            rows.append((str(f).strip(), int(lab)))
        elif lab in index:
            rows.append((str(f).strip(), index[lab]))
        else:
            raise DataError(f"{name}: {path} row {r + 1} ({f}): label {lab!r} is neither an ImageNet index 0..999 "
                            "nor a wnid")
    return rows


def _imagenet_val_flat(root: Path, labels_file: Path, name: str, expected: str) -> FileDataset:
    rows = _read_val_labels(labels_file, name)
    root_real = os.path.realpath(root)
    outside: list[tuple[str, str]] = []
    with os.scandir(root) as it:
        files = []
        for e in sorted(it, key=lambda e: e.name):
            if e.name.startswith(".") or not is_image_name(e.name):
                continue
            if e.is_symlink() and (real := outside_root(e.path, root_real)) is not None:
                outside.append((e.name, outside_reason(real, root_real)))
            elif e.is_file():
                files.append(e.name)
    by_name = {f: f for f in files}
    by_stem: dict[str, str] = {}
    for f in files:
        by_stem.setdefault(os.path.splitext(f)[0], f)
    away = {f for f, _ in outside} | {os.path.splitext(f)[0] for f, _ in outside}
    ex, used = Examples(), set()
    for f, target in rows:
        hit = by_name.get(f) or by_stem.get(f) or by_stem.get(os.path.splitext(f)[0])
        if hit is None and (f in away or os.path.splitext(f)[0] in away):
            continue  # a symlink out of the root: listed as skipped, not read
        if hit is None:
            n_missing = sum(1 for g, _ in rows if not (by_name.get(g) or by_stem.get(g) or by_stem.get(os.path.splitext(g)[0])))
            raise LayoutError(name, expected, root / f, f"{n_missing} of {len(rows)} images named in {labels_file.name} absent")
        if hit in used:
            raise DataError(f"{name}: {labels_file} lists {f!r} twice")
        used.add(hit)
        ex.add(text_name(hit), target, root / hit)
    ex.skipped = ([(text_name(f), f"no label in {labels_file.name}") for f in files if f not in used]
                  + [(text_name(f), why) for f, why in outside])
    ex.outside = [text_name(f) for f, _ in outside]
    return file_dataset(name, root, ex, label_space=IMAGENET, num_classes=1000, class_names=list(cm.imagenet_names()),
                        expected=expected)


#: Where the Kaggle download keeps the validation images, relative to LOC_val_solution.csv.
KAGGLE_VAL_DIR = "ILSVRC/Data/CLS-LOC/val"


def imagenet_val(root: Path | str, name: str = "imagenet-val", labels_file: Path | str | None = None,
                 strict: bool = True) -> FileDataset:
    """ImageNet-1k validation (Russakovsky et al. 2015), 50,000 images, in either layout:

    - ``root/<wnid>/*.JPEG``: 1000 wnid folders (the ``valprep.sh`` / torchvision layout);
      ids ``<wnid>/<file>``;
    - ``root/*.JPEG`` plus a labels file in ``root`` (or ``labels_file=``):
      ``LOC_val_solution.csv`` (Kaggle: ``ImageId,PredictionString``, first token = wnid) or
      ``labels.csv`` / ``val_labels.csv`` (``filename,label``, label = index or wnid);
      ids ``<file>``. The Kaggle download's top folder also works as ``root``
      (``LOC_val_solution.csv`` + ``ILSVRC/Data/CLS-LOC/val/*.JPEG``). Images without a label
      are listed in ``skipped_on_scan``; a labelled image that is absent is a
      :class:`LayoutError`.

    Wnid folders win over a labels file found beside them; an explicit ``labels_file`` wins
    over both. Targets are ImageNet-1k indices (sorted-wnid order).
    """
    root = Path(root)
    expected = f"{root}/<wnid>/*.JPEG (1000 wnid folders) or {root}/*.JPEG + {'|'.join(IMAGENET_VAL_LABEL_FILES)}"
    require_dir(root, name, expected)
    if labels_file is not None:
        if not Path(labels_file).is_file():
            raise LayoutError(name, expected, labels_file)
        return _imagenet_val_flat(root, Path(labels_file), name, expected)
    present = set(subdirs(root))
    if present & set(cm.imagenet_wnids()):
        return _wnid_dataset(root, name, expected, _wnid_targets(), strict, "ImageNet wnid")
    if (root / "LOC_val_solution.csv").is_file() and (root / KAGGLE_VAL_DIR).is_dir():
        return _imagenet_val_flat(root / KAGGLE_VAL_DIR, root / "LOC_val_solution.csv", name, expected)
    found = next((root / f for f in IMAGENET_VAL_LABEL_FILES if (root / f).is_file()), None)
    if found is not None:
        return _imagenet_val_flat(root, found, name, expected)
    raise LayoutError(name, expected, root / cm.imagenet_wnids()[0],
                      f"no wnid folder and no labels file ({', '.join(IMAGENET_VAL_LABEL_FILES)}) in {root}")


def _wnid_dataset(root: Path, name: str, expected: str, wanted: dict[str, int], strict: bool, what: str,
                  crop: int = 0) -> FileDataset:
    found, skipped = _class_folders(root, name, expected, wanted, strict, what)
    ex = scan_class_folders(root, found)
    return file_dataset(name, root, ex, label_space=IMAGENET, num_classes=1000, class_names=list(cm.imagenet_names()),
                        skipped=skipped, expected=expected, crop=crop)


# --------------------------------------------------------------------------- ImageNetV2
def imagenetv2(root: Path | str, variant: str = "matched-frequency", name: str | None = None,
               strict: bool = True) -> FileDataset:
    """ImageNetV2 (Recht et al. 2019), 10,000 images: ``root/<class index>/*.jpeg`` with folders
    ``0`` .. ``999`` named by ImageNet-1k index, as in the released tars
    ``imagenetv2-{matched-frequency,threshold0.7,top-images}-format-val``; ``root`` may also be
    the folder holding that tar's top folder. Ids ``<index>/<file>``.
    """
    if variant not in IMAGENETV2_VARIANTS:
        raise ConfigError(did_you_mean("ImageNetV2 variant", variant, IMAGENETV2_VARIANTS))
    root = Path(root)
    name = name or f"imagenetv2-{variant}"
    released = root / f"imagenetv2-{variant}-format-val"
    if released.is_dir():
        root = released
    expected = f"{root}/<class index 0..999>/*.jpeg (1000 folders, the released imagenetv2-{variant}-format-val)"
    found, skipped = _class_folders(root, name, expected, {str(i): i for i in range(1000)}, strict, "class-index")
    ex = scan_class_folders(root, found)
    return file_dataset(name, root, ex, label_space=IMAGENET, num_classes=1000, class_names=list(cm.imagenet_names()),
                        skipped=skipped, expected=expected)


# --------------------------------------------------------------------------- ImageNet-A/R/Sketch
_WNID_SETS = {
    "imagenet-a": ("*.jpg", lambda: [cm.imagenet_wnids()[i] for i in cm.imagenet_a_indices()]),
    "imagenet-r": ("*.jpg", lambda: [cm.imagenet_wnids()[i] for i in cm.imagenet_r_indices()]),
    "imagenet-sketch": ("*.JPEG", lambda: list(cm.imagenet_wnids())),
}


def wnid_folder(root: Path | str, name: str, strict: bool = True) -> FileDataset:
    """A ``root/<wnid>/*`` dataset with ImageNet-1k targets.

    ``name`` selects the expected folders: ``imagenet-a`` (200 wnids; Hendrycks et al. 2021),
    ``imagenet-r`` (200 wnids; Hendrycks et al. 2021) or ``imagenet-sketch`` (1000 wnids; Wang
    et al. 2019; the download's ``sketch/`` folder is entered if present); any other name
    accepts whichever wnid folders exist. Ids ``<wnid>/<file>``.
    """
    root = Path(root)
    if name == "imagenet-sketch" and (root / "sketch").is_dir():
        root = root / "sketch"
    if name not in _WNID_SETS:  # any subset of the 1000 wnid folders
        expected = f"{root}/<wnid>/* (ImageNet wnid folders)"
        return _wnid_dataset(root, name, expected, _wnid_targets(), False, "ImageNet wnid")
    pattern, wnids = _WNID_SETS[name]
    wanted = wnids()
    expected = f"{root}/<wnid>/{pattern} ({len(wanted)} wnid folders)"
    return _wnid_dataset(root, name, expected, _wnid_targets(wanted), strict, f"{name} wnid")


# --------------------------------------------------------------------------- ObjectNet
def objectnet(root: Path | str, name: str = "objectnet", crop: int = 2, strict: bool = True) -> FileDataset:
    """ObjectNet 1.0 (Barbu et al. 2019): ``root/images/<folder>/*.png`` (or the folders directly
    under ``root``).

    Only the folders of the 113 classes that overlap ImageNet are kept (the other 200 are not
    scored in the ImageNet protocol and are left out by design); targets are ``objectnet-113``
    indices (:func:`~shiftbench.datasets.classmaps.objectnet_classes`), ids
    ``<folder>/<file>``. ``crop=2`` removes the 2 px red border of every image at load time.
    """
    root = Path(root)
    if (root / "images").is_dir():
        root = root / "images"
    expected = f"{root}/<folder>/*.png (ObjectNet 1.0 images/: the 113 folders of classes overlapping ImageNet)"
    wanted = dict(cm.objectnet_folder_to_index())
    require_dir(root, name, expected)
    present = set(subdirs(root))
    all_folders = set(cm.objectnet_folder_to_class())
    if strict:
        for folder in wanted:
            if folder not in present:
                n = sum(f not in present for f in wanted)
                raise LayoutError(name, expected, root / folder,
                                  f"{n} of 113 folders absent (strict=False accepts a partial copy)")
    found = {f: t for f, t in wanted.items() if f in present}
    if not found:
        raise LayoutError(name, expected, root / next(iter(wanted)), f"no ObjectNet class folder in {root}")
    skipped = [(f, "folder is not an ObjectNet class folder") for f in sorted(present - all_folders)]
    ex = scan_class_folders(root, found)
    return file_dataset(name, root, ex, label_space="objectnet-113", num_classes=113,
                        class_names=list(cm.objectnet_classes()), crop=crop,
                        skipped=skipped + _stray_images(root, present), expected=expected)


# --------------------------------------------------------------------------- ImageNet-C
def imagenet_c_on_disk(root: Path | str, corruption: str, severity: int, name: str = "imagenet-c",
                       strict: bool = True) -> FileDataset:
    """ImageNet-C as released (Hendrycks & Dietterich 2019): ``root/<corruption>/<severity>/<wnid>/*.JPEG``,
    one of the 19 corruptions (:data:`IMAGENET_C_CORRUPTIONS`) at severity 1..5. The dataset is
    named ``imagenet-c.<corruption>.<severity>``; ids ``<wnid>/<file>`` as in ImageNet val.
    """
    if corruption not in IMAGENET_C_CORRUPTIONS:
        raise ConfigError(did_you_mean("ImageNet-C corruption", str(corruption), IMAGENET_C_CORRUPTIONS))
    if str(severity).strip() not in {str(s) for s in SEVERITIES}:
        raise ConfigError(f"ImageNet-C severity must be an integer 1..5, got {severity!r}")
    sev = int(severity)
    base = Path(root)
    root = base / corruption / str(sev)
    full = f"{name}.{corruption}.{sev}"
    expected = f"{root}/<wnid>/*.JPEG (ImageNet-C <corruption>/<severity>/<wnid>, 1000 wnid folders)"
    if not root.is_dir():
        first = next((p for p in (base, base / corruption, root) if not p.is_dir()), root)
        raise LayoutError(full, expected, first)
    return _wnid_dataset(root, full, expected, _wnid_targets(), strict, "ImageNet wnid")


# --------------------------------------------------------------------------- registration
_reg = register_dataset
_reg("imagenet-val", default_dir="imagenet/val", alt_dirs=("imagenet-val", "val"), label_space=IMAGENET,
     layout="<wnid>/*.JPEG (1000 folders), or *.JPEG + LOC_val_solution.csv|labels.csv|val_labels.csv")(imagenet_val)
for _v in IMAGENETV2_VARIANTS:
    _reg(f"imagenetv2-{_v}", default_dir=f"imagenetv2-{_v}-format-val", alt_dirs=(f"imagenetv2-{_v}",),
         label_space=IMAGENET, layout="<class index 0..999>/*.jpeg (1000 folders)")(
        partial(imagenetv2, variant=_v, name=f"imagenetv2-{_v}"))
_reg("imagenet-a", default_dir="imagenet-a", label_space=IMAGENET,
     layout="<wnid>/*.jpg (200 wnid folders)")(partial(wnid_folder, name="imagenet-a"))
_reg("imagenet-r", default_dir="imagenet-r", label_space=IMAGENET,
     layout="<wnid>/*.jpg (200 wnid folders)")(partial(wnid_folder, name="imagenet-r"))
_reg("imagenet-sketch", default_dir="imagenet-sketch", alt_dirs=("sketch",), label_space=IMAGENET,
     layout="[sketch/]<wnid>/*.JPEG (1000 wnid folders)")(partial(wnid_folder, name="imagenet-sketch"))
_reg("objectnet", default_dir="objectnet-1.0", alt_dirs=("objectnet",), label_space="objectnet-113",
     layout="images/<folder>/*.png (113 folders overlapping ImageNet kept; 2 px border cropped)")(objectnet)
_reg("imagenet-c", default_dir="imagenet-c", required=("corruption", "severity"), label_space=IMAGENET,
     layout="<corruption>/<severity 1..5>/<wnid>/*.JPEG (1000 wnid folders)")(imagenet_c_on_disk)


@register_dataset("folder", default_dir=None, label_space="custom:<name> or imagenet-1k",
                  layout="<dir>/<class>/<image> (class = any name; ImageNet wnids/names: ?classes=imagenet-1k); "
                         "<dir> may be a bucket's s3://bucket/prefix")
def _folder(path: Path | str, name: str | None = None, classes: list[str] | str | Path | None = None,
            label_space: str | None = None, model_outputs: int | None = None) -> FolderDataset:
    return image_folder(path, name=name, classes=classes, label_space=label_space, model_outputs=model_outputs)
