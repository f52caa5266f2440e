"""Label-free estimates of out-of-distribution accuracy, from predictions alone (pure numpy/scipy).

Agreement on the line (Baek et al., *Agreement-on-the-Line*, NeurIPS 2022)
    For two models ``i, j`` the agreement on a set is the share of its examples on which their
    top-1 predictions are equal; it needs no labels. Across pairs of models, probit OOD agreement
    is close to a line in probit ID agreement, and (when accuracy is on the line, Miller et al.
    2021) that line has the slope ``a`` and bias ``b`` of the probit accuracy line. Pairs whose
    agreement on either side lies outside ``[0.05, 0.98]`` are left out of the fit (the probit is
    unstable there) and counted.

    * **ALine-S**: ``acc_ood(i) = Φ(a Φ⁻¹(acc_id(i)) + b)`` with ``a, b`` of the agreement line.
    * **ALine-D** (the paper's Algorithm 1): every kept pair ``(i, j)`` gives one linear equation in
      the unknown probit OOD accuracies ``x_i = Φ⁻¹(acc_ood(i))``::

          (x_i + x_j) / 2 = Φ⁻¹(agr_ood(i,j)) + a · ((Φ⁻¹(acc_id(i)) + Φ⁻¹(acc_id(j))) / 2 − Φ⁻¹(agr_id(i,j)))

      (the bias ``b`` eliminated with the pair's own agreement point), and the system over all kept
      pairs is solved by least squares (``numpy.linalg.lstsq``); ``acc_ood(i) = Φ(x_i)``. A model
      in no kept pair gets NaN.

Confidence baselines (need the per-example max-softmax ``confidence`` and ``entropy``)
    * **AC** (average confidence, Hendrycks & Gimpel 2017): the mean OOD max-softmax.
    * **DoC** (difference of confidences, Guillory et al., ICCV 2021): ID accuracy plus the change in
      mean max-softmax from ID to OOD.
    * **ATC** (average thresholded confidence, Garg et al., ICLR 2022): a score ``s`` (negative
      entropy, ATC-NE, by default; or max-softmax, ATC-MC) and a threshold ``t`` chosen on ID data so
      that the share of ID examples with ``s > t`` equals ID accuracy; the estimate is that share
      on the OOD set. With ``k`` of ``n`` ID examples right, ``t`` is the ``k``-th largest ID score and
      the examples tied at ``t`` count with the weight ``w = (k − #{s > t}) / #{s = t}`` (so the ID share
      is exactly ``k / n`` even with ties), on both sides: ``Â = mean(s_ood > t) + w · mean(s_ood = t)``.
      An all-right ID set gives ``t`` = the smallest ID score and ``w = 1``; an all-wrong one ``Â = 0``.

Accuracies and agreements in the frames returned are in percent.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from shiftbench.errors import ConfigError, DataError

#: agreements outside this range (on either side) are left out of the probit fits
AGREEMENT_RANGE = (0.05, 0.98)
#: probabilities are clipped to [EPS, 1 - EPS] before the probit
EPS = 1e-4
METHODS = ("aline-d", "aline-s", "atc", "doc", "ac")
CONFIDENCE_METHODS = ("atc", "doc", "ac")
ATC_SCORES = ("ne", "mc")


def probit(p: np.ndarray | float) -> np.ndarray:
    """``Φ⁻¹(p)`` of probabilities in [0, 1], clipped to ``[EPS, 1 − EPS]``."""
    return stats.norm.ppf(np.clip(np.asarray(p, dtype=np.float64), EPS, 1 - EPS))


@dataclass(frozen=True)
class ProbitLine:
    """``Φ⁻¹(y) = slope · Φ⁻¹(x) + bias`` fitted by least squares over ``n_points`` (``n_left_out``
    outside the agreement range were not used)."""

    slope: float
    bias: float
    r2: float
    n_points: int
    n_left_out: int

    def predict(self, x: np.ndarray | float) -> np.ndarray:
        """``Φ(slope · Φ⁻¹(x) + bias)`` (probabilities in, probabilities out)."""
        return stats.norm.cdf(self.slope * probit(x) + self.bias)


def _in_range(*arrays: np.ndarray, lo: float = AGREEMENT_RANGE[0], hi: float = AGREEMENT_RANGE[1]) -> np.ndarray:
    keep = np.ones(len(arrays[0]), dtype=bool)
    for a in arrays:
        keep &= (np.asarray(a) >= lo) & (np.asarray(a) <= hi)
    return keep


def fit_probit_line(x: Sequence[float], y: Sequence[float], *, lo: float = AGREEMENT_RANGE[0],
                    hi: float = AGREEMENT_RANGE[1], what: str = "points") -> ProbitLine:
    """Least-squares line of ``Φ⁻¹(y)`` on ``Φ⁻¹(x)`` (``x, y`` in [0, 1]) over the points with both
    in ``[lo, hi]``; a :class:`DataError` when fewer than 2 such points (or all ``x`` equal)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    keep = _in_range(x, y, lo=lo, hi=hi)
    px, py = probit(x[keep]), probit(y[keep])
    if keep.sum() < 2 or np.ptp(px) == 0:
        raise DataError(f"{int(keep.sum())} of {len(x)} {what} inside [{lo}, {hi}] on both sides (with distinct "
                        "x); need at least 2 to fit a probit line")
    slope, bias = np.polyfit(px, py, 1)
    resid = py - (slope * px + bias)
    tss = float(((py - py.mean()) ** 2).sum())
    r2 = 1.0 - float((resid ** 2).sum()) / tss if tss > 0 else float("nan")
    return ProbitLine(float(slope), float(bias), r2, int(keep.sum()), int((~keep).sum()))


