"""DeepAugment's image-to-image networks and the distortions of their weights and feed-forward pass.

DeepAugment (Hendrycks et al. 2021, "The Many Faces of Robustness", ICCV, §4 and Appendix) makes a
statically augmented copy of a training set by passing every image through an image-to-image
network whose weights and forward pass are randomly distorted. The authors' code
(``hendrycks/imagenet-r``, folder ``DeepAugment``: ``CAE_distort_imagenet.py``,
``EDSR_distort_imagenet.py``) uses two networks, both defined here with the authors' layer
structure, so their pretrained checkpoints load (same state-dict keys and shapes):

* :class:`CAE`: the convolutional autoencoder of Theis et al. 2017 as the authors ship it
  (``cae_32x32x32_zero_pad_bin.py``: a 4x-downsampling encoder with three residual blocks, a
  32-channel tanh code stochastically binarised, a mirror decoder); pixels in [0, 1].
* :class:`EDSR`: the EDSR baseline super-resolution network (Lim et al. 2017; 16 residual blocks,
  64 features, x4; ``edsr_baseline_x4.pt``); pixels in [0, 255].

``width`` (a channel multiplier, 1 = the authors' networks) makes small networks for tests and
for a short training on CPU; only ``width=1`` loads the authors' checkpoints.

**The distortions** are the authors' families, each a field of :class:`CAEDistortions` or
:class:`EDSRDistortions` holding a :class:`Distortion` (``probability``, ``strength``). As in the
authors' scripts, the families of one *group* exclude each other: a draw picks family ``f`` with
its ``probability`` and no family with the remainder ``1 - sum``; the defaults are the authors'
uniform choices (a probability of 0 turns a family off). Groups:

========  ==========================================  =====================================
network   group (when it is drawn)                    authors' choice
========  ==========================================  =====================================
CAE       weights (each time the weights are redrawn) one of 8 families (1/8 each)
CAE       code (every image, before binarisation)     one of 9 families (1/9 each)
EDSR      weights (each time the weights are redrawn) 3 draws, with replacement, of 17 (1/17)
EDSR      head (every image, after the head conv)     one of 3 or none (1/4 each)
EDSR      body (every image, in the residual body)    one of 4 or none (1/5 each)
========  ==========================================  =====================================

The weights are redrawn from the undistorted ones for the first image and then, before each
image, with probability ``resample_probability`` = 0.05 (the scripts' ``np.random.uniform() <
0.05``). The ``strength`` of every family is the constant of the authors' code that sets how much
it changes (its meaning is in each field's comment); where the code has none it is the number of
layers touched (1). Three quirks of the released code are reproduced when ``released_code`` is
true (the default), since they made the paper's data: EDSR's channel "swap" copies one channel
onto the other (a tuple assignment of tensor views), EDSR's layer skip applies every kept body
layer to the body's *input* (so the body reduces to its last kept layer), and CAE's ninth weight
family (``keep_max``) is never drawn (the script samples from ``range(8)``; its probability
defaults to 0). With ``released_code=False`` the swap swaps and the skip chains the kept layers.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from shiftbench.errors import ConfigError, DataError, did_you_mean, require

NETWORKS = ("cae", "edsr")
#: the scripts redraw the distorted weights before an image with this probability
RESAMPLE_PROBABILITY = 0.05
#: the CAE's 21 convolutions in the authors' order (``get_weights``' ``weight_keys``); a layer
#: index of :data:`CAE_LAYER_RANGES` is a position in this list
CAE_LAYERS = ("e_conv_1.1", "e_conv_2.1", "e_block_1.1", "e_block_1.4", "e_block_2.1", "e_block_2.4",
              "e_block_3.1", "e_block_3.4", "e_conv_3.0", "d_up_conv_1.0", "d_up_conv_1.3", "d_block_1.1",
              "d_block_1.4", "d_block_2.1", "d_block_2.4", "d_block_3.1", "d_block_3.4", "d_up_conv_2.0",
              "d_up_conv_2.3", "d_up_conv_3.0", "d_up_conv_3.3")
#: the layers each CAE weight family picks from (``OPTION_LAYER_MAPPING``): the decoder's first half
CAE_LAYER_RANGES = {"flip_filters": range(11, 16), "gelu_filters": range(10, 14)}
CAE_DEFAULT_RANGE = range(8, 14)
#: EDSR's body is split here for the body distortions (``self.body[:5]``)
EDSR_SPLIT = 5


@dataclass(frozen=True)
class Distortion:
    """One distortion family: drawn with ``probability`` (within its group), changing its target by
    ``strength`` (the family's constant in the authors' code; see the field's comment)."""

    probability: float
    strength: float = 1.0


@dataclass(frozen=True)
class _Options:
    """Shared behaviour of the two option sets (``GROUPS``: group -> its family names)."""

    #: group name -> its family names (set on each subclass)
    GROUPS: ClassVar[dict[str, tuple[str, ...]]] = {}
    resample_probability: float = RESAMPLE_PROBABILITY
    released_code: bool = True

    @classmethod
    def families(cls) -> list[str]:
        return [n for group in cls.GROUPS.values() for n in group]

    def group_of(self, name: str) -> str:
        for group, names in self.GROUPS.items():
            if name in names:
                return group
        raise ConfigError(did_you_mean(f"{self.network} distortion", name, self.families()))

    def off(self) -> Any:
        """Every family's probability 0: the network's undistorted output."""
        return replace(self, **{n: replace(getattr(self, n), probability=0.0) for n in self.families()})

    def only(self, name: str, strength: float | None = None) -> Any:
        """``name`` always drawn (probability 1), every other family off."""
        self.group_of(name)
        d = getattr(self, name)
        return replace(self.off(), **{name: Distortion(1.0, d.strength if strength is None else strength)})

    def check(self) -> Any:
        """``self`` if every probability is in [0, 1] and each group's sum at most 1, else a ConfigError."""
        for group, names in self.GROUPS.items():
            for n in names:
                d = getattr(self, n)
                if not isinstance(d, Distortion) or not 0 <= d.probability <= 1:
                    raise ConfigError(f"{self.network} distortion {n}: probability must be in [0, 1], got {d!r}")
            total = sum(getattr(self, n).probability for n in names)
            if total > 1 + 1e-9:
                raise ConfigError(f"{self.network} distortions of the {group} group: probabilities sum to "
                                  f"{total:.3g} > 1 (one family of a group is drawn at a time)")
        if not 0 <= self.resample_probability <= 1:
            raise ConfigError(f"resample_probability must be in [0, 1], got {self.resample_probability}")
        return self

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"resample_probability": self.resample_probability,
                               "released_code": self.released_code}
        for n in self.families():
            d = getattr(self, n)
            out[n] = {"probability": d.probability, "strength": d.strength}
        return out


