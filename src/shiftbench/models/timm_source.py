"""``timm:<name>``: ``timm.create_model(name, pretrained=pretrained)``.

``name`` is a timm architecture with an optional pretrained tag (``resnet50.a1_in1k``; without a
tag timm picks its default). Preprocessing is timm's own eval transform: every field of
``timm.data.resolve_data_config({}, model=m)`` (the pretrained config is part of timm's code, so
this needs no download) is honoured - ``input_size`` ``(C, H, W)`` (non-square too),
``interpolation``, ``crop_pct`` (``resize = floor(size / crop_pct)`` per edge) and ``crop_mode``
(``center``, ``squash`` or ``border``) - as :class:`TimmPreprocessing`, which rebuilds
``timm.data.create_transform`` up to but not including its ``Normalize``: shifts act on the [0, 1]
image after resize and crop, and ``mean``/``std`` are applied inside the model wrapper. The result
is named by the full timm name ``<arch>.<tag>`` so results line up with the ``timm-reference``
testbed (``<arch>.<tag>@untrained`` for ``pretrained=False``), and its model type is derived with
:func:`shiftbench.reference.timm.classify_pretrain`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from shiftbench.errors import ConfigError, ModelError, did_you_mean
from shiftbench.model_types import classify_pretrain, timm_arch_pretrain
from shiftbench.models.base import Preprocessing
from shiftbench.models.registry import (
    Built,
    ModelSpec,
    is_unsafe_pickle_error,
    refused_pickle_message,
    register_arch_source,
    register_source,
    untrained_fingerprint,
    weights_only_loads,
)


def _check_name(name: str) -> None:
    import timm  # deferred: loads Pillow, loads safetensors, loads torch

    arch, _, tag = name.partition(".")
    if not timm.is_model(arch):
        choices = timm.list_models() + timm.list_pretrained()
        raise ConfigError(did_you_mean("timm model", name, choices, "see timm.list_models() / timm.list_pretrained()"))
    if tag:
        tags = timm.list_pretrained(f"{arch}.*")
        if name not in tags:
            raise ConfigError(did_you_mean(f"pretrained tag for timm:{arch}", name, tags) if tags else
                              f"timm model {arch!r} has no pretrained tags; use timm:{arch} with pretrained=False")


CROP_MODES = ("center", "squash", "border")
#: the fields of a timm data config (``resolve_data_config``) that :class:`TimmPreprocessing` honours
DATA_CONFIG_FIELDS = frozenset({"input_size", "interpolation", "mean", "std", "crop_pct", "crop_mode"})


@dataclass(frozen=True)
class TimmPreprocessing(Preprocessing):
    """timm's eval transform (``timm.data.transforms_imagenet_eval``) without its ``Normalize``.

    ``input_size``/``resize`` are the width of the crop and of the resize (``floor(W / crop_pct)``);
    ``input_height``/``resize_height`` are their heights when the input is not square (``None`` for
    a square one). ``crop_mode`` is timm's: ``center`` resizes the shorter side (keeping the aspect
    ratio) and centre-crops; ``squash`` resizes to ``(resize_height, resize)`` ignoring the aspect
    ratio and centre-crops; ``border`` fits the longer side, then centre-crops or pads with
    ``round(255 * mean)``. The output is a float ``(3, H, W)`` tensor in [0, 1].

    >>> p = TimmPreprocessing(input_size=240, resize=266, interpolation="bicubic", crop_mode="squash")
    >>> p.to_dict()["input_size"], p.to_dict()["resize"], p.to_dict()["crop_mode"]
    ((240, 240), (266, 266), 'squash')
    """

    crop_mode: str = "center"
    input_height: int | None = None
    resize_height: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.crop_mode not in CROP_MODES:
            raise ConfigError(f"unknown timm crop_mode {self.crop_mode!r}; expected one of {', '.join(CROP_MODES)}")
        if (self.input_height is None) != (self.resize_height is None):
            raise ConfigError("give both input_height and resize_height (a non-square input) or neither (square)")

    @property
    def input_hw(self) -> tuple[int, int]:
        """``(H, W)`` of the tensor the transform returns."""
        return (self.input_height or self.input_size, self.input_size)

    @property
    def resize_hw(self) -> tuple[int, int]:
        """``(H, W)`` timm's ``scale_size``: ``floor(input_size / crop_pct)`` per edge."""
        return (self.resize_height or self.resize, self.resize)

    def to_dict(self) -> dict[str, Any]:
        """What determines the pixels (part of every results key): sizes as ``(H, W)``, crop mode,
        interpolation, mean/std."""
        return {"input_size": self.input_hw, "resize": self.resize_hw, "crop_mode": self.crop_mode,
                "interpolation": self.interpolation, "mean": self.mean, "std": self.std}

    def pixel_dict(self) -> dict[str, Any]:
        """As :meth:`Preprocessing.pixel_dict`; ``border`` pads with the mean, so it keeps ``mean``."""
        d = super().pixel_dict()
        return {**d, "mean": self.mean} if self.crop_mode == "border" else d

    def transform(self):  # -> Callable[[PIL.Image.Image], torch.Tensor]
        """The steps of ``timm.data.create_transform(is_training=False, ...)`` before ``Normalize``."""
        from timm.data.transforms import MaybeToTensor  # deferred: loads Pillow, loads safetensors, loads torch
        from torchvision import transforms  # deferred: loads Pillow, loads torch

        return transforms.Compose([*self._resize_steps(), MaybeToTensor()])

    def split_transform(self) -> tuple[Any, Any] | None:
        """As :meth:`Preprocessing.split_transform`: the resize and crop steps then the image as a
        uint8 tensor, and the conversion ``MaybeToTensor`` does last (``to(float32).div(255)``)."""
        if type(self).transform is not TimmPreprocessing.transform:
            return None
        from torchvision import transforms  # deferred: loads Pillow, loads torch

        return transforms.Compose([*self._resize_steps(), transforms.PILToTensor()]), div_255

    def _resize_steps(self) -> list[Any]:
        from timm.data.transforms import (  # deferred: loads Pillow, loads safetensors, loads torch
            CenterCropOrPad,
            ResizeKeepRatio,
            str_to_interp_mode,
        )
        from torchvision import transforms  # deferred: loads Pillow, loads torch

        size, scale = self.input_hw, self.resize_hw
        if self.crop_mode == "squash":
            steps = [transforms.Resize(scale, interpolation=str_to_interp_mode(self.interpolation)),
                     transforms.CenterCrop(size)]
        elif self.crop_mode == "border":
            steps = [ResizeKeepRatio(scale, interpolation=self.interpolation, longest=1.0),
                     CenterCropOrPad(size, fill=[round(255 * v) for v in self.mean])]
        elif scale[0] == scale[1]:
            steps = [transforms.Resize(scale[0], interpolation=str_to_interp_mode(self.interpolation)),
                     transforms.CenterCrop(size)]
        else:
            steps = [ResizeKeepRatio(scale, interpolation=self.interpolation), transforms.CenterCrop(size)]
        return steps