def pairwise_agreement(pred_id: np.ndarray, pred_ood: np.ndarray, models: Sequence[str]) -> pd.DataFrame:
    """Every pair ``model_a < model_b`` (in row order) with its ID and OOD agreement (percent): the
    share of examples where the two top-1 predictions are equal. ``pred_*``: ``(n_models, n_examples)``."""
    a_id, a_ood = np.asarray(pred_id), np.asarray(pred_ood)
    if a_id.ndim != 2 or a_ood.ndim != 2 or len(a_id) != len(models) or len(a_ood) != len(models):
        raise DataError(f"predictions must be (models x examples) with one row per model ({len(models)}), "
                        f"got {a_id.shape} and {a_ood.shape}")
    i, j = np.triu_indices(len(models), k=1)
    agr_id = (a_id[i] == a_id[j]).mean(axis=1)
    agr_ood = (a_ood[i] == a_ood[j]).mean(axis=1)
    names = np.asarray(list(models), dtype=object)
    return pd.DataFrame({"model_a": names[i], "model_b": names[j], "agreement_id": 100 * agr_id,
                         "agreement_ood": 100 * agr_ood})


@dataclass(frozen=True)
class LineTest:
    """Do the agreement points (pairs) and the accuracy points (models) lie on one probit line?

    An F test (Chow test) of the two restrictions "same slope" and "same bias" in the pooled
    regression ``Φ⁻¹(y) = b + a Φ⁻¹(x) + d_b · acc + d_a · acc · Φ⁻¹(x)`` (``acc`` = 1 for an accuracy
    point). The p value treats the residuals as independent, which pairs sharing a model are not:
    read it as a guide, not an exact level.
    """

    slope_difference: float
    bias_difference: float
    f_statistic: float
    p_value: float
    df_num: int
    df_den: int


def same_line_test(agreement_line_points: tuple[np.ndarray, np.ndarray],
                   accuracy_line_points: tuple[np.ndarray, np.ndarray]) -> LineTest:
    """:class:`LineTest` of agreement points ``(x, y)`` and accuracy points ``(x, y)``, each already in
    probit units and inside the range (the points the two fits used)."""
    ax, ay = (np.asarray(v, dtype=np.float64) for v in agreement_line_points)
    cx, cy = (np.asarray(v, dtype=np.float64) for v in accuracy_line_points)
    x, y = np.concatenate([ax, cx]), np.concatenate([ay, cy])
    d = np.concatenate([np.zeros(len(ax)), np.ones(len(cx))])
    full = np.column_stack([np.ones_like(x), x, d, d * x])
    rest = full[:, :2]
    n, k = full.shape
    if n - k < 1 or len(ax) < 2 or len(cx) < 2:
        raise DataError(f"{len(ax)} agreement and {len(cx)} accuracy points: too few to test for one line")
    beta, *_ = np.linalg.lstsq(full, y, rcond=None)
    rss_full = float(((y - full @ beta) ** 2).sum())
    beta_r, *_ = np.linalg.lstsq(rest, y, rcond=None)
    rss_rest = float(((y - rest @ beta_r) ** 2).sum())
    df_num, df_den = 2, n - k
    if rss_full <= 0:
        f = float("inf") if rss_rest > 0 else float("nan")
    else:
        f = ((rss_rest - rss_full) / df_num) / (rss_full / df_den)
    p = float(stats.f.sf(f, df_num, df_den)) if np.isfinite(f) else (0.0 if f == np.inf else float("nan"))
    return LineTest(float(beta[3]), float(beta[2]), float(f), p, df_num, df_den)


