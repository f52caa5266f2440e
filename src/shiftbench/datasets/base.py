"""What the engine needs from a dataset: ids, targets, and a safe way to load each image.

An :class:`ImageDataset` is a fixed, ordered list of examples. Example ``i`` has a stable id
(``ids[i]``, e.g. its path relative to the dataset root, used as the key in the results store),
a target (``targets[i]``: one class index, or a tuple of acceptable indices for multi-label
sets such as the video frames) in the dataset's ``label_space``, and optionally a group and an
offset (video pm-sets: the anchor frame and the signed frame distance to it). ``load(i)``
returns an RGB :class:`PIL.Image.Image` with EXIF orientation applied, or raises
:class:`ImageDecodeError` naming the file and the reason; the runner counts and lists such
examples as skipped instead of crashing.

Subclasses differ only in where pixels come from: files on disk (:class:`FileDataset`),
arrays in memory (:class:`ArrayDataset`) or a Hugging Face ``datasets`` dataset.
"""
from __future__ import annotations

import io
import os
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO

import numpy as np
from PIL import Image, ImageFile, ImageOps

from shiftbench.errors import DataError

Target = int | tuple[int, ...]

#: The image formats a dataset may hold (Pillow format ids): those of the folder layouts
#: extensions (:data:`shiftbench.datasets.IMG_EXTENSIONS`; PPM also reads PGM, JPEG also the MPO
#: files of some cameras) plus GIF. Nothing else is decoded, whatever a file's name says: Pillow's
#: EPS plugin, for one, runs Ghostscript on a PostScript file named ``x.jpg``.
DECODE_FORMATS = ("JPEG", "PNG", "WEBP", "BMP", "GIF", "TIFF", "PPM")

#: Images larger than this many pixels are refused as decompression bombs (PIL's own limit is
#: 89 M pixels with a warning; the largest ImageNet-family images are far below 40 M).
MAX_PIXELS = 40_000_000


class ImageDecodeError(DataError):
    """One example's image cannot be decoded; the runner skips it and lists it."""

    def __init__(self, example_id: str, reason: str) -> None:
        super().__init__(f"{example_id}: {reason}")
        self.example_id = example_id
        self.reason = reason


def text_name(name: str) -> str:
    """``name`` (a file name as :func:`os.fsdecode` gives it) as text any store can hold: each byte
    that is not valid UTF-8 (a surrogate escape) written ``\\xNN``; valid names are unchanged.

    >>> text_name(os.fsdecode(b"caf\\xe9.png"))
    'caf\\\\xe9.png'
    >>> text_name("café.png")
    'café.png'
    """
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        pass
    try:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no file system decoding gives: written \\udNNN
        return name.encode("utf-8", "backslashreplace").decode("utf-8")


def to_rgb(img: Image.Image, example_id: str) -> Image.Image:
    """Normalise any decoded PIL image to 8-bit RGB.

    EXIF orientation is applied (width and height swap for a rotated photo); palette, LA and
    RGBA images lose their alpha channel the way torchvision's loader does (``convert("RGB")``
    keeps the colour under transparent pixels), so numbers match the published testbed;
    CMYK, greyscale, 1-bit and YCbCr images are converted; 16-bit images (``I;16*``) are scaled
    by 255/65535, 32-bit integer images by their range, float images from [0, 1] or [0, 255].
    """
    img = ImageOps.exif_transpose(img)
    if img.mode.startswith("I;16"):
        arr = np.asarray(img, dtype=np.float64)
        img = Image.fromarray(np.clip(arr / 65535.0 * 255.0 + 0.5, 0, 255).astype(np.uint8))
    elif img.mode == "I":
        arr = np.asarray(img, dtype=np.float64)
        hi = float(arr.max()) if arr.size else 0.0
        img = Image.fromarray(np.clip(arr / (65535.0 if hi > 255 else 255.0) * 255.0, 0, 255).astype(np.uint8))
    if img.mode == "F":
        arr = np.asarray(img, dtype=np.float64)
        img = Image.fromarray(np.clip(arr * (255.0 if arr.size and arr.max() <= 1.0 else 1.0), 0, 255).astype(np.uint8))
    if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
        img = img.convert("RGBA").convert("RGB")
    elif img.mode != "RGB":
        img = img.convert("RGB")
    return img


