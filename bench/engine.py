"""Benchmark: the engine's end-to-end throughput against the model's own forward-pass bound.

Run side by side in one process, on generated 224 px JPEGs (crops of scikit-image's real
photos) in an ImageNet-val layout, with the real EfficientNet-Lite0 weights:

1. **bound**: the model's forward pass alone on pre-decoded, pre-resized tensors (same batch
   size, channels-last, inference mode) - what no loader can beat on this machine;
2. **engine**: ``shiftbench.evaluate`` on the files (decode in DataLoader workers, resize, crop,
   forward, views, Parquet parts), wall time; ratio engine / bound (target >= 0.8);
3. **decode once**: ``val`` alone vs ``val`` plus all five ``val-on-*-classes`` settings in one
   command (target <= 1.1x; the published testbed makes six passes).

Usage: python bench/engine.py [--images 256] [--batch-size 32] [--workers 1] [--repeat 2]
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

SUBSETS = ["val-on-imagenet-a-classes", "val-on-imagenet-r-classes", "val-on-objectnet-classes",
           "val-on-vid-robust-classes", "val-on-ytbb-robust-classes"]


def make_val(root: Path, n: int, seed: int = 0) -> None:
    """``n`` 224x224 JPEGs cut from real photos, spread over classes that every subset uses."""
    from skimage import data

    from shiftbench.datasets import classmaps as cm

    rng = np.random.default_rng(seed)
    photos = [getattr(data, p)()[..., :3] for p in ("chelsea", "coffee", "astronaut", "rocket", "coffee")]
    subset_classes = sorted(set(cm.imagenet_a_indices()) | set(cm.imagenet_r_indices())
                            | set(cm.imagenet_to_objectnet()) | set(cm.imagenet_to_superclass("imagenet-vid-robust"))
                            | set(cm.imagenet_to_superclass("ytbb-robust")))
    wnids = cm.imagenet_wnids()
    for i in range(n):
        img = photos[i % len(photos)]
        h, w = img.shape[:2]
        s = int(rng.integers(min(h, w) // 2, min(h, w)))
        y, x = int(rng.integers(0, h - s + 1)), int(rng.integers(0, w - s + 1))
        crop = Image.fromarray(img[y:y + s, x:x + s]).resize((224, 224), Image.BICUBIC)
        d = root / wnids[subset_classes[i % len(subset_classes)]]
        d.mkdir(parents=True, exist_ok=True)
        crop.save(d / f"bench_{i:05d}.JPEG", quality=90)


def bound(model, root: Path, batch_size: int) -> float:
    """Images/s of the forward pass alone on pre-decoded tensors."""
    import torch

    from shiftbench.datasets import load_dataset

    ds = load_dataset("imagenet-val", root.parent.parent, strict=False)
    tf = model.preprocessing.transform()
    x = torch.stack([tf(ds.load(i)) for i in range(len(ds))])
    module = model.module.to(memory_format=torch.channels_last)   # as the engine runs it
    with torch.inference_mode():
        module(x[:batch_size].contiguous(memory_format=torch.channels_last))  # warm-up
        t0 = time.perf_counter()
        for start in range(0, len(x), batch_size):
            module(x[start:start + batch_size].contiguous(memory_format=torch.channels_last))
        return len(x) / (time.perf_counter() - t0)


def engine(model, data: Path, settings: list[str], batch_size: int, workers: int) -> tuple[float, float]:
    """(seconds, images/s) of shiftbench.evaluate on a fresh store."""
    from shiftbench.engine import evaluate

    store = Path(tempfile.mkdtemp(prefix="sb-bench-store-"))
    try:
        t0 = time.perf_counter()
        res = evaluate(model, settings, data_root=data, store=store, batch_size=batch_size, workers=workers,
                       partial=True, progress=False)
        dt = time.perf_counter() - t0
        n = int(res.loc[res["setting"] == "val", "n_examples"].iloc[0])
        return dt, n / dt
    finally:
        shutil.rmtree(store, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    from shiftbench.models import load_model

    tmp = Path(tempfile.mkdtemp(prefix="sb-bench-"))
    try:
        root = tmp / "data" / "imagenet" / "val"
        make_val(root, args.images)
        model = load_model("efficientnet-lite0")
        model.module.eval()
        best_bound = max(bound(model, root, args.batch_size) for _ in range(args.repeat))
        runs = [engine(model, tmp / "data", ["val"], args.batch_size, args.workers) for _ in range(args.repeat)]
        t_val, ips = min(runs)
        t_all = min(engine(model, tmp / "data", ["val", *SUBSETS], args.batch_size, args.workers)[0]
                    for _ in range(args.repeat))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"EfficientNet-Lite0, {args.images} generated 224 px JPEGs, batch {args.batch_size}, "
          f"{args.workers} decode worker(s), best of {args.repeat}")
    print(f"  forward pass alone (bound):  {best_bound:7.1f} img/s")
    print(f"  shiftbench.evaluate:         {ips:7.1f} img/s   ({ips / best_bound:.0%} of the bound; target >= 80%)")
    print(f"  val alone:                   {t_val:7.2f} s")
    print(f"  val + 5 val-on-*-classes:    {t_all:7.2f} s   ({t_all / t_val:.2f}x; target <= 1.1x)")


if __name__ == "__main__":
    main()
