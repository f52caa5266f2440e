"""Corrupt your own images: :func:`corrupt`, the engine's synthetic shifts called the way
``imagecorruptions.corrupt(image, corruption_name=..., severity=...)`` is (Michaelis et al. 2019;
the corruptions are ImageNet-C's, Hendrycks & Dietterich 2019).

:func:`corrupt` takes the image forms users hold - a PIL image, a uint8 NumPy array, a torch
tensor - turns them into the engine's batch, runs the shift the engine runs
(:func:`~shiftbench.shifts.get_shift`) with the engine's call, and turns the result back into the
form it was given:

* the engine's batch is float32 ``(N, 3, H, W)`` in [0, 1], channels-last, where uint8 pixels
  ``u`` become ``u * (1 / 255)`` (torchvision's ``ToDtype(float32, scale=True)``, the last step of
  the engine's pixel pipeline, :meth:`~shiftbench.models.base.Preprocessing.transform`); float
  tensors go in as they are (their dtype is kept);
* the call is ``shift(x, indices, seed)``, the one of :class:`~shiftbench.engine.runner.Pass`;
  a random shift seeds image ``i``'s draws from ``(seed, shift, severity, indices[i])``
  (:func:`~shiftbench.shifts.image_generator`), so example ``i`` of a batch gets the dataset
  index ``index + i``;
* uint8 results are rounded to the nearest level (``round(255 y)``); ``imagecorruptions.corrupt``
  truncates (``np.uint8``), so where both compute the same float a level may differ by one;
* greyscale images (mode ``L``, ``(H, W)`` arrays, one channel) are replicated on three channels
  (as the engine's decoder and ``imagecorruptions`` do), corrupted, and brought back to one
  channel by ITU-R 601-2 luma: Pillow's ``convert("L")`` for uint8 (``(19595 R + 38470 G + 7471 B
  + 2^15) >> 16``), ``0.299 R + 0.587 G + 0.114 B`` for floats; a fourth (alpha) channel passes
  unchanged.

So for images already at the model's input size (after its resize and crop, before
normalisation: DESIGN principle 2), ``corrupt(x, name, s, seed=seed, index=i)`` is what
``shiftbench.evaluate(model, "<setting>+<name>.<s>", seed=seed)`` feeds the model for example
``i`` of the setting.
"""
from __future__ import annotations

import operator
import sys
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from shiftbench.errors import ConfigError, require
from shiftbench.shifts.base import MIN_SIZE, Shift, check_shift, get_shift

#: the accepted input forms, named in the error for anything else
ACCEPTED = ("a PIL image (RGB, L or RGBA), a uint8 NumPy array (H, W), (H, W, C) or (N, H, W, C), or a torch "
            "tensor (C, H, W) or (N, C, H, W), float in [0, 1] or uint8, with C = 1, 3 or 4")
#: float pixels further than this outside [0, 1] are refused (normalised or 0-255 values); smaller
#: excursions (a bicubic resize's overshoot) pass to the shift, which clips
RANGE_SLACK = 0.5
#: Pillow's fixed-point ITU-R 601-2 luma weights (``Image.convert("L")``), summing to 2^16
LUMA_U8 = (19595, 38470, 7471)
LUMA_FLOAT = (0.299, 0.587, 0.114)


class Batch(NamedTuple):
    """The engine's batch made from a caller's images, and the way back to the caller's form."""

    x: Any                              #: ``(N, 3, H, W)`` float tensor in [0, 1], channels-last
    restore: Callable[[Any], Any]       #: shifted ``x`` -> the caller's form, shape and dtype


