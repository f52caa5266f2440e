"""The append-only results store (Parquet parts + catalog; SQL through an in-memory DuckDB).

Crash-safe writes and inter-process locks for anything written under a store live in
:mod:`shiftbench.store.files` (``atomic_write``, ``atomic_write_with``, ``file_lock``); the SQL
views of :meth:`Store.connect` in :mod:`shiftbench.store.sql` (schema: docs/store.md).
"""
from shiftbench.store.store import DEFAULT_STORE, NotAStoreError, Store

__all__ = ["Store", "DEFAULT_STORE", "NotAStoreError"]
