"""Where do your models sit against a testbed? Effective robustness, its interval and its rank.

The natural distribution shifts of Taori et al. (2020) are :data:`NATURAL_SHIFTS`, each with the
in-distribution setting it is compared against: the ImageNet validation set for ImageNetV2 and
ImageNet-Sketch, the validation set restricted to the shift's classes for ObjectNet,
ImageNet-R, ImageNet-A and the video anchors, and pm-0 (anchor frames) for pm-10. ImageNet-A
is fitted around the ResNet-50 it was filtered against: by default as its authors did, two
independent lines split at ResNet-50's accuracy (recipe ``taori2020``), or one continuous hinge
(recipe ``hinge``, shiftbench's variant). :func:`fit_shift` picks the recipe; the report, the
commands and :func:`place_models` fit every shift through it.

:func:`place_models` places given models of a testbed - typically your own, merged into
``imagenet-reference`` - against the trend of every shift: for model ``f`` on shift
``(x, y)``,

    rho(f) = acc_y(f) - beta(acc_x(f))          (Taori et al. 2020, §2)

where ``beta`` is the trend fitted on the ``fit_on`` models (the standard models by default),
with the interval of :func:`~shiftbench.analysis.effective_robustness` and the rank of ``rho(f)``
among every model of the testbed evaluated on both settings.

A (model, shift) that cannot be placed is never dropped in silence: ``attrs["skipped"]`` lists it
with the setting(s) the model lacks and what each is (:func:`setting_description`), e.g. a
table with ``val`` and ``objectnet`` but no ``val-on-objectnet-classes``; :func:`skipped_lines`
says the same in a few lines for the command line and the report.
"""
from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pandas as pd

from shiftbench.analysis.recipes import FIT_RECIPES, PIVOT_RECIPES, PIVOTS, PUBLISHED_TESTBED, check_recipe
from shiftbench.analysis.robustness import effective_robustness
from shiftbench.analysis.trend import (
    DEFAULT_FIT_ON,
    TrendFit,
    TwoLineTrendFit,
    fit_piecewise_trend,
    fit_trend,
    fit_two_line_trend,
)
from shiftbench.errors import ConfigError, ShiftbenchError
from shiftbench.testbed import Testbed

PLACEMENT_COLUMNS = ["model", "shift", "x", "y", "x_acc", "y_acc", "predicted_y_acc", "effective_robustness",
                     "er_low", "er_high", "rank", "n_ranked", "in_fit_range"]
#: the fields of each entry of ``place_models(...).attrs["skipped"]``
SKIPPED_FIELDS = ["model", "shift", "x", "y", "missing", "reason"]
#: the reason of a (model, shift) with neither of its two settings (grouped in :func:`skipped_lines`)
NEITHER = "no accuracy on either of its two settings"


@dataclass(frozen=True)
class ShiftPair:
    """A shift to analyse: ``y`` against ``x``; piecewise around the first ``pivot`` model found."""

    label: str
    x: str
    y: str
    pivot: tuple[str, ...] = ()

    @property
    def slug(self) -> str:
        """A lowercase ``[a-z0-9-]`` identifier of the label (``ImageNet-A`` -> ``imagenet-a``), as
        typed on the command line. Not a file name: labels that differ only in punctuation or
        case share it (the report names files with ``shiftbench.report.tables.file_slug``)."""
        return re.sub(r"[^a-z0-9]+", "-", self.label.lower()).strip("-")


NATURAL_SHIFTS: tuple[ShiftPair, ...] = (
    ShiftPair("ImageNetV2", "val", "imagenetv2-matched-frequency-format-val"),
    ShiftPair("ObjectNet", "val-on-objectnet-classes", "objectnet-1.0-beta"),
    ShiftPair("ImageNet-R", "val-on-imagenet-r-classes", "imagenet-r"),
    ShiftPair("ImageNet-Sketch", "val", "imagenet-sketch"),
    ShiftPair("ImageNet-A", "val-on-imagenet-a-classes", "imagenet-a",
              pivot=PIVOTS[("val-on-imagenet-a-classes", "imagenet-a")]),
    ShiftPair("ImageNet-Vid-Robust anchors", "val-on-vid-robust-classes", "imagenet-vid-robust_pm0"),
    ShiftPair("ImageNet-Vid-Robust pm-10", "imagenet-vid-robust_pm0", "imagenet-vid-robust_pm10"),
    ShiftPair("YTBB-Robust anchors", "val-on-ytbb-robust-classes", "ytbb-robust_pm0"),
    ShiftPair("YTBB-Robust pm-10", "ytbb-robust_pm0", "ytbb-robust_pm10"),
)


