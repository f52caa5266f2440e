"""A tiny hand-built testbed and results store for the HTML report tests.

Eight STANDARD models on a line (one is ``resnet50``, the ImageNet-A pivot), six others above
or below it, including a model named ``<img src=x onerror=alert(1)>`` and one whose name holds
``&``, quotes and ``%``; ImageNet-Sketch has only two STANDARD models (too few for a trend),
ObjectNet is absent, and three ImageNet-C settings feed the synthetic-vs-natural section. On the
ImageNet-A classes four STANDARD models lie below resnet50 (86.1%) and three above it, all above
75%: the authors' two lines (recipe taori2020) need three models a side.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from shiftbench.store import Store
from shiftbench.testbed import Testbed

XSS = "<img src=x onerror=alert(1)>"
ODD = "a&b \"quoted\" 'x' 100%"
V2 = "imagenetv2-matched-frequency-format-val"
SKETCH = "imagenet-sketch"
A_X, A_Y = "val-on-imagenet-a-classes", "imagenet-a"
CORRUPTIONS = ["imagenet-c.fog.1_in-memory", "imagenet-c.fog.2_in-memory", "imagenet-c.snow.1_in-memory"]


def tiny_testbed(name: str = "tiny") -> Testbed:
    rng = np.random.default_rng(0)
    rows = []
    std_val = [55.0, 60.0, 64.0, 68.0, 72.0, 76.1, 79.0, 82.0]
    std_a = [76.0, 79.0, 82.0, 84.0, 88.0, 86.1, 89.0, 92.0]         # on the ImageNet-A classes
    for i, x in enumerate(std_val):
        model = "resnet50" if x == 76.1 else f"std{i}"
        rows.append(dict(model=model, model_type="STANDARD", val=x, v2=x - 12 + rng.normal(0, 0.4),
                         sketch=(x - 40 if i < 2 else np.nan), ax=std_a[i], ay=max(1.0, (x - 70) * 3 + 5 + rng.normal(0, 1)),
                         c=[x - 20 - 3 * k + rng.normal(0, 0.5) for k in range(3)]))
    others = [("more0", "MORE_DATA", 66.0, 3.0, 4.0), ("more1", "MORE_DATA", 70.0, 2.0, 1.0),
              ("more2", "MORE_DATA", 74.0, 4.5, 6.0), ("robust0", "ROBUST_INTV", 72.0, -0.5, 8.0),
              ("robust1", "ROBUST_INTV", 69.0, 0.5, 3.0), (XSS, "MORE_DATA", 75.0, 6.0, 5.0),
              (ODD, "ROBUST_INTV", 71.0, 1.0, -2.0)]
    for model, mtype, x, gain, cgain in others:
        rows.append(dict(model=model, model_type=mtype, val=x, v2=x - 12 + gain, sketch=x - 38 + gain,
                         ax=x + 10, ay=max(1.0, (x - 70) * 3 + 5 + 2 * gain),
                         c=[x - 20 - 3 * k + cgain + rng.normal(0, 0.3) for k in range(3)]))
    frame = pd.DataFrame({
        "model": [r["model"] for r in rows], "model_type": [r["model_type"] for r in rows],
        "val": [r["val"] for r in rows], V2: [r["v2"] for r in rows], SKETCH: [r["sketch"] for r in rows],
        A_X: [r["ax"] for r in rows], A_Y: [r["ay"] for r in rows],
        **{c: [r["c"][k] for r in rows] for k, c in enumerate(CORRUPTIONS)},
    })
    frame["val_dataset_size"] = 50_000
    for s in (V2, SKETCH, A_Y, *CORRUPTIONS):
        frame[f"{s}_dataset_size"] = 10_000
    frame[f"{A_X}_dataset_size"] = 10_000
    return Testbed.from_frame(frame, name=name)


def calibration_store(root: Path) -> Path:
    """A results store with finished (model, setting) results carrying ECE, NLL and Brier."""
    store = Store(root)
    for i, (model, setting, acc, ece) in enumerate([
            ("resnet50", "val", 76.1, 3.5), ("resnet50", V2, 63.4, 7.9), (XSS, "val", 75.0, 2.1),
            (XSS, V2, 69.0, 4.4), ("more0", "val", 66.0, 1.2)]):
        store.finish(f"key{i}", {"model": model, "setting": setting, "accuracy": acc, "top5": acc + 15,
                                 "n_examples": 1000, "n_skipped": 0, "convention": "full", "ece": ece,
                                 "nll": 1.1 + i / 10, "brier": 0.3 + i / 100, "dataset": "x"})
    return root
