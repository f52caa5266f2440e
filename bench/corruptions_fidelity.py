"""Benchmark: fidelity of our corruptions to the reference ``imagecorruptions``, by pixels and by a
real model's accuracy.

Runs ours (``get_shift``, float output as the engine feeds the model) and the reference (one
image at a time; its float output, and that output truncated to uint8 as
``imagecorruptions.corrupt`` and the ImageNet-C files give it) on the same real images - crops
of scikit-image's colour photos of ImageNet-like objects, resized to 224 x 224 - for every
corruption and severity both have, and prints:

* deterministic corruptions: the mean absolute pixel difference from the reference's float
  output (grey levels, 0-255);
* random ones: a matched statistic of ours and the reference's (noise residual std, salt &
  pepper fraction, Poisson variance / mean, otherwise the mean absolute change) - the random
  draws differ, so the pixels cannot match; for the ones whose ``*_from_noise`` function can
  take the reference's own draws (gaussian, speckle, impulse noise, motion and glass blur) also
  the pixel difference with the draws replayed;
* the top-1 accuracy of a real model (EfficientNet-Lite0, real ImageNet weights) on our
  corrupted images and on the reference's, and their difference ("delta" against the
  reference's float output - like for like, as ours stays float -; "vs u8" against its uint8
  images, which adds the truncation's -0.5 grey level bias and quantisation). There is no labelled ImageNet
  here: the "label" of a crop is the model's own top-1 on the clean crop, so accuracy is
  agreement with the clean prediction. For random corruptions the difference includes the
  draw-to-draw spread; ``--floor`` also runs the reference with a second set of draws and
  prints |ref - ref'| (the difference expected from the draws alone).

Targets: |delta accuracy| <= 1.5 points per corruption x severity, <= 0.5 on average.

Usage: python bench/corruptions_fidelity.py [--images 120] [--threads 1] [--floor] [--only NAME ...]
       [--severities 1 2 3 4 5]
"""
from __future__ import annotations

import argparse
import functools
import os
import time

import numpy as np
from PIL import Image

REPLAYABLE = ("gaussian_noise", "speckle_noise", "impulse_noise", "motion_blur", "glass_blur")


