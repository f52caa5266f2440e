"""A timm model is preprocessed as timm preprocesses it: the pixels reaching the network equal
``timm.data.create_transform(**resolve_data_config({}, model=m))`` on a real photo, for every crop
mode and for non-square inputs. Nothing is downloaded: models are built with ``pretrained=False``."""
from __future__ import annotations

import dataclasses
import doctest

import pytest
import torch
from PIL import Image

from shiftbench.errors import ConfigError, ModelError
from shiftbench.models import load_model
from shiftbench.models import timm_source
from shiftbench.models.timm_source import TimmPreprocessing, preprocessing_from_config

timm = pytest.importorskip("timm")
from timm.data import create_transform, resolve_data_config  # noqa: E402
from timm.models import get_pretrained_cfg  # noqa: E402

SQUASH = "tf_efficientnetv2_b3.in21k_ft_in1k"                  # squash, crop_pct 0.9, 240 x 240, 14 M
NON_SQUARE = "vit_base_patch16_sapiens2.fb"                    # squash, crop_pct 1.0, 1024 x 768 (H x W)
BORDER = "deepseek_vit_412m_enc.deepseek_v4_flash_vision_exp"  # border, crop_pct 1.0, 392 x 392, 466 M
CENTER = "test_vit.r160_in1k"                                  # center, crop_pct 0.95, 160 x 160, tiny


def photo(kind: str) -> Image.Image:
    """A real photograph of odd, non-square size: landscape (301 x 457) or portrait (383 x 251)."""
    import skimage.data

    if kind == "landscape":
        return Image.fromarray(skimage.data.astronaut()[37:338, 11:468])
    return Image.fromarray(skimage.data.coffee()[9:392, 101:352])


def timm_pixels(cfg: dict, image: Image.Image) -> torch.Tensor:
    """What timm itself feeds the network: its full eval transform, Normalize included."""
    return create_transform(**cfg)(image)


def shiftbench_pixels(pre: TimmPreprocessing, image: Image.Image) -> torch.Tensor:
    """shiftbench's [0, 1] pixels, normalised the way the model wrapper normalises them."""
    from shiftbench.models.wrapper import Normalized

    x = pre.transform()(image)
    assert x.dtype == torch.float32 and 0 <= x.min() and x.max() <= 1
    return Normalized(torch.nn.Identity(), pre.mean, pre.std)(x[None])[0]


class _Stop(Exception):
    pass


def network_input(model, x: torch.Tensor) -> torch.Tensor:
    """The tensor the wrapped network receives for the [0, 1] batch ``x`` (its forward is skipped)."""
    seen = []

    def hook(module, args):
        seen.append(args[0].detach().clone())
        raise _Stop

    handle = model.module.net.register_forward_pre_hook(hook)
    try:
        with torch.no_grad(), pytest.raises(_Stop):
            model.module(x)
    finally:
        handle.remove()
    return seen[0]