def is_published(testbed: Testbed) -> bool:
    """Whether ``testbed`` is the published testbed (``imagenet-reference``, also merged with your
    tables: ``imagenet-reference+mine``), where the authors' recipe is the default."""
    return testbed.name == PUBLISHED_TESTBED or testbed.name.startswith(PUBLISHED_TESTBED + "+")


def default_recipe(testbed: Testbed, shift: ShiftPair, *, pivot: str | float | None = None,
                   fit_on: str | Iterable[str] | None = DEFAULT_FIT_ON) -> str:
    """The recipe :func:`fit_shift` uses when none is named: around a pivot (``pivot``, or one of
    ``shift.pivot`` in the testbed: ImageNet-A's ResNet-50) the authors' two lines ``taori2020``;
    otherwise ``taori2020`` on the published testbed (:func:`is_published`) and ``standard``
    elsewhere. Models chosen with ``fit_on`` (other than STANDARD) take shiftbench's variants,
    ``hinge`` around a pivot and ``standard`` otherwise: the authors' recipe chooses its own."""
    own = _selectors(fit_on) == DEFAULT_FIT_ON
    if pivot is not None or any(m in testbed.models for m in shift.pivot):
        return "taori2020" if own else "hinge"
    return "taori2020" if own and is_published(testbed) else "standard"


def _selectors(fit_on: str | Iterable[str] | None) -> tuple[str, ...]:
    return DEFAULT_FIT_ON if fit_on is None else ((fit_on,) if isinstance(fit_on, str) else tuple(fit_on))


def check_fit_recipe(recipe: str) -> str:
    """``recipe`` if it names a trend recipe (:data:`~shiftbench.analysis.recipes.FIT_RECIPES` or,
    around a pivot, :data:`~shiftbench.analysis.recipes.PIVOT_RECIPES`); otherwise the one-line
    ConfigError of :func:`~shiftbench.analysis.recipes.check_recipe`, suggesting the closest name."""
    if recipe in FIT_RECIPES or recipe in PIVOT_RECIPES:
        return recipe
    near_pivot = difflib.get_close_matches(recipe, [r for r in PIVOT_RECIPES if r not in FIT_RECIPES], n=1, cutoff=0.5)
    near_line = difflib.get_close_matches(recipe, list(FIT_RECIPES), n=1, cutoff=0.5)
    return check_recipe("imagenet-a" if near_pivot and not near_line else "fit", recipe)


def _check_own_models(recipe: str | None, fit_on: str | Iterable[str] | None) -> None:
    """The authors' recipe chooses its own models: ``fit_on`` other than STANDARD is a ConfigError."""
    if recipe == "taori2020" and _selectors(fit_on) != DEFAULT_FIT_ON:
        raise ConfigError(f"recipe 'taori2020' fits the STANDARD models the authors' figures fit; --fit-on "
                          f"{', '.join(_selectors(fit_on))} asks for others: drop --fit-on or choose recipe "
                          "'standard' (or 'hinge' around a pivot)")


