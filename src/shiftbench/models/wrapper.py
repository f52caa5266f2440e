"""The one place pixels are normalised: :class:`Normalized` wraps a network that expects
``(x - mean) / std`` so that it takes [0, 1] pixels (DESIGN principle 2: shifts and attacks act on
[0, 1] pixels, the model's own normalisation stays inside the model)."""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class Normalized(nn.Module):
    """``net((x - mean) / std)`` for a batch ``x`` of shape ``(B, C, H, W)`` in [0, 1].

    ``mean`` and ``std`` are per-channel buffers of shape ``(1, C, 1, 1)`` (not saved in the
    state dict, so ``wrapper.net.state_dict()`` and ``wrapper.state_dict()`` differ only by the
    ``net.`` prefix). The subtraction and division broadcast elementwise, so a
    ``torch.channels_last`` input stays channels-last, and they run in the input's dtype (half and
    bfloat16 batches are not promoted). The wrapper is built in eval mode; gradients flow to
    ``x`` (for attacks).

    >>> import torch
    >>> m = Normalized(torch.nn.Identity(), mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    >>> m(torch.ones(1, 3, 1, 1)).flatten().tolist()
    [2.0, 2.0, 2.0]
    """

    def __init__(self, net: nn.Module, mean: Sequence[float], std: Sequence[float]) -> None:
        super().__init__()
        if len(mean) != len(std):
            raise ValueError(f"mean has {len(mean)} channels but std has {len(std)}")
        if any(float(s) <= 0 for s in std):
            raise ValueError(f"std must be positive, got {tuple(std)}")
        self.net = net
        self.register_buffer("mean", torch.tensor([float(m) for m in mean]).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor([float(s) for s in std]).view(1, -1, 1, 1), persistent=False)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim != 4 or x.shape[1] != self.mean.shape[1]:
            raise ValueError(f"expected a batch (B, {self.mean.shape[1]}, H, W) of [0, 1] pixels, "
                             f"got shape {tuple(x.shape)}")
        return self.net((x - self.mean.to(x.dtype)) / self.std.to(x.dtype))

    def extra_repr(self) -> str:
        return (f"mean={tuple(round(v, 4) for v in self.mean.flatten().tolist())}, "
                f"std={tuple(round(v, 4) for v in self.std.flatten().tolist())}")
