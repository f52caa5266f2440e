"""In-memory datasets: CIFAR-10 (python batches), CIFAR-10.1 (.npy), CIFAR-10.2 (.npz) and any
arrays the caller holds. All are :class:`~shiftbench.datasets.base.ArrayDataset` objects with
zero-padded index ids (``00000``, ``00001``, ... so sorted ids keep the file's order).
"""
from __future__ import annotations

import codecs
import importlib
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from shiftbench.datasets._scan import LayoutError
from shiftbench.datasets.base import ArrayDataset
from shiftbench.datasets.registry import register_dataset
from shiftbench.errors import DataError

CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")

#: The only globals a CIFAR python batch may reference: numpy's array reconstruction.
_NUMPY_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),  # pickle protocol 5
    ("_codecs", "encode"),  # bytes in a protocol-2 pickle written by Python 3
}


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Unpickles plain containers and numpy arrays, and refuses every other global, so a
    crafted "batch" file cannot run code. CIFAR's official python batches are pickles of a
    dict of bytes keys, lists and one uint8 array (Krizhevsky 2009), so they pass."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _NUMPY_GLOBALS:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name} (only numpy arrays are allowed)")
        if module == "_codecs":
            return codecs.encode
        if module != "numpy":
            sub = module.split(".", 2)[2]  # numpy.core.X / numpy._core.X -> X
            for mod in (f"numpy._core.{sub}", f"numpy.core.{sub}"):
                try:
                    return getattr(importlib.import_module(mod), name)
                except ImportError:
                    continue
        return getattr(np, name)


def load_cifar_batch(path: Path | str) -> dict[bytes, Any]:
    """One CIFAR python batch (``pickle`` with ``encoding="bytes"``, numpy globals only)."""
    try:
        with open(path, "rb") as f:
            batch = _NumpyOnlyUnpickler(f, encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, ImportError, IndexError) as exc:
        raise DataError(f"{path}: not a CIFAR python batch ({type(exc).__name__}: {exc})") from exc
    if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
        raise DataError(f"{path}: not a CIFAR python batch (expected a dict with b'data' and b'labels')")
    return batch


def _ids(n: int) -> list[str]:
    width = max(5, len(str(n - 1)))
    return [f"{i:0{width}d}" for i in range(n)]


def _check_labels(labels: Any, n: int, num_classes: int | None, where: str) -> list[int]:
    arr = np.asarray(labels)
    if arr.ndim != 1 or len(arr) != n:
        raise DataError(f"{where}: {n} images but labels of shape {arr.shape}")
    if n and not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise DataError(f"{where}: labels must be integers, got dtype {arr.dtype}")
    if n and (arr.min() < 0 or (num_classes is not None and arr.max() >= num_classes)):
        bad = int(np.flatnonzero((arr < 0) | (arr >= (num_classes or np.iinfo(np.int64).max)))[0])
        raise DataError(f"{where}: label {int(arr[bad])} at index {bad} is outside 0..{(num_classes or 0) - 1}")
    return [int(x) for x in arr]


def _check_images(images: Any, where: str) -> np.ndarray:
    arr = np.asarray(images)
    if arr.dtype != np.uint8:
        if np.issubdtype(arr.dtype, np.floating) and arr.size and 0.0 <= float(arr.min()) and float(arr.max()) <= 1.0:
            arr = np.round(arr * 255.0).astype(np.uint8)
        else:
            raise DataError(f"{where}: images must be uint8 (or float in [0, 1]), got {arr.dtype}")
    ok = arr.ndim == 3 or (arr.ndim == 4 and (arr.shape[-1] in (1, 3, 4) or arr.shape[1] in (1, 3)))
    if not ok:
        raise DataError(f"{where}: images must be (N, H, W), (N, H, W, C) or (N, C, H, W), got shape {arr.shape}")
    return arr


def from_arrays(images: Any, labels: Sequence[int] | np.ndarray, name: str = "arrays",
                class_names: Sequence[str] | None = None, label_space: str | None = None,
                num_classes: int | None = None) -> ArrayDataset:
    """A dataset over images in memory: uint8 (or float in [0, 1]) arrays of shape
    ``(N, H, W)``, ``(N, H, W, C)`` with C in 1, 3, 4, or ``(N, C, H, W)`` with C in 1, 3, and
    integer labels. ``num_classes`` defaults to ``len(class_names)`` or ``max(labels) + 1``;
    ``label_space`` to ``custom:<name>``.

    >>> import numpy as np
    >>> ds = from_arrays(np.zeros((2, 8, 8, 3), np.uint8), [0, 1], name="toy")
    >>> ds.ids, ds.label_space, ds.load(1).size
    (['00000', '00001'], 'custom:toy', (8, 8))
    """
    arr = _check_images(images, name)
    k = num_classes if num_classes is not None else (len(class_names) if class_names is not None else None)
    targets = _check_labels(labels, len(arr), k, name)
    k = k if k is not None else (max(targets) + 1 if targets else 0)
    return ArrayDataset(name=name, ids=_ids(len(arr)), targets=targets, label_space=label_space or f"custom:{name}",
                        num_classes=k, class_names=list(class_names) if class_names is not None else None,
                        images=arr)


