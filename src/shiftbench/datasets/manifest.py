"""A CSV or Parquet manifest: one row per image with columns ``path,label[,group]``.

Other columns are metadata: ``groups=colA,colB`` (the setting ``manifest:<file>?groups=colA,colB``)
makes their value combinations the examples' groups, for worst-group accuracy.

Multi-label data (several objects per image, as in DeepFashion Remixed) uses the column
``labels`` instead of ``label``: ``;``-separated labels per row (``3;7``, ``skirt;top``), an
empty cell for an image with no labels. Its targets are label sets, and the engine stores every
class's score per example so mAP is computed from the store (:mod:`shiftbench.views.multilabel`).

A manifest may declare its label space -- ``classes=`` or a sidecar ``<manifest>.classes.txt``
(one class name per line) / ``<manifest>.classes.json`` (``{"classes": [...]}`` or
``{"label_space": "imagenet-1k"}``) -- so that a subset of a known label space (an
ImageNetV2-style replication of some ImageNet classes) keeps that space's indices and size and
evaluates a 1000-output model; see :func:`manifest` and :class:`LabelSpace`.
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Union

import numpy as np
import pandas as pd

from shiftbench.datasets import classmaps as cm
from shiftbench.datasets.base import FileDataset
from shiftbench.datasets.registry import register_dataset
from shiftbench.errors import ConfigError, DataError, closest, did_you_mean


def _read_table(path: Path) -> pd.DataFrame:
    suffix = path.suffix.lower()
    if not path.is_file():
        raise DataError(f"manifest {path} does not exist (expected a .csv or .parquet file with columns path,label[,group])")
    try:
        if suffix == ".csv":
            return pd.read_csv(path, dtype={"path": str, "group": str, "labels": str}, keep_default_na=False, na_values=[""])
        if suffix in (".parquet", ".pq"):
            return pd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - any unreadable table is one DataError
        raise DataError(f"manifest {path}: cannot read ({type(exc).__name__}: {exc})") from exc
    raise DataError(f"manifest {path}: unknown format {suffix!r}; use .csv or .parquet")


# --------------------------------------------------------------------------- label spaces
KNOWN_LABEL_SPACES: tuple[str, ...] = ("imagenet-1k", "cifar10")
"""Label spaces a manifest may name instead of listing its classes."""
SIDECAR_SUFFIXES: tuple[str, ...] = (".classes.txt", ".classes.json")
"""A manifest ``m.csv`` declares its label space in ``m.csv.classes.txt`` or ``m.csv.classes.json``."""

Classes = Union[str, Path, Sequence[str]]


def _norm(label: str) -> str:
    """Case and separators folded: ``Great white-shark`` -> ``great_white_shark``."""
    return re.sub(r"[\s_-]+", "_", label.strip().lower())


@dataclass(frozen=True)
class LabelSpace:
    """A declared label space: ``classes[i]`` is the name of index ``i``.

    ``name`` is a known label space (``imagenet-1k``, ``cifar10``) or ``None`` for a list of
    names; ``wnids`` are ImageNet's WordNet ids (``n01440764`` = 0) when ``name`` is
    ``imagenet-1k``; ``source`` says where it was declared (for messages).
    """

    name: str | None
    classes: tuple[str, ...]
    wnids: tuple[str, ...] | None = None
    source: str = "the classes= list"

    @cached_property
    def _exact(self) -> dict[str, tuple[int, ...]]:
        out: dict[str, list[int]] = {}
        for i, c in enumerate(self.classes):
            out.setdefault(c, []).append(i)
        for i, w in enumerate(self.wnids or ()):
            out.setdefault(w, []).append(i)
        return {k: tuple(v) for k, v in out.items()}

    @cached_property
    def _folded(self) -> dict[str, tuple[int, ...]]:
        out: dict[str, set[int]] = {}
        for k, v in self._exact.items():
            out.setdefault(_norm(k), set()).update(v)
        return {k: tuple(sorted(v)) for k, v in out.items()}

    def describe(self) -> str:
        """``imagenet-1k`` or ``the 3 classes of m.csv.classes.txt``."""
        return self.name or f"the {len(self.classes)} classes of {self.source}"

    def index(self, label: Any) -> int:
        """The index of ``label``: an integer index ``0 <= i < len(classes)``, a class name or
        (ImageNet) a wnid, matched exactly, else ignoring case and ``_``/``-``/space; an unknown,
        out-of-range or ambiguous label is a :class:`DataError` (with the closest names)."""
        k = len(self.classes)
        if isinstance(label, (int, np.integer)) and not isinstance(label, bool):
            if not 0 <= int(label) < k:
                raise DataError(f"label {int(label)} is outside 0..{k - 1} of {self.describe()}")
            return int(label)
        text = str(label).strip()
        hits = self._exact.get(text) or self._folded.get(_norm(text))
        if hits is None and text.isdigit():
            return self.index(int(text))
        if hits is None:
            near = closest(text, self._exact)
            raise DataError(f"label {text!r} is not a class of {self.describe()}"
                            + ("; did you mean " + ", ".join(map(repr, near)) + "?" if near else "")
                            + f" (labels are class names{', wnids' if self.wnids else ''} or indices 0..{k - 1})")
        if len(hits) > 1:
            which = ", ".join(f"{self.wnids[i]} = {i}" if self.wnids else str(i) for i in hits)
            raise DataError(f"label {text!r} is ambiguous in {self.describe()} ({which}); "
                            f"use the {'wnid' if self.wnids else 'index'}")
        return hits[0]

    def to_json(self) -> dict[str, Any]:
        """The sidecar's content: ``{"label_space": name}`` or ``{"classes": [...]}``."""
        return {"label_space": self.name} if self.name else {"classes": list(self.classes)}


