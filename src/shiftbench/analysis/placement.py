"""Where do your models sit against a testbed? Effective robustness, its interval and its rank.

The natural distribution shifts of Taori et al. (2020) are :data:`NATURAL_SHIFTS`, each with the
in-distribution setting it is compared against: the ImageNet validation set for ImageNetV2 and
ImageNet-Sketch, the validation set restricted to the shift's classes for ObjectNet,
ImageNet-R, ImageNet-A and the video anchors, and pm-0 (anchor frames) for pm-10. ImageNet-A
is fitted piecewise around the ResNet-50 it was filtered against (:func:`fit_shift`; the
report fits every shift through the same function).

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

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pandas as pd

from shiftbench.analysis.robustness import effective_robustness
from shiftbench.analysis.trend import DEFAULT_FIT_ON, TrendFit, fit_piecewise_trend, fit_trend
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
    ShiftPair("ImageNet-A", "val-on-imagenet-a-classes", "imagenet-a", pivot=("resnet50", "resnet50.tv_in1k")),
    ShiftPair("ImageNet-Vid-Robust anchors", "val-on-vid-robust-classes", "imagenet-vid-robust_pm0"),
    ShiftPair("ImageNet-Vid-Robust pm-10", "imagenet-vid-robust_pm0", "imagenet-vid-robust_pm10"),
    ShiftPair("YTBB-Robust anchors", "val-on-ytbb-robust-classes", "ytbb-robust_pm0"),
    ShiftPair("YTBB-Robust pm-10", "ytbb-robust_pm0", "ytbb-robust_pm10"),
)


def fit_shift(testbed: Testbed, shift: ShiftPair, scale: str = "logit", *,
              fit_on: str | Iterable[str] | None = DEFAULT_FIT_ON) -> TrendFit:
    """The trend of ``shift`` on ``testbed``: piecewise around the first of ``shift.pivot`` that
    the testbed has (ImageNet-A's ResNet-50), else linear (:func:`fit_trend`)."""
    pivot = next((m for m in shift.pivot if m in testbed.models), None)
    if pivot is not None:
        return fit_piecewise_trend(testbed, shift.x, shift.y, pivot, scale, fit_on=fit_on)
    return fit_trend(testbed, shift.x, shift.y, scale, fit_on=fit_on)


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
            fit = fit_shift(testbed, shift, scale, fit_on=fit_on)
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


def fitted_on_note(fits: dict[str, TrendFit], testbed: Testbed, models: Iterable[str] = ()) -> str:
    """One line naming the models the trends were fitted on (selectors, types and counts) and
    which of ``models`` (your models) are among them."""
    if not fits:
        return "No trend could be fitted."
    selectors = sorted({s for f in fits.values() for s in f.fit_on}) or ["the given points"]
    fitted = sorted({m for f in fits.values() for m in f.models})
    types = testbed.model_types.reindex(fitted).value_counts()
    counts = sorted({f.n_models for f in fits.values()})
    n = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    line = (f"Trends fitted on the {', '.join(selectors)} models of {testbed.name}: {len(fitted)} models (types: "
            + ", ".join(f"{t} {c}" for t, c in types.items()) + f"), {n} per shift with both accuracies")
    mine = [m for m in models if m in set(fitted)]
    line += (f"; of your models, {', '.join(mine)} {'is' if len(mine) == 1 else 'are'} in the fit." if mine
             else "; your models are not part of the fit.")
    return line


__all__ = ["ShiftPair", "NATURAL_SHIFTS", "fit_shift", "place_models", "PLACEMENT_COLUMNS", "SKIPPED_FIELDS",
           "fitted_on_note", "setting_description", "skipped_lines", "skipped_without_trend"]
