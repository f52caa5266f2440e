"""Executors: who runs an :class:`~shiftbench.engine.request.EvalRequest`.

Every executor owns the loop over (model × dataset group) and returns one table of results,
one row per (model, setting), in the request's order. :class:`LocalExecutor` runs the passes
in this process; :class:`~shiftbench.engine.ray_executor.RayExecutor` sends each
(model × dataset group) slice of the request to a Ray task, which runs it with a
:class:`LocalExecutor` on its node and writes to the same store.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import pandas as pd

from shiftbench.engine.request import EvalRequest
from shiftbench.engine.runner import ProgressFn, result_frame, run_model


@runtime_checkable
class Executor(Protocol):
    """Runs a request and returns its results (``model, setting, accuracy, top5, n_examples,
    n_skipped`` first; see :func:`shiftbench.evaluate`)."""

    def run(self, request: EvalRequest, progress: bool | ProgressFn = True) -> pd.DataFrame: ...


class LocalExecutor:
    """Runs a request in this process: for each model (loaded once), one forward pass per dataset
    that serves all of that dataset's settings. ``run_meta`` is added to each stored run record
    (a Ray task adds its node and task ids)."""

    def __init__(self, run_meta: Mapping[str, Any] | None = None) -> None:
        self.run_meta = dict(run_meta or {})

    def run(self, request: EvalRequest, progress: bool | ProgressFn = True) -> pd.DataFrame:
        groups = request.groups()
        rows = [row for model in request.models
                for row in run_model(model, groups, request, progress=progress, run_meta=self.run_meta)]
        return result_frame(rows, request)