def known_label_space(name: str) -> LabelSpace:
    """``imagenet-1k`` (1000 classes in sorted-wnid order; labels may be indices, wnids or
    names) or ``cifar10``; any other name is a :class:`ConfigError` with the closest names."""
    if name == "imagenet-1k":
        return LabelSpace(name, cm.imagenet_names(), cm.imagenet_wnids(), source=name)
    if name == "cifar10":
        from shiftbench.datasets.arrays import CIFAR10_CLASSES  # deferred: loads Pillow

        return LabelSpace(name, tuple(CIFAR10_CLASSES), source=name)
    raise ConfigError(did_you_mean("label space", name, KNOWN_LABEL_SPACES,
                                   "or give the class names: a list, or a .txt file with one per line"))


def _names(values: Any, source: str) -> LabelSpace:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
        raise DataError(f"{source}: classes must be a non-empty list of class names")
    names = [v.strip() if isinstance(v, str) else v for v in values]
    first: dict[str, int] = {}
    for i, v in enumerate(names):
        if not isinstance(v, str) or not v:
            raise DataError(f"{source}: class {i} is {values[i]!r}; every class needs a non-empty name")
        if first.setdefault(v, i) != i:
            raise DataError(f"{source}: class {v!r} appears twice (indices {first[v]} and {i})")
    return LabelSpace(None, tuple(names), source=source)


