"""ImageNet-C blur corruptions on [0, 1] batches, in torch (Hendrycks & Dietterich 2019).

Registered shifts (severities 1-5), with the parameters of the reference implementation
``imagecorruptions`` (imaug fork, ``corruptions.py``)::

    gaussian_blur  skimage Gaussian (scipy, mode 'nearest', truncate 4), sigma = 1 2 3 4 6   (extra)
    defocus_blur   OpenCV filter2D (BORDER_REFLECT_101) with the fork's antialiased disk,
                   (radius, alias sigma) = (3,.1) (4,.5) (6,.5) (8,.5) (10,.5)
    motion_blur    sum of 2r+1 one-pixel shifts along a line at a random angle U(-45, 45) deg,
                   edge-replicated, one-sided Gaussian weights, (r, sigma) = (10,3) (15,5)
                   (15,8) (15,12) (20,15)                                                  [random]
    zoom_blur      mean of the image and its centre crops zoomed (bilinear, scipy's
                   ``zoom(order=1)``) by 1 .. 1.10 step .01, 1 .. 1.15 .01, 1 .. 1.20 .02,
                   1 .. 1.24 .02, 1 .. 1.30 .03
    glass_blur     Gaussian blur, uint8 truncation, local pixel shuffling, Gaussian blur;
                   (sigma, max_delta, iterations) = (.7,1,2) (.9,2,1) (1,2,3) (1.1,3,2) (1.5,4,2)  [random]

How each follows the reference:

* gaussian_blur, and glass_blur's two blurs: scipy's kernel (radius ``int(4 sigma + .5)``) and
  'nearest' boundary, exact (float32 arithmetic).
* defocus_blur: the kernel is the fork's ``disk()`` computed the same way (binary disk in a
  17 x 17 array, or ``(2r+1)^2`` above radius 8, normalised, then a 3 x 3 / 5 x 5 Gaussian with
  OpenCV's reflect-101 border *inside the kernel array* - which, for radius 8 and 10, reflects
  1.3% / 1.1% extra mass back in, so the reference brightens slightly; reproduced). Applied by
  FFT (per image, on a reflect-101 padded image), equal to OpenCV's filter2D up to float error.
* motion_blur: the reference's own shift arithmetic (``ceil(i * sin / hypot - .5)`` ...), its
  edge replication, and its early stop once a shift reaches the image size (on images smaller
  than ~2r px the remaining weights are dropped without renormalising, so the image darkens -
  as in the reference). Shifts landing on the same pixel offset are merged.
* zoom_blur: scipy's output size ``round(crop * z)`` and sample positions ``o (n - 1)/(m - 1)``
  (``F.interpolate(bilinear, align_corners=True)``), including scipy's zero for a last sample
  that float rounding puts past the edge (never at 224 px; at some other sizes).
* glass_blur: see :func:`glass_shuffle_map`. The reference's "swap" ``x[h, w], x[h', w'] =
  x[h', w'], x[h, w]`` on NumPy/numba array views is not a swap: it copies ``x[h', w']`` into
  ``x[h, w]`` and leaves ``x[h', w']`` as it is. Pixels are visited in reverse raster order,
  so a pixel may copy a value that an earlier visit already copied from elsewhere: values
  travel along chains. Here every pixel follows its chain at once (pointer jumping), which is
  the reference's sequential result exactly - given the same offsets; the offsets are drawn from
  the image's generator (uniform on ``[-max_delta, max_delta - 1]``, as numba's ``randint``),
  so the output matches the reference in distribution, and value for value when the
  reference's offsets are replayed (the tests do). The uint8 truncation between the two blurs is
  kept (``floor(255 y) / 255``).

Outputs are clipped to [0, 1] as the reference clips (0-255); they stay float (``corrupt``
truncates to uint8).

Image size. By default every parameter is the reference's, in pixels, calibrated for 224 px
ImageNet images, at any size >= 32 px - which is what ``imagecorruptions.corrupt`` does with a
32 px CIFAR image or an upscaled MNIST digit: at 32 px gaussian_blur's sigma 6 (a 49-tap kernel
wider than the image, handled exactly as scipy's 'nearest' mode does), defocus radius 10 and
motion length 41 px wipe out most of the content, and motion blur drops the shifts beyond the
image (darkening, as the reference). zoom_blur is scale-free (relative zoom factors).
``scale_to_size=True`` (the factories' keyword, and the registered ``<name>-scaled`` shifts)
multiplies the pixel parameters by ``min(H, W) / 224`` instead: sigmas and radii (defocus radius
as a real number; motion radius rounded; glass max_delta rounded, at least 1). This is a rule
of thumb, not CIFAR-10-C's parameters (Hendrycks' ``make_cifar_c.py`` chose its own).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.fft import next_fast_len

from shiftbench.shifts.base import Shift, register_shift
from shiftbench.shifts.corruptions._common import (
    clip01,
    corruption_shift,
    filter_matrix,
    for_each_image,
    gaussian_filter,
    pad2d,
    param,
    random_bits,
    scale_factor,
)

GAUSSIAN_BLUR = (1, 2, 3, 4, 6)
DEFOCUS_BLUR = ((3, 0.1), (4, 0.5), (6, 0.5), (8, 0.5), (10, 0.5))
MOTION_BLUR = ((10, 3), (15, 5), (15, 8), (15, 12), (20, 15))
GLASS_BLUR = ((0.7, 1, 2), (0.9, 2, 1), (1, 2, 3), (1.1, 3, 2), (1.5, 4, 2))
#: the reference's ``np.arange(start, stop, step)`` arguments, verbatim (their float values decide
#: the crop sizes)
ZOOM_BLUR = ((1, 1.11, 0.01), (1, 1.16, 0.01), (1, 1.21, 0.02), (1, 1.26, 0.02), (1, 1.31, 0.03))


def zoom_factors(severity: int) -> list[float]:
    """The reference's zoom factors (``np.arange(1, stop, step)`` in float64)."""

    start, stop, step = param(ZOOM_BLUR, "zoom_blur", severity)
    return [float(z) for z in np.arange(start, stop, step)]