ImageSource = Path | str | bytes | BinaryIO


def decode_image(source: ImageSource, example_id: str, crop: int = 0) -> Image.Image:
    """Decode one image (a file path, encoded bytes or a binary file object) safely.

    Returns an RGB image (see :func:`to_rgb`), or raises :class:`ImageDecodeError` naming
    ``example_id`` for: an empty file, a truncated or otherwise undecodable file, and an image
    whose header claims more than :data:`MAX_PIXELS` pixels (a decompression bomb, refused from
    the header alone, before any pixel is decoded). Any exception a PIL plugin raises on a
    malformed file becomes an :class:`ImageDecodeError`, so one bad file never stops a run.
    A file in a format outside :data:`DECODE_FORMATS` (PostScript, PDF, ...) is undecodable too:
    no other Pillow plugin ever sees it. ``crop`` pixels are removed from every side afterwards
    (ObjectNet's 2 px border).
    """
    try:
        if isinstance(source, bytes | bytearray):
            if not source:
                raise ImageDecodeError(example_id, "empty image (0 bytes)")
            source = io.BytesIO(source)
        elif isinstance(source, str | Path) and Path(source).stat().st_size == 0:
            raise ImageDecodeError(example_id, "empty file (0 bytes)")
        with warnings.catch_warnings():
            # PIL warns above its own 89 M-pixel limit; the explicit check below is stricter.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(source, formats=DECODE_FORMATS) as raw:
                w, h = raw.size
                if w * h > MAX_PIXELS:
                    raise ImageDecodeError(example_id, _bomb_reason(f"{w}x{h} pixels"))
                raw.load()
                img = to_rgb(raw, example_id)
    except ImageDecodeError:
        raise
    except Image.DecompressionBombError as exc:
        n = re.search(r"(\d+) pixels", str(exc))
        raise ImageDecodeError(example_id, _bomb_reason(f"{int(n.group(1)):,} pixels" if n else "the image")) from exc
    except FileNotFoundError as exc:
        raise ImageDecodeError(example_id, f"file not found: {exc.filename}") from exc
    except Image.UnidentifiedImageError as exc:
        raise ImageDecodeError(example_id, "cannot decode (not an image in a supported format: "
                                           f"{', '.join(DECODE_FORMATS)})") from exc
    except Exception as exc:  # noqa: BLE001 - PIL plugins raise many types on malformed files
        raise ImageDecodeError(example_id, f"cannot decode ({type(exc).__name__}: {exc})") from exc
    if crop:
        w, h = img.size
        if w <= 2 * crop or h <= 2 * crop:
            raise ImageDecodeError(example_id, f"{w}x{h} image too small for a {crop}px border crop")
        img = img.crop((crop, crop, w - crop, h - crop))
    return img


def _bomb_reason(size: str) -> str:
    return f"{size} exceeds the {MAX_PIXELS:,}-pixel limit (possible decompression bomb)"


def open_image(path: Path, example_id: str, crop: int = 0) -> Image.Image:
    """Decode one image file safely (see :func:`decode_image`); ``crop`` pixels are removed
    from every side afterwards (ObjectNet's 2 px red border)."""
    return decode_image(Path(path), example_id, crop)


ImageFile.LOAD_TRUNCATED_IMAGES = False  # a truncated file is an error, not a silently grey image


