"""``shiftbench store sync SRC DST``: copy a whole results store between a folder and a bucket.

Either side is a folder or a URI (:mod:`shiftbench.store.fs`), so a store can be copied out of a
bucket into a directory, into a bucket from one, or between two buckets. Each file is read, its
size and SHA-256 taken, written to the destination (atomically: fsync-and-rename in a folder, one
PUT in a bucket) and read back to check both; a file already at the destination with the same
size and hash is skipped, so an interrupted sync run again copies only what is missing. The
finished-result records (``done/``) are copied last: a sync stopped half-way leaves a store whose
finished keys have all their parts (the others are merely unfinished, and ``shiftbench eval``
completes them). Files at the destination that the source lacks are left alone; locks and
temporary files are not copied.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shiftbench.errors import StoreError
from shiftbench.store.store import FORMAT_FILE, NotAStoreError, Store

#: the order folders are copied in: what makes a key finished comes after what it needs
_ORDER = (FORMAT_FILE, "keys/", "predictions/", "logits/", "features/", "studies/", "runs/", "done/")
#: never copied: a local store's lock files
_SKIP = ("locks/",)


@dataclass
class SyncReport:
    """What :func:`sync_store` did: every file of the source, and how each fared."""

    src: str
    dst: str
    files: int = 0
    copied: int = 0
    skipped: int = 0          # already at the destination, same size and hash
    bytes_copied: int = 0
    copied_files: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"src": self.src, "dst": self.dst, "files": self.files, "copied": self.copied,
                "skipped": self.skipped, "bytes_copied": self.bytes_copied}


def _rank(rel: str) -> tuple[int, str]:
    return next((i for i, p in enumerate(_ORDER) if rel == p or rel.startswith(p)), len(_ORDER) - 1), rel


def sync_store(src: str | Path | Store, dst: str | Path | Store, *,
               src_options: Mapping[str, Any] | None = None, dst_options: Mapping[str, Any] | None = None,
               on_start: Callable[[int], None] | None = None, on_file: Callable[[str, int], None] | None = None,
               threads: int = 8) -> SyncReport:
    """Copy every file of the store ``src`` to ``dst`` (module docstring), verifying each.

    ``src`` must be a store (:meth:`Store.existing`); ``dst`` a missing or empty folder or
    prefix, or a store. ``on_start(n_files)`` is called once both are checked, before the first
    copy; ``on_file(rel, size)`` after each file (copied or skipped).
    A file whose copy reads back with another size or hash is a :class:`StoreError` naming it."""
    source = Store.existing(src, src_options)
    target = dst if isinstance(dst, Store) else Store(dst, dst_options)
    if target.location == source.location:
        raise StoreError(f"{source.location}: source and destination are the same store")
    files = {rel: size for rel, size in source.fs.walk().items()
             if not rel.startswith(_SKIP) and not rel.endswith(".duckdb")}
    have = target.fs.walk()
    if have and not target.looks_like_store() and not set(have) <= {FORMAT_FILE}:
        raise NotAStoreError(f"{target.location}: holds files that are not a results store; sync into an empty "
                             "folder or prefix, or into a store")
    report = SyncReport(source.location, target.location, files=len(files))
    if on_start is not None:
        on_start(len(files))

    def one(rel: str) -> tuple[str, int, bool]:
        data = source.fs.read_bytes(rel)
        digest = hashlib.sha256(data).hexdigest()
        if have.get(rel) == len(data) and hashlib.sha256(target.fs.read_bytes(rel)).hexdigest() == digest:
            return rel, len(data), False
        target.fs.write_bytes(rel, data)
        back = target.fs.read_bytes(rel)
        if len(back) != len(data) or hashlib.sha256(back).hexdigest() != digest:
            raise StoreError(f"{target.location}/{rel}: the copy reads back with another size or hash ({len(back)} "
                             f"bytes, not {len(data)}); run the sync again")
        return rel, len(data), True

    order = sorted(files, key=_rank)
    # copy in stages (done/ strictly after the rest), each stage's files concurrently
    stages: dict[int, list[str]] = {}
    for rel in order:
        stages.setdefault(0 if not rel.startswith("done/") else 1, []).append(rel)
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        for stage in sorted(stages):
            for rel, size, copied in pool.map(one, stages[stage]):
                if copied:
                    report.copied += 1
                    report.bytes_copied += size
                    report.copied_files.append(rel)
                else:
                    report.skipped += 1
                if on_file is not None:
                    on_file(rel, size)
    return report