def read_classes_file(path: Path | str) -> LabelSpace:
    """A label-space file: ``.txt`` with one class name per line (index = line number - 1;
    blank lines at the end are ignored), or ``.json`` holding ``{"classes": [...]}`` or
    ``{"label_space": "imagenet-1k"}``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"label space {path}: cannot read ({type(exc).__name__}: {exc})") from exc
    if path.suffix.lower() == ".txt":
        lines = text.rstrip().splitlines()
        blank = next((i for i, line in enumerate(lines) if not line.strip()), None)
        if blank is not None:
            raise DataError(f"label space {path} line {blank + 1} is blank; write one class name per line")
        return _names(lines, str(path))
    if path.suffix.lower() != ".json":
        raise DataError(f"label space {path}: use a .txt (one class name per line) or .json file")
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise DataError(f"label space {path}: invalid JSON ({exc})") from exc
    if not isinstance(raw, dict) or len(raw) != 1 or not {"classes", "label_space"} & set(raw):
        raise DataError(f'label space {path}: expected {{"classes": [names...]}} or {{"label_space": "imagenet-1k"}}')
    if "label_space" in raw:
        try:
            return replace(known_label_space(str(raw["label_space"])), source=str(path))
        except ConfigError as exc:
            raise DataError(f"label space {path}: {exc}") from None
    return _names(raw["classes"], str(path))


def label_space_of(classes: Classes | LabelSpace) -> LabelSpace:
    """``classes`` as a :class:`LabelSpace`: a known name (:data:`KNOWN_LABEL_SPACES`), a
    ``.txt``/``.json`` file (:func:`read_classes_file`) or a list of class names."""
    if isinstance(classes, LabelSpace):
        return classes
    if isinstance(classes, Path) or (isinstance(classes, str) and classes.lower().endswith((".txt", ".json"))):
        return read_classes_file(classes)
    if isinstance(classes, str):
        return known_label_space(classes)
    return _names(list(classes) if not isinstance(classes, Sequence) else classes, "the classes= list")


def sidecar_of(path: Path | str) -> Path | None:
    """The label-space sidecar of manifest ``path`` (``<path>.classes.txt`` or
    ``<path>.classes.json``), or ``None``; both present is a :class:`DataError`."""
    path = Path(path)
    found = [p for p in (path.with_name(path.name + s) for s in SIDECAR_SUFFIXES) if p.is_file()]
    if len(found) > 1:
        raise DataError(f"manifest {path}: two label-space sidecars ({found[0].name}, {found[1].name}); keep one")
    return found[0] if found else None


def write_label_space(path: Path | str, classes: Classes | LabelSpace) -> Path:
    """Write the sidecar ``<path>.classes.json`` declaring manifest ``path``'s label space
    (replacing a ``.classes.txt`` one), atomically; returns the sidecar's path."""
    path = Path(path)
    space = label_space_of(classes)
    sidecar = path.with_name(path.name + ".classes.json")
    tmp = sidecar.with_name(f".{sidecar.name}.tmp")
    tmp.write_text(json.dumps(space.to_json(), indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, sidecar)
    path.with_name(path.name + ".classes.txt").unlink(missing_ok=True)
    return sidecar


def _declared(path: Path, classes: Classes | None) -> LabelSpace | None:
    """The label space given by ``classes`` and/or the sidecar; both must agree."""
    sidecar = sidecar_of(path)
    side = read_classes_file(sidecar) if sidecar else None
    given = label_space_of(classes) if classes is not None else None
    if side and given and (side.name, side.classes) != (given.name, given.classes):
        raise DataError(f"manifest {path}: classes= ({given.describe()}) disagrees with its sidecar {sidecar} "
                        f"({side.describe()}); drop one")
    return given or side


# --------------------------------------------------------------------------- manifest
def check_table(df: pd.DataFrame, where: str, expected: str = "path,label[,group]") -> None:
    """Raise a one-line :class:`DataError` naming ``where`` if ``df`` lacks ``path`` or ``label``
    (listing its columns and the ``expected`` ones) or has no rows."""
    missing = [c for c in ("path", "label") if c not in df.columns and not (c == "label" and "labels" in df.columns)]
    if missing:
        raise DataError(f"{where}: no column {missing[0]!r} (columns: {', '.join(map(str, df.columns))}; "
                        f"expected {expected})")
    if df.empty:
        raise DataError(f"{where}: no rows")


def _inside(real: str, root_real: str) -> bool:
    return real == root_real or real.startswith(root_real.rstrip(os.sep) + os.sep)


def _realpath(full: str, parents: dict[str, str]) -> str:
    """``os.path.realpath(full)``, resolving each parent folder once (50,000 rows in a few
    folders cost a few ``lstat`` calls each, not one per path component)."""
    parent, base = os.path.split(full)
    if base in ("", ".", ".."):
        return os.path.realpath(full)
    if parent not in parents:
        parents[parent] = os.path.realpath(parent)
    candidate = os.path.join(parents[parent], base)
    return os.path.realpath(candidate) if os.path.islink(candidate) else candidate


def manifest(path: Path | str, root: Path | str | None = None, name: str | None = None,
             label_space: str | None = None, class_names: list[str] | None = None,
             classes: Classes | None = None, groups: str | Sequence[str] | None = None) -> FileDataset:
    """Images listed in a CSV or Parquet table with columns ``path``, ``label`` and optionally
    ``group``, in the table's row order.

    ``path`` is relative to ``root`` (default: the manifest's folder) or absolute; a path
    that resolves outside ``root`` -- through ``..``, an absolute path elsewhere, or a symlink
    -- is a :class:`DataError` naming the row and the path, as is an absent file. Ids are the
    paths relative to ``root`` (POSIX).

    **Label space.** A manifest may declare its classes with ``classes=`` -- a known label
    space (``"imagenet-1k"``, ``"cifar10"``), a list of names (index = position) or a
    ``.txt``/``.json`` file -- and/or a sidecar next to it, ``<manifest>.classes.txt`` (one
    name per line) or ``<manifest>.classes.json`` (``{"classes": [...]}`` or
    ``{"label_space": "imagenet-1k"}``); both given must agree. Then ``num_classes`` is the
    space's size and each label (an index, a class name or, for ImageNet, a wnid such as
    ``n01440764``) maps onto its index; an unknown label is a :class:`DataError` naming the
    row, the label and the closest classes. ``label_space="imagenet-1k"`` and
    ``class_names=[...]`` are older spellings of ``classes=``. Undeclared: integer labels give
    ``max(label) + 1`` classes, names are sorted into indices.

    The dataset's ``label_space`` is the known space's name, else ``label_space`` or
    ``custom:<name>`` (``name`` defaults to the manifest's file stem).

    **Groups.** ``groups`` names metadata columns (a list, or ``"colA,colB"`` as in the setting
    ``manifest:<file>?groups=colA,colB``); each example's group is the combination of their
    values written ``colA=v|colB=w`` (a missing value is empty: ``colA=``). It replaces a
    ``group`` column, and the engine stores worst-group accuracy beside the average
    (:func:`shiftbench.views.groups.group_accuracy`). A column the manifest lacks is a
    :class:`DataError` naming it and the manifest's columns.
    """
    path = Path(path)
    df = _read_table(path)
    where = f"manifest {path}"
    check_table(df, where)
    group_columns = _group_columns(df, groups, where)
    if classes is None:
        classes = class_names if class_names is not None else (label_space if label_space in KNOWN_LABEL_SPACES
                                                                else None)
    space = _declared(path, classes)
    name = name or path.stem
    root = Path(root) if root is not None else path.parent
    if not root.is_dir():
        raise DataError(f"{where}: data root {root} is not a folder")
    root_real = os.path.realpath(root)
    row_word = "line" if path.suffix.lower() == ".csv" else "row"
    first_row = 2 if row_word == "line" else 1  # csv line 1 is the header

    ids: list[str] = []
    paths: list[Path] = []
    seen: dict[str, int] = {}
    parents: dict[str, str] = {}
    for r, raw in enumerate(df["path"].tolist()):
        at = f"{where} {row_word} {r + first_row}"
        if not isinstance(raw, str) or not raw.strip():
            raise DataError(f"{at}: empty path")
        p = Path(raw)
        full = p if p.is_absolute() else root / p
        real = _realpath(str(full), parents)
        if not _inside(real, root_real):
            raise DataError(f"{at}: path {raw!r} resolves to {real}, outside the data root {root_real}")
        if not os.path.isfile(real):
            raise DataError(f"{at}: image {raw!r} not found ({full})")
        id_ = Path(os.path.relpath(os.path.normpath(os.path.abspath(full)), os.path.abspath(root))).as_posix()
        if id_.startswith("../"):  # lexical path outside, real path inside (a symlinked root): key by real path
            id_ = Path(os.path.relpath(real, root_real)).as_posix()
        if id_ in seen:
            raise DataError(f"{at}: {raw!r} repeats {row_word} {seen[id_] + first_row}")
        seen[id_] = r
        ids.append(id_)
        paths.append(Path(real))

    notes: tuple[str, ...] = ()
    multi = "labels" in df.columns and "label" not in df.columns
    if multi:
        targets, names, k, notes = _label_sets(df["labels"], where, row_word, first_row, space, ids)
    else:
        targets, names, k = _labels(df["label"], where, row_word, first_row, space)
    example_groups = None
    if group_columns:
        example_groups = metadata_groups(df, group_columns)
    elif "group" in df.columns:
        example_groups = [_cell(g) for g in df["group"].tolist()]
    space_name = (space.name if space is not None else None) or label_space or f"custom:{name}"
    return FileDataset(name=name, ids=ids, targets=targets, label_space=space_name,
                       num_classes=k, class_names=names, groups=example_groups, root=root, paths=paths,
                       multi_label=multi, notes=notes)


def _cell(v: Any) -> str:
    """A metadata cell as text: ``""`` when missing, integral floats without ``.0``."""
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return ""
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))
    return str(v)


