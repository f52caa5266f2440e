"""Fan (dataset × shard) slices of one evaluation request out over a Ray cluster.

Each Ray task receives one of :meth:`~shiftbench.engine.request.EvalRequest.tasks`: the settings
of one dataset, one interleaved shard of its chunks, and every model of the request, which it
streams as :class:`~shiftbench.engine.executor.LocalExecutor` does (each image decoded and
shifted once for all models) on its node, writing to the same store. Each task opens that store
itself, where it runs: a bucket (``s3://bucket/prefix``, ``gs://``, ``az://``: the nodes need share
nothing but it, each finding its credentials and endpoint the standard way for its filesystem,
e.g. its own environment) or a folder every node mounts at the same path (NFS). Before the tasks
go out, the driver marks the store (:meth:`~shiftbench.store.Store.mark_dispatch`); a task that
does not find the mark in the store it opened (a local folder on a node that does not share it)
stops with a one-line :class:`~shiftbench.errors.ConfigError` instead of writing results where the
driver will never read them. Relative paths of the request (the store, ``data_root``) are made
absolute on the driver, so a worker's own working directory never matters.

A key is finished by whichever shard task completes it last. A worker or node that dies has its
task retried by Ray (``max_retries``); because every finished chunk is an atomically written part
(a renamed file, or one object PUT in a bucket) with a deterministic name, the retry resumes where
the dead worker stopped and the store never holds duplicate rows. Each task's run record in the
store names the Ray node and task that ran it.
"""
from __future__ import annotations

import contextlib
import os
import re
import socket
import sys
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from shiftbench.engine.request import EvalRequest
from shiftbench.engine.runner import ProgressFn, failure, result_frame
from shiftbench.errors import ConfigError, ModelError, ShiftbenchError
from shiftbench.models.device import check_device
from shiftbench.store.fs import is_uri

#: seconds the reachability check of ``--address`` waits for a TCP connection
CONNECT_TIMEOUT = 5.0
_ADDRESS_HINT = ("check --address (ray://HEAD:10001 for Ray Client, HEAD:6379 for a node of the cluster; "
                 "`ray status` on the head node shows it) and that the cluster is running")


