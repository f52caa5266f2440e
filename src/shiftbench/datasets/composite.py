"""Composite datasets in the style of SI-SCORE: one factor of variation at a time.

SI-SCORE (Djolonga et al. 2021, "On Robustness and Transferability of Convolutional Neural
Networks", §4) pastes segmented foreground objects onto background photographs while
controlling the object's **size** (fraction of the image area), **location** (the object's
centre on a grid) and **rotation** (e.g. 18 angles), and reports accuracy per factor value.
:class:`CompositeDataset` is that construction for objects and backgrounds you bring: example
``i`` is one element of the cross product ::

    foregrounds x backgrounds x sizes x locations x rotations

(foreground slowest, rotation fastest), composed lazily in :meth:`CompositeDataset.load` and
labelled with the foreground's class id. Hold a factor fixed by giving one value (SI-SCORE's
three sub-datasets are three such products). Composition of one example (the pixel functions
of :mod:`shiftbench.shifts.compositing`):

1. the background is resized (shorter side) and centre-cropped to ``image_size`` squared;
2. the foreground is cut to the bounding box of its alpha (an RGBA image, or an RGB image
   and a mask used as alpha) and scaled so its *object area* (the sum of alpha) is
   ``size * image_size**2`` (rotation does not change it);
3. it is rotated by ``rotation`` degrees counter-clockwise about its centre (bicubic, the
   canvas grows to hold it), and alpha-composited with its centre at
   ``(x * image_size, y * image_size)``; parts outside the image are cut off.

The model's own preprocessing then applies (a centre crop can cut objects near the border;
evaluate with ``crop_pct = 1`` preprocessing to see the whole canvas). A dataset is built in
Python (:func:`composite_dataset`) or from a JSON/YAML spec file (:func:`composite_from_spec`,
the dataset ``composite`` with ``path=<spec>`` once :func:`register_composite_dataset` has
run). Evaluating a model on it and reducing the results to accuracy per factor value
(:func:`~shiftbench.studies.compositing.factor_accuracy`, the location heatmap) is the study
:mod:`shiftbench.studies.compositing`::

    ds = composite_dataset(foregrounds, backgrounds, sizes=(0.1, 0.2), locations=location_grid(5))
    res = shiftbench.evaluate(model, composite_setting(ds), store=store)
    preds = Store(store).read_predictions(res.key[0])
    factor_accuracy(preds, ds)["size"], location_heatmap(preds, ds)
"""
from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from PIL import Image, ImageOps

from shiftbench.datasets.base import DECODE_FORMATS, MAX_PIXELS, ImageDataset, ImageDecodeError, decode_image
from shiftbench.datasets.registry import register_dataset
from shiftbench.errors import ConfigError, DataError
from shiftbench.shifts.compositing import cut_to_alpha, fit_background, object_size, paste_object

ImageLike = str | Path | Image.Image | np.ndarray
FACTORS = ("size", "location", "rotation", "foreground", "background")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff", ".gif")
_CACHE_SIZE = 64


@dataclass(frozen=True)
class Foreground:
    """A segmented object: an RGBA image, or an RGB image and a ``mask`` (used as alpha, 0-255)."""

    image: Any
    class_id: int
    mask: Any = None
    name: str | None = None


def location_grid(n: int, margin: float = 0.1) -> tuple[tuple[float, float], ...]:
    """An ``n x n`` grid of object centres ``(x, y)`` in ``[margin, 1 - margin]`` (row-major in y).

    >>> location_grid(2, margin=0.25)
    ((0.25, 0.25), (0.75, 0.25), (0.25, 0.75), (0.75, 0.75))
    """
    if n < 1 or not 0 <= margin < 0.5:
        raise ConfigError(f"location_grid: need n >= 1 and 0 <= margin < 0.5, got n={n!r}, margin={margin!r}")
    ticks = [0.5] if n == 1 else [round(float(v), 6) for v in np.linspace(margin, 1 - margin, n)]
    return tuple((x, y) for y in ticks for x in ticks)


def rotation_angles(n: int = 18) -> tuple[float, ...]:
    """``n`` evenly spaced angles in degrees from 0 (SI-SCORE uses 18: 0, 20, ..., 340).

    >>> rotation_angles(4)
    (0.0, 90.0, 180.0, 270.0)
    """
    if n < 1:
        raise ConfigError(f"rotation_angles: n must be >= 1, got {n!r}")
    return tuple(round(360.0 * k / n, 6) for k in range(n))


