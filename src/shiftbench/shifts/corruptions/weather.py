"""ImageNet-C weather corruptions on [0, 1] batches, in torch (Hendrycks & Dietterich 2019).

Registered shifts (severities 1-5, all random), with the parameters of the reference
implementation ``imagecorruptions`` (imaug fork 1.1.5, ``corruptions.py``)::

    snow     snow layer N(loc, scale) -> centre zoom -> threshold -> motion blur (fork's kernel,
             angle ~ U(-135, -45) deg) -> uint8 rounding; image greyed towards 1.5 Y + 0.5;
             x + layer + layer rotated 180 deg
             (loc, scale, zoom, threshold, radius, sigma, blend) =
             (.1,.3,3,.5,10,4,.8) (.2,.3,2,.5,12,4,.7) (.55,.3,4,.9,12,8,.7)
             (.55,.3,4.5,.85,12,8,.65) (.55,.3,2.5,.85,12,12,.55)
    frost    a * x + b * texture patch, (a, b) = (1,.4) (.8,.6) (.7,.7) (.65,.7) (.6,.75);
             one of the 6 bundled textures, scaled by 1.1 (more if the image is larger), random crop
    fog      x + c * plasma fractal (diamond-square, size = next power of 2 >= image side),
             rescaled by max(x) / (max(x) + c), (c, wibble decay) = (1.5,2) (2,2) (2.5,1.7) (2.5,1.5) (3,1.4)
    spatter  liquid layer N(loc, scale) -> Gaussian blur -> threshold; severities 1-3 "water":
             Canny edges -> distance transform -> histogram equalisation -> emboss -> pale
             turquoise added; 4-5 "mud": blurred mask blended with brown.
             (loc, scale, sigma, threshold, intensity, mud) = (.65,.3,4,.69,.6,0) (.65,.3,3,.68,.6,0)
             (.65,.3,2,.68,.5,0) (.65,.3,1,.65,1.5,1) (.67,.4,1,.65,1.5,1)

(``brightness``, the fourth weather corruption of ImageNet-C, is in ``digital.py`` with the other
HSV code.)

Randomness: image ``i`` uses ``image_generator(seed, "<name>.<severity>", indices[i])`` (a CPU
generator, so results do not depend on batch size, order or device). Each image draws the same
standard normals/uniforms, in the same order and shapes, as the reference's NumPy calls (normals
drawn in float32 - 5x cheaper than float64 on CPU - and used in float64; snow:
``(H, W)`` normals then one uniform; fog: ``mapsize**2 - 1`` uniforms in the reference's order;
spatter: ``(H, W)`` normals; frost: texture index then crop corner), and everything after the
draw is deterministic: the ``*_from_noise`` functions take the draws, so a NumPy stream can be
replayed to compare with the reference value for value (see the tests).

How each step follows the reference (all batched over the images):

* snow: ``scipy.ndimage.zoom(order=1)`` = bilinear with aligned corners (and scipy's zero for a
  last sample that rounding puts past the edge); the fork's motion blur is its own kernel
  (``_motion_blur``: Gaussian weights along a line of ``2 r + 1`` one-pixel shifts with edge
  replication), reproduced shift by shift; the grey level is OpenCV's ``RGB2GRAY`` (BT.601).
* frost: textures decoded with Pillow (identical to ``cv2.imread`` for these files, alpha
  dropped), resized with bicubic interpolation (a = -0.75, half-pixel centres, as
  ``cv2.INTER_CUBIC``; OpenCV's fixed-point arithmetic is not emulated, so ~0.02% of texels
  differ by 1/255) and rounded to uint8. Decoded, resized textures are cached per (texture, H, W).
  A texture smaller than the image is scaled up until it covers it, times 1.1 (the reference's
  rule; no tiling).
* fog: the diamond-square recursion of the reference, vectorised over the batch (a float32 map
  as the reference's; its float64 wibble arithmetic is done in float32: < 1e-4 grey levels).
* spatter: OpenCV's pipeline re-implemented: ``Canny(50, 150)`` (3x3 Sobel with replicated
  borders, L1 magnitude, OpenCV's non-maximum suppression rules and fixed-point angle sectors,
  8-connected hysteresis), ``distanceTransform(DIST_L2, 5)`` (the 5x5 chamfer metric 1 / 1.4 /
  2.1969 summed in float32 as OpenCV 5 does, computed as shortest paths), truncation at 20,
  ``blur`` 3x3 (reflect-101 borders), ``equalizeHist``, the emboss ``filter2D`` with uint8
  saturation; the
  Gaussian blurs are scikit-image's (``mode='nearest'``, ``truncate=4``). One deliberate
  difference: when the water mask is empty (no liquid, or liquid where the embossed distance map
  is 0), the reference divides 0 by 0 and returns NaN (a black image after ``corrupt``'s uint8
  cast; ~2.5% of 32 px images at severity 1, not seen at 224 px); here the image is returned
  unchanged.

Image size: the parameters are the reference's (calibrated for 224 px ImageNet) at every size,
which is what ``imagecorruptions.corrupt`` does for a 32 px (CIFAR) input; they are in pixels,
so on small images the structures are large relative to the image: snowflakes and their motion
blur (21-25 px) cover a large part of a 32 px image; a frost patch is a 32 px crop of a
~600 px texture (smooth haze rather than ice crystals); spatter blobs (blur sigma 1-4 px) are
relatively larger and a 32 px water image can have an empty mask (then it is unchanged); fog's
plasma map is 32 px with fewer octaves. CIFAR-10-C (Hendrycks' ``make_cifar_c.py``) used other,
size-specific parameters; they are not reproduced here.

Devices and precision: the noise layers are processed in float64 (as the reference does), the
images in float32; any CUDA device works (Apple's MPS has no float64).

Speed: on CPU each image runs in its own worker thread with torch single-threaded inside
(:func:`~shiftbench.shifts.corruptions._common.map_images`); spatter's Canny hysteresis dilates
with shifted ORs and its chamfer relaxation shares row-pair minima between move sets.
"""
from __future__ import annotations

