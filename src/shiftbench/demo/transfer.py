"""A mini VTAB on the digits: transfer tasks built only from data that is on this machine.

VTAB-1k (Zhai et al. 2019) adapts a representation to 19 tasks in three groups -- *natural*
photographs, *specialized* images from instruments (satellites, microscopes, retina cameras) and
*structured* tasks whose label is a geometric fact of a synthetic scene (dSprites' position and
orientation, CLEVR's object count and distance). Djolonga et al. (2021) correlate robustness
metrics with the mean transfer accuracy of each group. The digits demo does the same with the
zoo's torch models (a linear probe on their penultimate features; the scikit-learn models have no
penultimate layer and are left out) on these tasks, each 32 x 32 greyscale (replicated to RGB, as
the zoo's inputs are), written once to ``<workspace>/data/minivtab/<task>.npz``:

================ =========== ======= ===== ======================================================
task             group       classes train test / what the label is
================ =========== ======= ===== ======================================================
``uci-digits``   natural     10      1,297 500: the digit, written by other people (UCI's 43
                                           writers, 8 x 8 scans) -- a new-writer task
``fashion-mnist`` natural    10      1,000 500: the garment (Fashion-MNIST, only where Debian's
                                           ``dataset-fashion-mnist`` or ``<data>/fashion-mnist``
                                           has it)
``sinogram``     specialized 10      1,000 500: the digit, seen through a CT scanner: its Radon
                                           transform (32 parallel projections over 180 degrees).
                                           An *analogue* of VTAB's specialized group (same content,
                                           a specialist instrument), not medical data
``rotation``     structured  8       1,000 500: the 45-degree bin of the angle (uniform in
                                           [0, 360)) a digit was rotated by (dSprites orientation)
``position``     structured  9       1,000 500: the 3 x 3 cell holding the centre of a half-size
                                           digit placed at random on the canvas (dSprites location)
``count``        structured  4       1,000 500: how many half-size digits (1-4) are on the canvas
                                           (CLEVR count), one per quadrant, jittered
================ =========== ======= ===== ======================================================

The structured and specialized tasks draw real MNIST digits from the *held-out* test split (the
zoo never trained on them), with ``numpy.random.default_rng([SEED, crc32(task)])``; every answer
is the geometry actually applied (kept in the file: ``angles``, ``offsets``, ``counts``). The
rotation task is not fully determined for symmetric digits (a 0, 1 or 8 turned by 180 degrees),
as dSprites' orientation is not for its symmetric shapes. The registered settings are
``minivtab-<task>-train`` and ``minivtab-<task>-test`` (datasets read with ``data_root=<workspace>/data``).
"""
from __future__ import annotations

import json
import time
import zlib
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from shiftbench.datasets import ArrayDataset, LayoutError, register_dataset
from shiftbench.errors import DataError
from shiftbench.settings import Setting, register_setting
from shiftbench.store.files import atomic_write_with

__all__ = ["GROUPS", "TASKS", "mini_vtab_tasks", "run_transfer_demo", "task_arrays"]

DATA_DIR = "minivtab"
#: bump when a task's construction changes: files of another version are rebuilt
VERSION = 1
SEED = 0
N_TRAIN, N_TEST = 1000, 500
SIZE = 32
ROTATION_BINS = 8
POSITION_CELLS = 3
MAX_COUNT = 4
SINOGRAM_ANGLES = 32
#: task -> (group, classes, description)
TASKS: dict[str, tuple[str, int, str]] = {
    "uci-digits": ("natural", 10, "UCI handwritten digits (new writers, 8 x 8 scans): the digit"),
    "fashion-mnist": ("natural", 10, "Fashion-MNIST garments: the garment class"),
    "sinogram": ("specialized", 10, "MNIST digits through a CT scanner (Radon transform): the digit"),
    "rotation": ("structured", ROTATION_BINS, "a rotated MNIST digit: the 45-degree bin of the angle"),
    "position": ("structured", POSITION_CELLS ** 2, "a half-size MNIST digit placed at random: its 3 x 3 cell"),
    "count": ("structured", MAX_COUNT, "1-4 half-size MNIST digits: how many"),
}
GROUPS = {t: g for t, (g, _, _) in TASKS.items()}
FASHION_NAMES = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot"]


