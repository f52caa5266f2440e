"""Do robust models transfer better? Rank correlation of robustness metrics with transfer accuracy
per task group (Djolonga et al. 2021, "On Robustness and Transferability of Convolutional Neural
Networks", CVPR, §5 and its metrics x task-groups figure).

For a testbed that holds, per model, the robustness settings (an ID setting ``x`` and shifted
settings) and transfer results (``transfer:<task>`` cells, :mod:`shiftbench.studies.transfer`):

* **metrics** (one number per model): ID accuracy; accuracy on every other non-transfer setting
  (``acc:<setting>``); effective robustness on each of them (``er:<setting>``: accuracy minus the
  logit-scale trend fitted on the standard models, :func:`~shiftbench.analysis.robustness.effective_robustness`);
  the mean accuracy over every synthetic-corruption setting ``<base>+<corruption>.<severity>``
  (``acc:corruptions``, the quantity mCE ranks models by) and its effective robustness; plus any
  per-model columns the user passes (``extra``: ECE, pm-k, ...);
* **targets**: the mean transfer accuracy per task group (natural, specialized, structured, and
  the mean over all tasks; :func:`~shiftbench.analysis.transfer.transfer_group_means`). A task's
  group is, by precedence: ``groups`` (the user's table), the group its transfer runs declared
  in the results store the testbed was read from (``group`` in each result's ``done/<key>.json``,
  :func:`~shiftbench.studies.transfer.stored_groups`; :func:`resolve_task_groups`), VTAB-1k's
  table, else ``other``; the result says which (``groups_from``) and notes the tasks left in
  ``other``;
* per (metric, group): **Spearman's rho** over the models that have both, with a 95% percentile
  **bootstrap interval over models** (resampling models with replacement, ``n_resamples`` times,
  ranks recomputed per resample), and the **partial** Spearman correlation with ID accuracy
  partialled out (the correlation of the rank residuals, ``(r_mt - r_mi r_ti) / sqrt((1 - r_mi²)(1 -
  r_ti²))`` on ranks; same bootstrap), which says whether the metric tells more about transfer
  than ImageNet (ID) accuracy already does. Cells with fewer than ``min_models`` models are NaN.

The paper's finding: robustness metrics track transfer on the *natural* group but say little about
the distant groups once ID accuracy is accounted for. Pure numpy/scipy/pandas.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from scipy import stats

from shiftbench.analysis.transfer import (
    GROUPS,
    OTHER_GROUP,
    parse_transfer_setting,
    task_groups,
    transfer_group_means,
)
from shiftbench.errors import ConfigError, DataError, ShiftbenchError, closest

#: the suffix of a synthetic shift in a setting name: ``<base>+<corruption>.<severity>``
CORRUPTION_MARK = "+"
#: where a task's group came from: the ``groups`` the user gave, the ``group`` its transfer runs
#: declared in the store, VTAB-1k's shipped table, or nowhere (the task is in ``other``)
GROUP_SOURCES = ("groups", "store", "vtab", "none")
COLUMNS = ["metric", "kind", "setting", "group", "n_models", "rho", "low", "high",
           "partial_rho", "partial_low", "partial_high"]


@dataclass(frozen=True)
class TransferCorrelation:
    """Spearman correlations of robustness metrics with group-mean transfer accuracy.

    ``rows``: one row per (metric, group) with :data:`COLUMNS`; ``metrics``: the per-model metric
    table; ``targets``: the per-model group means; ``x``: the ID setting partialled out."""

    rows: pd.DataFrame
    metrics: pd.DataFrame
    targets: pd.DataFrame
    x: str
    n_resamples: int
    seed: int
    notes: list[str] = field(default_factory=list)
    #: ``task -> group`` of every task with results for the protocol
    task_groups: dict[str, str] = field(default_factory=dict)
    #: ``task -> where its group came from``: one of :data:`GROUP_SOURCES`
    groups_from: dict[str, str] = field(default_factory=dict)
    #: one sentence naming those sources (the user's table, the store) and each group's tasks
    groups_origin: str = ""

    def matrix(self, value: str = "rho") -> pd.DataFrame:
        """Metrics x groups of ``value`` (``rho``, ``partial_rho``, ``n_models``, ...), metrics in row order."""
        order = list(dict.fromkeys(self.rows["metric"]))
        groups = list(dict.fromkeys(self.rows["group"]))
        return self.rows.pivot(index="metric", columns="group", values=value).reindex(index=order, columns=groups)


def _ranks(a: np.ndarray) -> np.ndarray:
    return stats.rankdata(a, axis=-1)


def _pearson_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pearson correlation of each row of ``a`` with the same row of ``b`` (NaN for a constant row)."""
    a = a - a.mean(axis=-1, keepdims=True)
    b = b - b.mean(axis=-1, keepdims=True)
    den = np.sqrt((a * a).sum(axis=-1) * (b * b).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (a * b).sum(axis=-1) / np.where(den > 0, den, 1), np.nan)


