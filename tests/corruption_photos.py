"""Shared by the corruption tests: real photographs as uint8 batches, conversions between the
reference's (B, H, W, 3) arrays and our (B, 3, H, W) tensors, and the reference package."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

GREY_LEVEL = 1 / 255


def reference():
    """The reference ``imagecorruptions.corruptions`` module (skips the test where it is missing)."""
    return pytest.importorskip("imagecorruptions.corruptions")


def photos_u8(size: int | tuple[int, int]) -> np.ndarray:
    """(3, H, W, 3) uint8: chelsea, coffee, astronaut resized (bicubic) to ``size``."""
    import skimage.data

    w, h = (size, size) if isinstance(size, int) else size[::-1]
    return np.stack([np.asarray(Image.fromarray(getattr(skimage.data, n)()).resize((w, h), Image.BICUBIC))
                     for n in ("chelsea", "coffee", "astronaut")])


def to_tensor(u8: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(u8)).permute(0, 3, 1, 2).float() / 255


def to_numpy(x: torch.Tensor) -> np.ndarray:
    """(B, 3, H, W) in [0, 1] -> (B, H, W, 3) float64 in [0, 1]."""
    return x.permute(0, 2, 3, 1).double().cpu().numpy()
