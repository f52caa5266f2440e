"""The published testbed's ``greyscale`` setting: ITU-R BT.601 luma on all three channels.

``Y = 0.299 R + 0.587 G + 0.114 B`` computed on the [0, 1] pixels after the model's resize and
crop, then replicated to 3 channels so the model's input shape is unchanged (Taori et al. 2020,
``imagenet-testbed/src/eval_settings/image_utils.py: greyscale``: the same weights, in float,
without quantisation). Deterministic, no severities.
"""
from __future__ import annotations

from typing import Any

from shiftbench.shifts.base import Shift, register_shift

#: ITU-R BT.601 luma weights for R, G, B
LUMA_601 = (0.299, 0.587, 0.114)


def greyscale(x: Any) -> Any:
    """``(B, 3, H, W)`` float -> ``(B, 3, H, W)`` with every channel ``0.299 R + 0.587 G + 0.114 B``
    (the ``greyscale`` shift checks its batches: :meth:`~shiftbench.shifts.Shift.check_input`)."""
    y = LUMA_601[0] * x[:, 0:1] + LUMA_601[1] * x[:, 1:2] + LUMA_601[2] * x[:, 2:3]
    return y.clamp(0, 1).expand(-1, 3, -1, -1).contiguous()


@register_shift("greyscale", severities=None,
                description="greyscale: ITU-R BT.601 luma replicated on 3 channels (published testbed setting)")
def _greyscale(_severity: None = None) -> Shift:
    return Shift("greyscale", None, lambda x, indices, seed: greyscale(x), random=False)