def photos(n: int, size: int = 224, seed: int = 1) -> np.ndarray:
    """``n`` uint8 crops (random size >= half the short side, random place, random left-right
    flip) of scikit-image's colour photos of ImageNet-like objects (cat, espresso, missile,
    moped x 2, astronaut), resized to ``size`` (bicubic)."""
    from skimage import data

    left, right, _ = data.stereo_motorcycle()
    sources = [data.chelsea(), data.coffee(), data.rocket(), left, right, data.astronaut()]
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        img = sources[i % len(sources)][..., :3]
        h, w = img.shape[:2]
        s = int(rng.integers(min(h, w) // 2, min(h, w) + 1))
        y, x = int(rng.integers(0, h - s + 1)), int(rng.integers(0, w - s + 1))
        crop = img[y:y + s, x:x + s]
        crop = crop[:, ::-1] if rng.random() < 0.5 else crop
        out.append(np.asarray(Image.fromarray(np.ascontiguousarray(crop)).resize((size, size), Image.BICUBIC)))
    return np.stack(out)


def to_tensor(u8: np.ndarray):
    import torch

    return torch.from_numpy(np.ascontiguousarray(u8)).permute(0, 3, 1, 2).float().div(255).contiguous()


@functools.lru_cache(maxsize=1)
def _numba_glass_draws():
    from numba import njit

    @njit(cache=False)
    def draws(d0, d1, d, its, s):
        np.random.seed(s)
        out = np.zeros((its, (d0 - 2 * d) * (d1 - 2 * d), 2), dtype=np.int64)
        for i in range(its):
            n = 0
            for _h in range(d0 - d, d, -1):
                for _w in range(d1 - d, d, -1):
                    dx, dy = np.random.randint(-d, d, size=(2,))
                    out[i, n, 0] = dx
                    out[i, n, 1] = dy
                    n += 1
        return out

    return draws


def reference_outputs(name: str, severity: int, u8: np.ndarray, seed: int) -> tuple[np.ndarray, list]:
    """The reference's float outputs (B, H, W, 3) in 0-255 and, for the replayable corruptions,
    its draws shaped for our ``*_from_noise`` functions."""
    import imagecorruptions
    import torch

    fn = imagecorruptions.corruption_dict[name]
    outs, draws = [], []
    for i, img in enumerate(u8):
        s = seed + 1000 * severity + i
        kwargs = {"seed": s} if name in ("glass_blur", "impulse_noise") else {}
        np.random.seed(s)
        outs.append(np.asarray(fn(Image.fromarray(img), severity, **kwargs), dtype=np.float64))
        if name in ("gaussian_noise", "speckle_noise"):
            np.random.seed(s)
            draws.append(np.random.normal(size=img.shape))
        elif name == "motion_blur":
            np.random.seed(s)
            draws.append(np.random.uniform(-45, 45))
        elif name == "impulse_noise":
            from shiftbench.shifts.corruptions.noise import IMPULSE_NOISE

            rng = np.random.default_rng(s)
            draws.append((rng.random(img.shape) <= IMPULSE_NOISE[severity - 1], rng.random(img.shape) <= 0.5))
        elif name == "glass_blur":
            from shiftbench.shifts.corruptions.blur import GLASS_BLUR

            _, d, its = GLASS_BLUR[severity - 1]
            h, w = img.shape[:2]
            dr = _numba_glass_draws()(h, w, d, its, s).reshape(its, h - 2 * d, w - 2 * d, 2)
            draws.append(torch.from_numpy(np.ascontiguousarray(dr[:, ::-1, ::-1, :])).permute(0, 3, 1, 2))
    return np.stack(outs), draws


def replay(name: str, severity: int, x, draws: list):
    import torch

    from shiftbench.shifts.corruptions import blur, noise

    chw = lambda a: torch.from_numpy(np.stack(a)).permute(0, 3, 1, 2)  # noqa: E731
    if name == "gaussian_noise":
        return noise.gaussian_noise_from_noise(x, severity, chw(draws).float())
    if name == "speckle_noise":
        return noise.speckle_noise_from_noise(x, severity, chw(draws).float())
    if name == "impulse_noise":
        return noise.impulse_noise_from_noise(x, chw([d[0] for d in draws]), chw([d[1] for d in draws]))
    if name == "motion_blur":
        return blur.motion_blur_from_noise(x, severity, draws)
    if name == "glass_blur":
        return blur.glass_blur_from_noise(x, severity, draws)
    raise KeyError(name)


def statistic(name: str, severity: int, x, out) -> tuple[str, float]:
    """A statistic of the corruption's effect that ours and the reference's should share."""
    from shiftbench.shifts.corruptions import noise

    r = out - x
    if name == "gaussian_noise":
        m = (x > 0.3) & (x < 0.7)
        return "residual std (mid-tones)", r[m].std().item()
    if name == "speckle_noise":
        m = (x > 0.3) & (x < 0.7)
        return "relative residual std", (r[m] / x[m]).std().item()
    if name == "impulse_noise":
        m = (x > 0.01) & (x < 0.99)
        return "fraction set to 0 or 1", ((out[m] == 0) | (out[m] == 1)).float().mean().item()
    if name == "shot_noise":
        c = noise.SHOT_NOISE[severity - 1]
        m = (x >= 0.05) & (x < 0.3)
        return "Poisson var / mean", ((r[m] * c) ** 2).mean().item() / (x[m] * c).mean().item()
    return "mean |change| (grey levels)", r.abs().mean().item() * 255


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=120)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1: on a shared machine the model's per-layer barriers cost more than they gain)")
    ap.add_argument("--batch-size", type=int, default=40, help="images per model forward / corruption call")
    ap.add_argument("--floor", action="store_true", help="also run the reference with second draws (random ones)")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--severities", nargs="*", type=int, default=[1, 2, 3, 4, 5])
    args = ap.parse_args()

    import torch
    from imagecorruptions import get_corruption_names

    from shiftbench.models import load_model
    from shiftbench.shifts import get_shift, list_shifts

    torch.set_num_threads(args.threads)
    model = load_model("efficientnet-lite0")
    net = model.module.eval().to(memory_format=torch.channels_last)

    def top1(x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return torch.cat([net(x[i:i + args.batch_size].contiguous(memory_format=torch.channels_last)).argmax(1)
                              for i in range(0, len(x), args.batch_size)])

    u8 = photos(args.images)
    x = to_tensor(u8)
    labels = top1(x)
    names = [n for n in get_corruption_names("all") if n in list_shifts() and (not args.only or n in args.only)]
    t_start = time.time()
    print(f"{args.images} crops of scikit-image's colour photos (cat, espresso, missile, moped, astronaut) at 224 x 224; model: EfficientNet-Lite0 (ImageNet "
          f"weights); 'accuracy' = agreement with the model's top-1 on the clean crop (no labelled ImageNet here), "
          f"{len(set(labels.tolist()))} distinct clean classes")
    print("ours: float output; reference: imagecorruptions' float output ('acc ref', what 'delta' compares with) "
          "and truncated to uint8 as corrupt() and the ImageNet-C files give it ('ref u8', 'vs u8'); "
          "pixel differences in grey levels (0-255)")
    hdr = (f"{'corruption':18s} {'sev':>3s} {'kind':6s} {'pixels: ours vs ref':>32s} {'acc ref':>8s} {'ref u8':>7s} "
           f"{'acc ours':>8s} {'delta':>6s} {'vs u8':>6s}" + (f" {'|ref-ref2|':>10s}" if args.floor else "") + "  note")
    print("\n" + hdr)
    rows, replayed = [], []
    for name in names:
        for s in args.severities:
            shift = get_shift(name, s)
            ours = torch.cat([shift(x[i:i + args.batch_size], list(range(i, min(i + args.batch_size, len(x)))), seed=0)
                              for i in range(0, len(x), args.batch_size)])
            ref_f, draws = reference_outputs(name, s, u8, seed=0)
            ref_u8 = to_tensor(np.uint8(np.clip(ref_f, 0, 255)))   # corrupt(): np.uint8(float output)
            ref_float = torch.from_numpy(np.clip(ref_f, 0, 255) / 255).permute(0, 3, 1, 2).float()
            acc_ref = (top1(ref_float) == labels).float().mean().item() * 100
            acc_u8 = (top1(ref_u8) == labels).float().mean().item() * 100
            acc_ours = (top1(ours) == labels).float().mean().item() * 100
            delta = acc_ours - acc_ref
            note = ""
            if shift.random:
                label, a = statistic(name, s, x, ours)
                _, b = statistic(name, s, x, ref_float)
                pix = f"{label[:18]:>18s} {a:6.4g}/{b:<6.4g}"
                kind = "random"
                if name in REPLAYABLE:
                    rep = replay(name, s, x, draws)
                    mad = (rep - ref_float).abs().mean().item() * 255
                    acc_rep = (top1(rep) == labels).float().mean().item() * 100
                    note = f"replayed draws: pixels {mad:.2e}, acc {acc_rep:.1f} (delta {acc_rep - acc_ref:+.1f})"
                    replayed.append(acc_rep - acc_ref)
                else:
                    note = "own draws only (the reference's cannot be replayed)"
            else:
                mad = (ours - ref_float).abs().mean().item() * 255
                pix = f"{'mean |diff|':>18s} {mad:13.2e}"
                kind = "determ"
            floor = float("nan")
            if args.floor and shift.random:
                ref2, _ = reference_outputs(name, s, u8, seed=7)
                ref2 = torch.from_numpy(np.clip(ref2, 0, 255) / 255).permute(0, 3, 1, 2).float()
                acc_ref2 = (top1(ref2) == labels).float().mean().item() * 100
                floor = abs(acc_ref2 - acc_ref)
            rows.append((name, s, shift.random, delta, floor, acc_ours - acc_u8))
            line = (f"{name:18s} {s:3d} {kind:6s} {pix:>32s} {acc_ref:8.1f} {acc_u8:7.1f} {acc_ours:8.1f} "
                    f"{delta:+6.1f} {acc_ours - acc_u8:+6.1f}")
            if args.floor:
                line += f" {floor:10.1f}" if shift.random else f" {'':10s}"
            print(line + "  " + note, flush=True)

    deltas = np.array([r[3] for r in rows])
    det = np.array([r[3] for r in rows if not r[2]])
    rnd = np.array([r[3] for r in rows if r[2]])
    u8d = np.array([r[5] for r in rows])
    print(f"\nagainst the uint8 reference: mean |delta| {np.abs(u8d).mean():.2f}, signed mean {u8d.mean():+.2f}")
    print(f"mean |delta| over {len(rows)} corruption x severity cells: {np.abs(deltas).mean():.2f} points "
          f"(signed mean {deltas.mean():+.2f}); max |delta| {np.abs(deltas).max():.1f}; "
          f"cells with |delta| > 1.5: {(np.abs(deltas) > 1.5).sum()}")
    if len(det):
        print(f"deterministic: mean |delta| {np.abs(det).mean():.2f}, max {np.abs(det).max():.1f}")
    if len(rnd):
        print(f"random (different draws): mean |delta| {np.abs(rnd).mean():.2f}, max {np.abs(rnd).max():.1f}"
              + (f"; reference vs itself with other draws: mean {np.nanmean([r[4] for r in rows if r[2]]):.2f}, "
                 f"max {np.nanmax([r[4] for r in rows if r[2]]):.1f}" if args.floor else ""))
    if replayed:
        print(f"random with the reference's draws replayed ({len(replayed)} cells): mean |delta| "
              f"{np.abs(replayed).mean():.2f}, max {np.abs(replayed).max():.1f}")
    print(f"targets: |delta| <= 1.5 per cell, <= 0.5 on average; {time.time() - t_start:.0f} s, "
          f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
