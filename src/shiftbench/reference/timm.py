"""``timm-reference``: timm's published ImageNet results for 1,556 (model, resolution) rows.

Source: the ``results/`` folder of pytorch-image-models (Apache 2.0, package data).

Setting names are aligned with ``imagenet-reference`` where the test set is the same:

=================================  ==========================================  ========
timm file                          shiftbench setting                          examples
=================================  ==========================================  ========
results-imagenet.csv               ``val``                                      50,000
results-imagenet-real.csv          ``val-real`` (ReaL labels; not in Taori)     46,837
results-imagenetv2-matched-...     ``imagenetv2-matched-frequency-format-val``  10,000
results-sketch.csv                 ``imagenet-sketch``                          50,889
results-imagenet-a.csv             ``imagenet-a``                                7,500
results-imagenet-a-clean.csv       ``val-on-imagenet-a-classes``                10,000
results-imagenet-r.csv             ``imagenet-r``                               30,000
results-imagenet-r-clean.csv       ``val-on-imagenet-r-classes``                10,000
=================================  ==========================================  ========

Rows are keyed by (model, img_size). 290 models appear twice, at their train resolution and at
a larger test resolution: the smaller keeps the plain timm name, the larger is named
``<model>@<img_size>`` and tagged ``test-res``. Every row carries ``img_size``, ``param_count``,
``crop_pct``, ``interpolation``, ``pretrained_tag`` and ``pretrain`` in its metadata.

Model type from the pretraining data: :func:`shiftbench.model_types.classify_pretrain` (its
docstring lists the rules; README "The reference testbeds" too); ``UNKNOWN`` rows are listed by
:func:`unclassified_models`, never fitted on by default.
"""
from __future__ import annotations

import pandas as pd

from shiftbench.model_types import UNKNOWN_TYPE, classify_pretrain, timm_arch_pretrain
from shiftbench.reference import data_path, load_testbed, register_testbed
from shiftbench.testbed import Testbed

#: timm results file stem -> (shiftbench setting, number of test examples)
SETTINGS: dict[str, tuple[str, int]] = {
    "imagenet": ("val", 50_000),
    "imagenet-real": ("val-real", 46_837),
    "imagenetv2-matched-frequency": ("imagenetv2-matched-frequency-format-val", 10_000),
    "sketch": ("imagenet-sketch", 50_889),
    "imagenet-a": ("imagenet-a", 7_500),
    "imagenet-a-clean": ("val-on-imagenet-a-classes", 10_000),
    "imagenet-r": ("imagenet-r", 30_000),
    "imagenet-r-clean": ("val-on-imagenet-r-classes", 10_000),
}

def _read_results(stem: str) -> pd.DataFrame:
    frame = pd.read_csv(data_path("reference", "timm", f"results-{stem}.csv"), thousands=",")
    return frame


def _row_names(frame: pd.DataFrame) -> pd.Series:
    """Plain name for a model's smallest img_size, ``model@<img_size>`` for larger ones."""
    smallest = frame.groupby("model")["img_size"].transform("min")
    return frame["model"].where(frame["img_size"] == smallest, frame["model"] + "@" + frame["img_size"].astype(str))


@register_testbed("timm-reference", "timm's published results: 1,556 (model, resolution) rows, 8 settings (Apache 2.0)")
def timm_reference() -> Testbed:
    clean = _read_results("imagenet")
    clean["row"] = _row_names(clean)
    key = clean.set_index(["model", "img_size"])["row"]
    acc, sizes = {}, {}
    for stem, (setting, n) in SETTINGS.items():
        frame = _read_results(stem).set_index(["model", "img_size"])
        top1 = frame["top1"].reindex(key.index)
        acc[setting] = pd.Series(top1.to_numpy(), index=key.to_numpy())
        sizes[setting] = pd.Series(float(n), index=key.to_numpy()).where(acc[setting].notna())
    arch_pretrain = timm_arch_pretrain()
    classified = [classify_pretrain(m, arch_pretrain) for m in clean["model"]]
    meta = pd.DataFrame({
        "model_type": [c[0] for c in classified],
        "arch": clean["model"].str.partition(".")[0].to_numpy(),
        "tags": [("timm", "test-res") if r != m else ("timm",) for r, m in zip(clean["row"], clean["model"])],
        "pretrain": [c[1] for c in classified],
        "timm_model": clean["model"].to_numpy(),
        "pretrained_tag": clean["model"].str.partition(".")[2].to_numpy(),
        "img_size": clean["img_size"].to_numpy(),
        "param_count": clean["param_count"].to_numpy(),
        "crop_pct": clean["crop_pct"].to_numpy(),
        "interpolation": clean["interpolation"].to_numpy(),
    }, index=clean["row"].to_numpy())
    return Testbed(pd.DataFrame(acc), pd.DataFrame(sizes), meta, name="timm-reference", source="timm-reference")


def unclassified_models() -> list[str]:
    """timm-reference models whose type the rules could not derive (type ``UNKNOWN``)."""

    tb = load_testbed("timm-reference")
    return [m for m in tb.models if tb.model_types[m] == UNKNOWN_TYPE]
