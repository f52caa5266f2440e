"""Transfer tasks as data: the VTAB-1k task groups and per-group mean transfer accuracy.

Zhai et al. 2019 ("A Large-scale Study of Representation Learning with the Visual Task
Adaptation Benchmark", VTAB) group their 19 tasks as *natural* (photographs of everyday
objects and scenes), *specialized* (photographs from specialist equipment: medical, remote
sensing) and *structured* (counting, distances, orientations; synthetic or simulated scenes),
and report the mean accuracy over each group and over all tasks. Djolonga et al. 2021 ("On
Robustness and Transferability of Convolutional Neural Networks", CVPR) correlate those means
with robustness. VTAB-1k's protocol and Djolonga et al.'s transfer numbers fine-tune the whole
network; shiftbench's default, the linear probe on frozen features, is its own cheaper protocol.
This module is pure pandas (no torch): a transfer result is one testbed cell, setting
``transfer:<task>`` (linear probe, shiftbench's default) or ``transfer:<task>@finetune`` (the
protocol of VTAB-1k, on a shorter schedule; see :mod:`shiftbench.studies.transfer`), and
:func:`transfer_group_means` averages those cells per group.

The group table ships as ``shiftbench/data/transfer/vtab_groups.csv`` (``task,group,description``);
users add their own tasks with a mapping, a DataFrame or a CSV with ``task`` and ``group`` columns.
"""
from __future__ import annotations

import importlib.resources
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from shiftbench.errors import ConfigError, DataError

__all__ = [
    "GROUPS",
    "PROTOCOLS",
    "TRANSFER_PREFIX",
    "parse_transfer_setting",
    "task_groups",
    "transfer_group_means",
    "transfer_setting",
]

#: VTAB's three task groups (Zhai et al. 2019, §3)
GROUPS = ("natural", "specialized", "structured")
#: ``linear``: logistic regression on frozen penultimate features; ``finetune``: the whole network
PROTOCOLS = ("linear", "finetune")
TRANSFER_PREFIX = "transfer:"
#: the group of a task no table names
OTHER_GROUP = "other"


def _vtab_table() -> pd.DataFrame:
    ref = importlib.resources.files("shiftbench") / "data" / "transfer" / "vtab_groups.csv"
    with importlib.resources.as_file(ref) as path:
        return pd.read_csv(path)


def task_groups(extra: Mapping[str, str] | pd.DataFrame | str | Path | None = None) -> dict[str, str]:
    """``task -> group``: VTAB-1k's 19 tasks, updated by ``extra`` (a mapping, a DataFrame or a
    CSV file with ``task`` and ``group`` columns; a user's group wins over the shipped one).

    >>> task_groups()["eurosat"], task_groups({"my_xrays": "specialized"})["my_xrays"]
    ('specialized', 'specialized')
    """
    groups = dict(zip(*(_vtab_table()[c].astype(str) for c in ("task", "group"))))
    if extra is None:
        return groups
    if isinstance(extra, str | Path):
        path = Path(extra)
        if not path.is_file():
            raise DataError(f"{path}: no such task-group table; give a CSV with columns task,group")
        extra = pd.read_csv(path)
    if isinstance(extra, pd.DataFrame):
        missing = {"task", "group"} - set(extra.columns)
        if missing:
            raise DataError(f"task-group table: no {', '.join(sorted(missing))} column; give columns task,group")
        extra = dict(zip(extra["task"].astype(str), extra["group"].astype(str)))
    return {**groups, **{str(k): str(v) for k, v in dict(extra).items()}}


def transfer_setting(task: str, protocol: str = "linear") -> str:
    """The testbed setting of a transfer result: ``transfer:<task>`` for the linear probe
    (shiftbench's default and cheaper protocol; VTAB-1k fine-tunes), ``transfer:<task>@<protocol>``
    otherwise.

    >>> transfer_setting("eurosat"), transfer_setting("eurosat", "finetune")
    ('transfer:eurosat', 'transfer:eurosat@finetune')
    """
    if protocol not in PROTOCOLS:
        raise ConfigError(f"unknown transfer protocol {protocol!r}; use one of {', '.join(PROTOCOLS)}")
    return TRANSFER_PREFIX + task + ("" if protocol == "linear" else f"@{protocol}")


