"""Rank tables: how a model's place among all models changes from one test set to another.

Recht, Roelofs, Schmidt & Shankar, *Do ImageNet Classifiers Generalize to ImageNet?* (ICML 2019,
Table 1 and the full tables of Appendices B and C) list, per model, its original rank, its
accuracy on the original and on the new test set (each with a 95% Clopper–Pearson interval),
the gap between them, its new rank and

    Δ rank = original rank − new rank,

so that Δ rank = −2 means the model dropped two places on the new test set. Ranks are over the
full ordering of the models compared, 1 = the most accurate. :func:`rank_table` computes these
columns for any two settings of a testbed and, as one number for the whole ordering (not in
Recht et al.'s table: shiftbench adds it), Kendall's τ-b between the two accuracies
(``scipy.stats.kendalltau``; 1 = the same order).
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from shiftbench.analysis.intervals import accuracy_interval, check_confidence
from shiftbench.errors import ConfigError, DataError
from shiftbench.testbed import Testbed

#: The columns of :func:`rank_table`, in Recht et al.'s order (their Table 1), plus the model type.
COLUMNS = ("x_rank", "model_type", "x_acc", "x_low", "x_high", "y_acc", "y_low", "y_high", "gap", "y_rank",
           "delta_rank")


def _check_testbed(testbed: object, x: object, y: object) -> None:
    if testbed is None:
        raise ConfigError("rank_table() needs a testbed first: rank_table(testbed, x, y)")
    if not isinstance(testbed, Testbed):
        got = repr(testbed) if isinstance(testbed, str) else type(testbed).__name__
        raise ConfigError(f"rank_table() takes the testbed first: rank_table(testbed, x, y); got {got} in its place")
    if not isinstance(x, str) or not isinstance(y, str):
        raise ConfigError(f"rank_table() needs x and y as setting names of the testbed; got x={x!r}, y={y!r}")
    if x == y:
        raise ConfigError(f"x and y are both {x!r}; rank the models on two different settings")
    if testbed.metric != "accuracy":
        raise ConfigError(f"rank_table() ranks top-1 accuracies with Clopper-Pearson intervals; testbed "
                          f"{testbed.name!r} holds {testbed.metric!r} values")


def rank_table(
    testbed: Testbed,
    x: str,
    y: str,
    *,
    models: str | Iterable[str] | None = None,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """Recht et al.'s rank table (2019, Table 1) of the models on ``x`` (original) and ``y`` (new).

    One row per model with both accuracies, indexed by model and sorted by original rank:
    ``x_rank``, ``model_type``, ``x_acc`` with its Clopper–Pearson interval ``x_low``, ``x_high``
    (percent, at ``confidence``; NaN where the testbed has no example count), ``y_acc``, ``y_low``,
    ``y_high``, ``gap = x_acc − y_acc`` (percentage points), ``y_rank`` and ``delta_rank =
    x_rank − y_rank`` (negative: the model fell on ``y``). Rank 1 is the most accurate; tied
    accuracies share the best of their ranks (competition ranking). ``frame.attrs`` holds
    ``kendall_tau`` (τ-b of the two accuracies over the ranked models, ``scipy.stats.kendalltau``;
    shiftbench's addition, not in Recht et al.'s table) and its ``kendall_p``, ``x``, ``y``,
    ``confidence``, ``n_models`` and ``n_skipped`` (selected models lacking an accuracy).

    Parameters
    ----------
    testbed:
        The testbed, first as in every function that reads one.
    x, y:
        Setting names: the original test set (Recht et al.: ImageNet ``val``) and the new one
        (``imagenetv2-matched-frequency-format-val``).
    models:
        Which models to rank, as ``fit_on`` selects them (types, tags, names; ``"all"``); default
        every model of the testbed (Recht et al. rank "the full ordering of all models").
    confidence:
        Level of the Clopper–Pearson intervals (Recht et al.: 0.95).

    Examples
    --------
    >>> import shiftbench
    >>> tb = shiftbench.load_testbed("imagenet-reference")
    >>> ranks = rank_table(tb, "val", "imagenetv2-matched-frequency-format-val")
    >>> len(ranks), round(ranks.attrs["kendall_tau"], 3)
    (335, 0.98)
    """
    from scipy.stats import kendalltau  # deferred: scipy.stats is slow to import

    _check_testbed(testbed, x, y)
    check_confidence(confidence)
    chosen = None if models is None else testbed.resolve(models)
    frame, skipped = testbed.paired(x, y, chosen)
    if len(frame) < 2:
        raise DataError(f"a rank table of {y!r} against {x!r} needs at least 2 models with both accuracies in "
                        f"testbed {testbed.name!r}; got {len(frame)} ({skipped} skipped for empty cells)")
    x_low, x_high = accuracy_interval(frame["x_acc"], frame["x_n"], confidence)
    y_low, y_high = accuracy_interval(frame["y_acc"], frame["y_n"], confidence)
    x_rank = frame["x_acc"].rank(ascending=False, method="min").astype(int)
    y_rank = frame["y_acc"].rank(ascending=False, method="min").astype(int)
    table = pd.DataFrame({
        "x_rank": x_rank, "model_type": frame["model_type"], "x_acc": frame["x_acc"], "x_low": x_low,
        "x_high": x_high, "y_acc": frame["y_acc"], "y_low": y_low, "y_high": y_high,
        "gap": frame["x_acc"] - frame["y_acc"], "y_rank": y_rank, "delta_rank": x_rank - y_rank,
    }, index=frame.index)
    # original rank first; equal ranks in testbed order (a stable sort)
    table = table.iloc[np.argsort(table["x_rank"].to_numpy(), kind="stable")]
    res = kendalltau(table["x_acc"].to_numpy(), table["y_acc"].to_numpy())
    table.attrs.update(kendall_tau=float(res.statistic), kendall_p=float(res.pvalue), x=x, y=y,
                       confidence=confidence, n_models=len(table), n_skipped=int(skipped))
    return table