def fit_shift(testbed: Testbed, shift: ShiftPair, scale: str = "logit", *,
              fit_on: str | Iterable[str] | None = DEFAULT_FIT_ON, recipe: str | None = None,
              pivot: str | float | None = None) -> TrendFit | TwoLineTrendFit:
    """The trend of ``shift`` on ``testbed`` by ``recipe`` (default :func:`default_recipe`).

    Around a pivot - ``pivot`` (a model or a percentage), else the first of ``shift.pivot`` the
    testbed has (ImageNet-A's ResNet-50) - ``taori2020`` is the authors' two lines
    (:func:`~shiftbench.analysis.trend.fit_two_line_trend`), ``hinge`` shiftbench's continuous
    hinge (:func:`~shiftbench.analysis.trend.fit_piecewise_trend`) and ``standard`` one line that
    ignores the pivot. Without one, ``taori2020`` and ``standard`` are the lines of
    :func:`~shiftbench.analysis.trend.fit_trend`; ``hinge`` needs a pivot. A recipe asked of a
    testbed without what it needs (ImageNet-A's pivot model, the setting of the figure's display
    rule) is a ConfigError naming it.
    """
    found = pivot if pivot is not None else next((m for m in shift.pivot if m in testbed.models), None)
    named = recipe is not None
    if recipe is None:
        recipe = default_recipe(testbed, shift, pivot=found, fit_on=fit_on)
    check_fit_recipe(recipe)
    if named and found is None and recipe in PIVOT_RECIPES and (shift.pivot or recipe not in FIT_RECIPES):
        needs = (f"the pivot model {' or '.join(shift.pivot)}, which testbed {testbed.name!r} lacks" if shift.pivot
                 else "a pivot model or accuracy (pivot=, --pivot)")
        raise ConfigError(f"recipe {recipe!r} for {shift.label} splits the trend at a pivot: it needs {needs}")
    _check_own_models(recipe, fit_on)
    if found is not None and recipe == "taori2020":
        return fit_two_line_trend(testbed, shift.x, shift.y, found, scale)
    if found is not None and recipe == "hinge":
        return fit_piecewise_trend(testbed, shift.x, shift.y, found, scale, fit_on=fit_on)
    if pivot is not None:
        raise ConfigError(f"a pivot ({pivot}) splits the trend: choose recipe 'taori2020' or 'hinge', not {recipe!r}")
    return fit_trend(testbed, shift.x, shift.y, scale, fit_on=fit_on, recipe=recipe)


def as_shift(item: object) -> ShiftPair:
    """A :class:`ShiftPair` from a ShiftPair, ``(x, y)`` or ``(label, x, y)``; an ``(x, y)`` of a
    natural shift gets its name and pivot."""
    if isinstance(item, ShiftPair):
        return item
    if isinstance(item, Sequence) and not isinstance(item, str) and len(item) in (2, 3):
        *label, x, y = (str(v) for v in item)
        known = next((s for s in NATURAL_SHIFTS if (s.x, s.y) == (x, y)), None)
        if known is not None:
            return ShiftPair(label[0], x, y, known.pivot) if label else known
        return ShiftPair(label[0] if label else f"{y} vs {x}", x, y)
    raise ConfigError(f"shift {item!r}: give (x, y), (label, x, y) or a ShiftPair")