def _partial(r_mt: np.ndarray, r_mi: np.ndarray, r_ti: np.ndarray) -> np.ndarray:
    den = np.sqrt((1 - r_mi ** 2) * (1 - r_ti ** 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 1e-12, (r_mt - r_mi * r_ti) / np.where(den > 1e-12, den, 1), np.nan)


def spearman_with_interval(metric: np.ndarray, target: np.ndarray, control: np.ndarray | None = None, *,
                           n_resamples: int = 1000, seed: int = 0, confidence: float = 0.95) -> dict[str, float]:
    """Spearman's rho of ``metric`` and ``target`` (1-D, same models, no NaN) with a percentile
    bootstrap interval over models; with ``control``, also the partial rho given ``control``.

    >>> r = spearman_with_interval(np.arange(10.0), np.arange(10.0) ** 2, n_resamples=0)
    >>> round(r["rho"], 6)
    1.0
    """
    m, t = np.asarray(metric, float), np.asarray(target, float)
    out = {"rho": float(stats.spearmanr(m, t).statistic), "low": np.nan, "high": np.nan,
           "partial_rho": np.nan, "partial_low": np.nan, "partial_high": np.nan}
    c = None if control is None else np.asarray(control, float)
    if c is not None:
        rm, rt, rc = _ranks(m), _ranks(t), _ranks(c)
        out["partial_rho"] = float(_partial(_pearson_rows(rm, rt), _pearson_rows(rm, rc), _pearson_rows(rt, rc)))
    if n_resamples > 0:
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, len(m), size=(n_resamples, len(m)))
        rm, rt = _ranks(m[idx]), _ranks(t[idx])
        boot = _pearson_rows(rm, rt)
        alpha = (1 - confidence) / 2
        out["low"], out["high"] = (float(v) for v in np.nanquantile(boot, [alpha, 1 - alpha]))
        if c is not None:
            rc = _ranks(c[idx])
            pboot = _partial(boot, _pearson_rows(rm, rc), _pearson_rows(rt, rc))
            out["partial_low"], out["partial_high"] = (float(v) for v in np.nanquantile(pboot, [alpha, 1 - alpha]))
    return out


class _Resampled:
    """Bootstrap resamples of one (target, control) pair of model columns, ranked once."""

    def __init__(self, target: np.ndarray, control: np.ndarray, n_resamples: int, seed: int) -> None:
        self.t, self.c, self.n_resamples = target, control, n_resamples
        self.idx = np.random.default_rng(seed).integers(0, len(target), size=(n_resamples, len(target))) if n_resamples else None
        if self.idx is not None:
            self.rt, self.rc = _ranks(target[self.idx]), _ranks(control[self.idx])
            self.r_tc = _pearson_rows(self.rt, self.rc)

    def correlate(self, metric: np.ndarray, *, partial: bool, confidence: float) -> dict[str, float]:
        out = spearman_with_interval(metric, self.t, self.c if partial else None, n_resamples=0)
        if self.idx is not None:
            rm = _ranks(metric[self.idx])
            boot = _pearson_rows(rm, self.rt)
            alpha = (1 - confidence) / 2
            out["low"], out["high"] = (float(v) for v in np.nanquantile(boot, [alpha, 1 - alpha]))
            if partial:
                pboot = _partial(boot, _pearson_rows(rm, self.rc), self.r_tc)
                out["partial_low"], out["partial_high"] = (float(v) for v in np.nanquantile(pboot, [alpha, 1 - alpha]))
        return out


class TaskGroups(NamedTuple):
    """The group of every transfer task of a testbed and where it came from (:func:`resolve_task_groups`)."""

    groups: dict[str, str]          # task -> group
    sources: dict[str, str]         # task -> one of GROUP_SOURCES
    origin: str                     # one sentence: the sources and each group's tasks
    notes: list[str]                # tasks left in "other", user-named tasks without results


def _testbed_stores(testbed: Any) -> list[str]:
    """The results stores a testbed was read from (``Testbed.from_store``, ``--testbed DIR``,
    ``--store DIR``; merged testbeds join their sources with ``+``)."""
    source = str(getattr(testbed, "source", "") or "")
    parts = [source] if Path(source).is_dir() else source.split("+")
    return [p for p in dict.fromkeys(parts) if p and (Path(p) / "done").is_dir()]


def _user_groups(groups: Mapping[str, str] | pd.DataFrame | str | Path) -> dict[str, str]:
    """Only the user's ``task -> group`` entries (validated as :func:`task_groups` validates them)."""
    task_groups(groups)                                         # a missing file or column: one line
    if isinstance(groups, Mapping):
        return {str(k): str(v) for k, v in groups.items()}
    frame = pd.read_csv(groups) if isinstance(groups, str | Path) else groups
    return dict(zip(frame["task"].astype(str), frame["group"].astype(str)))