@dataclass
class ImageDataset:
    """Base class: the example list; subclasses implement :meth:`load`.

    ``skipped_on_scan`` lists ``(id, reason)`` for entries the layout scan met but could not
    make an example of (a non-image file in a class folder, an image with no label in the
    labels file, an unexpected folder); bad *images* are never dropped at scan time, they fail
    in :meth:`load` with :class:`ImageDecodeError`.
    """

    name: str
    ids: list[str]
    targets: list[Target]
    label_space: str
    num_classes: int
    class_names: list[str] | None = None
    groups: list[str] | None = None
    offsets: list[int] | None = None
    root: Path | None = None
    skipped_on_scan: list[tuple[str, str]] = field(default_factory=list)
    #: targets are label *sets* (tuples): the runner also stores every class's score per
    #: example, so mAP (:func:`shiftbench.mean_average_precision`) is computed after the fact
    multi_label: bool = False
    #: sentences about how the data was read (printed by ``shiftbench eval``, kept in each result)
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.targets):
            raise DataError(f"dataset {self.name!r}: {len(self.ids)} ids but {len(self.targets)} targets")

    def __len__(self) -> int:
        return len(self.ids)

    def load(self, i: int) -> Image.Image:  # pragma: no cover - abstract
        raise NotImplementedError

    def load_many(self, indices: Sequence[int]) -> list[Image.Image | ImageDecodeError]:
        """The images at ``indices``, in order, each undecodable one as its
        :class:`ImageDecodeError` (returned in its place, not raised). One :meth:`load` after the
        other here; a dataset that can fetch many at once (a folder in a bucket: one concurrent
        request for a batch) overrides it. The engine's loader asks for a batch at a time."""
        out: list[Image.Image | ImageDecodeError] = []
        for i in indices:
            try:
                out.append(self.load(i))
            except ImageDecodeError as exc:
                out.append(exc)
        return out

    def subset(self, indices: Sequence[int]) -> ImageDataset:
        """The examples at ``indices``, in that order (ids stay the same)."""
        idx = list(indices)
        pick = lambda xs: None if xs is None else [xs[i] for i in idx]  # noqa: E731
        return self._replace_examples(idx, ids=pick(self.ids), targets=pick(self.targets),
                                      groups=pick(self.groups), offsets=pick(self.offsets))

    def _replace_examples(self, idx: list[int], **fields: object) -> ImageDataset:
        return replace(self, **fields)


@dataclass
class FileDataset(ImageDataset):
    """Images stored as files; ``paths[i]`` is the file of example ``i``."""

    paths: list[Path] = field(default_factory=list)
    crop: int = 0

    def load(self, i: int) -> Image.Image:
        return open_image(self.paths[i], self.ids[i], self.crop)

    def _replace_examples(self, idx: list[int], **fields: object) -> ImageDataset:
        return replace(self, paths=[self.paths[i] for i in idx], **fields)


@dataclass
class ArrayDataset(ImageDataset):
    """Images held in memory as a uint8 array ``(N, H, W[, C])``."""

    images: np.ndarray = field(default_factory=lambda: np.zeros((0, 1, 1, 3), np.uint8))

    def load(self, i: int) -> Image.Image:
        arr = self.images[i]
        if arr.ndim == 3 and arr.shape[0] in (1, 3) and arr.shape[-1] not in (1, 3):
            arr = np.transpose(arr, (1, 2, 0))  # CHW -> HWC
        if arr.ndim == 3 and arr.shape[-1] == 1:
            arr = arr[..., 0]
        try:
            return to_rgb(Image.fromarray(np.ascontiguousarray(arr)), self.ids[i])
        except Exception as exc:  # noqa: BLE001 - an unusable array is one skipped example
            raise ImageDecodeError(self.ids[i], f"cannot convert array of shape {arr.shape} "
                                                f"and dtype {arr.dtype} ({type(exc).__name__}: {exc})") from exc

    def _replace_examples(self, idx: list[int], **fields: object) -> ImageDataset:
        return replace(self, images=self.images[idx], **fields)