def _group_columns(df: pd.DataFrame, groups: str | Sequence[str] | None, where: str) -> list[str]:
    """The metadata columns ``groups`` names (``"a,b"`` or a list), checked against ``df``."""
    if groups is None:
        return []
    cols = [c.strip() for c in groups.split(",")] if isinstance(groups, str) else [str(c).strip() for c in groups]
    if not cols or not all(cols):
        raise DataError(f"{where}: groups={groups!r} names no column; give metadata columns, e.g. groups=label")
    for c in cols:
        if c not in df.columns:
            raise DataError(f"{where}: no column {c!r} to group by (columns: {', '.join(map(str, df.columns))}); "
                            "name one of them in groups=")
    return list(dict.fromkeys(cols))


def metadata_groups(df: pd.DataFrame, columns: Sequence[str]) -> list[str]:
    """Each row's group: the values of ``columns`` written ``colA=v|colB=w`` (a missing value is
    empty). The engine scores worst-group accuracy over these (:mod:`shiftbench.views.groups`)."""
    cells = [[f"{c}={_cell(v)}" for v in df[c].tolist()] for c in columns]
    return ["|".join(parts) for parts in zip(*cells)]


def _listed(items: Sequence[str], n: int = 5) -> str:
    return ", ".join(items[:n]) + (f", ... ({len(items) - n} more)" if len(items) > n else "")


