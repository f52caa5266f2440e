"""Noise2Net: images through a randomly initialised residual network (Hendrycks et al. 2021).

Noise2Net is the cheapest member of the DeepAugment family ("The Many Faces of Robustness",
Hendrycks et al. 2021, §4; reference code ``imagenet-r/DeepAugment/train_noise2net.py``): an
image goes through ``blocks`` = 4 Res2Net bottleneck blocks (Gao et al. 2019) with *fresh random
weights*, each added back with a small weight::

    x_{k+1} = x_k + eps * block_k(x_k),     eps ~ U(0.375, 0.75),     out = clip_[0,1](x_4)

A block is ``conv1x1(3 -> 4h) -> norm -> ReLU``, the Res2Net hierarchy over the four
``h``-channel splits (``s_j = ReLU(norm(conv_j(x_j + s_{j-1})))`` for three of them, the fourth
passed through; ``conv_j`` has kernel 1 or 3 and dilation 1, 2 or 3 at random), then
``conv1x1(4h -> 3) -> norm``; ``h`` = ``hidden_planes`` = 16. Weights are PyTorch's default
``Conv2d`` initialisation (uniform in ``±1/sqrt(fan_in)``); ``norm`` is the reference's
train-mode BatchNorm on a batch of one, i.e. per-image, per-channel instance normalisation.
As in the reference, the network acts on ImageNet-normalised pixels (``(x - mean) / std``,
its training pipeline normalised before Noise2Net): this module normalises the [0, 1] batch,
applies the blocks, undoes the normalisation and clips to [0, 1] (the reference did not clip;
its images went straight into the model).

**A different network per image.** The reference stacks the batch along channels and uses
grouped convolutions (``groups = batch size``) so every image gets its own weights; this module
does the same, drawing every weight, kernel size, dilation and ``eps`` of image ``i`` from its
own generator (:func:`~shiftbench.shifts.base.image_generator` for the ``noise2net`` shift), so
an image's result does not depend on the batch it is in (up to float rounding). Unlike the
reference, kernel sizes, dilations and ``eps`` are drawn per image, not per batch (kernel-1
convolutions are run as centre-only 3x3 kernels; images are grouped by dilation).

Use it as

* an evaluation shift: ``noise2net`` (one setting, ``severities=None``), applied at the model's
  input resolution (the reference applied it at 224 x 224);
* a training augmentation: :class:`Noise2Net`, a ``torch.nn.Module`` drawing fresh networks on
  every call (from its own seeded generator, or torch's global RNG), applied to a fraction ``p``
  of the batch. It is differentiable in its input (gradients flow through it), but nothing in it
  is trained: its weights are sampled, not parameters.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shiftbench.errors import ConfigError
from shiftbench.shifts.base import Shift, image_generator, register_shift

EPS_RANGE = (0.375, 0.75)
#: the pixel normalisation the reference applied before Noise2Net (ImageNet mean / std)
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
HIDDEN_PLANES = 16
SCALE = 4
BLOCKS = 4
KERNELS = (1, 3)
DILATIONS = (1, 2, 3)


@dataclass
class _Block:
    """One image's weights for one block (CPU tensors)."""

    w1: Any  # (scale*h, 3, 1, 1)
    kernels: list[int]
    dilations: list[int]
    w: list[Any]  # (h, h, 3, 3); centre-only when the kernel is 1
    b: list[Any]  # (h,)
    w3: Any  # (3, scale*h, 1, 1)


def _uniform(shape: tuple[int, ...], bound: float, g: Any) -> Any:
    import torch  # deferred: loads torch

    return (torch.rand(shape, generator=g) * 2 - 1) * bound


def _sample_image(g: Any, eps_range: tuple[float, float], hidden: int, scale: int, blocks: int
                  ) -> tuple[float, list[_Block]]:
    """``eps`` and every block's weights for one image, in a fixed draw order."""
    import torch  # deferred: loads torch

    lo, hi = eps_range
    eps = lo + (hi - lo) * float(torch.rand((), generator=g))
    out = []
    for _ in range(blocks):
        w1 = _uniform((scale * hidden, 3, 1, 1), 1 / math.sqrt(3), g)
        ks, ds, ws, bs = [], [], [], []
        for _ in range(max(scale - 1, 1)):
            k = KERNELS[int(torch.randint(len(KERNELS), (), generator=g))]
            d = DILATIONS[int(torch.randint(len(DILATIONS), (), generator=g))]
            bound = 1 / math.sqrt(hidden * k * k)
            w = _uniform((hidden, hidden, k, k), bound, g)
            if k == 1:
                w = torch.nn.functional.pad(w, (1, 1, 1, 1))
            ks.append(k)
            ds.append(d)
            ws.append(w)
            bs.append(_uniform((hidden,), bound, g))
        w3 = _uniform((3, scale * hidden, 1, 1), 1 / math.sqrt(scale * hidden), g)
        out.append(_Block(w1, ks, ds, ws, bs, w3))
    return eps, out


