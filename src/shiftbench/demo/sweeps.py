"""Resolution sweeps and SI-SCORE-style object compositing on the offline digits testbed.

:func:`run_sweeps_demo` writes two kinds of studies into ``<workspace>/store`` for a few zoo
models of different kinds (a STANDARD CNN, its AugMix / Noise2Net / PGD variants, an MLP), so
the report's "Resolution sweeps" and "Object compositing" sections have data:

1. **resolution** (Touvron et al. 2019, FixRes): accuracy on ``n`` ``mnist-test`` digits at test
   resolutions :data:`RESOLUTIONS` through :func:`shiftbench.studies.resolution.resolution_sweep`.
   The digits preprocessing is resize = crop = 32, so at resolution ``r`` the 32 x 32 digit is
   resized to ``r x r``. The zoo's CNNs flatten a fixed 4 x 4 map into their linear head
   (:mod:`shiftbench.demo.archs`) and the MLPs a fixed 32 x 32 input: as trained, both fail at
   every other size, and the stored rows say why. To see the curve, each CNN is also swept as
   ``<name>+adaptive-pool``: the same weights with an ``AdaptiveMaxPool2d(4)`` after the last
   stage (identity at 32 px, where its results equal the plain model's), the way global /
   adaptive pooling lets ImageNet CNNs take any input size.
2. **compositing** (Djolonga et al. 2021, §4, SI-SCORE): real held-out MNIST digits as
   foregrounds (white, with the digit's grey level as alpha) pasted onto four 64 x 64
   backgrounds -- ``black`` (the training distribution's background, a control) and
   scikit-image's ``brick``, ``grass`` and ``gravel`` textures (real greyscale photographs shipped
   with scikit-image, so offline; darkened to :data:`TEXTURE_GAIN` of their grey level so the white
   ink stays the brightest thing, as on MNIST) -- over object size (ink area as a share of the
   image), a 3 x 3 location grid and rotations, labelled with the digit. Evaluated with
   :func:`shiftbench.studies.compositing.compositing_study`; the model's preprocessing resizes the
   64 px canvas to 32 px.

The foreground and background PNGs and the composite spec are written atomically to
``<workspace>/sweeps/composite`` (rewritten only when their bytes change), so the setting
``composite:<spec>`` and its engine keys are stable: a second run evaluates nothing.

>>> from shiftbench.demo.sweeps import run_sweeps_demo
>>> out = run_sweeps_demo("shiftbench-data", "shiftbench-workspace/digits")   # doctest: +SKIP
>>> out["resolution"]["cnn-w8-e3+adaptive-pool"][["resolution", "accuracy"]]  # doctest: +SKIP
"""
from __future__ import annotations

import copy
import dataclasses
import io
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from shiftbench.errors import ConfigError, DataError
from shiftbench.store.files import atomic_write_with as atomic_write

#: zoo models swept by default: a STANDARD CNN, three intervention variants of it, an MLP
DEFAULT_MODELS = ("cnn-w8-e3", "cnn-w8-e3-augmix", "cnn-w8-e3-noise2net", "cnn-w8-e3-pgd", "mlp-h128-e5")
RESOLUTIONS = (16, 24, 32, 40, 48, 64)
SETTING = "mnist-test"
N_DIGITS = 300
#: composite factors: ink area as a share of the canvas (an MNIST digit's ink is ~0.1 of its frame)
SIZES = (0.02, 0.05, 0.1, 0.2)
ROTATIONS = (0.0, 30.0, 60.0, 90.0, 180.0, 300.0, 330.0)  # 0, ±30, ±60, 90, 180 degrees
GRID, MARGIN = 3, 0.35  # object centres at 35, 50, 65% of the side: MNIST digits are centred
CANVAS = 64
N_FOREGROUNDS = 20  # digits pasted: n // 10 of each class
TEXTURES = ("brick", "grass", "gravel")
TEXTURE_GAIN = 0.5
COMPOSITE_NAME = "digits-si-score"
COMPOSITE_DIR = Path("sweeps") / "composite"
POOLED_SUFFIX = "+adaptive-pool"


# ----------------------------------------------------------------------------- models
def load_zoo_model(name: str, workspace: Path | str) -> Any:
    """A cached zoo model as a :class:`~shiftbench.models.LoadedModel` (as ``run.evaluate_model`` loads it)."""
    from shiftbench.demo.zoo import select_zoo, use_workspace  # deferred: loads Pillow, loads pyarrow
    from shiftbench.models import load_model  # deferred: registers on import

    m = [z for z in select_zoo([name]) if z.name == name][0]
    kwargs: dict[str, Any] = {"name": m.name, "model_type": m.model_type, "tags": m.tags}
    if m.framework == "torch":
        kwargs["arch"] = m.recipe["arch"]
    with use_workspace(workspace):
        return load_model(m.spec(workspace), **kwargs)