# ---------------------------------------------------------------- gaussian_blur

def gaussian_blur(x: Any, severity: int, scale_to_size: bool = False) -> Any:
    """``skimage.filters.gaussian(x, sigma=c, channel_axis=-1)`` clipped to [0, 1]."""
    import torch  # deferred: loads torch

    sigma = param(GAUSSIAN_BLUR, "gaussian_blur", severity) * scale_factor(*x.shape[-2:], scale_to_size)
    out = torch.empty_like(x)

    def one(i: int) -> None:
        out[i] = gaussian_filter(x[i], sigma, "nearest").clamp_(0.0, 1.0)

    for_each_image(x.shape[0], one, x.device)
    return out


# ---------------------------------------------------------------- defocus_blur

@functools.lru_cache(maxsize=64)
def disk_kernel(radius: float, alias_blur: float) -> Any:
    """The fork's ``disk(radius, alias_blur)`` as a float64 numpy array (its values, computed
    without OpenCV): a binary disk ``x^2 + y^2 <= r^2`` on ``[-8, 8]^2`` (``[-r, r]^2`` above
    radius 8) normalised to sum 1, then ``cv2.GaussianBlur`` with ksize 3 (5 above radius 8),
    ``sigma = alias_blur`` and OpenCV's default reflect-101 border within the array."""
    import torch  # deferred: loads torch

    if radius <= 8:
        half, ksize = 8, 3
    else:
        half, ksize = int(radius), 5
    t = np.arange(-half, half + 1)
    xx, yy = np.meshgrid(t, t)
    disk = ((xx ** 2 + yy ** 2) <= radius ** 2).astype(np.float32)
    disk = (disk / disk.sum()).astype(np.float64)
    g = np.exp(-0.5 * (np.arange(ksize) - (ksize - 1) / 2) ** 2 / alias_blur ** 2)
    g = tuple(g / g.sum())
    m = filter_matrix(g, 2 * half + 1, "mirror", torch.float64, "cpu").numpy()  # reflect-101 = 'mirror'
    return m @ disk @ m.T


