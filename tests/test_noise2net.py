"""Noise2Net and AugMix: valid images out, a different random network per image, seeded
results that do not depend on the batch, gradients for training use, and the AugMix wrapper."""
from __future__ import annotations

import doctest

import numpy as np
import pytest
import torch
from PIL import Image

from shiftbench.errors import ConfigError
from shiftbench.shifts import augment, get_shift, image_generator, list_shifts
from shiftbench.shifts import noise2net as n2n_module
from shiftbench.shifts.augment import augmix, augmix_batch, augmix_transform
from shiftbench.shifts.noise2net import Noise2Net, noise2net, noise2net_shift


def smooth_images(n: int, size: int = 48, seed: int = 0) -> torch.Tensor:
    """Natural-ish images: smooth colour gradients plus a few blobs, in [0, 1]."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.linspace(0, 1, size), torch.linspace(0, 1, size), indexing="ij")
    out = []
    for _ in range(n):
        a = torch.rand(3, 3, generator=g)
        img = a[:, 0, None, None] * xx + a[:, 1, None, None] * yy + 0.3 * a[:, 2, None, None]
        cx, cy = torch.rand(2, generator=g)
        img = img + 0.4 * torch.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / 0.02)
        out.append(img / img.max())
    return torch.stack(out).clamp(0, 1)


def test_registered_shift_returns_valid_changed_images():
    x = smooth_images(4)
    shift = get_shift("noise2net")
    assert shift.id == "noise2net" and shift.random and not shift.needs_model
    assert "noise2net" in list_shifts()
    y = shift(x, [0, 1, 2, 3], seed=0)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert float(y.min()) >= 0 and float(y.max()) <= 1 and torch.isfinite(y).all()
    change = (y - x).abs().flatten(1).mean(1)
    assert bool((change > 0.02).all())  # a visible change ...
    assert bool((change < 0.5).all())  # ... that keeps the image (the reference acts on normalised pixels)
    # the image survives: strongly correlated with the original
    corr = [np.corrcoef(x[i].flatten().numpy(), y[i].flatten().numpy())[0, 1] for i in range(4)]
    assert min(corr) > 0.2


def test_each_image_in_a_batch_gets_its_own_network():
    x = smooth_images(1).repeat(4, 1, 1, 1)  # the same image four times
    y = get_shift("noise2net")(x, [10, 11, 12, 13], seed=0)
    for i in range(4):
        for j in range(i + 1, 4):
            assert float((y[i] - y[j]).abs().mean()) > 0.01


def test_seeded_and_independent_of_batch_composition():
    x = smooth_images(5, seed=1)
    shift = get_shift("noise2net")
    full = shift(x, range(5), seed=3)
    assert torch.equal(full, shift(x, range(5), seed=3))
    assert float((full - shift(x, range(5), seed=4)).abs().mean()) > 0.01
    alone = shift(x[3:4], [3], seed=3)
    mixed = shift(x[[4, 3, 0]], [4, 3, 0], seed=3)
    torch.testing.assert_close(alone[0], full[3], atol=1e-5, rtol=0)
    torch.testing.assert_close(mixed[1], full[3], atol=1e-5, rtol=0)
    # chunking (memory bound) does not change results either
    chunked = noise2net(x, [image_generator(3, "noise2net", i) for i in range(5)], chunk_size=2)
    torch.testing.assert_close(chunked, full, atol=1e-5, rtol=0)


def test_eps_controls_the_strength():
    x = smooth_images(3, seed=2)
    gens = lambda: [torch.Generator().manual_seed(i) for i in range(3)]  # noqa: E731
    weak = noise2net(x, gens(), eps_range=(0.05, 0.05))
    strong = noise2net(x, gens(), eps_range=(0.75, 0.75))
    torch.testing.assert_close(noise2net(x, gens(), eps_range=(0.0, 0.0)), x)
    assert float((weak - x).abs().mean()) < float((strong - x).abs().mean())


def test_training_module_gives_fresh_draws_reproducible_from_its_seed_and_passes_gradients():
    x = smooth_images(4, size=32, seed=5)
    a, b = Noise2Net(seed=1), Noise2Net(seed=1)
    first, second = a(x), a(x)
    assert float((first - second).abs().mean()) > 0.01  # fresh networks on every call
    torch.testing.assert_close(b(x), first)  # the same seed replays the same sequence
    assert float(first.min()) >= 0 and float(first.max()) <= 1
    torch.manual_seed(0)
    g1 = Noise2Net()(x)
    torch.manual_seed(0)
    torch.testing.assert_close(Noise2Net()(x), g1)  # seed=None: torch's global RNG
    xg = x.clone().requires_grad_(True)
    out = Noise2Net(seed=2)(xg)
    out.square().sum().backward()
    assert xg.grad is not None and float(xg.grad.abs().sum()) > 0
    assert list(Noise2Net().parameters()) == []  # sampled weights, nothing to train
    half = Noise2Net(p=0.5, seed=3)(smooth_images(16, size=32))
    untouched = [(half[i] == smooth_images(16, size=32)[i]).all().item() for i in range(16)]
    assert 0 < sum(untouched) < 16
    assert torch.equal(Noise2Net(p=0.0)(x), x)
    # the module can be pickled (DataLoader workers) and the class is importable by name
    import pickle

    assert isinstance(pickle.loads(pickle.dumps(Noise2Net(seed=1))), n2n_module.Noise2Net)


def test_bad_parameters_are_config_errors():
    with pytest.raises(ConfigError, match="eps_range"):
        noise2net_shift(eps_range=(0.8, 0.2))
    with pytest.raises(ConfigError, match="p must be"):
        Noise2Net(p=2)
    with pytest.raises(ConfigError, match="generators"):
        noise2net(torch.rand(2, 3, 32, 32), [torch.Generator()])


# ---------------------------------------------------------------------------- AugMix
def test_augmix_returns_valid_images_of_the_input_type():
    img = Image.fromarray((smooth_images(1, size=40)[0].permute(1, 2, 0).numpy() * 255).astype(np.uint8))
    out = augmix(img, seed=0)
    assert isinstance(out, Image.Image) and out.size == img.size and out.mode == "RGB"
    assert np.asarray(out).tolist() == np.asarray(augmix(img, seed=0)).tolist()  # seeded
    assert any(np.asarray(augmix(img, seed=s)).tolist() != np.asarray(out).tolist() for s in (1, 2, 3))
    t = torch.from_numpy(np.array(img)).permute(2, 0, 1).contiguous()
    tout = augmix(t, seed=0, severity=5, mixture_width=2)
    assert tout.dtype == torch.uint8 and tout.shape == t.shape
    state = torch.get_rng_state()
    augmix(img, seed=7)
    assert torch.equal(state, torch.get_rng_state())  # a seeded call leaves the global RNG alone
    assert isinstance(augmix(img.convert("RGBA")), Image.Image)
    with pytest.raises(ConfigError, match="uint8"):
        augmix(t.float())
    with pytest.raises(ConfigError, match="severity"):
        augmix_transform(severity=11)


def test_augmix_batch_is_per_image_and_seeded_by_index():
    x = smooth_images(4, size=32, seed=6)
    out = augmix_batch(x, indices=[0, 1, 2, 3], seed=1)
    assert out.shape == x.shape and out.dtype == x.dtype
    assert float(out.min()) >= 0 and float(out.max()) <= 1
    torch.testing.assert_close(augmix_batch(x[2:3], indices=[2], seed=1)[0], out[2])
    same = x[:1].repeat(3, 1, 1, 1)
    mixed = augmix_batch(same, indices=[0, 1, 2], seed=1)
    assert not torch.equal(mixed[0], mixed[1]) or not torch.equal(mixed[1], mixed[2])


@pytest.mark.parametrize("module", [n2n_module, augment])
def test_docstring_examples_run(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
