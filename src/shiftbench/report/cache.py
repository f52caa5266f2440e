"""What a report build keeps for the next one: the results of its slow, deterministic analyses
and the record of every static figure written, under ``<report>/.shiftbench-cache/``.

A report is rebuilt far more often than its inputs change (a new highlight, another scale, one
more model in the store): the metric-informativeness ranking, the label-free estimates and the
similarity matrices are then recomputed from the same numbers, and every PNG, SVG and PDF is
drawn again byte for byte. :class:`ReportCache` keys each result by a content hash
(:func:`content_hash`) of everything it is computed from - the testbed's tables, the store's
finished keys and their finish times, the parameters - and of the source of the code that
computes it, plus the shiftbench, numpy, pandas and matplotlib versions; a result is reused only
when all of them are unchanged. Figures are keyed by a deterministic pickle of the figure itself
(:func:`~shiftbench.report.figures.stable_pickle`) and skipped when that and the files on disk are
unchanged.

Entries not used by a finished build are removed at its end (:meth:`ReportCache.prune`), so the
cache holds one build's worth. A damaged entry is recomputed, never trusted; deleting the
folder is always safe. ``write_html_report(..., cache=False)`` (``--no-cache``) builds without it.
"""
from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import os
import pickle
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from shiftbench.store.files import atomic_write
from shiftbench.version import __version__

T = TypeVar("T")

#: The folder, inside the report's directory, that holds the cache.
CACHE_DIR = ".shiftbench-cache"


def _versions() -> str:
    import matplotlib  # deferred: loads matplotlib

    return f"shiftbench {__version__}; numpy {np.__version__}; pandas {pd.__version__}; matplotlib {matplotlib.__version__}"


def _feed(h: Any, obj: Any) -> None:
    """Add ``obj`` to the hash ``h``, tagged by kind so that different values never collide."""
    if isinstance(obj, pd.DataFrame):
        h.update(b"DF")
        _feed(h, [str(c) for c in obj.columns])
        _feed(h, [str(d) for d in obj.dtypes])
        _feed(h, [str(n) for n in obj.index.names])
        h.update(pd.util.hash_pandas_object(obj, index=True).to_numpy().tobytes())
        # hash_pandas_object hashes rows; a frame without columns still has an index
        h.update(pd.util.hash_pandas_object(obj.index.to_frame(index=False), index=False).to_numpy().tobytes())
    elif isinstance(obj, pd.Series):
        _feed(h, ("Series", str(obj.name), obj.to_frame("v")))
    elif isinstance(obj, pd.Index):
        _feed(h, ("Index", obj.to_frame(index=False)))
    elif isinstance(obj, np.ndarray):
        h.update(b"ND" + str(obj.dtype).encode() + str(obj.shape).encode())
        h.update(np.ascontiguousarray(obj).tobytes() if obj.dtype != object else repr(obj.tolist()).encode())
    elif isinstance(obj, ModuleType) or inspect.isfunction(obj) or inspect.isclass(obj):
        path = inspect.getsourcefile(obj) if not isinstance(obj, ModuleType) else obj.__file__
        h.update(b"CODE" + (Path(path).read_bytes() if path and os.path.exists(path) else repr(obj).encode()))
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        _feed(h, (type(obj).__qualname__, [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)]))
    elif isinstance(obj, dict):
        h.update(b"DICT")
        for k in sorted(obj, key=repr):
            _feed(h, k)
            _feed(h, obj[k])
    elif isinstance(obj, (list, tuple, set, frozenset)):
        items = sorted(obj, key=repr) if isinstance(obj, (set, frozenset)) else obj
        h.update(f"SEQ{type(obj).__name__}{len(items)}".encode())
        for v in items:
            _feed(h, v)
    elif obj is None or isinstance(obj, (bool, int, float, str, bytes, np.generic, Path)):
        h.update(b"V" + type(obj).__name__.encode() + repr(obj).encode() + b"\0")
    else:
        raise TypeError(f"content_hash cannot hash {type(obj).__name__}; pass its tables or fields")