def _fast_size(n: int) -> int:
    """The least m >= n whose prime factors are 2, 3 and 5 (fast FFT lengths):
    ``scipy.fft.next_fast_len(n, real=True)``.

    ``real=True`` on both axes, although :func:`correlate2d`'s ``rfft2`` is real only along the
    last axis: scipy's complex lengths (``real=False``) are 11-smooth, tuned to scipy's pocketfft,
    while the transform here is torch's (MKL/pocketfft on CPU, cuFFT on CUDA), and a different
    padded size changes the float rounding of the result. The 5-smooth length on both axes keeps
    every output bit-identical to the hand-written search this replaced (checked equal for
    n < 20000).
    """

    return next_fast_len(n, real=True)


@functools.lru_cache(maxsize=64)
def _kernel_spectrum(kernel_key: tuple[float, ...], kh: int, kw: int, nh: int, nw: int, device: Any) -> Any:
    import torch  # deferred: loads torch

    k = torch.zeros((nh, nw), dtype=torch.float64)
    k[:kh, :kw] = torch.tensor(kernel_key, dtype=torch.float64).view(kh, kw)
    return torch.fft.rfft2(k).conj().to(device=device, dtype=torch.complex64)


def correlate2d(x: Any, kernel: Any, mode: str = "mirror") -> Any:
    """``cv2.filter2D`` (a correlation, anchor at the centre) of every channel of ``x`` with the
    odd-sized 2-D ``kernel`` (numpy), boundary ``mode`` as in scipy ('mirror' = reflect-101), by
    FFT on an image padded to fast transform lengths (linear, not circular: the padding covers
    the kernel's reach)."""
    import torch  # deferred: loads torch

    kh, kw = kernel.shape
    h, w = x.shape[-2:]
    nh, nw = _fast_size(h + kh - 1), _fast_size(w + kw - 1)
    ph, pw = kh // 2, kw // 2
    spec = _kernel_spectrum(tuple(float(v) for v in kernel.ravel()), kh, kw, nh, nw, x.device)
    out = torch.empty_like(x)

    def one(i: int) -> None:
        xp = pad2d(x[i].float(), ph, nh - h - ph, pw, nw - w - pw, mode)
        out[i] = torch.fft.irfft2(torch.fft.rfft2(xp) * spec, s=(nh, nw))[..., :h, :w]

    for_each_image(x.shape[0], one, x.device)
    return out


def defocus_blur(x: Any, severity: int, scale_to_size: bool = False) -> Any:
    """ImageNet-C defocus_blur: ``cv2.filter2D`` per channel with the fork's disk kernel."""
    radius, alias = param(DEFOCUS_BLUR, "defocus_blur", severity)
    radius = radius * scale_factor(*x.shape[-2:], scale_to_size)
    return clip01(correlate2d(x, disk_kernel(float(radius), float(alias)), "mirror"))


# ---------------------------------------------------------------- motion_blur

def motion_taps(radius: int, sigma: float, angle: float, h: int, w: int) -> list[tuple[float, int, int]]:
    """The fork's ``_motion_blur`` as merged ``(weight, dy, dx)`` shifts: tap ``i`` of ``2r+1``
    has weight ``exp(-i^2 / 2 sigma^2)`` (normalised over all taps) and shift
    ``(-ceil(i p0 / hypot - .5), -ceil(i p1 / hypot - .5))``, ``p = width (sin, cos)(angle)``;
    the taps stop at the first shift reaching the image size (no renormalisation)."""

    width = 2 * int(radius) + 1
    k = np.exp(-(np.arange(width) ** 2) / (2 * float(sigma) ** 2)) / (np.sqrt(2 * np.pi) * sigma)
    k = k / np.sum(k)
    point = (width * np.sin(np.deg2rad(angle)), width * np.cos(np.deg2rad(angle)))
    hypot = math.hypot(point[0], point[1])
    taps: dict[tuple[int, int], float] = {}
    for i in range(width):
        dy = -math.ceil(((i * point[0]) / hypot) - 0.5)
        dx = -math.ceil(((i * point[1]) / hypot) - 0.5)
        if abs(dy) >= h or abs(dx) >= w:
            break
        taps[(dy, dx)] = taps.get((dy, dx), 0.0) + float(k[i])
    return [(wt, dy, dx) for (dy, dx), wt in taps.items()]


