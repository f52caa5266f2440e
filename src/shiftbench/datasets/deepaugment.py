"""DeepAugment as a data generator: a statically augmented copy of an image dataset.

Hendrycks et al. 2021 ("The Many Faces of Robustness", ICCV, §4) pass every training image
through an image-to-image network -- a convolutional autoencoder (CAE) or the EDSR
super-resolution network -- whose weights and forward pass are randomly distorted, and train on
the resulting copies beside the originals. :func:`deepaugment` does that for a class-folder
dataset or a manifest, with the networks and distortion families of
:mod:`shiftbench.shifts.deepaugment`, and writes ``copies`` augmented versions of every image
into one class-folder dataset (``folder:OUTPUT`` reads it):
``OUTPUT/<class>/<image path without extension>.<k>.png`` for copy ``k`` = 0 .. copies - 1.

**Weights** come from a checkpoint (the authors' ``CAE_Weights/model_final.state`` or
``EDSR_Weights/edsr_baseline_x4.pt``, any state dict of the same layers) or from a short
self-supervised training on the user's own images (``train_on``; see
:func:`~shiftbench.shifts.deepaugment.train_network`); the trained weights are kept in
``OUTPUT/.deepaugment-weights.pt`` so a resumed run does not retrain.

**Order and randomness.** As the authors' loaders did (``shuffle=True``), each copy visits the
images in a random order (from ``seed`` and ``k``); the distorted weights are redrawn for the
first image and then before each image with probability ``resample_probability`` (0.05), so
runs of about 20 images share one distorted network. Every draw comes from a generator seeded
by ``(seed, copy, position)``: the same input, options and seed give the same bytes, and a run
that was interrupted resumes where it stopped (each image is written to a temporary file and
renamed, so a file present is complete; files present are skipped). The settings of a copy are
kept in ``OUTPUT/.deepaugment.json``; resuming with other settings is an error.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shiftbench.datasets._scan import Examples, walk_images
from shiftbench.datasets.base import FileDataset
from shiftbench.errors import ConfigError, DataError, require
from shiftbench.shifts import deepaugment as da
from shiftbench.shifts.base import image_generator

META = ".deepaugment.json"
WEIGHTS = ".deepaugment-weights.pt"
#: images of ``train_on`` used for the short training, at most (evenly spaced in sorted order)
MAX_TRAIN_IMAGES = 2000
#: smallest image side the networks take (EDSR works at a quarter of it)
MIN_SIDE = 8
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class DeepAugmentCopy:
    """What :func:`deepaugment` wrote: ``copies`` versions of ``images`` images into ``output``,
    ``written`` of them now and ``already`` found complete from an earlier run."""

    output: Path
    network: str
    width: float
    seed: int
    copies: int
    images: int
    classes: int
    written: int
    already: int
    weights: str
    train_steps: int | None
    train_loss: float | None
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {"output": str(self.output), "network": self.network, "width": self.width, "seed": self.seed,
                "copies": self.copies, "images": self.images, "classes": self.classes, "written": self.written,
                "already": self.already, "weights": self.weights, "train_steps": self.train_steps,
                "train_loss": self.train_loss, "seconds": self.seconds}


def deepaugment(input: Path | str, output: Path | str, *, network: str = "cae", checkpoint: Path | str | None = None,
                train_on: Path | str | None = None, copies: int = 1, seed: int = 0, width: float = 1.0,
                distortions: da.CAEDistortions | da.EDSRDistortions | None = None, train_steps: int = 200,
                threads: int = 1, on_progress: Progress | None = None) -> DeepAugmentCopy:
    """Write ``copies`` DeepAugment versions of every image of ``input`` into ``output``.

    Parameters
    ----------
    input:
        A class-folder dataset (``DIR/<class>/**/<image>``, as ``folder:DIR`` reads it) or a CSV /
        Parquet manifest (``path,label``); labels become the output's class folders.
    output:
        The folder to write (created); not inside ``input``. A partly written copy resumes.
    network:
        ``"cae"`` or ``"edsr"`` (:mod:`shiftbench.shifts.deepaugment`).
    checkpoint, train_on:
        Exactly one: a state dict of the network's layers (the authors' pretrained networks), or
        a folder of images (searched recursively) to train the network on for ``train_steps``.
    copies:
        Augmented versions per image (1 or more), each from its own draws.
    seed:
        Seed of every draw (training, order, weights, forward pass).
    width:
        Channel multiplier of the network; 1 is the authors' (their checkpoints need it).
    distortions:
        The families' probabilities and strengths (default: the authors',
        :func:`~shiftbench.shifts.deepaugment.default_distortions`).
    threads:
        torch's CPU threads while it runs (restored after): 1, the default, is fastest for small
        images on a busy machine, and the bytes written do not depend on the machine's core count.
    on_progress:
        Called as ``on_progress(stage, done, total)`` with stage ``"train"`` or ``"write"``.

    Raises
    ------
    ConfigError
        An unknown network, ``copies`` < 1, neither or both of ``checkpoint`` and ``train_on``,
        ``output`` inside ``input``, an output folder holding a copy made with other settings.
    DataError
        An input or ``train_on`` folder without images, a checkpoint whose layers do not match
        (naming the first mismatching key), an image smaller than 8 px.
    """
    start = time.perf_counter()
    da.check_network(network)
    copies = _check_int(copies, "copies", minimum=1)
    seed = _check_int(seed, "seed", minimum=0)
    train_steps = _check_int(train_steps, "train_steps", minimum=1)
    threads = _check_int(threads, "threads", minimum=1)
    if (checkpoint is None) == (train_on is None):
        raise ConfigError("deepaugment: give either --checkpoint FILE (a state dict of the network, e.g. the authors' "
                          "pretrained one) or --train-on DIR (train it briefly on your images)" if checkpoint is None
                          else "deepaugment: give --checkpoint or --train-on, not both")
    options = (distortions or da.default_distortions(network)).check()
    if options.network != network:
        raise ConfigError(f"deepaugment: distortions are {options.network}'s, the network is {network}")
    in_path, out = Path(input).expanduser(), Path(output).expanduser()
    ds = _read_input(in_path)
    _check_output(in_path, out)
    train_images = _scan_train_on(Path(train_on).expanduser()) if train_on is not None else None
    require("shiftbench.deepaugment", "torch")
    import torch  # deferred: loads torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _run(ds, in_path, out, network, checkpoint, train_on, train_images, copies, seed, width, options,
                    train_steps, on_progress, start)
    finally:
        torch.set_num_threads(before)


def _run(ds: FileDataset, in_path: Path, out: Path, network: str, checkpoint: Path | str | None,
         train_on: Path | str | None, train_images: Examples | None, copies: int, seed: int, width: float,
         options: da.CAEDistortions | da.EDSRDistortions, train_steps: int, on_progress: Progress | None,
         start: float) -> DeepAugmentCopy:
    import torch  # deferred: loads torch

    net = _seeded_network(network, width, seed)
    meta = {"format": 1, "network": network, "width": width, "seed": seed, "distortions": options.to_dict(),
            "weights": ({"checkpoint": _sha256(Path(checkpoint))} if checkpoint is not None else
                        {"train_on": _digest(train_images.paths), "steps": train_steps}),
            "input": _digest(ds.paths)}
    _check_meta(out, meta)
    if checkpoint is not None:          # a checkpoint that does not fit fails before anything is written
        da.load_checkpoint(net, checkpoint, network)
    out.mkdir(parents=True, exist_ok=True)
    _write_atomic(out / META, json.dumps(meta).encode())
    loss = None
    if checkpoint is not None:
        weights = f"checkpoint {checkpoint}"
    else:
        loss = _trained(net, network, out, train_images, train_steps, seed, on_progress)
        weights = f"trained on {train_on} ({len(train_images.paths)} images, {train_steps} steps)"
    net.eval()
    base = {k: v.detach().clone() for k, v in net.state_dict().items()}
    names = _class_folders(ds, in_path.is_dir())
    for c in sorted(set(names)):
        (out / c).mkdir(parents=True, exist_ok=True)
    targets = [_target_path(out, ds, i, names, in_path.is_dir()) for i in range(len(ds))]
    written = already = 0
    total = copies * len(ds)
    with torch.no_grad():
        for k in range(copies):
            for group in _groups(len(ds), seed, k, options.resample_probability):
                todo = [i for i in group if not _path(targets[i], k).exists()]
                already += len(group) - len(todo)
                if todo:
                    state, _ = da.distort_weights(base, options, image_generator(seed, f"deepaugment-weights-{k}",
                                                                                  group[0]))
                    net.load_state_dict(state)
                for i in todo:
                    _write_image(net, ds, i, _path(targets[i], k), network, options, seed, k)
                    written += 1
                    if on_progress is not None:
                        on_progress("write", written + already, total)
    if on_progress is not None:
        on_progress("write", total, total)
    return DeepAugmentCopy(out, network, width, seed, copies, len(ds), len(set(names)), written, already, weights,
                           None if checkpoint is not None else train_steps, loss,
                           round(time.perf_counter() - start, 3))


# ---------------------------------------------------------------------------- checks at the boundary
def _check_int(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        option = "--" + name.replace("_", "-")
        raise ConfigError(f"{option} {value}: give an integer of at least {minimum}")
    return value


def _read_input(path: Path) -> FileDataset:
    from shiftbench.datasets.folders import image_folder  # deferred: reads class maps
    from shiftbench.datasets.manifest import manifest  # deferred: loads pandas

    if not path.exists():
        raise DataError(f"--input {path}: no such folder or manifest")
    ds = image_folder(path) if path.is_dir() else manifest(path)
    if len(ds) == 0:
        raise DataError(f"--input {path}: no images")
    if ds.multi_label:
        raise DataError(f"--input {path}: a multi-label manifest; DeepAugment copies take one label per image")
    return ds


def _check_output(in_path: Path, out: Path) -> None:
    if not in_path.is_dir():
        return
    src, dst = os.path.realpath(in_path), os.path.realpath(out)
    if dst == src or dst.startswith(src.rstrip(os.sep) + os.sep):
        raise ConfigError(f"--output {out} is inside --input {in_path}: its images would be read as the input's; "
                          "choose a folder outside it")


def _scan_train_on(path: Path) -> Examples:
    if not path.is_dir():
        raise DataError(f"--train-on {path}: no such folder")
    ex = Examples()
    walk_images(path, "", ex, 0)
    if not ex.paths:
        raise DataError(f"--train-on {path}: no images (jpg, png, ...) under it")
    order = sorted(range(len(ex.ids)), key=ex.ids.__getitem__)
    if len(order) > MAX_TRAIN_IMAGES:
        order = [order[round(j * (len(order) - 1) / (MAX_TRAIN_IMAGES - 1))] for j in range(MAX_TRAIN_IMAGES)]
    return Examples(ids=[ex.ids[i] for i in order], targets=[0] * len(order), paths=[ex.paths[i] for i in order])


def _digest(paths: list[Path]) -> str:
    """A short fingerprint of a list of image paths (the input a copy was made from)."""
    return f"{len(paths)} images, sha256 " + hashlib.sha256("\n".join(map(str, paths)).encode()).hexdigest()[:16]


def _sha256(path: Path) -> str:
    if not path.is_file():
        raise DataError(f"--checkpoint {path}: no such file")
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _check_meta(out: Path, meta: dict[str, Any]) -> None:
    """A resumed copy must have been made with the same settings (``copies`` may differ)."""
    try:
        old = json.loads((out / META).read_text())
    except (OSError, ValueError):
        if out.is_dir() and any(out.iterdir()):
            raise ConfigError(f"--output {out} is a folder with other files in it; choose a new or empty one") from None
        return
    for key, value in meta.items():
        if old.get(key) != json.loads(json.dumps(value)):
            raise ConfigError(f"--output {out} holds a DeepAugment copy made with another {key}; resume with the "
                              "same settings, or choose another --output")


# ---------------------------------------------------------------------------- the network and its weights
def _seeded_network(network: str, width: float, seed: int) -> Any:
    import torch  # deferred: loads torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return da.build_network(network, width)


def _trained(net: Any, network: str, out: Path, ex: Examples, steps: int, seed: int,
             on_progress: Progress | None) -> float | None:
    """Train ``net`` on the images of ``ex`` (or load what an earlier run of this copy trained)."""
    import torch  # deferred: loads torch

    saved = out / WEIGHTS
    if saved.is_file():
        blob = torch.load(saved, map_location="cpu", weights_only=True)
        net.load_state_dict(blob["state"])
        return float(blob["loss"])
    images = [_tensor(FileDataset("train-on", ex.ids, ex.targets, "custom", 1, paths=ex.paths), i)[0]
              for i in range(len(ex.ids))]
    step_cb = None if on_progress is None else (lambda s, _loss: on_progress("train", s, steps))
    loss = da.train_network(net, images, network, steps=steps, seed=seed, on_step=step_cb)
    buf = io.BytesIO()
    torch.save({"state": net.state_dict(), "loss": loss}, buf)
    _write_atomic(saved, buf.getvalue())
    return loss


# ---------------------------------------------------------------------------- the copy
def _class_folders(ds: FileDataset, folder: bool) -> list[str]:
    """Each example's class folder: its own (a folder input) or its label's name (a manifest;
    integer labels zero-padded, so the folders sort in label order)."""
    if folder:
        return [i.split("/", 1)[0] for i in ds.ids]
    width = len(str(max(int(t) for t in ds.targets)))
    return [ds.class_names[int(t)] if ds.class_names else f"{int(t):0{width}d}" for t in ds.targets]


def _target_path(out: Path, ds: FileDataset, i: int, names: list[str], folder: bool) -> Path:
    rel = ds.ids[i].split("/", 1)[1] if folder else ds.ids[i]
    return out / names[i] / os.path.splitext(rel)[0]


def _path(stem: Path, k: int) -> Path:
    return stem.with_name(f"{stem.name}.{k}.png")


def _groups(n: int, seed: int, k: int, resample: float) -> list[list[int]]:
    """Copy ``k``'s visiting order split where the weights are redrawn (first, then with ``resample``)."""
    import torch  # deferred: loads torch

    g = image_generator(seed, f"deepaugment-order-{k}", 0)
    order = torch.randperm(n, generator=g).tolist()
    redraw = (torch.rand(n, generator=g) < resample).tolist()
    groups: list[list[int]] = []
    for pos, i in enumerate(order):
        if pos == 0 or redraw[pos]:
            groups.append([])
        groups[-1].append(i)
    return groups


