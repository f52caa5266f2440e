"""``shiftbench sql``: a SQL query over a results store, printed as a table (or JSON).

One call into :meth:`shiftbench.store.Store.connect` (an in-memory DuckDB database with the views
``predictions``, ``logits``, ``results`` and the tables ``results_history``, ``keys``, ``runs``
over the store's own files; schema and examples: docs/store.md), so it works on a copied or moved
store and needs no ``duckdb`` program.
"""
from __future__ import annotations

import json
import math
from typing import Annotated, Any

import typer

from shiftbench.cli_options import DEFAULT_STORE, JsonOpt, StoreOpt
from shiftbench.cli_support import Table, jsonable, out
from shiftbench.errors import ConfigError

TABLES = "predictions, logits, results, results_history, keys, runs"


def _cell(value: Any) -> str:
    """A value as a table cell: NULL and NaN empty, floats to 6 significant digits."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def run_query(store, query: str) -> tuple[list[str], list[tuple]]:
    """Column names and rows of ``query`` over the store at ``store`` (a :class:`NotAStoreError`
    if there is none; a DuckDB error as a one-line :class:`ConfigError` naming the tables)."""
    import duckdb  # deferred: loads duckdb

    from shiftbench.store import Store  # deferred: loads pyarrow

    con = Store.existing(store).connect()
    try:
        cursor = con.execute(query)
        if cursor.description is None:  # a statement without a result (SET, CREATE ...)
            return [], []
        return [d[0] for d in cursor.description], cursor.fetchall()
    except duckdb.Error as exc:
        first = " ".join(str(exc).split("\n")[0].split())
        raise ConfigError(f"SQL: {first}; the store's tables are {TABLES} (columns: docs/store.md)") from exc
    finally:
        con.close()


def register(app: typer.Typer) -> None:
    """Add ``sql`` to the ``shiftbench`` app."""

    @app.command("sql")
    def sql_cmd(
        query: Annotated[str, typer.Argument(help=f"A DuckDB query over the store's tables ({TABLES}), e.g. "
                                             "\"SELECT model, setting, accuracy FROM results\".")],
        store: StoreOpt = DEFAULT_STORE,
        as_json: JsonOpt = False,
    ) -> None:
        """Run a SQL query over a results store (in-memory DuckDB views over its own files)."""
        columns, rows = run_query(store or DEFAULT_STORE, query)
        if as_json:
            print(json.dumps([{c: jsonable(v) for c, v in zip(columns, r)} for r in rows]))
            return
        if not columns:
            return
        table = Table(*columns)
        for r in rows:
            table.add_row(*(_cell(v) for v in r))
        out.print(table)
