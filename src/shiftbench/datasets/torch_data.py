"""torch data in: a ``Dataset`` or ``DataLoader`` yielding ``(image, label)``, turned once, at the
boundary, into an :class:`ImageDataset` whose identity is its content.

What is read
    A map-style ``Dataset``: ``dataset[i]`` for ``i`` in ``range(len(dataset))``; an
    ``IterableDataset``: what it yields, in order. A ``DataLoader``: its ``.dataset``, read the
    same way - one example at a time, in dataset order. The loader's batch size, ``shuffle``,
    ``collate_fn`` and workers are not used (the engine batches and decodes itself, and a
    shuffled order would change the identity of every run); a ``SubsetRandomSampler`` selects
    its indices (in sorted order); any other sampler that is not the plain sequential or random
    one over every example (weighted, with replacement, a custom batch sampler) is a
    :class:`ConfigError`: pass a ``torch.utils.data.Subset`` instead. The dataset's own
    ``transform`` is applied (it is part of ``dataset[i]``): give images as they are, the model's
    resize, crop and normalisation are applied by shiftbench. A random transform is noticed when
    an example is read again (below) and makes that example skipped.

Images
    A PIL image in any mode (converted to RGB as a folder's images are: palette, alpha, greyscale,
    16-bit, ...); a ``uint8`` tensor ``(C, H, W)`` or ``(H, W)``, or a ``uint8`` array
    ``(H, W, C)``/``(H, W)``, with 1, 3 or 4 channels (grey replicated, alpha dropped); a float
    tensor or array with values in [0, 1] (``ToTensor()``'s output), rounded to uint8 as a PNG
    of it would be. Sizes may differ between examples (the model's resize makes them equal).
    A normalised image (values outside [0, 1]) is a :class:`DataError`: drop ``Normalize`` from
    the dataset's transform, the model's ``mean``/``std`` are applied inside its wrapper.

Labels
    One integer class index per example (a Python or numpy int, a one-element integer tensor),
    ``>= 0``. When the dataset declares its classes (a ``classes`` list, as ``ImageFolder`` and
    torchvision's CIFAR have, also under a ``Subset``), labels index them and the model must have
    that many outputs; otherwise labels index the model's outputs (:meth:`TorchImageDataset.for_outputs`),
    and a label at or beyond the model's width is a :class:`DataError` naming the example.

Identity
    Every example is decoded once here, to uint8 RGB, and hashed (blake2b of its size, label and
    pixels); the dataset's identity (:attr:`TorchImageDataset.content`, part of every results
    key) is the sha256 of those hashes in order - the full content, not a sample, so a changed
    pixel or label is never served from the cache. The decoded pixels are kept in memory (decode
    once, shift many) up to :data:`MAX_HELD_BYTES`; past that, a map-style dataset is read again
    by index when evaluated, and each example checked against its hash.

Each bad item is a one-line error naming its index and what was expected; an empty dataset is a
:class:`DataError` too.
"""
from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from shiftbench.datasets.base import ImageDataset, ImageDecodeError, to_rgb
from shiftbench.errors import ConfigError, DataError

#: the dataset name of every setting over in-memory torch data (settings carry its content hash)
TORCH_DATASET = "torch"
#: decoded pixels held in memory at most (beyond: re-read by index when evaluated, map-style only)
MAX_HELD_BYTES = 2 << 30
#: slack on the [0, 1] range of float images (float32 rounding of ``u8 / 255``)
FLOAT_TOLERANCE = 1e-4
ACCEPTED_DATA = ("a setting name ('cifar10', 'folder:DIR', ...), a torch Dataset or DataLoader yielding (image, label), "
                 "a dict {name: Dataset or DataLoader} or a list of these")


class LabelRangeError(DataError):
    """A label of in-memory data at or beyond a model's output width (that model fails, the others run)."""