def _first_file(root: Path, name: str, expected: str, candidates: Sequence[str]) -> Path:
    if not root.is_dir():
        raise LayoutError(name, expected, root)
    for c in candidates:
        if (root / c).is_file():
            return root / c
    raise LayoutError(name, expected, root / candidates[0])


def cifar10(root: Path | str, name: str = "cifar10") -> ArrayDataset:
    """CIFAR-10 test set (Krizhevsky 2009), 10,000 32x32 images: ``root/test_batch`` or
    ``root/cifar-10-batches-py/test_batch`` (the official python batch, read with a
    numpy-only unpickler)."""
    root = Path(root)
    expected = f"{root}/cifar-10-batches-py/test_batch (the CIFAR-10 python version)"
    path = _first_file(root, name, expected, ("cifar-10-batches-py/test_batch", "test_batch"))
    batch = load_cifar_batch(path)
    data = np.asarray(batch[b"data"])
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise DataError(f"{path}: b'data' must be uint8 of shape (N, 3072), got {data.dtype} {data.shape}")
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    ds = from_arrays(images, batch[b"labels"], name=name, class_names=CIFAR10_CLASSES, label_space="cifar10")
    ds.root = path.parent
    return ds


def _load_npy(path: Path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise DataError(f"{path}: cannot read as a numpy array without pickle ({exc})") from exc


def cifar10_1(root: Path | str, name: str = "cifar10.1", version: str = "v6") -> ArrayDataset:
    """CIFAR-10.1 (Recht et al. 2018), 2,000 images: ``root/cifar10.1_<version>_data.npy`` and
    ``..._labels.npy`` (``root`` or ``root/datasets``), read with ``allow_pickle=False``."""
    root = Path(root)
    if (root / "datasets").is_dir() and not (root / f"cifar10.1_{version}_data.npy").exists():
        root = root / "datasets"
    expected = f"{root}/cifar10.1_{version}_data.npy + {root}/cifar10.1_{version}_labels.npy"
    data = _first_file(root, name, expected, (f"cifar10.1_{version}_data.npy",))
    labels = _first_file(root, name, expected, (f"cifar10.1_{version}_labels.npy",))
    ds = from_arrays(_check_images(_load_npy(data), str(data)), _load_npy(labels), name=name,
                     class_names=CIFAR10_CLASSES, label_space="cifar10")
    ds.root = root
    return ds


def cifar10_2(root: Path | str, name: str = "cifar10.2") -> ArrayDataset:
    """CIFAR-10.2 (Lu et al. 2020), 2,000 test images: ``root/cifar102_test.npz`` with arrays
    ``images`` and ``labels``, read with ``allow_pickle=False``."""
    root = Path(root)
    expected = f"{root}/cifar102_test.npz (arrays 'images', 'labels')"
    path = _first_file(root, name, expected, ("cifar102_test.npz",))
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in ("images", "labels") if k not in z.files]
            if missing:
                raise DataError(f"{path}: no array {missing[0]!r} (has {', '.join(z.files) or 'none'})")
            images, labels = z["images"], z["labels"]
    except (ValueError, OSError) as exc:
        raise DataError(f"{path}: cannot read as an .npz without pickle ({exc})") from exc
    ds = from_arrays(images, labels, name=name, class_names=CIFAR10_CLASSES, label_space="cifar10")
    ds.root = root
    return ds


register_dataset("cifar10", default_dir="cifar10", alt_dirs=("cifar-10-batches-py", "cifar-10"), label_space="cifar10",
                 layout="[cifar-10-batches-py/]test_batch (python pickle batch)")(cifar10)
register_dataset("cifar10.1", default_dir="cifar10.1", alt_dirs=("cifar-10.1", "CIFAR-10.1"), label_space="cifar10",
                 layout="cifar10.1_v6_data.npy + cifar10.1_v6_labels.npy")(cifar10_1)
register_dataset("cifar10.2", default_dir="cifar10.2", alt_dirs=("cifar-10.2",), label_space="cifar10",
                 layout="cifar102_test.npz (images, labels)")(cifar10_2)
