"""DeepFashion Remixed (DFR): a multi-label manifest from DeepFashion2 annotations, carved one
attribute at a time (Hendrycks et al. 2021, *The Many Faces of Robustness*, §3).

DFR remixes DeepFashion2 (Ge et al. 2019): each image shows several clothing items (13
categories), so the task is multi-label classification scored by mAP. Its training set fixes four
attributes -- medium scale, medium occlusion, side/back viewpoint, no zoom-in -- and eight OOD
test sets change one of them: small / large scale, minimal / heavy occlusion, frontal / not-worn
viewpoint, medium / large zoom-in. :data:`DFR_TRAIN` holds the training values, so
``carve_splits(manifest, train=DFR_TRAIN)`` (:mod:`shiftbench.datasets.attributes`) yields
``train``, ``id-test`` and those eight OOD sets.

**Input.** DeepFashion2's layout: one JSON file per image, ``annos/000001.json`` for
``image/000001.jpg``, holding ``source``, ``pair_id`` and ``item1``, ``item2``, ... Each item has
``category_id`` (1..13, :data:`DEEPFASHION2_CATEGORIES`), ``category_name``, ``bounding_box``
``[x1, y1, x2, y2]`` and the four attribute codes (DeepFashion2's README):

============ ===================== ============ ============== =============
field        1                     2            3              column
============ ===================== ============ ============== =============
``scale``    small                 medium       large          ``scale``
``occlusion`` minimal (slight/none) medium      heavy          ``occlusion``
``zoom_in``  none                  medium       large          ``zoom``
``viewpoint`` not-worn             frontal      side-or-back   ``viewpoint``
============ ===================== ============ ============== =============

**Output** (:func:`dfr_manifest`): one row per image, ``path, labels, scale, occlusion,
viewpoint, zoom, source, n_items``; ``labels`` is the ``;``-joined set of category names present
(in category order), the multi-label manifest format of :mod:`shiftbench.datasets.manifest`.

**Image-level attributes.** The annotations are per item; an image gets the attribute codes of
its **largest item** (bounding-box area; ties: the first item), the item a photo is framed
around (``aggregate="largest"``, the default). ``aggregate="max"`` takes each attribute's
largest code over the items instead (the hardest condition present for scale, occlusion and
zoom). Items whose ``category_id`` is not one of the 13 are ignored; an image all of whose items
are unknown (or that has no item) is left out, counted and named in ``frame.attrs["note"]``
(``frame.attrs["skipped"]`` lists the annotation files), never a crash. A missing field, an
out-of-range code, unreadable JSON or a missing image is a one-line :class:`DataError` naming
the file and the fix.

>>> frame = dfr_manifest("validation/annos", "validation/image")          # doctest: +SKIP
>>> path = write_dfr_manifest("validation/annos", "validation/image")     # validation/dfr.csv  # doctest: +SKIP
>>> splits = carve_splits(path, train=DFR_TRAIN, seed=0)                  # doctest: +SKIP
"""
from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from shiftbench.errors import ConfigError, DataError, did_you_mean

#: DeepFashion2's 13 categories; ``category_id`` ``i`` is ``DEEPFASHION2_CATEGORIES[i - 1]``.
DEEPFASHION2_CATEGORIES: tuple[str, ...] = (
    "short sleeve top", "long sleeve top", "short sleeve outwear", "long sleeve outwear", "vest", "sling",
    "shorts", "trousers", "skirt", "short sleeve dress", "long sleeve dress", "vest dress", "sling dress")

#: annotation field -> (manifest column, names of codes 1, 2, 3)
ATTRIBUTES: dict[str, tuple[str, tuple[str, str, str]]] = {
    "scale": ("scale", ("small", "medium", "large")),
    "occlusion": ("occlusion", ("minimal", "medium", "heavy")),
    "viewpoint": ("viewpoint", ("not-worn", "frontal", "side-or-back")),
    "zoom_in": ("zoom", ("none", "medium", "large")),
}

#: DFR's training distribution (Hendrycks et al. 2021, §3): medium scale, medium occlusion,
#: side/back viewpoint, no zoom-in. Every other value is one OOD test set.
DFR_TRAIN: dict[str, str] = {"scale": "medium", "occlusion": "medium", "viewpoint": "side-or-back", "zoom": "none"}