def _motion_params(severity: int, h: int, w: int, scale_to_size: bool) -> tuple[int, float]:
    radius, sigma = param(MOTION_BLUR, "motion_blur", severity)
    s = scale_factor(h, w, scale_to_size)
    return (radius, sigma) if s == 1.0 else (int(round(radius * s)), max(sigma * s, 1e-3))


def motion_blur_from_noise(x: Any, severity: int, angles: Sequence[float], scale_to_size: bool = False) -> Any:
    """Motion blur of image ``i`` at ``angles[i]`` degrees (the reference draws U(-45, 45))."""
    import torch  # deferred: loads torch

    h, w = x.shape[-2:]
    radius, sigma = _motion_params(severity, h, w, scale_to_size)
    out = torch.empty_like(x)

    def one(i: int) -> None:
        taps = motion_taps(radius, sigma, float(angles[i]), h, w)
        top, bottom = max(0, max(t[1] for t in taps)), max(0, -min(t[1] for t in taps))
        left, right = max(0, max(t[2] for t in taps)), max(0, -min(t[2] for t in taps))
        xp = pad2d(x[i], top, bottom, left, right, "nearest")
        acc = torch.zeros_like(x[i])
        for wt, dy, dx in taps:
            acc.add_(xp[:, top - dy:top - dy + h, left - dx:left - dx + w], alpha=wt)
        out[i] = acc.clamp_(0.0, 1.0)

    for_each_image(x.shape[0], one, x.device)
    return out


def motion_angles(gens: Sequence[Any]) -> list[float]:
    """One angle U(-45, 45) degrees per image (float64 uniform from the image's generator)."""
    import torch  # deferred: loads torch

    return [-45.0 + 90.0 * float(torch.rand(1, dtype=torch.float64, generator=g)) for g in gens]


def motion_blur(x: Any, severity: int, gens: Sequence[Any], scale_to_size: bool = False) -> Any:
    """ImageNet-C motion_blur; image ``i`` draws its angle from ``gens[i]``."""
    return motion_blur_from_noise(x, severity, motion_angles(gens), scale_to_size)


# ---------------------------------------------------------------- zoom_blur

def _zoom_plan(n: int, z: float) -> tuple[int, int, int, int]:
    """(crop start, crop size, zoomed size, number of leading zoomed samples that scipy computes;
    a last sample that float rounding puts past the crop's edge is 0 in scipy's 'constant' mode)."""
    crop = int(math.ceil(n / float(z)))
    size = int(round(crop * z))
    f = (crop - 1) / (size - 1) if size > 1 else 0.0
    valid = size
    while valid > 0 and (valid - 1) * f > crop - 1:
        valid -= 1
    return (n - crop) // 2, crop, size, valid


def zoom_blur(x: Any, severity: int) -> Any:
    """ImageNet-C zoom_blur: ``(x + sum_z clipped_zoom(x, z)) / (n + 1)``, clipped."""
    import torch  # deferred: loads torch
    import torch.nn.functional as F  # deferred: loads torch

    h, w = x.shape[-2:]
    zooms = zoom_factors(severity)
    plans = [(_zoom_plan(h, z), _zoom_plan(w, z)) for z in zooms]
    out = torch.empty_like(x)

    def one(i: int) -> None:
        # channels-last: torch's bilinear kernel vectorises over pixels x channels (measured 1.5x)
        xi = x[i:i + 1].contiguous(memory_format=torch.channels_last)
        acc = xi.clone()
        for (t0, ch, oh, vh), (t1, cw, ow, vw) in plans:
            if (ch, oh, cw, ow) == (h, h, w, w):
                acc += xi  # zoom 1 (or a crop that zooms back to the same size) is the identity
                continue
            crop = xi[..., t0:t0 + ch, t1:t1 + cw]
            zoomed = F.interpolate(crop, size=(oh, ow), mode="bilinear", align_corners=True)[..., :h, :w]
            if vh < min(oh, h):
                zoomed[..., vh:, :] = 0
            if vw < min(ow, w):
                zoomed[..., :, vw:] = 0
            acc += zoomed
        out[i] = acc[0].div_(len(zooms) + 1).clamp_(0.0, 1.0)

    for_each_image(x.shape[0], one, x.device)
    return out


