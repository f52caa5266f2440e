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
``SHIFTBENCH_CACHE_DIR=off`` turns it off.

Both caches touch only what they wrote. The shared cache's folder carries the standard
cache-directory tag (:data:`CACHEDIR_TAG`, https://bford.info/cachedir/), written when the cache
creates the folder or adopts an empty one; a folder that holds anything else and no tag is not a
cache: reports skip it and ``shiftbench cache --clear`` refuses it. Entries live only in its
``analyses/`` and ``figures/`` subfolders, named by their content hash (:data:`ENTRY_NAMES`), and
listing, pruning and clearing look at nothing else; the report's own cache prunes only its own
entry names.

An analysis's result is any Python object, kept as a pickle, and unpickling runs code. So no entry
is unpickled unless it is authenticated (:func:`seal`, :func:`unseal`): it is written as
:data:`ENTRY_MAGIC`, an HMAC-SHA256 of its name and payload under a per-user key kept outside
every cache (:func:`cache_key_file`, made on first use, readable by its owner only), and the
pickle; the MAC is checked before unpickling, and an entry that fails - planted in a report folder
someone sent, written into a shared folder by another user, moved to another name - is removed and
computed again, as is one that holds another type than the caller expects. Without a usable key
analyses are computed and not kept.
"""
from __future__ import annotations

import dataclasses
import hashlib
import hmac
import inspect
import json
import os
import pickle
import re
import secrets
import shutil
import stat
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from shiftbench.errors import ConfigError
from shiftbench.store.files import TMP_SUFFIX, atomic_write, atomic_write_with
from shiftbench.version import __version__

T = TypeVar("T")

#: The folder, inside the report's directory, that holds the cache.
CACHE_DIR = ".shiftbench-cache"
#: The environment variable naming the folder of the cache shared by every report on this
#: machine (:class:`SharedCache`); ``off`` (or empty) turns it off.
SHARED_ENV = "SHIFTBENCH_CACHE_DIR"
#: The shared cache's size bound: past it, the least recently used entries are removed.
SHARED_MAX_BYTES = 2 * 1024**3
#: The environment variable naming the file of the key that authenticates cached analyses
#: (:func:`cache_key_file`).
KEY_ENV = "SHIFTBENCH_CACHE_KEY_FILE"
#: The cache-directory tag that marks the shared cache's folder as a cache (https://bford.info/cachedir/).
CACHEDIR_TAG = "CACHEDIR.TAG"
#: What the tag's content starts with (the standard's signature).
CACHEDIR_SIGNATURE = b"Signature: 8a477f597d28d172789f06886806bc55"
_TAG_TEXT = (CACHEDIR_SIGNATURE + b"\n# This file is a cache directory tag created by shiftbench (its shared report cache).\n"
             b"# For information about cache directory tags, see:\n#\thttps://bford.info/cachedir/\n")
#: An analysis's entry name: a slug of the analysis's name, the first 40 hex digits of its key, ``.pkl``.
ANALYSIS_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}-[0-9a-f]{40}\.pkl")
#: A figure file's entry name: the first 40 hex digits of its figure's key and its format.
FIGURE_NAME = re.compile(r"[0-9a-f]{40}\.(?:png|svg|pdf)")
#: The shared cache's subfolders and the only names it keeps, lists, prunes and clears in each.
ENTRY_NAMES = {"analyses": ANALYSIS_NAME, "figures": FIGURE_NAME}
#: The first bytes of every analysis entry (format 1); then its 32-byte HMAC, then the pickle.
ENTRY_MAGIC = b"shiftbench-cache-entry-1\n"
#: A temporary file of an interrupted write (:func:`~shiftbench.store.files.atomic_write`) older
#: than this many seconds is removed with the entries.
STALE_TEMPORARY_S = 3600
_KEY_BYTES = 32
_MAC_BYTES = hashlib.sha256().digest_size
_MISSING: Any = object()


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


# ---------------------------------------------------------------------------- authenticated entries
def cache_key_file() -> Path:
    """The file of the per-user key that authenticates cached analyses: ``$SHIFTBENCH_CACHE_KEY_FILE``,
    else ``$XDG_CONFIG_HOME/shiftbench/cache-key``, else ``~/.config/shiftbench/cache-key`` - outside
    every cache, so that whoever can write a cache cannot forge its entries."""
    value = os.environ.get(KEY_ENV)
    if value:
        return Path(value).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME")
    return (Path(base) if base and os.path.isabs(base) else Path.home() / ".config") / "shiftbench" / "cache-key"


def cache_secret(path: Path | None = None) -> bytes | None:
    """The key in :func:`cache_key_file` (32 random bytes, made on first use, mode 600), or None
    when it cannot be read or made, or others may read or write it (with a warning): then no
    analysis is read from or kept in a cache."""
    path = cache_key_file() if path is None else Path(path)
    try:
        return _read_secret(path)
    except FileNotFoundError:
        pass
    except OSError:
        return None
    try:
        _create_secret(path)
        return _read_secret(path)
    except OSError:
        return None


def _read_secret(path: Path) -> bytes | None:
    """The key in ``path``; None (and a warning) for a file that is not the user's own or not a key."""
    with open(path, "rb") as fh:
        st = os.fstat(fh.fileno())
        data = fh.read(_KEY_BYTES + 1)
    others = os.name == "posix" and (st.st_uid != os.geteuid() or st.st_mode & 0o077)
    if not stat.S_ISREG(st.st_mode) or others or len(data) != _KEY_BYTES:
        warnings.warn(f"{path}: not a private {_KEY_BYTES}-byte shiftbench cache key (mode 600, your own); report "
                      "analyses are not cached until it is removed (a new one is then made)", stacklevel=3)
        return None
    return data


def _create_secret(path: Path) -> None:
    """Write a new random key to ``path`` unless one is there: written whole to a private
    temporary file, then linked into place (two first uses at once agree on one key)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}{TMP_SUFFIX}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(_KEY_BYTES))
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
    finally:
        tmp.unlink(missing_ok=True)


def _mac(secret: bytes, name: str, payload: bytes) -> bytes:
    return hmac.new(secret, ENTRY_MAGIC + name.encode() + b"\0" + payload, hashlib.sha256).digest()


def seal(secret: bytes, name: str, payload: bytes) -> bytes:
    """The entry ``name`` holding ``payload``: :data:`ENTRY_MAGIC`, HMAC-SHA256 under ``secret`` of
    the name and the payload, the payload (the name is in the MAC: an entry moved to another name fails)."""
    return ENTRY_MAGIC + _mac(secret, name, payload) + payload


def unseal(secret: bytes, name: str, data: bytes) -> bytes | None:
    """The payload of the entry ``name`` when ``data`` is one :func:`seal` wrote under ``secret``
    for that name, else None (compared in constant time)."""
    head, end = len(ENTRY_MAGIC), len(ENTRY_MAGIC) + _MAC_BYTES
    if len(data) < end or not data.startswith(ENTRY_MAGIC):
        return None
    mac, payload = data[head:end], data[end:]
    return payload if hmac.compare_digest(mac, _mac(secret, name, payload)) else None


def _unpickle(payload: bytes | None, expect: type | tuple[type, ...] | None) -> Any:
    """The object in an authenticated payload, or :data:`_MISSING` when there is none, it does
    not unpickle (a class since renamed, say) or it is not an ``expect``."""
    if payload is None:
        return _MISSING
    try:
        value = pickle.loads(payload)  # noqa: S301 - authenticated by unseal: written by this user's own shiftbench
    except Exception:  # noqa: BLE001 - an entry that no longer loads is recomputed
        return _MISSING
    return value if expect is None or isinstance(value, expect) else _MISSING


def entry_stem(name: str) -> str:
    """The readable part of an analysis's entry name (:data:`ANALYSIS_NAME`): ``name`` lower-cased,
    runs of other characters than letters, digits, ``_`` and ``-`` as one ``-`` (the key that
    follows it is what tells entries apart)."""
    return re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-_")[:48] or "analysis"


def _temporary_of(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """The names :func:`~shiftbench.store.files.atomic_write` gives its temporary files for entries of ``pattern``."""
    return re.compile(r"\.(?:" + pattern.pattern + r")\.[a-z0-9_]{8}" + re.escape(TMP_SUFFIX))


_TEMPORARIES = {kind: _temporary_of(pattern) for kind, pattern in ENTRY_NAMES.items()}
_TAG_TEMPORARY = _temporary_of(re.compile(re.escape(CACHEDIR_TAG)))


def _own_files(folder: Path, kind: str) -> Iterator[tuple[int, int, Path]]:
    """(modification time in ns, size, path) of every regular file in ``folder`` named like an
    entry of ``kind``, and of every stale temporary file of one; nothing else, never a link."""
    if folder.is_symlink():
        return
    try:
        names = os.listdir(folder)
    except OSError:
        return
    stale = time.time_ns() - STALE_TEMPORARY_S * 10**9
    for name in names:
        entry, temporary = ENTRY_NAMES[kind].fullmatch(name), _TEMPORARIES[kind].fullmatch(name)
        if not (entry or temporary):
            continue
        try:
            st = os.lstat(folder / name)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and (entry or st.st_mtime_ns < stale):
            yield st.st_mtime_ns, st.st_size, folder / name


def _has_tag(root: Path) -> bool:
    """Whether ``root`` holds a cache-directory tag."""
    try:
        with open(root / CACHEDIR_TAG, "rb") as fh:
            return fh.read(len(CACHEDIR_SIGNATURE)) == CACHEDIR_SIGNATURE
    except OSError:
        return False


def _is_empty(root: Path) -> bool:
    """Whether ``root`` is a folder the cache may tag as its own: missing, empty but for a tag
    another process is writing (:data:`CACHEDIR_TAG` and its temporary file), or a cache that an
    earlier shiftbench made before caches were tagged - nothing in it but real ``analyses/`` and
    ``figures/`` folders (the cache then only ever touches files named like its entries there, and
    an old analysis, unsigned, is recomputed)."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return all(n == CACHEDIR_TAG or _TAG_TEMPORARY.fullmatch(n)
               or (n in ENTRY_NAMES and stat.S_ISDIR(_lstat_mode(root / n))) for n in names)


