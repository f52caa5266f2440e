"""SQL over a results store: :meth:`Store.connect` as an in-memory DuckDB database.

Each call opens a fresh in-memory DuckDB connection over *this* store's files, located from the
store's path at connect time: a copied or moved store reads its own files, and nothing is written
to the store (no ``.duckdb`` file, no lock, no temporary file), so a read never competes with a
run that writes. A ``shiftbench.duckdb`` left in a store by an earlier version (views with
absolute paths), or any other ``.duckdb`` file there, is neither read nor written.

What the connection holds (columns and types: docs/store.md):

``predictions`` (view)
    Every per-example row of every key, read from ``predictions/key=<key>/part-<c>.parquet`` by
    DuckDB at query time (a part written after :meth:`connect` is seen, unless the store had no
    part at all then), with the ``key`` column from the folder name.
``logits`` (view)
    The float16 logits of ``--keep-logits`` passes, with the ``pass`` column from the folder name.
``results`` (view) and ``results_history`` (table)
    ``results_history``: one row per finished key (``done/<key>.json``), with ``current`` true on
    the rows :meth:`Store.results` holds (one per model, setting and convention: the longest
    example list, then the last finished); ``results``: those current rows, ``current`` left out,
    so SQL and the Python API agree row for row.
``keys`` (table) and ``runs`` (table)
    What determines each key (``keys/<key>.json``) and the run records (``runs/<run>.json``).

The tables are read when :meth:`connect` is called (connect again to see results finished
since). A view or table over files that do not exist yet (an empty store) is empty with the
same columns, so the example queries of docs/store.md run on a new store too.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa

if TYPE_CHECKING:  # pragma: no cover
    from shiftbench.store.store import Store

#: DuckDB types of a prediction part's columns (``shiftbench.engine.runner``); ``key`` comes from
#: the folder name. A multi-label key's parts add ``scores`` (``FLOAT[]``, one per class).
PREDICTION_TYPES: dict[str, str] = {
    "index": "BIGINT", "id": "VARCHAR", "target": "INTEGER[]", "group": "VARCHAR", "offset": "INTEGER",
    "status": "VARCHAR", "error": "VARCHAR", "pred": "INTEGER", "top5": "INTEGER[]", "correct": "BOOLEAN",
    "correct5": "BOOLEAN", "confidence": "FLOAT", "p_true": "FLOAT", "p_sq_sum": "FLOAT", "entropy": "FLOAT",
    "key": "VARCHAR"}
#: DuckDB types of a kept-logits part (``--keep-logits``); ``pass`` comes from the folder name.
LOGIT_TYPES: dict[str, str] = {"index": "BIGINT", "error": "VARCHAR", "logits": "FLOAT[]", "pass": "VARCHAR"}
#: Columns of ``results_history`` (and ``results``, less ``current``), from ``done/<key>.json``;
#: ``summary`` is the whole record as JSON (calibration bins, skipped files, groups, AP per class...).
RESULT_TYPES: dict[str, str] = {
    "model": "VARCHAR", "setting": "VARCHAR", "accuracy": "DOUBLE", "top5": "DOUBLE", "n_examples": "BIGINT",
    "n_skipped": "BIGINT", "convention": "VARCHAR", "ece": "DOUBLE", "nll": "DOUBLE", "brier": "DOUBLE",
    "dataset": "VARCHAR", "key": "VARCHAR", "finished": "DOUBLE", "model_type": "VARCHAR", "arch": "VARCHAR",
    "spec": "VARCHAR", "weights": "VARCHAR", "version": "VARCHAR", "label_space": "VARCHAR", "shift": "VARCHAR",
    "seed": "BIGINT", "worst_group_accuracy": "DOUBLE", "map": "DOUBLE", "summary": "JSON", "current": "BOOLEAN"}
#: Columns of ``keys``, from ``keys/<key>.json`` (``record``: the whole file as JSON).
KEY_TYPES: dict[str, str] = {
    "key": "VARCHAR", "model": "VARCHAR", "spec": "VARCHAR", "weights": "VARCHAR", "setting": "VARCHAR",
    "dataset": "VARCHAR", "convention": "VARCHAR", "shift": "VARCHAR", "seed": "BIGINT", "pass": "VARCHAR",
    "n_examples_in_dataset": "BIGINT", "version": "VARCHAR", "chunk_size": "BIGINT", "record": "JSON"}
#: Columns of ``runs``, from ``runs/<run>.json`` (``record``: the whole file as JSON).
RUN_TYPES: dict[str, str] = {
    "run_id": "VARCHAR", "model": "VARCHAR", "spec": "VARCHAR", "settings": "VARCHAR[]", "device": "VARCHAR",
    "shiftbench": "VARCHAR", "torch": "VARCHAR", "python": "VARCHAR", "batch_size": "BIGINT", "workers": "BIGINT",
    "limit": "BIGINT", "models_in_pass": "BIGINT", "started": "DOUBLE", "finished": "DOUBLE", "chunks": "BIGINT",
    "error": "VARCHAR", "record": "JSON"}

_ARROW = {"VARCHAR": pa.string(), "JSON": pa.string(), "DOUBLE": pa.float64(), "BIGINT": pa.int64(),
          "BOOLEAN": pa.bool_(), "VARCHAR[]": pa.list_(pa.string())}
_GLOB = set("*?[]{}")


def connect(store: Store):  # -> duckdb.DuckDBPyConnection
    """An in-memory DuckDB connection with the views and tables of ``store`` (module docstring).

    A store in a bucket is read through its fsspec filesystem, registered with the connection
    (``register_filesystem``); DuckDB's own extensions are neither loaded nor downloaded."""
    import duckdb  # deferred: loads duckdb

    con = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False,
                                             "autoload_known_extensions": False})
    try:
        if not store.fs.is_local:
            con.register_filesystem(store.fs.fsspec)
        _parquet_view(con, "predictions", store, "predictions", "key", PREDICTION_TYPES)
        _parquet_view(con, "logits", store, "logits", "pass", LOGIT_TYPES)
        history = store.results(history=True)
        current = set(store.results()["key"].astype(str))
        history = history.assign(current=history["key"].astype(str).isin(current))
        _table(con, "results_history", history, RESULT_TYPES, json_col="summary")
        con.execute("CREATE VIEW results AS SELECT * EXCLUDE (current) FROM results_history WHERE current "
                    "ORDER BY model, setting, convention")
        _table(con, "keys", _records(store.json_records("keys"), "key"), KEY_TYPES, json_col="record")
        _table(con, "runs", store.runs(), RUN_TYPES, json_col="record")
    except BaseException:
        con.close()
        raise
    return con