import functools
import importlib.resources
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from shiftbench.shifts.base import Shift, register_shift
from shiftbench.shifts.corruptions._common import corruption_shift, gaussian_filter, pad2d, param
from shiftbench.shifts.greyscale import LUMA_601

SNOW = ((0.1, 0.3, 3, 0.5, 10, 4, 0.8),
        (0.2, 0.3, 2, 0.5, 12, 4, 0.7),
        (0.55, 0.3, 4, 0.9, 12, 8, 0.7),
        (0.55, 0.3, 4.5, 0.85, 12, 8, 0.65),
        (0.55, 0.3, 2.5, 0.85, 12, 12, 0.55))
FROST = ((1, 0.4), (0.8, 0.6), (0.7, 0.7), (0.65, 0.7), (0.6, 0.75))
FOG = ((1.5, 2), (2.0, 2), (2.5, 1.7), (2.5, 1.5), (3.0, 1.4))
SPATTER = ((0.65, 0.3, 4, 0.69, 0.6, 0),
           (0.65, 0.3, 3, 0.68, 0.6, 0),
           (0.65, 0.3, 2, 0.68, 0.5, 0),
           (0.65, 0.3, 1, 0.65, 1.5, 1),
           (0.67, 0.4, 1, 0.65, 1.5, 1))
FROST_TEXTURES = ("frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg", "frost6.jpg")
WATER_RGB = (175 / 255, 238 / 255, 238 / 255)   # pale turquoise
MUD_RGB = (63 / 255, 42 / 255, 20 / 255)


def _stack(draws: list[Any], device: Any) -> Any:
    import torch  # deferred: loads torch

    return torch.stack(draws).to(device)


# ---------------------------------------------------------------- snow

@functools.lru_cache(maxsize=64)
def _scipy_zoom_matrix(n_in: int, n_out: int) -> Any:
    """``scipy.ndimage.zoom(order=1, mode='constant', grid_mode=False)`` along one axis as an
    ``(n_out, n_in)`` float64 matrix: sample ``k * (n_in - 1) / (n_out - 1)`` linearly; a sample
    that rounding puts beyond ``n_in - 1`` is 0 (cval), as scipy makes it."""

    zoom = (n_in - 1) / (n_out - 1) if n_out > 1 else 1.0
    m = np.zeros((n_out, n_in))
    for k in range(n_out):
        c = k * zoom
        if c > n_in - 1:
            continue
        i = math.floor(c)
        t = c - i
        m[k, i] += 1 - t
        if t > 0:
            m[k, i + 1] += t
    return m


