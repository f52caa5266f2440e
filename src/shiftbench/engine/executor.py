"""Executors: who runs an :class:`~shiftbench.engine.request.EvalRequest`.

Every executor owns the loop over models × datasets and returns one table of results, one row
per (model, setting), in the request's order. :class:`LocalExecutor` runs the passes in this
process: each dataset is streamed once for all the models (decoded once, each shift applied
once, every model fed the same batches); :class:`~shiftbench.engine.ray_executor.RayExecutor`
sends each (dataset × shard of its chunks) slice of the request, with all its models, to a Ray
task, which runs it the same way on its node and writes to the same store.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import pandas as pd

from shiftbench.engine.request import EvalRequest
from shiftbench.engine.runner import ProgressFn, failure, result_frame, run_models
from shiftbench.models.device import check_device


@runtime_checkable
class Executor(Protocol):
    """Runs a request and returns its results (``model, setting, accuracy, top5, n_examples,
    n_skipped`` first; see :func:`shiftbench.evaluate`)."""

    def run(self, request: EvalRequest, progress: bool | ProgressFn = True) -> pd.DataFrame: ...


class LocalExecutor:
    """Runs a request in this process: one stream per dataset serves every model and every
    setting of that dataset (models grouped to fit ``request.memory_limit``). A model that fails
    is named in a :class:`~shiftbench.errors.ModelError` raised after the others have finished
    (their result frame is on its ``results`` attribute).
    ``run_meta`` is added to each stored run record (a Ray task adds its node and task ids)."""

    def __init__(self, run_meta: Mapping[str, Any] | None = None) -> None:
        self.run_meta = dict(run_meta or {})

    def run(self, request: EvalRequest, progress: bool | ProgressFn = True) -> pd.DataFrame:
        check_device(request.device)  # 'tpu7', or a GPU this machine lacks: one ConfigError, before any work
        rows, failed = run_models(request, progress=progress, run_meta=self.run_meta)
        if failed:
            error = failure(failed, request)
            error.results = result_frame(rows, request)   # the models that finished (store=None keeps them nowhere else)
            raise error
        return result_frame(rows, request)
