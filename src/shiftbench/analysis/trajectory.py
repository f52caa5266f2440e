"""Fine-tuning trajectories: effective robustness of every checkpoint of a training run.

A trajectory is a long-form table with one row per (checkpoint, setting): ``step``, ``epoch``,
``setting``, ``accuracy`` (percent), ``n_examples``, ``model`` (``<name>@step<step>``), as
:class:`shiftbench.studies.trajectory.Trajectory` stores it. Each checkpoint ``c`` is placed
against the testbed's trend ``beta`` fitted on the standard models, exactly like a finished
model (Taori et al. 2020, §2):

    rho(c) = acc_y(c) - beta(acc_x(c))        (percentage points)

Andreassen et al. 2021 ("The Evolution of Out-of-Distribution Robustness Throughout
Fine-Tuning") found that pre-trained models have positive ``rho`` early in fine-tuning that
shrinks towards 0 as fine-tuning converges, while models trained from scratch stay on the line;
:func:`trajectory_summary` reports the start, peak and end of ``rho`` to read that off.

Pure numpy/pandas: no torch (DESIGN principle 5).
"""
from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np
import pandas as pd

from shiftbench.analysis.robustness import effective_robustness
from shiftbench.analysis.trend import DEFAULT_FIT_ON, Band, TrendFit, check_testbed_first, fit_trend
from shiftbench.errors import ConfigError, DataError
from shiftbench.testbed import Testbed

#: Columns every stored trajectory has.
TRAJECTORY_COLUMNS = ["step", "epoch", "setting", "accuracy", "n_examples", "model"]
CHECKPOINT = re.compile(r"^(?P<name>.+)@step(?P<step>\d+)$")


def checkpoint_name(name: str, step: int) -> str:
    """The model name a checkpoint is stored under: ``<name>@step<step>``."""
    return f"{name}@step{int(step)}"


def is_checkpoint(model: str) -> bool:
    """Whether ``model`` names a trajectory checkpoint (``<name>@step<k>``)."""
    return CHECKPOINT.match(str(model)) is not None


def check_trajectory(frame: pd.DataFrame, what: str = "trajectory") -> pd.DataFrame:
    """Validate a trajectory table (the columns of :data:`TRAJECTORY_COLUMNS`, accuracies in
    [0, 100], one row per (step, setting)); returns it sorted by step and setting."""
    missing = [c for c in TRAJECTORY_COLUMNS if c not in frame.columns]
    if missing:
        raise DataError(f"{what}: missing column(s) {', '.join(missing)}; a trajectory has "
                        f"{', '.join(TRAJECTORY_COLUMNS)}")
    acc = pd.to_numeric(frame["accuracy"], errors="coerce")
    bad = acc.notna() & ((acc < 0) | (acc > 100))
    if bad.any():
        row = frame[bad].iloc[0]
        raise DataError(f"{what}: accuracy {row['accuracy']} of step {row['step']} on {row['setting']!r} is outside "
                        "[0, 100]; give percentages")
    dup = frame.duplicated(["step", "setting"])
    if dup.any():
        row = frame[dup].iloc[0]
        raise DataError(f"{what}: step {row['step']} has two rows for setting {row['setting']!r}")
    return frame.sort_values(["step", "setting"], kind="stable").reset_index(drop=True)


