"""``open_clip:<arch>@<pretrained_tag>[+<head>]`` (optional extra ``shiftbench[clip]``): a
zero-shot ImageNet classifier built from class names and prompts (Radford et al. 2021, §3.1.4).

The classifier's weights are, per class, the normalised mean of the normalised text embeddings
of the 80 OpenAI ImageNet prompt templates ("a bad photo of a {}." ...) filled with the class's
name; logits are ``logit_scale * cos(image, class)``, so the softmax is the model's own. The
head (``recipes.REGISTRY["clip-head"]``) picks the names:

* ``clip-paper`` (default): the CLIP paper's curated ImageNet class names and its prompt
  ensemble, as open_clip ships them (``open_clip.zero_shot_metadata.IMAGENET_CLASSNAMES``,
  ``OPENAI_IMAGENET_TEMPLATES``): the head behind the paper's zero-shot ImageNet numbers;
* ``plain-names``: torchvision's category names (362 of the 1000 differ: ``crane`` for the
  construction crane, ``maillot`` for tights, ...) with the same 80 prompts, shiftbench's variant
  (the head shiftbench built before the curated names).

The head is part of the model's identity: its name (``ViT-B-32@openai`` for ``clip-paper``,
``ViT-B-32@openai+plain-names``), its fingerprint (``open_clip:ViT-B-32@openai+head:clip-paper``)
and its metadata (``zero_shot_head``), so results of different heads never mix in a store. The
model's ``class_names`` stay torchvision's (the label space, what class maps resolve against).
Preprocessing is open_clip's (``get_model_preprocess_cfg``): shortest side resized to the input
size, centre crop, bicubic, the CLIP mean/std. The model type is ``MORE_DATA``; the training
data is the pretrained tag.
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


#: The zero-shot heads (described, with their sources, in ``recipes.REGISTRY["clip-head"]``; the
#: models layer sits below the analyses, so the names are repeated here and a test keeps them equal).
HEADS = ("clip-paper", "plain-names")
DEFAULT_HEAD = "clip-paper"


def split_head(target: str) -> tuple[str, str]:
    """``'<arch>@<tag>[+<head>]'`` -> (``'<arch>@<tag>'``, head); the head defaults to
    :data:`DEFAULT_HEAD`, an unknown one is a ConfigError with the closest names."""
    base, plus, head = target.strip().rpartition("+")
    if not plus:
        return target.strip(), DEFAULT_HEAD
    if head not in HEADS:
        raise ConfigError(did_you_mean("zero-shot head", head, HEADS, f"heads: {', '.join(HEADS)}; "
                                       f"specs look like open_clip:{base}+{HEADS[1]}"))
    return base, head


def head_prompts(open_clip: Any, head: str) -> tuple[list[str], tuple[Any, ...]]:
    """The class names (ImageNet index order) and prompt templates of the zero-shot ``head``."""
    from open_clip import zero_shot_metadata as meta  # deferred: optional dependency

    names = list(meta.IMAGENET_CLASSNAMES) if head == "clip-paper" else imagenet_class_names()
    if len(names) != 1000:
        raise ModelError(f"open_clip's ImageNet class names for the {head} head number {len(names)}, not 1000")
    return names, tuple(meta.OPENAI_IMAGENET_TEMPLATES)


@register_source("open_clip", "open_clip zero-shot ImageNet classifiers: open_clip:<arch>@<pretrained_tag>[+<head>] "
                              "(extra shiftbench[clip])")
def load_open_clip(spec: ModelSpec) -> Built:
    """open_clip:<arch>@<pretrained_tag>[+<head>]"""
    import torch  # deferred: loads torch

    target, head = split_head(spec.target)
    open_clip = _open_clip()
    arch, _, tag = target.partition("@")
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

    prompt_names, templates = head_prompts(open_clip, head)
    with torch.no_grad():
        classifier = build_zero_shot_classifier(model, tokenizer=open_clip.get_tokenizer(arch), classnames=prompt_names,
                                                templates=templates, num_classes_per_batch=50,
                                                device="cpu", use_tqdm=False)
        logit_scale = float(model.logit_scale.exp()) if hasattr(model, "logit_scale") else 100.0
    pre, resize_mode = _preprocessing(open_clip, model)
    net = _zero_shot_module(model, classifier, logit_scale).eval()
    suffix = "" if head == DEFAULT_HEAD else f"+{head}"
    name = (f"{arch}@{tag}" if spec.pretrained else f"{arch}@untrained") + suffix
    meta = {"arch": arch, "model_type": "MORE_DATA", "training_data": tag or "none", "pretrained_tag": tag,
            "resize_mode": resize_mode, "zero_shot_head": head,
            "prompt_templates": f"openai-imagenet-{len(templates)}",
            "class_name_list": "open_clip IMAGENET_CLASSNAMES" if head == "clip-paper" else "torchvision categories",
            "tags": ("open_clip", "zero-shot")}
    fingerprint = (f"open_clip:{arch}@{tag}+head:{head}" if spec.pretrained
                   else f"{untrained_fingerprint(net)}+head:{head}")
    names = imagenet_class_names()
    return Built(net=net, preprocessing=pre, num_classes=len(names), name=name, fingerprint=fingerprint,
                 metadata=meta, class_names=names)
