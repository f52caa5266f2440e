"""The runner: one forward pass per (model, dataset), every requested view from that pass.

For each dataset the requested settings need, the runner streams the examples through
DataLoader workers (decode, resize, crop: once per image), runs the model under
``torch.inference_mode`` in channels-last layout, and hands each chunk's logits to every
setting's view. Work is organised in fixed chunks of the dataset (``chunk_size`` examples):
each finished chunk is written to the store as one Parquet part per setting, so a run killed
at any moment resumes at the first unfinished chunk, and a finished setting is never
recomputed unless ``force=True``.

Images that cannot be decoded are not dropped: they are stored as ``skipped`` rows with the
reason, counted in ``n_skipped`` and listed in the result.

The chunk size is not part of a result's key: it only numbers the parts. A finished key is
reused whatever ``chunk_size`` a later run asks for; an unfinished key whose parts were written
with another chunk size is restarted cleanly (its parts removed, its chunk size re-recorded in
``keys/<key>.json``), never continued with mixed numbering. A key that another run forgets
(``--force``) while this run computes it is noticed when this run finishes it (a part missing, or
rows that are not exactly the key's examples) and its missing chunks are computed again, so a
run reports every result it was asked for or raises a :class:`StoreError` saying why.
"""
from __future__ import annotations

import contextlib
import inspect
import math
import platform
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn
from rich.text import Text

from shiftbench.datasets.base import ImageDataset, ImageDecodeError, text_name
from shiftbench.datasets.torch_data import TORCH_DATASET, LabelRangeError
from shiftbench.engine.request import EvalRequest
from shiftbench.errors import ConfigError, ModelError, ShiftbenchError, ShiftError, StoreError, did_you_mean, require
from shiftbench.model_types import MODEL_TYPES
from shiftbench.models import check_logits, load_model
from shiftbench.models.base import LoadedModel
from shiftbench.settings import Setting
from shiftbench.shifts import get_shift
from shiftbench.store.store import DEFAULT_STORE, Store, digest
from shiftbench.version import __version__
from shiftbench.views import calibration, pm_k
from shiftbench.views.groups import group_accuracy
from shiftbench.views.multilabel import mean_average_precision

VERSION_KEY = ".".join(__version__.split(".")[:2])
#: bootstrap resamples (over examples) behind a stored mAP's 95% interval
MAP_BOOTSTRAP = 1000
RESULT_KEYS = ["model", "setting", "accuracy", "top5", "n_examples", "n_skipped"]
ProgressFn = Callable[[str, int, int], None]
#: The chunk size in every key's digest: a constant, not the run's ``chunk_size`` (which only numbers
#: the parts), so keys written when the chunk size was part of the key, with its default 1024, stay valid.
KEY_CHUNK_SIZE = 1024
#: How many times a run computes again the chunks another run removed (``--force``) while it
#: computed them, before it gives up with a :class:`StoreError`.
RESET_RETRIES = 2


# ---------------------------------------------------------------------------- decoding
class _Decoded:
    """torch Dataset view of an ImageDataset: (one tensor per pixel pipeline, index, error or '').
    Each image is decoded once, whatever the number of pipelines. A pipeline's tensor is what its
    transform gives (uint8 for the head of a split transform, :func:`_pipeline`)."""

    def __init__(self, dataset: ImageDataset, pipelines: Sequence[tuple[Callable, tuple[int, int]]]) -> None:
        self.dataset, self.pipelines = dataset, list(pipelines)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int):
        return self.__getitems__([i])[0]

    def __getitems__(self, indices: list[int]) -> list[tuple[tuple[Any, ...], int, str]]:
        """A batch's examples from one :meth:`~shiftbench.datasets.base.ImageDataset.load_many`
        (the DataLoader asks for a whole batch: a bucket fetches it in one concurrent request)."""
        import torch  # deferred: loads torch

        out = []
        for i, image in zip(indices, self.dataset.load_many(indices)):
            if isinstance(image, ImageDecodeError):
                out.append((tuple(torch.zeros(3, *size, dtype=dtype) for _, size, dtype in self.pipelines), i,
                            image.reason))
            else:
                out.append((tuple(transform(image) for transform, _, _ in self.pipelines), i, ""))
        return out


def _pipeline(pre: Any) -> tuple[Callable, tuple[int, int], Any, Callable | None]:
    """``(transform, (H, W), dtype, tail)`` of a preprocessing's pixel pipeline for the loader:
    the uint8 head of its :meth:`~shiftbench.models.Preprocessing.split_transform` and the tail
    that makes the float [0, 1] batch after the batch has moved to its device (4x fewer bytes
    through the workers' shared memory, pinned memory and the bus), or its whole transform and
    no tail where it cannot be split. The pixels are the same either way."""
    import torch  # deferred: loads torch

    split = getattr(pre, "split_transform", lambda: None)()
    if split is None:
        return pre.transform(), pre.input_hw, torch.float32, None
    head, tail = split
    return head, pre.input_hw, torch.uint8, tail


@dataclass
class _Batch:
    """A scored batch of one pass: its indices, decode errors, per-setting scores, float16 logits."""

    idx: np.ndarray
    errors: list[str]
    scored: dict[str, Any]
    logits: np.ndarray | None


class _ChunkBatches:
    """Batch sampler: batches of ``batch_size`` indices that never cross a chunk boundary."""

    def __init__(self, chunks: Sequence[int], chunk_size: int, n: int, batch_size: int) -> None:
        self.chunks, self.chunk_size, self.n, self.batch_size = list(chunks), chunk_size, n, batch_size

    def __iter__(self) -> Iterator[list[int]]:
        for c in self.chunks:
            stop = min(self.n, (c + 1) * self.chunk_size)
            for start in range(c * self.chunk_size, stop, self.batch_size):
                yield list(range(start, min(stop, start + self.batch_size)))

    def __len__(self) -> int:
        return sum(math.ceil((min(self.n, (c + 1) * self.chunk_size) - c * self.chunk_size) / self.batch_size)
                   for c in self.chunks)


# ---------------------------------------------------------------------------- one pass
@dataclass
class _Job:
    setting: Setting
    view: Any
    key: str
    keep: np.ndarray


def _targets_column(targets: Sequence[Any]) -> pa.Array:
    return pa.array([[int(t)] if np.isscalar(t) else [int(v) for v in t] for t in targets],
                    type=pa.list_(pa.int32()))


#: per-example score columns of a part, with the value of an example that could not be decoded
SCORE_COLUMNS = {"pred": (np.int32, -1), "top5": (np.int32, -1), "correct": (bool, False), "correct5": (bool, False),
                 "confidence": (np.float32, np.nan), "p_true": (np.float32, np.nan), "p_sq_sum": (np.float32, np.nan),
                 "entropy": (np.float32, np.nan)}


@dataclass
class _Scored:
    """One batch scored for one setting (kept examples only): what a part is built from. The
    logits are scored as they come, so a chunk in flight holds a few numbers per example and
    setting, not the logits of every model × shift."""

    idx: np.ndarray
    errors: list[str]
    cols: dict[str, np.ndarray]


