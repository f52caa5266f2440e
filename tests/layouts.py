"""Tiny replicas of the real on-disk dataset layouts, with real image files written by PIL.

Each ``make_*`` function writes one layout under a folder and returns what a test needs to
check against (paths, expected ids/targets). Images are a few pixels, so a replica takes
milliseconds; the class-folder layouts create every expected (empty) class folder so strict
layout checks pass, and put images in a handful of them.
"""
from __future__ import annotations

import io
import json
import pickle
import struct
import zlib
from pathlib import Path

import numpy as np
from PIL import Image

from shiftbench.datasets import classmaps as cm

RED, BLUE, GREEN = (255, 0, 0), (0, 0, 255), (0, 255, 0)


def write_image(path: Path, size: tuple[int, int] = (12, 10), color=GREEN, mode: str = "RGB", fmt: str | None = None,
                **save) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size, color).save(path, format=fmt, **save)
    return path


def make_wnid_folders(root: Path, wnids, images: dict[str, int], ext: str = ".JPEG") -> dict[str, int]:
    """Create ``root/<wnid>/`` for every wnid and ``images[wnid]`` images in some; returns id -> target."""
    index = cm.imagenet_wnid_to_index()
    for w in wnids:
        (root / w).mkdir(parents=True, exist_ok=True)
    expected = {}
    for w, n in images.items():
        for k in range(n):
            name = f"{w}_{k}{ext}"
            write_image(root / w / name, fmt="PNG" if ext.lower() == ".png" else "JPEG")
            expected[f"{w}/{name}"] = index[w]
    return expected


def make_imagenet_val_folders(root: Path) -> dict[str, int]:
    wnids = cm.imagenet_wnids()
    return make_wnid_folders(root, wnids, {wnids[0]: 2, wnids[999]: 1, wnids[417]: 1})


def make_imagenet_val_flat(root: Path, labels: str) -> dict[str, int]:
    """Flat val images plus a labels file: ``kaggle`` (LOC_val_solution.csv) or ``csv`` (labels.csv)."""
    wnids = cm.imagenet_wnids()
    picks = {"ILSVRC2012_val_00000001.JPEG": 65, "ILSVRC2012_val_00000002.JPEG": 970,
             "ILSVRC2012_val_00000003.JPEG": 230}
    for f in picks:
        write_image(root / f, fmt="JPEG")
    if labels == "kaggle":
        rows = ["ImageId,PredictionString"] + [f"{f[:-5]},{wnids[t]} 1 2 30 40 {wnids[t]} 5 6 7 8"
                                               for f, t in picks.items()]
        (root / "LOC_val_solution.csv").write_text("\n".join(rows) + "\n")
    else:  # int index for one row, wnid for the others
        rows = ["filename,label"] + [f"{f},{t if i == 0 else wnids[t]}" for i, (f, t) in enumerate(picks.items())]
        (root / "labels.csv").write_text("\n".join(rows) + "\n")
    return picks


def make_imagenetv2(parent: Path, variant: str) -> tuple[Path, dict[str, int]]:
    root = parent / f"imagenetv2-{variant}-format-val"
    for i in range(1000):
        (root / str(i)).mkdir(parents=True)
    expected = {}
    for i in (0, 7, 999):
        write_image(root / str(i) / f"img{i}.jpeg", fmt="JPEG")
        expected[f"{i}/img{i}.jpeg"] = i
    return root, expected


def make_wnid_dataset(root: Path, which: str) -> dict[str, int]:
    if which == "imagenet-a":
        wnids = [cm.imagenet_wnids()[i] for i in cm.imagenet_a_indices()]
    elif which == "imagenet-r":
        wnids = [cm.imagenet_wnids()[i] for i in cm.imagenet_r_indices()]
    else:
        wnids = list(cm.imagenet_wnids())
    return make_wnid_folders(root, wnids, {wnids[0]: 1, wnids[-1]: 2}, ext=".jpg")