def aline_s(acc_id: Sequence[float], line: ProbitLine) -> np.ndarray:
    """ALine-S: ``100 · Φ(slope · Φ⁻¹(acc_id/100) + bias)`` per model (accuracies in percent)."""
    return 100.0 * line.predict(np.asarray(acc_id, dtype=np.float64) / 100.0)


def aline_d(acc_id: Sequence[float], pairs: pd.DataFrame, slope: float, models: Sequence[str]) -> np.ndarray:
    """ALine-D (see the module docstring): the least-squares solution of one equation per row of
    ``pairs`` (columns ``model_a, model_b, agreement_id, agreement_ood`` in percent; pass the pairs
    inside the agreement range) for the probit OOD accuracies; percent per model, NaN for a model
    in no pair."""
    models = list(models)
    pos = {m: k for k, m in enumerate(models)}
    acc = probit(np.asarray(acc_id, dtype=np.float64) / 100.0)
    n = len(pairs)
    a = np.zeros((n, len(models)))
    ia = pairs["model_a"].map(pos).to_numpy(dtype=int)
    ib = pairs["model_b"].map(pos).to_numpy(dtype=int)
    a[np.arange(n), ia] += 0.5
    a[np.arange(n), ib] += 0.5
    rhs = (probit(pairs["agreement_ood"].to_numpy() / 100.0)
           + slope * ((acc[ia] + acc[ib]) / 2 - probit(pairs["agreement_id"].to_numpy() / 100.0)))
    x, *_ = np.linalg.lstsq(a, rhs, rcond=None)
    out = 100.0 * stats.norm.cdf(x)
    used = np.zeros(len(models), dtype=bool)
    used[ia] = used[ib] = True
    out[~used] = np.nan
    return out


# ---------------------------------------------------------------------------- confidence baselines
def average_confidence(conf_ood: np.ndarray) -> float:
    """AC: ``100 · mean(max-softmax)`` over the OOD examples."""
    return 100.0 * float(np.mean(conf_ood))


def difference_of_confidences(acc_id: float, conf_id: np.ndarray, conf_ood: np.ndarray) -> float:
    """DoC: ``acc_id + 100 · (mean(conf_ood) − mean(conf_id))`` (percent)."""
    return float(acc_id) + 100.0 * (float(np.mean(conf_ood)) - float(np.mean(conf_id)))


def atc_threshold(score_id: np.ndarray, correct_id: np.ndarray) -> tuple[float, float]:
    """ATC's threshold ``t`` and tie weight ``w`` on ID data (see the module docstring): the share
    ``mean(s > t) + w · mean(s = t)`` of the ID scores equals the ID accuracy exactly."""
    s = np.asarray(score_id, dtype=np.float64)
    c = np.asarray(correct_id, dtype=bool)
    if s.shape != c.shape or s.ndim != 1 or s.size == 0:
        raise DataError(f"ATC needs one score per ID example, got {s.shape} scores and {c.shape} correctness")
    if np.isnan(s).any():
        raise DataError("ATC: the ID scores contain NaN; re-run the evaluation with `shiftbench eval --force`")
    k = int(c.sum())
    if k == 0:
        return float("inf"), 0.0
    t = float(np.sort(s)[::-1][k - 1])
    above, tied = int((s > t).sum()), int((s == t).sum())
    return t, (k - above) / tied


def atc_estimate(score_id: np.ndarray, correct_id: np.ndarray, score_ood: np.ndarray) -> float:
    """ATC (percent): the share of OOD scores above the ID threshold, ties at it weighted by ``w``."""
    t, w = atc_threshold(score_id, correct_id)
    s = np.asarray(score_ood, dtype=np.float64)
    return 100.0 * (float((s > t).mean()) + w * float((s == t).mean()))


