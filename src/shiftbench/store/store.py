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

import contextlib
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
from shiftbench.store.fs import StoreFS, is_uri, open_fs

DEFAULT_STORE = "shiftbench-results"
#: The database file earlier versions kept in a store (views with absolute paths); no longer read
#: or written: :meth:`Store.connect` is an in-memory database over the store's own files.
DB_NAME = "shiftbench.duckdb"
#: The folders shiftbench writes into a store: a folder holding none of them is not a store.
STORE_FOLDERS = ("done", "keys", "predictions", "runs", "studies", "logits")
#: The file naming the layout's format, written with a store's first file; a store of a later
#: format (written by a newer shiftbench) is refused in one line instead of misread.
FORMAT_FILE = "store.json"
#: The layout this version reads and writes (docs/store.md); a store without :data:`FORMAT_FILE`
#: was written before it existed, in format 1.
STORE_FORMAT = 1
RESULT_COLUMNS = ["model", "setting", "accuracy", "top5", "n_examples", "n_skipped", "convention",
                  "ece", "nll", "brier", "dataset", "key", "finished"]


def digest(obj: Any, n: int = 16) -> str:
    """Stable short hash of a JSON-serialisable object."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:n]


#: The fix for a ``done/<key>.json`` that is not a finished result.
_DONE_FIX = "remove it; the next `shiftbench eval` of that model and setting recomputes the key"
_JSON_TYPES = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean",
               type(None): "null"}


def _quoted(path: Path | str) -> str:
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



def _parquet_bytes(table: pa.Table) -> Any:
    return lambda target: pq.write_table(table, target, compression="zstd")


class Store:
    """A results store rooted at a folder or an fsspec URI (created on first write).

    ``root``: a local folder (``Path`` or ``str``), or a URI such as ``s3://bucket/prefix``,
    ``gs://...``, ``az://...``, ``file:///abs/path`` or ``memory://name``; ``storage_options``:
    keyword arguments for the URI's fsspec filesystem (``{"endpoint_url": ..., "key": ...,
    "secret": ...}`` for s3fs), where the environment and config files do not already say them.
    Every file is read and written through :attr:`fs` (:mod:`shiftbench.store.fs`)."""

    def __init__(self, root: str | Path | Store = DEFAULT_STORE,
                 storage_options: Mapping[str, Any] | None = None) -> None:
        if isinstance(root, Store):  # the same store, opened again
            root, storage_options = root.location, storage_options or root.storage_options
        self.fs: StoreFS = open_fs(root, storage_options)
        self.storage_options = dict(storage_options or {})
        #: the store's folder (a ``Path``) for a local store; its URI (a ``str``) otherwise
        self.root: Path | str = self.fs.root if self.fs.is_local else self.fs.location
        self._format_checked = False
        if self.fs.is_local and self.root.exists() and not self.root.is_dir():  # type: ignore[union-attr]
            raise StoreError(f"{self.root}: is a file, not a results store directory; pass --store DIR")

    @property
    def location(self) -> str:
        """Where the store is, as a string: its folder or its URI (what messages show)."""
        return self.fs.location

    def __repr__(self) -> str:
        return f"Store({self.location!r})"

    def __getstate__(self) -> dict[str, Any]:  # Ray, multiprocessing: reopened where unpickled
        return {"location": self.location, "storage_options": self.storage_options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["location"], state["storage_options"])  # type: ignore[misc]

    @classmethod
    def existing(cls, root: str | Path | Store, storage_options: Mapping[str, Any] | None = None) -> Store:
        """The store at ``root`` for reading (every command that reads ``--store`` opens it here;
        a :class:`Store` is returned as it is).

        A missing folder (or bucket prefix), a file, or a folder holding none of
        :data:`STORE_FOLDERS` (an empty one included) is a one-line :class:`NotAStoreError`
        naming the path and the fix, where ``Store(root)`` would create a store on first write
        and read an empty one; a store written in a later format is a :class:`StoreError`."""
        if isinstance(root, Store):  # opened by the caller: trusted
            return root
        if not is_uri(root):
            path = Path(root)
            if path.exists() and not path.is_dir():
                raise NotAStoreError(f"{path}: no results store there (a file, not a folder); point --store at a "
                                     "folder made by shiftbench eval")
            if not path.is_dir():
                raise NotAStoreError(f"{path}: no results store there (no such folder); run `shiftbench eval "
                                     f"--store {_quoted(path)}` first, or point --store at a folder made by "
                                     "shiftbench eval")
        store = cls(root, storage_options)
        where = store.location
        if not store.fs.is_local and not store.fs.isdir(""):
            if store.fs.isfile(""):
                raise NotAStoreError(f"{where}: no results store there (an object, not a prefix); point --store "
                                     "at a prefix made by shiftbench eval")
            raise NotAStoreError(f"{where}: no results store there (nothing under this prefix, or a missing "
                                 f"bucket); run `shiftbench eval --store {_quoted(where)}` first, or check the URI")
        if not store.looks_like_store():
            raise NotAStoreError(f"{where}: not a results store (none of {', '.join(f + '/' for f in STORE_FOLDERS)} "
                                 f"in it); point --store at a folder made by shiftbench eval, or run "
                                 f"`shiftbench eval --store {_quoted(where)}` first")
        store.check_format()
        return store

    def looks_like_store(self) -> bool:
        """The root is a folder holding one of the folders shiftbench writes (:data:`STORE_FOLDERS`)."""
        if self.fs.is_local:
            return self.fs.isdir("") and any(self.fs.isdir(name) for name in STORE_FOLDERS)
        return bool(set(self.fs.subdirs("")) & set(STORE_FOLDERS))

    def check_format(self) -> int:
        """The store's layout format (:data:`FORMAT_FILE`; 1 when absent); a later one than this
        version's :data:`STORE_FORMAT` is a one-line :class:`StoreError`."""
        try:
            meta = json.loads(self.fs.read_bytes(FORMAT_FILE))
        except FileNotFoundError:
            return STORE_FORMAT
        except (ValueError, OSError) as exc:
            raise StoreError(f"{self._show(FORMAT_FILE)}: unreadable ({' '.join(str(exc).split())}); it should "
                             f'hold {{"format": {STORE_FORMAT}}}: rewrite it so') from exc
        fmt = meta.get("format") if isinstance(meta, dict) else None
        if not isinstance(fmt, int):
            raise StoreError(f"{self._show(FORMAT_FILE)}: no format number in it; it should hold "
                             f'{{"format": {STORE_FORMAT}}}: rewrite it so')
        if fmt > STORE_FORMAT:
            raise StoreError(f"{self.location}: written by a newer shiftbench (store format {fmt}, "
                             f"{meta.get('written_by', 'a later version')}); this shiftbench reads format "
                             f"{STORE_FORMAT}: upgrade it (pip install -U shiftbench)")
        return fmt

    def _writing(self) -> None:
        """Before this object's first write: refuse a store of a later format, and name the format
        in a new one."""
        if self._format_checked:
            return
        if not self.fs.exists(FORMAT_FILE):
            from shiftbench.version import __version__  # deferred: the package's version (bottom layer)

            self.fs.write_bytes(FORMAT_FILE, json.dumps({"format": STORE_FORMAT, "written_by":
                                                         f"shiftbench {__version__}"}).encode())
        else:
            self.check_format()
        self._format_checked = True

    def _show(self, rel: str) -> str:
        """``rel`` as messages name it: the file's path (a local store), or the URI joined with it."""
        return str(self.root / rel) if self.fs.is_local else f"{self.location}/{rel}"  # type: ignore[operator]

    # ------------------------------------------------------------------ paths (relative to the root)
    def _key_dir(self, key: str) -> str:
        return f"predictions/key={key}"

    def _part(self, key: str, chunk: int) -> str:
        return f"{self._key_dir(key)}/part-{chunk:06d}.parquet"

    def _logits_part(self, pass_key: str, chunk: int) -> str:
        return f"logits/pass={pass_key}/part-{chunk:06d}.parquet"

    def _write_json(self, rel: str, obj: Any, **dump: Any) -> None:
        self._writing()
        self.fs.write_bytes(rel, json.dumps(obj, default=str, **dump).encode())

    def _write_parquet(self, rel: str, table: pa.Table) -> None:
        self._writing()
        self.fs.write_with(rel, _parquet_bytes(table))

    def _read_parquet(self, rel: str, columns: Sequence[str] | None = None) -> pa.Table:
        if self.fs.is_local:
            return pq.read_table(self.fs.path(rel), columns=columns)
        return pq.read_table(pa.BufferReader(self.fs.read_bytes(rel)), columns=columns)

    # ------------------------------------------------------------------ keys
    def register(self, key: str, meta: Mapping[str, Any]) -> None:
        """Record what determines ``key`` (idempotent: the first record stays)."""
        rel = f"keys/{key}.json"
        if not self.fs.exists(rel):
            self._write_json(rel, dict(meta), sort_keys=True, indent=1)

    def key_meta(self, key: str) -> dict[str, Any]:
        return self._read_json(f"keys/{key}.json")

    def update_key_meta(self, key: str, **fields: Any) -> None:
        """Replace some fields of ``key``'s record (e.g. the ``chunk_size`` its parts are numbered
        in, which is not part of the key); hold :meth:`key_lock`."""
        rel = f"keys/{key}.json"
        try:
            meta = self._read_json(rel)
        except FileNotFoundError:
            meta = {}
        meta = meta if isinstance(meta, dict) else {}
        self._write_json(rel, {**meta, **fields}, sort_keys=True, indent=1)

    def key_lock(self, key: str) -> Any:  # -> a context manager
        """An inter-process lock on ``key`` (:func:`~shiftbench.store.files.file_lock`) in a local
        store; a bucket has no locks, so there it excludes nothing (docs/store.md). A run holds it
        while it forgets the key (``--force``), restarts it under another chunk size, or checks
        that its parts are complete and marks it finished -- never while it computes -- so a forced
        run cannot remove parts under a run that is reading them to finish the key."""
        return self.fs.lock(f"locks/{key}.lock")

    def is_done(self, key: str) -> bool:
        return self.fs.exists(f"done/{key}.json")

    def read_done(self, key: str) -> dict[str, Any]:
        """The finished result of ``key`` (a :class:`StoreError` naming the file if it is not one)."""
        return self._read_done(f"done/{key}.json")

    def _read_done(self, rel: str, data: bytes | None = None) -> dict[str, Any]:
        """A ``done/<key>.json`` (``data``: its bytes, already fetched), checked: a JSON object
        naming its model and setting. A folder in its place, an unreadable file or any other JSON
        is a one-line :class:`StoreError`."""
        if self.fs.is_local and self.fs.isdir(rel):
            raise StoreError(f"{self._show(rel)}: a folder where a finished result (a JSON file) belongs; {_DONE_FIX}")
        try:
            row = json.loads((self.fs.read_bytes(rel) if data is None else data).decode("utf-8"))
        except FileNotFoundError:
            raise
        except IsADirectoryError as exc:
            raise StoreError(f"{self._show(rel)}: a folder where a finished result (a JSON file) belongs; "
                             f"{_DONE_FIX}") from exc
        except (ValueError, OSError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise StoreError(f"{self._show(rel)}: not a finished result, unreadable ({type(exc).__name__}: "
                             f"{' '.join(str(exc).split())}); {_DONE_FIX}") from exc
        if not isinstance(row, dict) or not all(isinstance(row.get(k), str) for k in ("model", "setting")):
            what = ("an empty JSON object" if row == {} else
                    "a JSON object without model and setting" if isinstance(row, dict) else
                    f"a JSON {_JSON_TYPES.get(type(row), type(row).__name__)}")
            raise StoreError(f"{self._show(rel)}: not a finished result ({what}, not an object naming its model "
                             f"and setting); {_DONE_FIX}")
        return row

    def _part_files(self, key: str) -> list[str]:
        """The parts of ``key`` (paths relative to the root), in chunk order."""
        d = self._key_dir(key)
        return [f"{d}/{n}" for n in self.fs.glob(d, "part-*.parquet")]

    def _part_files_of(self, keys: list[str]) -> dict[str, list[str]]:
        """:meth:`_part_files` of each of ``keys``; from a bucket, one recursive listing of
        ``predictions/`` (one request per 1000 objects) instead of one listing per key."""
        if self.fs.is_local or len(keys) < 2:
            return {k: self._part_files(k) for k in keys}
        import fnmatch  # deferred: only a glob needs it

        found: dict[str, list[str]] = {k: [] for k in keys}
        for rel in sorted(self.fs.walk("predictions")):
            _, folder, name = (rel.split("/") + ["", ""])[:3]
            key = folder[len("key="):]
            if folder.startswith("key=") and key in found and fnmatch.fnmatchcase(name, "part-*.parquet") \
                    and rel.count("/") == 2:
                found[key].append(rel)
        return found

    def parts(self, key: str) -> set[int]:
        """Chunks of ``key`` already written."""
        return {int(f.rsplit("/", 1)[1].split("-")[1].split(".")[0]) for f in self._part_files(key)}

    def has_predictions(self, key: str) -> bool:
        """``key`` has per-example parts (a transfer probe's result has none)."""
        return bool(self._part_files(key))

    def write_part(self, key: str, chunk: int, table: pa.Table) -> None:
        self._write_parquet(self._part(key, chunk), table)

    def _part_tables(self, files: Sequence[str], columns: Sequence[str] | None = None) -> list[pa.Table]:
        """The tables of the parts ``files`` (only ``columns`` and those a part has, when given);
        from a bucket, fetched concurrently in one batch."""
        if self.fs.is_local:
            blobs: Mapping[str, Any] = {f: self.fs.path(f) for f in files}
        else:
            blobs = {f: pa.BufferReader(b) for f, b in self.fs.read_many(files).items()}
        tables = []
        for f in files:
            if columns is None:
                tables.append(pq.read_table(blobs[f]))
            else:
                source = blobs[f]
                names = set(pq.read_schema(source).names)
                if not self.fs.is_local:
                    source.seek(0)
                tables.append(pq.read_table(source, columns=[c for c in columns if c in names]))
        return tables

    def read_predictions(self, key: str, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """All per-example rows of ``key``, in dataset order; ``columns``: only these (those a part
        lacks are left out; Parquet reads just them, which is what makes wide logit-free reads of
        hundreds of keys fast)."""
        files = self._part_files(key)
        if not files:
            return pd.DataFrame()
        try:
            wanted = None if columns is None else list(dict.fromkeys(["index", *columns]))
            return _frame(self._part_tables(files, wanted))
        except (pa.ArrowInvalid, OSError) as exc:
            raise StoreError(f"{self._show(self._key_dir(key))}: unreadable part ({exc}); rerun with --force for "
                             "this model and setting") from exc

    def scan_predictions(self, keys: Sequence[str], columns: Sequence[str]) -> pa.Table | None:
        """The per-example rows of ``keys`` (``columns`` and ``key``) in one Parquet scan over all
        their parts, as one Arrow table; ``None`` when none has parts, or when some key's parts
        lack one of ``columns`` (a store written before the column existed)."""
        import pyarrow.dataset as ds  # deferred: pyarrow's dataset module (the store loads pyarrow)

        files = self._part_files_of(list(dict.fromkeys(keys)))
        scan = [f for fs in files.values() for f in fs]
        if not scan:
            return None
        wanted = list(columns)
        if not self.fs.is_local:  # one concurrent fetch of every part, then the same table
            tables = []
            for key, fs in files.items():
                for t in self._part_tables(fs):
                    if not set(wanted) <= set(t.schema.names):
                        return None
                    tables.append(t.select(wanted).append_column("key", pa.array([key] * len(t), pa.string())))
            return pa.concat_tables(tables, promote_options="default")
        if not all(set(wanted) <= set(pq.read_schema(self.fs.path(fs[0])).names) for fs in files.values() if fs):
            return None
        # the key is text: an all-digit hex digest must not be read as a number
        data = ds.dataset([self.fs.path(f) for f in scan], format="parquet",
                          partition_base_dir=self.fs.path("predictions"),
                          partitioning=ds.partitioning(pa.schema([("key", pa.string())]), flavor="hive"))
        if not set(wanted) <= set(data.schema.names):
            return None
        return data.to_table(columns=[*wanted, "key"])

    def read_predictions_of(self, keys: Sequence[str], columns: Sequence[str]) -> dict[str, pd.DataFrame]:
        """:meth:`read_predictions` of several keys (``columns`` only), read in one Parquet scan
        over all their parts (:meth:`scan_predictions`) - on the digits store several times faster
        than one read per key. Keys whose parts lack one of ``columns`` (a store written before
        the column existed) and keys without parts are read one at a time, as
        :meth:`read_predictions` reads them."""
        wanted = list(dict.fromkeys(["index", *columns]))
        keys = list(dict.fromkeys(keys))
        out: dict[str, pd.DataFrame] = {}
        try:
            table = self.scan_predictions(keys, wanted)
            if table is not None:
                frame = table.to_pandas()
                for key, part in frame.groupby("key", sort=False, observed=True):
                    out[str(key)] = part.drop(columns="key").sort_values("index", kind="stable").reset_index(drop=True)
        except (pa.ArrowInvalid, OSError):
            out = {}  # read one key at a time below, which names the unreadable part
        return {k: out[k] if k in out else self.read_predictions(k, columns) for k in keys}

    def finish(self, key: str, summary: Mapping[str, Any]) -> None:
        """Mark ``key`` finished with its summary (atomic)."""
        self._write_json(f"done/{key}.json", {**summary, "key": key, "finished": time.time()})

    def forget(self, key: str) -> None:
        """Remove a key's parts and result (``--force``; hold :meth:`key_lock`)."""
        rel = f"done/{key}.json"
        if self.fs.is_local and self.fs.isdir(rel):
            raise StoreError(f"{self._show(rel)}: a folder where a finished result (a JSON file) belongs; {_DONE_FIX}")
        self.fs.remove(rel)
        self.forget_parts(key)

    def forget_parts(self, key: str) -> None:
        """Remove the parts of an unfinished key (to compute it again from its first chunk)."""
        for f in self._part_files(key):
            self.fs.remove(f)

    # ------------------------------------------------------------------ logits
    def has_logits(self, pass_key: str, chunk: int) -> bool:
        return self.fs.exists(self._logits_part(pass_key, chunk))

    def write_logits(self, pass_key: str, chunk: int, table: pa.Table) -> None:
        self._write_parquet(self._logits_part(pass_key, chunk), table)

    def read_logits(self, pass_key: str, chunk: int) -> pa.Table:
        return self._read_parquet(self._logits_part(pass_key, chunk))

    # ------------------------------------------------------------------ features (transfer studies)
    def read_features(self, name: str) -> bytes | None:
        """The cached feature file ``features/<name>.npz`` (its bytes), or ``None`` if absent."""
        try:
            return self.fs.read_bytes(f"features/{name}.npz")
        except FileNotFoundError:
            return None

    def write_features(self, name: str, writer: Any) -> None:
        """Write ``features/<name>.npz`` (atomically) with ``writer(target)``, where ``target`` is
        a path or a binary file (e.g. ``lambda f: np.savez(f, ...)``)."""
        self._writing()
        self.fs.write_with(f"features/{name}.npz", writer)

    # ------------------------------------------------------------------ runs and results
    def record_run(self, meta: Mapping[str, Any]) -> str:
        run_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{digest(dict(meta), 6)}"
        self._write_json(f"runs/{run_id}.json", {**meta, "run_id": run_id}, indent=1)
        return run_id

    def mark_dispatch(self, meta: Mapping[str, Any]) -> str:
        """Write ``runs/<token>.dispatch`` (a run handed to other machines: who sent it, from
        where) and return its token; the machines that run it check with :meth:`has_dispatch` that
        the store they opened is the one it was written to. Not a ``.json``: not a run record."""
        token = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{os.urandom(6).hex()}"
        self._writing()
        self.fs.write_bytes(f"runs/{token}.dispatch", json.dumps(dict(meta), default=str, indent=1).encode())
        return token

    def has_dispatch(self, token: str) -> bool:
        """This store holds the dispatch mark ``token`` (:meth:`mark_dispatch`): it is the store the
        dispatching process wrote to, not a folder of the same name on another machine."""
        return self.fs.exists(f"runs/{token}.dispatch")

    def clear_dispatch(self, token: str) -> None:
        """Remove the dispatch mark ``token`` (the run it marked has ended)."""
        with contextlib.suppress(FileNotFoundError):
            self.fs.remove(f"runs/{token}.dispatch")

    def _read_json(self, rel: str | Path) -> dict[str, Any]:
        """The JSON file ``rel`` (relative to the root; a local store also takes a path under its
        folder); a missing one is a FileNotFoundError."""
        if isinstance(rel, Path):
            rel = (rel.relative_to(self.root) if rel.is_absolute() == Path(self.root).is_absolute()
                   else rel.resolve().relative_to(Path(self.root).resolve())).as_posix()
        try:
            return json.loads(self.fs.read_bytes(rel))
        except FileNotFoundError:
            raise
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise StoreError(f"{self._show(rel)}: corrupted ({exc}); delete it and rerun the evaluation") from exc

    def json_records(self, folder: str) -> list[tuple[str, dict[str, Any]]]:
        """``(stem, record)`` of every ``<folder>/*.json`` (``keys``, ``runs``), sorted by name; a
        file removed while listing is left out."""
        out = []
        for name in self.fs.glob(folder, "*.json"):
            try:
                out.append((name[:-len(".json")], self._read_json(f"{folder}/{name}")))
            except FileNotFoundError:
                continue
        return out

    def _done_stamp(self) -> tuple[tuple[str, int, Any], ...]:
        """Name, size and modification time (a bucket: ETag) of every finished key's file (what
        :meth:`results` reads)."""
        return tuple(sorted((name, size, stamp) for name, size, stamp in self.fs.listdir("done")
                            if name.endswith(".json")))

    def results(self, history: bool = False) -> pd.DataFrame:
        """The current result of each (model, setting, convention) (:func:`current_results`: the
        longest example list, then the last finished), sorted by model and setting;
        ``history=True``: every finished key, older results of a re-evaluated model included.

        The table is cached on this object and re-read only when a finished key's file was added,
        replaced or removed (name, size and modification time or ETag of each), so a report's
        sections can each ask for it without re-reading thousands of JSON files. A ``done/*.json``
        that is not a finished result is a :class:`StoreError` naming it."""
        stamp = self._done_stamp()
        cached = getattr(self, "_results_cache", None)
        if cached is None or cached[0] != stamp:
            frame = self._read_results([f"done/{name}" for name, _, _ in stamp])
            cached = self._results_cache = (stamp, frame, current_results(frame).reset_index(drop=True))
        return cached[1 if history else 2].copy()

    def _read_results(self, files: list[str]) -> pd.DataFrame:
        # a bucket: one concurrent fetch of every file (a file forgotten by --force while listing is left out)
        fetched = None if self.fs.is_local else self.fs.read_many(files)
        rows = []
        for rel in files:
            if fetched is not None and rel not in fetched:
                continue
            try:
                rows.append(self._read_done(rel, None if fetched is None else fetched[rel]))
            except FileNotFoundError:  # forgotten (--force) while listing
                continue
        frame = pd.DataFrame(rows)
        for col in RESULT_COLUMNS:
            if col not in frame:
                frame[col] = pd.Series(dtype=object)
        rest = [c for c in frame.columns if c not in RESULT_COLUMNS]
        return frame[RESULT_COLUMNS + rest].sort_values(["model", "setting"], kind="stable").reset_index(drop=True)

    def runs(self) -> pd.DataFrame:
        return pd.DataFrame([record for _, record in self.json_records("runs")])

    # ------------------------------------------------------------------ studies
    def _study_path(self, kind: str, name: str) -> str:
        for what, value in (("study kind", kind), ("study name", name)):
            if not value or "/" in value or value.startswith(".") or "\\" in value:
                raise StoreError(f"{what} {value!r}: use a plain name without '/' or a leading '.'")
        return f"studies/{kind}/{name}.parquet"

    def check_study_name(self, kind: str, name: str) -> Path | str:
        """Where study ``name`` of ``kind`` is stored: its file (a local store) or its URI; a name
        that cannot be one (a ``/``, a leading ``.``) is a :class:`StoreError` - before anything
        is written."""
        rel = self._study_path(kind, name)
        return Path(self._show(rel)) if self.fs.is_local else self._show(rel)

    def has_study(self, kind: str, name: str) -> bool:
        return self.fs.exists(self._study_path(kind, name))

    def study_lock(self, kind: str, name: str) -> Any:  # -> a context manager
        """An inter-process lock around a read-modify-write of study ``name`` (a local store; a
        bucket has no locks, as :meth:`key_lock`)."""
        self._study_path(kind, name)
        return self.fs.lock(f"studies/{kind}/.{name}.lock")

    def write_study(self, kind: str, name: str, frame: pd.DataFrame,
                    meta: Mapping[str, Any] | None = None) -> Path | str:
        """Store (replace, atomically) the long-form table ``frame`` of study ``name`` of ``kind``
        (e.g. ``"trajectory"``, ``"resolution"``, ``"compositing"``) with optional metadata;
        returns where: the file (a local store) or its URI."""
        rel = self._study_path(kind, name)
        table = pa.Table.from_pandas(frame.reset_index(drop=True), preserve_index=False)
        self._write_parquet(rel, table)
        self._write_json(rel[:-len(".parquet")] + ".json",
                         {**dict(meta or {}), "kind": kind, "name": name, "written": time.time()},
                         sort_keys=True, indent=1)
        return self.check_study_name(kind, name)

    def study_names(self, kind: str) -> list[str]:
        """Names of the stored studies of ``kind`` (sorted)."""
        return [n[:-len(".parquet")] for n in self.fs.glob(f"studies/{kind}", "*.parquet")]

    def read_study(self, kind: str, name: str) -> pd.DataFrame:
        """One stored study's table (a :class:`StoreError` naming the file if it is missing)."""
        rel = self._study_path(kind, name)
        try:
            return self._read_parquet(rel).to_pandas()
        except FileNotFoundError:
            have = ", ".join(self.study_names(kind)) or "none"
            raise StoreError(f"{self._show(rel)}: no {kind} study named {name!r} in this store (stored: {have})") \
                from None
        except (pa.ArrowInvalid, OSError) as exc:
            if not self.fs.exists(rel):
                have = ", ".join(self.study_names(kind)) or "none"
                raise StoreError(f"{self._show(rel)}: no {kind} study named {name!r} in this store (stored: "
                                 f"{have})") from None
            raise StoreError(f"{self._show(rel)}: unreadable ({exc}); delete it and rerun the study") from exc

    def study_meta(self, kind: str, name: str) -> dict[str, Any]:
        rel = self._study_path(kind, name)[:-len(".parquet")] + ".json"
        try:
            return self._read_json(rel)
        except FileNotFoundError:
            return {}

    def read_studies(self, kind: str) -> pd.DataFrame:
        """Every stored study of ``kind`` concatenated, with a ``study`` column (empty if none)."""
        frames = [self.read_study(kind, n).assign(study=n) for n in self.study_names(kind)]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def transfer_groups(self) -> dict[str, str]:
        """``task -> group`` the transfer results in this store declared (the ``task`` and
        ``group`` of each current result that has both; ``{}`` if none), in :meth:`results`'
        order (a task's last result wins); what
        :func:`~shiftbench.analysis.transfer.transfer_group_means` groups tasks by."""
        res = self.results()
        if "task" not in res or "group" not in res:
            return {}
        res = res[res["task"].notna() & res["group"].notna()]
        return dict(zip(res["task"].astype(str), res["group"].astype(str)))

    # ------------------------------------------------------------------ DuckDB
    def connect(self):  # -> duckdb.DuckDBPyConnection
        """An in-memory DuckDB connection over this store's files: the views ``predictions``,
        ``logits`` and ``results``, the tables ``results_history``, ``keys`` and ``runs``
        (:mod:`shiftbench.store.sql`; columns and example queries: docs/store.md).

        Paths are taken from this store's folder when called, so a copied or moved store reads
        its own files; nothing is written to the store (a ``.duckdb`` file in it, from an earlier
        version or the duckdb CLI, is not read); an empty store gives empty tables with the same
        columns. A store in a bucket is read through its fsspec filesystem (registered with
        DuckDB: no DuckDB extension is loaded or downloaded). A folder that does not exist is a
        :class:`NotAStoreError`."""
        from shiftbench.store import sql  # deferred: loads duckdb

        if self.fs.is_local and not self.fs.isdir(""):
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
                self._write_json(f"done/{key}.json", {**row, "model_type": model_type})
        return changed


def _frame(tables: list[pa.Table]) -> pd.DataFrame:
    """The parts' tables as one frame in dataset order (one conversion when they share a schema)."""
    if len({t.schema for t in tables}) == 1:
        frame = pa.concat_tables(tables).to_pandas()
    else:
        frame = pd.concat([t.to_pandas() for t in tables], ignore_index=True)
    return frame.sort_values("index", kind="stable").reset_index(drop=True)