def adaptive_pool_variant(loaded: Any, size: int = 4) -> Any:
    """``loaded`` (a digits CNN) with ``AdaptiveMaxPool2d(size)`` after its last stage, named
    ``<name>+adaptive-pool``: its head then takes any input size; at 32 px it is the same function."""
    from torch import nn  # deferred: loads torch

    net = getattr(loaded.module, "net", None)
    if not isinstance(getattr(net, "features", None), nn.Sequential):
        raise ConfigError(f"model {loaded.name!r} has no convolutional `features` stage to pool; "
                          "adaptive pooling is for the zoo's CNNs")
    module = copy.deepcopy(loaded.module)
    module.net.features.append(nn.AdaptiveMaxPool2d(size))
    return dataclasses.replace(loaded, name=f"{loaded.name}{POOLED_SUFFIX}", module=module,
                               fingerprint=f"{loaded.fingerprint}+adaptive-max-pool-{size}",
                               metadata={**loaded.metadata, "pooling": f"AdaptiveMaxPool2d({size})"})


# ----------------------------------------------------------------------------- composite data
def _png(array: np.ndarray) -> bytes:
    from PIL import Image  # deferred: loads Pillow

    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="PNG")
    return buf.getvalue()


def _write_if_changed(path: Path, data: bytes) -> None:

    if path.is_file() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))