def bordered_png(path: Path, size=(20, 16), border: int = 2, inside=BLUE, edge=RED) -> Path:
    """A PNG like ObjectNet's: ``inside`` colour with a ``border`` px ``edge`` frame."""
    img = Image.new("RGB", size, edge)
    img.paste(Image.new("RGB", (size[0] - 2 * border, size[1] - 2 * border), inside), (border, border))
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path, format="PNG")
    return path


def make_objectnet(root: Path) -> tuple[dict[str, int], str]:
    """``root/images/<folder>/`` for all 113 overlapping folders (+ one non-overlapping folder
    with an image, which must be left out); returns id -> objectnet-113 index, and that folder."""
    images = root / "images"
    wanted = cm.objectnet_folder_to_index()
    for f in wanted:
        (images / f).mkdir(parents=True)
    other = next(f for f in cm.objectnet_folder_to_class() if f not in wanted)
    bordered_png(images / other / "x.png")
    expected = {}
    for f in list(wanted)[:2]:
        for k in range(2):
            bordered_png(images / f / f"{k}.png")
            expected[f"{f}/{k}.png"] = wanted[f]
    return expected, other


def vid_anchors(n: int = 2) -> list[str]:
    """The first ``n`` anchors (sorted) of the package pm-sets that have full 20-frame sets."""
    sets = cm.vid_pmsets()
    return [a for a in sorted(sets) if len(sets[a]) == 20][:n]


def make_vid(root: Path, anchors: list[str]) -> list[str]:
    """Write the anchor and neighbour frames of ``anchors`` at their label-json paths; returns the frames."""
    frames = []
    for a in anchors:
        for f in (a, *cm.vid_pmsets()[a]):
            write_image(root / f, size=(8, 8), fmt="JPEG")
            frames.append(f)
    return sorted(frames)


def ytbb_anchors() -> list[str]:
    """Two valid anchors: one with a single label, one with several."""
    labels = cm.ytbb_anchor_labels()
    single = next(a for a in sorted(labels) if len(labels[a]) == 1)
    multi = next(a for a in sorted(labels) if len(labels[a]) >= 2)
    return [single, multi]


def make_ytbb(root: Path, anchors: list[str], neighbours=(-2, -1, 1, 3)) -> None:
    videos = root / "ytbb_videos"
    for a in anchors:
        d, f = a.split("/")
        n = int(f[len("frame-"):-len(".jpg")])
        for off in (0, *neighbours):
            write_image(videos / d / f"frame-{n + off}.jpg", size=(8, 8), fmt="JPEG")
    write_image(videos / "not_an_anchor_123" / "frame-1.jpg", size=(8, 8), fmt="JPEG")


def cifar_arrays(n: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8), rng.integers(0, 10, n)


def make_cifar10(root: Path, images: np.ndarray, labels: np.ndarray) -> Path:
    """The official python batch: a pickled dict with bytes keys and (N, 3072) CHW-flattened data."""
    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True)
    batch = {b"batch_label": b"testing batch 1 of 1", b"labels": [int(x) for x in labels],
             b"data": images.transpose(0, 3, 1, 2).reshape(len(images), -1),
             b"filenames": [f"img_{i}.png".encode() for i in range(len(images))]}
    with open(d / "test_batch", "wb") as f:
        pickle.dump(batch, f, protocol=2)
    return d / "test_batch"


def png_header_only(path: Path, width: int, height: int) -> Path:
    """A PNG whose IHDR claims ``width x height`` pixels, with one tiny IDAT chunk: a
    decompression-bomb lookalike that costs nothing to write."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b"")
    path.write_bytes(data)
    return path


def exif_rotated_jpeg(path: Path, size=(30, 10), orientation: int = 6) -> Path:
    img = Image.new("RGB", size, GREEN)
    exif = Image.Exif()
    exif[0x0112] = orientation
    img.save(path, format="JPEG", exif=exif.tobytes())
    return path


def truncated_jpeg(path: Path) -> Path:
    rng = np.random.default_rng(1)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(buf, format="JPEG")
    path.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    return path


def write_json(path: Path, obj) -> Path:
    path.write_text(json.dumps(obj))
    return path
