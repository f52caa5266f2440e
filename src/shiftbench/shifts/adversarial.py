"""Untargeted PGD in l_inf and l_2 on [0, 1] pixels (Madry et al. 2018), as evaluation shifts.

Projected gradient descent maximises the cross-entropy of the true label inside an
``eps``-ball around each image::

    delta_0     ~ uniform in the ball            (random start, from the image's own generator)
    delta_{t+1} = P_eps(delta_t + a * s(grad_delta CE(f(x + delta_t), y)))
    x_adv       = clip_[0,1](x + delta_T)

with ``s = sign`` for l_inf and ``s = g / ||g||_2`` (per image) for l_2, ``P_eps`` the projection
on the ball, and the image range kept by clipping ``x + delta`` to [0, 1] after every step
(clipping never increases ``|delta|`` componentwise, so the norm stays <= eps). The attack is
batched (one forward/backward per step for the whole batch, loss summed over images so each
image's gradient is its own) and returns the final iterate.

Registered settings, named and parameterised as in the published testbed (Taori et al. 2020,
``imagenet-testbed/src/eval_settings/pgd_attacks.py``: 100 steps, cleverhans-style PGD)::

    pgd.linf.eps0.5   eps = 0.5/255   step = 0.03 * eps      (5.88e-5)
    pgd.linf.eps2     eps = 2/255     step = 0.03 * eps      (2.35e-4)
    pgd.l2.eps0.1     eps = 0.1       step = 0.1 * eps       (0.01)
    pgd.l2.eps0.5     eps = 0.5       step = 0.1 * eps       (0.05)

As in the testbed, the l_2 radius is calibrated for 224 x 224 inputs and scaled by ``H / 224``
for other input sizes (an l_2 norm grows with the square root of the pixel count). Two
deliberate differences: the loss uses the true labels (``targets``; the testbed's cleverhans
call attacked the model's own prediction), and the random start is drawn from the per-image
generator (:func:`~shiftbench.shifts.base.image_generator`), so a result depends only on
``(seed, setting, image index)``, not on the batch.

:func:`pgd` is the public attack; its default step size is ``2.5 * eps / steps`` (the rule of
Madry et al.'s ``robustness`` library: the full radius can be crossed 2.5 times; with 100
steps that is 0.025 * eps, close to the published 0.03 * eps). :func:`pgd_shift` builds a
:class:`~shiftbench.shifts.base.Shift` with other steps / step sizes.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from shiftbench.errors import ConfigError
from shiftbench.shifts.base import Shift, image_generator, register_shift

NORMS = ("linf", "l2")
#: l_2 radii of the published settings are calibrated for this input size
L2_REFERENCE_SIZE = 224
#: name -> (norm, eps in [0, 1] units, step size as a fraction of eps); the published parameters
PUBLISHED = {
    "pgd.linf.eps0.5": ("linf", 0.5 / 255, 0.03),
    "pgd.linf.eps2": ("linf", 2 / 255, 0.03),
    "pgd.l2.eps0.1": ("l2", 0.1, 0.1),
    "pgd.l2.eps0.5": ("l2", 0.5, 0.1),
}
PUBLISHED_STEPS = 100


def _per_image_norm(t: Any) -> Any:
    return t.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, *([1] * (t.ndim - 1)))


def _random_start(shape: tuple[int, ...], norm: str, eps: float, generators: Sequence[Any]) -> Any:
    """One draw per image from its own generator (on CPU, so results do not depend on the device).

    l_inf: uniform in the cube ``[-eps, eps]^d``; l_2: uniform in the ball (a Gaussian direction,
    radius ``eps * u^(1/d)``).
    """
    import torch  # deferred: loads torch

    d = math.prod(shape)
    out = []
    for g in generators:
        if norm == "linf":
            out.append((torch.rand(shape, generator=g) * 2 - 1) * eps)
        else:
            v = torch.randn(shape, generator=g)
            r = eps * float(torch.rand((), generator=g)) ** (1.0 / d)
            out.append(v * (r / v.norm().clamp_min(1e-12)))
    return torch.stack(out)


def pgd(model: Any, x: Any, targets: Any, norm: str, eps: float, steps: int = PUBLISHED_STEPS,
        step_size: float | None = None, random_start: bool = True, generators: Sequence[Any] | None = None) -> Any:
    """Untargeted PGD (module docstring): adversarial images within ``eps`` of ``x``, in [0, 1].

    Parameters
    ----------
    model:
        A module taking a [0, 1] batch ``(B, 3, H, W)`` to logits ``(B, C)`` (e.g.
        ``LoadedModel.module``), in eval mode; its train/eval mode is not changed.
    x, targets:
        The clean batch in [0, 1] and its labels ``(B,)`` in the model's output space.
    norm, eps:
        ``"linf"`` or ``"l2"``; the radius in [0, 1] pixel units (l_2 over the whole image).
    steps, step_size:
        Iterations and step length (default ``2.5 * eps / steps``).
    random_start, generators:
        Start uniformly in the ball, image ``i`` drawing from ``generators[i]`` (CPU
        ``torch.Generator``); without generators, one generator seeded with 0 for the batch.

    Works inside ``torch.inference_mode()`` / ``torch.no_grad()`` (the engine's forward pass):
    the attack runs in a local ``inference_mode(False)`` + ``enable_grad()`` block on a copy of
    ``x`` and returns a tensor detached from any graph; gradients are taken with respect to the
    input only (``torch.autograd.grad``), so no parameter ``.grad`` is touched.

    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 2))
    >>> x = torch.rand(2, 3, 32, 32)
    >>> adv = pgd(net, x, torch.tensor([0, 1]), "linf", eps=2 / 255, steps=5)
    >>> bool((adv - x).abs().max() <= 2 / 255 + 1e-6), bool(adv.min() >= 0), bool(adv.max() <= 1)
    (True, True, True)
    """
    _check_pgd("pgd", norm, eps, steps)
    if x.ndim != 4:
        raise ConfigError(f"pgd: expects a batch (B, C, H, W), got shape {tuple(x.shape)}")
    if generators is not None and len(generators) != x.shape[0]:
        raise ConfigError(f"pgd: {len(generators)} generators for a batch of {x.shape[0]} images")
    return _pgd(model, x, targets, norm, eps, steps, step_size, random_start, generators)


def _check_pgd(where: str, norm: str, eps: float, steps: int) -> None:
    """The one check of PGD's parameters (a ConfigError naming ``where`` and the fix)."""
    if norm not in NORMS:
        raise ConfigError(f"{where}: norm {norm!r} is not one of {', '.join(NORMS)}")
    if not eps >= 0 or not math.isfinite(eps):
        raise ConfigError(f"{where}: eps must be a finite number >= 0, got {eps!r}")
    if int(steps) != steps or steps < 0:
        raise ConfigError(f"{where}: steps must be an integer >= 0, got {steps!r}")


