"""The results store: append-only Parquet parts, a catalog of finished keys, DuckDB on top.

Layout of a store directory (default ``./shiftbench-results``)::

    keys/<key>.json                       what determines the key (model, weights, preprocessing,
                                          dataset and its example ids, setting, view, version), and
                                          the chunk size its parts are numbered in (not part of the key)
    predictions/key=<key>/part-<c>.parquet  per-example rows of chunk ``c`` of the dataset
    logits/pass=<pass>/part-<c>.parquet   float16 logits of a forward pass (``--keep-logits``)
    done/<key>.json                       the finished result: accuracy, top-5, counts, skipped
    locks/<key>.lock                      held while a run forgets a key (--force), re-chunks it or
                                          finishes it (never while it computes)
    runs/<run>.json                       run metadata (versions, device, preprocessing, time)
    studies/<kind>/<name>.parquet         results of studies beyond one accuracy per key (fine-tuning
                                          trajectories, resolution sweeps, compositing, similarity),
                                          long-form tables the report reads; ``<name>.json`` beside
                                          each holds its metadata

Nothing in a store names its own location, so a store can be copied or moved: :meth:`Store.connect`
opens an in-memory DuckDB database with views over the files of the store it is called on
(:mod:`shiftbench.store.sql`; the schema and example queries are in docs/store.md).

Every file is written to a temporary name in the same directory, fsynced and atomically
renamed (DESIGN principle 4). A chunk's part has a deterministic name, so a resumed or a
concurrent run that recomputes it replaces identical content: a key ends with exactly the
rows of an uninterrupted run, never duplicates, and a crash leaves at most an ignored
``*.tmp`` file. Reading (the Python API or SQL) writes nothing, so any number of runs and readers
can share a store.

A folder is a store once shiftbench has written one of the folders above into it; the commands
that read a store open it with :meth:`Store.existing`, which refuses a missing folder or one that
is not a store (:class:`NotAStoreError`) instead of showing an empty table.

:meth:`Store.results` holds the current result of each (model, setting, convention): where a
model was evaluated again under another key (new weights, a new version, a longer example
list), the older key stays on disk (``results(history=True)``, the run records) but leaves the
table, so an exported table loads back as a testbed.
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from shiftbench.errors import ConfigError, StoreError
from shiftbench.store.files import atomic_write as _atomic_write_bytes
from shiftbench.store.files import atomic_write_with, file_lock

DEFAULT_STORE = "shiftbench-results"
#: The database file earlier versions kept in a store (views with absolute paths); no longer read
#: or written: :meth:`Store.connect` is an in-memory database over the store's own files.
DB_NAME = "shiftbench.duckdb"
#: The folders shiftbench writes into a store: a folder holding none of them is not a store.
STORE_FOLDERS = ("done", "keys", "predictions", "runs", "studies", "logits")
RESULT_COLUMNS = ["model", "setting", "accuracy", "top5", "n_examples", "n_skipped", "convention",
                  "ece", "nll", "brier", "dataset", "key", "finished"]


def digest(obj: Any, n: int = 16) -> str:
    """Stable short hash of a JSON-serialisable object."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:n]


#: The fix for a ``done/<key>.json`` that is not a finished result.
_DONE_FIX = "remove it; the next `shiftbench eval` of that model and setting recomputes the key"
_JSON_TYPES = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean",
               type(None): "null"}


def _quoted(path: Path) -> str:
    """``path`` as a shell word (quoted where it has spaces or quotes)."""
    return shlex.quote(str(path))