def _clipped_zoom(layer: Any, zoom: float) -> Any:
    """The reference's ``clipped_zoom`` on (B, H, W): the centre ``ceil(n / zoom)`` crop, zoomed
    with ``scipy.ndimage.zoom(order=1)`` to ``round(crop * zoom)`` (bilinear, corners aligned)."""
    import torch  # deferred: loads torch

    h, w = layer.shape[-2:]
    ch, cw = math.ceil(h / zoom), math.ceil(w / zoom)
    top, left = (h - ch) // 2, (w - cw) // 2
    crop = layer[..., top:top + ch, left:left + cw]
    mh = torch.from_numpy(_scipy_zoom_matrix(ch, int(round(ch * zoom)))).to(crop)
    mw = torch.from_numpy(_scipy_zoom_matrix(cw, int(round(cw * zoom)))).to(crop)
    return mh @ crop @ mw.t()


def _motion_offsets(radius: int, sigma: float, angle: float, h: int, w: int) -> list[tuple[float, int, int]]:
    """The fork's ``_motion_blur`` as (weight, dy, dx) one-pixel shifts."""
    width = 2 * radius + 1
    k = [math.exp(-(i ** 2) / (2 * sigma ** 2)) / (math.sqrt(2 * math.pi) * sigma) for i in range(width)]
    z = math.fsum(k)
    point = (width * math.sin(math.radians(angle)), width * math.cos(math.radians(angle)))
    hyp = math.hypot(*point)
    out = []
    for i in range(width):
        dy = -math.ceil(i * point[0] / hyp - 0.5)
        dx = -math.ceil(i * point[1] / hyp - 0.5)
        if abs(dy) >= h or abs(dx) >= w:
            break
        out.append((k[i] / z, dy, dx))
    return out


def _motion_blur(layer: Any, radius: int, sigma: float, angles: Sequence[float]) -> Any:
    """``sum_i k_i * layer[clamp(y - dy_i), clamp(x - dx_i)]`` per image (``layer``: (B, H, W)),
    accumulated in the reference's order."""
    import torch  # deferred: loads torch

    b, h, w = layer.shape
    p = 2 * radius + 1
    padded = pad2d(layer, p, p, p, p, "nearest")
    out = torch.zeros_like(layer)
    for i, angle in enumerate(angles):
        acc = out[i]
        for k, dy, dx in _motion_offsets(radius, sigma, float(angle), h, w):
            acc.add_(padded[i, p - dy:p - dy + h, p - dx:p - dx + w], alpha=k)
    return out


def snow_noise(generator: Any, h: int, w: int) -> tuple[Any, Any]:
    """One image's draws: ``(H, W)`` standard normals, then one uniform (the blur angle)."""
    import torch  # deferred: loads torch

    z = torch.randn((h, w), generator=generator).double()   # float32 draws: 5x cheaper than float64's
    u = torch.rand((), generator=generator, dtype=torch.float64)
    return z, u


def snow_from_noise(x: Any, severity: int, z: Any, u: Any) -> Any:
    """Snow with normals ``z`` (B, H, W) and uniforms ``u`` (B,) (angle = -135 + 90 u degrees)."""
    import torch  # deferred: loads torch

    loc, scale, zoom, thresh, radius, sigma, blend = param(SNOW, "snow", severity)
    h, w = x.shape[-2:]
    layer = loc + scale * z.to(device=x.device, dtype=torch.float64)
    layer = _clipped_zoom(layer, zoom)
    layer = torch.where(layer < thresh, torch.zeros_like(layer), layer).clamp(0, 1)
    layer = _motion_blur(layer, radius, sigma, (-135.0 + 90.0 * u.double()).tolist())
    layer = (torch.round(layer * 255) / 255)[:, :h, :w]
    flakes = (layer + layer.flip(-1, -2)).float().unsqueeze(1)   # the layer and its 180-degree turn
    x32 = x.float()
    grey = (LUMA_601[0] * x32[:, 0] + LUMA_601[1] * x32[:, 1] + LUMA_601[2] * x32[:, 2]).unsqueeze(1)
    x32 = blend * x32 + (1 - blend) * torch.maximum(x32, grey * 1.5 + 0.5)
    # the reference adds in float64; float32 here (within 1 float32 ulp, ~1e-5 grey levels)
    return x32.add_(flakes).clamp_(0, 1).to(x.dtype)


