"""torchvision-style transforms for one's own data loop: :class:`Corrupt` applies any of the
engine's synthetic shifts (the ImageNet-C corruptions of Hendrycks & Dietterich 2019, ...) inside
a ``torchvision.transforms.Compose``, with the engine's pixels (:func:`shiftbench.corrupt`).
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from shiftbench.shifts.api import apply_shift, as_batch, check_seed, corruption, example_indices, to_uint8


class Corrupt:
    """The shift ``name`` at ``severity`` as a transform: a PIL image or a ``(C, H, W)`` tensor in,
    the same form out (also every other form :func:`shiftbench.corrupt` takes, batches included).

    Place it **after the resize and crop and before** ``Normalize``: the shifts act on [0, 1]
    pixels at the model's input size, as the engine applies them (DESIGN principle 2) and as
    ImageNet-C was made (224 px crops); a normalised tensor is refused.

    Determinism. A transform is not told which example it gets, so a random shift draws from
    ``(seed, shift, severity, content index)``, an index hashed from the image's pixels as uint8
    (:func:`content_indices`). The same picture therefore gets the same corruption in every
    epoch, worker process, loading order and input form (PIL, uint8, float tensor), as from a
    corrupted copy of the dataset on disk (ImageNet-C), and different pictures get independent
    draws; a per-call counter would instead depend on the worker count and the order. (For fresh
    draws every epoch, as a training augmentation, set ``t.seed`` to the epoch.) The engine
    seeds by dataset index: to get its pixels for example ``i``, pass the index, ``t(image,
    index=i)`` (e.g. in a Dataset's ``__getitem__``), which is ``shiftbench.corrupt(image, name,
    severity, seed=seed, index=i)``. Deterministic shifts (``contrast``, ``pixelate``, ...) need
    no index: they give the engine's pixels either way.

    Examples
    --------
    >>> import torch
    >>> from torchvision import transforms as T
    >>> from shiftbench import corrupt
    >>> from shiftbench.transforms import Corrupt
    >>> fog = Corrupt("fog", severity=2)
    >>> fog
    Corrupt(name='fog', severity=2, seed=0)
    >>> pipeline = T.Compose([T.CenterCrop(64), fog, T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
    >>> x = torch.rand(3, 80, 80, generator=torch.Generator().manual_seed(0))
    >>> pipeline(x).shape
    torch.Size([3, 64, 64])
    >>> crop = T.CenterCrop(64)(x)
    >>> bool(torch.equal(fog(crop), fog(crop.clone())))             # the same picture, the same fog
    True
    >>> bool(torch.equal(fog(crop, index=5), corrupt(crop, "fog", 2, index=5)))   # the engine's example 5
    True
    """

    def __init__(self, name: str, severity: int | None = 3, seed: int = 0) -> None:
        # checked now, so a wrong name fails where the pipeline is built; the shift itself is looked
        # up per call (a cheap factory), which keeps the transform plain data, picklable for workers
        self.name, self.severity, self.seed = name, corruption(name, severity).severity, check_seed(seed)

    def __call__(self, image: Any, index: int | Sequence[int] | None = None) -> Any:
        """``image`` corrupted; ``index``: the dataset index (or one per image of a batch) whose
        engine pixels to reproduce; ``None``: the content index (see the class docstring)."""
        shift = corruption(self.name, self.severity)
        batch = as_batch(image)
        n = batch.x.shape[0]
        if index is not None:
            indices = example_indices(index, n)
        else:
            indices = content_indices(batch.x) if shift.random else [0] * n
        return batch.restore(apply_shift(shift, batch.x, indices, self.seed))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, severity={self.severity!r}, seed={self.seed!r})"


def content_indices(x: Any) -> list[int]:
    """One 63-bit index per image of a ``(N, 3, H, W)`` batch in [0, 1]: blake2b of its size and of
    its pixels rounded to uint8 (channels first), so a PIL image, its uint8 array and its float
    tensor ``u8 / 255`` get the same index."""
    u8 = to_uint8(x.detach()).cpu()
    out = []
    for image in u8:
        h = hashlib.blake2b(f"{image.shape[-2]}x{image.shape[-1]}|".encode(), digest_size=8)
        h.update(image.contiguous().numpy().tobytes())
        out.append(int.from_bytes(h.digest(), "little") & ((1 << 63) - 1))
    return out