def _label_sets(col: pd.Series, where: str, row_word: str, first_row: int, space: LabelSpace | None,
                ids: Sequence[str]) -> tuple[list[tuple[int, ...]], list[str] | None, int, tuple[str, ...]]:
    """(label sets, class names, number of classes, notes) of a multi-label ``labels`` column:
    ``;``-separated labels per row; an empty cell is an example with no labels. A label outside
    the declared classes is dropped from its row and named in a note (never a crash)."""
    rows: list[list[str]] = []
    for v in col.tolist():
        empty = v is None or (isinstance(v, float) and pd.isna(v))
        rows.append([] if empty else [p.strip() for p in str(v).split(";") if p.strip()])
    notes: list[str] = []
    if space is not None:
        index: dict[str, int | None] = {}
        unknown: list[str] = []
        sets = []
        for r, labels in enumerate(rows):
            kept = set()
            for lab in labels:
                if lab not in index:
                    try:
                        index[lab] = space.index(int(lab) if lab.isdigit() else lab)
                    except DataError:
                        index[lab] = None
                if index[lab] is None:
                    unknown.append(f"{row_word} {r + first_row} {lab!r}")
                else:
                    kept.add(index[lab])
            sets.append(tuple(sorted(kept)))
        if unknown:
            notes.append(f"{where}: {len(unknown)} label(s) outside the {len(space.classes)} declared classes "
                         f"were dropped: {_listed(unknown)}")
        names, k = list(space.classes), len(space.classes)
    elif all(lab.isdigit() for labels in rows for lab in labels):
        sets = [tuple(sorted({int(lab) for lab in labels})) for labels in rows]
        k = max((max(s) for s in sets if s), default=-1) + 1
        if k == 0:
            raise DataError(f"{where}: every labels cell is empty; give each image its ';'-separated labels")
        names = None
    else:
        names = sorted({lab for labels in rows for lab in labels})
        lookup = {n: i for i, n in enumerate(names)}
        sets = [tuple(sorted({lookup[lab] for lab in labels})) for labels in rows]
        k = len(names)
    none = [ids[i] for i, s in enumerate(sets) if not s]
    if none:
        notes.append(f"{where}: {len(none)} image(s) have no labels (negatives for every class in mAP, "
                     f"left out of top-1-in-set accuracy): {_listed(none)}")
    return sets, names, k, tuple(notes)


def _labels(col: pd.Series, where: str, row_word: str, first_row: int,
            space: LabelSpace | None) -> tuple[list[int], list[str] | None, int]:
    """(targets, class names, number of classes) of the ``label`` column."""
    values = col.tolist()
    for r, v in enumerate(values):
        if v is None or (isinstance(v, float) and pd.isna(v)) or (isinstance(v, str) and not v.strip()):
            raise DataError(f"{where} {row_word} {r + first_row}: empty label")
    if pd.api.types.is_float_dtype(col):
        raise DataError(f"{where}: labels must be integers or class names, got floats")
    if space is not None:
        index: dict[Any, int] = {}
        for r, v in enumerate(values):
            if v not in index:
                try:
                    index[v] = space.index(v)
                except DataError as exc:
                    raise DataError(f"{where} {row_word} {r + first_row}: {exc}") from None
        return [index[v] for v in values], list(space.classes), len(space.classes)
    if pd.api.types.is_integer_dtype(col) or all(isinstance(v, int) or (isinstance(v, str) and v.strip().isdigit())
                                                 for v in values):
        targets = [int(v) for v in values]
        if min(targets) < 0:
            r = targets.index(min(targets))
            raise DataError(f"{where} {row_word} {r + first_row}: negative label {targets[r]}")
        return targets, None, max(targets) + 1
    labels = [str(v).strip() for v in values]
    names = sorted(set(labels))
    lookup = {n: i for i, n in enumerate(names)}
    return [lookup[lab] for lab in labels], names, len(names)


@register_dataset("manifest", default_dir=None, label_space="custom:<name>",
                  layout="<file.csv|parquet> with columns path,label[,group] [+ <file>.classes.txt|json]")
def _manifest_entry(path: Path | str, **kwargs) -> FileDataset:
    return manifest(path, **kwargs)
