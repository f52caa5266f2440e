"""``open_clip:<arch>@<pretrained_tag>`` (optional extra ``shiftbench[clip]``): a zero-shot
ImageNet classifier built from class names (Radford et al. 2021, §3.1.4).

The classifier's weights are the normalised mean text embedding of the 80 OpenAI ImageNet
prompt templates ("a photo of a {}." ...) filled with each ImageNet class name (torchvision's
``categories``, in class-index order); logits are ``logit_scale * cos(image, class)``, so the
softmax is the model's own. Preprocessing is open_clip's (``get_model_preprocess_cfg``):
shortest side resized to the input size, centre crop, bicubic, the CLIP mean/std. The model
type is ``MORE_DATA``; the training data is the pretrained tag. Named ``<arch>@<tag>``.
"""
from __future__ import annotations

from typing import Any

from shiftbench.errors import ConfigError, ModelError, did_you_mean
from shiftbench.models.base import INTERPOLATIONS, Preprocessing
from shiftbench.models.builtin import imagenet_class_names
from shiftbench.models.registry import (
    Built,
    ModelSpec,
    is_unsafe_pickle_error,
    refused_pickle_message,
    register_source,
    untrained_fingerprint,
    weights_only_loads,
)


def _open_clip() -> Any:
    try:
        import open_clip  # deferred: optional dependency
    except ImportError as exc:
        raise ModelError("open_clip models need the optional extra: install shiftbench[clip] "
                         "(pip install 'shiftbench[clip]', which brings open_clip_torch)") from exc
    return open_clip


def _zero_shot_module(model: Any, classifier: Any, logit_scale: float) -> Any:
    import torch  # deferred: loads torch
    from torch import nn  # deferred: loads torch

    class ZeroShotClassifier(nn.Module):
        """``logit_scale * normalize(encode_image(x)) @ classifier`` (classifier: (dim, classes))."""

        def __init__(self) -> None:
            super().__init__()
            self.clip = model
            self.register_buffer("classifier", classifier.detach().float())
            self.logit_scale = logit_scale

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            features = nn.functional.normalize(self.clip.encode_image(x).float(), dim=-1)
            return self.logit_scale * features @ self.classifier

    return ZeroShotClassifier()


def _preprocessing(open_clip: Any, model: Any) -> tuple[Preprocessing, str]:
    get_cfg = getattr(open_clip, "get_model_preprocess_cfg", None)
    cfg = dict(get_cfg(model)) if get_cfg else {}
    size = cfg.get("size", getattr(getattr(model, "visual", None), "image_size", 224))
    size = int(size[-1] if isinstance(size, (tuple, list)) else size)
    interp = str(cfg.get("interpolation") or "bicubic")
    interp = interp if interp in INTERPOLATIONS else "bicubic"
    mean = tuple(float(v) for v in (cfg.get("mean") or open_clip.OPENAI_DATASET_MEAN))
    std = tuple(float(v) for v in (cfg.get("std") or open_clip.OPENAI_DATASET_STD))
    # 'shortest' (CLIP): resize the shorter side to the input size and centre crop, i.e. crop_pct 1
    return Preprocessing(input_size=size, resize=size, interpolation=interp, mean=mean, std=std), \
        str(cfg.get("resize_mode") or "shortest")


@register_source("open_clip", "open_clip zero-shot ImageNet classifiers: open_clip:<arch>@<pretrained_tag> "
                              "(extra shiftbench[clip])")
def load_open_clip(spec: ModelSpec) -> Built:
    """open_clip:<arch>@<pretrained_tag>"""
    import torch  # deferred: loads torch

    open_clip = _open_clip()
    arch, _, tag = spec.target.strip().partition("@")
    if arch not in open_clip.list_models():
        raise ConfigError(did_you_mean("open_clip model", arch, open_clip.list_models()))
    tags = list(open_clip.list_pretrained_tags_by_model(arch))
    if spec.pretrained and tag not in tags:
        raise ConfigError(did_you_mean(f"pretrained tag for open_clip:{arch}", tag or "(none)", tags,
                                       f"specs look like open_clip:{arch}@{tags[0] if tags else '<tag>'}"))
    if spec.num_classes not in (None, 1000):
        raise ConfigError(f"{spec.spec}: the zero-shot head has the 1000 ImageNet classes, "
                          f"not num_classes={spec.num_classes}")
    try:
        with weights_only_loads():
            model = open_clip.create_model(arch, pretrained=tag if spec.pretrained else None)
    except Exception as exc:
        if is_unsafe_pickle_error(exc):
            raise ModelError(refused_pickle_message(f"the cached open_clip weights for {spec.spec}", exc)) from exc
        raise ModelError(f"cannot create open_clip model {arch}@{tag} ({type(exc).__name__}: {exc}); nothing is "
                         "downloaded offline: populate the Hugging Face / open_clip cache first") from exc
    model.eval()
    from open_clip.zero_shot_classifier import build_zero_shot_classifier  # deferred: optional dependency
    from open_clip.zero_shot_metadata import OPENAI_IMAGENET_TEMPLATES  # deferred: optional dependency


    names = imagenet_class_names()
    with torch.no_grad():
        classifier = build_zero_shot_classifier(model, tokenizer=open_clip.get_tokenizer(arch), classnames=names,
                                                templates=OPENAI_IMAGENET_TEMPLATES, num_classes_per_batch=50,
                                                device="cpu", use_tqdm=False)
        logit_scale = float(model.logit_scale.exp()) if hasattr(model, "logit_scale") else 100.0
    pre, resize_mode = _preprocessing(open_clip, model)
    net = _zero_shot_module(model, classifier, logit_scale).eval()
    name = f"{arch}@{tag}" if spec.pretrained else f"{arch}@untrained"
    meta = {"arch": arch, "model_type": "MORE_DATA", "training_data": tag or "none", "pretrained_tag": tag,
            "resize_mode": resize_mode, "prompt_templates": "openai-imagenet-80", "tags": ("open_clip", "zero-shot")}
    fingerprint = f"open_clip:{arch}@{tag}" if spec.pretrained else untrained_fingerprint(net)
    return Built(net=net, preprocessing=pre, num_classes=len(names), name=name, fingerprint=fingerprint,
                 metadata=meta, class_names=names)