def snow(x: Any, severity: int, generators: Sequence[Any]) -> Any:
    """Snow on each image with its own generator."""
    h, w = x.shape[-2:]
    draws = [snow_noise(g, h, w) for g in generators]
    z = _stack([d[0] for d in draws], x.device)
    return snow_from_noise(x, severity, z, _stack([d[1] for d in draws], x.device))


# ---------------------------------------------------------------- frost

@functools.lru_cache(maxsize=6)
def _frost_texture(index: int) -> Any:
    """Texture ``index`` (0-5) as a uint8 ``(H, W, 3)`` tensor (package data, Pillow decode)."""

    import torch  # deferred: loads torch
    from PIL import Image  # deferred: loads Pillow

    ref = importlib.resources.files("shiftbench") / "data" / "frost" / FROST_TEXTURES[index]
    with ref.open("rb") as f:
        return torch.from_numpy(np.array(Image.open(f).convert("RGB")))


def frost_scale(texture_hw: tuple[int, int], image_hw: tuple[int, int]) -> float:
    """The reference's texture scale: 1, or what makes the texture cover the image; times 1.1."""
    (fh, fw), (h, w) = texture_hw, image_hw
    if fh >= h and fw >= w:
        s = 1.0
    elif fh < h and fw >= w:
        s = h / fh
    elif fh >= h and fw < w:
        s = w / fw
    else:
        s = max(h / fh, w / fw)
    return s * 1.1


@functools.lru_cache(maxsize=24)
def _scaled_frost(index: int, h: int, w: int) -> Any:
    """Texture ``index`` resized for ``(h, w)`` images: uint8 ``(3, Ht, Wt)`` on the CPU."""
    import torch  # deferred: loads torch
    import torch.nn.functional as F  # deferred: loads torch

    tex = _frost_texture(index)
    fh, fw = tex.shape[:2]
    s = frost_scale((fh, fw), (h, w))
    size = (int(math.ceil(fh * s)), int(math.ceil(fw * s)))
    t = tex.permute(2, 0, 1).unsqueeze(0).float()
    t = F.interpolate(t, size=size, mode="bicubic", align_corners=False)
    return torch.round(t).clamp(0, 255).to(torch.uint8)[0]


def frost_noise(generator: Any, h: int, w: int) -> tuple[int, int, int]:
    """One image's draws: texture index in 0..5, then the crop's top and left corner."""
    import torch  # deferred: loads torch

    idx = int(torch.randint(0, 6, (), generator=generator))
    th, tw = _scaled_frost(idx, h, w).shape[-2:]
    top = int(torch.randint(0, th - h, (), generator=generator))
    left = int(torch.randint(0, tw - w, (), generator=generator))
    return idx, top, left


def frost_from_noise(x: Any, severity: int, crops: Sequence[tuple[int, int, int]]) -> Any:
    """``clip(a x + b patch)``, ``patch`` the (texture, top, left) crop of each image."""
    import torch  # deferred: loads torch

    a, b = param(FROST, "frost", severity)
    h, w = x.shape[-2:]
    patches = torch.stack([_scaled_frost(i, h, w)[:, t:t + h, l:l + w] for i, t, l in crops]).to(x.device)
    out = a * x.float() + b * (patches.float() / 255)
    return out.clamp(0, 1).to(x.dtype)


def frost(x: Any, severity: int, generators: Sequence[Any]) -> Any:
    """Frost on each image with its own generator."""
    h, w = x.shape[-2:]
    return frost_from_noise(x, severity, [frost_noise(g, h, w) for g in generators])


