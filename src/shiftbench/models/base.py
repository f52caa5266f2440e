"""What the engine needs from a model: a module on [0, 1] pixels, its preprocessing, metadata.

A :class:`LoadedModel` wraps any classifier so that it takes a float batch ``(B, 3, H, W)`` in
``[0, 1]`` (after the model's own resize and crop) and normalises *inside* the wrapper: shifts
and attacks therefore act on [0, 1] pixels (DESIGN principle 2). Its :class:`Preprocessing` is
taken from the source's own metadata where it has one (torchvision weight transforms, timm's
pretrained config), so a model is evaluated the way its authors evaluated it.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "lanczos")


@dataclass(frozen=True)
class Preprocessing:
    """Resize the shorter side to ``resize``, centre-crop ``input_size``, scale to [0, 1].

    ``mean``/``std`` are applied inside the model wrapper, not here. ``crop_pct`` is
    ``input_size / resize`` (timm's convention; 0.875 for the classic 256 -> 224).
    """

    input_size: int = 224
    resize: int = 256
    interpolation: str = "bilinear"
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD

    @property
    def crop_pct(self) -> float:
        return self.input_size / self.resize

    @property
    def input_hw(self) -> tuple[int, int]:
        """``(H, W)`` of the tensor :meth:`transform` returns (square here; timm configs may not be)."""
        return (self.input_size, self.input_size)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def pixel_dict(self) -> dict[str, Any]:
        """What determines the [0, 1] pixels :meth:`transform` returns (``mean``/``std`` are applied
        inside the model): models with equal ``pixel_dict`` share one decoded batch, and each
        shift runs once for all of them (:func:`shiftbench.evaluate` with several models)."""
        return {"class": type(self).__name__, **{k: v for k, v in self.to_dict().items() if k not in ("mean", "std")}}

    def fingerprint(self) -> str:
        """Short stable hash of the preprocessing (part of every results key)."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:12]

    def transform(self):  # -> Callable[[PIL.Image.Image], torch.Tensor]
        """torchvision transform: PIL RGB image -> float tensor ``(3, input_size, input_size)`` in [0, 1]."""
        import torch  # deferred: loads torch
        from torchvision.transforms import v2 as T  # deferred: loads Pillow, loads torch

        modes = {"nearest": T.InterpolationMode.NEAREST, "bilinear": T.InterpolationMode.BILINEAR,
                 "bicubic": T.InterpolationMode.BICUBIC, "lanczos": T.InterpolationMode.LANCZOS}
        return T.Compose([
            T.PILToTensor(),
            T.Resize(self.resize, interpolation=modes[self.interpolation], antialias=True),
            T.CenterCrop(self.input_size),
            T.ToDtype(torch.float32, scale=True),
        ])


@dataclass
class LoadedModel:
    """A ready-to-run classifier.

    ``module`` maps a [0, 1] batch to logits ``(B, num_classes)``; ``name`` is the name results
    are stored under (for timm models the timm name, so results line up with
    ``timm-reference``); ``fingerprint`` identifies the weights (weight enum, pretrained tag or
    the checkpoint file's sha256) and is part of every results key. ``class_names`` are the
    names of the output classes when the source knows them (torchvision's weight meta).
    """

    spec: str
    name: str
    module: Any  # torch.nn.Module
    preprocessing: Preprocessing
    num_classes: int
    label_space: str = "imagenet-1k"
    fingerprint: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    class_names: list[str] | None = None