# ---------------------------------------------------------------- glass_blur

def _glass_params(severity: int, h: int, w: int, scale_to_size: bool) -> tuple[float, int, int]:
    sigma, delta, iterations = param(GLASS_BLUR, "glass_blur", severity)
    s = scale_factor(h, w, scale_to_size)
    return (sigma, delta, iterations) if s == 1.0 else (sigma * s, max(1, int(round(delta * s))), iterations)


def glass_offsets(gen: Any, h: int, w: int, delta: int, iterations: int) -> Any:
    """One image's draws: ``(iterations, 2, H - 2d, W - 2d)`` int32 offsets (dx, dy), uniform on
    ``[-d, d - 1]`` as numba's ``randint(-d, d)``, for the shuffled pixels
    ``(d + 1 .. H - d) x (d + 1 .. W - d)`` in raster order: ``floor(2d v / 2^24) - d`` for 24
    random bits ``v`` (exactly uniform for d = 1, 2, 4; within 5e-7 for d = 3)."""
    import torch  # deferred: loads torch

    nh, nw = h - 2 * delta, w - 2 * delta
    words = random_bits([gen], iterations * nh * nw)[0].view(torch.int32).view(iterations, nh, nw, 2)
    return ((words.permute(0, 3, 1, 2) & 0xFFFFFF) * (2 * delta) >> 24) - delta


@functools.lru_cache(maxsize=16)
def _glass_grid(h: int, w: int, delta: int, device: Any) -> tuple[Any, Any, Any]:
    """(flat index of every pixel, flat index of the visited pixels (nh, nw), visited mask) - int32."""
    import torch  # deferred: loads torch

    grid = torch.arange(h * w, dtype=torch.int32, device=device)
    inner = (slice(delta + 1, h - delta + 1), slice(delta + 1, w - delta + 1))
    visited = torch.zeros((h, w), dtype=torch.int32, device=device)
    visited[inner] = 1
    return grid, grid.view(h, w)[inner].contiguous(), visited.view(-1)


def glass_shuffle_map(offsets: Any, h: int, w: int, delta: int) -> Any:
    """Flat source index (int32, ``H * W``) of every pixel after the reference's shuffling loop(s).

    ``offsets``: ``(iterations, 2, H - 2d, W - 2d)`` (dx, dy) of the visited pixels in raster
    order. Each pass visits ``h = H - d .. d + 1`` and within it ``w = W - d .. d + 1`` (both
    descending) and sets ``x[h, w] = x[h + dy, w + dx]`` (the reference's "swap", see the module
    docstring). A pixel whose source was visited earlier in the pass (flat offset
    ``dy W + dx > 0``, source inside the visited region) gets what that source got: following
    these links to a pixel whose source was not visited yet gives the value's origin. Links are
    followed for all pixels at once by pointer jumping (log2 of the longest chain steps; chains
    are a few pixels long). Passes compose.
    """
    import torch  # deferred: loads torch

    grid, target, visited = _glass_grid(h, w, delta, offsets.device)
    inner = (slice(delta + 1, h - delta + 1), slice(delta + 1, w - delta + 1))
    total = None
    for dxy in offsets.to(torch.int32):
        step = dxy[1] * w + dxy[0]  # flat offset of the source
        src = target + step
        earlier = (step > 0).to(torch.int32).mul_(visited.index_select(0, src.view(-1)).view_as(src))
        link = grid.clone()
        link.view(h, w)[inner] = target + step * earlier
        while True:  # the root of every chain
            nxt = link.index_select(0, link)
            if torch.equal(nxt, link):
                break
            link = nxt
        source = grid.clone()
        source.view(h, w)[inner] = src
        origin = source.index_select(0, link)  # the root's source
        total = origin if total is None else total.index_select(0, origin)
    return total