def assert_same_pixels(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    assert ours.shape == theirs.shape
    assert (ours - theirs).abs().max().item() < 1e-5


# ------------------------------------------------------------------------ end to end (load_model)

@pytest.mark.parametrize("tag, mode, size", [
    (SQUASH, "squash", (240, 240)),
    pytest.param(NON_SQUARE, "squash", (1024, 768), marks=pytest.mark.slow),
    pytest.param(BORDER, "border", (392, 392), marks=pytest.mark.slow),
    (CENTER, "center", (160, 160)),
])
def test_pixels_reaching_the_network_equal_timms_own_transform(tag, mode, size):
    m = load_model(f"timm:{tag}", pretrained=False)
    cfg = resolve_data_config({}, model=m.module.net)
    assert (cfg["crop_mode"], tuple(cfg["input_size"][1:])) == (mode, size)  # the tag is the case it stands for
    assert m.metadata["crop_mode"] == mode and m.preprocessing.input_hw == size
    image = photo("landscape")
    x = m.preprocessing.transform()(image)
    assert tuple(x.shape) == (3, *size) and 0 <= x.min() and x.max() <= 1   # shifts see [0, 1] pixels
    assert_same_pixels(network_input(m, x[None])[0], timm_pixels(cfg, image))


# ------------------------------------------------------------- from the tags' pretrained configs

def tag_config(tag: str) -> dict:
    return resolve_data_config(pretrained_cfg=get_pretrained_cfg(tag).to_dict())


@pytest.mark.parametrize("tag", [SQUASH, NON_SQUARE, BORDER, CENTER])
@pytest.mark.parametrize("kind", ["landscape", "portrait"])
def test_preprocessing_from_a_tags_config_matches_timm_on_both_orientations(tag, kind):
    cfg = tag_config(tag)
    image = photo(kind)
    assert_same_pixels(shiftbench_pixels(preprocessing_from_config(cfg), image), timm_pixels(cfg, image))


@pytest.mark.parametrize("mode", ["center", "squash", "border"])
@pytest.mark.parametrize("input_size", [(3, 200, 160), (3, 160, 200), (3, 176, 176)])
def test_every_crop_mode_matches_timm_at_crop_pct_below_one_square_or_not(mode, input_size):
    cfg = {"input_size": input_size, "interpolation": "bilinear", "mean": (0.48, 0.46, 0.41),
           "std": (0.27, 0.26, 0.28), "crop_pct": 0.9, "crop_mode": mode}
    pre = preprocessing_from_config(cfg)
    assert pre.resize_hw == tuple(int(s / 0.9) for s in input_size[1:])
    for kind in ("landscape", "portrait"):
        assert_same_pixels(shiftbench_pixels(pre, photo(kind)), timm_pixels(cfg, photo(kind)))


# ------------------------------------------------------------------------------------ the key

def test_the_preprocessing_key_names_the_crop_mode_and_the_height_and_width():
    squash = preprocessing_from_config(tag_config(SQUASH))
    described = squash.to_dict()
    assert described["crop_mode"] == "squash" and described["input_size"] == (240, 240)
    assert described["resize"] == (266, 266) and described["interpolation"] == "bicubic"
    centre = dataclasses.replace(squash, crop_mode="center")
    assert centre.to_dict() != described and centre.fingerprint() != squash.fingerprint()
    assert squash.fingerprint() == preprocessing_from_config(tag_config(SQUASH)).fingerprint()  # stable
    tall = preprocessing_from_config(tag_config(NON_SQUARE)).to_dict()
    assert tall["input_size"] == (1024, 768) and tall["crop_mode"] == "squash"


def test_a_loaded_timm_model_carries_the_described_preprocessing():
    m = load_model(f"timm:{SQUASH}", pretrained=False)
    assert m.preprocessing == preprocessing_from_config(tag_config(SQUASH))
    assert m.preprocessing.to_dict()["crop_mode"] == "squash"
    # mean/std from the config are what the wrapper normalises with
    assert m.module.mean.flatten().tolist() == pytest.approx(list(tag_config(SQUASH)["mean"]))


# ---------------------------------------------------------------------------------- validation

def test_a_data_config_field_shiftbench_does_not_apply_is_an_error_not_ignored():
    cfg = dict(tag_config(SQUASH), crop_border_pixels=4)
    with pytest.raises(ModelError, match="crop_border_pixels"):
        preprocessing_from_config(cfg)


def test_unknown_crop_mode_or_half_a_non_square_size_is_a_config_error():
    with pytest.raises(ConfigError, match="crop_mode 'letterbox'"):
        TimmPreprocessing(crop_mode="letterbox")
    with pytest.raises(ConfigError, match="input_height and resize_height"):
        TimmPreprocessing(input_height=300)


def test_timm_source_docstring_examples_run():
    result = doctest.testmod(timm_source)
    assert result.attempted > 0 and result.failed == 0


def test_a_non_square_model_skips_an_undecodable_image_in_a_batch(tmp_path, monkeypatch):
    """The placeholder of a skipped image has the model's (H, W), so it batches with the others."""
    from PIL import Image

    from conftest import FIXTURES
    from shiftbench.engine import evaluate

    monkeypatch.syspath_prepend(str(FIXTURES))
    for c in range(7):
        d = tmp_path / "data" / f"class{c}"
        d.mkdir(parents=True)
        Image.new("RGB", (30, 20), (c, 0, 128)).save(d / "a.png")
    (tmp_path / "data" / "class0" / "broken.png").write_bytes(b"\x89PNG not really")
    res = evaluate("python:oracle_models:oracle7_wide", [f"folder:{tmp_path / 'data'}"], store=tmp_path / "s",
                   batch_size=4, workers=0, progress=False)
    assert int(res["n_examples"].iloc[0]) == 7 and int(res["n_skipped"].iloc[0]) == 1
