"""``store=None``: a results store that lives in this process and writes nothing anywhere.

:func:`shiftbench.evaluate` with ``store=None`` runs the same passes and returns the same result
frame as with a store directory, but keeps every part, key and run record in memory (no file, no
temporary directory), so nothing is reused from an earlier call and nothing is left behind.
Finished results go through the same JSON round trip as on disk, so their values and types are
those a store would give back.
"""
from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
import pyarrow as pa


class MemoryStore:
    """The part of :class:`~shiftbench.store.store.Store` the runner uses, in memory."""

    root = None

    def __init__(self) -> None:
        self._keys: dict[str, dict[str, Any]] = {}
        self._parts: dict[str, dict[int, pa.Table]] = {}
        self._done: dict[str, dict[str, Any]] = {}
        self._logits: dict[tuple[str, int], pa.Table] = {}
        self.run_records: list[dict[str, Any]] = []

    @staticmethod
    def _json(obj: Mapping[str, Any]) -> dict[str, Any]:
        return json.loads(json.dumps(dict(obj), sort_keys=True, default=str))

    def register(self, key: str, meta: Mapping[str, Any]) -> None:
        self._keys.setdefault(key, self._json(meta))

    def key_meta(self, key: str) -> dict[str, Any]:
        if key not in self._keys:
            raise FileNotFoundError(key)
        return dict(self._keys[key])

    def update_key_meta(self, key: str, **fields: Any) -> None:
        self._keys[key] = {**self._keys.get(key, {}), **self._json(fields)}

    def key_lock(self, key: str) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def is_done(self, key: str) -> bool:
        return key in self._done

    def read_done(self, key: str) -> dict[str, Any]:
        return dict(self._done[key])

    def parts(self, key: str) -> set[int]:
        return set(self._parts.get(key, {}))

    def write_part(self, key: str, chunk: int, table: pa.Table) -> None:
        self._parts.setdefault(key, {})[chunk] = table

    def read_predictions(self, key: str, columns: Sequence[str] | None = None) -> pd.DataFrame:
        parts = self._parts.get(key, {})
        if not parts:
            return pd.DataFrame()
        tables = [parts[c] for c in sorted(parts)]
        frame = pa.concat_tables(tables).to_pandas() if len({t.schema for t in tables}) == 1 else \
            pd.concat([t.to_pandas() for t in tables], ignore_index=True)
        if columns is not None:
            frame = frame[[c for c in dict.fromkeys(["index", *columns]) if c in frame]]
        return frame.sort_values("index", kind="stable").reset_index(drop=True)

    def finish(self, key: str, summary: Mapping[str, Any]) -> None:
        self._done[key] = json.loads(json.dumps({**summary, "key": key, "finished": time.time()}, default=str))

    def forget(self, key: str) -> None:
        self._done.pop(key, None)
        self.forget_parts(key)

    def forget_parts(self, key: str) -> None:
        self._parts.pop(key, None)

    def has_logits(self, pass_key: str, chunk: int) -> bool:
        return (pass_key, chunk) in self._logits

    def write_logits(self, pass_key: str, chunk: int, table: pa.Table) -> None:
        self._logits[(pass_key, chunk)] = table

    def read_logits(self, pass_key: str, chunk: int) -> pa.Table:
        return self._logits[(pass_key, chunk)]

    def set_model_type(self, model: str, model_type: str) -> dict[str, Any]:
        """As :meth:`Store.set_model_type`: ``model_type`` on every finished result of ``model``;
        ``{key: previous type}`` of those it changed."""
        changed: dict[str, Any] = {}
        for key, row in self._done.items():
            if row.get("model") == model and row.get("model_type") != model_type:
                changed[key] = row.get("model_type")
                row["model_type"] = model_type
        return changed

    def record_run(self, meta: Mapping[str, Any]) -> str:
        run_id = f"memory-{len(self.run_records)}"
        self.run_records.append({**self._json(meta), "run_id": run_id})
        return run_id
