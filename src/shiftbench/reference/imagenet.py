"""``imagenet-reference``: the 338-model testbed of Taori et al. 2020 (package data, MIT)."""
from __future__ import annotations

import re

import pandas as pd

from shiftbench.reference import data_path, register_testbed
from shiftbench.testbed import Testbed

_C_SETTING = re.compile(r"^imagenet-c\.(?P<corruption>\w+)\.(?P<severity>\d)_(?P<mode>in-memory|on-disk)$")


def size_column(setting: str) -> str:
    """The ``dataset_sizes.csv`` column for a setting (ImageNet-C sizes are per corruption)."""
    m = _C_SETTING.match(setting)
    if m:
        return f"{m['corruption']}_{m['mode']}_dataset_size"
    return f"{setting}_dataset_size"


@register_testbed("imagenet-reference", "Taori et al. 2020: 338 ImageNet models x 213 settings (MIT)")
def imagenet_reference() -> Testbed:
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
    return Testbed(acc, sizes, meta, name="imagenet-reference", source="imagenet-reference")
