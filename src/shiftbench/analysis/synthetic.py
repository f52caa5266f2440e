"""Effective robustness on synthetic corruptions, and how well it predicts natural robustness.

Taori et al. (2020, §4, Figure 5) ask whether robustness to synthetic shifts (ImageNet-C's
corruptions) predicts robustness to natural ones. Per corruption setting ``c`` the trend
``t(acc_c) = slope * t(acc_x) + intercept`` is fitted on the standard models against the
in-distribution setting ``x`` (``val``) and every model's effective robustness
``rho_c = acc_c - beta_c(acc_x)`` is taken (percentage points). Then

* the **synthetic effective robustness** of a model is the mean of ``rho_c`` over all
  corruption settings (every corruption at every severity); a model missing any of them gets
  ``NaN`` so that all averages are over the same settings. A severity that some model lacks
  while it has the corruption's other severities is a gap in the data and is left out for
  every model (:func:`complete_severities`): in the reference testbed, the severity-1
  in-memory cells that equal clean accuracy;
* the **per-corruption** effective robustness is the mean of ``rho_c`` over the severities of
  one corruption;

and :func:`corruption_correlations` gives, per corruption and for the overall average,
Pearson's r with the effective robustness on a natural shift (e.g. ImageNetV2), over the
non-standard models.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from shiftbench.analysis.correlation import robustness_correlation
from shiftbench.analysis.recipes import (  # there: the CLI's --help reads them without numpy
    NATURAL_DEFAULT,
    PAPER_TAORI_SYNTHETIC,
    SYNTHETIC_RECIPES,
    TAORI_FIT_EXCLUDE,  # shared with the trend recipe taori2020 (recipes.FIT_RECIPES)
    TAORI_MIN_X,
    check_recipe,
)
from shiftbench.analysis.robustness import effective_robustness
from shiftbench.analysis.scaling import inverse, transform
from shiftbench.analysis.trend import DEFAULT_FIT_ON, fit_trend
from shiftbench.errors import ConfigError, DataError, ShiftbenchError
from shiftbench.testbed import Testbed

#: ``imagenet-c.<corruption>.<severity>_in-memory``: ImageNet-C generated in memory (the
#: reference testbed's names and those of ``shiftbench eval``).
IMAGENET_C_PATTERN = r"^imagenet-c\.(?P<corruption>[a-z_]+)\.(?P<severity>\d)_in-memory$"
SYNTHETIC = "synthetic_er"
#: Types trained like the trend's models, so their effective robustness is ~0 by design.
STANDARD_LIKE = ("STANDARD", "LOW_ACCURACY_CNN")


def corruption_settings(testbed: Testbed, pattern: str = IMAGENET_C_PATTERN) -> dict[str, list[str]]:
    """Settings of ``testbed`` matching ``pattern`` (named groups ``corruption`` and
    ``severity``), grouped by corruption and sorted by severity."""
    found: dict[str, list[tuple[int, str]]] = {}
    rx = re.compile(pattern)
    for s in testbed.settings:
        m = rx.match(s)
        if m:
            found.setdefault(m["corruption"], []).append((int(m["severity"]), s))
    return {c: [s for _, s in sorted(v)] for c, v in sorted(found.items())}


def complete_severities(testbed: Testbed, settings: Mapping[str, Sequence[str]]
                        ) -> tuple[dict[str, list[str]], list[str]]:
    """``settings`` without the severities some model lacks although it has the corruption's
    other severities - a gap in the data, not a model left unevaluated - and the list of the
    settings left out. Averaging over the remaining severities keeps such models in every
    average instead of dropping them (the reference testbed's severity-1 in-memory cells that
    equal clean accuracy, see :func:`shiftbench.reference.imagenet.defective_cells`)."""
    have = testbed.accuracies.notna()
    kept: dict[str, list[str]] = {}
    left_out: list[str] = []
    for corruption, names in settings.items():
        names = [n for n in names if n in have.columns]
        keep = []
        for s in names:
            others = [o for o in names if o != s]
            gap = have[others].all(axis=1) & ~have[s] if others else pd.Series(False, index=have.index)
            (left_out if gap.any() else keep).append(s)
        if keep:
            kept[corruption] = keep
    return kept, left_out


def synthetic_effective_robustness(
    testbed: Testbed,
    x: str = "val",
    settings: Mapping[str, Sequence[str]] | None = None,
    scale: str = "logit",
    *,
    fit_on: str | Iterable[str] | None = DEFAULT_FIT_ON,
) -> pd.DataFrame:
    """Effective robustness per corruption and on average (see the module docstring).

    ``settings`` maps each corruption to its settings (default: :func:`corruption_settings`
    less the severities with gaps, :func:`complete_severities`). Returns a DataFrame indexed by
    model with ``model_type``, one column per corruption (mean over its severities),
    ``synthetic_er`` (mean over every setting, ``NaN`` unless the model has all of them) and
    ``n_settings``; ``attrs`` holds ``x``, ``scale``, ``settings`` and ``left_out`` (the
    settings with gaps; not the fits: pandas deep-copies ``attrs`` on every operation).
    """
    testbed.check_setting(x)
    left_out: list[str] = []
    if settings is None:
        settings, left_out = complete_severities(testbed, corruption_settings(testbed))
    else:
        settings = {c: list(v) for c, v in settings.items()}
    if not settings:
        raise DataError(f"testbed {testbed.name!r} has no corruption settings (e.g. imagenet-c.fog.3_in-memory)")
    per_setting: dict[str, pd.Series] = {}
    for corruption, names in settings.items():
        for s in names:
            fit = fit_trend(testbed, x, s, scale, fit_on=fit_on)
            # rho = acc_y - beta(acc_x), exactly as effective_robustness computes it
            pairs, _ = testbed.paired(x, s)
            pred = fit.predict(pairs["x_acc"].to_numpy(), pairs["x_n"].to_numpy())
            per_setting[s] = pd.Series(pairs["y_acc"].to_numpy() - pred, index=pairs.index)
    table = pd.DataFrame(per_setting).reindex(testbed.models)
    evaluated = table.notna().any(axis=1)
    out = pd.DataFrame({"model_type": testbed.model_types}).loc[evaluated]
    for corruption, names in settings.items():
        out[corruption] = table.loc[evaluated, names].mean(axis=1, skipna=False)
    out[SYNTHETIC] = table.loc[evaluated].mean(axis=1, skipna=False)
    out["n_settings"] = table.loc[evaluated].notna().sum(axis=1)
    out.index.name = "model"
    out.attrs.update(x=x, scale=scale, settings=settings, left_out=left_out)
    return out


def corruption_correlations(
    synthetic: pd.DataFrame,
    natural: pd.DataFrame,
    *,
    exclude_types: Iterable[str] = STANDARD_LIKE,
) -> pd.DataFrame:
    """Pearson (and Spearman) correlation of each corruption's effective robustness, and of the
    average ``synthetic_er``, with the natural shift's effective robustness (an
    :func:`~shiftbench.analysis.effective_robustness` table), over the models not of
    ``exclude_types``. One row per column, ``synthetic_er`` first; a correlation that cannot
    be computed has ``NaN`` and its reason in ``note``."""
    columns = [SYNTHETIC] + [c for c in synthetic.columns if c not in ("model_type", SYNTHETIC, "n_settings")]
    # plain frames: pandas would deep-copy the inputs' attrs (fits and all) on every operation
    natural = pd.DataFrame({"model_type": natural["model_type"].to_numpy(),
                            "effective_robustness": natural["effective_robustness"].to_numpy()}, index=natural.index)
    rows = []
    for col in columns:
        a = pd.DataFrame({"model_type": synthetic["model_type"].to_numpy(), "effective_robustness":
                          synthetic[col].to_numpy()}, index=synthetic.index)
        try:
            c = robustness_correlation(a, natural, exclude_types=list(exclude_types))
            rows.append({"corruption": col, "pearson_r": c.pearson_r, "pearson_p": c.pearson_p,
                         "spearman_rho": c.spearman_rho, "n_models": c.n_models, "note": ""})
        except ShiftbenchError as exc:
            rows.append({"corruption": col, "pearson_r": np.nan, "pearson_p": np.nan, "spearman_rho": np.nan,
                         "n_models": 0, "note": str(exc)})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------- named recipes

#: ``imagenet-c.<corruption>.<severity>_<mode>`` in either mode (in-memory or on-disk).
IMAGENET_C_ANY_MODE = r"^imagenet-c\.(?P<corruption>[a-z_]+)\.(?P<severity>\d)_(?P<mode>in-memory|on-disk)$"
#: The settings Taori et al. add to the ImageNet-C corruptions in the synthetic average, where present.
TAORI_EXTRA = ("stylized_imagenet", "greyscale")
#: The adversarial (PGD) settings: ``pgd.<norm>.eps<epsilon>`` (the reference testbed has
#: ``pgd.l2.eps0.1``, ``pgd.l2.eps0.5``, ``pgd.linf.eps0.5`` and ``pgd.linf.eps2``).
PGD_PATTERN = r"^pgd\."
#: TAORI_FIT_EXCLUDE (``aws``, ``batch64``, ``subsample``: the name fragments of the models Taori et al.
#: keep out of the trend fit) and TAORI_MIN_X (55% val) live in :mod:`shiftbench.analysis.recipes`.
#: Name fragment of the models kept out of the correlation (ImageNet subsamples).
TAORI_CORRELATION_EXCLUDE = ("subsample",)
PAPER_TAORI = PAPER_TAORI_SYNTHETIC

#: Named synthetic-vs-natural recipes: name -> (one-line description, paper). The JSON, the
#: CSV, the report and docs/methods.md name the recipe with these (kept, as plain data, in
#: :data:`shiftbench.analysis.recipes.REGISTRY`).
RECIPES: dict[str, tuple[str, str]] = SYNTHETIC_RECIPES


def recipe_line(recipe: str) -> str:
    """``'<recipe>: <description> (<paper>)'``, the line the CLI, CSV and report print."""
    description, paper = RECIPES[recipe]
    return f"{recipe}: {description} ({paper})"


def _check_recipe(recipe: str) -> str:
    return check_recipe("synthetic-vs-natural", recipe, option="recipe")


@dataclass
class SyntheticVsNatural:
    """Correlation of synthetic (or adversarial) with natural effective robustness.

    ``r``, ``p`` and ``n`` are Pearson's r, its two-sided p-value and the number of models in
    the correlation (``models``); ``settings`` what was averaged (taori2020: the
    ``<corruption>_<mode>`` severity averages and the extra settings; per-setting: the settings);
    ``table`` has one row per model with ``model_type``,
    ``synthetic_acc`` (the average accuracy, taori2020 only), ``synthetic_er``, ``natural_er``,
    ``in_fit`` and ``in_correlation``. ``notes`` says what the recipe adapted (severities
    averaged over fewer than five, settings missing under ``fallback``). ``adversarial`` is the
    same for the PGD settings (``None`` when the testbed has none and ``fallback`` allowed it).
    """

    recipe: str
    testbed: str
    x: str
    natural: str
    settings: list[str]
    r: float
    p: float
    n: int
    models: list[str]
    table: pd.DataFrame = field(repr=False)
    notes: list[str] = field(default_factory=list)
    adversarial: SyntheticVsNatural | None = None

    @property
    def description(self) -> str:
        return RECIPES[self.recipe][0]

    @property
    def paper(self) -> str:
        return RECIPES[self.recipe][1]

    def to_dict(self, *, with_table: bool = False) -> dict[str, object]:
        """JSON-ready: recipe, description, paper, testbed, x, natural, settings, r, n, p,
        models, notes and ``adversarial`` (the same keys, or ``None``)."""
        out: dict[str, object] = {
            "recipe": self.recipe, "description": self.description, "paper": self.paper,
            "testbed": self.testbed, "x": self.x, "natural": self.natural, "settings": list(self.settings),
            "r": _num(self.r), "n": int(self.n), "p": _num(self.p), "models": list(self.models),
            "notes": list(self.notes),
        }
        if with_table:
            out["table"] = [{k: (_num(v) if isinstance(v, float) else v) for k, v in row.items()}
                            for row in self.table.reset_index().to_dict("records")]
        if self.adversarial is not None or self.settings:
            out["adversarial"] = None if self.adversarial is None else self.adversarial.to_dict(with_table=with_table)
        return out

    def to_csv_frame(self) -> pd.DataFrame:
        """The per-model table with the recipe, its description and paper in every row (and the
        adversarial rows, ``kind`` = ``adversarial``)."""
        parts = []
        for kind, res in (("synthetic", self), ("adversarial", self.adversarial)):
            if res is None:
                continue
            t = res.table.reset_index()
            t.insert(0, "kind", kind)
            parts.append(t)
        frame = pd.concat(parts, ignore_index=True)
        frame["recipe"] = self.recipe
        frame["description"] = self.description
        frame["paper"] = self.paper
        return frame


def _num(v: object) -> float | None:
    return float(v) if v is not None and np.isfinite(float(v)) else None  # type: ignore[arg-type]


def _name_has(models: Iterable[str], fragments: Iterable[str]) -> np.ndarray:
    frags = [f.lower() for f in fragments]
    return np.array([any(f in m.lower() for f in frags) for m in models], dtype=bool)


def taori_synthetic_average(testbed: Testbed, *, modes: Sequence[str] = ("in-memory", "on-disk"),
                            extra: Sequence[str] = TAORI_EXTRA) -> tuple[pd.Series, list[str], list[str]]:
    """Taori et al.'s synthetic accuracy per model: the mean over every ImageNet-C corruption in
    each of ``modes`` (each corruption-mode first averaged over the severities the model has),
    plus the ``extra`` settings the testbed has (Stylized ImageNet, greyscale).

    Returns the average (NaN for a model missing a whole corruption-mode or an extra setting),
    the columns averaged (``<corruption>_<mode>`` and the extra settings) and notes: which
    corruptions some model has on fewer than all of their severities (averaged over those it
    has, so that the model is not dropped: the cleaned ``imagenet-reference`` leaves defective
    severity-1 cells empty).
    """
    acc = testbed.accuracies
    rx = re.compile(IMAGENET_C_ANY_MODE)
    groups: dict[str, list[str]] = {}
    for s in testbed.settings:
        m = rx.match(s)
        if m and m["mode"] in modes:
            groups.setdefault(f"{m['corruption']}_{m['mode']}", []).append(s)
    columns: dict[str, pd.Series] = {}
    partial: dict[str, int] = {}
    for key in sorted(groups):
        cells = acc[groups[key]]
        have = cells.notna()
        columns[key] = cells.mean(axis=1, skipna=True).where(have.any(axis=1))
        n_partial = int((have.any(axis=1) & ~have.all(axis=1)).sum())
        if n_partial:
            partial[key] = n_partial
    for s in extra:
        if s in testbed.settings:
            columns[s] = acc[s]
    frame = pd.DataFrame(columns, index=acc.index)
    notes = []
    if partial:
        notes.append("averaged over the severities a model has (not all five): "
                     + ", ".join(f"{k} ({v} model{'s' if v > 1 else ''})" for k, v in partial.items()))
    return frame.mean(axis=1, skipna=False), list(frame.columns), notes


def _taori_er(testbed: Testbed, x: str, y: pd.Series, natural: str, scale: str) -> pd.DataFrame:
    """Taori et al.'s effective robustness of ``y`` (an accuracy per model) and of ``natural``:
    the models with all three accuracies; each trend a least-squares line in ``scale``
    coordinates fitted on the STANDARD models with ``x`` >= 55% whose names mark none of
    :data:`TAORI_FIT_EXCLUDE`."""
    acc = testbed.accuracies
    frame = pd.DataFrame({"model_type": testbed.model_types.reindex(acc.index), "x_acc": acc[x],
                          "synthetic_acc": y.reindex(acc.index), "natural_acc": acc[natural]}).dropna()
    names = frame.index.astype(str)
    in_fit = ((frame["model_type"] == "STANDARD").to_numpy() & ~_name_has(names, TAORI_FIT_EXCLUDE)
              & (frame["x_acc"] >= TAORI_MIN_X).to_numpy())
    frame["in_fit"] = in_fit
    if in_fit.sum() < 2:
        raise DataError(f"testbed {testbed.name!r}: the taori2020 trend needs at least 2 standard models with "
                        f"{x} >= {TAORI_MIN_X:g}% and every accuracy of the recipe; got {int(in_fit.sum())}")
    tx = transform(frame["x_acc"].to_numpy(), scale)
    for col, er in (("synthetic_acc", "synthetic_er"), ("natural_acc", "natural_er")):
        ty = transform(frame[col].to_numpy(), scale)
        fit = stats.linregress(tx[in_fit], ty[in_fit])
        frame[er] = frame[col] - inverse(fit.slope * tx + fit.intercept, scale)
    return frame


def _correlate(frame: pd.DataFrame) -> tuple[float, float, int, list[str]]:
    """Pearson r of ``synthetic_er`` and ``natural_er`` over the rows marked ``in_correlation``."""
    use = frame[frame["in_correlation"]]
    if len(use) < 3:
        raise DataError(f"a correlation needs at least 3 non-standard models with both effective robustnesses; "
                        f"got {len(use)}")
    res = stats.pearsonr(use["synthetic_er"], use["natural_er"])
    return float(res.statistic), float(res.pvalue), len(use), [str(m) for m in use.index]


def _missing_for(testbed: Testbed, recipe: str) -> tuple[list[str], list[str]]:
    """What ``recipe`` needs and ``testbed`` lacks: the synthetic part, and the adversarial part."""
    names = set(testbed.settings)
    rx = re.compile(IMAGENET_C_ANY_MODE)
    modes = {m["mode"] for s in names if (m := rx.match(s))}
    needed = ("in-memory", "on-disk") if recipe == "taori2020" else ("in-memory",)
    synthetic = [f"imagenet-c.<corruption>.<severity>_{mode}" for mode in needed if mode not in modes]
    adversarial = [] if any(re.match(PGD_PATTERN, s) for s in names) else ["pgd.<norm>.eps<epsilon>"]
    return synthetic, adversarial


def synthetic_vs_natural(
    testbed: Testbed,
    recipe: str = "taori2020",
    natural: str = NATURAL_DEFAULT,
    *,
    x: str = "val",
    scale: str = "logit",
    fallback: bool = False,
) -> SyntheticVsNatural:
    """Does robustness to synthetic shifts predict robustness to a natural one?

    Taori et al. 2020 ("Measuring Robustness to Natural Distribution Shifts in Image
    Classification", §4.2, Figure 5) correlate, over the non-standard models, effective
    robustness on synthetic shifts with effective robustness on ImageNetV2. Two recipes
    (:data:`RECIPES`):

    ``"taori2020"`` (theirs, from the paper and the authors' plotting code)
        The synthetic accuracy of a model is the mean accuracy over every ImageNet-C corruption,
        in-memory **and** on-disk, each corruption first averaged over its severities (over the
        severities the model has: see :func:`taori_synthetic_average`), plus Stylized ImageNet
        and greyscale where present. One ``scale`` trend of that average against ``x`` is fitted
        on the STANDARD models with ``x`` >= 55% whose names contain none of ``aws``,
        ``batch64``, ``subsample`` (among the models with ``x``, the average and ``natural``);
        the same for ``natural``. The effective robustness of the average is correlated
        (Pearson) with that on ``natural`` over the non-standard models (types other than
        ``STANDARD`` and ``LOW_ACCURACY_CNN``), subsample variants excluded. The adversarial
        part does the same for the mean accuracy over the PGD settings (``pgd.*``:
        ``pgd.l2.eps0.1``, ``pgd.l2.eps0.5``, ``pgd.linf.eps0.5``, ``pgd.linf.eps2`` in the
        reference testbed), a model needing all of them.
    ``"per-setting"`` (shiftbench's report until now)
        The mean over the in-memory ImageNet-C settings of each setting's effective robustness
        (:func:`synthetic_effective_robustness`, one trend per setting, severities with gaps
        left out), correlated with ``natural``'s effective robustness (trend on the STANDARD
        models) over the models of types other than ``STANDARD`` and ``LOW_ACCURACY_CNN``; the
        adversarial part is the mean of the per-setting effective robustness over the PGD
        settings.

    Parameters
    ----------
    testbed:
        Models x settings accuracies with ``x``, ``natural`` and the recipe's settings.
    recipe:
        ``"taori2020"`` or ``"per-setting"``.
    natural:
        The natural shift (default ImageNetV2 matched frequency in val's format).
    x, scale:
        In-distribution setting and the trend's axis scaling.
    fallback:
        When the testbed lacks settings the recipe needs (e.g. no on-disk ImageNet-C, no PGD),
        use what it has and say so in ``notes`` instead of raising.

    Returns
    -------
    SyntheticVsNatural
        ``r``, ``n``, ``p``, ``models`` and the per-model ``table``; ``adversarial`` the same
        for PGD. ``to_dict()`` gives the JSON of ``shiftbench synthetic-vs-natural --json``.

    Raises
    ------
    DataError
        One line naming the settings the recipe needs and the testbed lacks (unless
        ``fallback``), or a setting ``x``/``natural`` the testbed lacks.
    """
    _check_recipe(recipe)
    testbed.check_setting(x)
    testbed.check_setting(natural)
    missing_syn, missing_adv = _missing_for(testbed, recipe)
    missing = missing_syn + missing_adv
    notes: list[str] = []
    if missing and not fallback:
        raise DataError(f"testbed {testbed.name!r} lacks settings recipe {recipe!r} needs: {', '.join(missing)}; "
                        "evaluate them, or pass fallback=True (--fallback) to use the settings it has")
    if missing:
        notes.append(f"fallback: testbed lacks {', '.join(missing)}; computed without them")
    if recipe == "taori2020":
        main = _taori(testbed, x, natural, scale, adversarial=False)
        adv = None if missing_adv else _taori(testbed, x, natural, scale, adversarial=True)
    else:
        main = _per_setting(testbed, x, natural, scale, adversarial=False)
        adv = None if missing_adv else _per_setting(testbed, x, natural, scale, adversarial=True)
    main.notes = notes + main.notes
    main.adversarial = adv
    return main


def _taori(testbed: Testbed, x: str, natural: str, scale: str, *, adversarial: bool) -> SyntheticVsNatural:
    if adversarial:
        cols = [s for s in testbed.settings if re.match(PGD_PATTERN, s)]
        avg, notes = testbed.accuracies[cols].mean(axis=1, skipna=False), []
    else:
        avg, cols, notes = taori_synthetic_average(testbed)
    if not cols:
        raise DataError(f"testbed {testbed.name!r} has no ImageNet-C, Stylized ImageNet or greyscale settings")
    frame = _taori_er(testbed, x, avg, natural, scale)
    names = frame.index.astype(str)
    frame["in_correlation"] = (~frame["model_type"].isin(STANDARD_LIKE).to_numpy()
                               & ~_name_has(names, TAORI_CORRELATION_EXCLUDE))
    r, p, n, models = _correlate(frame)
    frame.index.name = "model"
    return SyntheticVsNatural("taori2020", testbed.name, x, natural, list(cols), r, p, n, models, frame, notes)


def _per_setting(testbed: Testbed, x: str, natural: str, scale: str, *, adversarial: bool) -> SyntheticVsNatural:
    notes: list[str] = []
    if adversarial:
        settings = {"pgd": [s for s in testbed.settings if re.match(PGD_PATTERN, s)]}
    else:
        settings, left_out = complete_severities(testbed, corruption_settings(testbed))
        if left_out:
            notes.append(f"left out as gaps in the data ({len(left_out)} settings): " + ", ".join(left_out))
    syn = synthetic_effective_robustness(testbed, x, settings, scale)
    nat = effective_robustness(testbed, x, natural, scale, n_resamples=0)
    frame = pd.DataFrame({"model_type": syn["model_type"], "synthetic_er": syn[SYNTHETIC],
                          "natural_er": nat["effective_robustness"].reindex(syn.index),
                          "in_fit": nat["in_fit"].reindex(syn.index).fillna(False).astype(bool)}).dropna()
    frame["in_correlation"] = ~frame["model_type"].isin(STANDARD_LIKE)
    r, p, n, models = _correlate(frame)
    cols = [s for names in settings.values() for s in names]
    return SyntheticVsNatural("per-setting", testbed.name, x, natural, cols, r, p, n, models, frame, notes)