def _score(job: _Job, dataset: ImageDataset, idx: np.ndarray, logits: np.ndarray, errors: Sequence[str]) -> _Scored:
    keep = job.keep[idx]
    idx, logits = idx[keep], logits[keep]
    errors = [e for e, k in zip(errors, keep) if k]
    ok = np.array([not e for e in errors], dtype=bool)
    n = len(idx)
    cols = {name: np.full((n, 5) if name == "top5" else n, fill, dtype) for name, (dtype, fill) in SCORE_COLUMNS.items()}
    if dataset.multi_label:  # every class's score, for mAP after the fact (float32: AP ranks them)
        cols["scores"] = np.full((n, logits.shape[1]), np.nan, np.float32)
    if ok.any():
        out = job.view.apply(logits[ok], [dataset.targets[i] for i, o in zip(idx, ok) if o])
        for name in SCORE_COLUMNS:
            cols[name][ok] = np.asarray(out[name])
        if dataset.multi_label:
            cols["scores"][ok] = logits[ok]
    return _Scored(idx, errors, cols)


def _strings(values: Sequence[str | None]) -> pa.Array:
    """A text column; a string Arrow cannot hold (a file name with undecodable bytes, carried as
    surrogate escapes) is written with those bytes as ``\\xNN`` (:func:`text_name`)."""
    try:
        return pa.array(values, pa.string())
    except UnicodeEncodeError:
        return pa.array([None if v is None else text_name(v) for v in values], pa.string())


def _part_table(dataset: ImageDataset, parts: Sequence[_Scored]) -> pa.Table:
    """Per-example rows of one chunk for one setting, from its scored batches."""
    idx = np.concatenate([p.idx for p in parts])
    errors = [e for p in parts for e in p.errors]
    cols = {name: np.concatenate([p.cols[name] for p in parts]) for name in SCORE_COLUMNS}
    targets = [dataset.targets[i] for i in idx]
    n = len(idx)
    return pa.table({
        "index": pa.array(idx, pa.int64()),
        "id": _strings([dataset.ids[i] for i in idx]),
        "target": _targets_column(targets),
        "group": _strings([dataset.groups[i] for i in idx] if dataset.groups else [None] * n),
        "offset": pa.array([dataset.offsets[i] for i in idx] if dataset.offsets else [None] * n, pa.int32()),
        "status": pa.array(["skipped" if e else "ok" for e in errors], pa.string()),
        "error": _strings([e or None for e in errors]),
        "pred": pa.array(cols["pred"]),
        "top5": pa.array(list(cols["top5"]), pa.list_(pa.int32())),
        "correct": pa.array(cols["correct"]), "correct5": pa.array(cols["correct5"]),
        "confidence": pa.array(cols["confidence"]), "p_true": pa.array(cols["p_true"]),
        "p_sq_sum": pa.array(cols["p_sq_sum"]), "entropy": pa.array(cols["entropy"]),
        **({"scores": _matrix_column(np.concatenate([p.cols["scores"] for p in parts]))}
           if dataset.multi_label else {}),
    })


def _matrix_column(m: np.ndarray) -> pa.Array:
    return pa.FixedSizeListArray.from_arrays(pa.array(m.ravel(), pa.float32()), m.shape[1])


def multilabel_summary(frame: pd.DataFrame, dataset: ImageDataset) -> dict[str, Any]:
    """mAP (with its bootstrap interval over examples), AP per class and the counts behind them,
    from a multi-label key's stored ``scores`` (:func:`~shiftbench.views.multilabel.mean_average_precision`)."""
    ok = frame[frame["status"] == "ok"]
    if ok.empty:
        return {"map": float("nan")}
    scores = np.stack(ok["scores"].to_numpy())
    targets = [tuple(int(v) for v in t) for t in ok["target"]]
    r = mean_average_precision(scores, targets, class_names=dataset.class_names, n_resamples=MAP_BOOTSTRAP, seed=0)
    no_labels = ok.loc[[not t for t in targets], "id"].tolist()
    return {"map": r.map, "map_low": r.low, "map_high": r.high,
            "ap_per_class": {r.name(c): ap for c, ap in r.per_class.items()},
            "classes_without_positives": [r.name(c) for c in r.classes_without_positives],
            "n_no_labels": r.n_no_labels, "no_label_examples": no_labels[:100], "map_bootstrap": r.n_resamples}


def summarise(frame: pd.DataFrame, setting: Setting) -> dict[str, Any]:
    """Accuracy, top-5, counts and calibration of one key's per-example rows.

    Where the rows carry metadata groups (a manifest's ``group`` column or ``?groups=``
    columns; not the pm-sets of a pm-k setting, whose rows have frame offsets), also the
    worst-group accuracy and the groups behind it (:func:`group_summary`)."""

    ok = frame[frame["status"] == "ok"]
    skipped = frame[frame["status"] != "ok"]
    out: dict[str, Any] = {"n_skipped": int(len(skipped)),
                           "skipped_files": [f"{i}: {e}" for i, e in zip(skipped["id"][:100], skipped["error"][:100])]}
    if setting.pm_k is not None:
        # a pm-set is scored over its decoded frames; a set whose anchor frame could not be
        # decoded (or was cut by --limit) cannot be scored and is counted in n_sets_dropped
        anchored = set(ok.loc[ok["offset"] == 0, "group"])
        scored = ok[ok["group"].isin(anchored)]
        groups, offsets = scored["group"].to_numpy(), scored["offset"].to_numpy()
        n_sets = frame["group"].nunique()
        if len(scored):
            acc, n_anchors = pm_k(scored["correct"].to_numpy(), groups, offsets, setting.pm_k)
            top5, _ = pm_k(scored["correct5"].to_numpy(), groups, offsets, setting.pm_k)
        else:
            acc, top5, n_anchors = float("nan"), float("nan"), 0
        out.update(accuracy=float(acc), top5=float(top5), n_examples=int(n_anchors), n_frames=int(len(scored)),
                   n_sets_dropped=int(n_sets - n_anchors))
    else:
        if "scores" in ok:  # multi-label: top-1-in-set accuracy over the images that have labels
            ok = ok[[len(t) > 0 for t in ok["target"]]]
        n = len(ok)
        out.update(accuracy=float(100 * ok["correct"].mean()) if n else float("nan"),
                   top5=float(100 * ok["correct5"].mean()) if n else float("nan"), n_examples=int(n))
        out.update(group_summary(frame, ok))
    if len(ok):
        cal = calibration(ok["confidence"].to_numpy(), ok["correct"].to_numpy(),
                          ok["p_true"].to_numpy(), ok["p_sq_sum"].to_numpy())
        out.update(ece=float(cal["ece"]), nll=float(cal["nll"]), brier=float(cal["brier"]))
    return out


def group_summary(frame: pd.DataFrame, ok: pd.DataFrame) -> dict[str, Any]:
    """Worst-group accuracy (WILDS convention, :func:`~shiftbench.views.groups.group_accuracy`)
    of the scored rows ``ok`` of a key's rows ``frame``, when they carry metadata groups: the
    keys of :data:`~shiftbench.views.groups.GROUP_KEYS`. Every group of ``frame`` is declared, so a
    group whose examples were all skipped (undecodable) is reported with count 0 and is not the
    worst. ``{}`` without groups, or for pm-sets (rows with frame offsets)."""
    if "group" not in frame or frame["group"].isna().all() or frame["offset"].notna().any():
        return {}
    declared = frame["group"].dropna().astype(str).unique()
    scored = ok[ok["group"].notna()]
    return group_accuracy(scored["correct"].to_numpy(dtype=bool), scored["group"].astype(str).tolist(),
                          declared=declared).to_dict()


