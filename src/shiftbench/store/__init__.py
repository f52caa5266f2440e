"""The append-only results store (Parquet parts + catalog + DuckDB views)."""
from shiftbench.store.store import DEFAULT_STORE, Store

__all__ = ["Store", "DEFAULT_STORE"]
