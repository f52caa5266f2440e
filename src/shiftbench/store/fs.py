"""The one filesystem layer under a results store: a local folder, or any fsspec URI.

Every file of a store's layout (keys, prediction parts, logits, done records, run records,
studies, features) is read and written through a :class:`StoreFS`, named by its path *relative
to the store's root* in POSIX form (``"done/<key>.json"``), so nothing above this module knows
where the store lives. :func:`open_fs` picks the implementation from what ``--store`` names:

``LocalFS`` (a path, or a ``file://`` URI)
    Plain :mod:`os` calls, as before: every write goes to a unique temporary sibling, is
    fsynced and renamed over its name (:func:`shiftbench.store.files.atomic_write_with`), and
    ``lock`` is an inter-process file lock (:func:`shiftbench.store.files.file_lock`).
``FsspecFS`` (``s3://``, ``gs://``, ``az://``, ``memory://``, any fsspec protocol)
    The protocol's fsspec filesystem (``s3fs``, ``gcsfs``, ``adlfs``), with credentials and
    endpoint found the standard way for it (environment variables such as ``AWS_ENDPOINT_URL``,
    ``AWS_ACCESS_KEY_ID``, ``AWS_PROFILE``; its config files; or ``storage_options=``). A write
    is one object PUT of the whole content (an object store makes an object visible whole or
    not at all: no temporary name, no rename); ``lock`` excludes nothing across processes
    (object stores have no locks: docs/store.md says what that means for ``--force``).

Failures of a bucket (refused credentials, a read-only policy, a missing bucket, an unreachable
endpoint) become one-line :class:`~shiftbench.errors.StoreError` messages naming the URI and
what to check (:func:`explain`); a missing *file* stays a :class:`FileNotFoundError`, which the
store reads as "not written yet".
"""
from __future__ import annotations

import contextlib
import io
import os
import posixpath
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from shiftbench.errors import ConfigError, StoreError
from shiftbench.store.files import TMP_SUFFIX, atomic_write, atomic_write_with, file_lock

__all__ = ["SCHEMES", "FsspecFS", "LocalFS", "StoreFS", "explain", "is_uri", "open_fs"]

#: URI schemes a store is tested on, and what brings each one's filesystem (shown when a scheme
#: is unknown or its package is missing). Any other protocol fsspec knows works the same way.
SCHEMES: dict[str, str] = {
    "file": "", "memory": "", "s3": "pip install 'shiftbench[s3]', which adds s3fs",
    "gs": "pip install gcsfs", "az": "pip install adlfs"}
_ALIASES = {"s3a": "s3", "gcs": "gs", "abfs": "az", "abfss": "az"}
#: fsspec's exceptions for a server that cannot be reached, by class name (botocore, aiohttp, requests)
_UNREACHABLE = ("EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError", "ClientConnectorError",
                "ServerDisconnectedError", "ConnectionError", "ConnectionRefusedError", "ReadTimeoutError",
                "ProxyConnectionError")


def is_uri(target: str | os.PathLike[str]) -> bool:
    """``target`` names a URI (``scheme://...``) rather than a local path."""
    return isinstance(target, str) and "://" in target and not target.startswith("\\\\")


def scheme_of(uri: str) -> str:
    return uri.split("://", 1)[0].lower()


def _supported() -> str:
    return ", ".join(f"{s}://" + (f" ({how})" if how else "") for s, how in SCHEMES.items())


def open_fs(target: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None) -> StoreFS:
    """The :class:`StoreFS` of the store at ``target`` (a path or an fsspec URI).

    An unknown scheme, or a known one whose package is not installed, is a one-line
    :class:`~shiftbench.errors.ConfigError` listing the supported schemes and what adds each."""
    if not is_uri(target):
        if storage_options:
            raise ConfigError(f"{target}: storage_options are for a store URI (s3://bucket/prefix, ...), not a "
                              "local folder")
        return LocalFS(Path(target))
    uri = str(target).rstrip("/")
    scheme = scheme_of(uri)
    if scheme == "file":
        return LocalFS(Path(uri.split("://", 1)[1] or "/"))
    import fsspec  # deferred: a local store never needs it
    from fsspec.registry import known_implementations, registry  # deferred: only an unknown scheme's message

    if scheme not in known_implementations and scheme not in registry:
        raise ConfigError(f"{uri}: unknown URI scheme {scheme}://; a store is a folder or a URI of one of "
                          f"{_supported()}")
    try:
        fs, path = fsspec.core.url_to_fs(uri, **dict(storage_options or {}))
    except ImportError as exc:
        how = SCHEMES.get(_ALIASES.get(scheme, scheme), "install the fsspec filesystem for it")
        raise ConfigError(f"{uri}: a store at {scheme}:// needs its filesystem package: {how}") from exc
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{uri}: cannot open ({' '.join(str(exc).split())}); check the URI and "
                          "storage_options") from exc
    return FsspecFS(fs, path.rstrip("/"), uri, dict(storage_options or {}))