# ---------------------------------------------------------------------------- everything at once
@dataclass(frozen=True)
class LabelFreeEstimates:
    """Per-model estimates of OOD accuracy and what they came from.

    ``estimates``: one row per model, columns ``model, accuracy_id`` and one per method (percent),
    ``accuracy_ood`` (the true OOD accuracy, NaN without labels) and ``error_<method>``
    (estimate − truth). ``pairs``: :func:`pairwise_agreement` plus ``in_range``.
    ``agreement_line`` / ``accuracy_line``: the probit fits (the latter None without OOD labels);
    ``line_test``: :class:`LineTest` (None without OOD labels or too few points).
    ``mae``: each method's mean absolute error over models (empty without labels).
    """

    estimates: pd.DataFrame
    pairs: pd.DataFrame
    agreement_line: ProbitLine | None
    accuracy_line: ProbitLine | None
    line_test: LineTest | None
    methods: tuple[str, ...]
    mae: dict[str, float]


def check_methods(methods: Sequence[str] | str) -> tuple[str, ...]:
    """The methods asked for (``all`` = every one), each checked against :data:`METHODS`."""
    asked = [methods] if isinstance(methods, str) else list(methods)
    out: list[str] = []
    for m in asked:
        for part in str(m).split(","):
            part = part.strip().lower()
            if part == "all":
                out.extend(METHODS)
            elif part in METHODS:
                out.append(part)
            elif part:
                raise ConfigError(f"unknown method {part!r}; use one of {', '.join(METHODS)} or all")
    return tuple(dict.fromkeys(out)) or METHODS


def estimate_ood_accuracy(models: Sequence[str], pred_id: np.ndarray, correct_id: np.ndarray, pred_ood: np.ndarray,
                          correct_ood: np.ndarray | None = None, *, conf_id: np.ndarray | None = None,
                          conf_ood: np.ndarray | None = None, entropy_id: np.ndarray | None = None,
                          entropy_ood: np.ndarray | None = None, methods: Sequence[str] | str = "all",
                          atc_score: str = "ne", where: str = "") -> LabelFreeEstimates:
    """Every asked method's OOD accuracy estimate per model (arrays ``(n_models, n_examples)``, ID and
    OOD example sets aligned across models but not with each other). ``where`` names the settings
    in errors. Needs at least 3 models; the ALine methods need at least 2 pairs in the agreement range."""
    methods = check_methods(methods)
    if atc_score not in ATC_SCORES:
        raise ConfigError(f"unknown ATC score {atc_score!r}; use ne (negative entropy) or mc (max-softmax)")
    models = list(models)
    tag = f" ({where})" if where else ""
    if len(models) < 3:
        raise ConfigError(f"label-free estimates need at least 3 models with predictions on both settings{tag}, "
                          f"got {len(models)}")
    acc_id = 100.0 * np.asarray(correct_id, dtype=np.float64).mean(axis=1)
    acc_ood = (100.0 * np.asarray(correct_ood, dtype=np.float64).mean(axis=1) if correct_ood is not None
               else np.full(len(models), np.nan))
    table = pd.DataFrame({"model": models, "accuracy_id": acc_id})
    pairs = pairwise_agreement(pred_id, pred_ood, models)
    pairs["in_range"] = _in_range(pairs["agreement_id"] / 100, pairs["agreement_ood"] / 100)
    agreement_line = accuracy_line = test = None
    if {"aline-s", "aline-d"} & set(methods):
        if not pairs["in_range"].any() or pairs["in_range"].sum() < 2:
            raise DataError(f"{int(pairs['in_range'].sum())} of {len(pairs)} model pairs have agreement inside "
                            f"[{AGREEMENT_RANGE[0]}, {AGREEMENT_RANGE[1]}] on both sides{tag}; ALine needs at "
                            "least 2 (models that disagree more in distribution, or --method atc|doc|ac)")
        agreement_line = fit_probit_line(pairs["agreement_id"] / 100, pairs["agreement_ood"] / 100,
                                         what=f"model pairs{tag}")
        if "aline-s" in methods:
            table["aline-s"] = aline_s(acc_id, agreement_line)
        if "aline-d" in methods:
            table["aline-d"] = aline_d(acc_id, pairs[pairs["in_range"]], agreement_line.slope, models)
        if correct_ood is not None:
            try:
                accuracy_line = fit_probit_line(acc_id / 100, acc_ood / 100, what=f"models{tag}")
                kept = pairs[pairs["in_range"]]
                keep_m = _in_range(acc_id / 100, acc_ood / 100)
                test = same_line_test((probit(kept["agreement_id"] / 100), probit(kept["agreement_ood"] / 100)),
                                      (probit(acc_id[keep_m] / 100), probit(acc_ood[keep_m] / 100)))
            except DataError:
                pass                                       # too few models inside the range: no line to compare
    if set(CONFIDENCE_METHODS) & set(methods):
        need = {"conf_id": conf_id, "conf_ood": conf_ood}
        if "atc" in methods and atc_score == "ne":
            need.update(entropy_id=entropy_id, entropy_ood=entropy_ood)
        missing = [k for k, v in need.items() if v is None or np.isnan(np.asarray(v, dtype=np.float64)).any()]
        if missing:
            raise DataError(f"the confidence methods need the stored per-example max-softmax and entropy{tag}, "
                            f"missing or NaN: {', '.join(missing)}; re-run with `shiftbench eval --force`")
        cid, cood = np.asarray(conf_id, dtype=np.float64), np.asarray(conf_ood, dtype=np.float64)
        if "ac" in methods:
            table["ac"] = [average_confidence(cood[k]) for k in range(len(models))]
        if "doc" in methods:
            table["doc"] = [difference_of_confidences(acc_id[k], cid[k], cood[k]) for k in range(len(models))]
        if "atc" in methods:
            sid = cid if atc_score == "mc" else -np.asarray(entropy_id, dtype=np.float64)
            sood = cood if atc_score == "mc" else -np.asarray(entropy_ood, dtype=np.float64)
            table["atc"] = [atc_estimate(sid[k], np.asarray(correct_id)[k], sood[k]) for k in range(len(models))]
    table["accuracy_ood"] = acc_ood
    mae: dict[str, float] = {}
    for m in methods:
        table[f"error_{m}"] = table[m] - acc_ood
        if correct_ood is not None:
            mae[m] = float(np.nanmean(np.abs(table[f"error_{m}"]))) if table[m].notna().any() else float("nan")
    return LabelFreeEstimates(table, pairs, agreement_line, accuracy_line, test, methods, mae)


