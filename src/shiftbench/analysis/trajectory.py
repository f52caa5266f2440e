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
:func:`trajectory_endpoints` reports the start, peak and end of ``rho`` of one run to read that
off, and :func:`trajectory_summary` gives the paper's statistics over several runs (seeds) of
one recipe: the binned mean and s.d. of ``rho`` over ID accuracy, its maximum over bins, ``rho``
as a percentage of the gap to ``y = x``, the ``y = x`` reference curve and the mixed-classifier
baseline (:func:`mixed_classifier_curve`).

Pure numpy/pandas: no torch (DESIGN principle 5).
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

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


def trajectory_endpoints(er: pd.DataFrame) -> dict[str, float]:
    """Start, peak and end of one run's checkpoint table from :func:`trajectory_effective_robustness`:
    ``start_er``, ``peak_er`` (and its ``peak_step``, ``peak_x_acc``), ``end_er``, ``end_x_acc``,
    ``end_y_acc`` (percent / percentage points). Formerly named ``trajectory_summary``, which now
    summarises several runs of one recipe."""
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


# ----------------------------------------------------------------------------- several runs of one recipe
# Andreassen et al. 2022 ("The Evolution of Out-of-Distribution Robustness Throughout
# Fine-Tuning", TMLR): several fine-tuning runs are averaged by binning their checkpoints on
# in-distribution accuracy; effective robustness is also read as a share of the gap between the
# trend and y = x (their Appendix D), beside the y = x curve and a mixed-classifier baseline.

#: Bins over in-distribution accuracy when ``bins`` is not given (equal width over the pooled
#: checkpoints' range; see :func:`bin_by_id_accuracy`).
DEFAULT_BINS = 10
#: ``<recipe>-seed<k>`` (also ``_seed<k>``, ``@seed<k>``): a run's recipe is its name without it.
SEED_SUFFIX = re.compile(r"[-_@]seed\d+$")
#: The tag a stored trajectory carries to name its recipe explicitly (``recipe:<name>``).
RECIPE_TAG = "recipe:"

Runs = Mapping[str, Any]


def run_recipe(name: str, run: Any) -> tuple[str, bool]:
    """The recipe of one run and whether it was stated (not read off the name): a ``recipe``
    column holding one value, ``frame.attrs["recipe"]``, a ``recipe:<name>`` tag (a stored
    :class:`~shiftbench.studies.trajectory.Trajectory`), else ``name`` without a ``-seed<k>``
    suffix (``scratch-seed2`` -> ``scratch``)."""
    frame = getattr(run, "frame", run)
    if isinstance(frame, pd.DataFrame) and "recipe" in frame.columns:
        values = frame["recipe"].dropna().unique()
        if len(values) > 1:
            raise DataError(f"run {name!r} has rows of {len(values)} recipes ({', '.join(map(str, values[:3]))}); "
                            "a run is one recipe")
        if len(values):
            return str(values[0]), True
    if isinstance(frame, pd.DataFrame) and frame.attrs.get("recipe"):
        return str(frame.attrs["recipe"]), True
    for tag in getattr(run, "tags", ()) or ():
        if str(tag).startswith(RECIPE_TAG):
            return str(tag)[len(RECIPE_TAG):], True
    return SEED_SUFFIX.sub("", str(name)), False


def _check_one_recipe(runs: Runs, recipe: str | None) -> str:
    """The one recipe of ``runs`` (ConfigError naming two runs of different recipes)."""
    found = {name: run_recipe(name, run) for name, run in runs.items()}
    if recipe is not None:
        stated = {n: r for n, (r, said) in found.items() if said and r != recipe}
        if stated:
            n, r = next(iter(stated.items()))
            raise ConfigError(f"run {n!r} is of recipe {r!r}, not {recipe!r}: summarise each recipe on its own")
        return recipe
    recipes = dict.fromkeys(r for r, _ in found.values())
    if len(recipes) > 1:
        first = {r: n for n, (r, _) in reversed(list(found.items()))}
        a, b = list(recipes)[:2]
        raise ConfigError(f"runs of different recipes passed as one: {first[a]!r} is {a!r}, {first[b]!r} is {b!r}; "
                          "summarise each recipe on its own (name seeds <recipe>-seed<k>, or pass recipe=... "
                          "if they are one recipe)")
    return next(iter(recipes))


