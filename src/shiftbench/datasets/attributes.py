"""Attribute-controlled shifts: carve a training set, an in-distribution test set and one
out-of-distribution test set per changed attribute value from a manifest with metadata columns.

This is the protocol of StreetView StoreFronts and DeepFashion Remixed (Hendrycks et al. 2021,
*The Many Faces of Robustness*, §3): fix the training distribution's value of every attribute
(year, country, camera; object scale, occlusion, viewpoint, zoom), then change **one attribute
at a time**, holding every other attribute at its training values, so a drop in accuracy is
attributable to that attribute alone.

Given a manifest (the engine's ``path,label[,group]`` format, see
:mod:`shiftbench.datasets.manifest`, plus attribute columns) and ``train = {A: T_A}`` (each
attribute ``A`` with its set of training values ``T_A``):

* the **ID pool** is ``{rows r : r[A] in T_A for every A}``; it is split, seeded and stratified
  by label, into ``train`` and ``id-test`` (``id_test`` a fraction of the pool or a size;
  per-label counts by the largest-remainder rule, see :func:`stratified_counts`);
* for every attribute ``A`` and every value ``v not in T_A``, the OOD test set ``A=v`` is
  ``{r : r[A] = v and r[B] in T_B for every B != A}`` (all of it, not split);
* optionally every split is balanced by label (``balance=True``: each label cut to the count of
  the rarest label present) and capped (``max_per_split``: a stratified sample of that size),
  in that order, after the train/id-test split.

Numeric attributes can be binned into named bins (:class:`Binning`): quantile bins of the
whole manifest (``3`` -> tertiles ``low, medium, high``; ``["thin", "medium", "thick"]``) or
fixed inner edges (``Binning(("left", "upright", "right"), edges=(-10, 10))``). Bins are
left-closed, ``[e_i, e_{i+1})``; the edges used are recorded. Rows with a missing value in
any attribute belong to no split (their count is reported).

Everything is seeded: each split draws from its own generator ``default_rng([seed,
crc32(split name)])``, so the same seed gives identical files, and adding an attribute does not
change the train/id-test split of the others. Rows keep the manifest's order inside a split.

:meth:`AttributeSplits.write` writes ``train.csv``, ``id-test.csv``, ``ood-<A>=<v>-<hash>.csv``
(:func:`split_file_name`: one file per value, however alike two values look) and ``splits.json``,
which maps each split to its file; each CSV is a manifest the engine evaluates as
``manifest:<file>``.

**Multi-label manifests** (DeepFashion Remixed has several clothing items per image and is
scored by mAP) have a column ``labels`` instead of ``label``: ``;``-separated class indices or
names per row (``3;7``, ``skirt;top``), an empty cell for an image without labels; the label
space is read as the engine reads it (:mod:`shiftbench.datasets.manifest`, including a
``<manifest>.classes.txt``/``.json`` sidecar). Three things change:

* **stratification key** (train/id-test split and ``max_per_split``): the row's *label set*,
  sorted class indices joined by ``;`` (labelset stratification, Sechidis et al. 2011, *On the
  Stratification of Multi-Label Data*, §2), so frequent combinations of items keep their
  share in both splits. A label set that occurs in one row only of the population being split
  cannot be stratified (a stratum of one falls wholly on one side); such rows are pooled by
  their *first* label (the set's smallest class index), which keeps each class's share
  approximately. Rows without labels form one stratum of their own.
* ``balance=True`` is single-label only (a :class:`ConfigError`): cutting every label to the
  rarest one's count has no single answer when a row carries several labels; cap with
  ``max_per_split`` instead.
* the written split CSVs keep the ``labels`` column (as read, whitespace stripped) and each
  gets a label-space sidecar ``<split>.csv.classes.txt`` (a copy of the input's sidecar, else
  the carve's class names), so every split is scored in the same label space even when it
  lacks some classes. :attr:`AttributeSplits.sizes` counts, per class, the rows containing it.

This module is data only: :func:`carve_splits` and :class:`AttributeSplits`. The study that
carves, writes the splits and evaluates a model on each (``attributes`` in the results store, the
report's "Attribute-controlled shifts" section), and the one-call
:func:`~shiftbench.studies.attributes.attribute_splits`, are :mod:`shiftbench.studies.attributes`.

>>> splits = carve_splits("digits.csv", train={"thickness": "medium", "slant": "upright"},
...                       bins={"thickness": ["thin", "medium", "thick"]}, seed=0)  # doctest: +SKIP
>>> splits.sizes                                                               # doctest: +SKIP
>>> files = splits.write("carved")       # {"train": Path("carved/train.csv"), ...}  # doctest: +SKIP
"""
from __future__ import annotations