@dataclass
class TorchImageDataset(ImageDataset):
    """Examples read from a torch ``Dataset``: decoded uint8 RGB pixels held in memory (or the
    ``source`` to read again by index), their per-example digests, and the content hash."""

    images: list[np.ndarray] | None = None
    source: Any = None
    positions: list[int] = field(default_factory=list)
    digests: list[bytes] = field(default_factory=list)
    content: str = ""
    declared_classes: bool = False

    def load(self, i: int) -> Image.Image:
        if self.images is not None:
            return Image.fromarray(self.images[i])
        try:
            arr, label = _example(self.source[self.positions[i]], self.positions[i], self.name)
        except (DataError, ConfigError) as exc:
            raise ImageDecodeError(self.ids[i], str(exc)) from exc
        if _digest(arr, label) != self.digests[i]:
            raise ImageDecodeError(self.ids[i], "differs from when it was first read (a random transform in the "
                                                "dataset?); make its transform deterministic")
        return Image.fromarray(arr)

    def _replace_examples(self, idx: list[int], **fields: object) -> ImageDataset:
        return replace(self, images=None if self.images is None else [self.images[i] for i in idx],
                       positions=[self.positions[i] for i in idx], digests=[self.digests[i] for i in idx], **fields)

    def for_outputs(self, outputs: int | None, model: str, label_space: str | None = None,
                    class_names: list[str] | None = None, data_name: str | None = None) -> TorchImageDataset:
        """The dataset scored on a model's ``outputs`` logits: labels index them, unless the
        dataset declares its classes (then the model must have as many outputs). A label at or
        beyond ``outputs`` is a :class:`LabelRangeError` naming the first such example (and the
        data as ``data_name``, the name it was given), as is a declared class count the model's
        width differs from."""
        if outputs is None:
            return self
        if self.declared_classes:
            if outputs != self.num_classes:
                shown = ", ".join(repr(c) for c in (self.class_names or [])[:3])
                raise LabelRangeError(f"data {data_name or self.name!r} declares {self.num_classes} classes ({shown}"
                                      f"{', ...' if self.num_classes > 3 else ''}), but model {model!r} has {outputs} "
                                      f"outputs; give a model with {self.num_classes} outputs, or data without a "
                                      "`classes` attribute whose labels index the model's outputs")
            return self
        bad = next((i for i, t in enumerate(self.targets) if t >= outputs), None)
        if bad is not None:
            raise LabelRangeError(f"data {data_name or self.name!r}: item {self.ids[bad]} has label {self.targets[bad]}, but model "
                                  f"{model!r} has {outputs} outputs (labels 0..{outputs - 1} expected); pass data in "
                                  "the model's label space, or a model with as many outputs as the data has classes")
        if outputs == self.num_classes and label_space is None:
            return self
        return replace(self, num_classes=outputs, label_space=label_space or f"{outputs}-classes",
                       class_names=class_names if class_names is not None and len(class_names) == outputs else None)


def is_torch_data(obj: Any) -> bool:
    """``obj`` is a torch ``Dataset`` or ``DataLoader`` (torch is only looked at if loaded)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    data = torch.utils.data
    return isinstance(obj, data.Dataset | data.DataLoader)


def default_name(data: Any) -> str:
    """``ImageFolder-val`` for a dataset with a ``root`` folder, else its class name
    (``TensorDataset``); a DataLoader is named after its dataset."""
    import torch  # deferred: loads torch

    ds = data.dataset if isinstance(data, torch.utils.data.DataLoader) else data
    root = getattr(ds, "root", None)
    name = type(ds).__name__
    if isinstance(root, str | Path) and Path(root).name:
        name += "-" + Path(root).name
    return re.sub(r"[^\w.\-]", "-", name)


def check_name(name: Any) -> str:
    """A data name usable as a setting name: non-empty, without ``+`` or ``@`` (they compose a
    setting with a shift, ``my-val+fog.3``, or a class map) or ``:`` (custom setting prefixes)."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"a data name must be a non-empty string, got {name!r}")
    name = name.strip()
    if any(c in name for c in "+@:"):
        raise ConfigError(f"data name {name!r}: '+', '@' and ':' are taken (they add a shift, 'my-val+fog.3', a class "
                          "map, or a custom setting prefix); choose a name without them")
    return name


