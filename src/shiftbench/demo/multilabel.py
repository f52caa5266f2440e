"""A live multi-label testbed: DeepFashion Remixed's design on multi-digit canvases of real MNIST
digits (Hendrycks et al. 2021, *The Many Faces of Robustness*, §3, "DeepFashion Remixed").

Steps of :func:`run_multilabel_demo`:

1. **data** - :func:`shiftbench.demo.multidigit.write_multidigit`: 64 x 64 canvases with 2-3
   distinct real MNIST digits each (labels = the set of digits), and four attributes the
   generator controls: scale, occlusion, viewpoint (rotation) and zoom-in;
2. **carve** - :func:`shiftbench.studies.attributes.attribute_splits` with
   :data:`~shiftbench.demo.multidigit.MULTIDIGIT_TRAIN` (medium scale, medium occlusion, tilted,
   no zoom: DFR's training values in kind): ``train``, ``id-test`` and eight OOD sets that each
   change one attribute;
3. **train** - the zoo of :data:`ZOO`: 14 multi-label networks (the digits CNNs and MLPs of
   :mod:`shiftbench.demo.archs` with 10 sigmoid outputs, binary cross-entropy) varying width,
   training length and augmentation (random erasing, Zhong et al. 2020 - one of the paper's DFR
   augmentations - random translation, both), trained on ``train`` only; cached in
   ``<workspace>/models``;
4. **evaluate** - every model on ``id-test`` and the eight OOD sets in one pass per set
   (:func:`shiftbench.evaluate` on the multi-label manifests): the store keeps each class's score,
   the results mAP with its 95% bootstrap interval;
5. the **study** ``multilabel/digits`` (one row per model x split) that the report's section
   "Multi-label shifts" draws: IID vs OOD mAP per attribute, the trend, and the table in the
   paper's form (IID mAP, each OOD mAP, the OOD average).

The images the networks see are the canvases resized to 32 x 32 (the digits archs'
preprocessing), for training as for evaluation.

>>> table = run_multilabel_demo("shiftbench-data", "shiftbench-workspace/multilabel")  # doctest: +SKIP
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from shiftbench.errors import ConfigError

STUDY_KIND = "multilabel"
N_IMAGES = 6000
INPUT = 32
#: name -> recipe: digits architecture, epochs over the training split, augmentation
ZOO: dict[str, dict[str, Any]] = {
    "ml-cnn-w4": {"arch": "digits-cnn-w4", "epochs": 6},
    "ml-cnn-w8": {"arch": "digits-cnn-w8", "epochs": 6},
    "ml-cnn-w16": {"arch": "digits-cnn-w16", "epochs": 6},
    "ml-cnn-w8-short": {"arch": "digits-cnn-w8", "epochs": 2},
    "ml-cnn-w16-short": {"arch": "digits-cnn-w16", "epochs": 2},
    "ml-cnn-w8-long": {"arch": "digits-cnn-w8", "epochs": 12},
    "ml-cnn-w4-erasing": {"arch": "digits-cnn-w4", "epochs": 6, "augment": "erasing"},
    "ml-cnn-w8-erasing": {"arch": "digits-cnn-w8", "epochs": 6, "augment": "erasing"},
    "ml-cnn-w16-erasing": {"arch": "digits-cnn-w16", "epochs": 6, "augment": "erasing"},
    "ml-cnn-w8-translate": {"arch": "digits-cnn-w8", "epochs": 6, "augment": "translate"},
    "ml-cnn-w8-erasing-translate": {"arch": "digits-cnn-w8", "epochs": 6, "augment": "erasing+translate"},
    "ml-cnn-w16-erasing-translate": {"arch": "digits-cnn-w16", "epochs": 6, "augment": "erasing+translate"},
    "ml-mlp-h128": {"arch": "digits-mlp-h128", "epochs": 6},
    "ml-mlp-h512": {"arch": "digits-mlp-h512", "epochs": 6},
}
AUGMENTATIONS = ("erasing", "translate")
#: random erasing (Zhong et al. 2020, torchvision's defaults): p 0.5, area 2-33%, ratio 0.3-3.3,
#: filled with uniform noise
ERASING = {"p": 0.5, "area": (0.02, 0.33), "ratio": (0.3, 3.3)}
TRANSLATE_PX = 3


def model_type(recipe: dict[str, Any]) -> str:
    """``ROBUST_INTV`` for a model trained with augmentation, else ``STANDARD``."""
    return "ROBUST_INTV" if recipe.get("augment") else "STANDARD"


# ----------------------------------------------------------------------------- training
def _erase(x: Any, g: Any) -> Any:
    """Random erasing of a [0, 1] batch ``(B, C, H, W)``, one rectangle per chosen image."""
    import torch  # deferred: loads torch

    b, _, h, w = x.shape
    chosen = torch.rand(b, generator=g) < ERASING["p"]
    lo, hi = ERASING["area"]
    area = (lo + (hi - lo) * torch.rand(b, generator=g)) * h * w
    log_r = math.log(ERASING["ratio"][0]) + (math.log(ERASING["ratio"][1]) - math.log(ERASING["ratio"][0])) \
        * torch.rand(b, generator=g)
    ratio = torch.exp(log_r)
    eh = torch.sqrt(area * ratio).round().clamp(1, h).long()
    ew = torch.sqrt(area / ratio).round().clamp(1, w).long()
    top = (torch.rand(b, generator=g) * (h - eh + 1).float()).long()
    left = (torch.rand(b, generator=g) * (w - ew + 1).float()).long()
    rows = torch.arange(h)[None, :, None]
    cols = torch.arange(w)[None, None, :]
    box = ((rows >= top[:, None, None]) & (rows < (top + eh)[:, None, None])
           & (cols >= left[:, None, None]) & (cols < (left + ew)[:, None, None]) & chosen[:, None, None])
    noise = torch.rand(x.shape, generator=g)
    return torch.where(box[:, None], noise, x)


def _translate(x: Any, g: Any) -> Any:
    """Shift each image of ``x`` by up to :data:`TRANSLATE_PX` pixels (zeros fill the border)."""
    import torch  # deferred: loads torch
    import torch.nn.functional as F  # deferred: loads torch

    b, _, h, w = x.shape
    shift = (torch.randint(-TRANSLATE_PX, TRANSLATE_PX + 1, (b, 2), generator=g).float()
             * torch.tensor([2.0 / w, 2.0 / h]))
    theta = torch.zeros(b, 2, 3)
    theta[:, 0, 0] = theta[:, 1, 1] = 1.0
    theta[:, :, 2] = -shift
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="nearest", padding_mode="zeros", align_corners=False)


def train_multilabel(recipe: dict[str, Any], images: np.ndarray, targets: np.ndarray, seed: int = 0) -> Any:
    """Train ``recipe``'s digits network on ``images`` (uint8 ``(N, 32, 32)``) with multi-hot
    ``targets`` ``(N, 10)``: Adam (lr 2e-3, one-cycle, batch 64) on binary cross-entropy with
    logits over the 10 outputs, the recipe's augmentation on [0, 1] pixels; returns the network
    (eval mode)."""
    import torch  # deferred: loads torch
    import torch.nn.functional as F  # deferred: loads torch

    from shiftbench.demo.archs import DIGITS_PREPROCESSING  # deferred: loads Pillow, loads pyarrow
    from shiftbench.models.registry import build_arch  # deferred: registers on import
    from shiftbench.models.wrapper import Normalized  # deferred: loads torch

    augment = [a for a in str(recipe.get("augment") or "").split("+") if a]
    unknown = [a for a in augment if a not in AUGMENTATIONS]
    if unknown:
        raise ConfigError(f"unknown augmentation {unknown[0]!r}; use {', '.join(AUGMENTATIONS)} (joined by '+')")
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    net = build_arch(recipe["arch"], 10).net
    model = Normalized(net, DIGITS_PREPROCESSING.mean, DIGITS_PREPROCESSING.std).train()
    x_all = torch.from_numpy(np.ascontiguousarray(images)).float().div_(255.0)[:, None].expand(-1, 3, -1, -1)
    y_all = torch.from_numpy(np.asarray(targets, np.float32))
    bs, lr = 64, 2e-3
    total = max(3, int(math.ceil(float(recipe["epochs"]) * len(x_all) / bs)))
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr * 3, total_steps=total, pct_start=0.2)
    step = 0
    while step < total:
        perm = torch.randperm(len(x_all), generator=g)
        for i in range(0, len(x_all), bs):
            if step >= total:
                break
            idx = perm[i:i + bs]
            x = x_all[idx]
            if "translate" in augment:
                x = _translate(x, g)
            if "erasing" in augment:
                x = _erase(x, g)
            loss = F.binary_cross_entropy_with_logits(model(x), y_all[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            step += 1
    return net.eval()


def _train_one(name: str, recipe: dict[str, Any], data: str, out: str) -> dict[str, Any]:
    """Train one zoo model on the cached training arrays and save its weights (a pool job)."""
    import torch  # deferred: loads torch
    from safetensors.torch import save_file  # deferred: loads safetensors, loads torch

    from shiftbench.store.files import atomic_write_with  # deferred: loads pyarrow

    start = time.perf_counter()
    arrays = np.load(data)
    net = train_multilabel(recipe, arrays["images"], arrays["targets"], seed=int(recipe.get("seed", 0)))
    with torch.no_grad():
        state = {k: v.detach().contiguous() for k, v in net.state_dict().items()}
    atomic_write_with(Path(out), lambda tmp: save_file(state, str(tmp)))
    return {"name": name, "seconds": time.perf_counter() - start}


# ----------------------------------------------------------------------------- the demo
def _training_arrays(frame: pd.DataFrame, root: Path, path: Path) -> Path:
    """The training split as uint8 32 x 32 images (resized as the engine resizes: bilinear,
    antialiased, through Pillow) and multi-hot targets, cached in ``path``."""
    from PIL import Image  # deferred: loads Pillow

    images = np.stack([np.asarray(Image.open(root / p).convert("L").resize((INPUT, INPUT), Image.BILINEAR))
                       for p in frame["path"]])
    targets = np.zeros((len(frame), 10), np.float32)
    for i, labels in enumerate(frame["labels"].fillna("").astype(str)):
        for v in labels.split(";"):
            if v.strip():
                targets[i, int(v)] = 1.0
    np.savez(path, images=images, targets=targets)
    return path


def _digest(obj: Any) -> str:
    from shiftbench.store.store import digest  # deferred: loads pyarrow

    return digest(obj)


def run_multilabel_demo(data_dir: Path | str, workspace: Path | str, *, n: int = N_IMAGES, seed: int = 0,
                        models: list[str] | None = None, jobs: int = 2, progress: bool = False) -> pd.DataFrame:
    """Generate, carve, train and evaluate (module docstring); returns the study table, one row
    per model x split: ``model, arch, augment, epochs, model_type, split, kind, attribute,
    value, n, map, map_low, map_high, accuracy`` (top-1 in the label set) and ``setting``.

    Everything is cached in ``workspace``: the canvases (by ``n`` and ``seed``), the trained
    models (by recipe and training data) and the results store, so a rerun trains and evaluates
    nothing. The table is stored as the study ``multilabel/digits`` of ``<workspace>/store``.
    """
    import shiftbench.demo  # deferred: loads Pillow, loads pyarrow
    from shiftbench.demo.multidigit import MULTIDIGIT_TRAIN, write_multidigit  # deferred: loads Pillow
    from shiftbench.demo.run import _one_thread, _pool_map  # deferred: loads Pillow, loads pyarrow
    from shiftbench.engine import evaluate  # deferred: loads Pillow, loads pyarrow
    from shiftbench.models import load_model  # deferred: registers on import
    from shiftbench.store.store import Store  # deferred: loads pyarrow
    from shiftbench.studies.attributes import attribute_splits  # deferred: loads pyarrow

    shiftbench.demo.register()
    names = list(ZOO) if models is None else list(models)
    unknown = [m for m in names if m not in ZOO]
    if unknown:
        raise ConfigError(f"unknown multi-label zoo model {unknown[0]!r}; choose from {', '.join(ZOO)}")
    ws = Path(workspace)
    times: dict[str, float] = {}

    t0 = time.perf_counter()
    marker = ws / "data.json"
    wanted = {"n": n, "seed": seed, "design": "dfr"}
    manifest = ws / "multidigit.csv"
    if not manifest.exists() or not marker.exists() or json.loads(marker.read_text()) != wanted:
        manifest = write_multidigit(ws, n, seed, data_dir)
        marker.write_text(json.dumps(wanted))
    splits = attribute_splits(manifest, train=MULTIDIGIT_TRAIN, seed=seed, id_test=0.2)
    files = splits.write(ws)
    times["data"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    train = splits.frames["train"]
    arrays = ws / "train-32.npz"
    data_key = _digest({"data": wanted, "train": train["path"].tolist(), "labels": train["labels"].tolist()})
    key_file = ws / "train-32.key"
    if not arrays.exists() or not key_file.exists() or key_file.read_text() != data_key:
        _training_arrays(train, manifest.parent, arrays)
        (ws / "train-32.key").write_text(data_key)
    weights = {m: ws / "models" / f"{m}-{_digest({'recipe': ZOO[m], 'data': data_key})}.safetensors" for m in names}
    (ws / "models").mkdir(parents=True, exist_ok=True)
    todo = [m for m in names if not weights[m].exists()]
    with _one_thread():
        _pool_map(_train_one, [(m, ZOO[m], str(arrays), str(weights[m])) for m in todo], max(1, jobs),
                  lambda r: None, "multi-label training")
    times["train"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    loaded = [load_model(f"checkpoint:{weights[m]}", arch=ZOO[m]["arch"], name=m) for m in names]
    tests = [s for s in splits.names if s != "train"]
    settings = {s: f"manifest:{files[s].resolve()}" for s in tests}
    with _one_thread():
        res = evaluate(loaded, list(settings.values()), store=ws / "store", workers=0, progress=progress)
    times["evaluate"] = time.perf_counter() - t0

    table = study_table(res, splits, settings)
    table.attrs["times"] = times
    Store(ws / "store").write_study(STUDY_KIND, "digits", table,
                                    {"n_images": n, "seed": seed, "train": MULTIDIGIT_TRAIN, "n_train": len(train),
                                     "models": {m: ZOO[m] for m in names}, "source": "run_multilabel_demo"})
    return table


def study_table(results: pd.DataFrame, splits: Any, settings: dict[str, str]) -> pd.DataFrame:
    """One row per model x split from the evaluation's result rows (module docstring, step 5)."""
    by_setting = {v: k for k, v in settings.items()}
    sizes = splits.sizes.set_index("split")["n"] if "split" in splits.sizes else None
    rows = []
    for r in results.to_dict("records"):
        split = by_setting.get(r["setting"])
        if split is None:
            continue
        recipe = ZOO.get(r["model"], {})
        attribute, value = (split.split("=", 1) if "=" in split else (None, None))
        rows.append({"model": r["model"], "arch": recipe.get("arch"), "augment": recipe.get("augment") or "none",
                     "epochs": recipe.get("epochs"), "model_type": model_type(recipe), "split": split,
                     "kind": "id-test" if split == "id-test" else "ood", "attribute": attribute, "value": value,
                     "n": int(r["n_examples"]) if sizes is None else int(sizes.get(split, r["n_examples"])),
                     "map": r["map"], "map_low": r["map_low"], "map_high": r["map_high"],
                     "accuracy": r["accuracy"], "setting": r["setting"]})
    return pd.DataFrame(rows)
