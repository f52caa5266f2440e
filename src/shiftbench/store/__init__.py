"""The append-only results store (Parquet parts + catalog + DuckDB views).

Crash-safe writes and inter-process locks for anything written under a store live in
:mod:`shiftbench.store.files` (``atomic_write``, ``atomic_write_with``, ``file_lock``).
"""
from shiftbench.store.store import DEFAULT_STORE, Store

__all__ = ["Store", "DEFAULT_STORE"]
