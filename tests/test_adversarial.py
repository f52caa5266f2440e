"""PGD: stays in the eps-ball and in [0, 1], hurts a trained model, is reproducible, runs
inside the engine's inference mode, and the registered settings carry the published parameters."""
from __future__ import annotations

import doctest

import pytest
import torch
from torch import nn

from shiftbench.errors import ConfigError
from shiftbench.shifts import get_shift, image_generator, list_shifts
from shiftbench.shifts import adversarial
from shiftbench.shifts.adversarial import PUBLISHED, pgd, pgd_shift

SIZE = 32


class Standardize(nn.Module):
    """The model's own normalisation (as LoadedModel's wrapper does): it takes [0, 1] pixels."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - 0.5) / 0.01


def make_data(n: int, seed: int, delta: float = 0.0012, sigma: float = 0.01) -> tuple[torch.Tensor, torch.Tensor]:
    """Two linearly separable classes of 32x32 images around mid-grey: +/- a fixed blocky +-1
    pattern (8x8 blocks) of amplitude ``delta``, plus pixel noise."""
    g = torch.Generator().manual_seed(seed)
    pattern = torch.randint(0, 2, (1, 3, 4, 4), generator=torch.Generator().manual_seed(0)).float() * 2 - 1
    pattern = nn.functional.interpolate(pattern, scale_factor=8, mode="nearest")
    y = torch.randint(0, 2, (n,), generator=g)
    noise = sigma * torch.randn(n, 3, SIZE, SIZE, generator=g)
    return (0.5 + delta * (2 * y.float() - 1).view(-1, 1, 1, 1) * pattern + noise).clamp(0, 1), y


@pytest.fixture(scope="module")
def trained() -> nn.Module:
    """A small CNN-like classifier (normalise, 8x8 average pool, linear) trained for 50 SGD steps."""
    torch.manual_seed(0)
    net = nn.Sequential(Standardize(), nn.AvgPool2d(8), nn.Flatten(), nn.Linear(48, 2))
    x, y = make_data(512, seed=1)
    opt = torch.optim.SGD(net.parameters(), lr=0.5)
    for _ in range(50):
        opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
    net.zero_grad(set_to_none=True)
    return net.eval()


def accuracy(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((net(x).argmax(1) == y).float().mean())


def gens(seed: int, n: int, name: str = "t") -> list[torch.Generator]:
    return [image_generator(seed, name, i) for i in range(n)]


@pytest.mark.parametrize("norm,eps", [("linf", 0.5 / 255), ("linf", 2 / 255), ("l2", 0.1), ("l2", 0.5)])
def test_perturbation_stays_within_eps_and_images_within_0_1(trained, norm, eps):
    x, y = make_data(16, seed=2)
    x[:4] = torch.rand(4, 3, SIZE, SIZE).round()  # saturated pixels: clipping must hold the range
    adv = pgd(trained, x, y, norm, eps, steps=10, generators=gens(0, 16))
    delta = (adv - x).flatten(1)
    size = delta.abs().amax(1) if norm == "linf" else delta.norm(dim=1)
    assert float(size.max()) <= eps * (1 + 1e-5) + 2e-7  # up to float32 rounding of a pixel
    assert float(adv.min()) >= 0 and float(adv.max()) <= 1
    assert float(size.min()) > 0.5 * eps  # the attack actually moves every image


@pytest.mark.parametrize("norm,eps", [("linf", 0.5 / 255), ("linf", 2 / 255), ("l2", 0.1), ("l2", 0.5)])
def test_pgd_drops_the_accuracy_of_a_trained_model(trained, norm, eps):
    x, y = make_data(64, seed=3)
    assert accuracy(trained, x, y) > 0.95
    assert accuracy(trained, pgd(trained, x, y, norm, eps, steps=10, generators=gens(0, 64)), y) < 0.1


@pytest.mark.parametrize("name", ["pgd.linf.eps0.5", "pgd.linf.eps2", "pgd.l2.eps0.5"])
def test_registered_settings_attack_the_model_they_are_given(trained, name):
    # (pgd.l2.eps0.1 scaled to a 32 px image is a radius of 0.014: too small to flip this model)
    x, y = make_data(64, seed=3)
    shift = get_shift(name)
    assert shift.id == name and shift.needs_model and shift.severity is None
    adv = shift(x, range(64), 0, model=trained, targets=y)  # the published 100 steps
    assert accuracy(trained, x, y) > 0.95
    assert accuracy(trained, adv, y) < 0.5


def test_registered_settings_carry_the_published_parameters(monkeypatch):
    calls = []
    # the shift runs the attack on checked parameters (adversarial._pgd, positional)
    monkeypatch.setattr(adversarial, "_pgd", lambda model, x, targets, norm, eps, steps, step_size, *rest: calls.append(
        (norm, eps, steps, step_size)) or x)
    x = torch.rand(1, 3, 224, 224)
    for name in ("pgd.linf.eps0.5", "pgd.linf.eps2", "pgd.l2.eps0.1", "pgd.l2.eps0.5"):
        get_shift(name)(x, [0], 0, model=None, targets=torch.tensor([0]))
    expected = [("linf", 0.001960784314, 100, 5.88235294117647e-05),  # imagenet-testbed pgd_attacks.py
                ("linf", 0.007843137255, 100, 0.0002352941176470588),
                ("l2", 0.1, 100, 0.01), ("l2", 0.5, 100, 0.05)]
    for got, want in zip(calls, expected):
        assert got[0] == want[0] and got[2] == want[2]
        assert got[1] == pytest.approx(want[1], rel=1e-9) and got[3] == pytest.approx(want[3], rel=1e-9)
    # l2 radii are calibrated for 224 px and scale with the side, as in the published testbed
    calls.clear()
    get_shift("pgd.l2.eps0.5")(torch.rand(1, 3, 112, 112), [0], 0, model=None, targets=torch.tensor([0]))
    assert calls[0][1] == pytest.approx(0.25) and calls[0][3] == pytest.approx(0.025)
    assert set(PUBLISHED) == {"pgd.linf.eps0.5", "pgd.linf.eps2", "pgd.l2.eps0.1", "pgd.l2.eps0.5"}
    assert set(PUBLISHED) <= set(list_shifts())


def test_same_seed_same_result_and_independent_of_batch_composition(trained):
    x, y = make_data(8, seed=4)
    shift = pgd_shift("pgd.l2.eps0.5", "l2", 0.5, steps=5)
    a = shift(x, range(8), 7, model=trained, targets=y)
    b = shift(x, range(8), 7, model=trained, targets=y)
    assert torch.equal(a, b)
    c = shift(x, range(8), 8, model=trained, targets=y)
    assert not torch.equal(a, c)  # another seed, another random start
    # image 5 alone, and inside a reordered sub-batch, gets the same result (its index, not its position)
    alone = shift(x[5:6], [5], 7, model=trained, targets=y[5:6])
    mixed = shift(x[[6, 5, 2]], [6, 5, 2], 7, model=trained, targets=y[[6, 5, 2]])
    torch.testing.assert_close(alone[0], a[5], atol=1e-6, rtol=0)
    torch.testing.assert_close(mixed[1], a[5], atol=1e-6, rtol=0)


def test_works_inside_inference_mode_like_the_engine(trained):
    x, y = make_data(4, seed=5)
    shift = get_shift("pgd.l2.eps0.5")
    expected = pgd_shift("pgd.l2.eps0.5", "l2", 0.5, steps=3, step_size=0.05)(x, range(4), 0, model=trained, targets=y)
    with torch.inference_mode():
        xi, yi = x.clone(), y.clone()  # inference tensors, as the runner's batches are
        adv = pgd_shift("pgd.l2.eps0.5", "l2", 0.5, steps=3, step_size=0.05)(xi, range(4), 0, model=trained,
                                                                            targets=yi)
        assert shift.needs_model
    assert not adv.requires_grad
    torch.testing.assert_close(adv, expected)
    assert all(p.grad is None for p in trained.parameters())  # only the input was differentiated


def test_zero_eps_and_no_random_start_are_identity_and_deterministic(trained):
    x, y = make_data(4, seed=6)
    assert torch.equal(pgd(trained, x, y, "linf", 0.0, steps=5), x)
    a = pgd(trained, x, y, "l2", 0.1, steps=3, random_start=False)
    b = pgd(trained, x, y, "l2", 0.1, steps=3, random_start=False)
    assert torch.equal(a, b)


def test_bad_arguments_are_config_errors(trained):
    x, y = make_data(2, seed=7)
    with pytest.raises(ConfigError, match="norm"):
        pgd(trained, x, y, "l1", 0.1)
    with pytest.raises(ConfigError, match="eps"):
        pgd(trained, x, y, "linf", -1.0)
    with pytest.raises(ConfigError, match="generators"):
        pgd(trained, x, y, "linf", 0.01, generators=gens(0, 3))


def test_docstring_examples_run():
    result = doctest.testmod(adversarial)
    assert result.attempted > 0 and result.failed == 0