import json
import math
import os
import shutil
import warnings
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from shiftbench.datasets.manifest import (
    SIDECAR_SUFFIXES,
    LabelSpace,
    _declared,
    _label_sets,
    _labels,
    _read_table,
    check_table,
    sidecar_of,
)
from shiftbench.errors import ConfigError, DataError, did_you_mean
from shiftbench.store.files import name_slug

RESERVED = ("path", "label", "labels", "group")
DEFAULT_BIN_NAMES = {2: ("low", "high"), 3: ("low", "medium", "high"), 4: ("low", "mid-low", "mid-high", "high"),
                     5: ("very-low", "low", "medium", "high", "very-high")}
IMAGE_MODES = ("auto", "link", "copy")


# ----------------------------------------------------------------------------- binning
@dataclass(frozen=True)
class Binning:
    """Named bins of a numeric attribute.

    ``labels`` name the bins in increasing order; ``edges`` are the ``len(labels) - 1`` inner
    edges, or ``None`` for quantile bins of the data (edges at the ``i / k`` quantiles,
    ``k = len(labels)``). A value ``x`` falls in bin ``i`` when ``e_i <= x < e_{i+1}``
    (``e_0 = -inf``, ``e_k = +inf``).
    """

    labels: tuple[str, ...]
    edges: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        labels = tuple(str(s) for s in self.labels)
        object.__setattr__(self, "labels", labels)
        if len(labels) < 2:
            raise ConfigError(f"binning {labels!r}: give at least 2 bins")
        if len(set(labels)) != len(labels):
            raise ConfigError(f"binning {labels!r}: bin names must be distinct")
        if self.edges is not None:
            edges = tuple(float(e) for e in self.edges)
            if len(edges) != len(labels) - 1:
                raise ConfigError(f"binning {', '.join(labels)}: {len(labels)} bins need {len(labels) - 1} inner "
                                  f"edges, got {len(edges)}")
            if any(not math.isfinite(e) for e in edges) or any(b <= a for a, b in zip(edges, edges[1:])):
                raise ConfigError(f"binning {', '.join(labels)}: edges {list(edges)} must be finite and strictly "
                                  "increasing")
            object.__setattr__(self, "edges", edges)


def as_binning(spec: int | str | Sequence[str] | Binning) -> Binning:
    """A :class:`Binning` from an int (``k`` quantile bins with default names), a list of bin
    names (quantile bins), a :class:`Binning`, or the CLI text ``K``, ``NAME,NAME,...`` or
    ``NAME,NAME,...@EDGE,EDGE,...`` (fixed inner edges), e.g. ``left,upright,right@-10,10``."""
    if isinstance(spec, Binning):
        return spec
    if isinstance(spec, bool):
        raise ConfigError(f"bin spec {spec!r}: give a number of bins, bin names or a Binning")
    if isinstance(spec, (int, np.integer)):
        k = int(spec)
        if k < 2:
            raise ConfigError(f"bin spec {k}: give at least 2 bins")
        return Binning(DEFAULT_BIN_NAMES.get(k, tuple(f"q{i + 1}" for i in range(k))))
    if isinstance(spec, str):
        names, _, edges = spec.partition("@")
        names = names.strip()
        if names.isdigit() and not edges:
            return as_binning(int(names))
        labels = tuple(s.strip() for s in names.split(",") if s.strip())
        if not edges:
            return Binning(labels)
        try:
            values = tuple(float(e) for e in edges.split(","))
        except ValueError as exc:
            raise ConfigError(f"bin spec {spec!r}: edges after '@' must be numbers, e.g. left,upright,right@-10,10"
                              ) from exc
        return Binning(labels, values)
    return Binning(tuple(spec))


def bin_values(values: pd.Series, binning: Binning, column: str = "value") -> tuple[pd.Series, tuple[float, ...]]:
    """Bin names for numeric ``values`` (missing values stay missing) and the inner edges used.

    Quantile edges are ``np.quantile(values, i / k)`` for ``i = 1 .. k-1`` over the non-missing
    values; edges that coincide (many ties) are a :class:`DataError`.
    """
    num = pd.to_numeric(values, errors="coerce")
    bad = values.notna() & num.isna()
    if bad.any():
        raise DataError(f"column {column!r} cannot be binned: value {values[bad].iloc[0]!r} is not a number")
    present = num.dropna().to_numpy(float)
    if binning.edges is not None:
        edges = binning.edges
    else:
        if present.size == 0:
            raise DataError(f"column {column!r} has no values to bin")
        k = len(binning.labels)
        edges = tuple(float(e) for e in np.quantile(present, np.arange(1, k) / k))
        if any(b <= a for a, b in zip(edges, edges[1:])):
            raise DataError(f"column {column!r}: quantile edges {list(edges)} coincide (too many equal values) for "
                            f"{k} bins; use fewer bins or fixed edges (NAME,...@EDGE,...)")
    idx = np.searchsorted(np.asarray(edges), num.fillna(0).to_numpy(float), side="right")
    out = pd.Series(np.asarray(binning.labels, dtype=object)[idx], index=values.index, dtype=object)
    out[num.isna()] = None
    return out, edges


