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

Model type from the pretraining data (:func:`classify_pretrain`), first rule that fires:

1. the pretrained tag names extra data (``in21k``, ``in22k``, ``in12k``, ``jft``, ``ig1b``,
   ``yfcc``, ``laion``, ``openai``, ``clip``, ``webli``, ``m38m``/``m30m``, ``swag``, ``seer``,
   ``ssld``, ``dfn``, ``datacomp``, ``lvd142m``, ``metaclip``, ``cc12m``, ``indomain``)
   -> ``MORE_DATA``;
2. ``adv`` / ``ens_adv`` (adversarially trained Inception models) -> ``LP_ADV``;
3. ``ap`` (AdvProp: adversarial examples as augmentation) and ``am`` / ``ram`` (AugMix) ->
   ``ROBUST_INTV``, as Taori et al. label the same interventions;
4. the tag names only ImageNet-1k (``in1k``; distillation from an ImageNet-1k teacher and
   self-supervised pretraining on ImageNet-1k included) -> ``STANDARD``;
5. otherwise the architecture's entry in timm's ``model_metadata-in1k.csv`` decides with the
   same rules (``in1k``/``in1k-dist`` -> STANDARD, ``in1k-adv`` -> LP_ADV, ``in1k-ap`` ->
   ROBUST_INTV, anything else -> MORE_DATA);
6. otherwise ``UNKNOWN`` (listed by :func:`unclassified_models`, never fitted on by default).
"""
from __future__ import annotations

import re

import pandas as pd

from shiftbench.reference import data_path, register_testbed
from shiftbench.testbed import UNKNOWN_TYPE, Testbed

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

_MORE_DATA = re.compile(
    r"in21k|in22k|in12k|jft|ig1b|ig3b|yfcc|laion|openai|clip|webli|m38m|m30m|swag|seer|ssld|"
    r"dfn|datacomp|lvd142m|metaclip|cc12m|indomain")
_LP_ADV = re.compile(r"(^|_)(ens_)?adv(_|$)")
_ROBUST_INTV = re.compile(r"(^|_)(ap|am|ram)(_|$)")
_IN1K = re.compile(r"in1k")
_METADATA_TYPES = {"in1k": "STANDARD", "in1k-dist": "STANDARD", "in1k-adv": "LP_ADV", "in1k-ap": "ROBUST_INTV"}


def classify_pretrain(model: str, arch_pretrain: dict[str, str] | None = None) -> tuple[str, str]:
    """``(model_type, reason)`` for a timm model name ``arch.tag`` (rules in the module docstring)."""
    arch, _, tag = model.partition(".")
    if _MORE_DATA.search(tag):
        return "MORE_DATA", f"tag names extra data: {_MORE_DATA.search(tag).group(0)}"  # type: ignore[union-attr]
    if _LP_ADV.search(tag):
        return "LP_ADV", "adversarially trained"
    if _ROBUST_INTV.search(tag):
        return "ROBUST_INTV", "AdvProp/AugMix"
    if _IN1K.search(tag):
        return "STANDARD", "ImageNet-1k only"
    pretrain = (arch_pretrain or {}).get(arch)
    if pretrain is not None:
        return _METADATA_TYPES.get(pretrain, "MORE_DATA"), f"timm metadata: {pretrain}"
    return UNKNOWN_TYPE, "no rule matched"


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
    meta_src = pd.read_csv(data_path("reference", "timm", "model_metadata-in1k.csv"))
    arch_pretrain = dict(zip(meta_src["model"], meta_src["pretrain"]))
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
    from shiftbench.reference import load_testbed

    tb = load_testbed("timm-reference")
    return [m for m in tb.models if tb.model_types[m] == UNKNOWN_TYPE]