# ---------------------------------------------------------------------------- the dataset
@dataclass
class CompositeDataset(ImageDataset):
    """Foregrounds pasted onto backgrounds (module docstring); build with :func:`composite_dataset`.

    ``flat[i]`` is example ``i``'s position in the full cross product (so :meth:`subset` keeps
    working); :attr:`factors` is the per-example factor table.
    """

    foregrounds: list[Foreground] = field(default_factory=list)
    foreground_names: list[str] = field(default_factory=list)
    backgrounds: list[Any] = field(default_factory=list)
    background_names: list[str] = field(default_factory=list)
    sizes: tuple[float, ...] = (0.2,)
    locations: tuple[tuple[float, float], ...] = ((0.5, 0.5),)
    rotations: tuple[float, ...] = (0.0,)
    image_size: int = 224
    flat: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def shape(self) -> tuple[int, int, int, int, int]:
        """``(foregrounds, backgrounds, sizes, locations, rotations)``: the cross product's axes."""
        return (len(self.foregrounds), len(self.backgrounds), len(self.sizes), len(self.locations),
                len(self.rotations))

    def factor_indices(self, i: int) -> tuple[int, int, int, int, int]:
        return tuple(int(v) for v in np.unravel_index(int(self.flat[i]), self.shape))  # type: ignore[return-value]

    @property
    def factors(self) -> pd.DataFrame:
        """One row per example: ``id, foreground, background, class_id, size, x, y, rotation``."""
        f, b, s, l, r = np.unravel_index(self.flat, self.shape) if len(self.flat) else [np.zeros(0, int)] * 5
        loc = np.asarray(self.locations, dtype=float).reshape(-1, 2)
        return pd.DataFrame({
            "id": self.ids,
            "foreground": np.asarray(self.foreground_names, dtype=object)[f],
            "background": np.asarray(self.background_names, dtype=object)[b],
            "class_id": np.asarray([fg.class_id for fg in self.foregrounds], dtype=np.int64)[f],
            "size": np.asarray(self.sizes, dtype=float)[s],
            "x": loc[l, 0], "y": loc[l, 1],
            "rotation": np.asarray(self.rotations, dtype=float)[r],
        })

    def load(self, i: int) -> Image.Image:
        f, b, s, l, r = self.factor_indices(i)
        canvas = self._background(b)
        obj, area = self._foreground(f)
        w, h = object_size(obj, area, self.sizes[s], self.image_size)
        if w * h > MAX_PIXELS:
            raise ImageDecodeError(self.ids[i], f"foreground scaled to {w}x{h} pixels; use a larger object "
                                                "in the source image or a smaller size")
        return paste_object(canvas, obj, width=w, height=h, location=self.locations[l], rotation=self.rotations[r])

    # -- cached decoding (per process; DataLoader workers each hold their own)
    def _cached(self, key: tuple[str, int], make: Any) -> Any:
        if key not in self._cache:
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = make()
        return self._cache[key]

    def _background(self, b: int) -> Image.Image:
        def make() -> Image.Image:
            img = _open(self.backgrounds[b], f"background {self.background_names[b]}", "RGB")
            return fit_background(img, self.image_size)
        return self._cached(("bg", b), make)

    def _foreground(self, f: int) -> tuple[Image.Image, float]:
        def make() -> tuple[Image.Image, float]:
            fg, what = self.foregrounds[f], f"foreground {self.foreground_names[f]}"
            if fg.mask is None:
                rgba = _open(fg.image, what, "RGBA")
            else:
                rgb = _open(fg.image, what, "RGB")
                mask = _open(fg.mask, f"{what} (mask)", "L")
                if mask.size != rgb.size:
                    raise ImageDecodeError(what, f"mask is {mask.width}x{mask.height} but the image is "
                                                 f"{rgb.width}x{rgb.height}")
                rgba = rgb.convert("RGBA")
                rgba.putalpha(mask)
            cut = cut_to_alpha(rgba)
            if cut is None:
                raise ImageDecodeError(what, "its alpha/mask is empty (fully transparent): no object to paste")
            return cut
        return self._cached(("fg", f), make)

    def _replace_examples(self, idx: list[int], **fields: object) -> ImageDataset:
        return replace(self, flat=self.flat[idx], **fields)


