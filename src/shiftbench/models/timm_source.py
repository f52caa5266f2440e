"""``timm:<name>``: ``timm.create_model(name, pretrained=pretrained)``.

``name`` is a timm architecture with an optional pretrained tag (``resnet50.a1_in1k``; without a
tag timm picks its default). Preprocessing comes from ``timm.data.resolve_data_config({}, model=m)``
(the pretrained config is part of timm's code, so this needs no download): ``input_size``,
``interpolation``, ``mean``, ``std`` and ``resize = floor(input_size / crop_pct)`` as in timm's own
eval transform. The result is named by the full timm name ``<arch>.<tag>`` so results line up with
the ``timm-reference`` testbed (``<arch>.<tag>@untrained`` for ``pretrained=False``), and its
model type is derived with :func:`shiftbench.reference.timm.classify_pretrain`.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

from shiftbench.errors import ConfigError, ModelError, did_you_mean
from shiftbench.models.base import INTERPOLATIONS, Preprocessing
from shiftbench.models.registry import (Built, ModelSpec, is_unsafe_pickle_error, refused_pickle_message,
                                        register_arch_source, register_source, untrained_fingerprint,
                                        weights_only_loads)


def _check_name(name: str) -> None:
    import timm

    arch, _, tag = name.partition(".")
    if not timm.is_model(arch):
        choices = timm.list_models() + timm.list_pretrained()
        raise ConfigError(did_you_mean("timm model", name, choices, "see timm.list_models() / timm.list_pretrained()"))
    if tag:
        tags = timm.list_pretrained(f"{arch}.*")
        if name not in tags:
            raise ConfigError(did_you_mean(f"pretrained tag for timm:{arch}", name, tags) if tags else
                              f"timm model {arch!r} has no pretrained tags; use timm:{arch} with pretrained=False")


def preprocessing_of(model: Any) -> tuple[Preprocessing, dict[str, Any]]:
    """``(Preprocessing, data config)`` of a timm model from its pretrained config."""
    from timm.data import resolve_data_config

    cfg = resolve_data_config({}, model=model)
    size = int(cfg["input_size"][-1])
    interp = str(cfg.get("interpolation", "bilinear")).lower()
    if interp not in INTERPOLATIONS:
        interp = "bicubic" if interp == "random" else "bilinear"
    crop_pct = float(cfg.get("crop_pct") or 0.875)
    pre = Preprocessing(input_size=size, resize=int(math.floor(size / crop_pct)), interpolation=interp,
                        mean=tuple(float(v) for v in cfg["mean"]), std=tuple(float(v) for v in cfg["std"]))
    return pre, cfg


@lru_cache(maxsize=1)
def _arch_pretrain() -> dict[str, str]:
    import pandas as pd

    from shiftbench.reference import data_path

    meta = pd.read_csv(data_path("reference", "timm", "model_metadata-in1k.csv"))
    return dict(zip(meta["model"], meta["pretrain"]))


def model_type_of(name: str) -> tuple[str, str, str]:
    """``(model_type, training_data, reason)`` for a full timm name, by timm-reference's rules."""
    from shiftbench.reference.timm import classify_pretrain

    model_type, reason = classify_pretrain(name, _arch_pretrain())
    in1k = model_type in ("STANDARD", "ROBUST_INTV", "LP_ADV")
    return model_type, ("ImageNet-1k" if in1k else f"more than ImageNet-1k ({reason})"), reason


def _build(name: str, num_classes: int | None, pretrained: bool, spec_text: str) -> Built:
    import timm

    name = name.strip()
    _check_name(name)
    kwargs = {} if num_classes is None else {"num_classes": num_classes}
    if pretrained and num_classes is not None:
        from timm.models import get_pretrained_cfg

        cfg = get_pretrained_cfg(name)
        if cfg is not None and cfg.num_classes != num_classes:
            raise ConfigError(f"{spec_text}: the pretrained weights have {cfg.num_classes} classes, not "
                              f"num_classes={num_classes} (a new head would be untrained); use pretrained=False "
                              "or a checkpoint")
    try:
        if pretrained:
            with weights_only_loads():
                net = timm.create_model(name, pretrained=True, **kwargs)
        else:
            net = timm.create_model(name, pretrained=False, **kwargs)
    except Exception as exc:
        if is_unsafe_pickle_error(exc):
            raise ModelError(refused_pickle_message(f"the cached timm weights for {spec_text}", exc)) from exc
        hint = ("; without a network (or with HF_HUB_OFFLINE=1) the weights must already be in the Hugging Face "
                "cache; or pass pretrained=False or checkpoint=") if pretrained else ""
        raise ModelError(f"cannot create timm model {name!r} ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''}){hint}") from exc
    cfg = net.pretrained_cfg
    full = f"{cfg.get('architecture') or name.partition('.')[0]}" + (f".{cfg['tag']}" if cfg.get("tag") else "")
    pre, data_cfg = preprocessing_of(net)
    model_type, training_data, reason = model_type_of(full)
    meta: dict[str, Any] = {"arch": full.partition(".")[0], "model_type": model_type, "training_data": training_data,
                            "model_type_reason": reason, "timm_model": full, "pretrained_tag": cfg.get("tag") or "",
                            "crop_pct": float(data_cfg.get("crop_pct") or 0.875),
                            "crop_mode": data_cfg.get("crop_mode", "center"),
                            "tags": ("timm",) if pretrained else ("timm", "untrained")}
    n = int(net.num_classes)
    if pretrained:
        fingerprint = f"timm:{full}:{cfg.get('hf_hub_id') or cfg.get('url') or ''}"
        return Built(net=net.eval(), preprocessing=pre, num_classes=n, name=full, fingerprint=fingerprint,
                     metadata=meta)
    return Built(net=net.eval(), preprocessing=pre, num_classes=n, name=f"{full}@untrained",
                 fingerprint=untrained_fingerprint(net), metadata=meta)


@register_source("timm", "timm models by full name: timm:<arch>[.<pretrained_tag>]")
def load_timm(spec: ModelSpec) -> Built:
    """timm:<arch>[.<pretrained_tag>]"""
    return _build(spec.target, spec.num_classes, spec.pretrained, spec.spec)


@register_arch_source("timm")
def timm_arch(target: str, num_classes: int | None) -> Built:
    """Untrained ``timm.create_model(target, pretrained=False)`` with its pretrained config's preprocessing."""
    return _build(target, num_classes, False, f"timm:{target}")