AGGREGATES = ("largest", "max")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
COLUMNS = ["path", "labels", "scale", "occlusion", "viewpoint", "zoom", "source", "n_items"]


def _annotation_files(annotations: str | Path | Sequence[str | Path]) -> list[Path]:
    if isinstance(annotations, (str, Path)):
        path = Path(annotations)
        if path.is_dir():
            files = sorted(path.glob("*.json"))
            if not files:
                raise DataError(f"DFR annotations {path}: no .json files (expected DeepFashion2's annos/000001.json, "
                                "...)")
            return files
        if not path.is_file():
            raise DataError(f"DFR annotations {path} do not exist; give DeepFashion2's annos folder or a .json file")
        return [path]
    files = [Path(p) for p in annotations]
    if not files:
        raise DataError("DFR annotations: the list of annotation files is empty")
    return files


def _read(file: Path) -> dict[str, Any]:
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"DFR annotation {file}: unreadable JSON ({type(exc).__name__}: {exc}); re-extract the "
                        "annotations") from None
    if not isinstance(raw, dict):
        raise DataError(f"DFR annotation {file}: expected a JSON object with item1, item2, ...")
    return raw


def _items(raw: dict[str, Any], file: Path) -> list[tuple[str, dict[str, Any]]]:
    keys = sorted((k for k in raw if k.startswith("item") and k[4:].isdigit()), key=lambda k: int(k[4:]))
    out = []
    for key in keys:
        item = raw[key]
        if not isinstance(item, dict):
            raise DataError(f"DFR annotation {file}: {key} is not an object")
        for fld in ("category_id", *ATTRIBUTES):
            if fld not in item:
                raise DataError(f"DFR annotation {file}: {key} has no field {fld!r} (DeepFashion2 items need "
                                f"category_id, scale, occlusion, zoom_in, viewpoint)")
        out.append((key, item))
    return out


def _code(item: dict[str, Any], fld: str, key: str, file: Path) -> int:
    v = item[fld]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v not in (1, 2, 3):
        raise DataError(f"DFR annotation {file}: {key}.{fld} is {v!r}; DeepFashion2 codes are 1, 2 or 3")
    return int(v)


def _area(item: dict[str, Any], key: str, file: Path) -> float:
    box = item.get("bounding_box")
    if not isinstance(box, (list, tuple)) or len(box) != 4 or not all(isinstance(b, (int, float)) for b in box):
        raise DataError(f"DFR annotation {file}: {key}.bounding_box is {box!r}; expected [x1, y1, x2, y2] (needed "
                        "to find the largest item; or use aggregate='max')")
    return abs(float(box[2]) - float(box[0])) * abs(float(box[3]) - float(box[1]))


def _image(file: Path, image_root: Path, check: bool) -> Path:
    for suffix in IMAGE_SUFFIXES:
        candidate = image_root / (file.stem + suffix)
        if candidate.is_file():
            return candidate
    if check:
        raise DataError(f"DFR annotation {file}: image {image_root / (file.stem + '.jpg')} not found; give the "
                        "image folder matching the annotations (DeepFashion2's image/)")
    return image_root / (file.stem + ".jpg")


def _category(item: dict[str, Any]) -> int | None:
    cid = item["category_id"]
    if isinstance(cid, bool) or not isinstance(cid, (int, float)) or not float(cid).is_integer():
        return None
    return int(cid) if 1 <= int(cid) <= len(DEEPFASHION2_CATEGORIES) else None


def _image_row(file: Path, raw: dict[str, Any], aggregate: str) -> dict[str, Any] | None:
    """One image's labels and attribute words, or ``None`` when no item has a known category."""
    known = [(key, item, cat) for key, item in _items(raw, file) if (cat := _category(item)) is not None]
    if not known:
        return None
    codes = {fld: [_code(item, fld, key, file) for key, item, _ in known] for fld in ATTRIBUTES}
    if aggregate == "largest":
        areas = [_area(item, key, file) for key, item, _ in known]
        pick = areas.index(max(areas))
        chosen = {fld: c[pick] for fld, c in codes.items()}
    else:
        chosen = {fld: max(c) for fld, c in codes.items()}
    cats = sorted({cat for _, _, cat in known})
    row = {"labels": ";".join(DEEPFASHION2_CATEGORIES[c - 1] for c in cats)}
    for fld, (column, names) in ATTRIBUTES.items():
        row[column] = names[chosen[fld] - 1]
    row["source"] = str(raw.get("source", ""))
    row["n_items"] = len(known)
    return row