def _pgd(model: Any, x: Any, targets: Any, norm: str, eps: float, steps: int, step_size: float | None,
         random_start: bool, generators: Sequence[Any] | None) -> Any:
    """:func:`pgd` on checked arguments."""
    import torch  # deferred: loads torch
    import torch.nn.functional as F  # deferred: loads torch

    step = 2.5 * eps / steps if step_size is None and steps else float(step_size or 0.0)
    with torch.inference_mode(False), torch.enable_grad():
        x0 = x.detach().clone()
        y = torch.as_tensor(targets).clone().to(device=x0.device, dtype=torch.long)
        if random_start and eps > 0:
            if generators is None:
                generators = [torch.Generator().manual_seed(0)] * x0.shape[0]
            delta = _random_start(tuple(x0.shape[1:]), norm, eps, generators).to(x0.device, x0.dtype)
            delta = (x0 + delta).clamp(0, 1) - x0
        else:
            delta = torch.zeros_like(x0)
        for _ in range(int(steps) if eps > 0 else 0):
            delta.requires_grad_(True)
            loss = F.cross_entropy(model(x0 + delta), y, reduction="sum")
            (grad,) = torch.autograd.grad(loss, delta)
            with torch.no_grad():
                if norm == "linf":
                    delta = (delta + step * grad.sign()).clamp(-eps, eps)
                else:
                    delta = delta + step * grad / _per_image_norm(grad)
                    delta = delta * (eps / _per_image_norm(delta)).clamp(max=1.0)
                delta = (x0 + delta).clamp(0, 1) - x0
        out = (x0 + delta.detach()).clamp(0, 1)
    return out


def pgd_shift(name: str, norm: str, eps: float, steps: int = PUBLISHED_STEPS, step_size: float | None = None,
              *, scale_l2_with_size: bool = True, random_start: bool = True) -> Shift:
    """A :class:`Shift` (``needs_model=True``) running :func:`pgd` on each batch.

    ``step_size`` defaults to ``2.5 * eps / steps``; with ``scale_l2_with_size`` the l_2 radius
    (and step) are multiplied by ``H / 224`` as in the published testbed. Image ``i`` of a
    batch starts from ``image_generator(seed, name, indices[i])``.
    """
    _check_pgd(f"shift {name!r}", norm, eps, steps)

    def fn(x: Any, indices: Any, seed: int, *, model: Any, targets: Any) -> Any:  # x checked by Shift
        scale = x.shape[-2] / L2_REFERENCE_SIZE if norm == "l2" and scale_l2_with_size else 1.0
        gens = [image_generator(seed, name, int(i)) for i in indices] if random_start else None
        return _pgd(model, x, targets, norm, eps * scale, steps, None if step_size is None else step_size * scale,
                    random_start, gens)

    return Shift(name, None, fn, random=random_start, needs_model=True)


def _register_published() -> None:
    for name, (norm, eps, frac) in PUBLISHED.items():
        desc = (f"untargeted PGD, {norm.replace('inf', '_inf').replace('l2', 'l_2')} eps="
                f"{'%g/255' % round(eps * 255, 3) if norm == 'linf' else '%g' % eps}, "
                f"{PUBLISHED_STEPS} steps of {frac:g} eps (published testbed parameters)")

        def factory(_severity: int | None, name: str = name, norm: str = norm, eps: float = eps,
                    frac: float = frac) -> Shift:
            return pgd_shift(name, norm, eps, PUBLISHED_STEPS, frac * eps)

        register_shift(name, severities=None, description=desc)(factory)


_register_published()