def resolve_task_groups(testbed: Any, groups: Mapping[str, str] | pd.DataFrame | str | Path | None = None, *,
                        protocol: str = "linear") -> TaskGroups:
    """The group of every task with ``protocol`` transfer results in ``testbed``, by precedence:
    ``groups`` (a mapping, frame or CSV with ``task,group``), the ``group`` the task's transfer
    runs declared in the results store(s) the testbed was read from
    (:func:`shiftbench.studies.transfer.stored_groups`), VTAB-1k's table (Zhai et al. 2019), else
    ``other``. The notes name the tasks left in ``other`` and ``groups`` entries without results."""
    parsed = {str(c): parse_transfer_setting(str(c)) for c in testbed.accuracies.columns}
    tasks = [p[0] for c, p in parsed.items()
             if p is not None and p[1] == protocol and testbed.accuracies[c].notna().any()]
    user = _user_groups(groups) if groups is not None else {}
    label = str(groups) if isinstance(groups, str | Path) else "the groups given"
    stores, declared = _testbed_stores(testbed), {}
    if stores:
        # the store layer's Store.transfer_groups (what studies.transfer.stored_groups returns), not the studies above
        from shiftbench.store import Store  # deferred: pyarrow, only for a testbed read from a store

        for store in stores:
            try:
                declared.update({t: g for t, g in Store.existing(store).transfer_groups().items()
                                 if g and g != "nan"})
            except ShiftbenchError:                             # unreadable: the testbed was read, so rare
                continue
    vtab = task_groups()
    out, sources = {}, {}
    for task in tasks:
        for kind, table in (("groups", user), ("store", declared), ("vtab", vtab)):
            if task in table:
                out[task], sources[task] = table[task], kind
                break
        else:
            out[task], sources[task] = OTHER_GROUP, "none"
    where = {"groups": f"from {label}", "vtab": "from VTAB-1k's task table", "none": "unknown",
             "store": f"declared by the transfer runs in {', '.join(stores)}"}
    present = set(out.values())
    order = [g for g in GROUPS if g in present] + sorted(present - set(GROUPS))   # transfer_group_means' order
    members = "; ".join(f"{g}: {', '.join(t for t in tasks if out[t] == g)}" for g in order)
    kinds = list(dict.fromkeys(sources.values()))
    if len(kinds) == 1:
        origin = f"task groups {where[kinds[0]]} ({members})"
    else:
        origin = (f"task groups ({members}): "
                  + "; ".join(f"{where[k]} for {', '.join(t for t in tasks if sources[t] == k)}" for k in kinds))
    notes = []
    unknown = [t for t in user if t not in tasks]
    if unknown:
        hints = [f"{t!r} (did you mean {near[0]!r}?)" if (near := closest(t, tasks)) else repr(t) for t in unknown]
        notes.append(f"{label} names {len(unknown)} task(s) with no {protocol} transfer results in "
                     f"{testbed.name!r}, left unused: {', '.join(hints)}")
    other = [t for t in tasks if sources[t] == "none"]
    if other:
        why = ("their transfer results in the store declare no group" if stores
               else f"testbed {testbed.name!r} keeps no groups: read it from its store, or give them")
        notes.append(f"{len(other)} task(s) placed in {OTHER_GROUP!r}: {', '.join(other)} ({why}, and VTAB-1k's "
                     "table does not name them); give their groups as a CSV task,group (--groups FILE)")
    return TaskGroups(out, sources, origin, notes)


def robustness_metrics(testbed: Any, x: str, *, extra: pd.DataFrame | Mapping[str, Mapping[str, float]] | None = None,
                       effective: bool = True) -> pd.DataFrame:
    """Per model (rows) the robustness metrics of the module docstring (columns, in this order:
    ``acc:<x>``, then per other setting ``acc:`` and ``er:``, then ``acc:corruptions`` /
    ``er:corruptions`` where corruption settings exist, then ``extra``'s columns)."""
    acc = testbed.accuracies
    if x not in acc.columns:
        raise ConfigError(f"ID setting {x!r} is not in testbed {testbed.name!r}; pass --x with one of its settings")
    shifted = [s for s in acc.columns if s != x and parse_transfer_setting(s) is None]
    cols: dict[str, pd.Series] = {f"acc:{x}": acc[x]}
    corrupted = [s for s in shifted if CORRUPTION_MARK in s and s.split(CORRUPTION_MARK, 1)[0] == x]
    series: dict[str, pd.Series] = {s: acc[s] for s in shifted}
    if len(corrupted) >= 2:
        series["corruptions"] = acc[corrupted].mean(axis=1, skipna=False)
    for name, values in series.items():
        cols[f"acc:{name}"] = values
        if effective:
            try:
                cols[f"er:{name}"] = _er(testbed, x, name, values)
            except (ConfigError, DataError):  # too few standard models with both cells: no trend, no ER
                continue
    if extra is not None:
        frame = extra if isinstance(extra, pd.DataFrame) else pd.DataFrame(extra)
        for col in frame.columns:
            cols[str(col)] = pd.to_numeric(frame[col], errors="coerce").reindex(acc.index)
    return pd.DataFrame(cols, index=acc.index)   # built at once: one column at a time fragments the frame


