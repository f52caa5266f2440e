"""Zero-shot evaluation through a (many-to-many) class map with max-logit pooling.

A model trained on one label space (the *source*: ImageNet-1k) is scored on a dataset in another
(the *target*: CIFAR-10) through a class map: each target class lists the source classes that
count as it (``automobile <- sports car, convertible, cab, ...``); a source class may feed
several target classes. Maps are data files a user supplies (CSV ``source,target`` rows or JSON
``{target: [sources, ...]}``), validated against the model's and the dataset's class names. Two
ImageNet-1k -> CIFAR-10 maps ship with the package (``shiftbench/data/classmaps/README.md``):
``imagenet-to-cifar10``, shiftbench's own (222 ImageNet classes, from the ImageNet-Vid-Robust
superclasses plus frogs, trucks and three antelopes for deer), and ``imagenet-to-cifar10-cinic``,
CINIC-10's synset assignment (Darlow et al. 2018, "CINIC-10 is not ImageNet or CIFAR-10"; 142
ImageNet classes), the one Andreassen et al. 2022 use.

As a setting: ``<setting>@classmap:<shipped name or file>``, e.g.
``cifar10@classmap:imagenet-to-cifar10`` or ``folder:/data/x@classmap:/maps/m.csv``; the
engine binds the map to the model's and the dataset's classes (:meth:`ClassMapSpec.bind`).

>>> import numpy as np
>>> view = ClassMapView("toy", {0: [0, 1], 1: [1, 2]}, num_source=3)   # source 1 feeds both
>>> view.scores(np.array([[0.0, 4.0, 9.0]])).tolist()
[[4.0, 9.0]]
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shiftbench.errors import ConfigError, DataError, closest, did_you_mean
from shiftbench.views import _ops
from shiftbench.views._keyed import ProjectedView

CLASSMAP_DIR = Path(__file__).parent.parent / "data" / "classmaps"

#: Class maps shipped as package data: setting spelling -> file in ``shiftbench/data/classmaps``
#: (where each comes from: the README there).
SHIPPED_CLASS_MAPS = {"imagenet-to-cifar10": "imagenet_to_cifar10.csv",
                      "imagenet-to-cifar10-cinic": "imagenet_to_cifar10_cinic.csv"}

#: How many unknown names an error message spells out before "and N more".
_SHOW = 5


class ClassMapView(ProjectedView):
    """Scores in a target label space pooled from the model's logits by a many-to-many class map.

    Max-logit pooling: target class ``t`` scores ``s_t = max_{c in S(t)} z_c`` over the source
    classes ``S(t)`` mapped to it (``z`` are the model's logits; a source class may be in several
    ``S(t)``). The prediction is ``argmax_t s_t`` (ties: lower target id), ``top5`` the five best
    target classes by ``s_t`` (``-1``-padded below 5 targets). This is the superclass projection
    Taori et al. 2020 use for the video sets and the ObjectNet restriction (max over member
    logits), applied to a label space the model was never trained on -- the zero-shot transfer of
    label spaces of Radford et al. 2021 (CLIP, §3.1.2), with a hand-made map in place of text
    prompts, as in Hendrycks et al.'s ImageNet -> CIFAR-10 evaluations of ImageNet models.

    Calibration (``confidence``, ``p_true``, ``p_sq_sum``) comes from ``softmax(s)`` over the
    pooled target scores, *not* from summing member probabilities: with overlapping ``S(t)`` a
    sum would count a shared source class twice and no longer be a distribution, and the pooled
    scores are the logits of the classifier actually being evaluated (as in
    :class:`~shiftbench.views.superclass.SuperclassView`).

    Every target class must have at least one source class (else it could never be predicted):
    a :class:`~shiftbench.errors.ConfigError` at construction names the ones without.

    ``target_to_sources`` maps target ids ``0 .. num_target - 1`` to source ids; ``num_target``
    defaults to the largest target id + 1, ``num_source`` (the model's output width) to the
    largest source id + 1. Targets passed to :meth:`apply` are target-space ids (or tuples).

    >>> import numpy as np
    >>> view = ClassMapView("toy", {0: [0, 1], 1: [1, 2]}, num_source=3)
    >>> cols = view.apply(np.array([[0.0, 4.0, 9.0], [5.0, 1.0, 0.0]]), [1, 1])
    >>> cols["pred"].tolist(), cols["correct"].tolist()
    ([1, 0], [True, False])
    """

    name: str
    convention: str
    num_source: int
    num_target: int
    target_names: tuple[str, ...] | None

    def __init__(self, name: str, target_to_sources: Mapping[int, Iterable[int]], num_target: int | None = None,
                 num_source: int | None = None, target_names: Sequence[str] | None = None):
        what = f"view {name!r}"
        if not isinstance(target_to_sources, Mapping) or not target_to_sources:
            raise ConfigError(f"{what}: the class map must be a non-empty dict target id -> [source ids]")
        pairs = sorted({(int(t), int(s)) for t, sources in target_to_sources.items()
                        for s in ([sources] if isinstance(sources, (int, np.integer)) else sources)})
        if not pairs:
            raise ConfigError(f"{what}: the class map lists no source class")
        tgt = np.array([t for t, _ in pairs], dtype=np.int64)
        src = np.array([s for _, s in pairs], dtype=np.int64)
        n_t = int(tgt.max()) + 1 if num_target is None else int(num_target)
        n_s = int(src.max()) + 1 if num_source is None else int(num_source)
        if tgt.min() < 0 or tgt.max() >= n_t:
            raise ConfigError(f"{what}: target id {int(tgt.min() if tgt.min() < 0 else tgt.max())} "
                              f"outside 0..{n_t - 1}; check the map or num_target")
        if src.min() < 0 or src.max() >= n_s:
            raise ConfigError(f"{what}: source id {int(src.min() if src.min() < 0 else src.max())} "
                              f"outside 0..{n_s - 1} (the model's {n_s} classes); check the map or num_source")
        present, starts = np.unique(tgt, return_index=True)
        names = _ops.label_names(target_names, n_t, what)
        if present.size < n_t:
            empty = sorted(set(range(n_t)) - set(present.tolist()))
            shown = [repr(names[t]) if names else str(t) for t in empty[:_SHOW]]
            more = f" and {len(empty) - _SHOW} more" if len(empty) > _SHOW else ""
            raise ConfigError(f"{what}: {len(empty)} of {n_t} target classes have no source class: "
                              f"{', '.join(shown)}{more}; map at least one source class to each")
        for a in (src, tgt, starts):
            a.flags.writeable = False
        self._set(name=str(name), convention="classmap-max", num_source=n_s, num_target=n_t, _n_out=n_t,
                  target_names=names, _src=src, _tgt=tgt, _starts=starts)

    @property
    def source_width(self) -> int:
        """The model output width the view reads (the runner checks the logits against it)."""
        return self.num_source

    @property
    def target_to_sources(self) -> dict[int, list[int]]:
        """Target id -> sorted source ids."""
        out: dict[int, list[int]] = {}
        for t, s in zip(self._tgt.tolist(), self._src.tolist()):
            out.setdefault(t, []).append(s)
        return out

    def _key(self) -> tuple:
        return (self.name, self.num_source, self.num_target, self.target_names,
                tuple(self._src.tolist()), tuple(self._tgt.tolist()))

    def _summary(self) -> str:
        return f"n_pairs={self._src.size}, num_source={self.num_source}, num_target={self.num_target}"

    def scores(self, logits: Any) -> np.ndarray:
        """Pooled target scores ``s[:, t] = max(logits[:, S(t)])``, shape ``(B, num_target)``."""
        x = _ops.as_logits(logits, self.name)
        if x.shape[1] != self.num_source:
            raise DataError(f"view {self.name!r}: the class map is over {self.num_source} source classes but "
                            f"the logits have {x.shape[1]}; use the model the map was built for")
        return np.maximum.reduceat(x[:, self._src], self._starts, axis=1)

    @classmethod
    def from_file(cls, path: str | Path, source_classes: Sequence[str] | int, target_classes: Sequence[str] | int,
                  name: str | None = None) -> ClassMapView:
        """A view from a class-map file (``.csv`` or ``.json``), validated against the class names.

        ``source_classes`` are the model's class names in output order (or just their number,
        when the model has none: the map must then use integer ids); ``target_classes`` the
        dataset's. File formats and name matching: :func:`read_class_map`, :func:`resolve_class_map`.

        >>> import tempfile, pathlib
        >>> f = pathlib.Path(tempfile.mkdtemp()) / "m.csv"
        >>> _ = f.write_text("source,target\\ntabby,cat\\nbeagle,dog\\n")
        >>> ClassMapView.from_file(f, ["tabby", "beagle", "tench"], ["cat", "dog"]).target_to_sources
        {0: [0], 1: [1]}
        """
        path = Path(path)
        pairs = read_class_map(path)
        t2s = resolve_class_map(pairs, source_classes, target_classes, where=f"class map {path}")
        targets = None if isinstance(target_classes, int) else [str(c) for c in target_classes]
        n_target = target_classes if isinstance(target_classes, int) else len(target_classes)
        n_source = source_classes if isinstance(source_classes, int) else len(source_classes)
        label = name or f"classmap:{path.stem}@{file_digest(path)}"
        try:
            return cls(label, t2s, num_target=n_target, num_source=n_source, target_names=targets)
        except ConfigError as exc:
            raise ConfigError(str(exc).replace(f"view {label!r}", f"class map {path}", 1)) from None


# --------------------------------------------------------------------------- files
def class_map_path(ref: str | Path) -> Path:
    """A shipped map's file (``imagenet-to-cifar10``, ``imagenet-to-cifar10-cinic``) or the user's
    file ``ref``, which must exist."""
    text = str(ref)
    if text in SHIPPED_CLASS_MAPS:
        return CLASSMAP_DIR / SHIPPED_CLASS_MAPS[text]
    path = Path(text).expanduser()
    if path.is_file():
        return path
    if path.suffix.lower() in (".csv", ".json") or "/" in text or "\\" in text:
        raise ConfigError(f"class map file {path} not found; give a .csv or .json file "
                          f"or a shipped map ({', '.join(SHIPPED_CLASS_MAPS)})")
    raise ConfigError(did_you_mean("class map", text, SHIPPED_CLASS_MAPS, "or give a path to a .csv or .json file"))


def file_digest(path: Path) -> str:
    """First 12 hex digits of the file's sha256 (part of the view name, so results key on the map)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]