def content_hash(*parts: Any) -> str:
    """SHA-256 (hex) of ``parts``: frames and series by their values, index, columns and dtypes;
    arrays by dtype, shape and bytes; modules, functions and classes by their source file;
    dataclasses by their fields; containers element by element. Equal inputs give equal hashes
    in any process (no ``id`` and no string-hash order enters it)."""
    h = hashlib.sha256()
    for p in parts:
        _feed(h, p)
    return h.hexdigest()


def store_stamp(store: Any) -> pd.DataFrame:
    """What a store's analyses depend on: every finished key with its model, setting and finish
    time (a key re-evaluated with ``--force`` gets a new finish time)."""
    res = store.results()
    cols = [c for c in ("key", "model", "setting", "finished") if c in res]
    return res[cols].astype(str).sort_values(cols).reset_index(drop=True)


class ReportCache:
    """Results of a report's deterministic analyses, kept between builds (see the module docstring).

    ``root=None`` keeps nothing: every :meth:`get` computes."""

    def __init__(self, root: str | Path | None) -> None:
        self.root = Path(root) if root is not None else None
        self.used: set[str] = set()

    def _path(self, name: str, key: str) -> Path:
        assert self.root is not None
        return self.root / f"{name}-{key[:40]}.pkl"

    @staticmethod
    def key(name: str, inputs: Iterable[Any], code: Iterable[Any] = ()) -> str:
        """The content hash :meth:`get` keys ``name`` by (the same in every process)."""
        return content_hash(name, _versions(), tuple(code), tuple(inputs))

    def holds(self, name: str, key: str) -> bool:
        """Whether an earlier build kept the result of ``name`` under ``key`` (:meth:`get` would not compute)."""
        return self.root is not None and self._path(name, key).exists()

    def get(self, name: str, inputs: Iterable[Any], compute: Callable[[], T], code: Iterable[Any] = (),
            key: str | None = None) -> T:
        """``compute()``, or its value from an earlier build whose ``inputs`` and ``code`` (modules
        or functions whose source determines the result) hash the same (``key``: that hash, if
        the caller has it: :meth:`key`)."""
        if self.root is None:
            return compute()
        key = key or self.key(name, inputs, code)
        path = self._path(name, key)
        self.used.add(path.name)
        if path.exists():
            try:
                with open(path, "rb") as fh:
                    return pickle.load(fh)  # noqa: S301 - written by this class into the user's own report folder
            except Exception:  # noqa: BLE001 - a damaged or foreign entry is recomputed, never trusted
                path.unlink(missing_ok=True)
        value = compute()
        try:
            data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - an unpicklable result is simply not kept
            return value
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data)
        return value

    def prune(self) -> int:
        """Remove the entries this build did not use (call after a finished build); returns how many."""
        if self.root is None or not self.root.is_dir():
            return 0
        gone = 0
        for p in self.root.glob("*.pkl"):
            if p.name not in self.used:
                p.unlink(missing_ok=True)
                gone += 1
        return gone


# ---------------------------------------------------------------------------- figure records
def figure_record_path(root: Path, path: Path) -> Path:
    """Where the record of the figure file ``path`` (the content hash it was drawn from, its size
    and modification time) is kept: one record per file, so that two writers of one file (the
    Markdown summary's PNG and the HTML report's PNG, SVG and PDF) share it."""
    return root / "figures" / (hashlib.sha256(str(Path(path).resolve()).encode()).hexdigest()[:32] + ".json")


def _stamp(path: Path) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def write_figure_record(root: Path, key: str, path: Path) -> None:
    """Record that ``path`` was just written from the figure whose content hash is ``key``."""
    stamp = _stamp(path)
    if stamp is not None:
        record = figure_record_path(root, path)
        record.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(record, json.dumps({"hash": key, "file": stamp}).encode())


def figure_is_current(root: Path, key: str, path: Path) -> bool:
    """Whether ``path`` exists, unchanged since it was written from a figure hashing to ``key``."""
    try:
        saved = json.loads(figure_record_path(root, path).read_text())
    except (OSError, ValueError):
        return False
    return saved.get("hash") == key and saved.get("file") == _stamp(path)
