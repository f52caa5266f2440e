"""A CSV or Parquet manifest: one row per image with columns ``path,label[,group]``."""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from shiftbench.datasets import classmaps as cm
from shiftbench.datasets.base import FileDataset
from shiftbench.datasets.registry import register_dataset
from shiftbench.errors import DataError


def _read_table(path: Path) -> pd.DataFrame:
    suffix = path.suffix.lower()
    if not path.is_file():
        raise DataError(f"manifest {path} does not exist (expected a .csv or .parquet file with columns path,label[,group])")
    try:
        if suffix == ".csv":
            return pd.read_csv(path, dtype={"path": str, "group": str}, keep_default_na=False, na_values=[""])
        if suffix in (".parquet", ".pq"):
            return pd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - any unreadable table is one DataError
        raise DataError(f"manifest {path}: cannot read ({type(exc).__name__}: {exc})") from exc
    raise DataError(f"manifest {path}: unknown format {suffix!r}; use .csv or .parquet")


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
             label_space: str | None = None, class_names: list[str] | None = None) -> FileDataset:
    """Images listed in a CSV or Parquet table with columns ``path``, ``label`` and optionally
    ``group``, in the table's row order.

    ``path`` is relative to ``root`` (default: the manifest's folder) or absolute; a path
    that resolves outside ``root`` -- through ``..``, an absolute path elsewhere, or a symlink
    -- is a :class:`DataError` naming the row and the path, as is an absent file. Ids are the
    paths relative to ``root`` (POSIX). ``label`` is an integer class index, or a class name:
    names become indices into ``class_names`` (default: the sorted unique names), or ImageNet
    wnids when ``label_space="imagenet-1k"``. ``label_space`` defaults to ``custom:<name>``
    (``name`` defaults to the manifest's file stem).
    """
    path = Path(path)
    df = _read_table(path)
    where = f"manifest {path}"
    missing = [c for c in ("path", "label") if c not in df.columns]
    if missing:
        raise DataError(f"{where}: no column {missing[0]!r} (columns: {', '.join(map(str, df.columns))}; "
                        "expected path,label[,group])")
    if df.empty:
        raise DataError(f"{where}: no rows")
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

    targets, names, k = _labels(df["label"], where, row_word, first_row, label_space, class_names)
    groups = None
    if "group" in df.columns:
        groups = ["" if g is None or (isinstance(g, float) and pd.isna(g)) else str(g) for g in df["group"].tolist()]
    return FileDataset(name=name, ids=ids, targets=targets, label_space=label_space or f"custom:{name}",
                       num_classes=k, class_names=names, groups=groups, root=root, paths=paths)


def _labels(col: pd.Series, where: str, row_word: str, first_row: int, label_space: str | None,
            class_names: list[str] | None) -> tuple[list[int], list[str] | None, int]:
    values = col.tolist()
    for r, v in enumerate(values):
        if v is None or (isinstance(v, float) and pd.isna(v)) or (isinstance(v, str) and not v.strip()):
            raise DataError(f"{where} {row_word} {r + first_row}: empty label")
    if pd.api.types.is_integer_dtype(col) or all(isinstance(v, int) or (isinstance(v, str) and v.strip().isdigit())
                                                 for v in values):
        targets = [int(v) for v in values]
        if min(targets) < 0:
            r = targets.index(min(targets))
            raise DataError(f"{where} {row_word} {r + first_row}: negative label {targets[r]}")
        if label_space == "imagenet-1k":
            k, names = 1000, list(cm.imagenet_names())
        else:
            names = list(class_names) if class_names is not None else None
            k = len(names) if names is not None else max(targets) + 1
        if max(targets) >= k:
            r = targets.index(max(targets))
            raise DataError(f"{where} {row_word} {r + first_row}: label {targets[r]} is outside 0..{k - 1}")
        return targets, names, k
    if pd.api.types.is_float_dtype(col):
        raise DataError(f"{where}: labels must be integers or class names, got floats")
    labels = [str(v).strip() for v in values]
    if label_space == "imagenet-1k":
        index = dict(cm.imagenet_wnid_to_index())
        names = list(cm.imagenet_names())
    else:
        names = list(class_names) if class_names is not None else sorted(set(labels))
        index = {n: i for i, n in enumerate(names)}
    for r, lab in enumerate(labels):
        if lab not in index:
            raise DataError(f"{where} {row_word} {r + first_row}: label {lab!r} is not a known class"
                            + (" (an ImageNet wnid)" if label_space == "imagenet-1k" else ""))
    return [index[lab] for lab in labels], names, len(names)


@register_dataset("manifest", default_dir=None, label_space="custom:<name>",
                  layout="<file.csv|parquet> with columns path,label[,group]")
def _manifest_entry(path: Path | str, **kwargs) -> FileDataset:
    return manifest(path, **kwargs)
