"""Fan (model × dataset) slices of one evaluation request out over a Ray cluster.

Each Ray task receives one :meth:`~shiftbench.engine.request.EvalRequest.slice` of the request
(one model, the settings of one dataset) and runs it with a
:class:`~shiftbench.engine.executor.LocalExecutor` on its node, writing to the same store (a
shared disk: local, NFS, or a mounted bucket). A worker or node that dies has its task retried
by Ray (``max_retries``); because every finished chunk is an atomically written part with a
deterministic name, the retry resumes where the dead worker stopped and the store never holds
duplicate rows. Each task's run record in the store names the Ray node and task that ran it.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from shiftbench.engine.request import EvalRequest
from shiftbench.engine.runner import ProgressFn, result_frame
from shiftbench.errors import ConfigError


def _run_slice(request: EvalRequest) -> pd.DataFrame:
    """A Ray task: one (model × dataset group) slice, run here, recorded with this node's id."""
    import ray  # deferred: loads ray

    from shiftbench.engine.executor import LocalExecutor  # deferred: loads Pillow, loads pyarrow

    ctx = ray.get_runtime_context()
    return LocalExecutor(run_meta={"executor": "ray", "ray_node_id": ctx.get_node_id(),
                                   "ray_task_id": ctx.get_task_id()}).run(request, progress=False)


class RayExecutor:
    """Runs a request as Ray tasks, one per (model × dataset group).

    ``address`` is a Ray cluster address (``ray://host:10001``, ``auto``, or a GCS address);
    without it, and with no Ray connection already open, a local Ray instance is started (and
    shut down afterwards). The request's ``store`` must be a path every worker can reach.
    """

    def __init__(self, address: str | None = None, *, max_retries: int = 3, num_cpus_per_task: float = 1.0,
                 runtime_env: dict[str, Any] | None = None) -> None:
        self.address, self.max_retries = address, max_retries
        self.num_cpus_per_task, self.runtime_env = num_cpus_per_task, runtime_env

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
            frames = ray.get([remote.remote(task) for task in request.tasks()])
        finally:
            if started_here:
                ray.shutdown()
        return result_frame([row for f in frames for row in f.to_dict("records")], request)


def evaluate_ray(models: Sequence[str], settings: Sequence[str], *, address: str | None = None,
                 max_retries: int = 3, num_cpus_per_task: float = 1.0, **options: Any) -> pd.DataFrame:
    """Shorthand: ``RayExecutor(address, ...).run(EvalRequest.build(models, settings, **options))``."""
    return RayExecutor(address, max_retries=max_retries,
                       num_cpus_per_task=num_cpus_per_task).run(EvalRequest.build(list(models), settings, **options))
