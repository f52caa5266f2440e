"""A Hugging Face ``datasets`` dataset saved on local disk (``save_to_disk``), read offline.

Images are decoded lazily and by shiftbench's own safe decoder (the column is read with
``decode=False``, so a bad image becomes one skipped example, never a crash, and the
decompression-bomb limit applies).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from shiftbench.datasets._scan import LayoutError
from shiftbench.datasets.base import ImageDataset, ImageDecodeError, decode_image, to_rgb
from shiftbench.datasets.registry import register_dataset
from shiftbench.errors import DataError


@dataclass
class HFDataset(ImageDataset):
    """Examples backed by a ``datasets.Dataset``; ``rows[i]`` is example i's row in ``hf``."""

    hf: Any = None
    rows: list[int] = field(default_factory=list)
    image_key: str = "image"

    def load(self, i: int) -> Image.Image:
        try:
            value = self.hf[self.rows[i]][self.image_key]
        except Exception as exc:  # noqa: BLE001 - an unreadable row is one skipped example
            raise ImageDecodeError(self.ids[i], f"cannot read row {self.rows[i]} ({type(exc).__name__}: {exc})") from exc
        return _to_image(value, self.ids[i])

    def _replace_examples(self, idx: list[int], **fields: object) -> ImageDataset:
        return replace(self, rows=[self.rows[i] for i in idx], **fields)


def _to_image(value: Any, example_id: str) -> Image.Image:
    if isinstance(value, dict):  # an Image feature read with decode=False
        if value.get("bytes"):
            return decode_image(value["bytes"], example_id)
        if value.get("path"):
            return decode_image(Path(value["path"]), example_id)
        raise ImageDecodeError(example_id, "image has neither bytes nor path")
    if isinstance(value, Image.Image):
        return to_rgb(value, example_id)
    if isinstance(value, bytes | bytearray):
        return decode_image(bytes(value), example_id)
    try:
        arr = np.asarray(value)
        if arr.dtype != np.uint8:
            arr = np.clip(arr * (255.0 if arr.size and arr.max() <= 1.0 else 1.0), 0, 255).astype(np.uint8)
        if arr.ndim == 3 and arr.shape[-1] == 1:
            arr = arr[..., 0]
        return to_rgb(Image.fromarray(arr), example_id)
    except Exception as exc:  # noqa: BLE001
        raise ImageDecodeError(example_id, f"cannot make an image of {type(value).__name__} ({exc})") from exc


def hf_dataset(path: Path | str, split: str | None = None, image_key: str = "image", label_key: str = "label",
               name: str | None = None) -> HFDataset:
    """A dataset saved with ``datasets.Dataset.save_to_disk`` (or a ``DatasetDict``: give
    ``split``, or it must have exactly one), loaded with ``datasets.load_from_disk`` (no
    network). Labels: a ``ClassLabel`` column gives ``class_names``; plain integers are used
    as they are; strings become indices into their sorted unique values. Ids are zero-padded
    row numbers; ``label_space`` is ``custom:<name>`` (``name`` defaults to the folder name).
    """
    try:
        import datasets as hfds  # deferred: loads Hugging Face datasets, loads pyarrow
    except ImportError as exc:  # pragma: no cover - optional dependency
        raise DataError("reading a Hugging Face dataset needs the 'datasets' package (pip install 'shiftbench[hf]')") from exc
    path = Path(path)
    expected = f"{path}/ (a datasets.save_to_disk folder: dataset_info.json + *.arrow)"
    if not path.is_dir():
        raise LayoutError(name or path.name or "hf", expected, path)
    try:
        loaded = hfds.load_from_disk(str(path))
    except Exception as exc:  # noqa: BLE001 - not a saved dataset
        raise LayoutError(name or path.name, expected, None, f"load_from_disk failed: {type(exc).__name__}: {exc}") from exc
    name = name or path.name
    if isinstance(loaded, hfds.DatasetDict):
        splits = list(loaded)
        if split is None and len(splits) == 1:
            split = splits[0]
        if split not in loaded:
            raise DataError(f"{name}: split {split!r} not in {path} (splits: {', '.join(splits)})")
        loaded = loaded[split]
    elif split is not None:
        raise DataError(f"{name}: {path} holds a single dataset, not splits; drop split={split!r}")
    for key in (image_key, label_key):
        if key not in loaded.column_names:
            raise DataError(f"{name}: no column {key!r} in {path} (columns: {', '.join(loaded.column_names)})")
    if isinstance(loaded.features[image_key], hfds.Image):
        loaded = loaded.cast_column(image_key, hfds.Image(decode=False))
    feature = loaded.features[label_key]
    raw = loaded[label_key]
    raw = list(raw) if not isinstance(raw, list) else raw
    if isinstance(feature, hfds.ClassLabel):
        class_names: list[str] | None = list(feature.names)
        targets = [int(v) for v in raw]
    elif raw and all(isinstance(v, str) for v in raw):
        class_names = sorted(set(raw))
        index = {n: i for i, n in enumerate(class_names)}
        targets = [index[v] for v in raw]
    else:
        bad = next((r for r, v in enumerate(raw) if not isinstance(v, int | np.integer) or v < 0), None)
        if bad is not None:
            raise DataError(f"{name}: label {raw[bad]!r} in row {bad} is not a class index or name")
        class_names, targets = None, [int(v) for v in raw]
    k = len(class_names) if class_names is not None else (max(targets) + 1 if targets else 0)
    n = len(loaded)
    width = max(5, len(str(n - 1)))
    return HFDataset(name=name, ids=[f"{i:0{width}d}" for i in range(n)], targets=targets,
                     label_space=f"custom:{name}", num_classes=k, class_names=class_names, root=path,
                     hf=loaded, rows=list(range(n)), image_key=image_key)


@register_dataset("hf", default_dir=None, label_space="custom:<name>",
                  layout="<dir> saved by datasets.save_to_disk (columns image, label)")
def _hf_entry(path: Path | str, **kwargs) -> HFDataset:
    return hf_dataset(path, **kwargs)