def _rng(task: str) -> np.random.Generator:
    return np.random.default_rng([SEED, zlib.crc32(task.encode())])


def _class_names(task: str) -> list[str]:
    n = TASKS[task][1]
    if task == "fashion-mnist":
        return list(FASHION_NAMES)
    if task == "rotation":
        return [f"{45 * k}-{45 * (k + 1)}deg" for k in range(n)]
    if task == "position":
        return [f"row{r}-col{c}" for r in range(POSITION_CELLS) for c in range(POSITION_CELLS)]
    if task == "count":
        return [str(k + 1) for k in range(n)]
    return [str(d) for d in range(10)]


# ---------------------------------------------------------------------------- generators
def _half(digits28: np.ndarray) -> np.ndarray:
    """28 x 28 digits at half size (14 x 14, 2 x 2 means), float."""
    d = digits28.astype(np.float64)
    return d.reshape(len(d), 14, 2, 14, 2).mean(axis=(2, 4))


def rotation_task(digits32: np.ndarray, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Each of ``n`` random digits turned by an angle uniform in [0, 360) about the frame's centre
    (bilinear, ``scipy.ndimage.rotate``); label: ``floor(angle / 45)``."""
    from scipy import ndimage  # deferred: loads scipy

    src = rng.integers(0, len(digits32), n)
    angles = rng.uniform(0.0, 360.0, n)
    out = np.empty((n, SIZE, SIZE), np.uint8)
    for i in range(n):
        out[i] = np.clip(np.rint(ndimage.rotate(digits32[src[i]].astype(np.float64), angles[i], reshape=False,
                                                order=1, mode="constant")), 0, 255)
    labels = np.minimum((angles // (360.0 / ROTATION_BINS)).astype(np.int64), ROTATION_BINS - 1)
    return {"x": out, "y": labels, "angles": angles, "sources": src}


def position_task(digits28: np.ndarray, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A half-size (14 px) digit at a top-left offset ``(r, c)`` uniform in 0..18; label: the
    3 x 3 cell of its centre, ``3 * (3 r // 19) + (3 c // 19)``."""
    src = rng.integers(0, len(digits28), n)
    small = _half(digits28[src])
    span = SIZE - 14 + 1  # 19 offsets
    offsets = rng.integers(0, span, size=(n, 2))
    out = np.zeros((n, SIZE, SIZE))
    for i, (r, c) in enumerate(offsets):
        out[i, r:r + 14, c:c + 14] = small[i]
    cells = offsets * POSITION_CELLS // span
    return {"x": np.clip(np.rint(out), 0, 255).astype(np.uint8), "y": (POSITION_CELLS * cells[:, 0] + cells[:, 1]),
            "offsets": offsets, "sources": src}


def count_task(digits28: np.ndarray, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """1 to 4 (uniform) half-size digits, each in its own quadrant of the canvas (16 x 16 cells,
    jittered 0-2 px), composited by maximum; label: the count minus one."""
    counts = rng.integers(1, MAX_COUNT + 1, n)
    out = np.zeros((n, SIZE, SIZE))
    sources = np.full((n, MAX_COUNT), -1)
    for i, k in enumerate(counts):
        cells = rng.permutation(4)[:k]
        src = rng.integers(0, len(digits28), k)
        sources[i, :k] = src
        jitter = rng.integers(0, 3, size=(k, 2))
        for cell, s, (dr, dc) in zip(cells, _half(digits28[src]), jitter):
            r, c = 16 * (cell // 2) + dr, 16 * (cell % 2) + dc
            out[i, r:r + 14, c:c + 14] = np.maximum(out[i, r:r + 14, c:c + 14], s)
    return {"x": np.clip(np.rint(out), 0, 255).astype(np.uint8), "y": counts - 1, "counts": counts,
            "sources": sources}


def sinogram_task(digits32: np.ndarray, labels: np.ndarray, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The Radon transform of ``n`` random digits: row ``a`` is the sum along columns of the digit
    rotated by ``180 a / 32`` degrees (parallel-beam CT, 32 views of 32 detectors), scaled to
    0-255 by the largest line integral of the set; label: the digit."""
    from scipy import ndimage  # deferred: loads scipy

    src = rng.integers(0, len(digits32), n)
    stack = digits32[src].astype(np.float64)
    sino = np.empty((n, SINOGRAM_ANGLES, SIZE))
    for a in range(SINOGRAM_ANGLES):
        turned = ndimage.rotate(stack, 180.0 * a / SINOGRAM_ANGLES, axes=(1, 2), reshape=False, order=1)
        sino[:, a] = turned.sum(axis=1)
    sino *= 255.0 / max(float(sino.max()), 1e-9)
    return {"x": np.clip(np.rint(sino), 0, 255).astype(np.uint8), "y": np.asarray(labels)[src], "sources": src}


def task_arrays(task: str, digits: dict[str, np.ndarray], fashion: Path | None = None) -> dict[str, np.ndarray]:
    """The arrays of one task: ``train_x, train_y, test_x, test_y`` (uint8 ``(n, 32, 32)``, int64
    labels) and the task's answers (``angles``, ``offsets``, ``counts``; train examples first).
    ``digits``: the prepared digits arrays (:func:`shiftbench.demo.datasets.load_prepared`)."""
    rng = _rng(task)
    n = N_TRAIN + N_TEST
    if task == "uci-digits":
        x, y = digits["uci_x"], digits["uci_y"]  # already in a seeded random order
        return {"train_x": x[:-N_TEST], "train_y": y[:-N_TEST], "test_x": x[-N_TEST:], "test_y": y[-N_TEST:]}
    if task == "fashion-mnist":
        from shiftbench.demo.data import (  # deferred: loads Pillow, loads pyarrow
            pad_mnist,
            read_fashion_mnist,
        )

        if fashion is None:
            raise DataError("Fashion-MNIST is not here: install Debian's dataset-fashion-mnist or put its four IDX "
                            "files in <data-dir>/fashion-mnist")
        out = {}
        for split, k in (("train", N_TRAIN), ("test", N_TEST)):
            x, y = read_fashion_mnist(fashion, split)
            idx = np.sort(rng.permutation(len(x))[:k])
            out[f"{split}_x"], out[f"{split}_y"] = pad_mnist(x[idx]), y[idx]
        return out
    held32, held_y = digits["test_x"], digits["test_y"]
    held28 = held32[:, 2:30, 2:30]
    if task == "rotation":
        made = rotation_task(held32, n, rng)
    elif task == "position":
        made = position_task(held28, n, rng)
    elif task == "count":
        made = count_task(held28, n, rng)
    elif task == "sinogram":
        made = sinogram_task(held32, held_y, n, rng)
    else:
        raise DataError(f"unknown mini-VTAB task {task!r}; tasks: {', '.join(TASKS)}")
    out = {"train_x": made["x"][:N_TRAIN], "train_y": made["y"][:N_TRAIN].astype(np.int64),
           "test_x": made["x"][N_TRAIN:], "test_y": made["y"][N_TRAIN:].astype(np.int64)}
    out.update({k: v for k, v in made.items() if k not in ("x", "y")})
    return out


# ---------------------------------------------------------------------------- files and registry
def task_path(workspace: Path | str, task: str) -> Path:
    return Path(workspace) / "data" / DATA_DIR / f"{task}.npz"


def _meta(path: Path) -> dict | None:
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            for k in ("train_x", "train_y", "test_x", "test_y"):
                z[k].shape  # noqa: B018 - a truncated file fails here
            return meta
    except Exception:  # noqa: BLE001 - any unreadable file is rebuilt
        return None


def write_task(workspace: Path | str, task: str, digits: dict[str, np.ndarray], source: str,
               fashion: Path | None = None) -> Path:
    """Write ``<workspace>/data/minivtab/<task>.npz`` unless an up-to-date one exists (same version
    and digits source); atomic."""
    path = task_path(workspace, task)
    meta = _meta(path) if path.exists() else None
    if meta is not None and meta.get("version") == VERSION and meta.get("source") == source:
        return path
    arrays = task_arrays(task, digits, fashion)
    group, classes, description = TASKS[task]
    meta = {"version": VERSION, "source": source, "task": task, "group": group, "num_classes": classes,
            "description": description, "seed": SEED, "n_train": len(arrays["train_y"]),
            "n_test": len(arrays["test_y"])}

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as fh:
            np.savez(fh, meta=np.array(json.dumps(meta)), **arrays)
    atomic_write_with(path, write)
    return path


def _build(root: Path, task: str, split: str) -> ArrayDataset:
    """A mini-VTAB split from ``<root>/<task>.npz`` (root: ``<data_root>/minivtab``)."""
    path = Path(root) / f"{task}.npz"
    name = f"minivtab-{task}-{split}"
    if not path.is_file():
        raise LayoutError(name, f"{path} (written by shiftbench.demo.transfer.mini_vtab_tasks / `make demo`)", path)
    with np.load(path, allow_pickle=False) as z:
        x, y = z[f"{split}_x"], z[f"{split}_y"]
    return ArrayDataset(name=name, ids=[f"{task}/{split}/{i:05d}" for i in range(len(y))],
                        targets=[int(t) for t in y], label_space=f"minivtab-{task}", num_classes=TASKS[task][1],
                        class_names=_class_names(task), root=Path(root), images=x)


def _full(_: str):
    from shiftbench.views import FullView  # deferred: registers on import

    return FullView()


def register_mini_vtab() -> None:
    """Register the dataset ``digits-minivtab`` and the settings ``minivtab-<task>-<split>``."""
    register_dataset("digits-minivtab", default_dir=DATA_DIR, label_space="minivtab",
                     layout="<task>.npz: a mini-VTAB task of the digits demo (task=, split=)")(_build)
    for task, (group, _, description) in TASKS.items():
        for split in ("train", "test"):
            register_setting(Setting(f"minivtab-{task}-{split}", "digits-minivtab", _full,
                                     f"mini-VTAB {group} task, {split} split: {description}",
                                     dataset_args=(("task", task), ("split", split))))


register_mini_vtab()


# ---------------------------------------------------------------------------- tasks and the run
def mini_vtab_tasks(data_dir: Path | str, workspace: Path | str) -> list:
    """Write every task's arrays once into ``<workspace>/data/minivtab`` (module docstring) and
    return them as :class:`~shiftbench.studies.transfer.TransferTask` objects with their groups.
    Needs the prepared digits (:func:`shiftbench.demo.datasets.prepare_data`); Fashion-MNIST is a
    task only where it is found (:func:`shiftbench.demo.data.find_fashion_mnist`)."""
    from shiftbench.demo.data import (
        find_fashion_mnist,  # deferred: loads Pillow, loads pyarrow
    )
    from shiftbench.demo.datasets import (  # deferred: loads Pillow, loads pyarrow
        load_prepared,
        prepare_data,
    )
    from shiftbench.studies.transfer import TransferTask  # deferred: loads torch on use

    _, meta, _ = prepare_data(data_dir, workspace)
    source = f"{meta.get('source_digest')}/{meta.get('train_digest')}"
    fashion = find_fashion_mnist(data_dir)
    digits: dict[str, np.ndarray] | None = None
    tasks = []
    for task, (group, _, _) in TASKS.items():
        if task == "fashion-mnist" and fashion is None:
            continue
        meta_ = _meta(task_path(workspace, task)) if task_path(workspace, task).exists() else None
        if meta_ is None or meta_.get("version") != VERSION or meta_.get("source") != source:
            digits = digits if digits is not None else load_prepared(workspace)
            write_task(workspace, task, digits, source, fashion)
        tasks.append(TransferTask(task, f"minivtab-{task}-train", f"minivtab-{task}-test", group))
    return tasks


def _torch_models(models: Sequence[Any] | str) -> list[Any]:
    from shiftbench.demo.zoo import select_zoo  # deferred: loads Pillow, loads pyarrow

    chosen = select_zoo(models if isinstance(models, str) else
                        [m if isinstance(m, str) else m.name for m in models])
    wanted = None if isinstance(models, str) else {m if isinstance(m, str) else m.name for m in models}
    return [m for m in chosen if m.framework == "torch" and (wanted is None or m.name in wanted)]


def _transfer_shard(names: list[str], tasks: list[Any], workspace: str, store: str) -> pd.DataFrame:
    """Load the zoo models ``names`` and transfer each to every task (run in a worker process)."""
    from shiftbench.demo.zoo import select_zoo  # deferred: loads Pillow, loads pyarrow
    from shiftbench.models import load_model  # deferred: registers on import
    from shiftbench.studies.transfer import transfer  # deferred: loads torch on use

    ws = Path(workspace)
    loaded = [load_model(m.spec(ws), name=m.name, model_type=m.model_type, tags=m.tags, arch=m.recipe["arch"])
              for m in select_zoo(names) if m.name in set(names)]
    return transfer(loaded, tasks, store=store, data_root=ws / "data", progress=False)


def run_transfer_demo(data_dir: Path | str, workspace: Path | str, store: Path | str | None = None,
                      models: Sequence[Any] | str = "all", *, jobs: int = 2) -> pd.DataFrame:
    """Transfer the zoo's torch models (trained and cached in ``workspace`` by
    :func:`shiftbench.demo.run_digits_demo`) to every mini-VTAB task with the linear protocol
    (VTAB-1k: 800 + 200 examples, ``C`` chosen on the 200), into ``store`` (default: the digits
    store ``<workspace>/store``), so its ``transfer:<task>`` cells sit beside the robustness
    settings. Resumable: finished (model, task) keys and cached features are not recomputed.
    ``jobs`` worker processes share the models. Returns one row per (model, task)
    (:func:`shiftbench.transfer`'s columns; none when ``models`` holds no torch model)."""
    from shiftbench.demo.run import (
        _init_worker,  # deferred: loads Pillow, loads pyarrow
    )

    ws = Path(workspace)
    store = Path(store) if store is not None else ws / "store"
    tasks = mini_vtab_tasks(data_dir, ws)
    names = [m.name for m in _torch_models(models)]
    if not names:  # only scikit-learn models: none has a penultimate layer to probe
        from shiftbench.studies.transfer import COLUMNS  # deferred: loads torch on use

        return pd.DataFrame(columns=COLUMNS)
    shards = [names[i::max(1, jobs)] for i in range(max(1, jobs)) if names[i::max(1, jobs)]]
    start = time.perf_counter()
    if len(shards) == 1:
        frames = [_transfer_shard(shards[0], tasks, str(ws), str(store))]
    else:
        import multiprocessing as mp  # deferred: registers on import

        method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
        with ProcessPoolExecutor(max_workers=len(shards), mp_context=mp.get_context(method),
                                 initializer=_init_worker) as pool:
            frames = list(pool.map(_transfer_shard, shards, [tasks] * len(shards), [str(ws)] * len(shards),
                                   [str(store)] * len(shards)))
    rows = pd.concat(frames, ignore_index=True)
    order = {n: i for i, n in enumerate(names)}
    rows = rows.sort_values(["model", "task"], key=lambda s: s.map(order) if s.name == "model" else s,
                            kind="stable").reset_index(drop=True)
    rows.attrs["seconds"] = time.perf_counter() - start
    return rows
