"""The model-type vocabulary, and the rule that types a timm model by its pretrained tag.

Shared by the model loaders (which type what they load), the testbed (which types every row)
and the reference testbeds; numpy/pandas-free and torch-free, so every floor may import it.

``MODEL_TYPES`` are the types of the published testbed (Taori et al. 2020, Appendix) plus
``UNKNOWN``. A timm model's type comes from its pretraining data (:func:`classify_pretrain`);
the first rule that fires:

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

import csv
import re
from functools import lru_cache
from pathlib import Path

#: Model types used by the published testbed (Taori et al. 2020, Appendix) and by shiftbench.
MODEL_TYPES: dict[str, str] = {
    "STANDARD": "trained on the in-distribution training set without a robustness intervention",
    "ROBUST_INTV": "a robustness intervention (augmentation, architecture, training objective)",
    "LP_ADV": "l_p adversarially trained",
    "MORE_DATA": "trained on substantially more data than the in-distribution training set",
    "LOW_ACCURACY_CNN": "early-stopped or subsampled-data CNNs",
    "UNKNOWN": "no type given",
}
UNKNOWN_TYPE = "UNKNOWN"

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


@lru_cache(maxsize=1)
def timm_arch_pretrain() -> dict[str, str]:
    """Architecture -> pretraining data, from timm's ``model_metadata-in1k.csv`` (package data)."""
    path = Path(__file__).resolve().parent / "data" / "reference" / "timm" / "model_metadata-in1k.csv"
    with open(path, newline="") as fh:
        return {row["model"]: row["pretrain"] for row in csv.DictReader(fh)}