def _open(source: Any, what: str, mode: str) -> Image.Image:
    """A PIL image in ``mode`` from a path, a PIL image or a uint8 array; ImageDecodeError if not."""
    if isinstance(source, Image.Image):
        img = source
    elif isinstance(source, np.ndarray):
        try:
            img = Image.fromarray(np.ascontiguousarray(source))
        except Exception as exc:  # noqa: BLE001
            raise ImageDecodeError(what, f"cannot convert array of shape {source.shape} ({exc})") from exc
    elif mode == "RGB":
        return decode_image(Path(source), what)
    else:
        path = Path(source)
        try:
            with Image.open(path, formats=DECODE_FORMATS) as raw:  # never EPS, PDF, ...
                if raw.width * raw.height > MAX_PIXELS:
                    raise ImageDecodeError(what, f"{raw.width}x{raw.height} exceeds {MAX_PIXELS:,} pixels")
                raw.load()
                img = ImageOps.exif_transpose(raw)
                img = img.copy() if img is raw else img
        except ImageDecodeError:
            raise
        except FileNotFoundError as exc:
            raise ImageDecodeError(what, f"file not found: {path}") from exc
        except Exception as exc:  # noqa: BLE001 - PIL raises many types on malformed files
            raise ImageDecodeError(what, f"cannot decode {path} ({type(exc).__name__}: {exc})") from exc
    if mode == "RGBA" and img.mode not in ("RGBA", "LA", "PA") and "transparency" not in img.info:
        raise ImageDecodeError(what, f"image has no alpha channel (mode {img.mode}); give an RGBA image or a mask")
    return img.convert(mode) if img.mode != mode else img


# ---------------------------------------------------------------------------- construction
def _name_of(source: Any, default: str) -> str:
    if isinstance(source, str | Path):
        return Path(source).stem
    return default


def _unique(names: list[str]) -> list[str]:
    clean = [n.replace("/", "_").replace("|", "_") or "x" for n in names]
    seen: dict[str, int] = {}
    out = []
    for n in clean:
        k = seen.get(n, 0)
        seen[n] = k + 1
        out.append(n if k == 0 and clean.count(n) == 1 else f"{n}#{k}")
    return out


def _as_foreground(item: Any, i: int) -> Foreground:
    if isinstance(item, Foreground):
        fg = item
    elif isinstance(item, Mapping):
        unknown = set(item) - {"image", "mask", "class_id", "name"}
        if unknown or "image" not in item or "class_id" not in item:
            raise ConfigError(f"foreground {i}: needs keys image and class_id (optional: mask, name), "
                              f"got {sorted(item)}")
        fg = Foreground(item["image"], item["class_id"], item.get("mask"), item.get("name"))
    elif isinstance(item, tuple | list) and len(item) in (2, 3):
        fg = Foreground(item[0], item[-1], item[1] if len(item) == 3 else None)
    else:
        raise ConfigError(f"foreground {i}: give a Foreground, (image, class_id) or (image, mask, class_id), "
                          f"got {type(item).__name__}")
    if isinstance(fg.class_id, bool) or not isinstance(fg.class_id, int | np.integer) or fg.class_id < 0:
        raise ConfigError(f"foreground {i}: class_id must be a non-negative integer, got {fg.class_id!r}")
    for src in (fg.image, fg.mask):
        if isinstance(src, str | Path) and not Path(src).is_file():
            raise DataError(f"foreground {i}: no such file {src}")
    return replace(fg, class_id=int(fg.class_id))


def _as_backgrounds(backgrounds: Any) -> list[Any]:
    if isinstance(backgrounds, str | Path):
        folder = Path(backgrounds)
        if not folder.is_dir():
            raise DataError(f"backgrounds: {folder} is not a folder of images")
        found = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
        if not found:
            raise DataError(f"backgrounds: no images ({', '.join(IMAGE_SUFFIXES)}) in {folder}")
        return list(found)
    out = list(backgrounds)
    for i, src in enumerate(out):
        if isinstance(src, str | Path) and not Path(src).is_file():
            raise DataError(f"background {i}: no such file {src}")
    return out


