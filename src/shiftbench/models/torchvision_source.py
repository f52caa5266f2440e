"""``torchvision:<builder>[@<WEIGHTS_ENUM_NAME>]``: a torchvision classification model.

Weights are named by their enum member (``resnet50@IMAGENET1K_V2``); without ``@`` the
builder's ``DEFAULT`` weights. Preprocessing comes from the weights' ``transforms()``
(``resize_size``, ``crop_size``, ``interpolation``, ``mean``, ``std``), class count and names from
``weights.meta["categories"]``. The result is named ``<builder>`` for ``IMAGENET1K_V1`` weights
(the names of the imagenet-reference testbed) and ``<builder>@<WEIGHTS>`` otherwise;
``pretrained=False`` gives ``<builder>@untrained`` with random weights and the same preprocessing.
"""
from __future__ import annotations

from typing import Any

from shiftbench.errors import ConfigError, ModelError, did_you_mean
from shiftbench.models.base import INTERPOLATIONS, Preprocessing
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

REFERENCE_WEIGHTS = "IMAGENET1K_V1"


def _builder_and_weights(target: str) -> tuple[str, Any, Any]:
    """``(builder name, builder, weights enum member)`` for ``<builder>[@<WEIGHTS>]``."""
    import torchvision.models as tvm  # deferred: loads Pillow, loads torch

    builder_name, _, weights_name = target.strip().partition("@")
    names = tvm.list_models(module=tvm)
    if builder_name not in names:
        raise ConfigError(did_you_mean("torchvision model", builder_name, names,
                                       "classification builders of torchvision.models.list_models()"))
    builder = tvm.get_model_builder(builder_name)
    enum_cls = tvm.get_model_weights(builder_name)
    weights_name = (weights_name.rpartition(".")[2] or "DEFAULT").upper() if weights_name else "DEFAULT"
    try:
        weights = enum_cls[weights_name]
    except KeyError:
        raise ConfigError(did_you_mean(f"weights for torchvision:{builder_name}", weights_name,
                                       [w.name for w in enum_cls] + ["DEFAULT"])) from None
    return builder_name, builder, weights


def preprocessing_of(weights: Any) -> Preprocessing:
    """The :class:`Preprocessing` of a torchvision weights enum member (from ``weights.transforms()``)."""
    t = weights.transforms()
    size = lambda v: int(v[0] if isinstance(v, (list, tuple)) else v)  # noqa: E731
    interp = getattr(t.interpolation, "value", str(t.interpolation)).lower()
    if interp not in INTERPOLATIONS:
        raise ModelError(f"torchvision weights {weights} use interpolation {interp!r}, "
                         "which shiftbench does not support")
    return Preprocessing(input_size=size(t.crop_size), resize=size(t.resize_size), interpolation=interp,
                         mean=tuple(float(m) for m in t.mean), std=tuple(float(s) for s in t.std))


def _model_type(weights_name: str) -> tuple[str, str]:
    """``(model_type, training_data)``: SWAG weights are pretrained on Instagram-3.6B; every other
    torchvision classification weight is trained on ImageNet-1k alone."""
    if "SWAG" in weights_name:
        return "MORE_DATA", "IG-3.6B (SWAG) + ImageNet-1k"
    return "STANDARD", "ImageNet-1k"


def _metadata(builder_name: str, weights: Any, pretrained: bool) -> dict[str, Any]:
    model_type, training_data = _model_type(weights.name)
    meta = {"arch": builder_name, "model_type": model_type, "training_data": training_data,
            "weights": f"{type(weights).__name__}.{weights.name}", "tags": ("torchvision",)}
    acc = weights.meta.get("_metrics", {}).get("ImageNet-1K", {})
    if acc:
        meta["published_top1"] = acc.get("acc@1")
    if not pretrained:
        meta["tags"] = ("torchvision", "untrained")
    return meta


def _build(target: str, num_classes: int | None, pretrained: bool, spec_text: str) -> Built:
    builder_name, builder, weights = _builder_and_weights(target)
    categories = list(weights.meta["categories"])
    pre = preprocessing_of(weights)
    meta = _metadata(builder_name, weights, pretrained)
    if pretrained:
        if num_classes is not None and num_classes != len(categories):
            raise ConfigError(f"{spec_text}: the weights {weights.name} have {len(categories)} classes, not "
                              f"num_classes={num_classes}; use pretrained=False or a checkpoint for another head")
        try:
            with weights_only_loads():
                net = builder(weights=weights, progress=False)
        except Exception as exc:
            if is_unsafe_pickle_error(exc):
                raise ModelError(refused_pickle_message(f"the cached torchvision weights for {spec_text}",
                                                        exc)) from exc
            import torch.hub  # deferred: loads torch

            file = weights.url.rsplit("/", 1)[-1]
            raise ModelError(
                f"cannot load the torchvision weights {weights.name} of {builder_name} ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''}); without a network, put {file} from {weights.url} "
                f"into {torch.hub.get_dir()}/checkpoints, or pass pretrained=False or checkpoint=") from exc
        name = builder_name if weights.name == REFERENCE_WEIGHTS else f"{builder_name}@{weights.name}"
        fingerprint = f"torchvision:{builder_name}@{weights.name}:{weights.url.rsplit('/', 1)[-1]}"
        return Built(net=net.eval(), preprocessing=pre, num_classes=len(categories), name=name,
                     fingerprint=fingerprint, metadata=meta, class_names=categories)
    n = num_classes or len(categories)
    kwargs: dict[str, Any] = {"num_classes": n}
    # settings torchvision's builders apply only when given weights, so that an untrained
    # architecture takes the same input (and a checkpoint fine-tuned from those weights fits)
    if builder_name.startswith("vit_"):
        kwargs["image_size"] = int(weights.meta.get("min_size", (224,))[0])
    if builder_name in ("inception_v3", "googlenet"):
        kwargs["transform_input"] = True
    try:
        net = builder(weights=None, **kwargs)
    except Exception as exc:  # a builder with fixed-width heads refuses num_classes
        raise ModelError(f"cannot build torchvision:{builder_name} with num_classes={n}: {exc}") from exc
    return Built(net=net.eval(), preprocessing=pre, num_classes=n, name=f"{builder_name}@untrained",
                 fingerprint=untrained_fingerprint(net), metadata=meta,
                 class_names=categories if n == len(categories) else None)


@register_source("torchvision", "torchvision classification builders: torchvision:<builder>[@<WEIGHTS_ENUM_NAME>]")
def load_torchvision(spec: ModelSpec) -> Built:
    """torchvision:<builder>[@<WEIGHTS_ENUM_NAME>]"""
    return _build(spec.target, spec.num_classes, spec.pretrained, spec.spec)


@register_arch_source("torchvision")
def torchvision_arch(target: str, num_classes: int | None) -> Built:
    """Untrained ``<builder>``, with the preprocessing of the named (default: DEFAULT) weights."""
    return _build(target, num_classes, False, f"torchvision:{target}")