def texture_backgrounds(size: int = CANVAS, gain: float = TEXTURE_GAIN) -> dict[str, np.ndarray]:
    """``black`` plus scikit-image's grey texture photos, centre 256 x 256 resized to ``size`` and
    multiplied by ``gain`` (uint8 greyscale)."""
    import skimage.data  # deferred: loads scikit-image
    from PIL import Image  # deferred: loads Pillow

    out = {"black": np.zeros((size, size), np.uint8)}
    for name in TEXTURES:
        img = np.asarray(getattr(skimage.data, name)(), dtype=np.uint8)
        h, w = img.shape
        crop = img[(h - 256) // 2:(h + 256) // 2, (w - 256) // 2:(w + 256) // 2]
        small = np.asarray(Image.fromarray(crop).resize((size, size), Image.Resampling.LANCZOS), dtype=np.float64)
        out[name] = np.clip(np.round(small * gain), 0, 255).astype(np.uint8)
    return out


def write_composite_spec(workspace: Path | str, *, n_foregrounds: int = N_FOREGROUNDS, seed: int = 0,
                         sizes: Sequence[float] = SIZES, rotations: Sequence[float] = ROTATIONS,
                         grid: int = GRID, backgrounds: Sequence[str] | None = None) -> Path:
    """Write digit foregrounds (RGBA: white ink, the grey level as alpha), the backgrounds and a
    composite spec to ``<workspace>/sweeps/composite``; returns the spec's path.

    The digits are ``n_foregrounds // 10`` per class drawn (seeded) from the prepared
    ``mnist-test`` split, so none was seen in training.
    """
    from shiftbench.demo.datasets import load_prepared  # deferred: loads Pillow, loads pyarrow

    if n_foregrounds < 10 or n_foregrounds % 10:
        raise ConfigError(f"n_foregrounds={n_foregrounds}: use a positive multiple of 10 (the same count per digit)")
    z = load_prepared(workspace, "digits-mnist-test")
    x, y = z["test_x"], z["test_y"]
    if x.ndim == 4:
        x = x[..., 0]
    rng = np.random.default_rng(seed)
    folder = Path(workspace) / COMPOSITE_DIR
    fgs = []
    for digit in range(10):
        pool = np.flatnonzero(y == digit)
        for idx in np.sort(rng.choice(pool, n_foregrounds // 10, replace=False)):
            ink = x[idx].astype(np.uint8)
            rgba = np.dstack([np.full_like(ink, 255)] * 3 + [ink])
            rel = f"fg/{digit}_{int(idx):04d}.png"
            _write_if_changed(folder / rel, _png(rgba))
            fgs.append({"image": rel, "class_id": digit, "name": f"{digit}_{int(idx):04d}"})
    bgs = texture_backgrounds()
    names = list(bgs) if backgrounds is None else list(backgrounds)
    unknown = [b for b in names if b not in bgs]
    if unknown:
        raise ConfigError(f"unknown background {unknown[0]!r}; choose from {', '.join(bgs)}")
    for name in names:
        _write_if_changed(folder / "bg" / f"{name}.png", _png(bgs[name]))
    spec = {"name": COMPOSITE_NAME, "foregrounds": fgs, "backgrounds": [f"bg/{b}.png" for b in names],
            "sizes": list(sizes), "locations": {"grid": grid, "margin": MARGIN}, "rotations": list(rotations),
            "image_size": CANVAS, "num_classes": 10, "label_space": "digits-10",
            "class_names": [str(d) for d in range(10)]}
    path = folder / "spec.json"
    _write_if_changed(path, json.dumps(spec, indent=1).encode())
    return path


# ----------------------------------------------------------------------------- the demo
def run_sweeps_demo(
    data_dir: Path | str,
    workspace: Path | str,
    *,
    models: Sequence[str] | None = None,
    n: int = N_DIGITS,
    resolutions: Sequence[int] = RESOLUTIONS,
    n_foregrounds: int = N_FOREGROUNDS,
    sizes: Sequence[float] = SIZES,
    rotations: Sequence[float] = ROTATIONS,
    batch_size: int = 500,
    console: Any = None,
) -> dict[str, Any]:
    """Resolution sweeps and a compositing study for zoo ``models`` into ``<workspace>/store``.

    Parameters
    ----------
    data_dir:
        Holds the MNIST tarball; used only if the workspace's prepared data is missing.
    workspace:
        The digits workspace (trained models in ``models/``, results in ``store/``).
    models:
        Zoo model names (default :data:`DEFAULT_MODELS`); each must be trained already.
    n:
        ``mnist-test`` digits per resolution.
    resolutions, n_foregrounds, sizes, rotations:
        Test resolutions; digits pasted in the composite dataset (a multiple of 10), object
        sizes (ink area / canvas area) and rotations (degrees) of the composites.

    Returns
    -------
    dict with ``resolution`` (model name -> sweep table; CNNs twice, as trained and
    ``+adaptive-pool``), ``compositing`` (model name -> study table), ``spec`` (the composite
    spec's path), ``store`` and ``times`` (seconds per stage).
    """
    from rich.console import Console  # deferred: registers on import

    import shiftbench.demo  # deferred: loads Pillow, loads pyarrow
    from shiftbench.demo.datasets import prepare_data  # deferred: loads Pillow, loads pyarrow
    from shiftbench.demo.zoo import cache_status, select_zoo  # deferred: loads Pillow, loads pyarrow
    from shiftbench.store.store import Store  # deferred: loads pyarrow
    from shiftbench.studies.compositing import compositing_study  # deferred: loads Pillow, loads pyarrow
    from shiftbench.studies.resolution import resolution_sweep  # deferred: loads Pillow, loads pyarrow

    shiftbench.demo.register()
    console = console or Console(stderr=True)
    if not 1 <= n:
        raise ConfigError(f"n={n}: give at least 1 mnist-test digit per resolution")
    ws = Path(workspace)
    names = list(models) if models is not None else list(DEFAULT_MODELS)
    zoo = {m.name: m for m in select_zoo(names)}  # unknown names: ConfigError with a suggestion
    _, meta, _ = prepare_data(data_dir, ws)
    missing = [m for m in names if cache_status(ws, zoo[m], meta["train_digest"]) != "done"]
    if missing:
        raise DataError(f"zoo model {missing[0]!r} is not trained in {ws}; run `make demo` (or "
                        f"shiftbench.demo.run_digits_demo(models={names!r})) first")
    store = Store(ws / "store")
    times: dict[str, float] = {}
    common = {"data_root": ws / "data", "store": store, "batch_size": batch_size, "workers": 0}

    t0 = time.perf_counter()
    sweeps: dict[str, Any] = {}
    for name in names:
        loaded = load_zoo_model(name, ws)
        variants = [loaded]
        if zoo[name].recipe.get("arch", "").startswith("digits-cnn"):
            variants.append(adaptive_pool_variant(loaded))
        for model in variants:
            sweep = resolution_sweep(model, SETTING, resolutions, limit=n, **common)
            sweeps[model.name] = sweep
            ok = sweep[sweep["accuracy"].notna()]
            console.print(f"resolution {model.name}: " + ", ".join(
                f"{int(r)}px {a:.1f}%" for r, a in zip(ok["resolution"], ok["accuracy"]))
                + (f" (fails at {len(sweep) - len(ok)} sizes)" if len(ok) < len(sweep) else ""))
    times["resolution"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    spec = write_composite_spec(ws, n_foregrounds=n_foregrounds, sizes=sizes, rotations=rotations)
    studies: dict[str, Any] = {}
    for name in names:
        study = compositing_study(load_zoo_model(name, ws), spec, **common)
        studies[name] = study
        console.print(f"compositing {name}: top-1 {study.attrs['accuracy']:.1f}% over "
                      f"{study.attrs['n_examples']} composites")
    times["compositing"] = time.perf_counter() - t0
    times["total"] = times["resolution"] + times["compositing"]
    return {"resolution": sweeps, "compositing": studies, "spec": spec, "store": ws / "store", "times": times}
