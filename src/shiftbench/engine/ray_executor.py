"""Fan (dataset × shard) slices of one evaluation request out over a Ray cluster.

Each Ray task receives one of :meth:`~shiftbench.engine.request.EvalRequest.tasks`: the settings
of one dataset, one interleaved shard of its chunks, and every model of the request, which it
streams as :class:`~shiftbench.engine.executor.LocalExecutor` does (each image decoded and
shifted once for all models) on its node, writing to the same store (a shared disk: local,
NFS, or a mounted bucket). A key is finished by whichever shard task completes it last. A worker or node that dies has its task retried
by Ray (``max_retries``); because every finished chunk is an atomically written part with a
deterministic name, the retry resumes where the dead worker stopped and the store never holds
duplicate rows. Each task's run record in the store names the Ray node and task that ran it.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from shiftbench.engine.request import EvalRequest
from shiftbench.engine.runner import ProgressFn, failure, result_frame
from shiftbench.errors import ConfigError, ModelError


def _run_slice(request: EvalRequest) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """A Ray task: one (dataset × shard) slice with every model, run here, recorded with this
    node's id. Returns its rows and its failed models (not raised: a model error is not a
    reason for Ray to retry the task)."""
    import ray  # deferred: loads ray

    from shiftbench.engine.runner import run_models  # deferred: loads Pillow, loads pyarrow

    ctx = ray.get_runtime_context()
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
    forget the keys they recompute). The request's ``store`` must be a path every worker can reach.
    """

    def __init__(self, address: str | None = None, *, max_retries: int = 3, num_cpus_per_task: float = 1.0,
                 runtime_env: dict[str, Any] | None = None, shards: int | None = None) -> None:
        if shards is not None and shards < 1:
            raise ConfigError(f"shards={shards} must be at least 1")
        self.address, self.max_retries = address, max_retries
        self.num_cpus_per_task, self.runtime_env, self.shards = num_cpus_per_task, runtime_env, shards

    def run(self, request: EvalRequest, progress: bool | ProgressFn = False) -> pd.DataFrame:
        """``progress`` is not shown (the passes run on the workers); the argument keeps the
        :class:`~shiftbench.engine.executor.Executor` interface."""
        try:
            import ray  # deferred: loads ray
        except ImportError as exc:  # pragma: no cover - ray is installed by the Makefile
            raise ConfigError("--executor ray needs Ray: pip install 'shiftbench[ray]'") from exc
        started_here = not ray.is_initialized()
        if started_here:
            ray.init(address=self.address, ignore_reinit_error=True, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
        try:
            options: dict[str, Any] = {"num_cpus": self.num_cpus_per_task, "max_retries": self.max_retries}
            if self.runtime_env:
                options["runtime_env"] = self.runtime_env
            remote = ray.remote(**options)(_run_slice)
            shards = self.shards or max(1, int(ray.cluster_resources().get("CPU", 1) // self.num_cpus_per_task))
            if request.force:  # each task forgets its keys first: one task per dataset, or shards would race
                shards = 1
            outputs = ray.get([remote.remote(task) for task in request.tasks(shards)])
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


def evaluate_ray(models: Sequence[str], settings: Sequence[str], *, address: str | None = None,
                 max_retries: int = 3, num_cpus_per_task: float = 1.0, **options: Any) -> pd.DataFrame:
    """Shorthand: ``RayExecutor(address, ...).run(EvalRequest.build(models, settings, **options))``."""
    return RayExecutor(address, max_retries=max_retries,
                       num_cpus_per_task=num_cpus_per_task).run(EvalRequest.build(list(models), settings, **options))