def _check_factors(sizes: Sequence[float], locations: Sequence[Sequence[float]], rotations: Sequence[float],
                   image_size: int) -> tuple[tuple[float, ...], tuple[tuple[float, float], ...], tuple[float, ...]]:
    sizes = tuple(float(s) for s in sizes)
    if not sizes or any(not 0 < s <= 1 for s in sizes):
        raise ConfigError(f"sizes are fractions of the image area in (0, 1], got {sizes!r}")
    try:
        locs = tuple((float(x), float(y)) for x, y in locations)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"locations are (x, y) pairs in [0, 1], got {locations!r}") from exc
    if not locs or any(not (0 <= x <= 1 and 0 <= y <= 1) for x, y in locs):
        raise ConfigError(f"locations are (x, y) pairs in [0, 1], got {locs!r}")
    rots = tuple(float(r) for r in rotations)
    if not rots or any(not math.isfinite(r) for r in rots):
        raise ConfigError(f"rotations are angles in degrees, got {rots!r}")
    for name, values in (("sizes", sizes), ("locations", locs), ("rotations", rots)):
        if len(set(values)) != len(values):
            raise ConfigError(f"{name} has repeated values: {values!r}")
    if int(image_size) != image_size or image_size < 8:
        raise ConfigError(f"image_size must be an integer >= 8, got {image_size!r}")
    return sizes, locs, rots


def composite_dataset(
    foregrounds: Iterable[Foreground | tuple | Mapping[str, Any]],
    backgrounds: Iterable[ImageLike] | str | Path,
    *,
    sizes: Sequence[float] = (0.2,),
    locations: Sequence[Sequence[float]] = ((0.5, 0.5),),
    rotations: Sequence[float] = (0.0,),
    image_size: int = 224,
    num_classes: int = 1000,
    label_space: str | None = None,
    class_names: list[str] | None = None,
    name: str | None = None,
) -> CompositeDataset:
    """The lazy cross product of foregrounds, backgrounds and factor values (module docstring).

    Parameters
    ----------
    foregrounds:
        :class:`Foreground` objects, ``(rgba_image, class_id)`` or ``(image, mask, class_id)``
        tuples, or dicts with ``image``, ``class_id`` and optional ``mask``, ``name``; images are
        file paths, PIL images or uint8 arrays.
    backgrounds:
        Images (paths, PIL images, arrays) or a folder of image files.
    sizes, locations, rotations:
        Object area as a fraction of the image area, object centres ``(x, y)`` as fractions of
        width and height (:func:`location_grid`), angles in degrees (:func:`rotation_angles`).
    num_classes, label_space:
        The label space of the class ids (default ImageNet-1k: ``imagenet-1k``, 1000 classes;
        otherwise ``<n>-classes``).

    Example ids: ``fg=<foreground>/bg=<background>/size=0.2/loc=0.5,0.5/rot=0``; names are file
    stems (or ``fg<i>`` / ``bg<i>``) made unique.
    """
    fgs = [_as_foreground(item, i) for i, item in enumerate(foregrounds)]
    bgs = _as_backgrounds(backgrounds)
    if not fgs or not bgs:
        raise ConfigError(f"composite_dataset: needs at least one foreground and one background "
                          f"(got {len(fgs)} and {len(bgs)})")
    sizes_t, locs, rots = _check_factors(sizes, locations, rotations, image_size)
    if num_classes < 1 or max(fg.class_id for fg in fgs) >= num_classes:
        raise ConfigError(f"composite_dataset: class ids must be below num_classes={num_classes} "
                          f"(largest is {max(fg.class_id for fg in fgs)})")
    fg_names = _unique([fg.name or _name_of(fg.image, f"fg{i}") for i, fg in enumerate(fgs)])
    bg_names = _unique([_name_of(b, f"bg{i}") for i, b in enumerate(bgs)])
    shape = (len(fgs), len(bgs), len(sizes_t), len(locs), len(rots))
    flat = np.arange(math.prod(shape), dtype=np.int64)
    f, b, s, l, r = np.unravel_index(flat, shape)
    ids = [f"fg={fg_names[fi]}/bg={bg_names[bi]}/size={sizes_t[si]:g}/loc={locs[li][0]:g},{locs[li][1]:g}"
           f"/rot={rots[ri]:g}" for fi, bi, si, li, ri in zip(f, b, s, l, r)]
    targets = [fgs[fi].class_id for fi in f]
    config = {"fg": [(n, fg.class_id) for n, fg in zip(fg_names, fgs)], "bg": bg_names, "sizes": sizes_t,
              "locations": locs, "rotations": rots, "image_size": int(image_size)}
    name = name or "composite-" + hashlib.sha256(json.dumps(config).encode()).hexdigest()[:10]
    space = label_space or ("imagenet-1k" if num_classes == 1000 else f"{num_classes}-classes")
    return CompositeDataset(name=name, ids=ids, targets=targets, label_space=space, num_classes=int(num_classes),
                            class_names=class_names, foregrounds=fgs, foreground_names=fg_names, backgrounds=bgs,
                            background_names=bg_names, sizes=sizes_t, locations=locs, rotations=rots,
                            image_size=int(image_size), flat=flat)


