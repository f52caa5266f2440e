"""Crash-safe file writes and inter-process file locks, shared by the store and the studies.

Two small helpers that every module writing under a results store (or next to a manifest,
a checkpoint, a study table) should use instead of its own copy:

``file_lock(path)``
    An exclusive inter-process lock on the lock file ``path``, through the ``filelock``
    library (``fcntl.flock`` on POSIX, ``msvcrt.locking`` on Windows), so importing the
    store works on every platform. Use it as a context manager::

        with file_lock(root / ".lock"):
            ...                      # one process at a time, across processes and hosts
                                     # sharing a local file system

``atomic_write(path, data)`` / ``atomic_write_with(path, writer)``
    Write to a unique temporary sibling (``.<name>.<random>.tmp`` in the same directory,
    so the rename never crosses a file system), ``fsync`` it, and ``os.replace`` it onto
    ``path`` (DESIGN principle 4). Readers see either the old file or the complete new one;
    a writer that raises leaves the old file untouched and removes its temporary file; a
    crash (power loss, SIGKILL) leaves at most an ignored ``*.tmp`` file. Concurrent writers
    of the same path each use their own temporary name, so the last rename wins with a
    complete file.
"""
from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

import filelock

__all__ = ["file_lock", "atomic_write", "atomic_write_with", "name_slug", "TMP_SUFFIX"]

#: Suffix of the temporary files :func:`atomic_write` / :func:`atomic_write_with` create.
TMP_SUFFIX = ".tmp"


def file_lock(path: str | os.PathLike[str], timeout: float = -1) -> filelock.FileLock:
    """An exclusive inter-process lock on the lock file ``path`` (a context manager).

    ``with file_lock(p): ...`` blocks until no other process holds the lock on ``p``
    (``timeout`` seconds at most when ``timeout >= 0``, then :class:`filelock.Timeout`);
    the parent directory is created if missing. The lock is released when the block exits,
    also on an exception, and by the OS if the process dies. Within one process the same
    ``FileLock`` object is re-entrant; two ``file_lock(p)`` objects in different processes
    exclude each other. The lock file itself carries no data.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return filelock.FileLock(str(path), timeout=timeout)


def _temp_sibling(path: Path) -> Path:
    """Create (and close) a unique empty temporary file next to ``path``; return its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    os.close(fd)
    return Path(tmp)


def atomic_write_with(path: str | os.PathLike[str], writer: Callable[[Path], None]) -> None:
    """Atomically replace ``path`` with what ``writer(tmp)`` writes to the temporary path ``tmp``.

    ``writer`` receives a :class:`~pathlib.Path` of an existing empty file in ``path``'s
    directory and must write the complete content there (e.g.
    ``lambda tmp: pq.write_table(table, tmp)``, ``lambda tmp: frame.to_csv(tmp, index=False)``).
    The result is fsynced and renamed onto ``path`` with :func:`os.replace`. If ``writer``
    raises, the temporary file is removed, ``path`` keeps its previous content (or stays
    absent) and the exception propagates.
    """
    path = Path(path)
    tmp = _temp_sibling(path)
    try:
        writer(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write(path: str | os.PathLike[str], data: bytes) -> None:
    """Atomically replace ``path`` with the bytes ``data`` (see :func:`atomic_write_with`)."""
    path = Path(path)
    tmp = _temp_sibling(path)
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def name_slug(name: object, *, max_len: int = 48, lower: bool = False) -> str:
    """A file-name stem for ``name`` that no other name shares: a readable slug (characters
    outside ``[A-Za-z0-9._+=-]`` become ``-``, at most ``max_len`` of them, no leading dot)
    plus ``-`` and the first 10 hex digits of the SHA-256 of the full name (DESIGN: "every name
    on disk is derived injectively"). Names that differ only in ``/``, ``_``, ``-``, spaces or
    case give different stems; the same name gives the same stem in every process.

    >>> name_slug("folder:/data/good")
    'folder-data-good-37b3b9f4af'
    >>> name_slug("folder:/data_good") != name_slug("folder:/data/good")
    True
    """
    text = str(name)
    readable = re.sub(r"[^A-Za-z0-9._+=-]+", "-", text.lower() if lower else text).strip("-.")
    readable = readable[:max_len].rstrip("-.") or "x"
    return f"{readable}-{hashlib.sha256(text.encode('utf-8', 'surrogateescape')).hexdigest()[:10]}"