# ---------------------------------------------------------------- fog

def next_power_of_2(n: int) -> int:
    return 1 if n == 0 else 2 ** (n - 1).bit_length()


def plasma_fractal(u: Any, mapsize: int, wibbledecay: float) -> Any:
    """Diamond-square height maps in [0, 1], ``(B, mapsize, mapsize)`` float32, from ``u``
    (B, mapsize**2 - 1) uniforms consumed in the reference's order (squares, then the two diamond
    sets, per level): a new point is the mean of its 4 neighbours plus ``w (2 u - 1) w`` with the
    wibble ``w = 100 / decay^level``. The reference adds the wibble in float64 and stores float32;
    here all is float32 (3x cheaper; the normalised map differs by ~1e-7, < 1e-4 grey levels)."""
    import torch  # deferred: loads torch

    b = u.shape[0]
    m = mapsize
    a = torch.zeros((b, m, m), dtype=torch.float32, device=u.device)
    noise = u.to(torch.float32).mul(2.0).sub_(1.0)           # 2 u - 1, once for every level
    step, wibble, used = m, 100.0, 0

    def wibbled(t: Any) -> Any:
        nonlocal used
        n = t.shape[1] * t.shape[2]
        r = noise[:, used:used + n].view(t.shape)
        used += n
        return torch.add(t.mul_(0.25), r, alpha=wibble * wibble)

    while step >= 2:
        half = step // 2
        corner = a[:, 0:m:step, 0:m:step]
        sq = corner + corner.roll(-1, 1)
        sq = sq + sq.roll(-1, 2)
        a[:, half:m:step, half:m:step] = wibbled(sq)
        dr = a[:, half:m:step, half:m:step]
        ul = a[:, 0:m:step, 0:m:step]
        a[:, 0:m:step, half:m:step] = wibbled((dr + dr.roll(1, 1)) + (ul + ul.roll(-1, 2)))
        a[:, half:m:step, 0:m:step] = wibbled((dr + dr.roll(1, 2)) + (ul + ul.roll(-1, 1)))
        step //= 2
        wibble /= wibbledecay
    a = a - a.amin((1, 2), keepdim=True)
    return a / a.amax((1, 2), keepdim=True)


def fog_mapsize(h: int, w: int) -> int:
    return next_power_of_2(max(h, w, 3))


def fog_noise(generator: Any, h: int, w: int) -> Any:
    """One image's draws: ``mapsize**2 - 1`` uniforms."""
    import torch  # deferred: loads torch

    return torch.rand(fog_mapsize(h, w) ** 2 - 1, generator=generator)   # float32, as the map


def fog_from_noise(x: Any, severity: int, u: Any) -> Any:
    """``clip((x + c plasma) * max(x) / (max(x) + c))`` with the plasma built from ``u``."""
    import torch  # deferred: loads torch

    c, decay = param(FOG, "fog", severity)
    h, w = x.shape[-2:]
    plasma = plasma_fractal(u.to(x.device), fog_mapsize(h, w), decay)[:, None, :h, :w]
    x32 = x.float()                                        # float32 is within 1e-5 grey levels here
    max_val = x32.amax((1, 2, 3), keepdim=True)
    return torch.add(x32, plasma, alpha=c).mul_(max_val / (max_val + c)).clamp_(0, 1).to(x.dtype)


def fog(x: Any, severity: int, generators: Sequence[Any]) -> Any:
    """Fog on each image with its own generator."""
    h, w = x.shape[-2:]
    return fog_from_noise(x, severity, _stack([fog_noise(g, h, w) for g in generators], x.device))


# ---------------------------------------------------------------- spatter (OpenCV steps in torch)

_TG22 = 13573          # round(tan(22.5 deg) * 2**15), OpenCV's CANNY_SHIFT = 15


