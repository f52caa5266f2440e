"""Replaying the reference's random draws through our corruptions (shiftbench.shifts.corruptions.replay):
for every random corruption and severity, our code fed the reference's NumPy draws gives the
reference's image - the like-for-like comparison bench/corruptions_fidelity.py relies on."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from shiftbench.errors import ConfigError
from shiftbench.shifts import get_shift
from shiftbench.shifts.corruptions import replay

GREY_LEVEL = 1 / 255


def photos(size: tuple[int, int]) -> np.ndarray:
    import skimage.data

    h, w = size
    return np.stack([np.asarray(Image.fromarray(getattr(skimage.data, n)()).resize((w, h), Image.BICUBIC))
                     for n in ("chelsea", "coffee")])


def reference_outputs(name: str, u8: np.ndarray, severity: int, seeds: list[int]) -> np.ndarray:
    fn = pytest.importorskip("imagecorruptions").corruption_dict[name]
    outs = []
    for im, s in zip(u8, seeds):
        np.random.seed(s)
        outs.append(np.asarray(fn(Image.fromarray(im), severity, **replay.reference_kwargs(name, s)), dtype=np.float64))
    return np.stack(outs) / 255


@pytest.mark.parametrize("name", replay.RANDOM)
@pytest.mark.parametrize("size", [(224, 224), (61, 90)], ids=["224px", "61x90px"])
def test_our_code_on_the_references_draws_gives_the_references_image(name, size):
    u8 = photos(size)
    x = torch.from_numpy(u8).permute(0, 3, 1, 2).float() / 255
    for severity in range(1, 6):
        seeds = [10 * severity + i for i in range(len(u8))]
        theirs = np.clip(reference_outputs(name, u8, severity, seeds), 0, 1)
        ours = replay.replay(name, x, severity, [replay.reference_draws(name, im, severity, s)
                                                for im, s in zip(u8, seeds)])
        assert ours.shape == x.shape and ours.dtype == x.dtype
        diff = np.abs(ours.permute(0, 2, 3, 1).double().numpy() - theirs)
        # measured: mean < 6e-5 grey levels; max 0.75 (frost: a resized texel; glass: a uint8 truncation
        # boundary rounding the other way in float32)
        assert diff.mean() < 1e-3 * GREY_LEVEL, (name, severity, diff.mean() * 255)
        assert diff.max() <= 0.75 * GREY_LEVEL + 1e-6, (name, severity, diff.max() * 255)
        # and not by accident: our own draws give another image
        own = get_shift(name, severity)(x, [0, 1], seed=0)
        assert (own - ours).abs().amax() > 2 * GREY_LEVEL, (name, severity)


def test_shot_noise_counts_are_scaled_and_clipped_like_the_reference():
    x = torch.full((1, 3, 32, 32), 0.5)
    counts = torch.zeros_like(x)
    counts[..., 0, 0] = 7.0
    counts[..., 0, 1] = 100.0
    out = replay.from_noise("shot_noise")(x, 3, counts=counts)       # c = 12
    assert out[0, 0, 0, 0].item() == pytest.approx(7 / 12) and out[0, 0, 0, 1].item() == 1.0
    assert out[0, 0, 1, 1].item() == 0.0
    with pytest.raises(ValueError, match="counts of shape"):
        replay.from_noise("shot_noise")(x, 3, counts=counts[..., :16])


def test_deterministic_corruptions_and_mismatched_draws_are_clear_errors():
    u8 = photos((40, 40))
    with pytest.raises(ConfigError, match="no random draws to replay.*gaussian_noise"):
        replay.reference_draws("zoom_blur", u8[0], 1, 0)
    with pytest.raises(ConfigError, match="not random"):
        replay.from_noise("pixelate")
    x = torch.rand(2, 3, 40, 40)
    with pytest.raises(ConfigError, match="1 draws for a batch of 2"):
        replay.replay("snow", x, 1, [replay.reference_draws("snow", u8[0], 1, 0)])