def _host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a ``ray://host[:port]`` or ``host:port`` address (``None``: another
    form, e.g. ``auto``, which Ray resolves itself)."""
    m = re.fullmatch(r"(ray://)?\[?([A-Za-z0-9_.:-]+?)\]?(?::(\d+))?/?", address.strip())
    if m is None or (m.group(3) is None and m.group(1) is None) or m.group(2) in ("auto", "local"):
        return None
    return m.group(2), int(m.group(3) or 10001)


def check_reachable(address: str | None, timeout: float = CONNECT_TIMEOUT) -> None:
    """A ConfigError naming ``address`` when nothing accepts a TCP connection there within
    ``timeout`` seconds (Ray itself retries for 20-30 s before it gives up)."""
    target = None if address is None else _host_port(address)
    if target is None:
        return
    try:
        with socket.create_connection(target, timeout=timeout):
            pass
    except OSError as exc:
        why = "timed out" if isinstance(exc, socket.timeout) else (exc.strerror or str(exc))
        raise ConfigError(f"cannot reach the Ray cluster at {address!r} ({why} after at most {timeout:g} s); "
                          f"{_ADDRESS_HINT}") from exc


@contextlib.contextmanager
def _held_stderr() -> Iterator[None]:
    """Hold back what is written to file descriptor 2 (Ray's C++ client logs a warning a second
    while it retries a connection) and the Python warnings: replayed if the block succeeds,
    dropped if it raises (the error then says what went wrong, in one line)."""
    fd = 2                                # Ray's C++ core writes there, whatever sys.stderr is
    try:
        sys.stderr.flush()
        saved = os.dup(fd)
    except (AttributeError, OSError, ValueError):  # no descriptor 2: nothing to hold
        yield
        return
    with tempfile.TemporaryFile() as held, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")   # held too (Ray Client's "connection timed out"): re-issued on success
        os.dup2(held.fileno(), fd)
        ok = False
        try:
            yield
            ok = True
        finally:
            sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)
            if ok:
                held.seek(0)
                data = held.read()
                if data:
                    sys.stderr.write(data.decode(errors="replace"))
                    sys.stderr.flush()
    if ok:
        for w in caught:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _run_slice(request: EvalRequest, token: str | None = None) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """A Ray task: one (dataset × shard) slice with every model, run here, recorded with this
    node's id, in the store this task opens itself (which must hold the driver's dispatch mark
    ``token``). Returns its rows and its failed models (not raised: a model error is not a
    reason for Ray to retry the task)."""
    import ray  # deferred: loads ray

    from shiftbench.engine.runner import run_models  # deferred: loads Pillow, loads pyarrow

    check_device(request.device)  # on the worker: its GPUs, not the driver's
    ctx = ray.get_runtime_context()
    if token is not None and not request.open_store().has_dispatch(token):
        raise ConfigError(
            f"--store {request.store}: the Ray task on node {ctx.get_node_id()[:8]} "
            f"({socket.gethostname()}) does not see the store the driver wrote to (a local folder is not shared "
            "between machines); pass a bucket every node can reach (--store s3://bucket/prefix) or a folder "
            "every node mounts at the same path (NFS)")
    rows, failed = run_models(request, progress=False, run_meta={
        "executor": "ray", "ray_node_id": ctx.get_node_id(), "ray_task_id": ctx.get_task_id()})
    return rows, {name: str(exc) for name, exc in failed.items()}


class RayExecutor:
    """Runs a request as Ray tasks, one per (dataset group × shard of its chunks), each with
    every model of the request.

    ``address`` is a Ray cluster address (``ray://host:10001``, ``auto``, or a GCS address);
    without it, and with no Ray connection already open, a local Ray instance is started (and
    shut down afterwards). ``shards`` is the number of shards per dataset (default: as many as
    the cluster has task slots, ``CPU / num_cpus_per_task``; one with ``force``, whose tasks first
    forget the keys they recompute). The request's ``store`` must be one every worker reaches: a
    bucket URI (``s3://bucket/prefix``; the nodes need share no disk) or a folder every node
    mounts at the same path; a task that finds another store there stops with a ConfigError.
    """

    def __init__(self, address: str | None = None, *, max_retries: int = 3, num_cpus_per_task: float = 1.0,
                 runtime_env: dict[str, Any] | None = None, shards: int | None = None) -> None:
        if shards is not None and shards < 1:
            raise ConfigError(f"shards={shards} must be at least 1")
        self.address, self.max_retries = address, max_retries
        self.num_cpus_per_task, self.runtime_env, self.shards = num_cpus_per_task, runtime_env, shards

    def _connect(self, ray: Any) -> None:
        """``ray.init`` at ``self.address`` (or a local instance); an address nothing answers at,
        or that is not a Ray cluster, is a one-line ConfigError naming it."""
        check_reachable(self.address)
        local = self.address is None
        where = "start a local Ray instance" if local else f"connect to the Ray cluster at {self.address!r}"
        try:
            with contextlib.nullcontext() if local else _held_stderr():
                ray.init(address=self.address, ignore_reinit_error=True, include_dashboard=False,
                         log_to_driver=False, configure_logging=False)
        except (ConnectionError, RuntimeError, TimeoutError, ValueError) as exc:
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            why = lines[0] if lines else type(exc).__name__
            hint = "see the logs in /tmp/ray/session_latest/logs" if local else _ADDRESS_HINT
            raise ConfigError(f"cannot {where} ({why}); {hint}") from exc

    def run(self, request: EvalRequest, progress: bool | ProgressFn = False) -> pd.DataFrame:
        """``progress`` is not shown (the passes run on the workers); the argument keeps the
        :class:`~shiftbench.engine.executor.Executor` interface."""
        if request.store is None:  # the tasks' parts must meet in one store every worker reaches
            raise ConfigError("store=None keeps results in this process; the Ray executor needs a store every "
                              "worker can reach (--store s3://bucket/prefix, or a folder every node mounts)")
        request = absolute(request)
        try:
            import ray  # deferred: loads ray
        except ImportError as exc:  # pragma: no cover - ray is installed by the Makefile
            raise ConfigError("--executor ray needs Ray: pip install 'shiftbench[ray]'") from exc
        check_device(request.device, here=False)   # the spelling; whether a worker has it, on the worker
        started_here = not ray.is_initialized()
        if started_here:
            self._connect(ray)
        try:
            options: dict[str, Any] = {"num_cpus": self.num_cpus_per_task, "max_retries": self.max_retries}
            if self.runtime_env:
                options["runtime_env"] = self.runtime_env
            remote = ray.remote(**options)(_run_slice)
            shards = self.shards or max(1, int(ray.cluster_resources().get("CPU", 1) // self.num_cpus_per_task))
            if request.force:  # each task forgets its keys first: one task per dataset, or shards would race
                shards = 1
            store = request.open_store()
            token = store.mark_dispatch({"executor": "ray", "driver": socket.gethostname(), "pid": os.getpid(),
                                         "address": self.address, "shards": shards,
                                         "models": len(request.models), "settings": request.setting_names})
            try:
                outputs = ray.get([remote.remote(task, token) for task in request.tasks(shards)])
            except ray.exceptions.RayTaskError as exc:   # a task raised: its ShiftbenchError, as itself
                if isinstance(exc.cause, ShiftbenchError):
                    raise exc.cause from exc
                raise
            finally:
                store.clear_dispatch(token)
        finally:
            if started_here:
                ray.shutdown()
        failed = {name: why for _, f in outputs for name, why in f.items()}
        if failed:
            raise failure({name: ModelError(why) for name, why in failed.items()}, request)
        rows: dict[tuple[str, str], dict[str, Any]] = {}
        for task_rows, _ in outputs:  # a key two shards completed at once is reported by both
            for row in task_rows:
                rows.setdefault((row["model"], row["setting"]), row)
        return result_frame(list(rows.values()), request)


def absolute(request: EvalRequest) -> EvalRequest:
    """``request`` with its relative paths (a local store, ``data_root``, ``data_dirs``) made
    absolute here on the driver: a Ray worker starts in a working directory of its own."""
    store = request.store
    if store is not None and not is_uri(store):
        store = Path(store).absolute()
    dirs = None if request.data_dirs is None else {k: str(Path(v).absolute()) for k, v in request.data_dirs.items()}
    return replace(request, store=store, data_root=Path(request.data_root).absolute(), data_dirs=dirs)


def evaluate_ray(models: Sequence[str], settings: Sequence[str], *, address: str | None = None,
                 max_retries: int = 3, num_cpus_per_task: float = 1.0, **options: Any) -> pd.DataFrame:
    """Shorthand: ``RayExecutor(address, ...).run(EvalRequest.build(models, settings, **options))``."""
    return RayExecutor(address, max_retries=max_retries,
                       num_cpus_per_task=num_cpus_per_task).run(EvalRequest.build(list(models), settings, **options))