def place_models(
    testbed: Testbed,
    models: Sequence[str],
    shifts: Sequence[tuple[str, str]] | None = None,
    *,
    scale: str = "logit",
    fit_on: str | Iterable[str] | None = DEFAULT_FIT_ON,
    n_resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    recipe: str | None = None,
) -> pd.DataFrame:
    """Effective robustness of ``models`` on every shift, its interval and rank in ``testbed``.

    For each shift ``(x, y)`` the trend ``beta`` is fitted on the ``fit_on`` models (STANDARD by
    default; your models enter the fit only if ``fit_on`` selects them), and each of ``models``
    evaluated on both settings gets ``rho = acc_y - beta(acc_x)`` in percentage points (Taori et
    al. 2020, §2) exactly as :func:`~shiftbench.analysis.effective_robustness` computes it: the
    interval ``[y_lo - b_hi, y_hi - b_lo]`` combines the Clopper-Pearson interval of ``acc_y``
    and the bootstrap band of the trend, both at ``confidence``.

    Parameters
    ----------
    testbed:
        The models x settings table holding both the models to place and the ones to rank
        against (e.g. ``imagenet-reference`` merged with your own table).
    models:
        The models to place.
    shifts:
        ``(x, y)`` or ``(label, x, y)`` pairs or :class:`ShiftPair` objects; default
        :data:`NATURAL_SHIFTS` (those whose two settings the testbed has; ImageNet-A piecewise
        around ResNet-50, as in the report). A default shift whose trend cannot be fitted is
        skipped (an explicit one raises).
    scale, fit_on, n_resamples, seed, confidence:
        Trend scaling, the models it is fitted on, and the bootstrap band / interval.
    recipe:
        How each trend is fitted (:func:`fit_shift`): default :func:`default_recipe` (the authors'
        ``taori2020`` around ImageNet-A's pivot and on the published testbed); ``"hinge"`` fits
        the hinge where a shift has a pivot and the ``standard`` line elsewhere.

    Returns
    -------
    DataFrame, one row per (model, shift) with both accuracies, model-major in the order given:
    ``model, shift, x, y, x_acc, y_acc, predicted_y_acc, effective_robustness, er_low, er_high,
    rank, n_ranked, in_fit_range``. ``rank`` is 1 for the largest effective robustness among
    the ``n_ranked`` models of the testbed with both accuracies (ties share the best rank);
    ``in_fit_range`` says whether ``x_acc`` lies within the fitted models' range of ``x``
    accuracies (outside it the trend is extrapolated). ``attrs["fits"]`` maps each shift's
    name to its :class:`~shiftbench.analysis.TrendFit`.

    ``attrs["skipped"]`` lists every (model, shift) not placed, model-major: a dict of
    :data:`SKIPPED_FIELDS` ``model, shift, x, y, missing, reason`` where ``missing`` holds the
    setting(s) the model has no accuracy on (by default every natural shift counts, also those
    the testbed lacks a setting of) and ``reason`` says what a lone missing setting is ("ObjectNet
    needs val-on-objectnet-classes (ImageNet validation on the 125 ImageNet classes that map to
    ObjectNet's 113)"), or why the shift has no trend (``missing`` empty).
    ``attrs["unplaced"]`` lists the models placed on no shift.

    Examples
    --------
    >>> tb = Testbed.from_frame(pd.DataFrame({
    ...     "model": ["s1", "s2", "s3", "mine"], "model_type": ["STANDARD"] * 3 + ["UNKNOWN"],
    ...     "val": [60.0, 70.0, 80.0, 72.0], "v2": [50.0, 60.0, 70.0, 66.0]}))
    >>> p = place_models(tb, ["mine"], [("val", "v2")], scale="linear", n_resamples=0)
    >>> row = p.iloc[0]
    >>> row["shift"], round(float(row["effective_robustness"]), 2), int(row["rank"]), int(row["n_ranked"])
    ('v2 vs val', 4.0, 1, 4)
    """
    wanted = [testbed.check_model(str(m)) for m in models]
    if recipe is not None:               # a wrong recipe fails here, not once per shift
        check_fit_recipe(recipe)
        _check_own_models(recipe, fit_on)
    if shifts is None:
        pairs = [s for s in NATURAL_SHIFTS if s.x in testbed.settings and s.y in testbed.settings]
    else:
        pairs = [as_shift(s) for s in shifts]
        for s in pairs:
            testbed.check_setting(s.x)
            testbed.check_setting(s.y)
    rows, fits = [], {}
    skipped = [] if shifts is not None else [  # natural shifts the testbed lacks a setting of
        row for s in NATURAL_SHIFTS if s not in pairs for m in wanted if (row := _skip(testbed, m, s)) is not None]
    for shift in pairs:
        try:
            fit = fit_shift(testbed, shift, scale, fit_on=fit_on, recipe=_shift_recipe(testbed, shift, recipe))
        except ShiftbenchError as exc:
            if shifts is not None:
                raise
            skipped += skipped_without_trend(testbed, wanted, shift, str(exc))
            continue
        fits[shift.label] = fit
        er = effective_robustness(testbed, shift.x, shift.y, fit=fit, confidence=confidence,
                                  n_resamples=n_resamples, seed=seed)
        rank = er["effective_robustness"].rank(ascending=False, method="min")
        lo, hi = fit.x_range
        for model in wanted:
            if model not in er.index:
                skipped.append(_skip(testbed, model, shift))
                continue
            r = er.loc[model]
            rows.append({"model": model, "shift": shift.label, "x": shift.x, "y": shift.y,
                         "x_acc": r["x_acc"], "y_acc": r["y_acc"], "predicted_y_acc": r["predicted_y_acc"],
                         "effective_robustness": r["effective_robustness"], "er_low": r["er_low"],
                         "er_high": r["er_high"], "rank": int(rank[model]), "n_ranked": len(er),
                         "in_fit_range": bool(lo <= r["x_acc"] <= hi)})
    out = pd.DataFrame(rows, columns=PLACEMENT_COLUMNS)
    if len(out):
        order = {m: i for i, m in enumerate(wanted)}
        out = out.sort_values("model", key=lambda s: s.map(order), kind="stable").reset_index(drop=True)
    out = out.astype({"rank": int, "n_ranked": int, "in_fit_range": bool})
    order = {m: i for i, m in enumerate(wanted)}
    skipped = sorted((r for r in skipped if r), key=lambda r: order[r["model"]])   # model-major, as the rows
    out.attrs.update(fits=fits, skipped=skipped, scale=scale, confidence=confidence,
                     unplaced=[m for m in wanted if m not in set(out["model"])])
    return out


