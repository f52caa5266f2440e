"""``imagenet-reference``: the 338-model testbed of Taori et al. 2020 (package data, MIT)."""
from __future__ import annotations

import re

import pandas as pd

from shiftbench.reference import data_path, register_data_note, register_testbed
from shiftbench.testbed import Testbed

_C_SETTING = re.compile(r"^imagenet-c\.(?P<corruption>\w+)\.(?P<severity>\d)_(?P<mode>in-memory|on-disk)$")


def size_column(setting: str) -> str:
    """The ``dataset_sizes.csv`` column for a setting (ImageNet-C sizes are per corruption)."""
    m = _C_SETTING.match(setting)
    if m:
        return f"{m['corruption']}_{m['mode']}_dataset_size"
    return f"{setting}_dataset_size"


def _read() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    root = data_path("reference", "imagenet")
    acc = pd.read_csv(root / "accuracies.csv").set_index("model")
    raw_sizes = pd.read_csv(root / "dataset_sizes.csv").set_index("model")
    types = pd.read_csv(root / "model_types.csv").set_index("model")
    sizes = pd.DataFrame(
        {s: raw_sizes[size_column(s)] if size_column(s) in raw_sizes else float("nan") for s in acc.columns},
        index=raw_sizes.index,
    )
    meta = types.join(raw_sizes[["arch"]], how="outer")
    meta["tags"] = [("taori2020",)] * len(meta)
    return acc, sizes, meta


def defective_cells(accuracies: pd.DataFrame | None = None) -> pd.DataFrame:
    """The published ImageNet-C cells that are not measurements of a corruption: the accuracy of
    a model on ``imagenet-c.<corruption>.<severity>_*`` equal to its clean ``val`` accuracy (to
    1e-9). In the published files these are 543 cells, all of severity 1 in memory: 18 of the
    19 corruptions for about 30 models (the ``*_aws`` ResNet-50s, the subsampled-ImageNet
    ResNet-50s, several Cadene models, the denoising adversarially trained ones) and
    ``zoom_blur.1`` for 119 models. No corruption at severity 1 leaves a 50,000-image accuracy
    unchanged to five decimals (the on-disk severity-1 cells of the same models are 5-30 points
    lower), so the corruption was not applied. Returns ``model``, ``setting``, ``accuracy``,
    ``val``, sorted."""
    acc = _read()[0] if accuracies is None else accuracies
    rows = []
    for setting in acc.columns:
        if _C_SETTING.match(setting):
            same = (acc[setting] - acc["val"]).abs() < 1e-9
            rows += [(m, setting, float(acc.at[m, setting]), float(acc.at[m, "val"])) for m in acc.index[same]]
    return pd.DataFrame(rows, columns=["model", "setting", "accuracy", "val"]).sort_values(
        ["setting", "model"], ignore_index=True)


#: Published example counts that do not divide the published accuracies, and the counts that
#: do: every one of the 335 accuracies on ImageNet-Sketch is a whole number of its 50,889 images
#: (the dataset's real size; the file says 50,000), and on YTBB-Robust pm-0/pm-10 a whole number
#: of 2,030 anchors (the file says 2,530). The counts enter the Clopper-Pearson intervals.
SIZE_CORRECTIONS = {"imagenet-sketch": 50889, "ytbb-robust_pm0": 2030, "ytbb-robust_pm10": 2030}


def count_mismatches(accuracies: pd.DataFrame, sizes: pd.DataFrame, tol: float = 0.01) -> pd.Series:
    """Per setting, how many accuracies are not a whole number of correct examples out of the
    stated size (``acc * n / 100`` more than ``tol`` from an integer)."""
    n = sizes.reindex(index=accuracies.index, columns=accuracies.columns)
    k = accuracies * n / 100
    off = ((k - k.round()).abs() > tol) & accuracies.notna() & n.notna()
    return off.sum().rename("mismatches")


@register_testbed("imagenet-reference", "Taori et al. 2020: 338 ImageNet models x 213 settings (MIT); "
                  "the 543 ImageNet-C cells equal to clean accuracy left out and 3 example counts corrected "
                  "(see imagenet-reference-raw)")
def imagenet_reference() -> Testbed:
    """Taori et al.'s files with the :func:`defective_cells` left empty (accuracy and size) and the
    example counts of :data:`SIZE_CORRECTIONS` corrected."""
    acc, sizes, meta = _read()
    bad = defective_cells(acc)
    acc, sizes = acc.copy(), sizes.copy()
    for setting, n in SIZE_CORRECTIONS.items():
        sizes[setting] = float(n)
    for setting, models in bad.groupby("setting")["model"]:
        acc.loc[list(models), setting] = float("nan")
        sizes.loc[sizes.index.intersection(list(models)), setting] = float("nan")
    return Testbed(acc, sizes, meta, name="imagenet-reference", source="imagenet-reference")


@register_testbed("imagenet-reference-raw", "Taori et al. 2020 exactly as published, defective ImageNet-C "
                  "cells and example counts included")
def imagenet_reference_raw() -> Testbed:
    acc, sizes, meta = _read()
    return Testbed(acc, sizes, meta, name="imagenet-reference-raw", source="imagenet-reference-raw")


register_data_note("imagenet-reference",
                   "543 published ImageNet-C severity-1 in-memory accuracies equal the model's clean val accuracy "
                   "exactly (the corruption was not applied) and are left out; "
                   "shiftbench.reference.imagenet.defective_cells() lists them.")
register_data_note("imagenet-reference",
                   "Example counts corrected to the ones that divide every published accuracy: ImageNet-Sketch "
                   "50,889 (published 50,000), YTBB-Robust pm-0/pm-10 2,030 (published 2,530).")