def corrupt(images: Any, name: str, severity: int | None = 3, seed: int = 0, index: int | Sequence[int] = 0) -> Any:
    """``images`` under the shift ``name`` at ``severity``: the engine's pixels, in the caller's form.

    Parameters
    ----------
    images:
        A PIL image (``RGB``, ``L`` or ``RGBA``; returns one of the same mode and size), a uint8
        NumPy array ``(H, W)``, ``(H, W, C)`` or ``(N, H, W, C)`` (returns uint8 of the same
        shape), or a torch tensor ``(C, H, W)`` or ``(N, C, H, W)``, float in [0, 1] or uint8
        (returns the same shape, dtype and device), with ``C`` 1 (grey), 3 (RGB) or 4 (RGBA).
        Images must be at least 32 px a side and should be at the model's input size already
        (after resize and crop, before normalisation).
    name:
        Any shift ``shiftbench list shifts`` shows but the PGD attacks (they need a model): the 15
        ImageNet-C corruptions and the 4 extra ones, the ``<blur>-scaled`` variants,
        ``greyscale``, ``noise2net``.
    severity:
        1-5; ``None`` for the shifts without severities (``greyscale``, ``noise2net``).
    seed:
        Seed of the random draws, as ``shiftbench.evaluate(..., seed=)``.
    index:
        Dataset index of the (first) image: image ``i`` of a batch gets ``index + i``; or one
        index per image. With the engine's seed and index, a random shift draws what the engine
        draws for that example.

    Raises
    ------
    ConfigError
        An unknown name (with the closest ones), a severity the shift does not take, a PGD
        attack, an input form not listed above, images under 32 px, float pixels outside [0, 1].

    Examples
    --------
    >>> import numpy as np
    >>> from shiftbench import corrupt
    >>> image = np.full((32, 32, 3), 128, np.uint8)
    >>> corrupt(image, "contrast", severity=5)[0, 0].tolist()   # deviations from the mean x 0.05
    [128, 128, 128]
    >>> noisy = corrupt(image, "gaussian_noise", severity=2, seed=0, index=7)
    >>> noisy.shape, noisy.dtype.name
    ((32, 32, 3), 'uint8')
    >>> bool((noisy == corrupt(image, "gaussian_noise", 2, index=7)).all())    # (seed, index) fix the draws
    True
    >>> bool((noisy == corrupt(image, "gaussian_noise", 2, index=8)).all())
    False
    """
    require("shiftbench.corrupt", "torch")   # without [eval]: one line naming it
    shift = corruption(name, severity)
    batch = as_batch(images)
    return batch.restore(apply_shift(shift, batch.x, example_indices(index, batch.x.shape[0]), seed))


def corruption(name: str, severity: int | None) -> Shift:
    """The registered shift ``name`` at ``severity`` for :func:`corrupt`, or a one-line ConfigError
    (unknown name: the closest ones; a severity the shift does not take; a shift that needs a model)."""
    if not isinstance(name, str):
        raise ConfigError(f"corrupt: the shift name must be a string such as 'fog', got {type(name).__name__}")
    if _takes_no_severity(name):
        shift = get_shift(name, None)
        if shift.needs_model:
            raise ConfigError(f"shift {name!r} attacks a model, which corrupt() does not take; run it with "
                              f"shiftbench.evaluate, or call get_shift({name!r})(x, indices, seed, model=..., "
                              "targets=...)")
        if severity is not None:
            raise ConfigError(f"shift {name!r} has no severities; pass severity=None")
        return shift
    if severity is not None and (isinstance(severity, bool) or not hasattr(severity, "__index__")):
        check_shift(name, 1)                                        # an unknown name is reported first
        raise ConfigError(f"shift {name!r}: severity must be an integer 1-5, got {severity!r}")
    return get_shift(name, None if severity is None else operator.index(severity))


def _takes_no_severity(name: str) -> bool:
    try:
        check_shift(name, None)
    except ConfigError:
        return False
    return True


def example_indices(index: Any, n: int) -> list[int]:
    """``index, index + 1, ..., index + n - 1`` for an integer ``index``; else ``index`` as ``n`` ints."""
    try:
        if isinstance(index, bool) or isinstance(index, str):
            raise TypeError
        if not hasattr(index, "__len__") or getattr(index, "ndim", 1) == 0:     # an int, a 0-d array or tensor
            start = operator.index(index)
            return list(range(start, start + n))
        indices = [operator.index(i) for i in index]
    except TypeError:
        raise ConfigError("corrupt: index must be an integer (the dataset index of the first image) or one "
                          f"integer per image, got {index!r}") from None
    if len(indices) != n:
        raise ConfigError(f"corrupt: got {len(indices)} indices for {n} image{'s' * (n != 1)}; pass one per image "
                          "or the first image's index")
    return indices


def apply_shift(shift: Shift, x: Any, indices: Sequence[int], seed: int) -> Any:
    """``shift(x, indices, seed)`` without autograd: the runner's call on a batch."""
    import torch  # deferred: loads torch

    with torch.no_grad():
        return shift(x, indices, check_seed(seed))


def check_seed(seed: Any) -> int:
    """``seed`` as an int, or a ConfigError."""
    if isinstance(seed, bool) or not hasattr(seed, "__index__"):
        raise ConfigError(f"corrupt: seed must be an integer, got {seed!r}")
    return operator.index(seed)


# ------------------------------------------------------------------------------- input forms

def as_batch(images: Any) -> Batch:
    """The engine's batch of ``images`` (any form :func:`corrupt` accepts) and the way back."""
    pil = sys.modules.get("PIL.Image")
    if pil is not None and isinstance(images, pil.Image):
        return _from_pil(images)
    if isinstance(images, np.ndarray):
        return _from_numpy(images)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(images, torch.Tensor):
        return _from_tensor(images)
    raise ConfigError(f"corrupt: cannot corrupt a {type(images).__name__}; pass {ACCEPTED}")