# ----------------------------------------------------------------------------- sampling
def stratified_counts(counts: Sequence[int], total: int) -> list[int]:
    """How many of each class to draw so the draw has ``total`` items in proportion to
    ``counts`` (Hamilton's largest-remainder rule).

    Each class gets ``floor(total * n_c / N)``; the items left over go one each to the classes
    with the largest remainders (ties: the larger class, then the first). E.g. counts
    ``[5, 3, 2]``, total 5: quotas ``2.5, 1.5, 1.0`` -> ``[3, 1, 1]``.
    """
    counts = [int(c) for c in counts]
    n = sum(counts)
    if not 0 <= total <= n:
        raise ValueError(f"cannot draw {total} of {n}")
    if n == 0:
        return [0] * len(counts)
    quotas = [total * c / n for c in counts]
    alloc = [int(math.floor(q)) for q in quotas]
    order = sorted(range(len(counts)), key=lambda i: (-(quotas[i] - alloc[i]), -counts[i], i))
    for i in order[: total - sum(alloc)]:
        alloc[i] += 1
    return alloc


def stratified_sample(labels: np.ndarray, total: int, rng: np.random.Generator) -> np.ndarray:
    """Positions of a sample of size ``total`` of ``labels``, stratified by label
    (:func:`stratified_counts`), each class's members drawn uniformly without replacement;
    returned sorted."""
    classes, inverse = np.unique(labels, return_inverse=True)
    members = [np.flatnonzero(inverse == c) for c in range(len(classes))]
    take = stratified_counts([len(m) for m in members], total)
    chosen = [rng.permutation(m)[:k] for m, k in zip(members, take)]
    return np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, int)


