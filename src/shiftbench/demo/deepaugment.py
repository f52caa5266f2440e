"""The digits demo's DeepAugment stage: augmented copies of the training digits, made by
:func:`shiftbench.deepaugment` (Hendrycks et al. 2021, "The Many Faces of Robustness", ICCV, §4).

The authors train on the union of ImageNet and two DeepAugment copies of it, one made by a
distorted convolutional autoencoder (CAE) and one by a distorted EDSR. The demo does the same at
digit scale, within its time budget: every training digit gets **one** copy, the even-indexed
digits (in the prepared, seeded-random training order) through the CAE and the odd-indexed
through EDSR, each network at a quarter of the authors' width and trained for a few steps on its
own half of the digits (the generator's ``train_on``, the offline demo has no pretrained
networks). A model of the zoo with a ``deepaugment`` recipe then replaces each image of a batch
by its copy with probability ``p`` = 1/2, which samples the union of originals and copies
uniformly, as the authors' concatenated training set does, at the base model's number of steps
(:mod:`shiftbench.demo.training`).

Cache layout (``<workspace>/data/deepaugment/<key>/``, ``key`` a digest of the settings and of
the training digits): ``input/<network>/<class>/<index>.png`` (the digits the generator reads,
written once under a temporary name and renamed), ``<network>/`` (the generator's output, which
resumes by itself: a file present is complete), and ``copies.npz`` (every copy in training order,
``(N, 32, 32, 3)`` uint8, written atomically last: its presence marks a finished stage).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from shiftbench.demo.zoo import DEEPAUGMENT
from shiftbench.errors import DataError
from shiftbench.store.files import atomic_write_with as atomic_write

DIR = Path("data") / "deepaugment"
COPIES = "copies.npz"
#: the demo's DeepAugment settings (part of the zoo's recipes, so of the models' cache key)
SETTINGS: dict[str, Any] = DEEPAUGMENT
Progress = Callable[[str, int, int], None]


def copies_key(settings: Mapping[str, Any], train_digest: str, limit: int | None = None) -> str:
    """The cache folder's name: the generator's settings, the training digits' digest and ``limit``."""
    made = {k: settings[k] for k in ("networks", "width", "train_steps", "seed")}
    text = json.dumps({**made, "train": train_digest, "limit": limit}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def copies_dir(workspace: Path | str, settings: Mapping[str, Any], train_digest: str, limit: int | None = None) -> Path:
    return Path(workspace) / DIR / copies_key(settings, train_digest, limit)


def network_of(i: int, networks: list[str]) -> str:
    """The network that copies training digit ``i``: they take turns (CAE even, EDSR odd)."""
    return networks[i % len(networks)]


def make_copies(workspace: Path | str, train_x: np.ndarray, train_y: np.ndarray, train_digest: str,
                settings: Mapping[str, Any] = SETTINGS, *, limit: int | None = None, jobs: int = 1,
                on_progress: Progress | None = None) -> dict[str, Any]:
    """Make (or find) the DeepAugment copies of the first ``limit`` (default all) training digits.

    The networks run one after the other, or side by side in ``jobs`` > 1 forked processes (one
    torch thread each, so the bytes written do not depend on ``jobs``; ``on_progress`` then hears
    only of each network's end). Returns ``{"path", "seconds", "written", "already", "images", "losses", "cached"}``; the copies
    are in ``path`` (:func:`load_copies`). An interrupted run resumes: the generator skips the
    copies it finished, and the trained networks are kept beside them."""
    start = time.perf_counter()
    n = len(train_y) if limit is None else min(limit, len(train_y))
    root = copies_dir(workspace, settings, train_digest, limit)
    out = root / COPIES
    if out.is_file():
        return {"path": out, "seconds": time.perf_counter() - start, "written": 0, "already": n, "images": n,
                "losses": {}, "cached": True}
    networks = list(settings["networks"])
    inputs = _write_inputs(root, train_x[:n], train_y[:n], networks)
    args = [(str(inputs / net), str(root / net), net, dict(settings)) for net in networks]
    if jobs > 1 and len(networks) > 1:
        import multiprocessing as mp  # deferred: only with jobs > 1
        from concurrent.futures import ProcessPoolExecutor  # deferred: only with jobs > 1

        method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
        with ProcessPoolExecutor(max_workers=min(jobs, len(networks)), mp_context=mp.get_context(method)) as pool:
            results = []
            for res in pool.map(_copy_with, *zip(*args)):
                results.append(res)
                if on_progress is not None:
                    on_progress(f"{res['network']} done", len(results), len(networks))
    else:
        results = [_copy_with(*a, on_progress=on_progress) for a in args]
    written, already = sum(r["written"] for r in results), sum(r["already"] for r in results)
    losses = {r["network"]: r["train_loss"] for r in results}
    copies = np.zeros((n, *train_x.shape[1:], 3), np.uint8)
    for i in range(n):
        copies[i] = _read_png(root / network_of(i, networks) / str(int(train_y[i])) / f"{i:05d}.0.png")

    def write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            np.savez(fh, x=copies, meta=np.array(json.dumps({"settings": dict(settings), "train": train_digest,
                                                             "n": n})))

    atomic_write(out, write)
    return {"path": out, "seconds": time.perf_counter() - start, "written": written, "already": already,
            "images": n, "losses": losses, "cached": False}


def _copy_with(input: str, output: str, network: str, settings: dict[str, Any],
               on_progress: Progress | None = None) -> dict[str, Any]:
    """One network's copy through :func:`shiftbench.deepaugment` (run in a worker with jobs > 1)."""
    import shiftbench  # deferred: the generator is the public API's

    def progress(stage: str, done: int, total: int) -> None:
        if on_progress is not None:
            on_progress(f"{network} {stage}", done, total)

    res = shiftbench.deepaugment(input, output, network=network, train_on=input, copies=1,
                                 seed=int(settings["seed"]), width=float(settings["width"]),
                                 train_steps=int(settings["train_steps"]), threads=1, on_progress=progress)
    return res.to_dict()


def load_copies(workspace: Path | str, settings: Mapping[str, Any], train_digest: str,
                limit: int | None = None) -> np.ndarray:
    """The copies :func:`make_copies` wrote, ``(N, 32, 32, 3)`` uint8 in training order."""
    path = copies_dir(workspace, settings, train_digest, limit) / COPIES
    if not path.is_file():
        raise DataError(f"the DeepAugment copies of the training digits are not in {path.parent}; run `make demo` "
                        "(its deepaugment stage makes them)")
    try:
        with np.load(path, allow_pickle=False) as z:
            return z["x"]
    except Exception as exc:  # noqa: BLE001 - numpy raises many types on a damaged file
        raise DataError(f"{path} is corrupted ({type(exc).__name__}); delete it and rerun `make demo` (the copies "
                        "already written next to it are reused)") from exc


def _write_inputs(root: Path, x: np.ndarray, y: np.ndarray, networks: list[str]) -> Path:
    """Each network's digits as class-folder PNGs (greyscale), written whole or not at all."""
    from PIL import Image  # deferred: loads Pillow

    inputs = root / "input"
    if inputs.is_dir():
        return inputs
    tmp = root / ".input-partial"  # not ".*.tmp": the demo deletes those files when it resumes
    shutil.rmtree(tmp, ignore_errors=True)
    for i in range(len(y)):
        folder = tmp / network_of(i, networks) / str(int(y[i]))
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.ascontiguousarray(x[i])).save(folder / f"{i:05d}.png")
    os.replace(tmp, inputs)
    return inputs


def _read_png(path: Path) -> np.ndarray:
    from PIL import Image  # deferred: loads Pillow

    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


__all__ = ["SETTINGS", "copies_dir", "load_copies", "make_copies", "network_of"]
