"""Common-corruption summaries: per-corruption averages, mCE and relative mCE.

Hendrycks & Dietterich 2019 ("Benchmarking Neural Network Robustness to Common Corruptions
and Perturbations", §3): with ``E^f_{s,c}`` the top-1 error (percent) of model ``f`` on
corruption ``c`` at severity ``s``,

    CE^f_c          = sum_s E^f_{s,c} / sum_s E^AlexNet_{s,c}
    relative CE^f_c = sum_s (E^f_{s,c} - E^f_clean) / sum_s (E^AlexNet_{s,c} - E^AlexNet_clean)

and mCE / relative mCE are their means over the 15 benchmark corruptions (the four extra ones
are reported but not averaged). The AlexNet errors come from the testbed when it has AlexNet,
else from the shipped ``imagenet-reference`` (whose ``alexnet`` row is the normaliser the paper
used). Settings are named ``imagenet-c.<corruption>.<severity>_<mode>``.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from shiftbench.errors import ConfigError, DataError
from shiftbench.reference import load_testbed
from shiftbench.testbed import Testbed

BENCHMARK = ("gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur", "glass_blur", "motion_blur",
             "zoom_blur", "snow", "frost", "fog", "brightness", "contrast", "elastic_transform", "pixelate",
             "jpeg_compression")
EXTRA = ("speckle_noise", "gaussian_blur", "spatter", "saturate")
SEVERITIES = (1, 2, 3, 4, 5)
#: ImageNet-C cells: the published JPEGs (``on-disk``) or generated in memory (``in-memory``).
MODES = ("on-disk", "in-memory")
#: The mCE recipe: (name, one-line description, paper).
RECIPE = ("hendrycks2019",
          ("mean over the 15 benchmark corruptions of the summed top-1 error over five severities "
           "divided by AlexNet's (CE), on the on-disk ImageNet-C cells when the testbed has them"),
          ("Hendrycks & Dietterich 2019, Benchmarking Neural Network Robustness to Common Corruptions and "
           "Perturbations (ICLR), §3"))


def default_mode(testbed: Testbed) -> str:
    """``on-disk`` when ``testbed`` has every on-disk benchmark setting (15 corruptions x 5
    severities), else ``in-memory``: the default cells of :func:`mce`."""
    have = set(testbed.settings)
    on_disk = all(f"imagenet-c.{c}.{s}_on-disk" in have for c in BENCHMARK for s in SEVERITIES)
    return "on-disk" if on_disk else "in-memory"


def _errors(testbed: Testbed, model: str, mode: str, clean: str,
            fallback: str | None = None, force: Iterable[str] = ()) -> tuple[pd.DataFrame, float, dict[str, str]]:
    """Errors per corruption x severity, the clean error, and the mode each corruption's cells
    came from (``fallback`` when the ``mode`` cells are incomplete, or for the corruptions in
    ``force``)."""
    testbed.check_model(model)
    acc = testbed.accuracies.loc[model]
    rows, used = {}, {}
    for c in BENCHMARK + EXTRA:
        vals = [acc.get(f"imagenet-c.{c}.{s}_{mode}", np.nan) for s in SEVERITIES]
        used[c] = mode
        if fallback and (c in force or not np.isfinite(vals).all()):
            vals = [acc.get(f"imagenet-c.{c}.{s}_{fallback}", np.nan) for s in SEVERITIES]
            used[c] = fallback
        rows[c] = [100.0 - v for v in vals]
    clean_acc = acc.get(clean, np.nan)
    return pd.DataFrame(rows, index=list(SEVERITIES)).T, 100.0 - float(clean_acc), used


def corruption_accuracy(testbed: Testbed, model: str, *, mode: str = "in-memory") -> pd.Series:
    """Mean accuracy (percent) over the five severities of each corruption (NaN if any is missing)."""
    err, _, _ = _errors(testbed, model, mode, "val")
    return (100.0 - err).mean(axis=1, skipna=False).rename(model)


def mce(
    testbed: Testbed,
    model: str,
    *,
    mode: str | None = None,
    fallback_mode: str | None = "auto",
    clean: str = "val",
    normaliser: str = "alexnet",
    reference: Testbed | None = None,
) -> dict[str, object]:
    """mCE and relative mCE of ``model`` (percent), with the per-corruption CE table.

    ``mode`` picks the ImageNet-C cells: ``None`` (default) takes ``on-disk`` when the testbed
    has every on-disk benchmark setting (the published mCE numbers, e.g. ResNet-50 76.7 and
    AugMix 65.3, are on the on-disk ImageNet-C JPEGs), else ``in-memory``; :func:`default_mode`.
    A corruption whose five ``mode`` cells are incomplete, for the model or the normaliser, uses
    its ``fallback_mode`` cells for both (``"auto"``: the other mode; ``None``: no fallback; the
    reference testbed has glass blur only on disk: it was too slow to generate in memory).
    Returns ``{"mCE", "relative_mCE", "mode", "recipe", "table"}`` (``mode`` the one used,
    ``recipe`` :data:`RECIPE`'s name) where ``table`` has one row per corruption
    (``CE``, ``relative_CE``, ``mean_error``, ``benchmark``, and the ``mode`` and
    ``normaliser_mode`` whose cells were used, so a fallback is visible). Raises DataError naming the
    first missing setting when a benchmark corruption is incomplete.
    """
    mode = default_mode(testbed) if mode is None else mode
    if mode not in MODES:
        raise ConfigError(f"unknown ImageNet-C mode {mode!r}; choose one of {', '.join(MODES)}")
    if fallback_mode == "auto":
        fallback_mode = next(m for m in MODES if m != mode)
    err, clean_err, used = _errors(testbed, model, mode, clean, fallback_mode)
    if normaliser in testbed.models and np.isfinite(testbed.accuracies.loc[normaliser].get(clean, np.nan)):
        ref_tb = testbed
    else:

        ref_tb = reference or load_testbed("imagenet-reference")
    ref_err, ref_clean, ref_used = _errors(ref_tb, normaliser, mode, clean, fallback_mode)
    mixed = [c for c in used if used[c] != ref_used[c]]
    if mixed:   # model and normaliser from the same cells: the fallback for both
        err, clean_err, used = _errors(testbed, model, mode, clean, fallback_mode, force=mixed)
        ref_err, ref_clean, ref_used = _errors(ref_tb, normaliser, mode, clean, fallback_mode, force=mixed)
    missing = [(c, s) for c in BENCHMARK for s in SEVERITIES if not np.isfinite(err.at[c, s])]
    if missing:
        c, s = missing[0]
        raise DataError(f"model {model!r} has no accuracy on 'imagenet-c.{c}.{s}_{mode}' ({len(missing)} "
                        "benchmark cells missing); evaluate all 15 corruptions x 5 severities for mCE")
    if not np.isfinite(clean_err):
        raise DataError(f"model {model!r} has no accuracy on {clean!r}, needed for the relative mCE")
    table = pd.DataFrame({
        "CE": 100.0 * err.sum(axis=1, skipna=False) / ref_err.sum(axis=1, skipna=False),
        "relative_CE": 100.0 * (err - clean_err).sum(axis=1, skipna=False)
        / (ref_err - ref_clean).sum(axis=1, skipna=False),
        "mean_error": err.mean(axis=1, skipna=False),
        "benchmark": [c in BENCHMARK for c in err.index],
        "mode": [used[c] for c in err.index],
        "normaliser_mode": [ref_used[c] for c in err.index],
    })
    bench = table[table["benchmark"]]
    return {"mCE": float(bench["CE"].mean()), "relative_mCE": float(bench["relative_CE"].mean()), "mode": mode,
            "recipe": RECIPE[0], "table": table}
