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

Behind the report's own cache sits one shared by every report built on this machine
(:class:`SharedCache`, in :func:`shared_cache_dir`: ``$SHIFTBENCH_CACHE_DIR``, else
``$XDG_CACHE_HOME/shiftbench/report``, else ``~/.cache/shiftbench/report``): the same content
hashes name the analyses' results and the figure files there, so a report built into a *new*
folder - the same testbeds with one more model, say - copies every unchanged figure and result
instead of drawing and computing it again (both reference testbeds' figures, for one). It is
bounded (:data:`SHARED_MAX_BYTES`, least recently used entries removed first);
``SHIFTBENCH_CACHE_DIR=off`` turns it off. Its analyses are unpickled, like the report's own: it is
created readable and writable by its owner only, and ``SHIFTBENCH_CACHE_DIR`` should name a folder
no one else can write.
"""
from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import os
import pickle
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from shiftbench.store.files import atomic_write, atomic_write_with
from shiftbench.version import __version__

T = TypeVar("T")

#: The folder, inside the report's directory, that holds the cache.
CACHE_DIR = ".shiftbench-cache"
#: The environment variable naming the folder of the cache shared by every report on this
#: machine (:class:`SharedCache`); ``off`` (or empty) turns it off.
SHARED_ENV = "SHIFTBENCH_CACHE_DIR"
#: The shared cache's size bound: past it, the least recently used entries are removed.
SHARED_MAX_BYTES = 2 * 1024**3


def code_versions() -> str:
    """The shiftbench, numpy, pandas and matplotlib versions every cache key includes."""
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
        # the name too: two functions of one module are different code
        name = obj.__name__ if isinstance(obj, ModuleType) else f"{obj.__module__}.{obj.__qualname__}"
        h.update(b"CODE" + name.encode() + b"\0"
                 + (Path(path).read_bytes() if path and os.path.exists(path) else repr(obj).encode()))
    elif callable(getattr(type(obj), "__content__", None)):
        _feed(h, (type(obj).__qualname__, obj.__content__()))
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
    arrays by dtype, shape and bytes; modules, functions and classes by their name and source file;
    an object with a ``__content__()`` method (a :class:`~shiftbench.testbed.Testbed`) by what it
    returns; dataclasses by their fields; containers element by element. Equal inputs give equal hashes
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


def shared_cache_dir() -> Path | None:
    """The folder of the cache shared by every report on this machine: ``$SHIFTBENCH_CACHE_DIR``
    (None when it is ``off``, ``none``, ``0`` or empty), else ``$XDG_CACHE_HOME/shiftbench/report``,
    else ``~/.cache/shiftbench/report``."""
    value = os.environ.get(SHARED_ENV)
    if value is not None:
        return None if value.strip().lower() in ("", "0", "off", "none", "false") else Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "shiftbench" / "report"


class SharedCache:
    """Analyses' results and figure files by content hash, shared by every report on this machine
    (see the module docstring). Entries are written atomically (two builds at once never see half
    a file), read ones are touched (their modification time is the last use) and :meth:`prune`
    removes the least recently used past ``max_bytes``. A damaged entry is removed, never trusted."""

    def __init__(self, root: str | Path, max_bytes: int = SHARED_MAX_BYTES) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes

    @classmethod
    def default(cls) -> SharedCache | None:
        """The shared cache in :func:`shared_cache_dir`, or None when it is turned off."""
        root = shared_cache_dir()
        return cls(root) if root is not None else None

    def path(self, kind: str, name: str) -> Path:
        """Where the entry ``name`` of ``kind`` (``analyses`` or ``figures``) is kept."""
        return self.root / kind / name

    def has(self, kind: str, name: str) -> bool:
        """Whether the entry is kept."""
        return self.path(kind, name).is_file()

    def _target(self, kind: str, name: str) -> Path:
        """:meth:`path`, its folder created (the cache's own folder for its owner only)."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        (self.root / kind).mkdir(exist_ok=True)
        return self.path(kind, name)

    def read(self, kind: str, name: str) -> bytes | None:
        """The entry's bytes (and its use recorded), or None when it is not kept."""
        path = self.path(kind, name)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        _touch(path)
        return data

    def write(self, kind: str, name: str, data: bytes) -> None:
        """Keep ``data`` as the entry (a cache that cannot be written is skipped, never an error)."""
        try:
            atomic_write(self._target(kind, name), data)
        except OSError:
            pass

    def forget(self, kind: str, name: str) -> None:
        """Remove a damaged entry."""
        self.path(kind, name).unlink(missing_ok=True)

    def copy_out(self, kind: str, name: str, dest: Path) -> bool:
        """Copy the entry to ``dest`` (atomically); whether it was kept."""
        src = self.path(kind, name)
        if not src.is_file():
            return False
        try:
            atomic_write_with(dest, lambda tmp: shutil.copyfile(src, tmp))
        except OSError:
            return False
        _touch(src)
        return True

    def copy_in(self, kind: str, name: str, src: Path) -> None:
        """Keep a copy of the file ``src`` as the entry."""
        try:
            atomic_write_with(self._target(kind, name), lambda tmp: shutil.copyfile(src, tmp))
        except OSError:
            pass

    def entries(self) -> list[tuple[int, int, Path]]:
        """Every entry as (last use in ns, size in bytes, path)."""
        found = []
        for p in self.root.glob("*/*"):
            try:
                st = p.stat()
            except OSError:
                continue
            if p.is_file():
                found.append((st.st_mtime_ns, st.st_size, p))
        return found

    def clear(self) -> int:
        """Remove every entry; returns how many were removed (a read-only cache keeps its own)."""
        return sum(_remove(p) for _, _, p in self.entries())

    def prune(self) -> int:
        """Remove the least recently used entries until the cache holds at most ``max_bytes``;
        returns how many were removed."""
        entries = self.entries()
        total = sum(size for _, size, _ in entries)
        gone = 0
        for _, size, p in sorted(entries, key=lambda e: e[0]):
            if total <= self.max_bytes:
                break
            if _remove(p):
                total -= size
                gone += 1
        return gone


def _touch(path: Path) -> None:
    """Record a use of a shared entry (its modification time); a read-only cache is still read."""
    try:
        os.utime(path)
    except OSError:
        pass


def _remove(path: Path) -> bool:
    """Remove a shared entry; whether it was removed (not on a read-only cache)."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        return False
    return True


class ReportCache:
    """Results of a report's deterministic analyses, kept between builds (see the module docstring).

    ``root=None`` keeps nothing: every :meth:`get` computes. ``shared``: the cache of every
    report on this machine (:class:`SharedCache`), asked when ``root`` does not hold a result and
    given each one computed."""

    def __init__(self, root: str | Path | None, shared: SharedCache | None = None) -> None:
        self.root = Path(root) if root is not None else None
        self.shared = shared if root is not None else None
        self.used: set[str] = set()

    def _path(self, name: str, key: str) -> Path:
        assert self.root is not None
        return self.root / f"{name}-{key[:40]}.pkl"

    @staticmethod
    def key(name: str, inputs: Iterable[Any], code: Iterable[Any] = ()) -> str:
        """The content hash :meth:`get` keys ``name`` by (the same in every process)."""
        return content_hash(name, code_versions(), tuple(code), tuple(inputs))

    def holds(self, name: str, key: str) -> bool:
        """Whether an earlier build kept the result of ``name`` under ``key`` (:meth:`get` would not compute)."""
        if self.root is None:
            return False
        path = self._path(name, key)
        return path.exists() or (self.shared is not None and self.shared.has("analyses", path.name))

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
        data = self.shared.read("analyses", path.name) if self.shared is not None else None
        if data is not None:
            try:
                value = pickle.loads(data)  # noqa: S301 - written by this class into the user's own cache
            except Exception:  # noqa: BLE001 - as above
                self.shared.forget("analyses", path.name)
            else:
                atomic_write(path, data)
                return value
        value = compute()
        try:
            data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - an unpicklable result is simply not kept
            return value
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data)
        if self.shared is not None:
            self.shared.write("analyses", path.name, data)
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