def _shift_recipe(testbed: Testbed, shift: ShiftPair, recipe: str | None) -> str | None:
    """``recipe`` for one of several shifts: ``hinge`` is a pivot's recipe, so a shift without a
    pivot in the testbed takes the ``standard`` line (shiftbench's protocol before ``taori2020``)."""
    if recipe == "hinge" and not any(m in testbed.models for m in shift.pivot):
        return "standard"
    return recipe


def setting_description(setting: str) -> str | None:
    """What a setting is, from the registry of evaluation settings (``shiftbench list settings
    --long``): ``val-on-objectnet-classes`` -> "ImageNet validation on the 125 ImageNet classes
    that map to ObjectNet's 113"; ``None`` for a setting not registered there."""
    from shiftbench.settings import list_settings  # deferred: builds the registry of settings (views, shifts)

    return list_settings().get(setting)


def _skip(testbed: Testbed, model: str, shift: ShiftPair) -> dict[str, object] | None:
    """The ``attrs["skipped"]`` entry of ``model`` on ``shift`` when it lacks a setting (``None``
    when it has both): the missing setting(s), and what a lone missing one is."""
    missing = [s for s in (shift.x, shift.y)
               if s not in testbed.settings or not pd.notna(testbed.accuracies.at[model, s])]
    if not missing:
        return None
    if len(missing) == 2:
        reason = NEITHER
    else:
        what = setting_description(missing[0])
        reason = f"{shift.label} needs {missing[0]}" + (f" ({what})" if what else "")
    return dict(zip(SKIPPED_FIELDS, (model, shift.label, shift.x, shift.y, missing, reason)))


def skipped_without_trend(testbed: Testbed, models: Sequence[str], shift: ShiftPair,
                          why: str) -> list[dict[str, object]]:
    """``attrs["skipped"]`` entries of ``models`` on a ``shift`` whose trend could not be fitted
    (``why``, the error): a model lacking a setting is listed with it, as :func:`place_models`
    lists it; one with both accuracies gets ``missing=[]`` and ``reason`` "no trend: ..."."""
    return [_skip(testbed, m, shift) or dict(zip(SKIPPED_FIELDS, (m, shift.label, shift.x, shift.y, [],
                                                                  f"no trend: {why}")))
            for m in models]