def _lstat_mode(path: Path) -> int:
    """``path``'s mode without following a link (0 when it cannot be read)."""
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


class SharedCache:
    """Analyses' results and figure files by content hash, shared by every report on this machine
    (see the module docstring). Entries are written atomically (two builds at once never see half
    a file), read ones are touched (their modification time is the last use) and :meth:`prune`
    removes the least recently used past ``max_bytes``. A damaged entry is removed, never trusted.

    The folder is the cache's only when it carries :data:`CACHEDIR_TAG` (written when the cache
    makes the folder or adopts an empty one): in any other folder that holds something, nothing is
    read, written or removed (:meth:`is_foreign`), and :meth:`clear` raises. Only files named
    like entries (:data:`ENTRY_NAMES`) in its own subfolders are ever listed or removed."""

    def __init__(self, root: str | Path, max_bytes: int = SHARED_MAX_BYTES) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self._tagged = False

    @classmethod
    def default(cls) -> SharedCache | None:
        """The shared cache in :func:`shared_cache_dir`, or None when it is turned off."""
        root = shared_cache_dir()
        return cls(root) if root is not None else None

    def path(self, kind: str, name: str) -> Path:
        """Where the entry ``name`` of ``kind`` (``analyses`` or ``figures``) is kept; a name that
        is not an entry's (:data:`ENTRY_NAMES`) is a ValueError."""
        pattern = ENTRY_NAMES.get(kind)
        if pattern is None or not pattern.fullmatch(name):
            raise ValueError(f"{kind}/{name}: not a shared report cache entry name")
        return self.root / kind / name

    def _is_tagged(self) -> bool:
        """Whether the folder carries the tag (remembered once seen)."""
        self._tagged = self._tagged or _has_tag(self.root)
        return self._tagged

    def _usable(self) -> bool:
        """Whether the folder may be read: tagged, missing or empty (asked for the tag again
        after the folder: another process may have tagged it and written entries in between)."""
        return self._is_tagged() or _is_empty(self.root) or self._is_tagged()

    def is_foreign(self) -> bool:
        """Whether the folder is not a shiftbench cache: it holds something, and no cache-directory tag."""
        return not self._usable()

    def _claim(self) -> bool:
        """Make the folder the cache's own (created for its owner only, tagged) unless it is foreign."""
        if self._is_tagged():
            return True
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            if not _is_empty(self.root):
                return self._is_tagged()
            atomic_write(self.root / CACHEDIR_TAG, _TAG_TEXT)
        except OSError:
            return False
        self._tagged = True
        return True

    def has(self, kind: str, name: str) -> bool:
        """Whether the entry is kept."""
        path = self.path(kind, name)
        return self._usable() and path.is_file()

    def _target(self, kind: str, name: str) -> Path | None:
        """:meth:`path`, its folder created, or None when the folder is not the cache's."""
        path = self.path(kind, name)
        if not self._claim():
            return None
        path.parent.mkdir(exist_ok=True)
        return path

    def read(self, kind: str, name: str) -> bytes | None:
        """The entry's bytes (and its use recorded), or None when it is not kept."""
        path = self.path(kind, name)
        if not self._usable():
            return None
        try:
            data = path.read_bytes()
        except OSError:
            return None
        _touch(path)
        return data

    def write(self, kind: str, name: str, data: bytes) -> None:
        """Keep ``data`` as the entry (a cache that cannot be written is skipped, never an error)."""
        try:
            target = self._target(kind, name)
            if target is not None:
                atomic_write(target, data)
        except OSError:
            pass

    def forget(self, kind: str, name: str) -> None:
        """Remove a damaged entry."""
        path = self.path(kind, name)
        if self._usable():
            _remove(path)

    def copy_out(self, kind: str, name: str, dest: Path) -> bool:
        """Copy the entry to ``dest`` (atomically); whether it was kept."""
        src = self.path(kind, name)
        if not self._usable() or not src.is_file():
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
            target = self._target(kind, name)
            if target is not None:
                atomic_write_with(target, lambda tmp: shutil.copyfile(src, tmp))
        except OSError:
            pass

    def entries(self) -> list[tuple[int, int, Path]]:
        """Every entry as (last use in ns, size in bytes, path): the files named like entries
        in the cache's subfolders (and stale temporary files of interrupted writes), none in a
        folder that is not the cache's."""
        if not self._usable():
            return []
        return [e for kind in ENTRY_NAMES for e in _own_files(self.root / kind, kind)]

    def clear(self) -> int:
        """Remove every entry; returns how many were removed (a read-only cache keeps its own).
        A folder that is not the cache's is a :class:`~shiftbench.errors.ConfigError`."""
        if not self._usable():
            raise ConfigError(f"{self.root}: not a shiftbench cache (no {CACHEDIR_TAG}), nothing removed; set "
                              f"{SHARED_ENV} to a new or empty folder")
        return sum(_remove(p) for _, _, p in self.entries())

    def prune(self) -> int:
        """Remove the least recently used entries until the cache holds at most ``max_bytes``;
        returns how many were removed (none, with a warning, in a folder that is not the cache's)."""
        if not self._usable():
            warnings.warn(f"{self.root}: not a shiftbench cache (no {CACHEDIR_TAG}); the shared report cache is "
                          f"skipped - set {SHARED_ENV} to a new or empty folder", stacklevel=2)
            return 0
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
    given each one computed. ``secret``: the key entries are authenticated with (default:
    :func:`cache_secret`, read on first use)."""

    def __init__(self, root: str | Path | None, shared: SharedCache | None = None, secret: bytes | None = None) -> None:
        self.root = Path(root) if root is not None else None
        self.shared = shared if root is not None else None
        self.used: set[str] = set()
        self._secret = secret

    def _path(self, name: str, key: str) -> Path:
        assert self.root is not None
        return self.root / f"{entry_stem(name)}-{key[:40]}.pkl"

    def _key(self) -> bytes | None:
        """The key entries are authenticated with (read once), or None when there is none."""
        if self._secret is None:
            self._secret = cache_secret() or b""
        return self._secret or None

    @staticmethod
    def key(name: str, inputs: Iterable[Any], code: Iterable[Any] = ()) -> str:
        """The content hash :meth:`get` keys ``name`` by (the same in every process)."""
        return content_hash(name, code_versions(), tuple(code), tuple(inputs))

    def holds(self, name: str, key: str) -> bool:
        """Whether an earlier build kept the result of ``name`` under ``key`` (:meth:`get` would not compute)."""
        if self.root is None or self._key() is None:
            return False
        path = self._path(name, key)
        return path.exists() or (self.shared is not None and self.shared.has("analyses", path.name))

    def get(self, name: str, inputs: Iterable[Any], compute: Callable[[], T], code: Iterable[Any] = (),
            key: str | None = None, expect: type | tuple[type, ...] | None = None) -> T:
        """``compute()``, or its value from an earlier build whose ``inputs`` and ``code`` (modules
        or functions whose source determines the result) hash the same (``key``: that hash, if
        the caller has it: :meth:`key`). Only an entry authenticated by this user's key is
        unpickled; one that is not, or whose value is not an ``expect`` (a type or tuple of
        types), is removed and computed again."""
        secret = self._key() if self.root is not None else None
        if secret is None:
            return compute()
        key = key or self.key(name, inputs, code)
        path = self._path(name, key)
        self.used.add(path.name)
        value = self._load(path, secret, expect)
        if value is not _MISSING:
            return value
        value = compute()
        try:
            data = seal(secret, path.name, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
        except Exception:  # noqa: BLE001 - an unpicklable result is simply not kept
            return value
        atomic_write(path, data)
        if self.shared is not None:
            self.shared.write("analyses", path.name, data)
        return value

    def _load(self, path: Path, secret: bytes, expect: type | tuple[type, ...] | None) -> Any:
        """The value kept in ``path`` (else in the shared cache, then copied to ``path``), or
        :data:`_MISSING`; an entry that fails is removed."""
        try:
            data = path.read_bytes()
        except OSError:
            pass
        else:
            value = _unpickle(unseal(secret, path.name, data), expect)
            if value is not _MISSING:
                return value
            path.unlink(missing_ok=True)
        data = self.shared.read("analyses", path.name) if self.shared is not None else None
        if data is None:
            return _MISSING
        value = _unpickle(unseal(secret, path.name, data), expect)
        if value is _MISSING:
            self.shared.forget("analyses", path.name)
        else:
            atomic_write(path, data)
        return value

    def prune(self) -> int:
        """Remove the entries this build did not use (call after a finished build); returns how
        many. Only files named like entries (:data:`ANALYSIS_NAME`) and stale temporary files of
        them are removed: nothing else in the folder is the cache's."""
        if self.root is None or not self.root.is_dir():
            return 0
        gone = 0
        for _, _, p in _own_files(self.root, "analyses"):
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