def glass_blur_from_noise(x: Any, severity: int, offsets: Sequence[Any], scale_to_size: bool = False) -> Any:
    """Glass blur with the given per-image offsets (see :func:`glass_offsets`)."""
    import torch  # deferred: loads torch

    h, w = x.shape[-2:]
    sigma, delta, _ = _glass_params(severity, h, w, scale_to_size)
    out = torch.empty_like(x)

    def one(i: int) -> None:
        y = gaussian_filter(x[i], sigma, "nearest").mul_(255).floor_().div_(255)  # np.uint8(255 y)
        idx = glass_shuffle_map(offsets[i].to(x.device), h, w, delta)
        y = y.view(y.shape[0], -1).index_select(1, idx).view(y.shape)
        out[i] = gaussian_filter(y, sigma, "nearest").clamp_(0.0, 1.0)

    for_each_image(x.shape[0], one, x.device)
    return out


def glass_blur(x: Any, severity: int, gens: Sequence[Any], scale_to_size: bool = False) -> Any:
    """ImageNet-C glass_blur; image ``i`` draws its offsets from ``gens[i]``."""
    h, w = x.shape[-2:]
    _, delta, iterations = _glass_params(severity, h, w, scale_to_size)
    return glass_blur_from_noise(x, severity, [glass_offsets(g, h, w, delta, iterations) for g in gens],
                                 scale_to_size)


# ---------------------------------------------------------------- registry

_TABLES = {"gaussian_blur": GAUSSIAN_BLUR, "defocus_blur": DEFOCUS_BLUR, "motion_blur": MOTION_BLUR,
           "zoom_blur": ZOOM_BLUR, "glass_blur": GLASS_BLUR}


def _shift(name: str, severity: int, fn: Any, random: bool, scale_to_size: bool = False) -> Shift:
    kwargs = {"scale_to_size": True} if scale_to_size else {}
    return corruption_shift(name, severity, fn, random=random,
                            shift_name=f"{name}-scaled" if scale_to_size else None, **kwargs)


@register_shift("gaussian_blur", description="ImageNet-C gaussian blur (extra): sigma = 1 ... 6 px")
def _gaussian_blur(severity: int, *, scale_to_size: bool = False) -> Shift:
    return _shift("gaussian_blur", severity, gaussian_blur, False, scale_to_size)


@register_shift("defocus_blur", description="ImageNet-C defocus blur: antialiased disk, radius 3 ... 10 px")
def _defocus_blur(severity: int, *, scale_to_size: bool = False) -> Shift:
    return _shift("defocus_blur", severity, defocus_blur, False, scale_to_size)


@register_shift("motion_blur", description="ImageNet-C motion blur: 21-41 px line at a random angle in +-45 deg")
def _motion_blur(severity: int, *, scale_to_size: bool = False) -> Shift:
    return _shift("motion_blur", severity, motion_blur, True, scale_to_size)


@register_shift("zoom_blur", description="ImageNet-C zoom blur: mean of centre zooms up to 1.10 ... 1.30")
def _zoom_blur(severity: int) -> Shift:
    return _shift("zoom_blur", severity, zoom_blur, False)


@register_shift("glass_blur", description="ImageNet-C glass blur: blur, local pixel shuffling, blur")
def _glass_blur(severity: int, *, scale_to_size: bool = False) -> Shift:
    return _shift("glass_blur", severity, glass_blur, True, scale_to_size)


for _name, _factory in (("gaussian_blur", _gaussian_blur), ("defocus_blur", _defocus_blur),
                        ("motion_blur", _motion_blur), ("glass_blur", _glass_blur)):
    register_shift(f"{_name}-scaled", description=f"{_name} with its pixel sizes scaled by min(H, W) / 224")(
        functools.partial(_factory, scale_to_size=True))


__all__ = ["gaussian_blur", "defocus_blur", "motion_blur", "zoom_blur", "glass_blur", "motion_blur_from_noise",
           "glass_blur_from_noise", "glass_offsets", "glass_shuffle_map", "motion_taps", "motion_angles",
           "disk_kernel", "correlate2d", "zoom_factors"]