def _tensor(ds: FileDataset, i: int) -> Any:
    import numpy as np  # deferred: with torch
    import torch  # deferred: loads torch

    img = ds.load(i)
    if min(img.size) < MIN_SIDE:
        raise DataError(f"image {ds.ids[i]}: {img.size[0]}x{img.size[1]} px; DeepAugment needs at least "
                        f"{MIN_SIDE} px a side")
    return torch.from_numpy(np.asarray(img, dtype=np.float32) / 255).permute(2, 0, 1)[None]


def _write_image(net: Any, ds: FileDataset, i: int, path: Path, network: str,
                 options: da.CAEDistortions | da.EDSRDistortions, seed: int, k: int) -> None:
    import numpy as np  # deferred: with torch
    import torch  # deferred: loads torch
    from PIL import Image  # deferred: loads Pillow

    x = _tensor(ds, i)
    forward = da.draw_forward(options, image_generator(seed, f"deepaugment-forward-{k}", i))
    noise = image_generator(seed, f"deepaugment-noise-{k}", i)
    y = da.apply_network(net, x, network, forward, noise)[0]
    pixels = (y * 255).round().clamp(0, 255).to(dtype=torch.uint8).permute(1, 2, 0).numpy()
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(pixels)).save(buf, format="PNG")
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(path, buf.getvalue())


def _write_atomic(path: Path, data: bytes) -> None:
    """``data`` into ``path`` by a temporary dot-file renamed over it: a file present is complete."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


__all__ = ["DeepAugmentCopy", "deepaugment"]
