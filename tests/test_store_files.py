"""shiftbench.store.files: an inter-process lock and crash-safe atomic writes."""
from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path

import filelock
import pytest

from shiftbench.store.files import atomic_write, atomic_write_with, file_lock


def _hold_lock(lock_path: str, ready, release) -> None:
    with file_lock(lock_path):
        ready.set()
        release.wait(30)


def _try_lock(lock_path: str, queue) -> None:
    try:
        with file_lock(lock_path, timeout=0.2):
            queue.put("acquired")
    except filelock.Timeout:
        queue.put("timeout")


def test_lock_excludes_a_second_process(tmp_path: Path) -> None:
    lock_path = str(tmp_path / "sub" / ".lock")          # parent created on demand
    ctx = mp.get_context("spawn")
    ready, release, queue = ctx.Event(), ctx.Event(), ctx.Queue()
    holder = ctx.Process(target=_hold_lock, args=(lock_path, ready, release))
    holder.start()
    try:
        assert ready.wait(60), "the holder process never took the lock"
        # another process cannot take it while it is held ...
        contender = ctx.Process(target=_try_lock, args=(lock_path, queue))
        contender.start()
        contender.join(60)
        assert queue.get(timeout=10) == "timeout"
        # ... nor can this one
        with pytest.raises(filelock.Timeout):
            with file_lock(lock_path, timeout=0.1):
                pass
    finally:
        release.set()
        holder.join(60)
    assert holder.exitcode == 0
    # released on exit: now it is free
    t0 = time.monotonic()
    with file_lock(lock_path, timeout=5):
        pass
    assert time.monotonic() - t0 < 5


def test_lock_is_a_context_manager_and_released_on_error(tmp_path: Path) -> None:
    lock = file_lock(tmp_path / ".lock")
    with pytest.raises(RuntimeError):
        with lock:
            assert lock.is_locked
            raise RuntimeError("boom")
    assert not lock.is_locked


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_atomic_write_bytes(tmp_path: Path) -> None:
    path = tmp_path / "new" / "a.json"                       # parent created on demand
    atomic_write(path, b"one")
    assert path.read_bytes() == b"one"
    atomic_write(path, b"two")                               # replaces
    assert path.read_bytes() == b"two"
    assert _leftovers(path.parent) == []


def test_atomic_write_with_success_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "part-000000.parquet"
    seen: list[Path] = []

    def writer(tmp: Path) -> None:
        seen.append(tmp)
        assert tmp.parent == path.parent and tmp != path and tmp.exists()
        tmp.write_bytes(b"content")

    atomic_write_with(path, writer)
    assert path.read_bytes() == b"content"
    assert not seen[0].exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_atomic_write_with_keeps_the_old_file_when_the_writer_raises(tmp_path: Path) -> None:
    path = tmp_path / "a.bin"
    path.write_bytes(b"old")

    def writer(tmp: Path) -> None:
        tmp.write_bytes(b"half-writ")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write_with(path, writer)
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]

    # and a path that did not exist stays absent
    with pytest.raises(OSError):
        atomic_write_with(tmp_path / "b.bin", writer)
    assert not (tmp_path / "b.bin").exists()
    assert _leftovers(tmp_path) == []


def test_temporary_names_are_unique(tmp_path: Path) -> None:
    path = tmp_path / "x"
    names: list[Path] = []

    def outer(tmp: Path) -> None:
        names.append(tmp)
        atomic_write_with(path, lambda t: (names.append(t), t.write_bytes(b"inner")))
        tmp.write_bytes(b"outer")

    atomic_write_with(path, outer)
    assert names[0] != names[1]
    assert path.read_bytes() == b"outer"
    assert _leftovers(tmp_path) == []