def from_torch(data: Any, name: str, *, max_bytes: int | None = None) -> TorchImageDataset:
    """Read ``data`` (a torch ``Dataset`` or ``DataLoader``) once into a :class:`TorchImageDataset`
    named ``name`` (see the module docstring)."""
    import torch  # deferred: loads torch

    limit = MAX_HELD_BYTES if max_bytes is None else max_bytes
    source, positions = _source(data, name)
    mapped = not isinstance(source, torch.utils.data.IterableDataset)
    classes = _declared_classes(source)
    images: list[np.ndarray] | None = []
    digests: list[bytes] = []
    targets: list[int] = []
    seen: list[int] = []
    held = 0
    for pos, item in _read(source, positions, name):
        arr, label = _example(item, pos, name)
        if classes is not None and label >= len(classes):
            raise DataError(f"data {name!r}: item {pos} has label {label}, but the dataset declares {len(classes)} "
                            f"classes (labels 0..{len(classes) - 1} expected)")
        digests.append(_digest(arr, label))
        targets.append(label)
        seen.append(pos)
        if images is not None:
            images.append(arr)
            held += arr.nbytes
            if held > limit:
                if not mapped:
                    raise DataError(f"data {name!r}: more than {limit / 2**30:.1f} GiB of decoded pixels from an "
                                    "IterableDataset, which cannot be read again by index; pass a map-style Dataset, "
                                    "or evaluate the images from disk (folder:DIR or manifest:FILE)")
                images = None       # read again by index when evaluated
    if not targets:
        raise DataError(f"data {name!r} is empty: expected at least one (image, label) item")
    content = hashlib.sha256(b"".join(digests)).hexdigest()
    n_classes = len(classes) if classes is not None else max(targets) + 1
    return TorchImageDataset(
        name=f"{TORCH_DATASET}:{content[:16]}", ids=[str(p) for p in seen], targets=targets,
        label_space=f"{n_classes}-classes", num_classes=n_classes,
        class_names=[str(c) for c in classes] if classes is not None else None,
        images=images, source=None if images is not None else source, positions=seen, digests=digests,
        content=content, declared_classes=classes is not None,
        notes=() if images is not None else (f"data {name!r}: more than {limit / 2**30:.1f} GiB of decoded pixels; "
                                             "its examples are read again from the dataset when evaluated",))


# ---------------------------------------------------------------------------- reading
def _source(data: Any, name: str) -> tuple[Any, list[int] | None]:
    """The dataset to read and the indices to read (``None``: all, in order)."""
    import torch  # deferred: loads torch

    tud = torch.utils.data
    if not isinstance(data, tud.DataLoader):
        if not isinstance(data, tud.IterableDataset) and not hasattr(type(data), "__len__"):
            raise ConfigError(f"data {name!r}: a map-style {type(data).__name__} needs __len__ (or make it an "
                              "IterableDataset)")
        return data, None
    ds = data.dataset
    if isinstance(ds, tud.IterableDataset):
        return ds, None
    batches = data.batch_sampler
    if batches is not None and type(batches) is not tud.BatchSampler:
        raise ConfigError(f"data {name!r}: a DataLoader with a custom batch_sampler ({type(batches).__name__}) is not "
                          "read; pass its dataset, or a torch.utils.data.Subset of the examples to evaluate")
    sampler = data.sampler
    if type(sampler) is tud.SequentialSampler:
        return ds, None
    if type(sampler) is tud.RandomSampler and not sampler.replacement and sampler.num_samples == len(ds):
        return ds, None     # shuffle=True: every example once; read in dataset order
    if type(sampler) is tud.SubsetRandomSampler:
        return ds, sorted(int(i) for i in sampler.indices)
    raise ConfigError(f"data {name!r}: a DataLoader whose sampler is a {type(sampler).__name__} does not give each "
                      "example once; pass its dataset, or a torch.utils.data.Subset of the examples to evaluate")


def _read(source: Any, positions: list[int] | None, name: str) -> Iterator[tuple[int, Any]]:
    import torch  # deferred: loads torch

    if isinstance(source, torch.utils.data.IterableDataset):
        yield from enumerate(source)
        return
    for pos in range(len(source)) if positions is None else positions:
        try:
            item = source[pos]
        except Exception as exc:  # noqa: BLE001 - whatever the user's __getitem__ raises, named in one line
            why = " ".join(str(exc).split())[:300] or "no message"
            raise DataError(f"data {name!r}: reading item {pos} of {len(source)} failed "
                            f"({type(exc).__name__}: {why})") from exc
        yield pos, item


def _declared_classes(ds: Any) -> list[Any] | None:
    """The ``classes`` list of ``ds`` or of the dataset a ``Subset`` wraps, if any."""
    for _ in range(8):
        classes = getattr(ds, "classes", None)
        if isinstance(classes, list | tuple) and classes:
            return list(classes)
        ds = getattr(ds, "dataset", None)
        if ds is None:
            return None
    return None


def _describe(item: Any) -> str:
    if isinstance(item, tuple | list):
        return f"a {type(item).__name__} of {len(item)}"
    if isinstance(item, dict):
        return f"a dict with keys {sorted(map(str, item))[:5]}"
    return f"a {type(item).__name__}"


