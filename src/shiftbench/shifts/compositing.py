"""Object compositing on pixels: cut an object to its alpha, scale it to a share of the image
area, rotate it and paste it onto a background (SI-SCORE, Djolonga et al. 2021, "On Robustness
and Transferability of Convolutional Neural Networks", §4).

Pure functions of PIL images. The composite *dataset* built from them (foregrounds x
backgrounds x sizes x locations x rotations, spec files, the dataset ``composite``) is
:mod:`shiftbench.datasets.composite`; the study that evaluates a model on it and reports
accuracy per factor is :mod:`shiftbench.studies.compositing`.

Composition of one image of side ``s`` (:func:`paste_object`):

1. the foreground is cut to the bounding box of its alpha (:func:`cut_to_alpha`, which also
   returns the *object area*, the sum of alpha / 255);
2. it is scaled so its object area is ``size * s**2`` (rotation does not change it);
3. it is rotated by ``rotation`` degrees counter-clockwise about its centre (bicubic, the canvas
   grows to hold it), and alpha-composited with its centre at ``(x * s, y * s)``; parts outside
   the image are cut off.
"""
from __future__ import annotations

import math

import numpy as np
from PIL import Image, ImageOps

__all__ = ["fit_background", "cut_to_alpha", "object_size", "paste_object"]


def fit_background(image: Image.Image, image_size: int) -> Image.Image:
    """``image`` resized (shorter side) and centre-cropped to ``image_size`` squared (bicubic)."""
    return ImageOps.fit(image, (image_size, image_size), Image.Resampling.BICUBIC)


def cut_to_alpha(rgba: Image.Image) -> tuple[Image.Image, float] | None:
    """``rgba`` cropped to the bounding box of its alpha, and its object area (sum of alpha / 255);
    ``None`` when the alpha is empty (fully transparent: no object).

    >>> im = Image.new("RGBA", (10, 10), (0, 0, 0, 0))
    >>> im.paste((255, 0, 0, 255), (2, 3, 6, 5))
    >>> obj, area = cut_to_alpha(im)
    >>> obj.size, area
    ((4, 2), 8.0)
    """
    box = rgba.getchannel("A").getbbox()
    if box is None:
        return None
    rgba = rgba.crop(box)
    return rgba, float(np.asarray(rgba.getchannel("A"), dtype=np.float64).sum() / 255.0)


def object_size(obj: Image.Image, area: float, size: float, image_size: int) -> tuple[int, int]:
    """Width and height of ``obj`` (object area ``area``) scaled so its area is
    ``size * image_size**2``: both sides times ``sqrt(size * image_size**2 / area)``, at least 1.

    >>> object_size(Image.new("RGBA", (4, 2)), 8.0, 0.02, 40)
    (8, 4)
    """
    scale = math.sqrt(size * image_size * image_size / area)
    return max(1, round(obj.width * scale)), max(1, round(obj.height * scale))


def paste_object(background: Image.Image, obj: Image.Image, *, width: int, height: int,
                 location: tuple[float, float], rotation: float = 0.0) -> Image.Image:
    """``obj`` (RGBA, cut to its alpha) resized to ``width x height`` (Lanczos), rotated by
    ``rotation`` degrees counter-clockwise (bicubic, expanding) and alpha-composited onto the
    square ``background`` with its centre at ``location`` (fractions of the side); an RGB image.
    """
    side = background.width
    obj = obj.resize((width, height), Image.Resampling.LANCZOS)
    if rotation % 360:
        obj = obj.rotate(rotation, resample=Image.Resampling.BICUBIC, expand=True)
    x, y = location
    layer = Image.new("RGBA", (side, side), (0, 0, 0, 0))
    layer.paste(obj, (round(x * side - obj.width / 2), round(y * side - obj.height / 2)))
    return Image.alpha_composite(background.convert("RGBA"), layer).convert("RGB")