def _grouped(x: Any, weight: Any, bias: Any = None, dilation: int = 1) -> Any:
    """Per-image convolution: ``x`` (n, c, H, W), ``weight`` (n, o, c, k, k) -> (n, o, H, W)."""
    import torch  # deferred: loads torch
    import torch.nn.functional as F  # deferred: loads torch

    n, c, h, w = x.shape
    o, k = weight.shape[1], weight.shape[-1]
    if k == 1 and bias is None:  # a per-image channel mix: one batched matmul
        return torch.einsum("noc,nchw->nohw", weight.reshape(n, o, c), x)
    out = F.conv2d(x.reshape(1, n * c, h, w), weight.reshape(n * o, c, k, k),
                   None if bias is None else bias.reshape(n * o),
                   padding=dilation * (k // 2), dilation=dilation, groups=n)
    return out.view(n, o, h, w)


def _norm(x: Any) -> Any:
    import torch.nn.functional as F  # deferred: loads torch

    return F.group_norm(x, x.shape[1], eps=1e-5)  # = instance norm (one group per channel), faster on CPU


def _block_forward(x: Any, params: Sequence[_Block], hidden: int, scale: int) -> Any:
    import torch  # deferred: loads torch

    dev, dt = x.device, x.dtype
    n, _, h, w = x.shape
    stack = lambda ts: torch.stack(ts).to(dev, dt)  # noqa: E731
    out = torch.relu(_norm(_grouped(x, stack([p.w1 for p in params]))))
    splits = out.view(n, scale, hidden, h, w).unbind(1)
    pieces, sp = [], None
    for j in range(max(scale - 1, 1)):
        sp = splits[j] if sp is None else sp + splits[j]
        conv = torch.empty_like(sp)
        dil = torch.tensor([p.dilations[j] for p in params])
        for d in dil.unique().tolist():
            sel = (dil == d).nonzero().flatten().tolist()
            conv[sel] = _grouped(sp[sel], stack([params[i].w[j] for i in sel]),
                                 stack([params[i].b[j] for i in sel]), dilation=d)
        sp = torch.relu(_norm(conv))
        pieces.append(sp)
    if scale != 1:
        pieces.append(splits[scale - 1])
    return _norm(_grouped(torch.cat(pieces, 1), stack([p.w3 for p in params])))


def noise2net(x: Any, generators: Sequence[Any], *, eps_range: tuple[float, float] = EPS_RANGE,
              hidden_planes: int = HIDDEN_PLANES, scale: int = SCALE, blocks: int = BLOCKS,
              mean: Sequence[float] = MEAN, std: Sequence[float] = STD, chunk_size: int = 16) -> Any:
    """Noise2Net (module docstring) on a [0, 1] batch ``x``; image ``i`` draws from ``generators[i]``.

    Returns a batch of the same shape in [0, 1]; the blocks act on ``(x - mean) / std``
    (``mean=(0, 0, 0), std=(1, 1, 1)`` applies them to [0, 1] pixels directly, a much stronger
    shift). Images are processed ``chunk_size`` at a time
    (each costs about ``4 * hidden_planes`` channels of activations at full resolution).

    >>> import torch
    >>> x = torch.rand(2, 3, 32, 32)
    >>> y = noise2net(x, [torch.Generator().manual_seed(s) for s in (1, 2)])
    >>> y.shape, bool(y.min() >= 0), bool(y.max() <= 1)
    (torch.Size([2, 3, 32, 32]), True, True)
    """
    _check(eps_range, hidden_planes, scale, blocks)
    if x.ndim != 4 or x.shape[1] != 3:
        raise ConfigError(f"noise2net: expects a (B, 3, H, W) batch, got {tuple(x.shape)}")
    if len(generators) != x.shape[0]:
        raise ConfigError(f"noise2net: {len(generators)} generators for a batch of {x.shape[0]} images")
    return _apply_noise2net(x, generators, eps_range, hidden_planes, scale, blocks, mean, std, chunk_size)


def _apply_noise2net(x: Any, generators: Sequence[Any], eps_range: tuple[float, float], hidden_planes: int, scale: int,
               blocks: int, mean: Sequence[float], std: Sequence[float], chunk_size: int) -> Any:
    """:func:`noise2net` on checked arguments (the shift's and the module's inner call)."""
    import torch  # deferred: loads torch

    m = torch.tensor([float(v) for v in mean], device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
    s = torch.tensor([float(v) for v in std], device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
    outs = []
    for start in range(0, x.shape[0], max(1, chunk_size)):
        xc = (x[start:start + chunk_size] - m) / s
        drawn = [_sample_image(g, eps_range, hidden_planes, scale, blocks)
                 for g in generators[start:start + chunk_size]]
        eps = torch.tensor([e for e, _ in drawn], device=x.device, dtype=x.dtype).view(-1, 1, 1, 1)
        for k in range(blocks):
            xc = xc + eps * _block_forward(xc, [p[k] for _, p in drawn], hidden_planes, scale)
        outs.append((xc * s + m).clamp(0, 1))
    return torch.cat(outs) if outs else x.clone()


def _check(eps_range: tuple[float, float], hidden: int, scale: int, blocks: int) -> None:
    lo, hi = eps_range
    if not 0 <= lo <= hi:
        raise ConfigError(f"noise2net: eps_range must be (low, high) with 0 <= low <= high, got {eps_range!r}")
    for name, v in (("hidden_planes", hidden), ("scale", scale), ("blocks", blocks)):
        if int(v) != v or v < 1:
            raise ConfigError(f"noise2net: {name} must be a positive integer, got {v!r}")


def noise2net_shift(name: str = "noise2net", eps_range: tuple[float, float] = EPS_RANGE,
                    hidden_planes: int = HIDDEN_PLANES, mean: Sequence[float] = MEAN, std: Sequence[float] = STD,
                    chunk_size: int = 16) -> Shift:
    """The evaluation :class:`Shift`: image ``i`` uses ``image_generator(seed, name, indices[i])``."""
    _check(eps_range, hidden_planes, SCALE, BLOCKS)

    def fn(x: Any, indices: Any, seed: int) -> Any:   # x and indices checked by Shift.__call__
        gens = [image_generator(seed, name, int(i)) for i in indices]
        return _apply_noise2net(x, gens, eps_range, hidden_planes, SCALE, BLOCKS, mean, std, chunk_size)

    return Shift(name, None, fn, random=True)


@register_shift("noise2net", severities=None,
                description="Noise2Net (DeepAugment): 4 random Res2Net blocks per image, eps ~ U(0.375, 0.75)")
def _noise2net(_severity: int | None) -> Shift:
    return noise2net_shift()


_CLASSES: dict[str, type] = {}


def __getattr__(name: str) -> Any:  # Noise2Net subclasses torch.nn.Module: import torch only when used
    if name == "Noise2Net":
        if name not in _CLASSES:
            _CLASSES[name] = _make_noise2net()
        return _CLASSES[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _make_noise2net() -> type:
    from torch import nn  # deferred: loads torch

    class Noise2Net(nn.Module):
        """Noise2Net as a training augmentation: a fresh random network per image on every call.

        Takes and returns [0, 1] batches (normalise after it). ``p`` is the fraction of images
        augmented (each independently; the reference augmented a fixed half of each batch).
        Randomness comes from ``seed`` (a private generator, so a training run is reproducible)
        or, with ``seed=None``, from torch's global RNG (``torch.manual_seed``).
        ``forward(x, generators=None)`` also takes explicit per-image generators. Gradients
        flow through it to ``x``; wrap it in ``torch.no_grad()`` when they are not needed.

        >>> import torch
        >>> aug = Noise2Net(seed=0)
        >>> aug(torch.rand(4, 3, 32, 32)).shape
        torch.Size([4, 3, 32, 32])
        """

        def __init__(self, eps_range: tuple[float, float] = EPS_RANGE, hidden_planes: int = HIDDEN_PLANES,
                     scale: int = SCALE, blocks: int = BLOCKS, p: float = 1.0, seed: int | None = None,
                     mean: Sequence[float] = MEAN, std: Sequence[float] = STD, chunk_size: int = 16) -> None:
            import torch  # deferred: loads torch

            super().__init__()
            _check(eps_range, hidden_planes, scale, blocks)
            if not 0 <= p <= 1:
                raise ConfigError(f"Noise2Net: p must be in [0, 1], got {p!r}")
            self.eps_range, self.hidden_planes = tuple(eps_range), hidden_planes
            self.scale, self.blocks, self.p, self.chunk_size = scale, blocks, float(p), chunk_size
            self.mean, self.std = tuple(mean), tuple(std)
            self.generator = None if seed is None else torch.Generator().manual_seed(int(seed))

        def forward(self, x: Any, generators: Sequence[Any] | None = None) -> Any:
            import torch  # deferred: loads torch

            n = x.shape[0]
            if generators is None:
                seeds = torch.randint(0, 2**62, (n,), generator=self.generator)
                generators = [torch.Generator().manual_seed(int(s)) for s in seeds]
            chosen = (torch.rand(n, generator=self.generator) < self.p).nonzero().flatten().tolist()
            if not chosen:
                return x
            aug = noise2net(x[chosen], [generators[i] for i in chosen], eps_range=self.eps_range,
                            hidden_planes=self.hidden_planes, scale=self.scale, blocks=self.blocks,
                            mean=self.mean, std=self.std, chunk_size=self.chunk_size)
            if len(chosen) == n:
                return aug
            out = x.clone()
            out[chosen] = aug
            return out

        def extra_repr(self) -> str:
            return (f"eps_range={self.eps_range}, hidden_planes={self.hidden_planes}, scale={self.scale}, "
                    f"blocks={self.blocks}, p={self.p}")

    Noise2Net.__module__ = __name__
    Noise2Net.__qualname__ = "Noise2Net"
    return Noise2Net