def _sql_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _parquet_view(con: Any, name: str, store: Store, folder: str, partition: str, types: Mapping[str, str]) -> None:
    """``name`` over ``folder/<partition>=<value>/part-*.parquet`` of ``store`` (the partition
    value as text), or an empty view with ``types`` when no part exists yet."""
    files = [f"{folder}/{d}/{n}" for d in store.fs.subdirs(folder) if d.startswith(f"{partition}=")
             for n in store.fs.glob(f"{folder}/{d}", "part-*.parquet")]
    if not files:
        cols = ", ".join(f"NULL::{t} AS {_ident(c)}" for c, t in types.items())
        con.execute(f"CREATE VIEW {name} AS SELECT {cols} WHERE false")
        return
    # a glob re-read at each query sees parts written later; a folder name with glob characters
    # (or quotes) is matched literally only as a list of files
    base = store.fs.url(folder)
    where = (_sql_text(f"{base}/{partition}=*/part-*.parquet") if not _GLOB & set(base)
             else "[" + ", ".join(_sql_text(store.fs.url(f)) for f in files) + "]")
    con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet({where}, hive_partitioning = true, "
                f"hive_types = {{{_sql_text(partition)}: VARCHAR}}, union_by_name = true)")


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _records(records: Sequence[tuple[str, Any]], id_column: str) -> pd.DataFrame:
    """One row per JSON file (``(stem, record)``: its fields, plus ``id_column`` = the stem)."""
    return pd.DataFrame([{**(row if isinstance(row, dict) else {}), id_column: stem} for stem, row in records])


def _table(con: Any, name: str, frame: pd.DataFrame, types: Mapping[str, str], json_col: str) -> None:
    """Table ``name`` with exactly the columns ``types`` (in that order), from ``frame``;
    ``json_col`` holds each row's record (every field of ``frame``) as JSON."""
    records = frame.to_dict("records")
    arrays = {}
    for col, kind in types.items():
        if col == json_col:
            values = [json.dumps(_plain({k: v for k, v in r.items() if k != "current" and not _scalar_missing(v)}),
                                 sort_keys=True, allow_nan=False, default=str) for r in records]
        else:
            values = [_value(r.get(col), kind) for r in records]
        arrays[col] = pa.array(values, _ARROW[kind])
    con.register(f"_{name}_rows", pa.table(arrays))
    cols = ", ".join(f"{_ident(c)}::{t} AS {_ident(c)}" for c, t in types.items())
    con.execute(f"CREATE TABLE {name} AS SELECT {cols} FROM _{name}_rows")
    con.unregister(f"_{name}_rows")


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA or v is pd.NaT


def _scalar_missing(v: Any) -> bool:
    return not isinstance(v, (list, tuple, dict)) and _missing(v)


def _value(v: Any, kind: str) -> Any:
    """``v`` as a value of DuckDB type ``kind`` (a value that is not one: NULL)."""
    if _scalar_missing(v):
        return None
    try:
        if kind == "VARCHAR":
            return v if isinstance(v, str) else json.dumps(_plain(v), default=str) if isinstance(v, (list, dict)) \
                else str(v)
        if kind == "DOUBLE":
            return float(v)
        if kind == "BIGINT":
            f = float(v)
            return int(f) if f.is_integer() else None
        if kind == "BOOLEAN":
            return bool(v)
        if kind == "VARCHAR[]":
            return [str(x) for x in v] if isinstance(v, (list, tuple)) else [str(v)]
    except (TypeError, ValueError):
        return None
    return v  # pragma: no cover - every kind is handled above


def _plain(v: Any) -> Any:
    """``v`` with NaN and infinities as ``None`` (JSON has no NaN) and numpy scalars as Python ones."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        try:
            v = v.item()
        except (TypeError, ValueError):
            return str(v)
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v