def read_class_map(path: str | Path) -> list[tuple[str | int, str | int]]:
    """The ``(source, target)`` pairs of a class-map file, in file order.

    * CSV: a header with ``source`` and ``target`` columns (others, e.g. a readable name, are
      ignored), one row per pair; a many-to-many map repeats a source or a target over rows.
      Lines starting with ``#`` are comments.
    * JSON: ``{"target": ["source", ...], ...}`` (a single source may be a plain string or int).

    Entries are class names or integer ids (JSON integers are always ids); they are checked
    against the classes by :func:`resolve_class_map`. Raises :class:`ConfigError` naming the
    file for a missing file, an unknown format and malformed content.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(f"class map file {path} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"class map {path}: cannot read it ({exc}); give a UTF-8 .csv or .json file") from None
    suffix = path.suffix.lower()
    if suffix == ".csv":
        pairs = _read_csv(path, text)
    elif suffix == ".json":
        pairs = _read_json(path, text)
    else:
        raise ConfigError(f"class map {path}: unknown format {suffix or '(no extension)'!r}; "
                          "use .csv (source,target rows) or .json ({target: [sources]})")
    if not pairs:
        raise ConfigError(f"class map {path} lists no (source, target) pair")
    return pairs


def _read_csv(path: Path, text: str) -> list[tuple[str | int, str | int]]:
    lines = [(i, line) for i, line in enumerate(text.splitlines(), 1) if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise ConfigError(f"class map {path} is empty; write a 'source,target' header and one row per pair")
    reader = csv.reader(io.StringIO("\n".join(line for _, line in lines)))
    rows = list(reader)
    header = [h.strip().lower() for h in rows[0]]
    if "source" not in header or "target" not in header:
        raise ConfigError(f"class map {path}: the header must name 'source' and 'target' columns, got "
                          f"{','.join(rows[0])!r}")
    si, ti = header.index("source"), header.index("target")
    pairs: list[tuple[str | int, str | int]] = []
    for (lineno, _), row in zip(lines[1:], rows[1:]):
        cells = [c.strip() for c in row]
        if len(cells) <= max(si, ti) or not cells[si] or not cells[ti]:
            raise ConfigError(f"class map {path}, line {lineno}: needs a source and a target, got {','.join(row)!r}")
        pairs.append((cells[si], cells[ti]))
    return pairs


def _read_json(path: Path, text: str) -> list[tuple[str | int, str | int]]:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"class map {path}: invalid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"class map {path}: expected an object {{target: [sources, ...]}}, got {type(raw).__name__}")
    pairs: list[tuple[str | int, str | int]] = []
    for target, sources in raw.items():
        items = sources if isinstance(sources, list) else [sources]
        for s in items:
            if isinstance(s, bool) or not isinstance(s, (str, int)):
                raise ConfigError(f"class map {path}: target {target!r} lists {s!r}; sources must be names or integer ids")
            pairs.append((s, target))
        if not items:
            raise ConfigError(f"class map {path}: target {target!r} has an empty source list; "
                              "list at least one source class")
    return pairs


# --------------------------------------------------------------------------- names
def _norm(name: str) -> str:
    return re.sub(r"[\s_]+", " ", name).strip().casefold()


def resolve_class_map(pairs: Iterable[tuple[str | int, str | int]], source_classes: Sequence[str] | int,
                      target_classes: Sequence[str] | int, where: str = "class map") -> dict[int, list[int]]:
    """Turn ``(source, target)`` entries into ``{target id: [source ids]}``, checking every name.

    An entry is matched, in order, as an exact class name, a class name up to case, spaces and
    underscores (``great_white_shark`` = ``great white shark``), or an integer id
    ``0 .. n - 1`` (JSON integers are always ids). A ``*_classes`` given as an int (no names
    known) accepts ids only. Unknown entries raise one one-line :class:`ConfigError` naming
    ``where`` and, per side, the first few unknown names, their count and the closest class
    names; a name shared by several classes (ImageNet's two ``crane``) asks for the id.
    """
    pairs = list(pairs)
    src = _Resolver(source_classes, "source", "the model's")
    tgt = _Resolver(target_classes, "target", "the dataset's")
    src_ids = [src(s) for s, _ in pairs]
    tgt_ids = [tgt(t) for _, t in pairs]
    problems = [m for m in (src.problem(), tgt.problem()) if m]
    if problems:
        raise ConfigError(f"{where}: " + "; ".join(problems))
    out: dict[int, list[int]] = {}
    for s, t in zip(src_ids, tgt_ids):
        if s not in out.setdefault(t, []):
            out[t].append(s)
    return {t: sorted(v) for t, v in sorted(out.items())}


class _Resolver:
    """Name or id -> class index over one label space, collecting what does not resolve."""

    def __init__(self, classes: Sequence[str] | int, side: str, owner: str) -> None:
        self.side, self.owner = side, owner
        self.names = None if isinstance(classes, int) else [str(c) for c in classes]
        self.n = classes if isinstance(classes, int) else len(self.names)
        self.exact: dict[str, list[int]] = {}
        self.loose: dict[str, list[int]] = {}
        for i, c in enumerate(self.names or ()):
            self.exact.setdefault(c, []).append(i)
            self.loose.setdefault(_norm(c), []).append(i)
        self.unknown: list[str] = []
        self.ambiguous: dict[str, list[int]] = {}

    def __call__(self, entry: str | int) -> int:
        if isinstance(entry, int):
            return entry if 0 <= entry < self.n else self._bad(str(entry))
        hits = self.exact.get(entry) or self.loose.get(_norm(entry))
        if hits:
            if len(hits) > 1:
                self.ambiguous.setdefault(entry, hits)
            return hits[0]
        if re.fullmatch(r"\d+", entry.strip()):
            return int(entry) if int(entry) < self.n else self._bad(entry)
        return self._bad(entry)

    def _bad(self, entry: str) -> int:
        if entry not in self.unknown:
            self.unknown.append(entry)
        return -1

    def problem(self) -> str:
        """What did not resolve, in words ('' if everything did)."""
        ids = f"ids 0..{self.n - 1}"
        if self.unknown:
            shown = []
            for u in self.unknown[:_SHOW]:
                near = closest(u, self.names) if self.names else []
                shown.append(repr(u) + (f" (did you mean {near[0]!r}?)" if near else ""))
            more = f" and {len(self.unknown) - _SHOW} more" if len(self.unknown) > _SHOW else ""
            fix = (f"use {self.owner} class names or {ids}" if self.names is not None
                   else f"{self.owner} classes have no names: use {ids}")
            return (f"{len(self.unknown)} unknown {self.side} class{'es' if len(self.unknown) > 1 else ''}: "
                    f"{', '.join(shown)}{more}; {fix}")
        if self.ambiguous:
            name, hits = next(iter(self.ambiguous.items()))
            return (f"{self.side} class {name!r} names {len(hits)} of {self.owner} classes "
                    f"(ids {', '.join(map(str, hits))}); write the integer id instead")
        return ""


# --------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class ClassMapSpec:
    """A class map named in a setting (``@classmap:<ref>``), bound to a model and a dataset by the runner.

    ``ref`` is a shipped map's name or a file path. :meth:`check` reads and parses the file (the
    early, model-free part of the validation); :meth:`bind` resolves its names against the
    model's and the dataset's classes and returns the :class:`ClassMapView`.
    """

    ref: str

    @property
    def path(self) -> Path:
        return class_map_path(self.ref)

    def check(self) -> ClassMapSpec:
        """Raise :class:`ConfigError` now if the file is missing or malformed; return self."""
        read_class_map(self.path)
        return self

    def bind(self, model: Any, dataset: Any) -> ClassMapView:
        """The view for ``model`` (a :class:`~shiftbench.models.base.LoadedModel`) on ``dataset``.

        Source names: the model's ``class_names``; for a 1000-class ImageNet model without
        names, the ImageNet-1k names shipped with shiftbench; otherwise ids only. Target names:
        the dataset's ``class_names`` (or ids only).
        """
        source: Sequence[str] | int = model.class_names or model.num_classes
        if not model.class_names and model.num_classes == 1000 and model.label_space == "imagenet-1k":
            from shiftbench.datasets.classmaps import imagenet_names  # deferred: loads Pillow

            source = list(imagenet_names())
        target: Sequence[str] | int = dataset.class_names or dataset.num_classes
        path = self.path
        label = self.ref if self.ref in SHIPPED_CLASS_MAPS else path.stem
        return ClassMapView.from_file(path, source, target, name=f"classmap:{label}@{file_digest(path)}")


def shipped_class_maps() -> dict[str, Path]:
    """Shipped class maps: name -> package file."""
    return {name: CLASSMAP_DIR / file for name, file in SHIPPED_CLASS_MAPS.items()}
