"""Fan (model x dataset) evaluation tasks out over a Ray cluster.

Each task is one call of :func:`shiftbench.engine.runner.evaluate` for one model and the
settings of one dataset, run on a Ray worker and writing to the same store (a shared disk:
local, NFS, or a mounted bucket). A worker that dies has its task retried by Ray
(``max_retries``); because every finished chunk is an atomically written part with a
deterministic name, the retry resumes where the dead worker stopped and the store never holds
duplicate rows.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import pandas as pd

from shiftbench.errors import ConfigError
from shiftbench.settings import get_setting


def _task(model: str, settings: list[str], kwargs: dict[str, Any]) -> pd.DataFrame:
    from shiftbench.engine.runner import evaluate

    return evaluate(model, settings, progress=False, **kwargs)


def evaluate_ray(
    models: Sequence[str],
    settings: Sequence[str],
    *,
    address: str | None = None,
    max_retries: int = 3,
    num_cpus_per_task: float = 1.0,
    **kwargs: Any,
) -> pd.DataFrame:
    """Evaluate every model on every setting as Ray tasks (one per model x dataset).

    ``address`` is a Ray cluster address (``ray://host:10001`` or ``auto``); without it a local
    Ray instance is started. Other keyword arguments are those of :func:`evaluate`; ``store``
    must be a path every worker can reach.
    """
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - ray is installed by the Makefile
        raise ConfigError("--executor ray needs Ray: pip install 'shiftbench[ray]'") from exc
    if not models:
        raise ConfigError("no model given; pass --model SPEC")
    groups: dict[Any, list[str]] = defaultdict(list)
    for name in settings:
        groups[get_setting(name).dataset_key].append(name)
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, ignore_reinit_error=True, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    try:
        remote = ray.remote(num_cpus=num_cpus_per_task, max_retries=max_retries)(_task)
        kwargs = {k: (str(v) if k == "store" else v) for k, v in kwargs.items()}
        refs = [remote.remote(m, group, kwargs) for m in models for group in groups.values()]
        frames = ray.get(refs)
    finally:
        if started_here:
            ray.shutdown()
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