def trajectory_accuracies(frame: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """Per checkpoint (rows in step order): ``step, epoch, model, x_acc, y_acc, x_n, y_n``;
    checkpoints lacking either setting are left out."""
    frame = check_trajectory(frame)
    for s in (x, y):
        if s not in set(frame["setting"]):
            have = ", ".join(sorted(set(frame["setting"]))) or "none"
            raise ConfigError(f"the trajectory has no setting {s!r} (it has: {have})")
    wide = frame.pivot(index="step", columns="setting", values="accuracy")
    sizes = frame.pivot(index="step", columns="setting", values="n_examples")
    info = frame.drop_duplicates("step").set_index("step")[["epoch", "model"]]
    out = pd.DataFrame({"epoch": info["epoch"], "model": info["model"], "x_acc": wide[x], "y_acc": wide[y],
                        "x_n": sizes[x], "y_n": sizes[y]})
    out = out[out["x_acc"].notna() & out["y_acc"].notna()].sort_index()
    out.index.name = "step"
    return out.reset_index()


def trajectory_effective_robustness(
    testbed: Testbed | None = None,
    frame: pd.DataFrame | None = None,
    x: str | None = None,
    y: str | None = None,
    scale: str = "logit",
    *,
    fit: TrendFit | None = None,
    fit_on: str | Iterable[str] | None = DEFAULT_FIT_ON,
    band: Band | None = None,
    n_resamples: int = 0,
    confidence: float = 0.95,
    seed: int | None = 0,
) -> pd.DataFrame:
    """Effective robustness ``rho = acc_y - beta(acc_x)`` of every checkpoint of a trajectory.

    The testbed comes first (``None`` with ``fit=``, then the rest by keyword). ``beta`` is
    ``fit``, or the trend of ``y`` on ``x`` fitted on ``testbed``'s ``fit_on`` models
    (default STANDARD; checkpoints of trajectories in the testbed are never fitted on). The
    interval (``er_low``, ``er_high``) is that of :func:`~shiftbench.analysis.effective_robustness`
    (Clopper-Pearson of the checkpoint's shifted accuracy and the trend's bootstrap band) when
    ``band`` is given or ``n_resamples > 0``; otherwise it is the Clopper-Pearson interval alone.

    Returns one row per checkpoint in step order: ``step, epoch, model, x_acc, y_acc,
    predicted_y_acc, effective_robustness, er_low, er_high``; ``attrs["fit"]`` holds the trend.

    >>> import pandas as pd
    >>> from shiftbench.analysis import fit_trend
    >>> fit = fit_trend(x=[20, 50, 80], y=[10, 40, 70], scale="linear")      # y = x - 10
    >>> traj = pd.DataFrame({"step": [0, 0, 5, 5], "epoch": [0, 0, 1, 1], "setting": ["id", "ood"] * 2,
    ...                      "accuracy": [30, 35, 90, 80], "n_examples": 100, "model": ["r@step0"] * 2 + ["r@step5"] * 2})
    >>> trajectory_effective_robustness(frame=traj, x="id", y="ood", fit=fit)["effective_robustness"].round(6).tolist()
    [15.0, 0.0]
    """
    check_testbed_first("trajectory_effective_robustness", testbed, x, y, data="frame, x, y")
    if frame is None:
        raise ConfigError("trajectory_effective_robustness() needs frame=: the trajectory's accuracies")
    acc = trajectory_accuracies(frame, x, y)
    if fit is None:
        if testbed is None:
            raise ConfigError("give testbed=... (the trend is fitted on its standard models) or fit=...")
        standard = [m for m in testbed.models if not is_checkpoint(m)]
        fit = fit_trend(testbed.select(standard), x, y, scale, fit_on=fit_on)
    if len(acc) == 0:
        raise DataError(f"the trajectory has no checkpoint evaluated on both {x!r} and {y!r}")
    points = Testbed.from_frame(pd.DataFrame({
        "model": list(acc["model"]) * 2, "setting": [x] * len(acc) + [y] * len(acc),
        "accuracy": list(acc["x_acc"]) + list(acc["y_acc"]),
        "n_examples": list(acc["x_n"]) + list(acc["y_n"])}), name="trajectory",
        fractions=False)                  # percentages: a checkpoint at chance (0.1%) is a real one
    er = effective_robustness(points, x, y, fit=fit, band=band, n_resamples=n_resamples, confidence=confidence,
                              seed=seed)
    er = er.reindex(acc["model"])
    out = pd.DataFrame({"step": acc["step"].to_numpy(), "epoch": acc["epoch"].to_numpy(),
                        "model": acc["model"].to_numpy(), "x_acc": acc["x_acc"].to_numpy(),
                        "y_acc": acc["y_acc"].to_numpy(), "predicted_y_acc": er["predicted_y_acc"].to_numpy(),
                        "effective_robustness": er["effective_robustness"].to_numpy(),
                        "er_low": er["er_low"].to_numpy(), "er_high": er["er_high"].to_numpy()})
    out.attrs.update(fit=fit, x=x, y=y, scale=fit.scale)
    return out


def trajectory_summary(er: pd.DataFrame) -> dict[str, float]:
    """Start, peak and end of a checkpoint table from :func:`trajectory_effective_robustness`:
    ``start_er``, ``peak_er`` (and its ``peak_step``, ``peak_x_acc``), ``end_er``, ``end_x_acc``,
    ``end_y_acc`` (percent / percentage points)."""
    if len(er) == 0:
        raise DataError("an empty trajectory has no start, peak or end")
    e = er.sort_values("step")
    peak = e.loc[e["effective_robustness"].idxmax()]
    first, last = e.iloc[0], e.iloc[-1]
    return {"n_checkpoints": int(len(e)), "start_step": int(first["step"]),
            "start_er": float(first["effective_robustness"]), "peak_step": int(peak["step"]),
            "peak_epoch": float(peak["epoch"]) if pd.notna(peak["epoch"]) else float("nan"),
            "peak_er": float(peak["effective_robustness"]), "peak_x_acc": float(peak["x_acc"]),
            "end_step": int(last["step"]), "end_er": float(last["effective_robustness"]),
            "end_x_acc": float(last["x_acc"]), "end_y_acc": float(last["y_acc"])}


def mean_er_above(er: pd.DataFrame, min_x_acc: float) -> float:
    """Mean effective robustness of the checkpoints with in-distribution accuracy at least
    ``min_x_acc`` (NaN if none): compares trajectories over the same ID-accuracy range, since
    early checkpoints near chance sit where the trend extrapolates."""
    sel = er[np.asarray(er["x_acc"], float) >= min_x_acc]
    return float(sel["effective_robustness"].mean()) if len(sel) else float("nan")