class Pass:
    """One forward pass of a model over a dataset, serving several settings."""

    def __init__(self, model: LoadedModel, dataset: ImageDataset, settings: Sequence[Setting], store: Store, *,
                 convention: str = "restricted", chunk_size: int = 1024, keep_logits: bool = False,
                 force: bool = False, shift: Any = None, seed: int = 0,
                 shard: tuple[int, int] | None = None) -> None:
        self.model, self.dataset, self.store, self.shard = model, dataset, store, shard
        self.chunk_size, self.keep_logits = chunk_size, keep_logits
        self.shift, self.seed = shift, seed
        self.n_chunks = math.ceil(len(dataset) / chunk_size) if len(dataset) else 0
        ident = {
            "model": model.name, "weights": model.fingerprint, "preprocessing": model.preprocessing.to_dict(),
            "dataset": dataset.name, "examples": digest(dataset.ids), "n": len(dataset),
            "shift": None if shift is None else shift.id, "seed": None if shift is None or not shift.random else seed,
            "version": VERSION_KEY, **({"multi_label": True} if dataset.multi_label else {})}
        # what the results depend on; the chunk size only numbers parts, so it is a constant here ...
        self.pass_key = digest({**ident, "chunk_size": KEY_CHUNK_SIZE})
        # ... but kept logits are read back by chunk number: their folder depends on the chunk size
        self.logits_key = digest({**ident, "chunk_size": chunk_size})
        self.notes: list[str] = []
        self.jobs: list[_Job] = []
        # labels are part of a result's key (not of the pass: kept logits do not depend on them), so
        # relabelling a manifest or changing its label space recomputes the scores, never reuses stale ones
        targets = digest([t if np.isscalar(t) else list(t) for t in dataset.targets])
        for s in settings:
            conv = convention if s.uses_convention else "full"
            view = s.view(convention)
            if hasattr(view, "bind"):  # a class map (@classmap:) resolves names against the model and dataset
                view = view.bind(model, dataset)
            key = digest({"pass": self.pass_key, "setting": s.name, "view": getattr(view, "name", ""),
                          "convention": conv, "pm_k": s.pm_k, "targets": targets})
            store.register(key, {"model": model.name, "spec": model.spec, "weights": model.fingerprint,
                                 "setting": s.name, "dataset": dataset.name, "convention": conv,
                                 "shift": None if shift is None else shift.id, "seed": seed,
                                 "preprocessing": model.preprocessing.to_dict(), "pass": self.pass_key,
                                 "n_examples_in_dataset": len(dataset), "version": __version__,
                                 "chunk_size": chunk_size})
            with store.key_lock(key):
                if force:
                    store.forget(key)
                self._check_key(key, s.name)
            self.jobs.append(_Job(s, view, key, np.asarray(view.keep(dataset.targets), dtype=bool)))
        self.conventions = {j.key: (convention if j.setting.uses_convention else "full") for j in self.jobs}
        self._wanted: tuple[int | None, list[_Job]] = (None, [])
        self._reported: set[str] = set()
        #: jobs the last :meth:`finish` could not finish (parts missing: another run forgot the key)
        self.unfinished: list[_Job] = []

    def _check_key(self, key: str, setting: str) -> None:
        """A finished key's result must be readable (a malformed ``done/<key>.json`` is a one-line
        StoreError now, before any forward pass); an unfinished key whose parts are numbered in
        another chunk size is restarted with this one (under the key's lock)."""
        if self.store.is_done(key):
            self.store.read_done(key)
            return
        try:
            meta = self.store.key_meta(key)
        except FileNotFoundError:
            meta = None
        recorded = meta.get("chunk_size", KEY_CHUNK_SIZE) if isinstance(meta, dict) else None
        if recorded == self.chunk_size:
            return
        if self.store.parts(key):
            self.store.forget_parts(key)
            self.notes.append(f"model {self.model.name!r} on {setting!r}: its unfinished parts were written with "
                              f"--chunk-size {recorded}; restarting it with {self.chunk_size}")
        self.store.update_key_meta(key, chunk_size=self.chunk_size)

    def todo_chunks(self) -> list[int]:
        """Chunks (of this pass's shard) some unfinished setting still lacks, in order."""
        pending = [j for j in self.jobs if not self.store.is_done(j.key)]
        have = {j.key: self.store.parts(j.key) for j in pending}
        mine = range(self.n_chunks) if self.shard is None else range(self.shard[0], self.n_chunks, self.shard[1])
        return [c for c in mine if any(c not in have[j.key] for j in pending)]

    def score(self, chunk: int, idx: np.ndarray, logits: np.ndarray, errors: Sequence[str]) -> _Batch:
        """One batch of ``chunk`` scored for every setting that still lacks the chunk (float16
        logits kept too with ``keep_logits``): a part of what :meth:`write` stores."""
        if self._wanted[0] != chunk:  # the settings that lack this chunk, looked up once per chunk
            self._wanted = (chunk, [job for job in self.jobs if not self.store.is_done(job.key)
                                    and chunk not in self.store.parts(job.key)])
        scored = {job.key: _score(job, self.dataset, idx, logits, errors) for job in self._wanted[1]}
        half = logits.astype(np.float16) if self.keep_logits else None
        return _Batch(idx, list(errors), scored, half)

    def write(self, chunk: int, batches: Sequence[_Batch]) -> None:
        """Write ``chunk`` from its scored batches: one part per setting (and its logits)."""
        self._wanted = (None, [])
        for job in self.jobs:
            parts = [b.scored[job.key] for b in batches if job.key in b.scored]
            if parts and not self.store.is_done(job.key) and chunk not in self.store.parts(job.key):
                self.store.write_part(job.key, chunk, _part_table(self.dataset, parts))
        if self.keep_logits and not self.store.has_logits(self.logits_key, chunk):
            idx = np.concatenate([b.idx for b in batches])
            errors = [e for b in batches for e in b.errors]
            half = np.concatenate([b.logits for b in batches])
            self.store.write_logits(self.logits_key, chunk, pa.table({
                "index": pa.array(idx, pa.int64()), "error": _strings([e or None for e in errors]),
                "logits": pa.FixedSizeListArray.from_arrays(pa.array(half.ravel(), pa.float16()), half.shape[1])}))

    def _write_chunk(self, chunk: int, idx: np.ndarray, logits: np.ndarray, errors: Sequence[str]) -> None:
        self.write(chunk, [self.score(chunk, idx, logits, errors)])

    def _from_stored_logits(self, chunk: int) -> bool:
        if not self.store.has_logits(self.logits_key, chunk):
            return False
        table = self.store.read_logits(self.logits_key, chunk)
        width = table.schema.field("logits").type.list_size
        logits = table.column("logits").combine_chunks().flatten().to_numpy(zero_copy_only=False)
        logits = logits.reshape(-1, width).astype(np.float32)
        errors = [e or "" for e in table.column("error").to_pylist()]
        self._write_chunk(chunk, table.column("index").to_numpy(), logits, errors)
        return True

    def pending(self) -> list[int]:
        """Chunks still to compute with a forward pass (stored logits are used first)."""
        return [c for c in self.todo_chunks() if not self._from_stored_logits(c)]

    def shifted(self, module: Any, x: Any, idx: Any) -> Any:
        """The batch under this pass's shift (``x`` itself for the clean pass), channels-last."""
        import torch  # deferred: loads torch

        if self.shift is None:
            return x
        return self._shifted(module, x, idx).contiguous(memory_format=torch.channels_last)

    def logits(self, x: Any, errors: Sequence[str], expected: int) -> np.ndarray:
        """The model on an (already shifted) batch, checked: a failure inside the model, a wrong
        output width or non-finite logits is a one-line :class:`ModelError` naming the model."""
        try:
            logits = self.model.module(x).float().cpu().numpy()
        except ShiftbenchError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure inside a model is reported as one
            why = " ".join(str(exc).split())[:300] or "no message"
            hint = "; try a smaller --batch-size" if "out of memory" in why.lower() else ""
            raise ModelError(f"model {self.model.name!r} failed on dataset {self.dataset.name!r} "
                             f"({type(exc).__name__}: {why}){hint}; rerun with --debug for the traceback") from exc
        _check_logits(logits, self.model, errors, expected)
        return logits

    def _shifted(self, module: Any, x: Any, idx: Any) -> Any:
        """The batch under this pass's shift; an unexpected failure inside the shift becomes a
        one-line :class:`ShiftError` naming the shift and its settings (ShiftbenchErrors pass)."""
        import torch  # deferred: loads torch

        try:
            if self.shift.needs_model:
                targets = torch.as_tensor([t if np.isscalar(t) else t[0] for t in
                                           (self.dataset.targets[int(i)] for i in idx)], device=x.device)
                return self.shift(x, idx, self.seed, model=module, targets=targets)
            return self.shift(x, idx, self.seed)
        except ShiftbenchError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure inside a shift is reported as one
            raise ShiftError(shift_failure(self.shift.id, [j.setting.name for j in self.jobs], exc)) from exc

    def finish(self) -> list[dict[str, Any]]:
        """Summarise and mark done every setting whose chunks are all present; the result rows of
        the settings not reported by an earlier call. The settings still lacking a chunk (or whose
        parts are not exactly their examples: another run forgot the key while this one wrote it)
        are left in :attr:`unfinished`."""
        rows = []
        self.unfinished = []
        for job in self.jobs:
            if job.key in self._reported:
                continue
            with self.store.key_lock(job.key):
                row = self._finish_job(job)
            if row is None:
                self.unfinished.append(job)
            else:
                self._reported.add(job.key)
                rows.append(row)
        return rows

    def _complete(self, job: _Job, frame: pd.DataFrame) -> bool:
        """``frame`` (a key's stored rows) holds each of the job's examples exactly once."""
        want = np.flatnonzero(job.keep)
        if "index" not in frame or len(frame) != len(want):
            return False
        return bool(np.array_equal(frame["index"].to_numpy(dtype=np.int64), want))

    def _finish_job(self, job: _Job) -> dict[str, Any] | None:
        """Under the key's lock: the job's finished result (summarised and stored now if all its
        chunks are present), or ``None`` while it lacks a chunk."""
        if not self.store.is_done(job.key):
            if len(self.store.parts(job.key) & set(range(self.n_chunks))) < self.n_chunks:
                return None
            frame = self.store.read_predictions(job.key)
            if not self._complete(job, frame):  # parts of another run's numbering: compute them again
                self.store.forget_parts(job.key)
                return None
            summary = summarise(frame, job.setting)
            if self.dataset.multi_label:
                summary.update(multilabel_summary(frame, self.dataset), accuracy_rule="top-1-in-set")
            scan = list(getattr(self.dataset, "skipped_on_scan", []) or [])
            summary.update(n_skipped_on_scan=len(scan), skipped_on_scan=[f"{i}: {why}" for i, why in scan[:100]])
            summary.update(shift=None if self.shift is None else self.shift.id, seed=self.seed)
            summary.update(label_space=self.dataset.label_space,
                           notes=[*getattr(self.dataset, "notes", ()), *self.model.metadata.get("notes", ())])
            summary.update(model=self.model.name, setting=job.setting.name, dataset=self.dataset.name,
                           convention=self.conventions[job.key], spec=self.model.spec,
                           model_type=self.model.metadata.get("model_type", "UNKNOWN"),
                           arch=self.model.metadata.get("arch"), tags=list(self.model.metadata.get("tags", ())),
                           preprocessing=self.model.preprocessing.to_dict(), weights=self.model.fingerprint,
                           version=__version__)
            self.store.finish(job.key, summary)
        return self.store.read_done(job.key)