def div_255(batch: Any) -> Any:
    """A uint8 image batch as float in [0, 1], as ``torchvision.transforms.functional.to_tensor``
    (timm's ``MaybeToTensor``) converts one image, on the batch's device."""
    import torch  # deferred: loads torch

    return batch.to(dtype=torch.get_default_dtype()).div(255)


def preprocessing_from_config(cfg: dict[str, Any]) -> TimmPreprocessing:
    """:class:`TimmPreprocessing` of a resolved timm data config (``resolve_data_config``)."""
    from timm.data.transforms import str_to_interp_mode  # deferred: loads Pillow, loads safetensors, loads torch

    unknown = sorted(set(cfg) - DATA_CONFIG_FIELDS)
    if unknown:
        raise ModelError(f"timm data config has fields shiftbench does not apply ({', '.join(unknown)}); "
                         "update shiftbench.models.timm_source.TimmPreprocessing for this timm version")
    _, h, w = (int(v) for v in cfg["input_size"])
    interp = str(cfg.get("interpolation") or "bilinear").lower()
    try:
        str_to_interp_mode(interp)
    except KeyError:
        raise ModelError(f"timm data config has interpolation {interp!r}, which timm's eval transform "
                         "cannot apply") from None
    crop_pct = float(cfg.get("crop_pct") or 0.875)
    return TimmPreprocessing(
        input_size=w, resize=int(math.floor(w / crop_pct)), interpolation=interp,
        mean=tuple(float(v) for v in cfg["mean"]), std=tuple(float(v) for v in cfg["std"]),
        crop_mode=str(cfg.get("crop_mode") or "center"),
        input_height=None if h == w else h, resize_height=None if h == w else int(math.floor(h / crop_pct)))


def preprocessing_of(model: Any) -> tuple[TimmPreprocessing, dict[str, Any]]:
    """``(TimmPreprocessing, data config)`` of a timm model from its pretrained config."""
    from timm.data import resolve_data_config  # deferred: loads Pillow, loads safetensors, loads torch

    cfg = resolve_data_config({}, model=model)
    return preprocessing_from_config(cfg), cfg


def model_type_of(name: str) -> tuple[str, str, str]:
    """``(model_type, training_data, reason)`` for a full timm name, by timm-reference's rules."""
    model_type, reason = classify_pretrain(name, timm_arch_pretrain())
    in1k = model_type in ("STANDARD", "ROBUST_INTV", "LP_ADV")
    return model_type, ("ImageNet-1k" if in1k else f"more than ImageNet-1k ({reason})"), reason


def _build(name: str, num_classes: int | None, pretrained: bool, spec_text: str) -> Built:
    import timm  # deferred: loads Pillow, loads safetensors, loads torch

    name = name.strip()
    _check_name(name)
    kwargs = {} if num_classes is None else {"num_classes": num_classes}
    if pretrained and num_classes is not None:
        from timm.models import get_pretrained_cfg  # deferred: loads Pillow, loads safetensors, loads torch

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