def explain(exc: BaseException, location: str, doing: str) -> StoreError | None:
    """A one-line :class:`StoreError` for a failure of the filesystem under the store at
    ``location`` while ``doing`` (``"write done/k.json"``), naming what to check; ``None`` when
    ``exc`` is not a failure of the filesystem itself (e.g. a missing file being read)."""
    names = {c.__name__ for c in type(exc).__mro__} | {c.__name__ for c in _causes(exc)}
    detail = " ".join(str(exc).split())[:200]
    if names & set(_UNREACHABLE):
        return StoreError(f"{location}: cannot reach the storage server while trying to {doing} ({detail}); check "
                          "the endpoint (AWS_ENDPOINT_URL, or storage_options={'endpoint_url': ...}), the network "
                          "and that the server is running")
    if isinstance(exc, PermissionError) or names & {"NoCredentialsError", "PartialCredentialsError"}:
        return StoreError(f"{location}: access denied while trying to {doing} ({detail}); check the credentials "
                          "(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or storage_options) and that "
                          "they may read and write there (a read-only bucket policy refuses every write)")
    if isinstance(exc, FileNotFoundError) and doing.startswith("write"):
        bucket = location.split("://", 1)[-1].split("/", 1)[0]
        return StoreError(f"{location}: the bucket {bucket!r} does not exist (or is not visible with these "
                          f"credentials) while trying to {doing}; create it first, or check the URI")
    return None


def _causes(exc: BaseException) -> Iterator[type]:
    seen = exc.__cause__ or exc.__context__
    depth = 0
    while seen is not None and depth < 5:
        yield from type(seen).__mro__
        seen, depth = seen.__cause__ or seen.__context__, depth + 1


class StoreFS:
    """What the store needs of a filesystem; paths are relative to the store's root (POSIX)."""

    #: the store's location as the user named it (a folder path or a URI): what messages show
    location: str
    #: a local folder (``LocalFS``): fsync-and-rename writes and real locks
    is_local: bool = False

    def path(self, rel: str = "") -> str:
        """The full path of ``rel`` for :attr:`arrow` / :attr:`fsspec` (a local absolute path, or
        ``bucket/prefix/rel``)."""
        raise NotImplementedError

    def url(self, rel: str = "") -> str:
        """``rel`` as a URL DuckDB can read through :attr:`fsspec` (a local path as it is)."""
        raise NotImplementedError

    @property
    def arrow(self) -> Any:
        """A ``pyarrow.fs.FileSystem`` for :attr:`path` values (``None``: local paths)."""
        raise NotImplementedError

    @property
    def fsspec(self) -> Any:
        raise NotImplementedError

    def exists(self, rel: str) -> bool: ...
    def isdir(self, rel: str) -> bool: ...
    def isfile(self, rel: str) -> bool: ...
    def read_bytes(self, rel: str) -> bytes: ...
    def write_bytes(self, rel: str, data: bytes) -> None: ...
    def write_with(self, rel: str, writer: Callable[[Any], None]) -> None: ...
    def remove(self, rel: str) -> None: ...
    def listdir(self, rel: str) -> list[tuple[str, int, Any]]: ...

    def read_many(self, rels: list[str]) -> dict[str, bytes]:
        """The bytes of each of ``rels`` that exists (a missing one is left out)."""
        out = {}
        for rel in rels:
            try:
                out[rel] = self.read_bytes(rel)
            except FileNotFoundError:
                continue
        return out
    def lock(self, rel: str) -> contextlib.AbstractContextManager[Any]: ...

    def glob(self, rel: str, pattern: str) -> list[str]:
        """Names (not paths) in folder ``rel`` matching the :mod:`fnmatch` ``pattern``, sorted."""
        import fnmatch  # deferred: only a glob needs it

        return sorted(n for n, _, _ in self.listdir(rel) if fnmatch.fnmatchcase(n, pattern))