@dataclass(frozen=True)
class CAEDistortions(_Options):
    """The CAE's distortion families (``CAE_distort_imagenet.py`` and the CAE's ``forward``).

    Weights (one family drawn each time the weights are redrawn; layer ``i`` drawn from the
    decoder layers of :data:`CAE_LAYER_RANGES`, default positions 8-13 of :data:`CAE_LAYERS`):
    """

    network: str = "cae"
    #: reverse the order of layer i's output filters (weights and biases); strength: unused (1)
    flip_filters: Distortion = Distortion(1 / 8)
    #: negate ``strength`` = 12 filters of layer i drawn with replacement (weights and biases)
    negate_filters: Distortion = Distortion(1 / 8, 12)
    #: zero ``strength`` = 25 filters of layer i (drawn with replacement)
    zero_filters: Distortion = Distortion(1 / 8, 25)
    #: replace ``strength`` = 25 filters of layer i by ``-gelu(w)`` (weights and biases)
    gelu_filters: Distortion = Distortion(1 / 8, 25)
    #: multiply two layers' weights elementwise by ``1 + 2 u strength U`` (u, U ~ U(0, 1); strength 4)
    scale_weights: Distortion = Distortion(1 / 8, 4)
    #: multiply layer i's weights by a random mask, {0, 1} or (half the time) {-1, 1}, each entry
    #: zeroed or negated with probability ``strength`` = 0.5
    mask_weights: Distortion = Distortion(1 / 8, 0.5)
    #: rotate layer i's kernels by 90, 180 or 270 degrees; strength: unused (1)
    rotate_kernels: Distortion = Distortion(1 / 8)
    #: negate ``strength`` = 1/5 of layer i's filters (drawn with replacement, the authors' ``to_zero``)
    negate_fraction: Distortion = Distortion(1 / 8, 0.2)
    #: keep only the largest tap of each kernel of layer i; never drawn by the released script (0)
    keep_max: Distortion = Distortion(0.0)
    # -- code (the encoder's tanh output, one family drawn per image)
    #: multiply the binarised code by ``3 + 2 u strength U`` (after binarisation; strength 2)
    scale_code: Distortion = Distortion(1 / 9, 2)
    #: zero the code at a fraction ``strength`` = 0.2 of positions (all channels)
    zero_positions: Distortion = Distortion(1 / 9, 0.2)
    #: negate the code at a fraction ``strength`` = 0.1 of positions
    negate_positions: Distortion = Distortion(1 / 9, 0.1)
    #: permute the first ``strength`` = 10 code channels
    permute_channels: Distortion = Distortion(1 / 9, 10)
    #: flip ``strength`` = 5 code channels (drawn with replacement) vertically, horizontally or both
    flip_some_channels: Distortion = Distortion(1 / 9, 5)
    #: flip every code channel vertically, horizontally or both; strength: unused (1)
    flip_all_channels: Distortion = Distortion(1 / 9)
    #: convolve the code with the identity 3x3 kernel plus uniform noise of width ``strength`` = 0.2
    noisy_identity_conv: Distortion = Distortion(1 / 9, 0.2)
    #: convolve with the identity plus, for each channel with probability ``strength`` = 0.5, a
    #: tap from a random channel at a random offset
    mix_channels_conv: Distortion = Distortion(1 / 9, 0.5)
    #: shift the code by one random offset, redrawn per channel with probability ``strength`` = 0.2
    shift_channels: Distortion = Distortion(1 / 9, 0.2)


CAEDistortions.GROUPS = {  # type: ignore[misc]
    "weights": ("flip_filters", "negate_filters", "zero_filters", "gelu_filters", "scale_weights", "mask_weights",
                "rotate_kernels", "negate_fraction", "keep_max"),
    "code": ("scale_code", "zero_positions", "negate_positions", "permute_channels", "flip_some_channels",
             "flip_all_channels", "noisy_identity_conv", "mix_channels_conv", "shift_channels"),
}


