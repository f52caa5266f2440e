"""Training augmentations for robustness experiments: AugMix (and Noise2Net, in its own module).

:func:`augmix` wraps :class:`torchvision.transforms.v2.AugMix` (Hendrycks et al. 2020, "AugMix:
A Simple Data Processing Method to Improve Robustness and Uncertainty"): ``mixture_width``
chains of ``chain_depth`` random operations (``severity`` 1-10), mixed with Dirichlet(``alpha``)
weights and blended with the original by a Beta(``alpha``, ``alpha``) weight. torchvision draws
from torch's global RNG; with ``seed=`` the draws come from a forked, seeded RNG instead, so a
call is reproducible and leaves the global RNG untouched.

:func:`augmix_batch` applies it to a float ``(B, 3, H, W)`` batch in [0, 1], one independent
draw per image (torchvision's AugMix on a batch tensor shares one chain of operations across
the batch), seeded per image from ``(seed, "augmix", index)`` like the evaluation shifts.
Pixels are quantised to uint8 on the way (AugMix's operations are defined on 8-bit images).

For Noise2Net as a training augmentation see :class:`shiftbench.shifts.noise2net.Noise2Net`.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shiftbench.errors import ConfigError
from shiftbench.shifts.base import image_seed


def augmix_transform(severity: int = 3, mixture_width: int = 3, chain_depth: int = -1, alpha: float = 1.0,
                     all_ops: bool = True, interpolation: str = "bilinear") -> Any:
    """torchvision's ``v2.AugMix`` with these parameters (for a training ``Compose`` pipeline)."""
    from torchvision.transforms import v2  # deferred: loads Pillow, loads torch

    if not 1 <= severity <= 10:
        raise ConfigError(f"augmix: severity must be in 1..10, got {severity!r}")
    if mixture_width < 1 or alpha <= 0:
        raise ConfigError(f"augmix: mixture_width must be >= 1 and alpha > 0, got {mixture_width!r}, {alpha!r}")
    return v2.AugMix(severity=severity, mixture_width=mixture_width, chain_depth=chain_depth, alpha=alpha,
                     all_ops=all_ops, interpolation=interpolation)


def augmix(image: Any, *, seed: int | None = None, **params: Any) -> Any:
    """AugMix one image: a PIL image (RGB or L) or a uint8 tensor ``(3, H, W)``; same type out.

    ``params`` are :func:`augmix_transform`'s. With ``seed``, the result depends only on the
    seed and the image.

    >>> from PIL import Image
    >>> out = augmix(Image.new("RGB", (32, 32), (200, 30, 30)), seed=0)
    >>> out.size, out.mode
    ((32, 32), 'RGB')
    """
    import torch  # deferred: loads torch
    from PIL import Image  # deferred: loads Pillow

    if isinstance(image, torch.Tensor):
        if image.dtype != torch.uint8:
            raise ConfigError(f"augmix: tensors must be uint8 (C, H, W) images, got dtype {image.dtype}; "
                              "use augmix_batch for float batches in [0, 1]")
    elif not isinstance(image, Image.Image):
        raise ConfigError(f"augmix: expects a PIL image or a uint8 tensor, got {type(image).__name__}")
    elif image.mode not in ("RGB", "L"):
        image = image.convert("RGB")
    transform = augmix_transform(**params)
    if seed is None:
        return transform(image)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        return transform(image)


def augmix_batch(x: Any, indices: Sequence[int] | None = None, seed: int = 0, **params: Any) -> Any:
    """AugMix each image of a float batch ``(B, 3, H, W)`` in [0, 1] independently.

    Image ``i`` is seeded with ``image_seed(seed, "augmix", indices[i])`` (``indices`` default to
    ``0..B-1``; pass dataset indices for draws that do not depend on the batch, or a different
    ``seed`` every epoch for fresh draws). Returns a float batch in [0, 1] on ``x``'s device.
    """
    import torch  # deferred: loads torch

    if x.ndim != 4 or x.shape[1] != 3:
        raise ConfigError(f"augmix_batch: expects a (B, 3, H, W) batch, got {tuple(x.shape)}")
    idx = list(range(x.shape[0])) if indices is None else [int(i) for i in indices]
    if len(idx) != x.shape[0]:
        raise ConfigError(f"augmix_batch: {len(idx)} indices for a batch of {x.shape[0]} images")
    u8 = (x.detach().clamp(0, 1) * 255).round().to(torch.uint8).cpu()
    out = [augmix(img, seed=image_seed(seed, "augmix", i), **params) for img, i in zip(u8, idx)]
    if not out:
        return x.clone()
    return (torch.stack(out).to(x.device).to(x.dtype if x.is_floating_point() else torch.float32)) / 255