class LocalFS(StoreFS):
    """A store in a local (or NFS) folder: :mod:`os` calls, fsync-and-rename writes, file locks."""

    is_local = True

    def __init__(self, root: Path) -> None:
        self.root = root
        self.location = str(root)

    def _p(self, rel: str) -> Path:
        return self.root / rel if rel else self.root

    def path(self, rel: str = "") -> str:
        return str(self._p(rel).resolve())

    def url(self, rel: str = "") -> str:
        return Path(self.path(rel)).as_posix()

    @property
    def arrow(self) -> Any:
        return None

    @property
    def fsspec(self) -> Any:
        from fsspec.implementations.local import LocalFileSystem  # deferred

        return LocalFileSystem()

    def exists(self, rel: str) -> bool:
        return self._p(rel).exists()

    def isdir(self, rel: str) -> bool:
        return self._p(rel).is_dir()

    def isfile(self, rel: str) -> bool:
        return self._p(rel).is_file()

    def read_bytes(self, rel: str) -> bytes:
        return self._p(rel).read_bytes()

    def write_bytes(self, rel: str, data: bytes) -> None:
        atomic_write(self._p(rel), data)

    def write_with(self, rel: str, writer: Callable[[Any], None]) -> None:
        atomic_write_with(self._p(rel), writer)

    def remove(self, rel: str) -> None:
        self._p(rel).unlink(missing_ok=True)

    def listdir(self, rel: str) -> list[tuple[str, int, Any]]:
        """``(name, size, modification time in ns)`` of the files in folder ``rel`` (temporary
        files left by a crash skipped; a missing folder: none)."""
        try:
            entries = list(os.scandir(self._p(rel)))
        except (FileNotFoundError, NotADirectoryError):
            return []
        out = []
        for e in entries:
            if e.name.endswith(TMP_SUFFIX) and e.name.startswith("."):
                continue
            try:
                st = e.stat()
            except FileNotFoundError:  # replaced while listing
                continue
            out.append((e.name, st.st_size, st.st_mtime_ns))
        return out

    def subdirs(self, rel: str) -> list[str]:
        try:
            return sorted(e.name for e in os.scandir(self._p(rel)) if e.is_dir())
        except (FileNotFoundError, NotADirectoryError):
            return []

    def lock(self, rel: str) -> contextlib.AbstractContextManager[Any]:
        return file_lock(self._p(rel))

    def walk(self, rel: str = "") -> dict[str, int]:
        """Every file under the root (or its folder ``rel``): ``{path relative to the root: size}``
        (temporary files left by a crash skipped)."""
        out = {}
        for folder, _, names in os.walk(self._p(rel)):
            for name in names:
                if name.startswith(".") and name.endswith(TMP_SUFFIX):
                    continue
                full = Path(folder) / name
                try:
                    out[full.relative_to(self.root).as_posix()] = full.stat().st_size
                except FileNotFoundError:  # removed while walking
                    continue
        return out