@dataclass(frozen=True)
class EDSRDistortions(_Options):
    """EDSR's distortion families (``EDSR_distort_imagenet.py``'s ``get_weights`` and ``forward``).

    Weights (``weight_draws`` = 3 draws with replacement each time the weights are redrawn; block
    ``i`` of the body, its convolutions ``body.i.body.0`` and ``.2``, drawn from the script's
    ranges: 0, 3, 6, 9 for most families):
    """

    network: str = "edsr"
    weight_draws: int = 3
    #: reverse the output filters of block i's two convolutions (i in 0, 3, 6, 9); strength unused
    flip_filters: Distortion = Distortion(1 / 17)
    #: negate block i's first convolution (i in 1, 4, 7); strength unused
    negate_layer: Distortion = Distortion(1 / 17)
    #: zero block i's first convolution, weights and bias; strength unused
    zero_layer: Distortion = Distortion(1 / 17)
    #: replace both convolutions' weights of block i by ``-gelu(w)``; strength unused
    gelu_weights: Distortion = Distortion(1 / 17)
    #: multiply each kernel of block i's first convolution by the Laplacian ``[[0,1,0],[1,-4,1],[0,1,0]]``
    laplacian_kernel: Distortion = Distortion(1 / 17)
    #: multiply each kernel by the edge filter ``[[-1,-1,-1],[-1,8,-1],[-1,-1,-1]]``
    edge_kernel: Distortion = Distortion(1 / 17)
    #: multiply block i's second convolution by ``1 + 2 u strength U`` (strength 2)
    scale_weights: Distortion = Distortion(1 / 17, 2)
    #: flip the first convolution's kernels left-right and negate the second; strength unused
    flip_and_negate: Distortion = Distortion(1 / 17)
    #: convolve the first convolution's weights with a random ±``strength`` one-tap shift kernel (i in 1, 5, 9)
    shift_conv: Distortion = Distortion(1 / 17)
    #: convolve them with the random kernel ``(2 u U - 1) strength`` (strength 1/6)
    random_conv: Distortion = Distortion(1 / 17, 1 / 6)
    #: convolve the second convolution with Dirichlet(``strength`` = 0.1) kernels (i in 1, 5, 9)
    dirichlet_conv: Distortion = Distortion(1 / 17, 0.1)
    #: add uniform noise of width ``strength`` = 1 to the second convolution of a block among 0-14
    weight_noise: Distortion = Distortion(1 / 17, 1.0)
    #: 5 times: rotate a convolution's kernels by 90k degrees, or (half the time) rotate its
    #: (out, in) channel plane, a transpose-like remix of the weights; strength: the count (5)
    rotate_transpose: Distortion = Distortion(1 / 17, 5)
    #: 5 times: multiply a first convolution by a random {-1, 1} mask; strength: the count (5)
    sign_mask: Distortion = Distortion(1 / 17, 5)
    #: 5 times: multiply a first convolution by a random {0, 1} mask; strength: the count (5)
    zero_mask: Distortion = Distortion(1 / 17, 5)
    #: 5 blocks: negate filters drawn ``strength`` = 1/2 x width times with replacement (32 of 64)
    negate_filters: Distortion = Distortion(1 / 17, 0.5)
    #: 5 times: keep only the largest tap of each kernel; strength: the count (5)
    keep_max: Distortion = Distortion(1 / 17, 5)
    # -- head (the head convolution's output, per image; a fourth of the time nothing)
    #: 5 times: channel c1 takes channel c2's activations (``released_code``; else they swap)
    swap_channels: Distortion = Distortion(1 / 4, 5)
    #: zero each activation with probability ``strength`` = 0.45
    zero_activations: Distortion = Distortion(1 / 4, 0.45)
    #: negate each activation with probability ``strength`` = 0.475
    negate_activations: Distortion = Distortion(1 / 4, 0.475)
    # -- body (per image; a fifth of the time nothing)
    #: negate the activations after the first 5 residual blocks; strength unused
    negate_body: Distortion = Distortion(1 / 5)
    #: apply an extra activation after block 5: ReLU with probability ``strength`` = 1/3, else GELU
    extra_activation: Distortion = Distortion(1 / 5, 1 / 3)
    #: flip the activations after block 5 over channels and height (probability 1/3) or width
    flip_body: Distortion = Distortion(1 / 5)
    #: skip the body layers drawn ``strength`` = 3 times among 2-16 (see ``released_code``)
    skip_layers: Distortion = Distortion(1 / 5, 3)


EDSRDistortions.GROUPS = {  # type: ignore[misc]
    "weights": ("flip_filters", "negate_layer", "zero_layer", "gelu_weights", "laplacian_kernel", "edge_kernel",
                "scale_weights", "flip_and_negate", "shift_conv", "random_conv", "dirichlet_conv", "weight_noise",
                "rotate_transpose", "sign_mask", "zero_mask", "negate_filters", "keep_max"),
    "head": ("swap_channels", "zero_activations", "negate_activations"),
    "body": ("negate_body", "extra_activation", "flip_body", "skip_layers"),
}


def default_distortions(network: str) -> CAEDistortions | EDSRDistortions:
    """The authors' distortion options of ``network`` (``"cae"`` or ``"edsr"``)."""
    return {"cae": CAEDistortions, "edsr": EDSRDistortions}[check_network(network)]()


def check_network(network: str) -> str:
    if network not in NETWORKS:
        raise ConfigError(did_you_mean("DeepAugment network", str(network), NETWORKS,
                                       "the networks are 'cae' and 'edsr'"))
    return network


