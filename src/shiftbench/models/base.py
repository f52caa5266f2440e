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
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from numbers import Integral, Real
from typing import Any

from shiftbench.errors import ConfigError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "lanczos")


def _size(value: Any, what: str) -> int:
    """A positive pixel count (a numpy or torch integer too), else a ConfigError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, Integral) and not (
            hasattr(value, "item") and isinstance(getattr(value, "ndim", 1), int) and value.ndim == 0):
        raise ConfigError(f"preprocessing {what} {value!r} must be a whole number of pixels, e.g. 224")
    n = int(value.item() if hasattr(value, "item") else value)
    if n < 1:
        raise ConfigError(f"preprocessing {what} {value!r} must be a positive whole number of pixels, e.g. 224")
    return n


def _channels(value: Any, what: str) -> tuple[float, ...]:
    """``mean``/``std`` as a tuple of 1 or 3 Python floats (from a tuple, list, numpy array or
    tensor), else a ConfigError: a string or a normalised-away value is never stored as text."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable) and not hasattr(value, "tolist"):
        raise ConfigError(f"preprocessing {what} {value!r} must be 3 numbers (one per RGB channel), "
                          "e.g. (0.485, 0.456, 0.406)")
    items = value.tolist() if hasattr(value, "tolist") else list(value)
    items = [v.item() if hasattr(v, "item") else v for v in (items if isinstance(items, list) else [items])]
    if len(items) not in (1, 3) or not all(isinstance(v, Real) and not isinstance(v, bool) for v in items):
        raise ConfigError(f"preprocessing {what} {value!r} must be 3 numbers (one per RGB channel), "
                          "e.g. (0.485, 0.456, 0.406)")
    out = tuple(float(v) for v in items)
    if not all(v == v and abs(v) != float("inf") for v in out):
        raise ConfigError(f"preprocessing {what} {value!r} must be finite numbers")
    return out


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

    def __post_init__(self) -> None:
        """Validated at the boundary: sizes are positive ints, ``mean``/``std`` tuples of 1 or 3
        Python floats (a list, numpy array or tensor is accepted; the store holds numbers, never
        their text), ``std`` positive; a :class:`ConfigError` names the field otherwise."""
        for field_name in ("input_size", "resize"):
            object.__setattr__(self, field_name, _size(getattr(self, field_name), field_name))
        for field_name in ("mean", "std"):
            object.__setattr__(self, field_name, _channels(getattr(self, field_name), field_name))
        if len(self.mean) != len(self.std):
            raise ConfigError(f"preprocessing mean {self.mean} and std {self.std} differ in length; give 3 values each")
        if any(not s > 0 for s in self.std):
            raise ConfigError(f"preprocessing std {self.std} must be positive")
        if type(self) is Preprocessing and self.interpolation not in INTERPOLATIONS:
            raise ConfigError(f"preprocessing interpolation {self.interpolation!r}: use one of "
                              + ", ".join(INTERPOLATIONS))

    def with_input_size(self, size: int) -> Preprocessing:
        """The same preprocessing at ``size`` px: the shorter side resized to ``size`` and a
        ``size`` x ``size`` centre crop (no border crop: ``crop_pct`` 1, as small models are
        trained on whole images); interpolation, ``mean`` and ``std`` are kept."""
        size = _size(size, "input_size")
        extra = {"input_height": None, "resize_height": None} if hasattr(self, "input_height") else {}
        return replace(self, input_size=size, resize=size, **extra)

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

        return T.Compose([*self._uint8_steps(), T.ToDtype(torch.float32, scale=True)])

    def _uint8_steps(self) -> list[Any]:
        from torchvision.transforms import v2 as T  # deferred: loads Pillow, loads torch

        modes = {"nearest": T.InterpolationMode.NEAREST, "bilinear": T.InterpolationMode.BILINEAR,
                 "bicubic": T.InterpolationMode.BICUBIC, "lanczos": T.InterpolationMode.LANCZOS}
        return [T.PILToTensor(), T.Resize(self.resize, interpolation=modes[self.interpolation], antialias=True),
                T.CenterCrop(self.input_size)]

    def split_transform(self) -> tuple[Any, Any] | None:
        """:meth:`transform` in two halves, ``(head, tail)``: ``head`` maps a PIL image to the uint8
        tensor ``(3, H, W)`` that :meth:`transform` converts last, ``tail`` maps a batch of those
        to the float [0, 1] batch :meth:`transform` gives, by the same operation. The engine runs
        ``head`` in its decode workers and ``tail`` where the batch goes (the GPU), so a quarter
        of the bytes cross processes and the bus; the pixels are the same. ``None`` for a
        subclass with its own :meth:`transform` (the engine then runs that one whole)."""
        if type(self).transform is not Preprocessing.transform:
            return None
        from torchvision.transforms import v2 as T  # deferred: loads Pillow, loads torch

        return T.Compose(self._uint8_steps()), scale_uint8


def scale_uint8(batch: Any) -> Any:
    """A uint8 image batch as float32 in [0, 1], as torchvision's ``ToDtype(torch.float32,
    scale=True)`` converts (the last step of :meth:`Preprocessing.transform`), on its device."""
    import torch  # deferred: loads torch
    from torchvision.transforms.v2 import functional as F  # deferred: loads Pillow, loads torch

    return F.to_dtype_image(batch, torch.float32, scale=True)


@dataclass
class LoadedModel:
    """A ready-to-run classifier.

    ``module`` maps a [0, 1] batch to logits ``(B, num_classes)``: a
    :class:`~shiftbench.models.wrapper.Normalized` around the network (every source builds one);
    a hand-built one whose ``module`` is a bare network gets that wrapper, with the
    ``preprocessing``'s ``mean``/``std``, when it enters an evaluation
    (:func:`~shiftbench.models.objects.prepare_loaded`) - give ``mean=(0, 0, 0), std=(1, 1, 1)``
    for a network that takes [0, 1] pixels. ``name`` is the name results are stored under (for
    timm models the timm name, so results line up with ``timm-reference``); ``fingerprint``
    identifies the weights (weight enum, pretrained tag or the checkpoint file's sha256) and is
    part of every results key; left empty, it is the hash of the module's weights and code
    (:func:`~shiftbench.models.objects.object_fingerprint`), taken at each evaluation, so changed
    weights are never served from the store. ``class_names`` are the names of the output
    classes when the source knows them (torchvision's weight meta).
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
