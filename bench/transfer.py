"""Benchmark: VTAB-1k linear probe (penultimate features + the C grid) vs the forward pass alone.

Issue 20, item 5. One model on one 1,000-example task: the 1,797 UCI digits of scikit-learn
(``load_digits``, 8 x 8 upscaled to 32 x 32 PNGs, in class folders), 1,000 drawn as VTAB-1k does
(seed 0, 800 train + 200 validation) and the other 797 as the test set. Timed on the *same*
1,000 images in one process, interleaved, best of ``--repeat``:

* **forward**: decode, the model's eval transform, and the model's forward pass (logits);
* **probe**: :func:`shiftbench.studies.transfer.extract_features` (the same decode and forward,
  penultimate features by a hook) plus :func:`~shiftbench.studies.transfer.linear_probe` (5 values
  of C fit on the 800, scored on the 200, the best refit on all 1,000 and scored on the test
  features, extracted beforehand and not timed).

Target: probe / forward <= 1.25 (the probe and its grid add at most 25% to the forward pass).
Models: ``--model timm-resnet18`` (timm ResNet-18, random weights, 224 px crops of a 256 px resize:
a realistic transfer backbone) and ``--model digits`` (the digits zoo's CNN of width 8, 32 px: a
forward pass so cheap that the probe dominates; printed for the record).

Usage: python bench/transfer.py [--model timm-resnet18|digits|both] [--repeat 2] [--batch-size 64]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from sklearn.datasets import load_digits

from shiftbench.datasets import load_dataset
from shiftbench.models import load_model
from shiftbench.studies import transfer as T

TARGET = 1.25


def digits_task(root: Path) -> tuple[Path, Path]:
    """The UCI digits as 32 x 32 PNGs: ``train/<digit>/`` (all 1,797; 1,000 are drawn) and ``test/<digit>/``
    (the 797 not drawn)."""
    d = load_digits()
    images = (np.kron(d.images, np.ones((4, 4))) * (255 / 16)).clip(0, 255).astype(np.uint8)
    for split in ("train", "test"):
        for c in range(10):
            (root / split / str(c)).mkdir(parents=True, exist_ok=True)
    for i, (img, y) in enumerate(zip(images, d.target)):
        Image.fromarray(img).save(root / "train" / str(y) / f"{i:04d}.png")
    return root / "train", root / "test"


def model(name: str, tmp: Path):
    if name == "digits":
        from shiftbench.demo.archs import digits_cnn  # registers the digits archs

        torch.manual_seed(0)
        torch.save(digits_cnn(8).state_dict(), tmp / "cnn.pt")
        return load_model(f"checkpoint:{tmp / 'cnn.pt'}", arch="digits-cnn-w8")
    return load_model("timm:resnet18", pretrained=False)


def forward_only(loaded, ds, idx, batch_size: int) -> float:
    start = time.perf_counter()
    with torch.inference_mode():
        for x, _, _ in T._batches(loaded, ds, idx, batch_size, 0):
            loaded.module(x)
    return time.perf_counter() - start


def probe(loaded, ds, idx, n_train: int, test, batch_size: int) -> tuple[float, float, T.ProbeResult]:
    start = time.perf_counter()
    feats, pos, _ = T.extract_features(loaded, ds, idx, batch_size=batch_size)
    mid = time.perf_counter()
    y = np.asarray(ds.targets)[idx][pos]
    result = T.linear_probe(feats[:n_train], y[:n_train], feats[n_train:], y[n_train:], *test)
    return mid - start, time.perf_counter() - mid, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="both", choices=["timm-resnet18", "digits", "both"])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        train_dir, _ = digits_task(tmp / "digits")
        ds = load_dataset("folder", path=str(train_dir))
        tr, va, _ = T.draw_split(len(ds), seed=0)
        idx = np.concatenate([tr, va])
        rest = np.setdiff1d(np.arange(len(ds)), idx)
        print(f"task: UCI digits, {len(idx):,} drawn (800 + 200), {len(rest):,} test; "
              f"{torch.get_num_threads()} threads")
        for name in (["timm-resnet18", "digits"] if args.model == "both" else [args.model]):
            loaded = model(name, tmp)
            test_feats, test_pos, _ = T.extract_features(loaded, ds, rest, batch_size=args.batch_size)
            test = (test_feats, np.asarray(ds.targets)[rest][test_pos])
            fwds, runs = [], []
            for _ in range(args.repeat):  # interleaved, so a busy machine slows both alike
                fwds.append(forward_only(loaded, ds, idx, args.batch_size))
                runs.append(probe(loaded, ds, idx, len(tr), test, args.batch_size))
            fwd = min(fwds)
            feat_s, probe_s, result = min(runs, key=lambda r: r[0] + r[1])
            ratio = (feat_s + probe_s) / fwd
            print(f"{name}: forward {fwd:.2f} s | features {feat_s:.2f} s + probe grid {probe_s:.2f} s "
                  f"({len(T.C_GRID)} C, dim {test_feats.shape[1]}) = {feat_s + probe_s:.2f} s | "
                  f"ratio {ratio:.2f} (target <= {TARGET:.2f}: {'met' if ratio <= TARGET else 'NOT met'}) | "
                  f"C={result.chosen:g}, test top-1 {result.accuracy:.1f}%")


if __name__ == "__main__":
    main()
