"""ImageNet-C noise corruptions on [0, 1] batches, in torch (Hendrycks & Dietterich 2019).

Registered shifts (severities 1-5, all random), with the parameters of the reference
implementation ``imagecorruptions`` (imaug fork, ``corruptions.py``)::

    gaussian_noise  clip(x + N(0, c^2)),        c = .08 .12 .18 .26 .38
    shot_noise      clip(Poisson(c x) / c),     c = 60 25 12 5 3
    impulse_noise   salt & pepper (scikit-image ``random_noise('s&p')``): each channel value
                    independently replaced with probability c, by 1 or 0 with equal odds,
                    c = .03 .06 .09 .17 .27
    speckle_noise   clip(x + x N(0, c^2)),      c = .15 .2 .35 .45 .6        (an "extra" one)

All four act on each channel value independently, so they mean the same at every image size (a
32 px CIFAR image gets the same per-value noise as a 224 px ImageNet one; CIFAR-10-C used other,
weaker constants, which are not reproduced here). Inputs are expected in [0, 1] (shot noise
clamps them first: a Poisson rate cannot be negative).

Randomness: image ``i`` uses ``image_generator(seed, "<name>.<severity>", indices[i])`` (a CPU
generator; draws are moved to the batch's device), so results depend on neither batch size,
batch order nor device. The reference's NumPy stream is unseeded, so outputs match it in
distribution, not value by value; each corruption is a draw plus a deterministic
``*_from_noise`` function, and the tests replay a NumPy stream through the latter to match the
reference value for value (gaussian, speckle, impulse):

* gaussian/speckle: ``(C, H, W)`` standard normals from ``torch.randn``.
* impulse: per value one 32-bit word: 31 bits against ``round(c 2^31)`` (the replacement
  probability is within 2^-32 of c) and the sign bit for salt or pepper.
* shot: NumPy's and ``torch.poisson``'s samplers run one value at a time (~70 ns each here,
  10 ms per 224 px image), so shot noise uses table samplers. Images on the uint8 grid (every
  decoded image; what the reference receives) take one 32-bit word per value through Walker's
  alias method on a table per grey level (:func:`poisson_alias_tables`: 256 levels x 128
  columns, every probability within 2^-31 of Poisson's); any other input takes two 24-bit
  uniforms per value through :func:`poisson` (CDF tables with a guide, every probability within
  6e-8 of Poisson's; a far tail of total probability < 2^-24 is never drawn).

Clipping as the reference (``np.clip(., 0, 1)``); the output stays float (the reference
multiplies by 255 and ``imagecorruptions.corrupt`` truncates to uint8).

Speed: noise is bound by random-number generation (torch's CPU generator, ~3 ns per 32 bits)
and memory passes: normals are drawn straight into the output and finished in place, shot noise
is resolved in cache-sized pieces, and images run in parallel threads
(:func:`~shiftbench.shifts.corruptions._common.for_each_image`).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats

from shiftbench.shifts.base import Shift, register_shift
from shiftbench.shifts.corruptions._common import CHUNK, clip01, corruption_shift, for_each_image, param, random_bits

GAUSSIAN_NOISE = (0.08, 0.12, 0.18, 0.26, 0.38)
SHOT_NOISE = (60, 25, 12, 5, 3)
IMPULSE_NOISE = (0.03, 0.06, 0.09, 0.17, 0.27)
SPECKLE_NOISE = (0.15, 0.2, 0.35, 0.45, 0.6)

#: granularity of the Poisson CDF table's rates
POISSON_STEP = 1.0 / 8
#: log2 of the number of guide cells per CDF row
POISSON_GUIDE_BITS = 8


# ---------------------------------------------------------------- gaussian / speckle

def gaussian_noise_from_noise(x: Any, severity: int, z: Any) -> Any:
    """``clip(x + c z, 0, 1)`` for standard normals ``z`` shaped like ``x``."""
    import torch  # deferred: loads torch

    c = param(GAUSSIAN_NOISE, "gaussian_noise", severity)
    return clip01(torch.add(x, z, alpha=c))


def _with_normals(x: Any, gens: Sequence[Any], finish: Any) -> Any:
    """``finish(z, x_i)`` in place on image ``i``'s standard normals ``z``, drawn straight into the
    output (one pass fewer than drawing, then combining)."""
    import torch  # deferred: loads torch

    out = torch.empty_like(x, memory_format=torch.contiguous_format)   # normals in (C, H, W) order
    direct = x.device.type == "cpu" and x.dtype == torch.float32

    def one(i: int) -> None:
        z = out[i]
        if direct:
            torch.randn(z.shape, generator=gens[i], out=z)
        else:
            z.copy_(torch.randn(z.shape, generator=gens[i]))
        finish(z, x[i])

    for_each_image(len(gens), one, x.device)
    return out


def gaussian_noise(x: Any, severity: int, gens: Sequence[Any]) -> Any:
    """ImageNet-C gaussian_noise; image ``i`` draws ``(C, H, W)`` normals from ``gens[i]`` (finished
    in place with the arithmetic of :func:`gaussian_noise_from_noise`)."""
    import torch  # deferred: loads torch

    c = param(GAUSSIAN_NOISE, "gaussian_noise", severity)
    return _with_normals(x, gens, lambda z, xi: torch.add(xi, z, alpha=c, out=z).clamp_(0.0, 1.0))


def speckle_noise_from_noise(x: Any, severity: int, z: Any) -> Any:
    """``clip(x + x c z, 0, 1)`` for standard normals ``z`` shaped like ``x``."""
    import torch  # deferred: loads torch

    c = param(SPECKLE_NOISE, "speckle_noise", severity)
    return clip01(torch.addcmul(x, x, z, value=c))


def speckle_noise(x: Any, severity: int, gens: Sequence[Any]) -> Any:
    """ImageNet-C speckle_noise (extra corruption); image ``i`` draws normals from ``gens[i]``."""
    import torch  # deferred: loads torch

    c = param(SPECKLE_NOISE, "speckle_noise", severity)
    return _with_normals(x, gens, lambda z, xi: torch.addcmul(xi, xi, z, value=c, out=z).clamp_(0.0, 1.0))


# ---------------------------------------------------------------- impulse

def impulse_noise_from_noise(x: Any, flipped: Any, salted: Any) -> Any:
    """scikit-image's ``s&p``: 1 where ``flipped & salted``, 0 where ``flipped & ~salted``, else
    ``x`` (boolean tensors shaped like ``x``)."""
    import torch  # deferred: loads torch

    # x + flipped * (salted - x): a boolean where() is several times slower on CPU
    return torch.addcmul(x, flipped.to(x.dtype), salted.to(x.dtype).sub_(x))


def impulse_masks(words: Any, severity: int) -> tuple[Any, Any]:
    """(flipped, salted) from int32 random words: 31 bits against ``round(c 2^31)``, the sign bit."""
    c = param(IMPULSE_NOISE, "impulse_noise", severity)
    return (words & 0x7FFFFFFF) < int(round(c * 2 ** 31)), words < 0


def impulse_noise(x: Any, severity: int, gens: Sequence[Any]) -> Any:
    """ImageNet-C impulse_noise; image ``i`` draws one 32-bit word per value from ``gens[i]``."""
    import torch  # deferred: loads torch

    param(IMPULSE_NOISE, "impulse_noise", severity)
    n = x[0].numel()
    out = torch.empty_like(x)

    def one(i: int) -> None:
        words = random_bits([gens[i]], (n + 1) // 2).view(torch.int32)[0, :n].view(x.shape[1:]).to(x.device)
        flipped, salted = impulse_masks(words, severity)
        torch.addcmul(x[i], flipped.to(x.dtype), salted.to(x.dtype).sub_(x[i]), out=out[i])

    for_each_image(len(gens), one, x.device)
    return out


# ---------------------------------------------------------------- shot (Poisson)

@functools.lru_cache(maxsize=32)
def _poisson_tables_cpu(lam_max: float) -> tuple[Any, Any, int]:
    """Integer CDF tables for the rates ``m_j = j step``, ``j = 0 .. ceil(lam_max / step)``.

    ``cdf[j, k] = ceil(P(Poisson(m_j) <= k) 2^24)`` (int64, flattened, each row ending at 2^24),
    so that for a 24-bit uniform ``u = v 2^-24`` the inversion ``min{k : P(X <= k) >= u}`` is
    ``min{k : cdf[j, k] >= v}``. ``guide[j, i]`` packs, for the cell of ``v`` values
    ``[i, i + 1) 2^(24 - GUIDE_BITS)``, the least answer ``k0`` in the cell and the next two CDF
    values: ``k0 | cdf[j, k0] << 8 | cdf[j, k0 + 1] << 34`` (one gather resolves two steps).
    """
    import torch  # deferred: loads torch

    rows = int(math.ceil(lam_max / POISSON_STEP)) + 1
    m = torch.arange(rows, dtype=torch.float64) * POISSON_STEP
    k = torch.arange(int(lam_max + 12 * math.sqrt(lam_max) + 30), dtype=torch.float64)
    logpmf = k * torch.log(m).unsqueeze(1) - m.unsqueeze(1) - torch.lgamma(k + 1)
    logpmf[0] = torch.where(k == 0, 0.0, -math.inf)  # Poisson(0) is 0
    cdf = torch.ceil(torch.exp(logpmf).cumsum(1) * 2.0 ** 24).clamp_(max=2.0 ** 24).long()
    cols = int((cdf < 2 ** 24).sum(1).max()) + 2  # every row reaches 2^24, plus a sentinel column
    if cols > 255:
        raise ValueError(f"the Poisson tables hold rates up to ~150, not {lam_max}")
    cdf = cdf[:, :cols].contiguous()
    cdf[:, -2:] = 2 ** 24
    cells = 1 << POISSON_GUIDE_BITS
    low = (torch.arange(cells) << (24 - POISSON_GUIDE_BITS)).expand(rows, cells).contiguous()
    k0 = torch.searchsorted(cdf, low).clamp_(max=cols - 2)  # first k with cdf >= the cell's least v
    guide = k0 | (cdf.gather(1, k0) << 8) | (cdf.gather(1, k0 + 1) << 34)
    return cdf.view(-1), guide.view(-1), cols


@functools.lru_cache(maxsize=32)
def _poisson_tables(lam_max: float, device: Any) -> tuple[Any, Any, int]:
    cdf, guide, cols = _poisson_tables_cpu(float(lam_max))
    return cdf.to(device), guide.to(device), cols


def _poisson_piece(lam: Any, v1: Any, v2: Any, tables: tuple[Any, Any, int]) -> tuple[Any, Any, Any]:
    """Counts for a piece of flat rates ``lam`` (float32) and 24-bit uniforms ``v1``, ``v2``
    (int64), resolved except for the rare values needing a longer search: returns
    ``(counts, search, tail)``, ``search = (local index, next CDF position, v1)`` and
    ``tail = (local index, r, u2)`` or None (see :func:`poisson`)."""
    import torch  # deferred: loads torch

    cdf, guide, cols = tables
    t = lam * (1.0 / POISSON_STEP)
    j = t.to(torch.int32).clamp_(max=cdf.numel() // cols - 1)   # int32: half the memory traffic of int64
    neg_r = t.sub_(j).mul_(-POISSON_STEP).clamp_(max=0.0)  # -(lam - m)
    packed = guide.index_select(0, (j << POISSON_GUIDE_BITS).add_(v1 >> (24 - POISSON_GUIDE_BITS)))
    beyond = (packed >> 34) < v1
    n1 = (packed & 0xFF).add_(((packed >> 8) & 0x1FFFFFF) < v1).add_(beyond)
    p0 = torch.exp(neg_r)  # P(Poisson(r) = 0), and P(<= 1) = exp(-r) (1 + r):
    p1 = torch.addcmul(p0, p0, neg_r, value=-1.0)
    u2 = v2.to(torch.float32).mul_(2.0 ** -24)
    over = u2 > p1
    counts = n1.to(torch.float32).add_(u2 > p0).add_(over)
    b = beyond.nonzero().squeeze(1)
    o = over.nonzero().squeeze(1)
    search = (b, j[b] * cols + n1[b], v1[b]) if b.numel() else None
    tail = (o, neg_r[o].neg_(), u2[o]) if o.numel() else None
    return counts, search, tail


def _poisson_finish(counts: Any, search: list[Any], tail: list[Any], tables: tuple[Any, Any, int]) -> Any:
    """Finish the values :func:`_poisson_piece` left (indices into the flat ``counts``)."""
    import torch  # deferred: loads torch

    cdf = tables[0]
    if search:  # step right until cdf >= v1
        idx, pos, v = (torch.cat(z) for z in zip(*search))
        first = pos.clone()
        active = torch.arange(idx.numel(), device=counts.device)
        while active.numel():
            active = active[cdf.index_select(0, pos[active]) < v[active]]
            pos[active] += 1
        counts.index_add_(0, idx, (pos - first).to(counts.dtype))
    if tail:  # Poisson(r) beyond 1 by sequential inversion in float64 (2 are counted already)
        idx, r, u = (torch.cat(z) for z in zip(*tail))
        r, u = r.double(), u.double()
        pk = torch.exp(-r) * r
        f, k = torch.exp(-r) + pk, torch.ones_like(r)
        active = (u > f).nonzero().squeeze(1)
        pk = pk[active]
        while active.numel():
            k[active] += 1
            pk = pk * r[active] / k[active]
            f[active] += pk
            keep = u[active] > f[active]
            active, pk = active[keep], pk[keep]
        counts.index_add_(0, idx, (k - 2).to(counts.dtype))
    return counts


def poisson(lam: Any, lam_max: float, u1: Any, u2: Any) -> Any:
    """Poisson(``lam``) counts (float32) for rates ``0 <= lam <= lam_max``, by inversion of the
    independent uniforms ``u1``, ``u2`` (same shape as ``lam``; used as ``floor(u 2^24) 2^-24``).

    ``Poisson(lam) = Poisson(m) + Poisson(lam - m)`` with ``m = lam`` rounded down to a multiple
    of 1/8: the first term inverts ``u1`` in a precomputed integer CDF row of ``m`` (a guide
    cell gives the answer within two steps for almost all values; the others step on), the
    second, of rate ``r < 1/8``, inverts ``u2``: 0 if ``u2 <= exp(-r)``, 1 if
    ``u2 <= exp(-r)(1 + r)``, else (< 0.8% of values) a sequential search.
    """
    tables = _poisson_tables(float(lam_max), lam.device)
    v1, v2 = ((u.reshape(-1).double() * 2.0 ** 24).long().clamp_(0, 2 ** 24 - 1) for u in (u1, u2))
    counts, search, tail = _poisson_piece(lam.reshape(-1).float(), v1, v2, tables)
    return _poisson_finish(counts, [search] if search else [], [tail] if tail else [], tables).view(lam.shape)


def shot_noise_from_noise(x: Any, severity: int, u1: Any, u2: Any) -> Any:
    """``clip(Poisson(c x) / c, 0, 1)`` with the Poisson draws made from uniforms ``u1``, ``u2``."""
    c = param(SHOT_NOISE, "shot_noise", severity)
    return clip01(poisson(x.clamp(0, 1) * c, c, u1, u2).div_(c)).to(x.dtype)


def shot_noise_from_counts(x: Any, severity: int, counts: Any) -> Any:
    """``clip(counts / c, 0, 1)`` for Poisson(``c x``) ``counts`` shaped like ``x`` (the reference's
    arithmetic on its own ``np.random.poisson`` draws; ``x`` gives only shape and dtype)."""
    c = param(SHOT_NOISE, "shot_noise", severity)
    if counts.shape != x.shape:
        raise ValueError(f"shot_noise: counts of shape {tuple(counts.shape)} for images of shape {tuple(x.shape)}")
    return clip01(counts.to(x.dtype) / c)


#: columns of the per-grey-level alias tables (a power of 2: the column is the low bits of a word)
ALIAS_COLUMNS = 128
#: a value within this many grey levels of ``k / 255`` is sampled at the rate ``c k / 255``
LEVEL_TOLERANCE = 1e-4


@functools.lru_cache(maxsize=16)
def poisson_alias_tables(c: float) -> Any:
    """Walker/Vose alias tables of Poisson(``c k / 255``) for the 256 grey levels ``k``: int32
    ``(256 * ALIAS_COLUMNS,)``, entry ``k * ALIAS_COLUMNS + j`` packing column ``j``'s acceptance
    threshold ``a`` (0 .. 2^24, bits 0-24) and its alias (bits 25-31). A 24-bit uniform ``t`` and
    a uniform column ``j`` give ``j`` if ``t < a`` else the alias: the probability of every count
    is within ``2^-31`` of Poisson's (masses are integers out of ``ALIAS_COLUMNS 2^24``, rounded
    by largest remainder); counts >= ALIAS_COLUMNS (probability < 1e-12 at the largest rate, 60)
    are not drawn."""
    import torch  # deferred: loads torch

    cols, unit = ALIAS_COLUMNS, 1 << 24
    if stats.poisson.sf(cols - 1, c) > 2.0 ** -40:
        raise ValueError(f"the alias tables hold Poisson rates up to ~60, not {c}")
    ks = np.arange(cols)
    table = np.empty((256, cols), dtype=np.int64)
    for level in range(256):
        lam = c * level / 255.0
        p = stats.poisson.pmf(ks, lam) if lam > 0 else (ks == 0).astype(np.float64)
        exact = p / p.sum() * cols * unit                          # largest-remainder rounding: integer
        mass = np.floor(exact).astype(np.int64)                    # masses summing to cols * unit, each
        short = int(cols * unit - mass.sum())                      # within one unit of exact
        mass[np.argsort(mass - exact)[:short]] += 1
        alias = ks.copy()
        small = [j for j in range(cols) if mass[j] < unit]
        large = [j for j in range(cols) if mass[j] > unit]
        while small and large:                                     # Vose: fill each short column from a tall one
            j, big = small.pop(), large[-1]
            alias[j] = big
            mass[big] -= unit - mass[j]
            if mass[big] <= unit:
                large.pop()
                if mass[big] < unit:
                    small.append(big)
        mass = np.minimum(mass, unit)                              # exact integers leave no residue
        table[level] = mass | (alias << 25)
    return torch.from_numpy(table.reshape(-1).astype(np.uint32).view(np.int32).copy())


def poisson_from_levels(levels: Any, words: Any, table: Any) -> Any:
    """Poisson counts (int32) for grey levels ``levels`` (int32 0..255) from one random 32-bit word
    each (``words``, int32: bits 0-6 the column, bits 7-30 the threshold) by the alias ``table``."""
    import torch  # deferred: loads torch

    col = words & (ALIAS_COLUMNS - 1)
    entry = table.index_select(0, (levels << 7) | col)
    accept = ((words >> 7) & 0xFFFFFF) < (entry & 0x1FFFFFF)
    return torch.where(accept, col, (entry >> 25) & 0x7F)


def shot_noise(x: Any, severity: int, gens: Sequence[Any]) -> Any:
    """ImageNet-C shot_noise; image ``i`` draws from ``gens[i]``.

    Images whose values all lie on the uint8 grid (within ``LEVEL_TOLERANCE`` grey levels of
    ``k / 255``: every decoded image) are sampled at the rate ``c k / 255`` - what the reference
    computes from its uint8 input - with the per-level alias tables (:func:`poisson_alias_tables`;
    one 32-bit word per value, a handful of passes). Other images use the general sampler
    :func:`poisson` (one 64-bit word per value: 24-bit ``u1`` from bits 0-23, ``u2`` from bits
    40-63)."""
    import torch  # deferred: loads torch

    c = param(SHOT_NOISE, "shot_noise", severity)
    n = x[0].numel()
    out = torch.empty_like(x, memory_format=torch.contiguous_format)

    def one(i: int) -> None:   # everything per image, in the image's thread (no whole-batch ops)
        scaled = x[i].reshape(-1).float().clamp(0, 1).mul_(255)
        levels = scaled.round()
        if float((scaled - levels).abs_().max()) <= LEVEL_TOLERANCE:
            words = random_bits([gens[i]], (n + 1) // 2)[0].view(torch.int32)[:n].to(x.device)
            counts = poisson_from_levels(levels.to(torch.int32), words, poisson_alias_tables(float(c)).to(x.device))
            out[i] = clip01(counts.to(torch.float32).div_(c)).view(x.shape[1:])
            return
        out[i] = _shot_noise_general(scaled.div_(255).mul_(c), c, gens[i], x.device).view(x.shape[1:])

    for_each_image(len(gens), one, x.device)
    return out


def _shot_noise_general(lam: Any, c: float, gen: Any, device: Any) -> Any:
    """clip(Poisson(lam) / c) for the flat float32 rates ``lam`` of one image (:func:`poisson`'s
    sampler, resolved in cache-sized pieces)."""
    import torch  # deferred: loads torch

    tables = _poisson_tables(float(c), device)
    n = lam.numel()
    words = random_bits([gen], n)[0].to(device).view(torch.int32).view(n, 2)
    lo, hi = words[:, 0], words[:, 1]          # bits 0-31 and 32-63 of each 64-bit word
    counts = torch.empty_like(lam)
    search, tail = [], []
    for s in range(0, n, CHUNK):
        e = min(n, s + CHUNK)
        counts[s:e], sr, tl = _poisson_piece(lam[s:e], lo[s:e] & 0xFFFFFF, (hi[s:e] >> 8) & 0xFFFFFF, tables)
        if sr is not None:
            search.append((sr[0] + s, *sr[1:]))
        if tl is not None:
            tail.append((tl[0] + s, *tl[1:]))
    counts = _poisson_finish(counts, search, tail, tables)
    return clip01(counts.div_(c))


# ---------------------------------------------------------------- registry

def _random_shift(name: str, table: Sequence[Any], fn: Any, severity: int) -> Shift:
    return corruption_shift(name, severity, fn, random=True)


@register_shift("gaussian_noise", description="ImageNet-C gaussian noise: x + N(0, c^2), c = 0.08 ... 0.38")
def _gaussian_noise(severity: int) -> Shift:
    return _random_shift("gaussian_noise", GAUSSIAN_NOISE, gaussian_noise, severity)


@register_shift("shot_noise", description="ImageNet-C shot noise: Poisson(c x) / c, c = 60 ... 3")
def _shot_noise(severity: int) -> Shift:
    return _random_shift("shot_noise", SHOT_NOISE, shot_noise, severity)


@register_shift("impulse_noise", description="ImageNet-C impulse noise: salt & pepper on a fraction 0.03 ... 0.27")
def _impulse_noise(severity: int) -> Shift:
    return _random_shift("impulse_noise", IMPULSE_NOISE, impulse_noise, severity)


@register_shift("speckle_noise", description="ImageNet-C speckle noise (extra): x + x N(0, c^2), c = 0.15 ... 0.6")
def _speckle_noise(severity: int) -> Shift:
    return _random_shift("speckle_noise", SPECKLE_NOISE, speckle_noise, severity)


__all__ = ["gaussian_noise", "shot_noise", "impulse_noise", "speckle_noise", "gaussian_noise_from_noise",
           "shot_noise_from_noise", "shot_noise_from_counts", "poisson_alias_tables", "poisson_from_levels", "impulse_noise_from_noise", "speckle_noise_from_noise", "impulse_masks",
           "poisson"]