def _er(testbed: Any, x: str, name: str, values: pd.Series) -> pd.Series:
    """Effective robustness of every model on ``values`` against the trend on the standard models."""
    from shiftbench.analysis.robustness import effective_robustness  # deferred: loads scipy
    from shiftbench.testbed import Testbed  # deferred: loads pandas

    if name in testbed.accuracies.columns:
        tb, y = testbed, name
    else:  # a derived column (the corruption average): a two-column testbed with the same metadata
        tb = Testbed(pd.DataFrame({x: testbed.accuracies[x], "__y": values}), metadata=testbed.metadata,
                     name=testbed.name)
        y = "__y"
    er = effective_robustness(tb, x, y, n_resamples=0)
    return er["effective_robustness"].reindex(testbed.accuracies.index)


def robustness_transfer_correlation(
    testbed: Any,
    x: str,
    *,
    groups: Mapping[str, str] | pd.DataFrame | str | Path | None = None,
    protocol: str = "linear",
    extra: pd.DataFrame | None = None,
    metrics: Sequence[str] | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
    min_models: int = 5,
    confidence: float = 0.95,
) -> TransferCorrelation:
    """Spearman correlation (and partial correlation given ID accuracy on ``x``) of every robustness
    metric with the mean transfer accuracy of every task group, with bootstrap intervals over
    models (module docstring; Djolonga et al. 2021). ``metrics`` keeps only those metric columns.

    ``groups`` overrides the task groups; without it a testbed read from a results store uses
    the groups its transfer runs declared (:func:`resolve_task_groups`); ``groups_from`` and
    ``groups_origin`` of the result say where each task's group came from."""
    table = robustness_metrics(testbed, x, extra=extra)
    if metrics is not None:
        unknown = [m for m in metrics if m not in table.columns]
        if unknown:
            raise ConfigError(f"unknown metric {unknown[0]!r}; metrics: {', '.join(table.columns[:12])} ...")
        table = table[[f"acc:{x}", *[m for m in metrics if m != f"acc:{x}"]]]
    resolved = resolve_task_groups(testbed, groups, protocol=protocol)
    targets = transfer_group_means(testbed, resolved.groups, protocol=protocol).drop(columns="n_tasks")
    targets = targets.reindex(table.index)
    if targets.notna().sum().max() < min_models:
        raise DataError(f"testbed {testbed.name!r}: fewer than {min_models} models have transfer results for every "
                        f"task of a group; run `shiftbench transfer` on more models")
    rows, notes = [], list(resolved.notes)
    control = table[f"acc:{x}"]
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for group in targets.columns:
        base = pd.DataFrame({"t": targets[group], "c": control}).dropna()
        # one set of resamples per group (common random numbers across metrics); the target's and
        # ID accuracy's resampled ranks are computed once and shared by every metric with the same models
        shared = _Resampled(base["t"].to_numpy(), base["c"].to_numpy(), n_resamples, seed) if len(base) else None
        for metric in table.columns:
            both = base.assign(m=table[metric].reindex(base.index)).dropna()
            row: dict[str, Any] = {"n_models": len(both)}
            if len(both) >= min_models and both["m"].nunique() > 1 and both["t"].nunique() > 1:
                is_control = metric == f"acc:{x}"
                if len(both) == len(base) and shared is not None:
                    row.update(shared.correlate(both["m"].to_numpy(), partial=not is_control, confidence=confidence))
                else:
                    row.update(spearman_with_interval(both["m"].to_numpy(), both["t"].to_numpy(),
                                                      None if is_control else both["c"].to_numpy(),
                                                      n_resamples=n_resamples, seed=seed, confidence=confidence))
            cells[(metric, group)] = row
    for metric in table.columns:
        kind, _, setting = metric.partition(":")
        for group in targets.columns:
            rows.append({"metric": metric, "kind": kind if setting else "extra", "setting": setting or metric,
                         "group": group, **cells[(metric, group)]})
    frame = pd.DataFrame(rows).reindex(columns=COLUMNS)
    if (frame["n_models"] < min_models).any():
        notes.append(f"cells with fewer than {min_models} models are left empty")
    return TransferCorrelation(frame, table, targets, x, n_resamples, seed, notes, resolved.groups, resolved.sources,
                               resolved.origin)