def dfr_manifest(annotations: str | Path | Sequence[str | Path], image_root: str | Path, *,
                 aggregate: str = "largest", relative_to: str | Path | None = None,
                 check_images: bool = True) -> pd.DataFrame:
    """The DFR multi-label manifest of DeepFashion2 annotations (module docstring).

    Parameters
    ----------
    annotations:
        DeepFashion2's ``annos`` folder (every ``*.json``, sorted), one annotation file, or a
        list of them.
    image_root:
        The folder of the images; ``annos/000001.json`` describes ``<image_root>/000001.jpg``
        (``.jpeg``/``.png`` accepted too).
    aggregate:
        How item attributes become the image's: ``"largest"`` (the largest item's codes) or
        ``"max"`` (each attribute's largest code).
    relative_to:
        Write ``path`` relative to this folder (POSIX); default absolute paths.
    check_images:
        A missing image is a :class:`DataError` (default); ``False`` skips the check.

    Returns a DataFrame with :data:`COLUMNS`; ``attrs["skipped"]`` lists annotation files left out
    (no item of a known category) and ``attrs["note"]`` says so in one line (empty when none).
    """
    if aggregate not in AGGREGATES:
        raise ConfigError(did_you_mean("DFR aggregate", aggregate, AGGREGATES,
                                       "'largest' takes the largest item's attributes, 'max' the largest code"))
    root = Path(image_root)
    if check_images and not root.is_dir():
        raise DataError(f"DFR images: {root} is not a folder; give DeepFashion2's image folder")
    rows, skipped = [], []
    for file in _annotation_files(annotations):
        row = _image_row(file, _read(file), aggregate)
        if row is None:
            skipped.append(str(file))
            continue
        image = _image(file, root, check_images)
        path = Path(os.path.relpath(os.path.abspath(image), os.path.abspath(relative_to))).as_posix() \
            if relative_to is not None else os.path.abspath(image)
        rows.append({"path": path, **row})
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame.attrs["skipped"] = skipped
    frame.attrs["note"] = (f"{len(skipped)} image(s) left out: no item of a known DeepFashion2 category (ids 1-13): "
                           + ", ".join(Path(s).name for s in skipped[:5]) + (" ..." if len(skipped) > 5 else "")
                           ) if skipped else ""
    if frame.empty:
        raise DataError(f"DFR annotations: none of the {len(skipped)} image(s) has an item of a known category; "
                        "check that these are DeepFashion2 annotations")
    return frame


def write_dfr_manifest(annotations: str | Path | Sequence[str | Path], image_root: str | Path,
                       out: str | Path | None = None, *, aggregate: str = "largest") -> Path:
    """Write :func:`dfr_manifest` as a CSV (default ``<image_root>/../dfr.csv``) and its label-space
    sidecar ``<out>.classes.txt`` (the 13 DeepFashion2 categories in id order); returns the
    CSV's path. Image paths are relative to the CSV's folder when the images lie inside it
    (the engine's requirement), else absolute (carve and write the splits with
    :meth:`~shiftbench.datasets.attributes.AttributeSplits.write`, which links them in). The
    skip note, if any, is written to ``<out>.note.txt`` and issued as a warning."""
    root = Path(image_root)
    out = Path(out) if out is not None else root.resolve().parent / "dfr.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    folder = os.path.realpath(out.parent)
    inside = os.path.realpath(root).startswith(folder.rstrip(os.sep) + os.sep)
    frame = dfr_manifest(annotations, root, aggregate=aggregate, relative_to=out.parent if inside else None)
    frame.to_csv(out, index=False)
    out.with_name(out.name + ".classes.txt").write_text("\n".join(DEEPFASHION2_CATEGORIES) + "\n", encoding="utf-8")
    note = out.with_name(out.name + ".note.txt")
    if frame.attrs["note"]:
        note.write_text(frame.attrs["note"] + "\n", encoding="utf-8")
        warnings.warn(frame.attrs["note"], stacklevel=2)
    else:
        note.unlink(missing_ok=True)
    return out