def _from_pil(image: Any) -> Batch:
    from PIL import Image  # deferred: loads Pillow (already loaded: the caller holds a PIL image)

    if image.mode not in ("RGB", "L", "RGBA"):
        raise ConfigError(f"corrupt: PIL images of mode {image.mode!r} are not supported; convert first, "
                          "e.g. image.convert('RGB')")
    batch = _from_numpy(np.asarray(image))
    return Batch(batch.x, lambda y: Image.fromarray(batch.restore(y)))


def _from_numpy(array: np.ndarray) -> Batch:
    import torch  # deferred: loads torch

    if array.dtype != np.uint8 or array.ndim not in (2, 3, 4) or (array.ndim > 2 and array.shape[-1] not in (1, 3, 4)):
        raise ConfigError(f"corrupt: got a NumPy array of dtype {array.dtype} and shape {array.shape}; NumPy "
                          "images must be uint8 (H, W), (H, W, C) or (N, H, W, C) with C = 1, 3 or 4 "
                          "(pass float pixels in [0, 1] as a torch tensor (C, H, W))")
    nhwc = array[None, ..., None] if array.ndim == 2 else array[None] if array.ndim == 3 else array
    writable = np.require(nhwc, requirements=("C", "W"))       # a copy where read-only (a PIL image's array)
    batch = _from_nchw(torch.from_numpy(writable).permute(0, 3, 1, 2))
    return Batch(batch.x, lambda y: batch.restore(y).permute(0, 2, 3, 1).contiguous().numpy().reshape(array.shape))


def _from_tensor(t: Any) -> Batch:
    import torch  # deferred: loads torch (already loaded: the caller holds a tensor)

    if t.ndim not in (3, 4) or t.shape[-3] not in (1, 3, 4) or not (t.is_floating_point() or t.dtype == torch.uint8):
        raise ConfigError(f"corrupt: got a tensor of dtype {t.dtype} and shape {tuple(t.shape)}; tensors must be "
                          "(C, H, W) or (N, C, H, W) with C = 1, 3 or 4, float in [0, 1] or uint8")
    batch = _from_nchw(t.detach() if t.ndim == 4 else t.detach()[None])
    return Batch(batch.x, batch.restore if t.ndim == 4 else lambda y: batch.restore(y)[0])


def _from_nchw(t: Any) -> Batch:
    """``(N, C, H, W)`` uint8 or float -> the engine's batch of its RGB channels, and the way back
    (uint8: rounded; one channel: luma; a fourth channel: put back unchanged)."""
    import torch  # deferred: loads torch

    n, c, h, w = t.shape
    if min(h, w) < MIN_SIZE:
        raise ConfigError(f"corrupt: images must be at least {MIN_SIZE}x{MIN_SIZE} px (as in imagecorruptions), "
                          f"got {w}x{h}; resize them first")
    rgb = t.expand(-1, 3, -1, -1) if c == 1 else t[:, :3]
    if t.dtype == torch.uint8:
        x = rgb.to(torch.float32).mul_(1.0 / 255)          # = torchvision's ToDtype(float32, scale=True)
    else:
        _check_range(rgb)
        x = rgb
    x = x.contiguous(memory_format=torch.channels_last)    # the engine's layout

    def restore(y: Any) -> Any:
        y = y.contiguous()
        if t.dtype == torch.uint8:
            y = to_uint8(y)
        if c == 1:
            y = luma(y)
        elif c == 4:
            y = torch.cat([y, t[:, 3:]], dim=1)
        return y

    return Batch(x, restore)


def _check_range(x: Any) -> None:
    lo, hi = float(x.min()), float(x.max())
    if lo < -RANGE_SLACK or hi > 1 + RANGE_SLACK:
        raise ConfigError(f"corrupt: float pixels must lie in [0, 1], got values in [{lo:.3g}, {hi:.3g}]; corrupt "
                          "before Normalize, and divide 0-255 pixels by 255")


def to_uint8(x: Any) -> Any:
    """[0, 1] floats -> uint8 by rounding, ``round(clip(x, 0, 1) * 255)`` (the engine's convention,
    :func:`shiftbench.shifts.corruptions._common.to_uint8`)."""
    import torch  # deferred: loads torch

    return x.mul(255).round_().clamp_(0, 255).to(torch.uint8)


def luma(y: Any) -> Any:
    """``(N, 3, H, W)`` -> ``(N, 1, H, W)`` ITU-R 601-2 luma: Pillow's fixed point for uint8
    (``convert("L")``), ``0.299 R + 0.587 G + 0.114 B`` for floats."""
    import torch  # deferred: loads torch

    if y.dtype == torch.uint8:
        r, g, b = y.to(torch.int32).unbind(1)
        return ((LUMA_U8[0] * r + LUMA_U8[1] * g + LUMA_U8[2] * b + (1 << 15)) >> 16).to(torch.uint8)[:, None]
    return (LUMA_FLOAT[0] * y[:, 0:1] + LUMA_FLOAT[1] * y[:, 1:2] + LUMA_FLOAT[2] * y[:, 2:3]).clamp(0, 1)