def parse_transfer_setting(setting: str) -> tuple[str, str] | None:
    """``(task, protocol)`` of a ``transfer:`` setting name, None for any other setting."""
    if not setting.startswith(TRANSFER_PREFIX):
        return None
    task, _, protocol = setting[len(TRANSFER_PREFIX):].partition("@")
    return task, protocol or "linear"


def _wide(table: Any, protocol: str) -> tuple[pd.DataFrame, dict[str, str]]:
    """Models x tasks accuracies from a Testbed, its wide frame, or a long ``model, task, accuracy``
    table; and the groups a long table's ``group`` column declares."""
    acc = getattr(table, "accuracies", table)
    if not isinstance(acc, pd.DataFrame):
        raise DataError(f"transfer_group_means takes a Testbed or a DataFrame, got {type(table).__name__}")
    if {"model", "task", "accuracy"} <= set(acc.columns):
        long = acc if "protocol" not in acc else acc[acc["protocol"] == protocol]
        declared = dict(zip(long["task"].astype(str), long["group"].astype(str))) if "group" in long else {}
        wide = long.pivot_table(index="model", columns="task", values="accuracy", aggfunc="last", dropna=False)
        return wide.reindex(list(dict.fromkeys(long["model"])), axis=0), declared
    if "model" in acc.columns:
        acc = acc.set_index("model")
    cols = {c: parse_transfer_setting(str(c)) for c in acc.columns}
    keep = {c: p[0] for c, p in cols.items() if p is not None and p[1] == protocol}
    return acc[list(keep)].rename(columns=keep).apply(pd.to_numeric, errors="coerce"), {}


def transfer_group_means(table: Any, groups: Mapping[str, str] | pd.DataFrame | str | Path | None = None, *,
                         protocol: str = "linear", complete: bool = True) -> pd.DataFrame:
    """Per model, the mean transfer accuracy over each task group and over all tasks (VTAB's
    summary, Zhai et al. 2019, §4; the quantity Djolonga et al. 2021 correlate with robustness).

    ``table`` is a :class:`~shiftbench.testbed.Testbed` (its ``transfer:<task>`` columns of
    ``protocol``), a wide frame of the same, or the long table :func:`shiftbench.transfer` returns.
    A task's group is, by precedence: ``groups`` (a mapping, frame or CSV, as :func:`task_groups`
    takes), the ``group`` column of a long table, the shipped VTAB table; else ``other`` (a
    Testbed keeps no groups: pass those of your own tasks, e.g.
    :func:`shiftbench.studies.transfer.stored_groups` of the store). With ``complete`` (default) a group's mean is NaN for a model
    that lacks one of the group's tasks, so means over different task sets are never compared.

    Returns one row per model (index ``model``): a column per group present (in the order
    natural, specialized, structured, then others), ``mean`` over all tasks (same rule), and
    ``n_tasks`` (tasks with a result).

    >>> import pandas as pd
    >>> acc = pd.DataFrame({"transfer:svhn": [80.0], "transfer:cifar100": [60.0], "transfer:eurosat": [90.0]},
    ...                    index=pd.Index(["m"], name="model"))
    >>> transfer_group_means(acc)[["natural", "specialized", "mean", "n_tasks"]].to_dict("records")
    [{'natural': 70.0, 'specialized': 90.0, 'mean': 76.66666666666667, 'n_tasks': 3}]
    """
    wide, declared = _wide(table, protocol)
    if wide.shape[1] == 0:
        raise DataError(f"no transfer results ({TRANSFER_PREFIX}<task> settings) for protocol {protocol!r}; "
                        "run `shiftbench transfer` first")
    table_groups = {**task_groups(), **declared, **(task_groups(groups) if groups is not None else {})}
    of = {t: table_groups.get(t, OTHER_GROUP) for t in wide.columns}
    present = list(dict.fromkeys(of.values()))
    order = [g for g in GROUPS if g in present] + sorted(g for g in present if g not in GROUPS)
    out = pd.DataFrame(index=wide.index)
    for g in [*order, "mean"]:
        cols = [t for t in wide.columns if g == "mean" or of[t] == g]
        part = wide[cols]
        mean = part.mean(axis=1, skipna=True)
        out[g] = mean.where(part.notna().all(axis=1), np.nan) if complete else mean
    out["n_tasks"] = wide.notna().sum(axis=1).astype(int)
    out.index.name = "model"
    return out