# ---------------------------------------------------------------------------- over many shifts
#: The ImageNet-C corruption families (Hendrycks & Dietterich 2019, Fig. 1; the grouping of
#: ``shiftbench.shifts.corruptions``), as data so that analysis needs no torch.
CORRUPTION_FAMILIES = {
    "noise": ("gaussian_noise", "shot_noise", "impulse_noise", "speckle_noise"),
    "blur": ("gaussian_blur", "defocus_blur", "glass_blur", "motion_blur", "zoom_blur"),
    "weather": ("snow", "frost", "fog", "spatter"),
    "digital": ("brightness", "contrast", "saturate", "elastic_transform", "pixelate", "jpeg_compression"),
}
#: a setting is "on the line" when the same-line test does not reject at this level
ON_LINE_ALPHA = 0.05
#: the label-free diagnostic: agreement is "strongly linear" when its probit fit has at least this R²
STRONG_AGREEMENT_R2 = 0.5


def corruption_family(setting: str) -> str | None:
    """The ImageNet-C family of a corrupted setting (``<dataset>+<corruption>.<severity>`` or
    ``imagenet-c.<corruption>.<severity>_<mode>``), None for any other setting."""
    text = str(setting)
    name = text.rsplit("+", 1)[1] if "+" in text else (text.split(".")[1] if text.startswith("imagenet-c.") else "")
    name = name.split(".")[0]
    return next((fam for fam, members in CORRUPTION_FAMILIES.items() if name in members), None)


def on_the_line(res: LabelFreeEstimates, alpha: float = ON_LINE_ALPHA) -> bool | None:
    """Whether agreement and accuracy share one probit line by :func:`same_line_test` (``p ≥ alpha``);
    None when there is no test (no OOD labels, or too few points inside the agreement range)."""
    t = res.line_test
    return None if t is None or not np.isfinite(t.p_value) else bool(t.p_value >= alpha)