# ---------------------------------------------------------------------------- spec files
def _read_spec(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise DataError(f"composite spec {path}: no such file")
    text = path.read_text()
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml  # deferred: optional dependency
        except ImportError as exc:
            raise ConfigError(f"composite spec {path}: reading YAML needs pyyaml (pip install pyyaml), "
                              "or write the spec as JSON") from exc
        try:
            spec = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise DataError(f"composite spec {path}: invalid YAML ({exc})") from exc
    else:
        try:
            spec = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataError(f"composite spec {path}: invalid JSON ({exc})") from exc
    if not isinstance(spec, dict):
        raise DataError(f"composite spec {path}: expected a mapping at the top level")
    return spec


SPEC_KEYS = {"name", "foregrounds", "backgrounds", "sizes", "locations", "rotations", "image_size", "num_classes",
             "label_space", "class_names"}


_FOREGROUND_KEYS = {"image", "mask", "class_id", "name"}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _check_spec_types(spec: Mapping[str, Any], path: Path) -> None:
    """A ConfigError naming the spec file, the key and what it must hold, for the first value of
    the wrong type or shape (a string where a number goes, a number where a list goes, ...)."""

    def bad(key: str, expected: str, value: Any) -> ConfigError:
        shown = repr(value)
        return ConfigError(f"composite spec {path}: {key} must be {expected}, got "
                           f"{shown if len(shown) <= 60 else shown[:57] + '...'}")

    def numbers(key: str, value: Any, example: str) -> None:
        if not isinstance(value, list) or not value or not all(_is_number(v) for v in value):
            raise bad(key, f"a non-empty list of numbers, e.g. {example}", value)

    fgs = spec["foregrounds"]
    if not isinstance(fgs, list) or not fgs:
        raise bad("foregrounds", 'a non-empty list of {"image": FILE, "class_id": N} mappings', fgs)
    for i, item in enumerate(fgs):
        if not isinstance(item, Mapping):
            raise bad(f"foregrounds[{i}]", 'a mapping {"image": FILE, "class_id": N} (optional: mask, name)', item)
        unknown = sorted(set(item) - _FOREGROUND_KEYS)
        if unknown or "image" not in item or "class_id" not in item:
            raise bad(f"foregrounds[{i}]", "a mapping with keys image and class_id (optional: mask, name)",
                      sorted(item))
        for key in ("image", "mask", "name"):
            if key in item and not isinstance(item[key], str) and not (key != "image" and item[key] is None):
                raise bad(f"foregrounds[{i}].{key}", "a file path (a string)" if key != "name" else "a string",
                          item[key])
        if not _is_int(item["class_id"]) or item["class_id"] < 0:
            raise bad(f"foregrounds[{i}].class_id", "a non-negative integer", item["class_id"])
    bgs = spec["backgrounds"]
    if not isinstance(bgs, str) and not (isinstance(bgs, list) and bgs and all(isinstance(b, str) for b in bgs)):
        raise bad("backgrounds", "a folder or a non-empty list of image files (strings)", bgs)
    if "sizes" in spec:
        numbers("sizes", spec["sizes"], "[0.1, 0.2]")
    locations = spec.get("locations")
    if isinstance(locations, Mapping):
        if set(locations) - {"grid", "margin"} or not _is_int(locations.get("grid", 1)) \
                or not _is_number(locations.get("margin", 0.1)):
            raise bad("locations", '{"grid": N, "margin": M} with an integer N and a number M', dict(locations))
    elif "locations" in spec and not (isinstance(locations, list) and locations and all(
            isinstance(xy, list) and len(xy) == 2 and all(_is_number(v) for v in xy) for xy in locations)):
        raise bad("locations", '[[x, y], ...] pairs of numbers or {"grid": N, "margin": M}', locations)
    rotations = spec.get("rotations")
    if isinstance(rotations, Mapping):
        if set(rotations) - {"count"} or not _is_int(rotations.get("count", 18)):
            raise bad("rotations", '{"count": N} with an integer N', dict(rotations))
    elif "rotations" in spec:
        numbers("rotations", rotations, "[0, 90, 180]")
    for key in ("image_size", "num_classes"):
        if key in spec and not _is_int(spec[key]):
            raise bad(key, "an integer", spec[key])
    for key in ("name", "label_space"):
        if spec.get(key) is not None and not isinstance(spec[key], str):
            raise bad(key, "a string", spec[key])
    names = spec.get("class_names")
    if names is not None and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
        raise bad("class_names", "a list of strings", names)


def composite_from_spec(path: str | Path) -> CompositeDataset:
    """A :class:`CompositeDataset` from a JSON (or YAML) spec file; paths are relative to its folder::

        {"foregrounds": [{"image": "fg/cup.png", "class_id": 968},
                         {"image": "fg/dog.jpg", "mask": "fg/dog_mask.png", "class_id": 207}],
         "backgrounds": "bg/",                       (a folder, or a list of files)
         "sizes": [0.1, 0.2, 0.4],
         "locations": {"grid": 5, "margin": 0.1},    (or a list of [x, y])
         "rotations": {"count": 18},                 (or a list of angles)
         "image_size": 224, "num_classes": 1000, "label_space": "imagenet-1k", "name": "my-si-score"}
    """
    path = Path(path)
    spec = _read_spec(path)
    unknown = set(spec) - SPEC_KEYS
    if unknown:
        raise ConfigError(f"composite spec {path}: unknown keys {sorted(unknown)} (valid: {sorted(SPEC_KEYS)})")
    for key in ("foregrounds", "backgrounds"):
        if key not in spec:
            raise ConfigError(f"composite spec {path}: missing {key!r}")
    _check_spec_types(spec, path)
    base = path.parent
    rel = lambda p: p if p is None else base / p  # noqa: E731
    fgs = [{**item, "image": rel(item.get("image")), "mask": rel(item.get("mask"))} for item in spec["foregrounds"]]
    bgs = spec["backgrounds"]
    bgs = base / bgs if isinstance(bgs, str) else [base / b for b in bgs]
    try:
        locations = spec.get("locations", [[0.5, 0.5]])
        if isinstance(locations, Mapping):
            locations = location_grid(int(locations.get("grid", 1)), float(locations.get("margin", 0.1)))
        rotations = spec.get("rotations", [0.0])
        if isinstance(rotations, Mapping):
            rotations = rotation_angles(int(rotations.get("count", 18)))
        return composite_dataset(fgs, bgs, sizes=spec.get("sizes", [0.2]), locations=locations,
                                 rotations=rotations, image_size=spec.get("image_size", 224),
                                 num_classes=spec.get("num_classes", 1000), label_space=spec.get("label_space"),
                                 class_names=spec.get("class_names"), name=spec.get("name"))
    except (ConfigError, DataError) as exc:     # the values' own checks: say which spec file they are in
        if str(exc).startswith(f"composite spec {path}"):
            raise
        raise type(exc)(f"composite spec {path}: {exc}") from exc


SPEC_LAYOUT = "a JSON/YAML spec listing foregrounds, backgrounds, sizes, locations, rotations"


def register_composite_dataset() -> None:
    """Register :func:`composite_from_spec` as the dataset ``composite`` (``path=<spec>``); idempotent.

    Done on first use by :func:`composite_setting` rather than on import, so importing this
    module leaves the dataset registry as it is.
    """
    from shiftbench.datasets.registry import DATASETS  # deferred: loads Pillow

    if "composite" not in DATASETS:
        register_dataset("composite", default_dir=None, label_space="from the spec", layout=SPEC_LAYOUT)(
            composite_from_spec)