# ------------------------------------------------------------------------------------ random draws
def _rand(g: Any) -> float:
    import torch  # deferred: loads torch

    return float(torch.rand((), generator=g))


def _randint(g: Any, lo: int, hi: int) -> int:
    """An integer in ``[lo, hi)``."""
    import torch  # deferred: loads torch

    return int(torch.randint(lo, hi, (), generator=g))


def _choice(g: Any, seq: Any) -> Any:
    seq = list(seq)
    return seq[_randint(g, 0, len(seq))]


def _draw(options: _Options, group: str, g: Any) -> str | None:
    """One family of ``group`` drawn with the families' probabilities (``None``: the remainder)."""
    u, acc = _rand(g), 0.0
    for name in options.GROUPS[group]:
        acc += getattr(options, name).probability
        if u < acc:
            return name
    return None


# ------------------------------------------------------------------------------------ the networks
def _nn() -> Any:
    require("shiftbench DeepAugment", "torch")
    from torch import nn  # deferred: loads torch

    return nn


def _ch(c: int, width: float) -> int:
    return max(1, round(c * width))


def build_cae(width: float = 1.0) -> Any:
    """The authors' CAE (``cae_32x32x32_zero_pad_bin.py``) with every hidden width times ``width``."""
    nn = _nn()
    import torch  # deferred: loads torch
    import torch.nn.functional as F  # deferred: loads torch

    def res_block(c: int) -> Any:
        return nn.Sequential(nn.ZeroPad2d((1, 1, 1, 1)), nn.Conv2d(c, c, 3), nn.LeakyReLU(),
                             nn.ZeroPad2d((1, 1, 1, 1)), nn.Conv2d(c, c, 3))

    class CAE(nn.Module):
        """Convolutional autoencoder (Theis et al. 2017) as DeepAugment's authors ship it; pixels in
        [0, 1]. ``forward(x, code=None, binarised=None, generator=None)``: ``code`` distorts the
        encoder's tanh output, ``binarised`` the code after stochastic binarisation (drawn from
        ``generator``)."""

        def __init__(self) -> None:
            super().__init__()
            c64, c128, c32, c256, c16 = (_ch(c, width) for c in (64, 128, 32, 256, 16))
            self.width = width
            self.e_conv_1 = nn.Sequential(nn.ZeroPad2d((1, 2, 1, 2)), nn.Conv2d(3, c64, 5, stride=2), nn.LeakyReLU())
            self.e_conv_2 = nn.Sequential(nn.ZeroPad2d((1, 2, 1, 2)), nn.Conv2d(c64, c128, 5, stride=2),
                                          nn.LeakyReLU())
            self.e_block_1, self.e_block_2, self.e_block_3 = res_block(c128), res_block(c128), res_block(c128)
            self.e_conv_3 = nn.Sequential(nn.Conv2d(c128, c32, 5, padding=2), nn.Tanh())
            self.d_up_conv_1 = nn.Sequential(nn.Conv2d(c32, c64, 3), nn.LeakyReLU(), nn.ZeroPad2d((1, 1, 1, 1)),
                                             nn.ConvTranspose2d(c64, c128, 2, stride=2))
            self.d_block_1, self.d_block_2, self.d_block_3 = res_block(c128), res_block(c128), res_block(c128)
            self.d_up_conv_2 = nn.Sequential(nn.Conv2d(c128, c32, 3), nn.LeakyReLU(), nn.ZeroPad2d((1, 1, 1, 1)),
                                             nn.ConvTranspose2d(c32, c256, 2, stride=2))
            self.d_up_conv_3 = nn.Sequential(nn.Conv2d(c256, c16, 3), nn.LeakyReLU(), nn.ReflectionPad2d((2, 2, 2, 2)),
                                             nn.Conv2d(c16, 3, 3), nn.Tanh())

        def encode(self, x: Any) -> Any:
            ec2 = self.e_conv_2(self.e_conv_1(x))
            b1 = self.e_block_1(ec2) + ec2
            b2 = self.e_block_2(b1) + b1
            b3 = self.e_block_3(b2) + b2
            return self.e_conv_3(b3)

        def decode(self, encoded: Any) -> Any:
            y = encoded * 2.0 - 1
            u1 = self.d_up_conv_1(y)
            b1 = self.d_block_1(u1) + u1
            b2 = self.d_block_2(b1) + b1
            b3 = self.d_block_3(b2) + b2
            return self.d_up_conv_3(self.d_up_conv_2(b3))

        def forward(self, x: Any, code: Callable | None = None, binarised: Callable | None = None,
                    generator: Any = None) -> Any:
            ec3 = self.encode(x)
            if code is not None:
                ec3 = code(ec3)
            with torch.no_grad():  # stochastic binarisation, straight-through (the CAE's training)
                rand = torch.rand(ec3.shape, generator=generator).to(ec3.device)
                prob = (1 + ec3) / 2
                eps = torch.where(rand <= prob, 1 - ec3, -ec3 - 1)
            encoded = 0.5 * (ec3 + eps + 1)
            if binarised is not None:
                encoded = binarised(encoded)
            return self.decode(encoded)

    del F
    return CAE()