def setting_errors(estimates_by_shift: dict[str, LabelFreeEstimates], families: dict[str, str] | None = None, *,
                   alpha: float = ON_LINE_ALPHA) -> pd.DataFrame:
    """One row per shift: its family (``families[shift]``, else :func:`corruption_family`, else
    ``natural``), model count, both probit lines, the same-line test (``on_line``: ``p ≥ alpha``,
    None without a test) and each method's mean absolute error over the models (pp)."""
    rows = []
    for shift, res in estimates_by_shift.items():
        fam = (families or {}).get(shift) or corruption_family(shift) or "natural"
        agr, acc, t = res.agreement_line, res.accuracy_line, res.line_test
        rows.append({"shift": shift, "family": fam, "n_models": len(res.estimates),
                     "agreement_slope": agr.slope if agr else np.nan, "agreement_bias": agr.bias if agr else np.nan,
                     "agreement_r2": agr.r2 if agr else np.nan,
                     "accuracy_slope": acc.slope if acc else np.nan, "accuracy_bias": acc.bias if acc else np.nan,
                     "accuracy_r2": acc.r2 if acc else np.nan,
                     "f_statistic": t.f_statistic if t else np.nan, "p_value": t.p_value if t else np.nan,
                     "on_line": on_the_line(res, alpha),
                     **{f"mae_{m}": res.mae.get(m, np.nan) for m in METHODS}})
    return pd.DataFrame(rows)


def estimation_errors(estimates_by_shift: dict[str, LabelFreeEstimates], families: dict[str, str] | None = None, *,
                      alpha: float = ON_LINE_ALPHA, min_r2: float = STRONG_AGREEMENT_R2) -> pd.DataFrame:
    """Mean absolute error of every method per shift family, and where agreement is on the line.

    ``estimates_by_shift``: :func:`estimate_ood_accuracy` per shifted setting (with OOD labels).
    A shift's family is ``families[shift]``, else its ImageNet-C family (:data:`CORRUPTION_FAMILIES`),
    else ``natural``. One row per family (in order of first appearance) and a last row ``all``:

    * ``mae_<method>``: ``mean |estimate − truth|`` over every (model, shift) of the family (pp);
    * ``on_line_share``: the share (%) of its shifts where the same-line test (:class:`LineTest`,
      Baek et al. 2022's claim that agreement and accuracy share slope and bias) does not reject at
      ``alpha``, among those with a test (``n_tested``);
    * ``mae_aline-d_on_line`` / ``mae_aline-d_off_line``: ALine-D's error on those two groups of
      shifts (NaN when a group is empty);
    * ``strong_agreement_share``, ``mae_aline-d_strong`` / ``mae_aline-d_weak``: the same split by the
      diagnostic that needs no labels - the agreement line's R² at least ``min_r2`` (Baek et al.
      2022: where agreement is not strongly linear, do not trust the estimate).
    """
    if not estimates_by_shift:
        raise DataError("no shifts to summarise: pass at least one shift's label-free estimates")
    per = setting_errors(estimates_by_shift, families, alpha=alpha)
    errors = []
    for (shift, res), fam, line in zip(estimates_by_shift.items(), per["family"], per["on_line"]):
        e = res.estimates
        r2 = res.agreement_line.r2 if res.agreement_line is not None else np.nan
        frame = pd.DataFrame({"shift": shift, "family": fam, "on_line": line, "agreement_r2": r2,
                              **{m: (e[f"error_{m}"].abs() if f"error_{m}" in e else np.nan) for m in METHODS}})
        errors.append(frame)
    err = pd.concat(errors, ignore_index=True)
    groups = [(f, per["family"] == f, err["family"] == f) for f in dict.fromkeys(per["family"])]
    groups.append(("all", per["family"].notna(), err["family"].notna()))
    rows = []
    for fam, sel_s, sel_e in groups:
        s, e = per[sel_s], err[sel_e]
        tested = s["on_line"].notna()
        on = e["on_line"].eq(True)
        off = e["on_line"].eq(False)
        rows.append({"family": fam, "n_shifts": len(s), "n_estimates": len(e),
                     **{f"mae_{m}": _mean(e[m]) for m in METHODS},
                     "n_tested": int(tested.sum()),
                     "on_line_share": 100.0 * float(s.loc[tested, "on_line"].astype(bool).mean())
                     if tested.any() else np.nan,
                     "mae_aline-d_on_line": _mean(e.loc[on, "aline-d"]),
                     "mae_aline-d_off_line": _mean(e.loc[off, "aline-d"]),
                     "strong_agreement_share": 100.0 * float((s["agreement_r2"] >= min_r2).mean())
                     if s["agreement_r2"].notna().any() else np.nan,
                     "mae_aline-d_strong": _mean(e.loc[e["agreement_r2"] >= min_r2, "aline-d"]),
                     "mae_aline-d_weak": _mean(e.loc[e["agreement_r2"] < min_r2, "aline-d"])})
    return pd.DataFrame(rows)


def _mean(values: pd.Series) -> float:
    v = pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64)
    v = v[np.isfinite(v)]
    return float(v.mean()) if v.size else float("nan")