def canny(img: Any, low: float = 50, high: float = 150) -> Any:
    """``cv2.Canny(img, low, high)`` (aperture 3, L1 gradient) on a (B, H, W) batch of uint8
    values; returns a bool edge map."""
    import torch  # deferred: loads torch
    import torch.nn.functional as F  # deferred: loads torch

    b, h, w = img.shape
    lo, hi = math.floor(low), math.floor(high)
    p = pad2d(img.int(), 1, 1, 1, 1, "nearest")        # int32: |dy| << 15 < 2**31
    dx = (p[:, :h, 2:] - p[:, :h, :w]) + 2 * (p[:, 1:h + 1, 2:] - p[:, 1:h + 1, :w]) + (p[:, 2:, 2:] - p[:, 2:, :w])
    dy = (p[:, 2:, :w] - p[:, :h, :w]) + 2 * (p[:, 2:, 1:w + 1] - p[:, :h, 1:w + 1]) + (p[:, 2:, 2:] - p[:, :h, 2:])
    mag = dx.abs() + dy.abs()
    mp = F.pad(mag, (1, 1, 1, 1))                       # neighbours outside the image have magnitude 0

    def nb(oy: int, ox: int) -> Any:
        return mp[:, 1 + oy:1 + oy + h, 1 + ox:1 + ox + w]

    ax = dx.abs()
    ay = dy.abs() << 15
    tg22x = ax * _TG22
    tg67x = tg22x + (ax << 16)
    horizontal = ay < tg22x
    vertical = ~horizontal & (ay > tg67x)
    same_sign = (dx < 0) == (dy < 0)
    keep_h = (mag > nb(0, -1)) & (mag >= nb(0, 1))
    keep_v = (mag > nb(-1, 0)) & (mag >= nb(1, 0))
    keep_d = torch.where(same_sign, (mag > nb(-1, -1)) & (mag > nb(1, 1)), (mag > nb(-1, 1)) & (mag > nb(1, -1)))
    keep = torch.where(horizontal, keep_h, torch.where(vertical, keep_v, keep_d))
    weak = (mag > lo) & keep
    edges = weak & (mag > hi)
    cur = edges
    while True:                                          # 8-connected hysteresis: grow strong edges
        grown = (_dilate3(cur) & weak) | cur             # into weak ones
        if torch.equal(grown, cur):
            return cur
        cur = grown


def _dilate3(m: Any) -> Any:
    """3x3 binary dilation of a (B, H, W) bool map (zero outside): a row pass and a column pass of
    shifted ORs (``max_pool2d`` takes ~1 ms per 224 px map on CPU; this ~20x less)."""
    import torch  # deferred: loads torch
    import torch.nn.functional as F  # deferred: loads torch

    h, w = m.shape[-2:]
    p = F.pad(m.to(torch.uint8), (1, 1, 1, 1)).bool()
    r = p[:, :, :w] | p[:, :, 1:w + 1] | p[:, :, 2:]
    return r[:, :h] | r[:, 1:h + 1] | r[:, 2:]


#: OpenCV's DIST_L2 5x5 chamfer mask: (cost, offsets) for axial, diagonal and knight moves
_CHAMFER = ((1.0, ((0, 1), (0, -1), (1, 0), (-1, 0))),
            (1.4, ((1, 1), (1, -1), (-1, 1), (-1, -1))),
            (2.1969, ((1, 2), (2, 1), (-1, 2), (-2, 1), (1, -2), (2, -1), (-1, -2), (-2, -1))))


