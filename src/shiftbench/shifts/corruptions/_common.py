"""Helpers shared by the corruptions: validation, per-image random bits, separable linear filters
with scipy.ndimage's boundary modes, and the image-parallel runner.

Randomness. Image ``i`` of a batch draws from ``image_generator(seed, "<name>.<severity>",
indices[i])`` - a CPU generator, so the draws do not depend on batch size, batch order or the
device (they are made on the CPU and moved to the batch's device). Uniform variates are cut from
raw 64-bit words (:func:`random_bits`; several variates per word), which costs a fraction of
``torch.rand`` per variate: the noise corruptions are bound by random-number generation.
Measured (one core, 224 px image = 150,528 values): creating and seeding a generator 3.4 us;
``random_`` 0.41 ms per 150k 64-bit words, ``randn`` float32 0.41 ms (float64: 5x more, so
variates are drawn in float32 and widened where the reference works in float64). A
counter-based alternative (splitmix64 of (image seed, position) in int64 tensor ops) costs the
same 0.42 ms, a 32-bit murmur finaliser 0.16 ms but with 32-bit state, and Box-Muller on top
0.59 ms: no gain, so the per-image generators stay.

Separable filters. A 1-D correlation with boundary handling is a linear map ``y = M x`` on one
axis; :func:`filter_matrix` builds ``M`` (n x n) with the boundary folded into its edge
columns, so any kernel length works on any image size (a 49-tap Gaussian on a 32 px image
included), and :func:`filter1d` applies it as banded-block matrix products: the band of ``M`` is
cut into blocks of 32 output columns, each a dense GEMM on a view of the input (no copies but
the final concatenation). Measured per 224 px image on one core: as fast as shifted-slice
accumulation (one fused multiply-add per tap) at 7-9 taps, faster beyond, and 1.5-2x faster
than the dense product.

Parallelism: see :func:`for_each_image`.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from shiftbench.errors import ConfigError
from shiftbench.shifts.base import Shift, image_generator

#: scale_to_size: parameters in pixels are calibrated for this image side (ImageNet-C)
REFERENCE_SIZE = 224


def param(table: Sequence[Any], name: str, severity: int) -> Any:
    """``table[severity - 1]``, or a ConfigError naming the valid severities (the check of the public
    corruption functions, e.g. ``gaussian_noise(x, 7, gens)``; shifts from :func:`get_shift` arrive
    with a checked severity)."""
    if isinstance(severity, bool) or not isinstance(severity, int) or not 1 <= severity <= len(table):
        raise ConfigError(f"shift {name!r}: severity {severity!r} is not one of "
                          f"{', '.join(str(s) for s in range(1, len(table) + 1))}")
    return table[severity - 1]


def working(x: Any, shift_id: str = "") -> Any:
    """``x`` as a contiguous float32 tensor (float64 stays float64; float16/bfloat16 are computed in
    float32 and the shifts cast the result back). ``x`` holds float pixels: :class:`Shift` checked it."""
    import torch  # deferred: loads torch

    return (x if x.dtype in (torch.float32, torch.float64) else x.float()).contiguous()


def corruption_shift(name: str, severity: int, fn: Any, *, random: bool, per_image: bool = False,
                     chunk: int | None = 1, shift_name: str | None = None, **kwargs: Any) -> Shift:
    """The one factory shape of the corruptions: a :class:`Shift` running
    ``fn(x, severity[, generators], **kwargs)`` (``generators``: one per image, for ``random``
    corruptions; see the module docstring).

    ``per_image``: ``fn`` runs on pieces of ``chunk`` images in parallel (:func:`map_images`) on
    the batch as given; otherwise on the whole batch as float32 (:func:`working`), cast back.
    ``shift_name`` names the shift (default ``name``), e.g. ``gaussian_blur-scaled``. The
    severity and the batch are checked at the boundary (:func:`~shiftbench.shifts.get_shift`,
    :meth:`Shift.check_input`), not here.
    """
    full = shift_name or name
    shift_id = f"{full}.{severity}"

    def apply(x: Any, indices: Any, seed: int) -> Any:
        xw = x if per_image else working(x)
        gens = (generators(xw, indices, seed, shift_id),) if random else ()
        if per_image:
            return map_images(lambda xi, *g: fn(xi, severity, *g, **kwargs), xw, *gens, chunk=chunk)
        return fn(xw, severity, *gens, **kwargs).to(x.dtype)

    return Shift(full, severity, apply, random=random)


def to_uint8(x: Any) -> Any:
    """[0, 1] floats -> uint8 by rounding (the reference receives uint8 images)."""
    import torch  # deferred: loads torch

    return x.mul(255).round_().clamp_(0, 255).to(torch.uint8)   # = round(clip(x, 0, 1) * 255)


def generators(x: Any, indices: Any, seed: int, shift_id: str) -> list[Any]:
    """One CPU ``torch.Generator`` per image of ``x`` (see the module docstring); ``indices`` has
    one entry per image (:class:`Shift` checked it)."""
    return [image_generator(seed, shift_id, int(i)) for i in indices]


def random_bits(gens: Sequence[Any], n: int) -> Any:
    """``(len(gens), n)`` int64 CPU tensor of uniformly random 64-bit words, row i from ``gens[i]``."""
    import torch  # deferred: loads torch

    out = torch.empty((len(gens), n), dtype=torch.int64)
    for row, g in zip(out, gens):
        row.random_(-(2 ** 63), None, generator=g)
    return out


def scale_factor(h: int, w: int, scale_to_size: bool) -> float:
    """``min(h, w) / 224`` if ``scale_to_size`` else 1."""
    return min(h, w) / REFERENCE_SIZE if scale_to_size else 1.0


# ---------------------------------------------------------------- boundaries and 1-D filters

def boundary_index(n: int, before: int, after: int, mode: str, device: Any = "cpu") -> Any:
    """Source index of every position of an axis of length ``n`` padded by ``before``/``after``.

    Modes as in scipy.ndimage: 'nearest' (edge replicated: ``a a | a b c d``), 'reflect'
    (half-sample symmetric: ``b a | a b c d``), 'mirror' (= OpenCV's BORDER_REFLECT_101:
    ``c b | a b c d``); any pad width.
    """
    import torch  # deferred: loads torch

    i = torch.arange(-before, n + after, device=device)
    if mode == "nearest":
        return i.clamp(0, n - 1)
    if mode == "reflect":
        j = i.remainder(2 * n)
        return torch.where(j >= n, 2 * n - 1 - j, j)
    if mode == "mirror":
        if n == 1:
            return torch.zeros_like(i)
        j = i.remainder(2 * n - 2)
        return torch.where(j >= n, 2 * n - 2 - j, j)
    raise ValueError(f"unknown boundary mode {mode!r}")


def pad2d(x: Any, top: int, bottom: int, left: int, right: int, mode: str) -> Any:
    """Pad the last two axes with a scipy boundary ``mode`` (any width, by index gathers)."""
    h, w = x.shape[-2:]
    if top or bottom:
        x = x.index_select(-2, boundary_index(h, top, bottom, mode, x.device))
    if left or right:
        x = x.index_select(-1, boundary_index(w, left, right, mode, x.device))
    return x


def gaussian_kernel1d(sigma: float, truncate: float = 4.0) -> tuple[float, ...]:
    """scipy.ndimage's Gaussian (what ``skimage.filters.gaussian`` uses): radius
    ``int(truncate * sigma + 0.5)``, weights ``exp(-t^2 / (2 sigma^2))`` normalised to sum 1."""
    radius = int(truncate * float(sigma) + 0.5)
    k = [math.exp(-0.5 * t * t / float(sigma) ** 2) for t in range(-radius, radius + 1)]
    s = math.fsum(k)
    return tuple(v / s for v in k)


@functools.lru_cache(maxsize=256)
def _filter_matrix64(kernel: tuple[float, ...], n: int, mode: str) -> Any:
    import torch  # deferred: loads torch

    r = len(kernel) // 2
    src = boundary_index(n, r, r, mode)  # padded position p reads input src[p]
    m = torch.zeros((n, n), dtype=torch.float64)
    k = torch.tensor(kernel, dtype=torch.float64)
    rows = torch.arange(n)
    for t in range(len(kernel)):
        m.index_put_((rows, src[rows + t]), k[t].expand(n), accumulate=True)
    return m


@functools.lru_cache(maxsize=256)
def filter_matrix(kernel: tuple[float, ...], n: int, mode: str, dtype: Any, device: Any) -> Any:
    """``M`` (n x n) with ``(M @ v)[i] = sum_t kernel[t] * v[boundary(i + t - r)]`` (a
    correlation, odd-length kernel centred at ``r = len // 2``)."""
    return _filter_matrix64(kernel, n, mode).to(dtype=dtype, device=device)


#: column-block width of the banded GEMMs (measured best of 8 ... 224 for 7-49 taps at 224 px)
BLOCK = 32


def _blocks(n: int, r: int) -> list[tuple[int, int, int, int]]:
    """Output blocks ``[s, e)`` and the input rows ``[lo, hi)`` they read (band of half-width r)."""
    bs = max(BLOCK, 2 * r)
    if bs + 2 * r >= n:
        return [(0, n, 0, n)]
    return [(s, min(n, s + bs), max(0, s - r), min(n, s + bs + r)) for s in range(0, n, bs)]


def _filter_last_gemm(x: Any, kernel: tuple[float, ...], mode: str) -> Any:
    import torch  # deferred: loads torch

    n = x.shape[-1]
    mt = filter_matrix(kernel, n, mode, x.dtype, x.device).t()
    parts = [x[..., lo:hi] @ mt[lo:hi, s:e] for s, e, lo, hi in _blocks(n, len(kernel) // 2)]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)


def _filter_rows_gemm(x: Any, kernel: tuple[float, ...], mode: str) -> Any:
    import torch  # deferred: loads torch

    n = x.shape[-2]
    m = filter_matrix(kernel, n, mode, x.dtype, x.device)
    parts = [torch.matmul(m[s:e, lo:hi], x[..., lo:hi, :]) for s, e, lo, hi in _blocks(n, len(kernel) // 2)]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-2)


def filter1d(x: Any, kernel: Sequence[float], dim: int, mode: str = "nearest") -> Any:
    """Correlate the last (``dim=-1``) or second-to-last (``dim=-2``) axis of ``x`` with an
    odd-length ``kernel`` (``scipy.ndimage.correlate1d`` with the same ``mode``)."""
    kernel = tuple(float(v) for v in kernel)
    if len(kernel) % 2 != 1:
        raise ValueError("filter1d needs an odd-length kernel")
    if len(kernel) == 1:
        return x * kernel[0]
    return _filter_last_gemm(x, kernel, mode) if dim in (-1, x.ndim - 1) else _filter_rows_gemm(x, kernel, mode)


def gaussian_filter(x: Any, sigma: float | tuple[float, float], mode: str = "nearest", truncate: float = 4.0) -> Any:
    """``scipy.ndimage.gaussian_filter`` on the last two axes of ``x`` (= ``skimage.filters.gaussian``
    with ``channel_axis=-1``): rows, then columns; ``sigma`` one value or ``(sigma_rows, sigma_cols)``."""
    sh, sw = (sigma, sigma) if isinstance(sigma, (int, float)) else sigma
    return filter1d(filter1d(x, gaussian_kernel1d(sh, truncate), -2, mode), gaussian_kernel1d(sw, truncate), -1, mode)


def clip01(x: Any) -> Any:
    """Clamp to [0, 1] in place (every reference corruption ends with ``np.clip(., 0, 1)``)."""
    return x.clamp_(0.0, 1.0)


# ---------------------------------------------------------------- image-parallel loops

#: elements per piece of the elementwise pipelines: a piece's temporaries stay in the L2 cache
#: (whole-batch ops stream from DRAM and measured 3-10x slower per element)
CHUNK = 1 << 15


def for_each_image(n: int, fn: Any, device: Any) -> list[Any]:
    """``[fn(i) for i in range(n)]``; on CPU spread over ``torch.get_num_threads()`` threads, each
    running torch single-threaded.

    Per-image work here is a chain of small tensor ops (and a serial random-number generator
    per image). Letting torch split each small op over its threads costs a barrier per op,
    which on a busy machine waits a whole scheduler time slice (measured: an ``exp`` on 32k
    values went from 20 us to 4 ms while another process held the other core); whole images
    in parallel need no barriers. torch releases the GIL inside every op. OpenMP's and MKL's
    thread counts are per thread, so workers set theirs to 1 without touching the caller's;
    torch's default for threads created meanwhile is process-wide and is restored when the
    batch is done. Results are per image, so the schedule cannot change them. Autograd's modes
    (inference mode, grad mode) are thread-local too: workers run under the caller's, so tensors
    they write into (inference tensors from the engine's ``torch.inference_mode``) accept them.
    """
    import torch  # deferred: loads torch

    threads = torch.get_num_threads()
    inference, grad = torch.is_inference_mode_enabled(), torch.is_grad_enabled()
    workers = min(n, threads)
    if workers <= 1 or torch.device(device).type != "cpu" or not _openmp():
        return [fn(i) for i in range(n)]

    def run(i: int) -> Any:
        torch.set_num_threads(1)
        with torch.inference_mode(inference), torch.set_grad_enabled(grad):
            return fn(i)

    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(run, range(n)))
    finally:
        torch.set_num_threads(threads)


@functools.lru_cache(maxsize=1)
def _openmp() -> bool:
    """Whether torch's intra-op backend is OpenMP (whose thread count is per thread)."""
    import torch  # deferred: loads torch

    return "parallel backend: OpenMP" in torch.__config__.parallel_info()


def map_images(fn: Any, x: Any, *per_image: Sequence[Any], chunk: int | None = 1) -> Any:
    """``fn(x[s:e], *(a[s:e] for a in per_image))`` over pieces of ``chunk`` images, written into
    one output batch shaped and typed like ``x``; on CPU the pieces run in parallel threads with
    torch single-threaded inside (:func:`for_each_image`: no per-op thread barriers, whose cost
    dominates small ops on a busy machine). ``chunk=None``: one piece per thread (for pipelines of
    many small ops, whose per-op overhead a larger piece amortises). ``fn`` must treat its images
    independently (every shift here does), so the split cannot change results. On an
    accelerator: one call."""
    import torch  # deferred: loads torch

    n = x.shape[0]
    if chunk is None:
        chunk = -(-n // max(1, torch.get_num_threads()))
    if n <= chunk or torch.device(x.device).type != "cpu":
        return fn(x, *per_image)
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    starts = list(range(0, n, chunk))

    def one(k: int) -> None:
        s = starts[k]
        out[s:s + chunk] = fn(x[s:s + chunk], *(a[s:s + chunk] for a in per_image))

    for_each_image(len(starts), one, x.device)
    return out