def skipped_lines(skipped: Sequence[dict[str, object]]) -> list[str]:
    """``attrs["skipped"]`` of :func:`place_models` in a few lines: one per (model, shift) that
    lacks one setting ("mine on ObjectNet: needs val-on-objectnet-classes (...)"), the shifts
    with neither setting grouped by model, and the shifts without a trend grouped by shift.

    >>> skipped_lines([{"model": "m", "shift": "S", "x": "a", "y": "b", "missing": ["a"], "reason": "S needs a"},
    ...                {"model": "m", "shift": "T", "x": "a", "y": "c", "missing": ["a", "c"], "reason": NEITHER}])
    ['m on S: needs a', 'm on T: no accuracy on either of its two settings']
    """
    neither: dict[str, list[str]] = {}
    per_shift: dict[tuple[str, str], list[str]] = {}
    lines = []
    for r in skipped:
        model, shift, reason = str(r["model"]), str(r["shift"]), str(r["reason"])
        if reason == NEITHER:
            neither.setdefault(model, []).append(shift)
        elif r["missing"]:
            lines.append(f"{model} on {shift}: {reason.removeprefix(shift + ' ')}")
        else:
            per_shift.setdefault((shift, reason), []).append(model)
    lines += [f"{', '.join(models)} on {shift}: {reason}" for (shift, reason), models in per_shift.items()]
    by_shifts: dict[tuple[str, ...], list[str]] = {}
    for model, shifts in neither.items():
        by_shifts.setdefault(tuple(shifts), []).append(model)
    lines += [f"{', '.join(models)} on {', '.join(shifts)}: {NEITHER}" for shifts, models in by_shifts.items()]
    return lines


def _recipes_note(fits: dict[str, TrendFit | TwoLineTrendFit]) -> str:
    """Each fit's recipe and the STANDARD models it left out, per reason: ``recipe taori2020 on
    every shift; left out: 1 'aws' in the name (every shift); the pivot model resnet50: ImageNet-A
    1; ...`` (a model lacking one of a shift's two accuracies counts as "without both accuracies")."""
    by_recipe: dict[str, list[str]] = {}
    reasons: dict[str, dict[str, int]] = {}
    for label, f in fits.items():
        by_recipe.setdefault(f.recipe, []).append(label)
        for why, n in f.excluded:
            key = "without both accuracies" if why.startswith("no accuracy on ") else why
            reasons.setdefault(key, {})[label] = reasons.get(key, {}).get(label, 0) + n
    text = "recipe " + ("; ".join(f"{r} ({', '.join(labels)})" for r, labels in by_recipe.items())
                        if len(by_recipe) > 1 else f"{next(iter(by_recipe))} on every shift")
    parts = []
    for why, per_shift in reasons.items():
        counts = set(per_shift.values())
        if len(per_shift) == len(fits) and len(counts) == 1 and len(fits) > 1:
            parts.append(f"{counts.pop()} {why} (every shift)")
        else:
            parts.append(f"{why}: " + ", ".join(f"{label} {n}" for label, n in per_shift.items()))
    return text + "; left out: " + ("; ".join(parts) if parts else "none")


def fitted_on_note(fits: dict[str, TrendFit | TwoLineTrendFit], testbed: Testbed, models: Iterable[str] = ()) -> str:
    """One line naming the models the trends were fitted on (selectors, types and counts), each
    fit's recipe and what it left out (per shift, per reason), and which of ``models`` (your
    models) are among the fitted."""
    if not fits:
        return "No trend could be fitted."
    selectors = sorted({s for f in fits.values() for s in f.fit_on}) or ["the given points"]
    fitted = sorted({m for f in fits.values() for m in f.models})
    types = testbed.model_types.reindex(fitted).value_counts()
    counts = sorted({f.n_models for f in fits.values()})
    n = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    line = (f"Trends fitted on the {', '.join(selectors)} models of {testbed.name}: {len(fitted)} models (types: "
            + ", ".join(f"{t} {c}" for t, c in types.items()) + f"), {n} per shift with both accuracies")
    line += "; " + _recipes_note(fits)
    mine = [m for m in models if m in set(fitted)]
    line += (f"; of your models, {', '.join(mine)} {'is' if len(mine) == 1 else 'are'} in the fit." if mine
             else "; your models are not part of the fit.")
    return line


__all__ = ["ShiftPair", "NATURAL_SHIFTS", "fit_shift", "default_recipe", "is_published", "check_fit_recipe",
           "place_models", "PLACEMENT_COLUMNS", "SKIPPED_FIELDS",
           "fitted_on_note", "setting_description", "skipped_lines", "skipped_without_trend"]
