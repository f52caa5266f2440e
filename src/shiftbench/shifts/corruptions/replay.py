"""Replay the reference implementation's random draws through shiftbench's corruptions.

Every random corruption here is a draw (from the image's own torch generator) followed by a
deterministic ``*_from_noise`` function. The reference, ``imagecorruptions`` (imaug fork),
draws from NumPy's global stream instead. Given that stream's seed, :func:`reference_draws`
reproduces the reference's draws for one image in the shapes our ``*_from_noise`` functions take,
and :func:`replay` runs them: the result is the reference's corrupted image computed by our code,
so the two can be compared like for like - pixel by pixel and by a model's accuracy - which
independent draws cannot do (their difference is mostly draw-to-draw spread)::

    np.random.seed(seed)
    theirs = imagecorruptions.corruption_dict[name](pil_image, severity, **reference_kwargs(name, seed))
    ours = replay(name, x, severity, [reference_draws(name, image_u8, severity, seed)])

Used by ``bench/corruptions_fidelity.py`` and the tests; needs NumPy (and numba for
glass_blur, as the reference does), not the reference package itself.

How each reference corruption draws (after ``np.random.seed(seed)``):

* gaussian_noise, speckle_noise: ``np.random.normal(size=(H, W, 3), scale=c)``;
* shot_noise: ``np.random.poisson(x c)`` for ``x`` the image / 255 (the counts are the draws);
* impulse_noise: scikit-image's ``random_noise(mode='s&p', rng=seed)``: ``default_rng(seed)``,
  one uniform per value for "replaced", then one per value for "salt";
* motion_blur: ``np.random.uniform(-45, 45)`` (degrees);
* glass_blur: numba's ``np.random.randint(-d, d, size=2)`` per visited pixel, seeded inside the
  compiled loop (its ``seed`` argument);
* snow: ``np.random.normal(size=(H, W))`` (the snow layer), then ``np.random.uniform(-135, -45)``;
* frost: ``np.random.randint(6)`` (the texture), then the crop's top and left corner;
* fog: the diamond-square plasma's ``np.random.uniform`` calls, ``mapsize^2 - 1`` in all;
* spatter: ``np.random.normal(size=(H, W))`` (the liquid layer);
* elastic_transform: ``np.random.uniform(-m, m, size=(H, W))`` for dy, then for dx.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from shiftbench.errors import ConfigError
from shiftbench.shifts.corruptions import blur, digital, noise, weather

#: the reference's random corruptions, in its order
RANDOM = ("gaussian_noise", "shot_noise", "impulse_noise", "speckle_noise", "glass_blur", "motion_blur",
          "snow", "frost", "fog", "spatter", "elastic_transform")


def reference_kwargs(name: str, seed: int) -> dict[str, Any]:
    """Extra keyword arguments of the reference's corruption: glass_blur and impulse_noise take
    their own ``seed`` (the rest read NumPy's global stream)."""
    return {"seed": seed} if name in ("glass_blur", "impulse_noise") else {}


@functools.lru_cache(maxsize=1)
def _numba_glass_loop() -> Any:
    """numba's stream in the reference's glass-blur loop order (compiled once)."""
    from numba import njit  # deferred: optional dependency

    @njit(cache=False)
    def draws(h: int, w: int, d: int, iterations: int, seed: int) -> Any:  # pragma: no cover - compiled
        np.random.seed(seed)
        out = np.zeros((iterations, (h - 2 * d) * (w - 2 * d), 2), dtype=np.int64)
        for i in range(iterations):
            n = 0
            for _h in range(h - d, d, -1):
                for _w in range(w - d, d, -1):
                    dx, dy = np.random.randint(-d, d, size=(2,))
                    out[i, n, 0] = dx
                    out[i, n, 1] = dy
                    n += 1
        return out

    return draws


def glass_reference_offsets(h: int, w: int, delta: int, iterations: int, seed: int) -> Any:
    """The reference's glass-blur offsets as ``(iterations, 2, H - 2d, W - 2d)`` (dx, dy) in raster
    order (the reference visits pixels in reverse raster order)."""
    import torch  # deferred: loads torch

    d = _numba_glass_loop()(h, w, delta, iterations, seed).reshape(iterations, h - 2 * delta, w - 2 * delta, 2)
    return torch.from_numpy(np.ascontiguousarray(d[:, ::-1, ::-1, :])).permute(0, 3, 1, 2)


def reference_draws(name: str, image: Any, severity: int, seed: int) -> dict[str, Any]:
    """The draws the reference makes for ``image`` (uint8 ``(H, W, 3)`` NumPy array) at ``severity``
    after ``np.random.seed(seed)``, as keyword arguments of our ``<name>_from_noise`` for a batch of
    one (tensors with a leading batch axis, lists of one item). Leaves NumPy's global stream
    seeded and advanced, as the reference would."""
    import torch  # deferred: loads torch


    if name not in RANDOM:
        raise ConfigError(f"corruption {name!r} has no random draws to replay; random ones: {', '.join(RANDOM)}")
    h, w = image.shape[:2]
    chw = lambda a: torch.from_numpy(np.ascontiguousarray(a)).permute(2, 0, 1)[None]  # noqa: E731
    np.random.seed(seed)
    if name in ("gaussian_noise", "speckle_noise"):
        return {"z": chw(np.random.normal(size=image.shape))}
    if name == "shot_noise":
        c = noise.SHOT_NOISE[severity - 1]
        return {"counts": chw(np.random.poisson(np.asarray(image) / 255.0 * c).astype(np.float64))}
    if name == "impulse_noise":
        rng = np.random.default_rng(seed)
        flipped = rng.random(image.shape) <= noise.IMPULSE_NOISE[severity - 1]
        return {"flipped": chw(flipped), "salted": chw(rng.random(image.shape) <= 0.5)}
    if name == "motion_blur":
        return {"angles": [np.random.uniform(-45, 45)]}
    if name == "glass_blur":
        _, delta, iterations = blur.GLASS_BLUR[severity - 1]
        return {"offsets": [glass_reference_offsets(h, w, delta, iterations, seed)]}
    if name == "snow":
        z = np.random.standard_normal((h, w))
        return {"z": torch.from_numpy(z)[None], "u": torch.tensor([np.random.random_sample()])}
    if name == "fog":
        return {"u": torch.from_numpy(np.random.random_sample(weather.fog_mapsize(h, w) ** 2 - 1))[None]}
    if name == "spatter":
        return {"z": torch.from_numpy(np.random.standard_normal((h, w)))[None]}
    if name == "frost":
        idx = np.random.randint(6)
        th, tw = weather._scaled_frost(idx, h, w).shape[-2:]
        return {"crops": [(idx, np.random.randint(0, th - h), np.random.randint(0, tw - w))]}
    return {"u": torch.from_numpy(np.random.random_sample((2, h, w)))[None]}   # elastic_transform


def from_noise(name: str) -> Any:
    """Our deterministic half of corruption ``name``: ``f(x, severity, **draws)``."""

    if name not in RANDOM:
        raise ConfigError(f"corruption {name!r} is not random; random ones: {', '.join(RANDOM)}")
    if name == "impulse_noise":
        return lambda x, severity, flipped, salted: noise.impulse_noise_from_noise(x, flipped, salted)
    if name == "shot_noise":
        return noise.shot_noise_from_counts
    module = {"motion_blur": blur, "glass_blur": blur, "elastic_transform": digital}.get(
        name, noise if name.endswith("_noise") else weather)
    return getattr(module, f"{name}_from_noise")


def collate(draws: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per-image draws (from :func:`reference_draws`) as one batch's: tensors concatenated on the
    batch axis, lists joined."""
    import torch  # deferred: loads torch

    out: dict[str, Any] = {}
    for key in draws[0]:
        parts = [d[key] for d in draws]
        out[key] = torch.cat(parts) if torch.is_tensor(parts[0]) else [v for p in parts for v in p]
    return out


def replay(name: str, x: Any, severity: int, draws: Sequence[dict[str, Any]]) -> Any:
    """Corruption ``name`` of the batch ``x`` ((B, 3, H, W) in [0, 1]) computed by our code from the
    reference's draws (one :func:`reference_draws` dict per image)."""
    if len(draws) != x.shape[0]:
        raise ConfigError(f"replay {name}: {len(draws)} draws for a batch of {x.shape[0]} images")
    kwargs = collate(draws)
    if name in ("gaussian_noise", "speckle_noise", "shot_noise"):   # per-value draws in the batch's precision
        key = "counts" if name == "shot_noise" else "z"
        kwargs[key] = kwargs[key].to(x.dtype)
    return from_noise(name)(x, severity, **kwargs)


__all__ = ["RANDOM", "reference_kwargs", "reference_draws", "glass_reference_offsets", "from_noise", "collate",
           "replay"]
