"""shiftbench.store.files: an inter-process lock and crash-safe atomic writes."""
from __future__ import annotations

import multiprocessing as mp
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
    # released on exit: now it is free (taken at once: a held lock would raise Timeout after 5 s)
    with file_lock(lock_path, timeout=5):
        pass


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


def test_reading_many_keys_in_one_scan_gives_what_one_key_at_a_time_gives(tmp_path: Path) -> None:
    import pandas as pd
    import pyarrow as pa

    from shiftbench.store import Store

    store = Store(tmp_path / "s")
    keys = ["0123456789012345", "abcdef0123456789", "00000000000000ff"]   # an all-digit key stays text
    for j, key in enumerate(keys):
        for chunk in (1, 0):  # written out of order: rows come back in index order
            idx = list(range(chunk * 4, chunk * 4 + 4))
            store.write_part(key, chunk, pa.table({"index": pa.array(idx, pa.int64()),
                                                   "id": [f"im{i}" for i in idx], "status": ["ok"] * 4,
                                                   "correct": [(i + j) % 2 == 0 for i in idx]}))
    old = "11111111aaaaaaaa"   # parts written before a column existed: read on their own
    store.write_part(old, 0, pa.table({"index": pa.array([0, 1], pa.int64()), "id": ["a", "b"],
                                       "status": ["ok", "ok"]}))
    many = store.read_predictions_of([*keys, old, "nopartsatall0000"], ["id", "status", "correct"])
    for key in keys:
        pd.testing.assert_frame_equal(many[key], store.read_predictions(key, ["id", "status", "correct"]))
        assert many[key]["index"].tolist() == list(range(8))
    assert list(many[old].columns) == ["index", "id", "status"] and many["nopartsatall0000"].empty