def build_edsr(width: float = 1.0, n_resblocks: int = 16, scale: int = 4) -> Any:
    """The EDSR baseline (Lim et al. 2017; ``r16f64x4``, ``n_feats`` = 64 x ``width``) as the
    authors' ``EDSR_distort_imagenet.py`` defines it; pixels in [0, 255]."""
    nn = _nn()
    import torch  # deferred: loads torch
    import torch.nn.functional as F  # deferred: loads torch

    n = _ch(64, width)
    if scale not in (2, 3, 4):
        raise ConfigError(f"EDSR scale must be 2, 3 or 4, got {scale}")

    def conv(i: int, o: int) -> Any:
        return nn.Conv2d(i, o, 3, padding=1)

    class MeanShift(nn.Conv2d):
        def __init__(self, sign: int) -> None:
            super().__init__(3, 3, kernel_size=1)
            self.weight.data = torch.eye(3).view(3, 3, 1, 1)
            self.bias.data = sign * 255.0 * torch.tensor((0.4488, 0.4371, 0.4040))
            for p in self.parameters():
                p.requires_grad = False

    class ResBlock(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(conv(n, n), nn.ReLU(True), conv(n, n))

        def forward(self, x: Any) -> Any:
            return self.body(x) + x

    up: list[Any] = []
    for _ in range(2 if scale == 4 else 1):
        s = 3 if scale == 3 else 2
        up += [conv(n, s * s * n), nn.PixelShuffle(s)]

    class EDSR(nn.Module):
        """EDSR baseline super-resolution network. ``forward(x, head=None, mid=None, skip=(),
        chain_skips=False)``: ``head`` distorts the head's output, ``mid`` the activations after
        body block :data:`EDSR_SPLIT`, ``skip`` lists body layers left out."""

        def __init__(self) -> None:
            super().__init__()
            self.scale, self.n_feats = scale, n
            self.sub_mean, self.add_mean = MeanShift(-1), MeanShift(1)
            self.head = nn.Sequential(conv(3, n))
            self.body = nn.Sequential(*[ResBlock() for _ in range(n_resblocks)], conv(n, n))
            self.tail = nn.Sequential(nn.Sequential(*up), conv(n, 3))

        def forward(self, x: Any, head: Callable | None = None, mid: Callable | None = None,
                    skip: frozenset[int] = frozenset(), chain_skips: bool = False) -> Any:
            x = self.head(self.sub_mean(x))
            if head is not None:
                x = head(x)
            if skip:
                res = x
                for i, layer in enumerate(self.body):
                    if i not in skip:
                        res = layer(res) if chain_skips else layer(x)   # the script: layer(x), not chained
            elif mid is not None:
                res = self.body[EDSR_SPLIT:](mid(self.body[:EDSR_SPLIT](x)))
            else:
                res = self.body(x)
            return self.add_mean(self.tail(res + x))

    del F
    return EDSR()


def build_network(network: str, width: float = 1.0) -> Any:
    """An untrained :func:`build_cae` or :func:`build_edsr` (``network``: ``"cae"``/``"edsr"``)."""
    if not (isinstance(width, int | float) and 0 < width <= 4):
        raise ConfigError(f"width must be a number in (0, 4] (1 = the authors' networks), got {width!r}")
    return build_cae(width) if check_network(network) == "cae" else build_edsr(width)


# ------------------------------------------------------------------------------------ checkpoints
def load_checkpoint(net: Any, path: Path | str, network: str) -> Any:
    """Load the state dict in ``path`` into ``net``; a key missing, unexpected or of another shape
    is one DataError naming the first such key (EDSR's fixed mean shifts may be absent)."""
    import torch  # deferred: loads torch

    path = Path(path)
    if not path.is_file():
        raise DataError(f"--checkpoint {path}: no such file")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # any unreadable file is one line
        raise DataError(f"--checkpoint {path}: not a PyTorch state dict ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else ''})") from exc
    if isinstance(state, Mapping) and isinstance(state.get("state_dict"), Mapping):
        state = state["state_dict"]
    if not isinstance(state, Mapping):
        raise DataError(f"--checkpoint {path}: holds a {type(state).__name__}, not a state dict")
    state = {k.removeprefix("module."): v for k, v in state.items()}
    own = net.state_dict()
    where = f"--checkpoint {path} does not match the {network} network"
    for key, value in own.items():
        if key not in state:
            if network == "edsr" and key.split(".")[0] in ("sub_mean", "add_mean"):
                state[key] = value
                continue
            raise DataError(f"{where}: missing key {key!r}")
        got = tuple(getattr(state[key], "shape", ()))
        if got != tuple(value.shape):
            raise DataError(f"{where}: key {key!r} has shape {got} in the checkpoint, {tuple(value.shape)} in the "
                            "network (width 1 is the authors' network)")
    extra = [k for k in state if k not in own]
    if extra:
        raise DataError(f"{where}: unexpected key {extra[0]!r}")
    net.load_state_dict(state)
    return net


# ------------------------------------------------------------------------------------ weight distortions
def distort_weights(state: Mapping[str, Any], options: CAEDistortions | EDSRDistortions, g: Any
                    ) -> tuple[dict[str, Any], list[str]]:
    """A distorted copy of the state dict ``state`` and the families drawn: one draw (CAE) or
    ``weight_draws`` draws (EDSR) of the weights group, each applied to the layers the authors'
    ``get_weights`` picks. ``state`` is left unchanged."""
    w = {k: v.clone() for k, v in state.items()}
    drawn: list[str] = []
    for _ in range(1 if options.network == "cae" else options.weight_draws):
        name = _draw(options, "weights", g)
        if name is not None:
            drawn.append(name)
            (_cae_weights if options.network == "cae" else _edsr_weights)(w, name, getattr(options, name), g)
    return w, drawn


def _gelu(t: Any) -> Any:
    import torch.nn.functional as F  # deferred: loads torch

    return F.gelu(t)


def _keep_max(t: Any) -> Any:
    import torch  # deferred: loads torch

    flat = t.reshape(t.shape[0], t.shape[1], -1)
    top = torch.topk(flat, k=1)
    return torch.zeros_like(flat).scatter(2, top.indices, top.values).reshape(t.shape)


def _cae_weights(w: dict[str, Any], name: str, d: Distortion, g: Any) -> None:
    import torch  # deferred: loads torch

    layers = CAE_LAYER_RANGES.get(name, CAE_DEFAULT_RANGE)
    i, j = _choice(g, layers), _choice(g, layers)
    wi, bi, wj = f"{CAE_LAYERS[i]}.weight", f"{CAE_LAYERS[i]}.bias", f"{CAE_LAYERS[j]}.weight"
    n = w[wi].shape[0]
    if name == "flip_filters":  # the script also flips layer j's weight twice (its bias_j typo): a no-op
        w[wi], w[bi] = torch.flip(w[wi], (0,)), torch.flip(w[bi], (0,))
    elif name in ("negate_filters", "zero_filters", "gelu_filters"):
        f = {"negate_filters": lambda t: -t, "zero_filters": lambda t: 0 * t, "gelu_filters": lambda t: -_gelu(t)}[name]
        for _ in range(int(d.strength)):
            k = _randint(g, 0, n)
            w[wi][k] = f(w[wi][k])
            if k < w[bi].shape[0]:
                w[bi][k] = f(w[bi][k])
    elif name == "scale_weights":
        for key in (wi, wj):
            u = _rand(g)
            w[key] = w[key] * (1 + 2 * u * d.strength * torch.rand(w[key].shape, generator=g))
    elif name == "mask_weights":
        sign = _rand(g) >= 0.5
        keep = (torch.rand(w[wi].shape, generator=g) >= d.strength).float()
        w[wi] = w[wi] * (keep * 2 - 1 if sign else keep)
    elif name == "rotate_kernels":
        w[wi] = torch.rot90(w[wi], k=_randint(g, 1, 4), dims=(2, 3))
    elif name == "negate_fraction":
        rows = sorted({_randint(g, 0, n) for _ in range(max(int(n * d.strength), 1))})
        w[wi][rows] = -w[wi][rows]
    elif name == "keep_max":
        w[wi] = _keep_max(w[wi])


def _block(i: int, j: int, part: str = "weight") -> str:
    return f"body.{i}.body.{j}.{part}"


def _edsr_weights(w: dict[str, Any], name: str, d: Distortion, g: Any) -> None:
    import torch  # deferred: loads torch
    import torch.nn.functional as F  # deferred: loads torch

    blocks = sum(1 for k in w if k.startswith("body.") and k.endswith(".body.0.weight"))

    def pick(candidates: Any) -> int:
        inside = [c for c in candidates if c < blocks]
        return _choice(g, inside or range(blocks))

    i = pick({"negate_layer": range(1, 10, 3), "shift_conv": range(1, 13, 4),
              "dirichlet_conv": range(1, 12, 4), "weight_noise": range(15)}.get(name, range(0, 10, 3)))
    w0, w2 = _block(i, 0), _block(i, 2)
    nf = w[w0].shape[0]
    if name == "flip_filters":
        for key in (w0, _block(i, 0, "bias"), w2, _block(i, 2, "bias")):
            w[key] = torch.flip(w[key], (0,))
    elif name == "negate_layer":
        w[w0], w[_block(i, 0, "bias")] = -w[w0], -w[_block(i, 0, "bias")]
    elif name == "zero_layer":
        w[w0], w[_block(i, 0, "bias")] = 0 * w[w0], 0 * w[_block(i, 0, "bias")]
    elif name == "gelu_weights":
        w[w0], w[w2] = -_gelu(w[w0]), -_gelu(w[w2])
    elif name == "laplacian_kernel":
        w[w0] = w[w0] * torch.tensor([[0, 1, 0], [1, -4.0, 1], [0, 1, 0]]).view(1, 1, 3, 3)
    elif name == "edge_kernel":
        w[w0] = w[w0] * torch.tensor([[-1, -1, -1], [-1, 8.0, -1], [-1, -1, -1]]).view(1, 1, 3, 3)
    elif name == "scale_weights":
        w[w2] = w[w2] * (1 + 2 * _rand(g) * d.strength * torch.rand(w[w2].shape, generator=g))
    elif name == "flip_and_negate":
        w[w0], w[w2] = torch.flip(w[w0], (-1,)), -w[w2]
    elif name == "shift_conv":
        z = torch.zeros_like(w[w0])
        for c in range(z.shape[1]):
            sx, sy = _randint(g, 0, 3), _randint(g, 0, 3)
            z[:, c, sx, sy] = d.strength * (1.0 if _rand(g) < 0.5 else -1.0)
        w[w0] = F.conv2d(w[w0], z, padding=1)
    elif name == "random_conv":
        z = (2 * torch.rand(w[w0].shape, generator=g) * _rand(g) - 1) * d.strength
        w[w0] = F.conv2d(w[w0], z, padding=1)
    elif name == "dirichlet_conv":
        import numpy as np  # deferred: with torch

        rng = np.random.default_rng(_randint(g, 0, 2**62))
        z = torch.from_numpy(rng.dirichlet([float(d.strength)] * 9, (nf, nf)).astype(np.float32)).view(nf, nf, 3, 3)
        w[w2] = F.conv2d(w[w2], z, padding=1)
    elif name == "weight_noise":
        w[w2] = w[w2] + (torch.rand(w[w2].shape, generator=g) - 0.5) * d.strength
    elif name in ("rotate_transpose", "sign_mask", "zero_mask", "negate_filters", "keep_max"):
        for _ in range(5 if name == "negate_filters" else int(d.strength)):
            b = pick(range(15))
            key = _block(b, 0) if name in ("sign_mask", "zero_mask", "negate_filters") else _block(b, _choice(g, (0, 2)))
            if name == "rotate_transpose":
                k, dims = _randint(g, 1, 4), ((2, 3) if _randint(g, 0, 2) == 0 else (0, 1))
                w[key] = torch.rot90(w[key], k=k, dims=dims)
            elif name == "sign_mask":
                w[key] = w[key] * (torch.round(torch.rand(w[key].shape, generator=g)) * 2 - 1)
            elif name == "zero_mask":
                w[key] = w[key] * torch.round(torch.rand(w[key].shape, generator=g))
            elif name == "negate_filters":
                rows = sorted({_randint(g, 0, nf) for _ in range(max(int(nf * d.strength), 1))})
                w[key][rows] = -w[key][rows]
            else:
                w[key] = _keep_max(w[key])


# ------------------------------------------------------------------------------------ forward distortions
@dataclass
class ForwardDistortion:
    """The forward-pass families drawn for one image and the keyword arguments that apply them."""

    families: list[str]
    kwargs: dict[str, Any]


def draw_forward(options: CAEDistortions | EDSRDistortions, g: Any) -> ForwardDistortion:
    """The forward distortions of one image: one draw of CAE's code group, or one of EDSR's head
    group and one of its body group, with their random choices taken from ``g``."""
    if options.network == "cae":
        name = _draw(options, "code", g)
        if name is None:
            return ForwardDistortion([], {})
        return ForwardDistortion([name], _cae_code(name, getattr(options, name), g))
    families, kwargs = [], {}
    head = _draw(options, "head", g)
    if head is not None:
        families.append(head)
        kwargs["head"] = _edsr_head(head, getattr(options, head), g, options.released_code)
    body = _draw(options, "body", g)
    if body is not None:
        families.append(body)
        kwargs.update(_edsr_body(body, getattr(options, body), g, options.released_code))
    return ForwardDistortion(families, kwargs)


def _flip_dims(g: Any) -> tuple[int, ...]:
    """The script's two of [batch, H, W] for one (1, H, W) channel: H, W or both (1/3 each)."""
    return [(-2,), (-1,), (-2, -1)][_randint(g, 0, 3)]


def _cae_code(name: str, d: Distortion, g: Any) -> dict[str, Callable]:
    import torch  # deferred: loads torch
    import torch.nn.functional as F  # deferred: loads torch

    s = d.strength
    if name == "scale_code":
        u = _rand(g)
        return {"binarised": lambda e: e * (3 + 2 * u * s * torch.rand(e.shape, generator=g).to(e.device))}
    if name in ("zero_positions", "negate_positions"):
        def mask(e: Any) -> Any:
            m = (torch.rand(e.shape[-2:], generator=g) > s).float().to(e.device)
            return e * (m if name == "zero_positions" else m * 2 - 1)
        return {"code": mask}
    if name == "permute_channels":
        def permute(e: Any) -> Any:
            k = min(int(s), e.shape[1])
            perm = torch.cat([torch.randperm(k, generator=g), torch.arange(k, e.shape[1])])
            return e[:, perm]
        return {"code": permute}
    if name in ("flip_some_channels", "flip_all_channels"):
        def flip(e: Any) -> Any:
            e = e.clone()
            dims = _flip_dims(g)
            chans = ([_randint(g, 0, e.shape[1]) for _ in range(int(s))] if name == "flip_some_channels"
                     else range(e.shape[1]))
            for c in chans:
                e[:, c] = torch.flip(e[:, c], dims=dims)
            return e
        return {"code": flip}

    def conv(e: Any) -> Any:
        c = e.shape[1]
        z = torch.zeros(c, c, 3, 3)
        if name == "shift_channels":
            sx, sy = _randint(g, 0, 3), _randint(g, 0, 3)
        for j in range(c):
            if name == "shift_channels":
                if _rand(g) < s:
                    sx, sy = _randint(g, 0, 3), _randint(g, 0, 3)
                z[j, j, sx, sy] = 1
                continue
            z[j, j, 1, 1] = 1
            if name == "mix_channels_conv" and _rand(g) < s:
                z[j, _randint(g, 0, c), _randint(g, -1, 2), _randint(g, -1, 2)] = 1
        if name == "noisy_identity_conv":
            z = z + (torch.rand(z.shape, generator=g) - 0.5) * s
        return F.conv2d(e, z.to(e.device), padding=1)
    return {"code": conv}


def _edsr_head(name: str, d: Distortion, g: Any, released: bool) -> Callable:
    import torch  # deferred: loads torch

    def head(x: Any) -> Any:
        if name == "swap_channels":
            x = x.clone()
            for _ in range(int(d.strength)):
                c1, c2 = _randint(g, 0, x.shape[1]), _randint(g, 0, x.shape[1])
                if released:
                    x[:, c1] = x[:, c2]          # the script's tuple assignment of views: a copy
                else:
                    x[:, [c1, c2]] = x[:, [c2, c1]]
            return x
        r = torch.rand(x.shape, generator=g).to(x.device)
        if name == "zero_activations":
            return x * (r >= d.strength).float()
        return x * ((r >= d.strength).float() * 2 - 1)
    return head


def _edsr_body(name: str, d: Distortion, g: Any, released: bool) -> dict[str, Any]:
    import torch  # deferred: loads torch
    import torch.nn.functional as F  # deferred: loads torch

    if name == "negate_body":
        return {"mid": lambda r: -r}
    if name == "extra_activation":
        act = F.relu if _rand(g) < d.strength else F.gelu
        return {"mid": act}
    if name == "flip_body":
        axes = (1, 2) if _randint(g, 0, 3) == 1 else (1, 3)
        return {"mid": lambda r: torch.flip(r, axes)}
    skip = frozenset(_randint(g, 2, 17) for _ in range(int(d.strength)))
    return {"skip": skip, "chain_skips": not released}


# ------------------------------------------------------------------------------------ one image
def apply_network(net: Any, x: Any, network: str, forward: ForwardDistortion | None = None,
                  noise: Any = None) -> Any:
    """``x`` (``(N, 3, H, W)`` in [0, 1]) through ``net``, the same size out, in [0, 1].

    CAE: padded (edge replication) to a multiple of 4, through the network, cropped, clipped.
    EDSR: downsampled by its scale (bilinear, antialiased: torchvision's ``Resize`` as the
    script applied it before the network), super-resolved at [0, 255] back to (at least) the
    input size, cropped, clipped. ``noise`` is the generator of the CAE's binarisation."""
    import torch.nn.functional as F  # deferred: loads torch

    kwargs = {} if forward is None else forward.kwargs
    h, w = x.shape[-2:]
    if network == "cae":
        ph, pw = -h % 4, -w % 4
        xin = F.pad(x, (0, pw, 0, ph), mode="replicate") if ph or pw else x
        y = net(xin, generator=noise, **kwargs)
        return y[..., :h, :w].clamp(0, 1)
    s = net.scale
    small = F.interpolate(x, size=(math.ceil(h / s), math.ceil(w / s)), mode="bilinear", antialias=True,
                          align_corners=False)
    y = net(255 * small, **kwargs)[..., :h, :w]
    if y.shape[-2:] != (h, w):
        y = F.interpolate(y, size=(h, w), mode="bilinear", align_corners=False)
    return (y / 255).clamp(0, 1)


# ------------------------------------------------------------------------------------ short training
def train_network(net: Any, images: Any, network: str, *, steps: int = 200, seed: int = 0, batch_size: int = 16,
                  lr: float = 1e-3, patch: int = 32, on_step: Callable[[int, float], None] | None = None) -> float:
    """A short self-supervised training of ``net`` on ``images`` (a list of ``(3, H, W)`` tensors in
    [0, 1]); returns the final batch loss.

    Each step takes ``batch_size`` random ``patch`` x ``patch`` crops (drawn from ``seed``) and
    minimises, with Adam at ``lr``: for the CAE the mean squared reconstruction error (the CAE's
    training objective, through its straight-through binarisation), for EDSR the L1 error of
    super-resolving the crop from its antialiased downsampling by the network's scale (EDSR's
    objective, Lim et al. 2017), in [0, 255] units divided by 255."""
    import torch  # deferred: loads torch
    import torch.nn.functional as F  # deferred: loads torch

    g = torch.Generator().manual_seed(int(seed))
    opt = torch.optim.Adam([p for p in net.parameters() if p.requires_grad], lr=lr)
    net.train()
    loss_value = float("nan")
    for step in range(steps):
        crops = []
        for _ in range(batch_size):
            img = images[_randint(g, 0, len(images))]
            ph, pw = min(patch, img.shape[-2]), min(patch, img.shape[-1])
            top, left = _randint(g, 0, img.shape[-2] - ph + 1), _randint(g, 0, img.shape[-1] - pw + 1)
            crop = img[:, top:top + ph, left:left + pw]
            if crop.shape[-2:] != (patch, patch):
                crop = F.interpolate(crop[None], size=(patch, patch), mode="bilinear", align_corners=False)[0]
            crops.append(crop)
        x = torch.stack(crops)
        if network == "cae":
            loss = F.mse_loss(net(x, generator=g), x)
        else:
            s = net.scale
            small = F.interpolate(x, size=(patch // s, patch // s), mode="bilinear", antialias=True,
                                  align_corners=False)
            loss = F.l1_loss(net(255 * small)[..., :patch, :patch], 255 * x) / 255
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss_value = float(loss.detach())
        if on_step is not None:
            on_step(step + 1, loss_value)
    net.eval()
    return loss_value


__all__ = ["CAE_LAYERS", "NETWORKS", "CAEDistortions", "Distortion", "EDSRDistortions", "ForwardDistortion",
           "apply_network", "build_cae", "build_edsr", "build_network", "default_distortions", "distort_weights",
           "draw_forward", "load_checkpoint", "train_network"]