def distance_to_edges(edges: Any, cap: float = 20.0) -> Any:
    """``min(cv2.distanceTransform(~edges, DIST_L2, 5), cap)``: the 5x5 chamfer distance from
    each pixel to the nearest edge pixel (1, 1.4, 2.1969 summed in float32 as OpenCV 5 does),
    float32 (B, H, W). Computed as shortest paths by parallel relaxation (about ``cap``
    sweeps); OpenCV's two raster passes give the same values up to float32 summation order
    (1 ulp)."""
    import torch  # deferred: loads torch

    b, h, w = edges.shape
    limit = float(cap) + 1.0          # a value <= cap only depends on values < cap: cap the rest
    (a1, _), (a2, _), (a3, _) = _CHAMFER
    # one padded buffer (border = limit) for every sweep; its interior is the current map. The
    # sweep's temporaries are reused in place: fewer fresh allocations (page faults) per sweep
    dp = torch.full((b, h + 4, w + 4), limit, dtype=torch.float32, device=edges.device)
    d = dp[:, 2:2 + h, 2:2 + w]
    d.masked_fill_(edges, 0.0)
    r1 = torch.empty((b, h, w + 4), dtype=torch.float32, device=edges.device)
    r2, axial, diagonal, knight, other = torch.empty_like(r1), *(torch.empty_like(d, memory_format=torch.contiguous_format)
                                                                for _ in range(4))
    while True:
        # min over each move set (min(a + c, b + c) == min(a, b) + c exactly), sharing the
        # row-pair minima: rows y+-1 and y+-2 first, then their column offsets; min is exact,
        # so the grouping does not change any value
        torch.minimum(dp[:, 1:1 + h], dp[:, 3:3 + h], out=r1)
        torch.minimum(dp[:, 0:h], dp[:, 4:4 + h], out=r2)
        mid = dp[:, 2:2 + h]
        torch.minimum(mid[..., 1:1 + w], mid[..., 3:3 + w], out=axial)
        torch.minimum(axial, r1[..., 2:2 + w], out=axial).add_(a1)
        torch.minimum(r1[..., 1:1 + w], r1[..., 3:3 + w], out=diagonal).add_(a2)
        torch.minimum(r1[..., 0:w], r1[..., 4:4 + w], out=knight)
        torch.minimum(r2[..., 1:1 + w], r2[..., 3:3 + w], out=other)
        torch.minimum(knight, other, out=knight).add_(a3)
        torch.minimum(axial, d, out=axial)
        torch.minimum(diagonal, knight, out=diagonal)
        new = torch.minimum(axial, diagonal, out=axial).clamp_(max=limit)
        if torch.equal(new, d):
            break
        d.copy_(new)
    return d.clamp(max=cap)


def _box3(x: Any) -> Any:
    """Sum over the 3x3 neighbourhood with reflect-101 borders (OpenCV's default): rows, then
    columns. Exact in any order for the inputs here (integers; float32 distances summed in
    float64, whose 53 bits hold any sum of nine of them), so equal to the raster-order sum."""
    p = pad2d(x, 1, 1, 1, 1, "mirror")
    h, w = x.shape[-2:]
    r = p[..., 0:h, :] + p[..., 1:h + 1, :] + p[..., 2:h + 2, :]
    return r[..., 0:w] + r[..., 1:w + 1] + r[..., 2:w + 2]


def equalize_hist(img: Any) -> Any:
    """``cv2.equalizeHist`` per image of a (B, H, W) long tensor of values in 0..255."""
    import torch  # deferred: loads torch

    b = img.shape[0]
    flat = img.reshape(b, -1)
    hist = torch.zeros((b, 256), dtype=torch.long, device=img.device).scatter_add_(1, flat, torch.ones_like(flat))
    first = (hist > 0).long().argmax(1, keepdim=True)
    h0 = hist.gather(1, first)
    total = flat.shape[1]
    denom = (total - h0).clamp(min=1)
    scale = torch.full_like(h0, 255, dtype=torch.float32) / denom.float()
    lut = torch.round((hist.cumsum(1) - h0).float() * scale).clamp(0, 255).long()
    out = lut.gather(1, flat).reshape(img.shape)
    return torch.where((h0 == total).view(b, 1, 1), img, out)   # a constant image is left as it is


def _water_mask(liquid: Any) -> Any:
    """The reference's water mask ``m / max(m)`` from the thresholded liquid layer (B, H, W)."""
    import torch  # deferred: loads torch

    lu8 = (liquid * 255).clamp(0, 255).floor()                       # .astype(np.uint8)
    edges = canny(lu8.long())
    dist = distance_to_edges(edges)                                  # + THRESH_TRUNC at 20
    dist = ((_box3(dist.double()) * (1 / 9)).float()).floor().long()  # blur (float), astype(uint8)
    dist = equalize_hist(dist).to(torch.int32)
    emboss = ((-2, -1, 0), (-1, 1, 1), (0, 1, 2))
    p = pad2d(dist, 1, 1, 1, 1, "mirror")
    h, w = dist.shape[-2:]
    acc = p[:, 1:1 + h, 1:1 + w].clone()                              # the centre tap (weight 1)
    for i in range(3):
        for j in range(3):
            if emboss[i][j] and (i, j) != (1, 1):
                acc.add_(p[:, i:i + h, j:j + w], alpha=emboss[i][j])
    dist = acc.clamp_(0, 255)
    dist = torch.floor(_box3(dist).double() / 9 + 0.5)                # blur on uint8: rounded
    m = lu8 * dist
    peak = m.amax((1, 2), keepdim=True)
    return torch.where(peak > 0, m / torch.where(peak > 0, peak, torch.ones_like(peak)), torch.zeros_like(m))