def _example(item: Any, pos: int, name: str) -> tuple[np.ndarray, int]:
    """``(uint8 RGB (H, W, 3) array, label)`` of one item, or a one-line DataError naming it."""
    if not isinstance(item, tuple | list) or len(item) != 2:
        raise DataError(f"data {name!r}: item {pos} is {_describe(item)}; expected an (image, label) pair")
    return _image(item[0], pos, name), _label(item[1], pos, name)


def _label(y: Any, pos: int, name: str) -> int:
    value = y
    if hasattr(y, "numel") and hasattr(y, "dtype"):  # a torch tensor
        if y.numel() != 1 or y.dtype.is_floating_point or y.dtype.is_complex:
            value = None
        else:
            value = int(y.reshape(-1)[0].item())
    elif isinstance(y, np.ndarray):
        value = int(y.reshape(-1)[0]) if y.size == 1 and np.issubdtype(y.dtype, np.integer) else None
    elif isinstance(y, np.integer):
        value = int(y)
    elif isinstance(y, bool) or not isinstance(y, int):
        value = None
    if value is None or value < 0:
        shown = repr(y) if len(repr(y)) < 60 else f"a {type(y).__name__}"
        raise DataError(f"data {name!r}: item {pos} has label {shown}; expected one class index (an int >= 0)")
    return int(value)


def _image(x: Any, pos: int, name: str) -> np.ndarray:
    """One image as uint8 RGB ``(H, W, 3)``."""
    where = f"data {name!r}: item {pos}"
    if isinstance(x, Image.Image):
        try:
            return np.asarray(to_rgb(x, f"item {pos}"))
        except Exception as exc:  # noqa: BLE001 - a PIL image that cannot become RGB
            raise DataError(f"{where}: its {x.mode} image cannot be converted to RGB ({type(exc).__name__}: "
                            f"{exc})") from exc
    if hasattr(x, "detach") and hasattr(x, "numpy"):  # a torch tensor: channels first
        t = x.detach().cpu()
        arr = t.float().numpy() if str(t.dtype) == "torch.bfloat16" else t.numpy()
        channels_first = True
    elif isinstance(x, np.ndarray):
        arr, channels_first = x, False
    else:
        raise DataError(f"{where}: its image is a {type(x).__name__}; expected a PIL image, a uint8 or [0, 1] float "
                        "tensor (C, H, W) or a uint8 array (H, W, C)")
    shape = tuple(arr.shape)
    if arr.ndim == 3 and channels_first and shape[0] in (1, 3, 4):
        arr = np.moveaxis(arr, 0, -1)
    elif arr.ndim == 3 and not channels_first and shape[-1] not in (1, 3, 4) and shape[0] in (1, 3, 4):
        arr = np.moveaxis(arr, 0, -1)
    if arr.ndim == 2:
        arr = arr[..., None]
    layout = "(C, H, W)" if channels_first else "(H, W, C)"
    if arr.ndim != 3 or arr.shape[-1] not in (1, 3, 4) or min(arr.shape[:2]) < 1:
        raise DataError(f"{where}: its image has shape {shape}; expected {layout} with 1, 3 or 4 channels, or (H, W)")
    if arr.dtype == np.uint8:
        u8 = arr
    elif np.issubdtype(arr.dtype, np.floating):
        if not np.isfinite(arr).all():
            raise DataError(f"{where}: its float image has NaN or infinite values; expected values in [0, 1]")
        lo, hi = float(arr.min()), float(arr.max())
        if lo < -FLOAT_TOLERANCE or hi > 1 + FLOAT_TOLERANCE:
            raise DataError(f"{where}: its float image has values in [{lo:.3g}, {hi:.3g}]; expected [0, 1] "
                            "(drop Normalize from the dataset's transform: the model's mean/std are applied by "
                            "shiftbench)")
        u8 = np.rint(np.clip(arr, 0.0, 1.0) * 255.0).astype(np.uint8)
    else:
        raise DataError(f"{where}: its image has dtype {arr.dtype}; expected uint8 (0-255) or float in [0, 1]")
    if u8.shape[-1] == 1:
        u8 = np.repeat(u8, 3, axis=-1)
    elif u8.shape[-1] == 4:
        u8 = u8[..., :3]        # alpha dropped, the colour under it kept (as to_rgb does)
    return np.ascontiguousarray(u8)


def _digest(arr: np.ndarray, label: int) -> bytes:
    h = hashlib.blake2b(f"{arr.shape[0]}x{arr.shape[1]}|{label}|".encode(), digest_size=16)
    h.update(arr.tobytes())
    return h.digest()