def no_gap_effective_robustness(fit: TrendFit, x_acc: ArrayLike) -> np.ndarray:
    """Effective robustness of a model on ``y = x`` (no accuracy drop) at ``x_acc`` (percent):
    ``x - beta(x)`` (pp), the most a model at that ID accuracy can have without being *more*
    accurate under the shift (Andreassen et al. 2022, Appendix D). Under a logit trend it is not
    constant: it peaks in the middle of the accuracy range and falls to 0 at 0% and 100%."""
    xs = np.asarray(x_acc, dtype=float)
    return xs - fit.predict(xs)


def percent_of_gap(er: ArrayLike, gap: ArrayLike) -> np.ndarray:
    """Effective robustness as a percentage of the gap to ``y = x`` at the same ID accuracy:
    ``100 * rho / (x - beta(x))`` (Andreassen et al. 2022, Appendix D). NaN where the trend is
    on or above ``y = x`` (no gap to close)."""
    er, gap = np.asarray(er, dtype=float), np.asarray(gap, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(gap > 0, 100.0 * er / np.where(gap > 0, gap, 1.0), np.nan)


def bin_edges(x_acc: ArrayLike, bins: int | Sequence[float] = DEFAULT_BINS) -> np.ndarray:
    """The edges of ``bins`` equal-width bins over the range of ``x_acc`` (percent), or ``bins``
    itself when it is a sequence of increasing edges (percent)."""
    xs = np.asarray(x_acc, dtype=float)
    if isinstance(bins, (int, np.integer)) and not isinstance(bins, bool):
        if bins < 1:
            raise ConfigError(f"bins={bins}: give at least 1 bin (or a list of bin edges in percent)")
        lo, hi = (float(np.nanmin(xs)), float(np.nanmax(xs))) if len(xs) else (0.0, 100.0)
        if hi <= lo:
            lo, hi = lo - 0.5, hi + 0.5                  # every checkpoint at one accuracy: one bin around it
        return np.linspace(lo, hi, int(bins) + 1)
    try:
        edges = np.asarray(list(bins), dtype=float)
    except (TypeError, ValueError):
        raise ConfigError(f"bins={bins!r}: give a number of bins or a list of bin edges in percent") from None
    if len(edges) < 2 or not np.all(np.isfinite(edges)) or np.any(np.diff(edges) <= 0):
        raise ConfigError(f"bins={list(edges)!r}: bin edges must be at least two increasing finite numbers (percent)")
    return edges


def bin_by_id_accuracy(checkpoints: pd.DataFrame, bins: int | Sequence[float] = DEFAULT_BINS,
                       values: Sequence[str] = ("effective_robustness", "percent_of_gap")) -> pd.DataFrame:
    """Bin checkpoints (pooled over runs) on in-distribution accuracy ``x_acc`` and give each
    bin's mean and s.d. of ``values`` (Andreassen et al. 2022 average their runs this way).

    Bins are half-open ``[low, high)``, the last one closed; checkpoints outside the edges are
    left out. The s.d. is the sample s.d. (``ddof=1``; NaN with one checkpoint). Returns one row
    per bin, empty bins included: ``bin, x_low, x_high, x_mid, n_checkpoints, n_runs, x_acc_mean``
    and ``<value>_mean``, ``<value>_sd`` for each value (the ``effective_robustness`` pair is
    named ``er_mean``, ``er_sd``).
    """
    edges = bin_edges(checkpoints["x_acc"], bins)
    xs = checkpoints["x_acc"].to_numpy(dtype=float)
    idx = np.searchsorted(edges, xs, side="right") - 1
    idx[xs == edges[-1]] = len(edges) - 2
    inside = (idx >= 0) & (idx < len(edges) - 1)
    c = checkpoints.assign(bin=np.where(inside, idx, -1))[inside]
    rows = []
    for b in range(len(edges) - 1):
        sel = c[c["bin"] == b]
        row = {"bin": b, "x_low": edges[b], "x_high": edges[b + 1], "x_mid": (edges[b] + edges[b + 1]) / 2,
               "n_checkpoints": int(len(sel)), "n_runs": int(sel["run"].nunique()) if "run" in sel else int(bool(len(sel))),
               "x_acc_mean": float(sel["x_acc"].mean()) if len(sel) else np.nan}
        for v in values:
            name = "er" if v == "effective_robustness" else v
            vals = sel[v].to_numpy(dtype=float) if v in sel else np.empty(0)
            vals = vals[np.isfinite(vals)]
            row[f"{name}_mean"] = float(vals.mean()) if len(vals) else np.nan
            row[f"{name}_sd"] = float(vals.std(ddof=1)) if len(vals) > 1 else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def mixed_classifier_draw(correct_low: ArrayLike, correct_high: ArrayLike, alpha: float,
                          rng: np.random.Generator) -> np.ndarray:
    """One draw of the mixed classifier on one test set: each example is predicted by the high
    model with probability ``alpha``, else by the low one; returns the per-example correctness.
    Its accuracy is ``alpha * mean(correct_high) + (1 - alpha) * mean(correct_low)`` in
    expectation, whatever the two models' joint errors (Andreassen et al. 2022)."""
    lo, hi = np.asarray(correct_low, dtype=bool), np.asarray(correct_high, dtype=bool)
    use_high = rng.random(len(lo)) < alpha
    return np.where(use_high, hi, lo)


def _correctness(acc: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` examples, ``round(acc * n / 100)`` of them correct, in a seeded random order."""
    out = np.zeros(n, dtype=bool)
    out[: int(round(acc * n / 100))] = True
    return rng.permutation(out)


def mixed_classifier_curve(
    testbed: Testbed | None = None,
    low_model: str | None = None,
    high_model: str | None = None,
    x: str | None = None,
    y: str | None = None,
    scale: str = "logit",
    *,
    alphas: ArrayLike | None = None,
    n_examples: int | None = None,
    seed: int | None = 0,
    fit: TrendFit | None = None,
    fit_on: str | Iterable[str] | None = DEFAULT_FIT_ON,
) -> pd.DataFrame:
    """The mixed-classifier baseline between two testbed models (Andreassen et al. 2022).

    Predicting each example with ``high_model`` with probability ``alpha`` and ``low_model``
    otherwise gives, in expectation, the accuracies

        acc_x(alpha) = alpha acc_x(high) + (1 - alpha) acc_x(low)      (and the same for y),

    a straight segment in linear accuracy, which under a logit trend ``beta`` bows away from the
    line: effective robustness ``rho(alpha) = acc_y(alpha) - beta(acc_x(alpha))`` that comes
    from convexity alone, a floor any claimed effective robustness between the two models should
    clear.

    The testbed comes first. ``beta`` is ``fit`` or the trend of ``y`` on ``x`` fitted on the
    testbed's ``fit_on`` models (checkpoints left out). ``alphas`` default to 0, 0.1, ..., 1.
    A testbed holds accuracies, not predictions, so the finite draw (``x_acc_drawn`` ...) gives
    each model ``round(acc n / 100)`` correct examples of ``n`` (``n_examples``, else the
    testbed's example count of each setting; no draw when neither is known) in a seeded random
    order and draws the mixture from them (:func:`mixed_classifier_draw`, ``seed``): its
    expectation is exactly the mixture of those rounded accuracies, and how the two models'
    errors overlap, which the testbed does not record, changes only its variance. ``x_se``,
    ``y_se`` are the binomial standard errors ``sqrt(p (1 - p) / n)`` (pp) of a draw.

    Returns one row per alpha: ``alpha, x_acc, y_acc, predicted_y_acc, effective_robustness,
    no_gap_er, percent_of_gap`` and, with a draw, ``x_n, y_n, x_acc_drawn, y_acc_drawn,
    er_drawn, x_se, y_se``; ``attrs`` holds ``fit``, ``low_model``, ``high_model``.

    >>> import pandas as pd, shiftbench
    >>> tb = shiftbench.Testbed.from_frame(pd.DataFrame({"model": ["a", "a", "b", "b", "c", "c"],
    ...     "setting": ["id", "ood"] * 3, "accuracy": [20, 10, 50, 30, 80, 60], "n_examples": 1000,
    ...     "model_type": "STANDARD"}), fractions=False)
    >>> curve = mixed_classifier_curve(tb, "a", "c", "id", "ood", alphas=[0, 0.5, 1])
    >>> curve[["alpha", "x_acc", "y_acc"]].to_numpy().tolist()
    [[0.0, 20.0, 10.0], [0.5, 50.0, 35.0], [1.0, 80.0, 60.0]]
    """
    check_testbed_first("mixed_classifier_curve", testbed, x, y, data="low_model, high_model, x, y")
    if testbed is None:
        raise ConfigError("mixed_classifier_curve() reads the two models' accuracies from a testbed: "
                          "mixed_classifier_curve(testbed, low_model, high_model, x, y)")
    if low_model is None or high_model is None:
        raise ConfigError("mixed_classifier_curve() needs two models: low_model and high_model")
    low, high = testbed.check_model(str(low_model)), testbed.check_model(str(high_model))
    if low == high:
        raise ConfigError(f"the mixed classifier needs two different models; got {low!r} twice")
    x, y = testbed.check_setting(x), testbed.check_setting(y)
    a = np.linspace(0, 1, 11) if alphas is None else np.asarray(alphas, dtype=float).ravel()
    if len(a) == 0 or not np.all(np.isfinite(a)) or np.any((a < 0) | (a > 1)):
        raise ConfigError(f"alphas must be probabilities in [0, 1]; got {list(np.atleast_1d(a))!r}")
    if n_examples is not None and (isinstance(n_examples, bool) or int(n_examples) < 1):
        raise ConfigError(f"n_examples={n_examples}: give at least 1 example (or leave it out)")
    acc = testbed.accuracies
    for m in (low, high):
        for s in (x, y):
            if pd.isna(acc.at[m, s]):
                raise DataError(f"model {m!r} has no accuracy on {s!r}; pick two models evaluated on both")
    if fit is None:
        fit = fit_trend(testbed.select([m for m in testbed.models if not is_checkpoint(m)]), x, y, scale,
                        fit_on=fit_on)
    ax = a * acc.at[high, x] + (1 - a) * acc.at[low, x]
    ay = a * acc.at[high, y] + (1 - a) * acc.at[low, y]
    pred = fit.predict(ax)
    gap = no_gap_effective_robustness(fit, ax)
    out = pd.DataFrame({"alpha": a, "x_acc": ax, "y_acc": ay, "predicted_y_acc": pred,
                        "effective_robustness": ay - pred, "no_gap_er": gap,
                        "percent_of_gap": percent_of_gap(ay - pred, gap)})
    sizes = {s: (int(n_examples) if n_examples is not None else testbed.sizes.at[low, s]) for s in (x, y)}
    if all(pd.notna(v) and v >= 1 for v in sizes.values()):
        rng = np.random.default_rng(seed)
        drawn = {}
        for s in (x, y):
            n = int(sizes[s])
            c_lo, c_hi = _correctness(acc.at[low, s], n, rng), _correctness(acc.at[high, s], n, rng)
            drawn[s] = [100.0 * mixed_classifier_draw(c_lo, c_hi, float(al), rng).mean() for al in a]
            p = (a * c_hi.mean() + (1 - a) * c_lo.mean())
            out[f"{'x' if s == x else 'y'}_n"] = n
            out[f"{'x' if s == x else 'y'}_se"] = 100.0 * np.sqrt(p * (1 - p) / n)
        out["x_acc_drawn"], out["y_acc_drawn"] = drawn[x], drawn[y]
        out["er_drawn"] = out["y_acc_drawn"] - fit.predict(out["x_acc_drawn"].to_numpy())
        out = out[["alpha", "x_acc", "y_acc", "predicted_y_acc", "effective_robustness", "no_gap_er",
                   "percent_of_gap", "x_n", "y_n", "x_acc_drawn", "y_acc_drawn", "er_drawn", "x_se", "y_se"]]
    out.attrs.update(fit=fit, low_model=low, high_model=high, x=x, y=y)
    return out


@dataclass
class TrajectorySummary:
    """What :func:`trajectory_summary` returns for several runs of one recipe.

    ``checkpoints``: every checkpoint of every run (``run, step, epoch, x_acc, y_acc,
    predicted_y_acc, effective_robustness, er_low, er_high, no_gap_er, percent_of_gap``);
    ``bins``: :func:`bin_by_id_accuracy` of them; ``max_er`` (pp), ``max_er_bin`` (its row
    index) and ``max_percent_of_gap``: the largest bin mean; ``no_gap``: the ``y = x`` curve
    (``x_acc, y_acc, predicted_y_acc, effective_robustness``) over the bins' range; ``runs``:
    each run's :func:`trajectory_endpoints`; ``mixed``: the :func:`mixed_classifier_curve` when
    asked for, else None.
    """

    recipe: str
    x: str
    y: str
    fit: TrendFit
    checkpoints: pd.DataFrame
    bins: pd.DataFrame
    max_er: float
    max_er_bin: int | None
    max_percent_of_gap: float
    no_gap: pd.DataFrame
    runs: pd.DataFrame
    mixed: pd.DataFrame | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON (``cli_support.jsonable`` makes the numbers JSON-safe)."""
        return {"recipe": self.recipe, "x": self.x, "y": self.y, "n_runs": int(len(self.runs)),
                "runs": self.runs.to_dict("records"), "scale": self.fit.scale,
                "trend": {"slope": self.fit.slope, "intercept": self.fit.intercept, "n_models": self.fit.n_models},
                "bins": self.bins.to_dict("records"), "max_er": self.max_er, "max_er_bin": self.max_er_bin,
                "max_percent_of_gap": self.max_percent_of_gap, "no_gap": self.no_gap.to_dict("records"),
                "mixed": None if self.mixed is None else self.mixed.to_dict("records")}


def trajectory_summary(
    testbed: Testbed | None = None,
    runs: Runs | None = None,
    x: str | None = None,
    y: str | None = None,
    scale: str = "logit",
    *,
    bins: int | Sequence[float] = DEFAULT_BINS,
    recipe: str | None = None,
    fit: TrendFit | None = None,
    fit_on: str | Iterable[str] | None = DEFAULT_FIT_ON,
    mix: tuple[str, str] | None = None,
    alphas: ArrayLike | None = None,
    n_examples: int | None = None,
    seed: int | None = 0,
) -> TrajectorySummary:
    """Effective robustness during fine-tuning over several runs (seeds) of one recipe, as
    Andreassen et al. 2022 analyse it.

    Each run's checkpoints get ``rho = acc_y - beta(acc_x)`` against the testbed's trend
    (:func:`trajectory_effective_robustness`); pooled over runs they are binned on ID accuracy
    and each bin gives the mean and s.d. of ``rho`` (:func:`bin_by_id_accuracy`); the maximum
    over bins is the largest bin mean. Beside it: ``rho`` as a percentage of the gap between the
    trend and ``y = x`` at the checkpoint's ID accuracy (:func:`percent_of_gap`, their
    Appendix D), the ``y = x`` curve's own ``rho`` (:func:`no_gap_effective_robustness`) and,
    with ``mix=(low_model, high_model)``, the mixed-classifier curve between two testbed models
    (:func:`mixed_classifier_curve` with ``alphas``, ``n_examples``, ``seed``).

    Parameters
    ----------
    testbed:
        Whose trend ``beta`` is fitted on its ``fit_on`` models (first; ``None`` with ``fit=``).
    runs:
        ``{name: trajectory}``: a long table of :data:`TRAJECTORY_COLUMNS` or a
        :class:`~shiftbench.studies.trajectory.Trajectory`. All must be one recipe
        (:func:`run_recipe`: a ``recipe`` column or attr, a ``recipe:<name>`` tag, else the name
        without ``-seed<k>``); runs of different recipes are a ConfigError. ``recipe=`` names the
        recipe when the names do not (runs stating another recipe are still refused).
    x, y:
        In-distribution and shifted settings.
    bins:
        A number of equal-width bins over the pooled checkpoints' ID-accuracy range (default
        :data:`DEFAULT_BINS`) or increasing bin edges in percent.

    Examples
    --------
    >>> import pandas as pd
    >>> from shiftbench.analysis import fit_trend
    >>> fit = fit_trend(x=[20, 50, 80], y=[10, 40, 70], scale="linear")      # y = x - 10
    >>> def run(er):                       # two checkpoints at 30% and 70% ID accuracy
    ...     return pd.DataFrame({"step": [0, 0, 1, 1], "epoch": [0, 0, 1, 1], "setting": ["id", "ood"] * 2,
    ...         "accuracy": [30, 20 + er, 70, 60 + er], "n_examples": 1000, "model": ["r@step0"] * 2 + ["r@step1"] * 2})
    >>> s = trajectory_summary(runs={"ft-seed0": run(2), "ft-seed1": run(4)}, x="id", y="ood", fit=fit, bins=[0, 50, 100])
    >>> s.recipe, s.bins["er_mean"].round(6).tolist(), round(s.max_er, 6), s.bins["percent_of_gap_mean"].round(6).tolist()
    ('ft', [3.0, 3.0], 3.0, [30.0, 30.0])
    """
    if isinstance(testbed, pd.DataFrame) and "effective_robustness" in testbed.columns:
        raise ConfigError("trajectory_summary() summarises several runs: trajectory_summary(testbed, runs, x, y); "
                          "the start, peak and end of one run's checkpoint table are trajectory_endpoints(er)")
    check_testbed_first("trajectory_summary", testbed, x, y, data="runs, x, y")
    if not runs:
        raise ConfigError("trajectory_summary() needs runs=: {name: trajectory} of several runs of one recipe")
    if not isinstance(runs, Mapping):
        raise ConfigError("runs must be a mapping {run name: trajectory table or Trajectory}")
    label = _check_one_recipe(runs, recipe)
    if fit is None:
        if testbed is None:
            raise ConfigError("give testbed=... (the trend is fitted on its standard models) or fit=...")
        fit = fit_trend(testbed.select([m for m in testbed.models if not is_checkpoint(m)]), x, y, scale,
                        fit_on=fit_on)
    frames, ends = [], []
    for name, run in runs.items():
        frame = getattr(run, "frame", run)
        if not isinstance(frame, pd.DataFrame):
            raise ConfigError(f"run {name!r} is a {type(run).__name__}; give a trajectory table or a Trajectory")
        er = trajectory_effective_robustness(frame=frame, x=x, y=y, fit=fit)
        gap = no_gap_effective_robustness(fit, er["x_acc"])
        frames.append(er.assign(run=str(name), no_gap_er=gap,
                                percent_of_gap=percent_of_gap(er["effective_robustness"], gap)))
        ends.append({"run": str(name), **trajectory_endpoints(er)})
    checkpoints = pd.concat(frames, ignore_index=True)
    checkpoints = checkpoints[["run", *[c for c in checkpoints.columns if c != "run"]]]
    table = bin_by_id_accuracy(checkpoints, bins)
    filled = table[table["n_checkpoints"] > 0]
    best = filled["er_mean"].idxmax() if filled["er_mean"].notna().any() else None
    grid = np.linspace(table["x_low"].iloc[0], table["x_high"].iloc[-1], 101)
    pred = fit.predict(grid)
    no_gap = pd.DataFrame({"x_acc": grid, "y_acc": grid, "predicted_y_acc": pred, "effective_robustness": grid - pred})
    mixed = None
    if mix is not None:
        if testbed is None:
            raise ConfigError("mix= draws two testbed models: pass the testbed first")
        if isinstance(mix, str) or len(mix) != 2:
            raise ConfigError(f"mix={mix!r}: give two model names (low_model, high_model)")
        mixed = mixed_classifier_curve(testbed, mix[0], mix[1], x, y, alphas=alphas, n_examples=n_examples,
                                       seed=seed, fit=fit)
    return TrajectorySummary(
        recipe=label, x=str(x), y=str(y), fit=fit, checkpoints=checkpoints, bins=table,
        max_er=float(table.at[best, "er_mean"]) if best is not None else float("nan"),
        max_er_bin=None if best is None else int(best),
        max_percent_of_gap=float(filled["percent_of_gap_mean"].max()) if filled["percent_of_gap_mean"].notna().any()
        else float("nan"),
        no_gap=no_gap, runs=pd.DataFrame(ends), mixed=mixed)