def balanced_sample(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Positions of a label-balanced sample: every label present cut to the rarest label's count."""
    classes, inverse = np.unique(labels, return_inverse=True)
    if not len(classes):
        return np.zeros(0, int)
    members = [np.flatnonzero(inverse == c) for c in range(len(classes))]
    k = min(len(m) for m in members)
    return np.sort(np.concatenate([rng.permutation(m)[:k] for m in members]))


def _rng(seed: int, split: str) -> np.random.Generator:
    return np.random.default_rng([int(seed), zlib.crc32(split.encode())])


# ----------------------------------------------------------------------------- result
def split_file_name(split: str) -> str:
    """The manifest file of a split: ``train.csv``, ``id-test.csv``, and for an OOD split ``A=v``
    ``ood-<A=v slug>-<hash>.csv`` (:func:`~shiftbench.store.files.name_slug`: values such as ``a b``,
    ``a/b``, ``a_b`` and ``A_b`` each get their own file). Readers take a carve's file names from
    its ``splits.json`` rather than deriving them again.

    >>> split_file_name("id-test"), split_file_name("thickness=thin")
    ('id-test.csv', 'ood-thickness=thin-6c10f94af7.csv')
    """
    return f"{split}.csv" if split in ("train", "id-test") else f"ood-{name_slug(split)}.csv"


@dataclass
class AttributeSplits:
    """The carved splits: ``frames`` maps ``train``, ``id-test`` and each OOD split ``A=v`` to
    its rows (the manifest's columns; binned attributes hold the bin name, their raw value in
    ``<A>_value``; ``path`` absolute)."""

    frames: dict[str, pd.DataFrame]
    train: dict[str, tuple[str, ...]]
    bins: dict[str, dict[str, Any]]
    source: str
    seed: int
    id_test: float | int
    max_per_split: int | None
    balance: bool
    n_rows: int
    n_missing: dict[str, int]
    class_names: list[str] = field(default_factory=list)
    present: list[int] = field(default_factory=list)
    label_sets: dict[str, list[tuple[int, ...]]] | None = None
    sidecar: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def multi_label(self) -> bool:
        """True when carved from a multi-label manifest (column ``labels``); ``label_sets`` then
        holds each split's rows as tuples of class indices."""
        return self.label_sets is not None

    def _label_counts(self, name: str) -> dict[int, int]:
        if self.label_sets is None:
            return {int(k): int(v) for k, v in self.frames[name]["label"].value_counts().items()}
        counts = np.bincount([c for s in self.label_sets[name] for c in s], minlength=len(self.class_names))
        return {c: int(v) for c, v in enumerate(counts)}

    @property
    def names(self) -> list[str]:
        """Split names: ``train``, ``id-test``, then the OOD splits ``A=v``."""
        return list(self.frames)

    @property
    def ood(self) -> list[str]:
        """The OOD split names ``A=v``, one per changed attribute value."""
        return [n for n in self.frames if n not in ("train", "id-test")]

    @property
    def sizes(self) -> pd.DataFrame:
        """One row per split: ``split, kind, attribute, value, n`` and the count of every label."""
        rows = []
        for name, frame in self.frames.items():
            kind = name if name in ("train", "id-test") else "ood"
            attr, _, value = name.partition("=") if kind == "ood" else ("", "", "")
            counts = self._label_counts(name)
            rows.append({"split": name, "kind": kind, "attribute": attr, "value": value, "n": len(frame),
                         **{self.class_names[c]: int(counts.get(c, 0)) for c in self.present}})
        return pd.DataFrame(rows)

    def summary(self) -> dict[str, Any]:
        """What :meth:`write` puts in ``splits.json`` (without file names)."""
        return {"source": self.source, "seed": self.seed, "id_test": self.id_test,
                "max_per_split": self.max_per_split, "balance": self.balance,
                "train": {a: list(v) for a, v in self.train.items()}, "bins": self.bins,
                "n_rows": self.n_rows, "n_missing": self.n_missing, "class_names": self.class_names,
                **({"multi_label": True, "notes": list(self.notes)} if self.multi_label else {}),
                "splits": {r["split"]: {"kind": r["kind"], "attribute": r["attribute"] or None,
                                        "value": r["value"] or None, "n": int(r["n"]),
                                        "per_label": {self.class_names[c]: int(r[self.class_names[c]])
                                                      for c in self.present}}
                           for r in self.sizes.to_dict("records")}}

    def write(self, out_dir: str | Path, images: str = "auto") -> dict[str, Path]:
        """Write every split as a manifest CSV plus ``splits.json`` into ``out_dir``; returns
        ``{split: path}``. Evaluate a split with the setting ``manifest:<path>``.

        The engine resolves a manifest's paths inside the manifest's folder, so ``images``
        says how the images get there: ``auto`` writes paths relative to ``out_dir`` when every
        image already lies inside it, else acts as ``link``; ``link`` hard-links each image
        into ``out_dir/images/`` (copying when a hard link is impossible, e.g. across file
        systems); ``copy`` always copies. Files of an earlier carve listed in an existing
        ``splits.json`` are removed first.
        """
        if images not in IMAGE_MODES:
            raise ConfigError(did_you_mean("images mode", images, IMAGE_MODES))
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        out_real = os.path.realpath(out)
        paths = pd.concat([f["path"] for f in self.frames.values()], ignore_index=True)
        missing = [p for p in paths if not os.path.isfile(p)]
        if missing:
            raise DataError(f"{len(missing)} image(s) listed in {self.source} do not exist, e.g. {missing[0]}; fix "
                            "the manifest's paths")
        inside = all(_inside(os.path.realpath(p), out_real) for p in paths)
        mode = "relative" if images == "auto" and inside else ("link" if images == "auto" else images)
        base = _image_base(paths.tolist(), Path(self.source).parent)
        _remove_previous(out)
        files: dict[str, Path] = {}
        for name, frame in self.frames.items():
            frame = frame.copy()
            if mode == "relative":
                frame["path"] = [Path(os.path.relpath(os.path.realpath(p), out_real)).as_posix() for p in frame["path"]]
            else:
                frame["path"] = [_place(Path(p), base, out, mode) for p in frame["path"]]
            target = out / split_file_name(name)
            frame.to_csv(target, index=False)
            files[name] = target
            if self.multi_label:
                self._write_sidecar(target)
        summary = self.summary()
        summary["images"] = mode
        for name, target in files.items():
            summary["splits"][name]["file"] = target.name
            summary["splits"][name]["setting"] = f"manifest:{target.resolve()}"
        top = len(self.class_names) - 1
        short = [] if self.multi_label else [n for n, f in self.frames.items() if int(f["label"].max()) < top]
        if short:
            summary["note"] = (f"splits without the largest label ({self.class_names[top]}): {', '.join(short)}; the "
                               "engine reads a manifest's class count from its largest label, so evaluate them with "
                               "care")
            warnings.warn(summary["note"], stacklevel=2)
        (out / "splits.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
        return files

    def _write_sidecar(self, target: Path) -> None:
        """The label space of a multi-label split: a copy of the input's sidecar, else the class
        names one per line (``<split>.csv.classes.txt``)."""
        for suffix in SIDECAR_SUFFIXES:
            target.with_name(target.name + suffix).unlink(missing_ok=True)
        if self.sidecar is not None:
            src = Path(self.sidecar)
            shutil.copyfile(src, target.with_name(target.name + ".classes" + src.suffix))
        else:
            target.with_name(target.name + ".classes.txt").write_text("\n".join(self.class_names) + "\n")

def _inside(real: str, root_real: str) -> bool:
    return real == root_real or real.startswith(root_real.rstrip(os.sep) + os.sep)


def _image_base(paths: list[str], source_root: Path) -> str:
    """The folder image paths are kept relative to under ``images/``: the source manifest's
    folder when it holds every image, else their common folder."""
    root = os.path.realpath(source_root)
    reals = [os.path.realpath(p) for p in paths]
    if all(_inside(r, root) for r in reals):
        return root
    return os.path.commonpath([os.path.dirname(r) for r in reals])


def _place(src: Path, base: str, out: Path, mode: str) -> str:
    real = os.path.realpath(src)
    rel = Path(os.path.relpath(real, base))
    dest = out / "images" / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists() and os.path.samefile(dest, real):
        return (Path("images") / rel).as_posix()
    dest.unlink(missing_ok=True)
    if mode == "link":
        try:
            os.link(real, dest)
        except OSError:
            shutil.copy2(real, dest)
    else:
        shutil.copy2(real, dest)
    return (Path("images") / rel).as_posix()


def _remove_previous(out: Path) -> None:
    old = out / "splits.json"
    if not old.is_file():
        return
    try:
        listed = [s.get("file") for s in json.loads(old.read_text()).get("splits", {}).values()]
    except (ValueError, AttributeError):
        return
    for name in listed:
        if isinstance(name, str) and "/" not in name and name.endswith(".csv"):
            (out / name).unlink(missing_ok=True)
            for suffix in SIDECAR_SUFFIXES:
                (out / (name + suffix)).unlink(missing_ok=True)


# ----------------------------------------------------------------------------- validation
def _as_text(col: pd.Series) -> pd.Series:
    """Attribute values as strings (2010 and 2010.0 both ``'2010'``); missing stays missing."""
    def one(v: Any) -> Any:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return None
        if isinstance(v, (float, np.floating)) and float(v).is_integer():
            return str(int(v))
        return str(v).strip()
    return col.map(one).astype(object)


def _train_values(train: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    if not isinstance(train, Mapping) or not train:
        raise ConfigError("train: give at least one attribute and its training value(s), e.g. "
                          "{'thickness': 'medium'} (CLI: --train thickness=medium)")
    out = {}
    for attr, value in train.items():
        values = [value] if isinstance(value, (str, int, float, np.integer, np.floating)) else list(value)
        values = [str(int(v)) if isinstance(v, float) and v.is_integer() else str(v).strip() for v in values]
        if not values or any(not v for v in values):
            raise ConfigError(f"train: attribute {attr!r} needs a non-empty training value")
        if "=" in str(attr):    # the split A=v would be read back as another attribute and value
            raise ConfigError(f"train: attribute {attr!r}: rename the column without '='")
        out[str(attr)] = tuple(dict.fromkeys(values))
    return out


def _resolve_paths(df: pd.DataFrame, root: Path, where: str) -> list[str]:
    out = []
    for r, raw in enumerate(df["path"].tolist()):
        if not isinstance(raw, str) or not raw.strip():
            raise DataError(f"{where} row {r + 1}: empty path")
        p = Path(raw)
        out.append(os.path.abspath(p if p.is_absolute() else root / p))
    return out


def _describe(attr: str, values: tuple[str, ...]) -> str:
    return f"{attr}={values[0]!r}" if len(values) == 1 else f"{attr} in {list(values)!r}"


# ----------------------------------------------------------------------------- the API
def carve_splits(
    manifest: str | Path | pd.DataFrame,
    train: Mapping[str, Any],
    *,
    bins: Mapping[str, int | str | Sequence[str] | Binning] | None = None,
    id_test: float | int = 0.2,
    max_per_split: int | None = None,
    balance: bool = False,
    seed: int = 0,
    root: str | Path | None = None,
) -> AttributeSplits:
    """Carve attribute-controlled splits (Hendrycks et al. 2021, §3; module docstring).

    Parameters
    ----------
    manifest:
        A CSV/Parquet manifest (columns ``path, label[, group]`` plus attribute columns; or
        ``path, labels[, group]`` for multi-label data, see the module docstring), or a
        DataFrame of one (its relative paths are then relative to ``root``, default the
        current folder).
    train:
        ``{attribute: value or list of values}``: the training distribution.
    bins:
        ``{attribute: k | names | "names@edges" | Binning}`` for numeric attributes
        (:func:`as_binning`); ``train`` then names bins.
    id_test:
        Share of the ID pool for ``id-test`` (``0 < id_test < 1``) or its size (an int >= 1).
    max_per_split:
        Cap every split at this many rows (stratified sample by label, or by label set).
    balance:
        Cut every split to equal counts per label (the rarest label's count), before the cap;
        single-label manifests only.
    seed:
        Seed of every draw; the same seed gives identical splits.

    Raises :class:`ConfigError` for an unknown column or a bad option and :class:`DataError`
    for a training value that does not occur or an empty split, naming it and the fix.
    """
    df, where, source, space, sidecar = _read_input(manifest, root)
    multi = "labels" in df.columns and "label" not in df.columns
    if multi and balance:
        raise ConfigError(f"{where}: balance=True is for single-label manifests (column 'label'); a multi-label "
                          "row has several labels, so cap the splits with max_per_split instead")
    train_values = _train_values(train)
    bins = _check_options(df, where, train_values, dict(bins or {}), max_per_split)
    id_test = _check_id_test(id_test)
    bin_info = _apply_bins(df, where, bins)
    values = {a: _as_text(df[a]) for a in train_values}
    orders = {a: bin_info[a]["labels"] if a in bin_info else sorted(values[a].dropna().unique(), key=_natural)
              for a in train_values}
    for attr, allowed in train_values.items():
        absent = [v for v in allowed if v not in orders[attr]]
        if absent:
            present = orders[attr]
            raise DataError(did_you_mean(f"training value of {attr!r}:", absent[0], present,
                                         f"it does not occur in {where}; values: {', '.join(present[:12])}"
                                         + (" ..." if len(present) > 12 else "")))
    match = {a: values[a].isin(train_values[a]).to_numpy() for a in train_values}
    pool = np.flatnonzero(np.logical_and.reduce(list(match.values())))
    if not len(pool):
        each = "; ".join(f"{_describe(a, v)}: {int(match[a].sum())} rows" for a, v in train_values.items())
        raise DataError(f"{where}: no row matches every training value at once ({each}); choose training values "
                        "that occur together")
    notes: tuple[str, ...] = ()
    if multi:
        sets, class_names, notes = _multi_labels(df, where, space)
        present = sorted({c for s in sets for c in s})
        def strata(rows: np.ndarray) -> np.ndarray:
            return labelset_strata([sets[r] for r in rows])
    else:
        class_names = _integer_labels(df, where)
        labels = df["label"].to_numpy()
        present = sorted(int(c) for c in df["label"].unique())
        def strata(rows: np.ndarray) -> np.ndarray:
            return labels[rows]
    candidates = _id_split(pool, strata, id_test, seed, where, train_values)
    candidates |= _ood_rows(values, match, train_values, orders, where)
    frames: dict[str, pd.DataFrame] = {}
    chosen: dict[str, np.ndarray] = {}
    for name, rows in candidates.items():
        if not len(rows):
            raise DataError(f"{where}: split {name!r} is empty (ID pool of {len(pool)} rows); "
                            "change id_test or widen the training values")
        chosen[name] = _cap(rows, strata, name, seed, balance, max_per_split)
        frames[name] = df.iloc[chosen[name]].reset_index(drop=True)
    return AttributeSplits(frames=frames, train=train_values, bins=bin_info, source=source, seed=int(seed),
                           id_test=id_test, max_per_split=None if max_per_split is None else int(max_per_split),
                           balance=bool(balance), n_rows=len(df),
                           n_missing={a: int(v.isna().sum()) for a, v in values.items()}, class_names=class_names,
                           present=present,
                           label_sets={n: [sets[r] for r in rows] for n, rows in chosen.items()} if multi else None,
                           sidecar=sidecar, notes=notes)


def _read_input(manifest: str | Path | pd.DataFrame, root: str | Path | None
                ) -> tuple[pd.DataFrame, str, str, LabelSpace | None, str | None]:
    """The manifest as a fresh DataFrame with absolute paths, a name for messages, its source
    path and, for a multi-label manifest file, its declared label space and sidecar file."""
    space = sidecar = None
    if isinstance(manifest, pd.DataFrame):
        df, where = manifest.reset_index(drop=True).copy(), "manifest (DataFrame)"
        base = Path(root) if root is not None else Path(".")
        source = str(base.resolve() / "<DataFrame>")
    else:
        path = Path(manifest)
        df, where = _read_table(path), f"manifest {path}"
        base = Path(root) if root is not None else path.parent
        source = str(path.resolve())
        if "labels" in df.columns and "label" not in df.columns:
            space, found = _declared(path, None), sidecar_of(path)
            sidecar = str(found.resolve()) if found is not None else None
    check_table(df, where, "path,label[,group] (or path,labels[,group] for multi-label) plus attribute columns")
    df["path"] = _resolve_paths(df, base, where)
    return df, where, source, space, sidecar


def _check_options(df: pd.DataFrame, where: str, train_values: dict[str, tuple[str, ...]], bins: dict[str, Any],
                   max_per_split: int | None) -> dict[str, Any]:
    attr_cols = [c for c in df.columns if c not in RESERVED]
    for attr in train_values:
        if attr in RESERVED:
            raise ConfigError(f"train: {attr!r} is a manifest column, not an attribute; use one of: "
                              f"{', '.join(map(str, attr_cols)) or '(none)'}")
        if attr not in df.columns:
            raise ConfigError(did_you_mean(f"attribute column in {where}:", attr, attr_cols,
                                           f"columns: {', '.join(map(str, df.columns))}"))
    for attr in bins:
        if attr not in train_values:
            raise ConfigError(f"bins: {attr!r} is not a training attribute ({', '.join(train_values)}); give it a "
                              f"training value too, e.g. --train {attr}=<bin>")
        if f"{attr}_value" in df.columns:
            raise ConfigError(f"{where}: binning {attr!r} would overwrite the existing column '{attr}_value'")
    if max_per_split is not None and (isinstance(max_per_split, bool) or int(max_per_split) < 1):
        raise ConfigError(f"max_per_split must be a positive number of rows, got {max_per_split!r}")
    return bins


def _apply_bins(df: pd.DataFrame, where: str, bins: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Replace each binned column by its bin names (raw values to ``<A>_value``); returns the bins used."""
    info: dict[str, dict[str, Any]] = {}
    for attr, spec in bins.items():
        binning = as_binning(spec)
        raw = df[attr]
        try:
            df[attr], edges = bin_values(raw, binning, attr)
        except DataError as exc:
            raise DataError(f"{where}: {exc}") from exc
        df[f"{attr}_value"] = raw
        info[attr] = {"labels": list(binning.labels), "edges": list(edges),
                      "method": "quantile" if binning.edges is None else "fixed", "closed": "left: e_i <= x < e_(i+1)"}
    return info


def _id_split(pool: np.ndarray, strata: Any, id_test: float | int, seed: int, where: str,
              train_values: dict[str, tuple[str, ...]]) -> dict[str, np.ndarray]:
    """The ID pool split into ``train`` and ``id-test`` (stratified by ``strata(rows)``: the label,
    or the label-set key of :func:`labelset_strata`; seeded)."""
    n_test = int(round(id_test * len(pool))) if isinstance(id_test, float) else int(id_test)
    if n_test >= len(pool):
        raise DataError(f"{where}: the ID pool ({' and '.join(_describe(a, v) for a, v in train_values.items())}) "
                        f"has {len(pool)} rows, too few for an id-test set of {n_test} and a training set; "
                        "lower id_test or widen the training values")
    is_test = np.zeros(len(pool), bool)
    is_test[stratified_sample(strata(pool), n_test, _rng(seed, "id-test"))] = True
    return {"train": pool[~is_test], "id-test": pool[is_test]}


def _ood_rows(values: dict[str, pd.Series], match: dict[str, np.ndarray], train_values: dict[str, tuple[str, ...]],
              orders: dict[str, list[str]], where: str) -> dict[str, np.ndarray]:
    """``A=v`` -> rows with ``A = v`` and every other attribute at its training values."""
    out: dict[str, np.ndarray] = {}
    n = len(next(iter(values.values())))
    for attr, allowed in train_values.items():
        if len(orders[attr]) == len(allowed):
            raise DataError(f"{where}: attribute {attr!r} has no value besides its training value(s) "
                            f"{list(allowed)}, so no OOD split varies it; drop it from train or bin it differently")
        others = np.logical_and.reduce([match[b] for b in train_values if b != attr] or [np.ones(n, bool)])
        for v in orders[attr]:
            if v in allowed:
                continue
            is_v = (values[attr] == v).to_numpy()
            rows = np.flatnonzero(others & is_v)
            if not len(rows):
                held = ", ".join(_describe(b, train_values[b]) for b in train_values if b != attr)
                raise DataError(f"{where}: OOD split '{attr}={v}' is empty: none of the {int(is_v.sum())} rows with "
                                f"{attr}={v!r} has {held}; change the bins or the training values")
            out[f"{attr}={v}"] = rows
    return out


def _integer_labels(df: pd.DataFrame, where: str) -> list[str]:
    """Make ``df.label`` integer class indices in place; returns the class names.

    Integer labels stay; class names become indices into their sorted list, the name kept in
    ``label_name``, so every split is scored in the same label space even when it lacks some
    classes. The labels are parsed and checked (empty, negative, floats) as the engine parses
    the whole manifest (:func:`shiftbench.datasets.manifest.manifest`).
    """
    targets, names, k = _labels(df["label"], where, "row", 1, None)
    if names is not None:
        df["label_name"] = [str(v).strip() for v in df["label"].tolist()]
    df["label"] = targets
    return names if names is not None else [str(i) for i in range(k)]


def _natural(v: str) -> tuple[int, float, str]:
    try:
        return (0, float(v), v)
    except ValueError:
        return (1, 0.0, v)


def _check_id_test(id_test: Any) -> float | int:
    if isinstance(id_test, bool) or not isinstance(id_test, (int, float, np.integer, np.floating)):
        raise ConfigError(f"id_test must be a fraction in (0, 1) or a number of rows, got {id_test!r}")
    if isinstance(id_test, (float, np.floating)) and not float(id_test).is_integer():
        if not 0 < id_test < 1:
            raise ConfigError(f"id_test {id_test}: a fraction must lie strictly between 0 and 1")
        return float(id_test)
    if int(id_test) < 1:
        raise ConfigError(f"id_test {id_test}: give a fraction in (0, 1) or a size of at least 1 row")
    return int(id_test)


def _cap(rows: np.ndarray, strata: Any, name: str, seed: int, balance: bool,
         max_per_split: int | None) -> np.ndarray:
    if balance:
        rows = rows[balanced_sample(strata(rows), _rng(seed, f"balance:{name}"))]
    if max_per_split is not None and len(rows) > max_per_split:
        rows = rows[stratified_sample(strata(rows), int(max_per_split), _rng(seed, f"cap:{name}"))]
    return rows


# ----------------------------------------------------------------------------- multi-label
def labelset_strata(sets: Sequence[tuple[int, ...]]) -> np.ndarray:
    """The stratum of each row of a multi-label population (module docstring): its label set's
    sorted class indices joined by ``;`` (``(7, 3)`` -> ``"3;7"``; labelset stratification,
    Sechidis et al. 2011, §2); a set occurring once in ``sets`` falls back to its first
    (smallest) class, ``"first:3"``; an empty set is ``""``.

    >>> labelset_strata([(3, 7), (7, 3), (3, 9), ()]).tolist()
    ['3;7', '3;7', 'first:3', '']
    """
    keys = [";".join(str(c) for c in sorted(set(s))) for s in sets]
    counts: dict[str, int] = {}
    for k in keys:
        counts[k] = counts.get(k, 0) + 1
    out = [k if counts[k] > 1 or not k else f"first:{min(s)}" for k, s in zip(keys, sets)]
    return np.asarray(out, dtype=object).astype(str)


def _label_text(v: Any) -> str | None:
    """A ``labels`` cell as ``;``-joined text: a list (Parquet) joined, ``3.0`` as ``3``, blanks
    as ``None``."""
    if isinstance(v, (list, tuple, np.ndarray)):
        v = ";".join(_label_text(x) or "" for x in v)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))
    text = ";".join(t.strip() for t in str(v).split(";") if t.strip())
    return text or None


def _multi_labels(df: pd.DataFrame, where: str, space: LabelSpace | None
                  ) -> tuple[list[tuple[int, ...]], list[str], tuple[str, ...]]:
    """Parse ``df.labels`` in place (normalised text, see :func:`_label_text`) the way the engine
    reads a multi-label manifest; returns the label sets, the class names and the loader's notes
    (labels outside a declared space dropped, rows without labels)."""
    df["labels"] = [_label_text(v) for v in df["labels"].tolist()]
    col = pd.Series(df["labels"].tolist(), dtype=object)
    sets, names, k, notes = _label_sets(col, where, "row", 1, space, df["path"].tolist())
    return [tuple(s) for s in sets], list(names) if names is not None else [str(i) for i in range(k)], tuple(notes)