class FsspecFS(StoreFS):
    """A store under an fsspec URI (a bucket prefix): one PUT per file, no locks."""

    def __init__(self, fs: Any, root: str, uri: str, storage_options: Mapping[str, Any]) -> None:
        self._fs, self.root, self.location = fs, root, uri
        self.storage_options = dict(storage_options)
        self._arrow: Any = None

    def __getstate__(self) -> dict[str, Any]:  # Ray / multiprocessing: reopen from the URI
        return {"location": self.location, "storage_options": self.storage_options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        other = open_fs(state["location"], state["storage_options"])
        self.__dict__.update(other.__dict__)

    def path(self, rel: str = "") -> str:
        return posixpath.join(self.root, rel) if rel else self.root

    def url(self, rel: str = "") -> str:
        protocol = self._fs.protocol if isinstance(self._fs.protocol, str) else self._fs.protocol[0]
        return f"{protocol}://{self.path(rel).lstrip('/')}"

    @property
    def arrow(self) -> Any:
        if self._arrow is None:
            from pyarrow.fs import FSSpecHandler, PyFileSystem  # deferred

            self._arrow = PyFileSystem(FSSpecHandler(self._fs))
        return self._arrow

    @property
    def fsspec(self) -> Any:
        return self._fs

    def _call(self, doing: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except FileNotFoundError as exc:
            error = explain(exc, self.location, doing)
            if error is None:
                raise
            raise error from exc
        except Exception as exc:
            error = explain(exc, self.location, doing)
            if error is None:
                raise StoreError(f"{self.location}: failed to {doing} ({type(exc).__name__}: "
                                 f"{' '.join(str(exc).split())[:200]}); check the URI, the credentials and the "
                                 "endpoint") from exc
            raise error from exc

    def exists(self, rel: str) -> bool:
        return bool(self._call(f"read {rel or 'the store'}", lambda: self._fresh(rel) and self._fs.exists(self.path(rel))))

    def isdir(self, rel: str) -> bool:
        return bool(self._call(f"read {rel or 'the store'}", lambda: self._fresh(rel) and self._fs.isdir(self.path(rel))))

    def isfile(self, rel: str) -> bool:
        return bool(self._call(f"read {rel}", lambda: self._fresh(rel) and self._fs.isfile(self.path(rel))))

    def _fresh(self, rel: str) -> bool:
        self._fs.invalidate_cache(self.path(rel))
        return True

    def read_bytes(self, rel: str) -> bytes:
        return self._call(f"read {rel}", lambda: self._fs.cat_file(self.path(rel)))

    def read_many(self, rels: list[str]) -> dict[str, bytes]:
        """The bytes of each of ``rels`` that exists, fetched concurrently (fsspec's ``cat`` of a
        list: s3fs, gcsfs and adlfs issue the GETs at once)."""
        if not rels:
            return {}
        paths = {self.path(r): r for r in rels}
        got = self._call(f"read {len(rels)} files", lambda: self._fs.cat(list(paths), on_error="return"))
        out = {}
        for path, value in got.items():
            if isinstance(value, FileNotFoundError):
                continue
            if isinstance(value, BaseException):
                error = explain(value, self.location, f"read {paths.get(path, path)}")
                raise error or value
            out[paths.get(path, path)] = value
        return out

    def write_bytes(self, rel: str, data: bytes) -> None:
        # one PUT of the whole object: visible whole or not at all
        self._call(f"write {rel}", lambda: self._fs.pipe_file(self.path(rel), bytes(data)))

    def write_with(self, rel: str, writer: Callable[[Any], None]) -> None:
        buf: BinaryIO = io.BytesIO()
        writer(buf)
        self.write_bytes(rel, buf.getvalue())

    def remove(self, rel: str) -> None:
        def rm() -> None:
            try:
                self._fs.rm_file(self.path(rel))
            except FileNotFoundError:
                pass
        self._call(f"write (remove) {rel}", rm)

    def listdir(self, rel: str) -> list[tuple[str, int, Any]]:
        """``(name, size, ETag or modification time)`` of the objects in folder ``rel``."""
        def ls() -> list[dict[str, Any]]:
            return self._ls(rel)
        out = []
        for info in self._call(f"list {rel or 'the store'}", ls):
            if info.get("type") == "directory":
                continue
            name = posixpath.basename(info["name"].rstrip("/"))
            stamp = info.get("ETag") or info.get("etag") or info.get("mtime") or info.get("LastModified") \
                or info.get("created")
            out.append((name, int(info.get("size") or 0), str(stamp)))
        return out

    def subdirs(self, rel: str) -> list[str]:
        def ls() -> list[dict[str, Any]]:
            return self._ls(rel)
        return sorted(posixpath.basename(i["name"].rstrip("/")) for i in self._call(f"list {rel}", ls)
                      if i.get("type") == "directory")

    def _ls(self, rel: str) -> list[dict[str, Any]]:
        """A fresh listing of folder ``rel`` (fsspec caches listings: another process may have
        written since)."""
        path = self.path(rel)
        self._fs.invalidate_cache(path)
        try:
            return self._fs.ls(path, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return []

    def lock(self, rel: str) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def walk(self, rel: str = "") -> dict[str, int]:
        """Every object under the root (or its folder ``rel``): ``{path relative to the root: size}``,
        in one recursive listing."""
        def find() -> dict[str, Any]:
            self._fs.invalidate_cache(self.path(rel))
            try:
                return self._fs.find(self.path(rel), detail=True)
            except FileNotFoundError:
                return {}
        base = self._fs._strip_protocol(self.root).rstrip("/") + "/"
        return {path[len(base):]: int(info.get("size") or 0) for path, info in self._call("list the store", find).items()
                if path.startswith(base) and info.get("type") != "directory"}