def current_results(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``frame`` (finished keys) that are current: one per (model, setting, convention),
    the longest example list (``n_examples + n_skipped``: a ``--limit`` look never hides a full
    run), then the last finished (a model re-evaluated with new weights or a new version replaces
    its older result). Row order is kept."""
    if frame.empty:
        return frame
    size = (pd.to_numeric(frame["n_examples"], errors="coerce").fillna(0)
            + pd.to_numeric(frame["n_skipped"], errors="coerce").fillna(0))
    finished = pd.to_numeric(frame["finished"], errors="coerce").fillna(0)
    ranked = frame[["model", "setting", "convention"]].assign(_size=size, _finished=finished)
    ranked = ranked.sort_values(["_size", "_finished"], kind="stable")
    keep = ranked.drop_duplicates(["model", "setting", "convention"], keep="last").index
    return frame.loc[frame.index.isin(keep)]


class NotAStoreError(StoreError, ConfigError):
    """``--store`` (or ``store=``) names no results store: a missing folder, a file, or a folder
    shiftbench did not write. A :class:`StoreError`, and a :class:`ConfigError` (a wrong option)."""


def _atomic_write_parquet(path: Path, table: pa.Table) -> None:
    atomic_write_with(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))


class Store:
    """A results store rooted at a directory (created on first use)."""

    def __init__(self, root: str | Path = DEFAULT_STORE) -> None:
        self.root = Path(root)
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(f"{self.root}: is a file, not a results store directory; pass --store DIR")

    @classmethod
    def existing(cls, root: str | Path | Store) -> Store:
        """The store at ``root`` for reading (every command that reads ``--store`` opens it here;
        a :class:`Store` is returned as it is).

        A missing folder, a file, or a folder holding none of :data:`STORE_FOLDERS` (an empty
        one included) is a one-line :class:`NotAStoreError` naming the path and the fix, where
        ``Store(root)`` would create a store on first write and read an empty one."""
        if isinstance(root, Store):  # opened by the caller: trusted
            return root
        path = Path(root)
        if path.exists() and not path.is_dir():
            raise NotAStoreError(f"{path}: no results store there (a file, not a folder); point --store at a "
                                 "folder made by shiftbench eval")
        if not path.is_dir():
            raise NotAStoreError(f"{path}: no results store there (no such folder); run `shiftbench eval --store "
                                 f"{_quoted(path)}` first, or point --store at a folder made by shiftbench eval")
        store = cls(path)
        if not store.looks_like_store():
            raise NotAStoreError(f"{path}: not a results store (none of {', '.join(f + '/' for f in STORE_FOLDERS)} "
                                 f"in it); point --store at a folder made by shiftbench eval, or run "
                                 f"`shiftbench eval --store {_quoted(path)}` first")
        return store

    def looks_like_store(self) -> bool:
        """The root is a folder holding one of the folders shiftbench writes (:data:`STORE_FOLDERS`)."""
        return self.root.is_dir() and any((self.root / name).is_dir() for name in STORE_FOLDERS)

    # ------------------------------------------------------------------ paths
    def _key_dir(self, key: str) -> Path:
        return self.root / "predictions" / f"key={key}"

    def _part(self, key: str, chunk: int) -> Path:
        return self._key_dir(key) / f"part-{chunk:06d}.parquet"

    def _logits_part(self, pass_key: str, chunk: int) -> Path:
        return self.root / "logits" / f"pass={pass_key}" / f"part-{chunk:06d}.parquet"

    # ------------------------------------------------------------------ keys
    def register(self, key: str, meta: Mapping[str, Any]) -> None:
        """Record what determines ``key`` (idempotent: the first record stays)."""
        path = self.root / "keys" / f"{key}.json"
        if not path.exists():
            _atomic_write_bytes(path, json.dumps(dict(meta), sort_keys=True, default=str, indent=1).encode())

    def key_meta(self, key: str) -> dict[str, Any]:
        return self._read_json(self.root / "keys" / f"{key}.json")

    def update_key_meta(self, key: str, **fields: Any) -> None:
        """Replace some fields of ``key``'s record (e.g. the ``chunk_size`` its parts are numbered
        in, which is not part of the key); hold :meth:`key_lock`."""
        path = self.root / "keys" / f"{key}.json"
        try:
            meta = self._read_json(path)
        except FileNotFoundError:
            meta = {}
        meta = meta if isinstance(meta, dict) else {}
        _atomic_write_bytes(path, json.dumps({**meta, **fields}, sort_keys=True, default=str, indent=1).encode())

    def key_lock(self, key: str):  # -> filelock.FileLock
        """An inter-process lock on ``key`` (:func:`~shiftbench.store.files.file_lock`). A run holds
        it while it forgets the key (``--force``), restarts it under another chunk size, or checks
        that its parts are complete and marks it finished -- never while it computes -- so a forced
        run cannot remove parts under a run that is reading them to finish the key."""
        return file_lock(self.root / "locks" / f"{key}.lock")

    def is_done(self, key: str) -> bool:
        return (self.root / "done" / f"{key}.json").exists()

    def read_done(self, key: str) -> dict[str, Any]:
        """The finished result of ``key`` (a :class:`StoreError` naming the file if it is not one)."""
        return self._read_done(self.root / "done" / f"{key}.json")

    def _read_done(self, path: Path) -> dict[str, Any]:
        """A ``done/<key>.json``, checked: a JSON object naming its model and setting. A folder in
        its place, an unreadable file or any other JSON is a one-line :class:`StoreError`."""
        if path.is_dir():
            raise StoreError(f"{path}: a folder where a finished result (a JSON file) belongs; {_DONE_FIX}")
        try:
            row = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise
        except (ValueError, OSError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise StoreError(f"{path}: not a finished result, unreadable ({type(exc).__name__}: "
                             f"{' '.join(str(exc).split())}); {_DONE_FIX}") from exc
        if not isinstance(row, dict) or not all(isinstance(row.get(k), str) for k in ("model", "setting")):
            what = ("an empty JSON object" if row == {} else
                    "a JSON object without model and setting" if isinstance(row, dict) else
                    f"a JSON {_JSON_TYPES.get(type(row), type(row).__name__)}")
            raise StoreError(f"{path}: not a finished result ({what}, not an object naming its model and "
                             f"setting); {_DONE_FIX}")
        return row

    def parts(self, key: str) -> set[int]:
        """Chunks of ``key`` already written."""
        d = self._key_dir(key)
        if not d.exists():
            return set()
        return {int(p.stem.split("-")[1]) for p in d.glob("part-*.parquet")}

    def write_part(self, key: str, chunk: int, table: pa.Table) -> None:
        _atomic_write_parquet(self._part(key, chunk), table)

    def read_predictions(self, key: str, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """All per-example rows of ``key``, in dataset order; ``columns``: only these (those a part
        lacks are left out; Parquet reads just them, which is what makes wide logit-free reads of
        hundreds of keys fast)."""
        files = sorted(self._key_dir(key).glob("part-*.parquet"))
        if not files:
            return pd.DataFrame()
        try:
            if columns is None:
                tables = [pq.read_table(f) for f in files]
            else:
                wanted = list(dict.fromkeys(["index", *columns]))
                tables = []
                for f in files:
                    names = set(pq.read_schema(f).names)
                    tables.append(pq.read_table(f, columns=[c for c in wanted if c in names]))
            if len({t.schema for t in tables}) == 1:  # one conversion for the whole key
                frame = pa.concat_tables(tables).to_pandas()
            else:
                frame = pd.concat([t.to_pandas() for t in tables], ignore_index=True)
        except (pa.ArrowInvalid, OSError) as exc:
            raise StoreError(f"{self._key_dir(key)}: unreadable part ({exc}); rerun with --force for this "
                             "model and setting") from exc
        return frame.sort_values("index", kind="stable").reset_index(drop=True)

    def read_predictions_of(self, keys: Sequence[str], columns: Sequence[str]) -> dict[str, pd.DataFrame]:
        """:meth:`read_predictions` of several keys (``columns`` only), read in one Parquet scan
        over all their parts - on the digits store several times faster than one read per key. Keys
        whose parts lack one of ``columns`` (a store written before the column existed) and keys
        without parts are read one at a time, as :meth:`read_predictions` reads them."""
        import pyarrow.dataset as ds  # deferred: pyarrow's dataset module (the store loads pyarrow)

        wanted = list(dict.fromkeys(["index", *columns]))
        files = {k: sorted(self._key_dir(k).glob("part-*.parquet")) for k in dict.fromkeys(keys)}
        out: dict[str, pd.DataFrame] = {}
        scan = [str(f) for fs in files.values() for f in fs]
        if scan:
            try:
                # the key is text: an all-digit hex digest must not be read as a number
                data = ds.dataset(scan, format="parquet", partition_base_dir=str(self.root / "predictions"),
                                  partitioning=ds.partitioning(pa.schema([("key", pa.string())]), flavor="hive"))
                same = all(set(wanted) <= set(pq.read_schema(fs[0]).names) for fs in files.values() if fs)
                if same and set(wanted) <= set(data.schema.names):
                    frame = data.to_table(columns=[*wanted, "key"]).to_pandas()
                    for key, part in frame.groupby("key", sort=False, observed=True):
                        out[str(key)] = (part.drop(columns="key").sort_values("index", kind="stable")
                                         .reset_index(drop=True))
            except (pa.ArrowInvalid, OSError):
                out = {}  # read one key at a time below, which names the unreadable part
        return {k: out[k] if k in out else self.read_predictions(k, columns) for k in files}

    def finish(self, key: str, summary: Mapping[str, Any]) -> None:
        """Mark ``key`` finished with its summary (atomic)."""
        _atomic_write_bytes(self.root / "done" / f"{key}.json",
                            json.dumps({**summary, "key": key, "finished": time.time()}, default=str).encode())

    def forget(self, key: str) -> None:
        """Remove a key's parts and result (``--force``; hold :meth:`key_lock`)."""
        done = self.root / "done" / f"{key}.json"
        if done.is_dir():
            raise StoreError(f"{done}: a folder where a finished result (a JSON file) belongs; {_DONE_FIX}")
        done.unlink(missing_ok=True)
        self.forget_parts(key)

    def forget_parts(self, key: str) -> None:
        """Remove the parts of an unfinished key (to compute it again from its first chunk)."""
        for p in self._key_dir(key).glob("part-*.parquet"):
            p.unlink(missing_ok=True)

    # ------------------------------------------------------------------ logits
    def has_logits(self, pass_key: str, chunk: int) -> bool:
        return self._logits_part(pass_key, chunk).exists()

    def write_logits(self, pass_key: str, chunk: int, table: pa.Table) -> None:
        _atomic_write_parquet(self._logits_part(pass_key, chunk), table)

    def read_logits(self, pass_key: str, chunk: int) -> pa.Table:
        return pq.read_table(self._logits_part(pass_key, chunk))

    # ------------------------------------------------------------------ runs and results
    def record_run(self, meta: Mapping[str, Any]) -> str:
        run_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{digest(dict(meta), 6)}"
        _atomic_write_bytes(self.root / "runs" / f"{run_id}.json",
                            json.dumps({**meta, "run_id": run_id}, default=str, indent=1).encode())
        return run_id

    def _read_json(self, path: Path) -> dict[str, Any]:
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            raise
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise StoreError(f"{path}: corrupted ({exc}); delete it and rerun the evaluation") from exc

    def _done_stamp(self) -> tuple[tuple[str, int, int], ...]:
        """Name, modification time and size of every finished key's file (what :meth:`results` reads)."""
        try:
            entries = [e for e in os.scandir(self.root / "done") if e.name.endswith(".json")]
        except FileNotFoundError:
            return ()
        stamp = []
        for e in entries:
            try:
                st = e.stat()
            except FileNotFoundError:  # replaced while listing: the next call sees the new file
                continue
            stamp.append((e.name, st.st_mtime_ns, st.st_size))
        return tuple(sorted(stamp))

    def results(self, history: bool = False) -> pd.DataFrame:
        """The current result of each (model, setting, convention) (:func:`current_results`: the
        longest example list, then the last finished), sorted by model and setting;
        ``history=True``: every finished key, older results of a re-evaluated model included.

        The table is cached on this object and re-read only when a finished key's file was added,
        replaced or removed (name, modification time and size of each), so a report's sections can
        each ask for it without re-reading thousands of JSON files. A ``done/*.json`` that is not
        a finished result is a :class:`StoreError` naming it."""
        stamp = self._done_stamp()
        cached = getattr(self, "_results_cache", None)
        if cached is None or cached[0] != stamp:
            frame = self._read_results([self.root / "done" / name for name, _, _ in stamp])
            cached = self._results_cache = (stamp, frame, current_results(frame).reset_index(drop=True))
        return cached[1 if history else 2].copy()

    def _read_results(self, paths: list[Path]) -> pd.DataFrame:
        rows = []
        for p in paths:
            try:
                rows.append(self._read_done(p))
            except FileNotFoundError:  # forgotten (--force) while listing
                continue
        frame = pd.DataFrame(rows)
        for col in RESULT_COLUMNS:
            if col not in frame:
                frame[col] = pd.Series(dtype=object)
        rest = [c for c in frame.columns if c not in RESULT_COLUMNS]
        return frame[RESULT_COLUMNS + rest].sort_values(["model", "setting"], kind="stable").reset_index(drop=True)

    def runs(self) -> pd.DataFrame:
        return pd.DataFrame([self._read_json(p) for p in sorted((self.root / "runs").glob("*.json"))])

    # ------------------------------------------------------------------ studies
    def _study_path(self, kind: str, name: str) -> Path:
        for what, value in (("study kind", kind), ("study name", name)):
            if not value or "/" in value or value.startswith(".") or "\\" in value:
                raise StoreError(f"{what} {value!r}: use a plain name without '/' or a leading '.'")
        return self.root / "studies" / kind / f"{name}.parquet"

    def write_study(self, kind: str, name: str, frame: pd.DataFrame,
                    meta: Mapping[str, Any] | None = None) -> Path:
        """Store (replace, atomically) the long-form table ``frame`` of study ``name`` of ``kind``
        (e.g. ``"trajectory"``, ``"resolution"``, ``"compositing"``) with optional metadata."""
        path = self._study_path(kind, name)
        table = pa.Table.from_pandas(frame.reset_index(drop=True), preserve_index=False)
        _atomic_write_parquet(path, table)
        _atomic_write_bytes(path.with_suffix(".json"),
                            json.dumps({**dict(meta or {}), "kind": kind, "name": name, "written": time.time()},
                                       sort_keys=True, default=str, indent=1).encode())
        return path

    def study_names(self, kind: str) -> list[str]:
        """Names of the stored studies of ``kind`` (sorted)."""
        return sorted(p.stem for p in (self.root / "studies" / kind).glob("*.parquet"))

    def read_study(self, kind: str, name: str) -> pd.DataFrame:
        """One stored study's table (a :class:`StoreError` naming the file if it is missing)."""
        path = self._study_path(kind, name)
        if not path.exists():
            have = ", ".join(self.study_names(kind)) or "none"
            raise StoreError(f"{path}: no {kind} study named {name!r} in this store (stored: {have})")
        try:
            return pq.read_table(path).to_pandas()
        except (pa.ArrowInvalid, OSError) as exc:
            raise StoreError(f"{path}: unreadable ({exc}); delete it and rerun the study") from exc

    def study_meta(self, kind: str, name: str) -> dict[str, Any]:
        path = self._study_path(kind, name).with_suffix(".json")
        return self._read_json(path) if path.exists() else {}

    def read_studies(self, kind: str) -> pd.DataFrame:
        """Every stored study of ``kind`` concatenated, with a ``study`` column (empty if none)."""
        frames = [self.read_study(kind, n).assign(study=n) for n in self.study_names(kind)]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    # ------------------------------------------------------------------ DuckDB
    def connect(self):  # -> duckdb.DuckDBPyConnection
        """An in-memory DuckDB connection over this store's files: the views ``predictions``,
        ``logits`` and ``results``, the tables ``results_history``, ``keys`` and ``runs``
        (:mod:`shiftbench.store.sql`; columns and example queries: docs/store.md).

        Paths are taken from this store's folder when called, so a copied or moved store reads
        its own files; nothing is written to the store (a ``.duckdb`` file in it, from an earlier
        version or the duckdb CLI, is not read); an empty store gives empty tables with the same
        columns. A folder that does not exist is a :class:`NotAStoreError`."""
        from shiftbench.store import sql  # deferred: loads duckdb on connect

        if not self.root.is_dir():
            raise NotAStoreError(f"{self.root}: no results store there (no such folder); run `shiftbench eval "
                                 f"--store {_quoted(self.root)}` first, or point it at a folder made by shiftbench eval")
        return sql.connect(self)

    # ------------------------------------------------------------------ model metadata
    def set_model_type(self, model: str, model_type: str) -> dict[str, Any]:
        """Record ``model_type`` on every finished result of ``model`` (its ``done/<key>.json``),
        without recomputing anything: the type is metadata of the model, not part of a key.
        Returns ``{key: previous type}`` of the keys whose type changed (each rewritten atomically
        under its key lock; the ``finished`` time is kept, so which result is current does not
        change)."""
        changed: dict[str, Any] = {}
        for key in self.results(history=True).query("model == @model")["key"].astype(str):
            with self.key_lock(key):
                try:
                    row = self.read_done(key)
                except FileNotFoundError:  # forgotten (--force) meanwhile
                    continue
                if row.get("model_type") == model_type:
                    continue
                changed[key] = row.get("model_type")
                row = {**row, "model_type": model_type}
                _atomic_write_bytes(self.root / "done" / f"{key}.json", json.dumps(row, default=str).encode())
        return changed