def spatter_noise(generator: Any, h: int, w: int) -> Any:
    """One image's draws: ``(H, W)`` standard normals."""
    import torch  # deferred: loads torch

    return torch.randn((h, w), generator=generator).double()   # float32 draws: 5x cheaper than float64's


def spatter_from_noise(x: Any, severity: int, z: Any) -> Any:
    """Spatter with the liquid layer's normals ``z`` (B, H, W)."""
    import torch  # deferred: loads torch

    loc, scale, sigma, thresh, intensity, mud = param(SPATTER, "spatter", severity)
    liquid = loc + scale * z.to(device=x.device, dtype=torch.float64).unsqueeze(1)
    liquid = gaussian_filter(liquid, sigma, mode="nearest", truncate=4.0)[:, 0]
    liquid = torch.where(liquid < thresh, torch.zeros_like(liquid), liquid)
    x32 = x.float()
    if not mud:
        m = (_water_mask(liquid) * intensity).float().unsqueeze(1)
        color = torch.tensor(WATER_RGB, dtype=torch.float32, device=x.device).view(1, 3, 1, 1)
        return (x32 + m * color).clamp(0, 1).to(x.dtype)
    m = (liquid > thresh).float().unsqueeze(1)
    m = gaussian_filter(m, intensity, mode="nearest", truncate=4.0)
    m = torch.where(m < 0.8, torch.zeros_like(m), m)
    color = torch.tensor(MUD_RGB, dtype=torch.float32, device=x.device).view(1, 3, 1, 1)
    return (x32 * (1 - m) + color * m).clamp(0, 1).to(x.dtype)


def spatter(x: Any, severity: int, generators: Sequence[Any]) -> Any:
    """Spatter on each image with its own generator."""
    h, w = x.shape[-2:]
    return spatter_from_noise(x, severity, _stack([spatter_noise(g, h, w) for g in generators], x.device))


# ---------------------------------------------------------------- registry

#: images per piece of :func:`map_images` (measured at batch 32 on 2 cores: fog's plasma is many
#: small ops and gains from whole half-batches, spatter's relaxation from 4 images, snow from 1)
_CHUNK = {"fog": None, "spatter": 4, "frost": None}


def _random_shift(name: str, table: Sequence[Any], fn: Any, severity: int) -> Shift:
    return corruption_shift(name, severity, fn, random=True, per_image=True, chunk=_CHUNK.get(name, 1))


@register_shift("snow", description="ImageNet-C snow: zoomed, thresholded, motion-blurred snow layer")
def _snow(severity: int) -> Shift:
    return _random_shift("snow", SNOW, snow, severity)


@register_shift("frost", description="ImageNet-C frost: a random crop of one of 6 frost photographs blended in")
def _frost(severity: int) -> Shift:
    return _random_shift("frost", FROST, frost, severity)


@register_shift("fog", description="ImageNet-C fog: a diamond-square plasma fractal added, contrast reduced")
def _fog(severity: int) -> Shift:
    return _random_shift("fog", FOG, fog, severity)


@register_shift("spatter", description="ImageNet-C spatter (extra): water drops (1-3) or mud (4-5)")
def _spatter(severity: int) -> Shift:
    return _random_shift("spatter", SPATTER, spatter, severity)


__all__ = ["snow", "frost", "fog", "spatter", "snow_from_noise", "frost_from_noise", "fog_from_noise",
           "spatter_from_noise", "plasma_fractal", "canny", "distance_to_edges", "equalize_hist"]