def shift_failure(shift_id: str, settings: Sequence[str], exc: BaseException) -> str:
    """One line: which shift failed, on which settings, why (the exception's text with its
    newlines folded), and how to see the traceback."""
    why = " ".join(str(exc).split()) or "no message"
    if len(why) > 500:
        why = why[:497] + "..."
    hint = ("; try a smaller --batch-size" if isinstance(exc, MemoryError) or "out of memory" in why.lower()
            else "")
    return (f"shift {shift_id!r} failed on setting {', '.join(repr(s) for s in settings)} "
            f"({type(exc).__name__}: {why}){hint}; rerun with --debug for the traceback")


#: On CPU the shifts and the model see each batch in slices of at most this many bytes of input
#: (6 images at 224 px; whole batches of small images): glibc's malloc hands every freed buffer
#: above 32 MB back to the OS, so a large CPU batch spends most of its time in page faults.
#: Measured (EfficientNet-Lite0, 2 shared cores): forward 31-46 img/s at batch 64, 68-125 at 8;
#: the same batch-64 forward with MALLOC_MMAP_MAX_=0 143-154. Examples are independent, so the
#: slicing cannot change a result.
CPU_SLICE_BYTES = 4 << 20


def run_dataset(passes: Sequence[Pass], *, device: str, batch_size: int, workers: int,
                on_images: Callable[[int], None]) -> dict[str, ModelError]:
    """Stream one dataset once for every pass (models × shifts): each needed image is decoded
    once, put through each distinct pixel pipeline (:meth:`Preprocessing.pixel_dict`) once, each
    shift runs once per pipeline for every model that shares it (PGD, which attacks a model, once
    per model), and every model sees its batches; on CPU in slices of :data:`CPU_SLICE_BYTES`.

    A model that fails (an exception inside it, a wrong output width, non-finite logits) is
    dropped from the stream with its unfinished chunk; the others go on. Returns the failures,
    by model name (a failing shift fails every model: it raises :class:`ShiftError`)."""
    import torch  # deferred: loads torch

    failed: dict[str, ModelError] = {}
    needed = {p: set(p.pending()) for p in passes}
    chunks = sorted(set().union(*needed.values())) if passes else []
    if not chunks:
        return failed
    first = passes[0]
    pipes: dict[str, Any] = {}
    for p in passes:
        pipes.setdefault(digest(p.model.preprocessing.pixel_dict()), p.model.preprocessing)
    pipe_index = {k: i for i, k in enumerate(pipes)}
    # a stream: the passes fed by one (pixel pipeline, shift); a model-attacking shift is per model
    streams: dict[tuple[int, Any], list[Pass]] = {}
    for p in passes:
        shift_key = None if p.shift is None else (p.shift.id, p.model.name if p.shift.needs_model else None)
        streams.setdefault((pipe_index[digest(p.model.preprocessing.pixel_dict())], shift_key), []).append(p)
    expected = {p.model.name: expected_width(first.dataset, [j.view for q in passes if q.model is p.model
                                                             for j in q.jobs]) for p in passes}
    pipelines = [_pipeline(pre) for pre in pipes.values()]
    tails = [tail for *_, tail in pipelines]
    loader = torch.utils.data.DataLoader(
        _Decoded(first.dataset, [(transform, size, dtype) for transform, size, dtype, _ in pipelines]),
        batch_sampler=_ChunkBatches(chunks, first.chunk_size, len(first.dataset), batch_size),
        num_workers=workers, persistent_workers=False, pin_memory=device.startswith("cuda"),
        prefetch_factor=4 if workers else None)
    current: int | None = None
    buffers: dict[Pass, list[_Batch]] = {}

    def flush() -> None:
        for p, batches in buffers.items():
            if p.model.name not in failed:
                p.write(current, batches)
        buffers.clear()

    with torch.inference_mode():
        for xs, idx, err in loader:
            chunk = int(idx[0]) // first.chunk_size
            if current is not None and chunk != current:
                flush()
            current = chunk
            on_device = [x.to(device, non_blocking=True) for x in xs]
            on_device = [(x if tail is None else tail(x)).contiguous(memory_format=torch.channels_last)
                         for x, tail in zip(on_device, tails)]
            for (pipe, _), members in streams.items():
                live = [p for p in members if chunk in needed[p] and p.model.name not in failed]
                if not live:
                    continue
                x = on_device[pipe]
                step = len(idx) if x.device.type != "cpu" else max(1, CPU_SLICE_BYTES // max(1, x[0].nbytes))
                # the shift once for the batch (in slices), then each model over all of it, so a
                # model's weights stay in cache across the batch (measured on CPU, EfficientNet-Lite0 +
                # ResNet-18 + MobileNetV3 in slices of 6: 1-5% faster than alternating per slice)
                parts = [(idx[s:s + step], list(err[s:s + step])) for s in range(0, len(idx), step)]
                shifted = [live[0].shifted(live[0].model.module, x[s:s + step], part)
                           for s, (part, _) in zip(range(0, len(idx), step), parts)]
                for p in live:
                    batches = []
                    try:
                        for xs, (part, errors) in zip(shifted, parts):
                            batches.append(p.score(chunk, part.numpy(), p.logits(xs, errors, expected[p.model.name]),
                                                   errors))
                    except ModelError as exc:
                        failed[p.model.name] = exc
                        continue
                    buffers.setdefault(p, []).extend(batches)
            on_images(len(idx))
    if current is not None:
        flush()
    return failed


#: Label spaces whose views read ImageNet-1k logits (subsets, ObjectNet mapping, superclasses).
IMAGENET_FAMILY = {"imagenet-1k", "objectnet-113", "imagenet-vid-robust-30", "ytbb-robust-24"}


def expected_width(dataset: ImageDataset, views: Sequence[Any] = ()) -> int:
    """The model output width a dataset needs: 1000 for the ImageNet family, else its classes;
    a class-map view (``source_width``) reads the model's own label space instead."""
    default = 1000 if dataset.label_space in IMAGENET_FAMILY else dataset.num_classes
    widths = {getattr(v, "source_width", default) for v in views}
    if len(widths) > 1:
        raise ConfigError(f"dataset {dataset.name!r}: its settings need {sorted(widths)} model outputs at once; "
                          "evaluate @classmap: settings and settings in the dataset's own label space separately")
    return widths.pop() if widths else default


def _check_logits(logits: np.ndarray, model: LoadedModel, errors: Sequence[str], expected: int) -> None:
    """A :class:`ModelError` naming the model unless ``logits`` has one finite row of ``expected``
    logits per image of the batch (``errors``: one entry per image, '' where it was decoded)."""
    if logits.ndim == 2 and logits.shape[0] != len(errors):
        raise ModelError(f"model {model.name!r} returned logits of shape {tuple(logits.shape)} for a batch of "
                         f"{len(errors)} images; expected ({len(errors)}, {expected}): its forward must return "
                         "one row per input image")
    good = np.array([not e for e in errors], dtype=bool)
    if good.any():
        check_logits(logits[good], model.name, expected)


# ---------------------------------------------------------------------------- one model, one dataset
def default_device() -> str:
    import torch  # deferred: loads torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def load_for(model: str | LoadedModel, request: EvalRequest, device: str) -> LoadedModel:
    """The request's ``model`` loaded (``model_type``/``arch`` applied) and moved to ``device``."""

    if isinstance(model, LoadedModel):
        loaded = model
    else:  # --input-size: python: specs (object models were given it when converted)
        size = request.input_size if model.strip().startswith("python:") else None
        loaded = load_model(model, model_type=request.model_type, arch=request.arch, input_size=size)
    _place(loaded, device)
    return loaded


def _place(loaded: LoadedModel, device: str) -> None:
    loaded.module.to(device).eval()
    try:
        import torch  # deferred: loads torch

        loaded.module.to(memory_format=torch.channels_last)
    except Exception:  # noqa: BLE001 - channels-last is an optimisation only
        pass


# ---------------------------------------------------------------------------- many models, one pass
def weight_bytes(model: LoadedModel) -> int:
    """Bytes of a model's parameters and buffers (0 for a module without tensors)."""
    try:
        tensors = [*model.module.parameters(), *model.module.buffers()]
    except AttributeError:
        return 0
    return sum(t.numel() * t.element_size() for t in tensors)


def memory_need(models: Sequence[LoadedModel], batch_size: int) -> int:
    """What a pass streaming ``models`` together holds on its device between forward calls: their
    weights, and per distinct pixel pipeline one decoded and one shifted float32 batch (the
    activations of one forward pass come on top)."""
    pipes = {digest(m.preprocessing.pixel_dict()): m.preprocessing.input_hw for m in models}
    return (sum(weight_bytes(m) for m in models)
            + sum(2 * 4 * 3 * h * w * batch_size for h, w in pipes.values()))


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover - the loop returns


def model_groups(request: EvalRequest) -> Iterator[list[LoadedModel]]:
    """The request's models, loaded (on the CPU) one at a time, in groups that fit
    ``request.memory_limit`` (:func:`memory_need`); one group when there is no limit."""
    group: list[LoadedModel] = []
    limit = request.memory_limit
    for spec in request.models:
        loaded = load_for(spec, request, "cpu") if isinstance(spec, str) else spec
        if limit is not None:
            alone = memory_need([loaded], request.batch_size)
            if alone > limit:
                raise ConfigError(
                    f"memory limit {_size(limit)} is too small for model {loaded.name!r}: it needs at least "
                    f"{_size(alone)} (weights {_size(weight_bytes(loaded))} + a decoded and a shifted batch of "
                    f"{request.batch_size} images); raise --max-memory or lower --batch-size")
            if group and memory_need([*group, loaded], request.batch_size) > limit:
                yield group
                group = []
        group.append(loaded)
    if group:
        yield group


def _dataset_outputs(model: LoadedModel, group: Sequence[Setting], request: EvalRequest) -> int | None:
    """The model output width a dataset group is read on: for in-memory data the model's own
    (its labels index the model's outputs, or its declared classes must match them), else
    :func:`_imagenet_outputs`."""
    if group[0].dataset == TORCH_DATASET:
        return model.num_classes
    return _imagenet_outputs(model, group)


def _load_group(group: Sequence[Setting], request: EvalRequest, outputs: int | None, notes: bool,
                model: LoadedModel | None = None) -> ImageDataset:
    """The dataset ``group``'s settings share (``limit`` applied); in-memory data (torch
    ``Dataset``s given to :func:`evaluate`) is taken from the request, read on ``model``'s outputs
    (a :class:`LabelRangeError` when a label is beyond them)."""
    dataset_name, args = group[0].dataset_key
    if dataset_name == TORCH_DATASET:
        ds = request.data[dict(args)["content"]].for_outputs(
            outputs, model.name if model is not None else "?", model.label_space if model is not None else None,
            model.class_names if model is not None else None,
            data_name=group[0].name.partition("+")[0].partition("@classmap:")[0])
    else:
        ds = _load(dataset_name, request.data_root, request.data_dirs, dict(args), request.partial, outputs)
    if notes:  # how the data was read, e.g. a folder of ImageNet classes on the 1000-way logits
        for note in getattr(ds, "notes", ()):
            print(f"note: {note}", file=sys.stderr)
    if request.limit is not None and request.limit < len(ds):
        ds = ds.subset(range(request.limit))
    return ds


def _passes(loaded: LoadedModel, ds: ImageDataset, group: Sequence[Setting], request: EvalRequest,
            store: Store) -> list[Pass]:
    """One :class:`Pass` per shift of the dataset group for one model (registers every key)."""
    by_shift: dict[Any, list[Setting]] = defaultdict(list)
    for s in group:
        by_shift[s.shift].append(s)
    return [Pass(loaded, ds, members, store, convention=request.convention, chunk_size=request.chunk_size,
                 keep_logits=request.keep_logits, force=request.force, seed=request.seed, shard=request.shard,
                 shift=None if shift is None else get_shift(*shift))
            for shift, members in by_shift.items()]


def _pipelines_note(passes: Sequence[Pass]) -> str | None:
    models = list(dict.fromkeys(p.model.name for p in passes))
    pipes: dict[str, list[str]] = {}
    for p in passes:
        pre = p.model.preprocessing
        names = pipes.setdefault(f"{pre.input_hw[0]}x{pre.input_hw[1]} px, resize {pre.resize}, {pre.interpolation}", [])
        if p.model.name not in names:
            names.append(p.model.name)
    if len(models) < 2 or len(pipes) < 2:
        return None
    return (f"{len(models)} models on {passes[0].dataset.name} share each decoded image, but their resize/crop "
            f"differ ({len(pipes)} pixel pipelines: " + "; ".join(f"{k}: {len(v)} models" for k, v in pipes.items())
            + "), so each shift runs once per pipeline")


def run_models(request: EvalRequest, *, progress: bool | ProgressFn = True,
               run_meta: Mapping[str, Any] | None = None) -> tuple[list[dict[str, Any]], dict[str, ModelError]]:
    """Evaluate every model of ``request`` on its settings, streaming each dataset once for all
    the models of a memory group (:func:`model_groups`, :func:`run_dataset`). Every dataset is
    loaded, and every key registered, before the first forward pass; each model's run is recorded
    in the store. Returns the result rows and the models that failed (the others finish)."""
    if request.model_type is not None and request.model_type not in MODEL_TYPES:
        raise ConfigError(did_you_mean("model type", request.model_type, MODEL_TYPES))
    store = request.open_store()
    device = request.device or default_device()
    rows: list[dict[str, Any]] = []
    failed: dict[str, ModelError] = {}
    for n_group, models in enumerate(model_groups(request)):
        for m in models:
            _place(m, device)
        try:
            group_rows, group_failed = _run_group(models, request, store, device, progress, run_meta,
                                                  notes=n_group == 0 and progress is True)
        finally:
            _release(models, request, device)
        rows += group_rows
        failed.update(group_failed)
    if request.model_type is not None:
        record_model_type(store, request.model_type, rows, failed, say=progress is True)
    return rows, failed


def record_model_type(store: Store, model_type: str, rows: list[dict[str, Any]], failed: Mapping[str, Any],
                      say: bool) -> None:
    """``model_type`` given (``--model-type``): the type of every model that ran, recorded on each of
    its finished results in the store (a finished key reused by this run, or one of another setting,
    keeps its numbers: the type is metadata, not part of a key, so nothing is recomputed) and on
    ``rows``; ``say``: a note on stderr per model whose stored type changed."""
    for name in dict.fromkeys(str(r["model"]) for r in rows):
        if name in failed:
            continue
        before = store.set_model_type(name, model_type)
        if before and say:
            was = ", ".join(sorted({str(t) for t in before.values()}))
            print(f"note: model {name!r}: model type {model_type} recorded on {len(before)} finished result(s) "
                  f"(was {was}); nothing recomputed", file=sys.stderr)
    for r in rows:
        if r["model"] not in failed:
            r["model_type"] = model_type


def _run_group(models: Sequence[LoadedModel], request: EvalRequest, store: Store, device: str,
               progress: bool | ProgressFn, run_meta: Mapping[str, Any] | None, notes: bool
               ) -> tuple[list[dict[str, Any]], dict[str, ModelError]]:
    streams: list[list[Pass]] = []  # per dataset (and label-space reading of it): every model's passes
    failed: dict[str, ModelError] = {}
    for group in request.groups():
        by_outputs: dict[int | None, list[Pass]] = {}
        for m in models:
            if m.name in failed:
                continue
            outputs = _dataset_outputs(m, group, request)
            try:
                if outputs not in by_outputs:
                    ds = _load_group(group, request, outputs, notes=notes and not by_outputs, model=m)
                else:
                    ds = by_outputs[outputs][0].dataset
            except LabelRangeError as exc:  # in-memory data whose labels this model cannot score
                failed[m.name] = exc        # nothing registered for it; the other models run
                continue
            by_outputs.setdefault(outputs, []).extend(_passes(m, ds, group, request, store))
        streams += by_outputs.values()
    started = time.time()
    if progress is True:
        for note in dict.fromkeys([*(n for m in models for n in m.metadata.get("notes", ())),
                                   *(n for ps in streams for p in ps for n in p.notes)]):
            print(f"note: {note}", file=sys.stderr)
    chunks = {m.name: sum(len(p.todo_chunks()) for ps in streams for p in ps if p.model is m) for m in models}
    rows: list[dict[str, Any]] = []
    lost: list[str] = []
    with _progress(progress, models[0].name) as tick:
        for passes in streams:
            live = [p for p in passes if p.model.name not in failed]
            if not live:
                continue
            if progress is True and (note := _pipelines_note(live)):
                print(f"note: {note}", file=sys.stderr)
            for attempt in range(RESET_RETRIES + 1):
                _stream(live, request, device, tick, failed, again=attempt > 0)
                live = [p for p in live if p.model.name not in failed]
                rows += [row for p in live for row in p.finish()]
                # a shard leaves the other shards' chunks to them; a whole run finishes every key
                live = [p for p in live if p.unfinished] if request.shard is None else []
                if not live:
                    break
                reset = [f"{p.model.name!r} on {j.setting.name!r}" for p in live for j in p.unfinished]
                if attempt == RESET_RETRIES:
                    lost += reset
                elif progress is True:
                    print(f"note: another run (--force, or another --chunk-size) removed parts of {len(reset)} "
                          f"result(s) while this run computed them ({', '.join(reset[:5])}); computing them again",
                          file=sys.stderr)
    finished = time.time()
    for m in models:
        meta = {"model": m.name, "spec": m.spec,
                "settings": request.setting_names,
                "device": device, "shiftbench": __version__, "torch": _torch_version(),
                "python": platform.python_version(), "preprocessing": m.preprocessing.to_dict(),
                "batch_size": request.batch_size, "workers": request.workers, "limit": request.limit,
                "models_in_pass": len(models), **({"shard": list(request.shard)} if request.shard else {}),
                **dict(run_meta or {}), "started": started, "finished": finished, "chunks": chunks[m.name]}
        if m.name in failed:
            meta["error"] = str(failed[m.name])
        store.record_run(meta)
    if lost:
        raise StoreError(f"{store.root}: another run removed the parts of {len(lost)} result(s) "
                         f"{RESET_RETRIES + 1} times while this run computed them ({', '.join(lost[:5])}); "
                         "a run with --force or another --chunk-size is evaluating them: rerun when it has "
                         "finished")
    return rows, failed


def _stream(passes: Sequence[Pass], request: EvalRequest, device: str, tick: Callable[[str | None, int, int | None], None],
            failed: dict[str, ModelError], again: bool = False) -> None:
    """One stream of a dataset through ``passes`` (:func:`run_dataset`), with its progress line;
    the models that fail are added to ``failed``. ``again``: the chunks another run removed."""
    ds = passes[0].dataset
    todo = sorted(set().union(*(p.todo_chunks() for p in passes)))
    n_images = sum(min(len(ds), (c + 1) * request.chunk_size) - c * request.chunk_size for c in todo)
    names = list(dict.fromkeys(p.model.name for p in passes))
    shifts = len({p.shift.id for p in passes if p.shift is not None})
    tick((names[0] if len(names) == 1 else f"{len(names)} models") + f" on {ds.name}"
         + (f" (+{shifts} shifts)" if shifts else "") + (" (again: parts removed by another run)" if again else ""),
         0, n_images)
    failed.update(run_dataset(passes, device=device, batch_size=request.batch_size, workers=request.workers,
                              on_images=lambda k: tick(None, k, None)))


def _release(models: Sequence[LoadedModel], request: EvalRequest, device: str) -> None:
    """Models this request loaded leave the accelerator once their group is done (a user's
    LoadedModel stays where the pass put it)."""
    if not device.startswith("cuda"):
        return
    import torch  # deferred: loads torch

    given = {id(m) for m in request.models if isinstance(m, LoadedModel)}
    for m in models:
        if id(m) not in given:
            m.module.to("cpu")
    torch.cuda.empty_cache()


def failure(failed: Mapping[str, ModelError], request: EvalRequest) -> ModelError:
    """One error for the models that failed: the model's own error when it ran alone, else one
    line naming each failing model and saying the others finished."""
    if len(request.models) == 1 and len(failed) == 1:
        return next(iter(failed.values()))
    where = (f"their results are in {request.store}" if request.store is not None
             else "their results are on this error's .results")
    return ModelError(f"{len(failed)} of {len(request.models)} models failed ("
                      + " | ".join(str(e) for e in failed.values())
                      + f"); the other models finished and {where}")


def result_frame(rows: Sequence[Mapping[str, Any]], request: EvalRequest) -> pd.DataFrame:
    """The rows of a request's results as one table: models in request order (rows of a model
    together), each model's settings in the order asked for, ``RESULT_KEYS`` first."""
    frame = pd.DataFrame(list(rows))
    if frame.empty:
        return pd.DataFrame(columns=RESULT_KEYS)
    setting_order = {n: i for i, n in enumerate(request.setting_names)}
    model_order: dict[str, int] = {}
    for m in frame["model"]:
        model_order.setdefault(m, len(model_order))
    keys = pd.DataFrame({"m": frame["model"].map(model_order), "s": frame["setting"].map(setting_order)})
    frame = frame.loc[keys.sort_values(["m", "s"], kind="stable").index].reset_index(drop=True)
    return frame[RESULT_KEYS + [c for c in frame.columns if c not in RESULT_KEYS]]


# ---------------------------------------------------------------------------- public API
def evaluate(
    model: Any,
    settings: Any,
    *,
    data_root: str | Path = ".",
    data_dirs: Mapping[str, str | Path] | None = None,
    store: str | Path | Store | None = DEFAULT_STORE,
    storage_options: Mapping[str, Any] | None = None,
    batch_size: int = 64,
    workers: int = 1,
    limit: int | None = None,
    keep_logits: bool = False,
    force: bool = False,
    device: str | None = None,
    convention: str = "restricted",
    chunk_size: int = 1024,
    model_type: str | None = None,
    arch: str | None = None,
    partial: bool = False,
    seed: int = 0,
    memory_limit: int | str | None = None,
    progress: bool | ProgressFn = True,
    name: str | None = None,
    preprocessing: Any = None,
    input_size: int | None = None,
    mean: Any = None,
    std: Any = None,
    shifts: str | Sequence[str] | None = None,
) -> pd.DataFrame:
    """Evaluate ``model`` (or each of a list of models) on ``settings``; one row per (model, setting).

    With several models each dataset is streamed once for all of them: every image is decoded
    once, put through each distinct resize/crop once (models with the same preprocessing share
    the tensor), each shift runs once per pipeline, and every model sees the same batches; the
    stored results are those of one-model-at-a-time runs, bit for bit. Builds one :class:`~shiftbench.engine.request.EvalRequest` and runs it with the
    :class:`~shiftbench.engine.executor.LocalExecutor` (``shiftbench eval --executor ray`` runs
    the same request on a Ray cluster).

    Parameters
    ----------
    model:
        A model spec (``torchvision:resnet50``, ``timm:resnet50.a1_in1k``,
        ``checkpoint:<file>``, ``python:<module>:<function>``; see :mod:`shiftbench.models`),
        an ``nn.Module`` or any callable from a normalised ``(B, 3, H, W)`` batch to logits
        (:func:`~shiftbench.models.objects.as_model`: fingerprinted from its weights, so changed
        weights are recomputed), a :class:`~shiftbench.models.base.LoadedModel`, a dict
        ``{name: model object}``, or a list mixing them.
    settings:
        Setting names (``shiftbench list settings``) or custom ``folder:``/``manifest:``/``hf:``;
        a torch ``Dataset`` or ``DataLoader`` yielding ``(image, label)`` (PIL images, uint8 or
        [0, 1] float tensors; read once, identified by a hash of its content, see
        :mod:`shiftbench.datasets.torch_data`), named by a dict ``{"my-val": ds}`` or after its
        class (``ImageFolder-val``); or a list mixing them. ``"my-val+fog.3"`` beside
        ``{"my-val": ds}`` adds a shift to it, as ``cifar10+fog.3`` does to a named setting.
    name, preprocessing, input_size, mean, std:
        For a model object: its name (default: its class name) and preprocessing - a
        :class:`~shiftbench.models.base.Preprocessing`, or ``input_size=N`` (the shorter side
        resized to ``N``, then an ``N`` x ``N`` centre crop) and ``mean``/``std`` (applied before
        the model; default 0 and 1, i.e. [0, 1] pixels). Without them a timm model gets timm's
        own eval transform; any other object resize 256 / crop 224, with a note saying so.
        ``input_size`` also sets the size of ``python:`` specs (``--input-size``).
    shifts:
        Shifts (``fog.3``, ``gaussian_noise.5``, ``greyscale``; ``shiftbench list shifts``) added to
        every setting without one: ``settings=["cifar10"], shifts=["fog.3"]`` evaluates
        ``cifar10`` and ``cifar10+fog.3``.
    data_root, data_dirs:
        Where datasets live: each dataset under its default folder in ``data_root``, or at the
        path given for its name in ``data_dirs``.
    store:
        Results store: a directory, or a URI (``s3://bucket/prefix``, ``gs://...``, ``az://...``,
        any fsspec URI; docs/store.md); finished (model, setting) keys are reused unless ``force``.
        ``None``: evaluate without writing anything anywhere (the same result frame; nothing is
        reused either).
    storage_options:
        For a store URI: keyword arguments of its fsspec filesystem (``{"endpoint_url": ...}``
        for s3fs) where the environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...) and
        config files do not already say them.
    limit:
        Evaluate only the first ``limit`` examples of each dataset (a quick look; a different
        example list, so it is stored under its own key).
    keep_logits:
        Also store float16 logits, so later views need no new forward pass.
    convention:
        Class-subset scoring: ``restricted`` (published protocol) or ``argmax-all``.
    model_type, arch:
        Override the model's type (``STANDARD``, ``ROBUST_INTV``, ...); the architecture of a
        ``checkpoint:`` spec (``timm:resnet50``, ``torchvision:resnet50``, ``efficientnet-lite0``).
    seed:
        Seed of random shifts (corruptions, PGD starts): every draw is reproducible from
        (seed, shift, image index), whatever the batch size or worker count.
    partial:
        Accept a partial copy of a named dataset (e.g. some class folders missing) instead of
        failing on the first missing one; the example list, and so the key, is what was found.
    memory_limit:
        Bytes (or ``"8GiB"``) one pass may hold on its device: the weights of the models
        streamed together plus a decoded and a shifted batch per pixel pipeline
        (:func:`~shiftbench.engine.runner.memory_need`); models are split into passes that fit.
        ``None``: all models in one pass.

    Returns
    -------
    DataFrame with ``model, setting, accuracy, top5, n_examples, n_skipped`` (accuracies in
    percent) plus ``convention``, calibration (``ece``, ``nll``, ``brier``) and ``skipped_files``.

    Raises
    ------
    ModelError
        When a model fails (an exception inside it, a wrong output width, NaN logits): raised
        after the other models have finished, naming each failing model.
    """
    require("shiftbench.evaluate", "torch", "torchvision")   # without [eval]: one line naming it
    from shiftbench.engine.executor import LocalExecutor  # deferred: loads Pillow, loads pyarrow

    with _restored_modules(model):   # a user's nn.Module is given back in its mode and on its device
        request = EvalRequest.build(
            model, settings, data_root=data_root, data_dirs=data_dirs, store=store,
            **({"storage_options": dict(storage_options)} if storage_options else {}), batch_size=batch_size,
            workers=workers, limit=limit, keep_logits=keep_logits, force=force, device=device, convention=convention,
            chunk_size=chunk_size, model_type=model_type, arch=arch, partial=partial, seed=seed,
            memory_limit=memory_limit, name=name, preprocessing=preprocessing, input_size=input_size, mean=mean,
            std=std, shifts=shifts)
        return LocalExecutor().run(request, progress=progress)


@contextlib.contextmanager
def _restored_modules(model: Any) -> Iterator[None]:
    """The ``nn.Module`` objects among ``model`` (a model, a list or a dict of them) back in their
    training mode and on their device afterwards (the pass puts them in eval mode on its device)."""
    values = model.values() if isinstance(model, Mapping) else model if isinstance(model, list | tuple) else [model]
    modules = [m for m in values if hasattr(m, "training") and hasattr(m, "parameters") and hasattr(m, "to")]
    state = []
    for m in modules:
        first = next(iter(m.parameters()), None)
        state.append((m, m.training, None if first is None else first.device))
    try:
        yield
    finally:
        for m, training, device in state:
            m.train(training)
            if device is not None:
                m.to(device)


def _imagenet_outputs(model: LoadedModel, group: Sequence[Setting]) -> int | None:
    """The output width an ImageNet model offers a folder for label-space auto-detection
    (:func:`shiftbench.datasets.image_folder`); none where a class map scores the folder's own classes."""
    if model.label_space != "imagenet-1k" or any("@classmap:" in s.name for s in group):
        return None
    return model.num_classes


def _load(name: str, data_root: Any, data_dirs: Any, args: dict[str, Any], partial: bool,
          model_outputs: int | None = None) -> ImageDataset:

    from shiftbench.datasets import get_dataset_entry, load_dataset  # deferred: loads Pillow

    params = inspect.signature(get_dataset_entry(name).builder).parameters
    if partial and "strict" in params:
        args["strict"] = False
    if model_outputs is not None and "model_outputs" in params and "classes" not in args:
        args["model_outputs"] = model_outputs
    return load_dataset(name, data_root, overrides=data_dirs, **args)


def _torch_version() -> str:
    import torch  # deferred: loads torch

    return torch.__version__


class _progress:
    """Context manager giving ``tick(description, advance, total)``: a rich progress bar with
    images/s and ETA, a user callback, or nothing."""

    def __init__(self, progress: bool | ProgressFn, label: str) -> None:
        self.progress, self.label = progress, label
        self._bar = None
        self._task = None

    def __enter__(self) -> Callable[[str | None, int, int | None], None]:
        if callable(self.progress):
            fn = self.progress
            return lambda desc, k, total: fn(desc or "", k, total or 0)
        if not self.progress:
            return lambda desc, k, total: None

        class _Rate(TextColumn):
            def render(self, task):  # images/s

                speed = task.finished_speed or task.speed
                return Text(f"{speed:,.1f} img/s" if speed else "… img/s")

        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TaskProgressColumn(), _Rate(""), TimeRemainingColumn(),
                             console=Console(stderr=True), transient=False)
        self._bar.__enter__()

        def tick(desc: str | None, k: int, total: int | None) -> None:
            if desc is not None:
                self._task = self._bar.add_task(desc, total=total)
            elif self._task is not None:
                self._bar.advance(self._task, k)
        return tick

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
