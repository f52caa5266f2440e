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
  pepper fraction, Poisson variance / mean, otherwise the mean absolute change) with our own
  draws, which differ from the reference's, so the pixels cannot match; and the pixel
  difference and accuracy with the reference's own draws replayed through our code
  (``shiftbench.shifts.corruptions.replay``, every random corruption): like for like;
* the top-1 accuracy of a real model (EfficientNet-Lite0, real ImageNet weights) on our
  corrupted images and on the reference's, and their difference ("delta" against the
  reference's float output - like for like, as ours stays float -; "vs u8" against its uint8
  images, which adds the truncation's -0.5 grey level bias and quantisation). There is no labelled ImageNet
  here: the "label" of a crop is the model's own top-1 on the clean crop, so accuracy is
  agreement with the clean prediction. For random corruptions the difference includes the
  draw-to-draw spread; ``--floor`` also runs the reference with a second set of draws and
  prints |ref - ref'| (the difference expected from the draws alone).

Targets: |delta accuracy| <= 1.5 points per corruption x severity, <= 0.5 on average. The
summary gives them like for like (deterministic cells, and random cells with the reference's
draws replayed) and with our own draws (which adds the draw-to-draw spread: ``--floor`` shows
the reference's own spread for comparison).

Usage: python bench/corruptions_fidelity.py [--images 120] [--threads 1] [--floor] [--draws 1] [--only NAME ...]
       [--severities 1 2 3 4 5]
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
from PIL import Image

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


def reference_outputs(name: str, severity: int, u8: np.ndarray, seed: int) -> tuple[np.ndarray, list]:
    """The reference's float outputs (B, H, W, 3) in 0-255 and, for random corruptions, its draws
    (``shiftbench.shifts.corruptions.replay.reference_draws``, one dict per image)."""
    import imagecorruptions

    from shiftbench.shifts.corruptions import replay

    fn = imagecorruptions.corruption_dict[name]
    outs, draws = [], []
    for i, img in enumerate(u8):
        s = seed + 1000 * severity + i
        np.random.seed(s)
        outs.append(np.asarray(fn(Image.fromarray(img), severity, **replay.reference_kwargs(name, s)), dtype=np.float64))
        if name in replay.RANDOM:
            draws.append(replay.reference_draws(name, img, severity, s))
    return np.stack(outs), draws


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
    ap.add_argument("--draws", type=int, default=1,
                    help="random corruptions: average each side's accuracy over this many draws (shrinks the "
                         "draw-to-draw spread in 'delta' by about its square root)")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--severities", nargs="*", type=int, default=[1, 2, 3, 4, 5])
    args = ap.parse_args()

    import torch
    from imagecorruptions import get_corruption_names

    from shiftbench.models import load_model
    from shiftbench.shifts import get_shift, list_shifts
    from shiftbench.shifts.corruptions import replay

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
            draws_k = args.draws if shift.random else 1
            acc_ref = acc_u8 = acc_ours = 0.0
            for k in range(draws_k):   # random cells: accuracies averaged over --draws draws per side
                ours_k = torch.cat([shift(x[i:i + args.batch_size], list(range(i, min(i + args.batch_size, len(x)))),
                                          seed=k) for i in range(0, len(x), args.batch_size)])
                ref_f, draws_ = reference_outputs(name, s, u8, seed=k * 10 ** 6)
                ref_u8 = to_tensor(np.uint8(np.clip(ref_f, 0, 255)))   # corrupt(): np.uint8(float output)
                ref_k = torch.from_numpy(np.clip(ref_f, 0, 255) / 255).permute(0, 3, 1, 2).float()
                acc_ref += (top1(ref_k) == labels).float().mean().item() * 100 / draws_k
                acc_u8 += (top1(ref_u8) == labels).float().mean().item() * 100 / draws_k
                acc_ours += (top1(ours_k) == labels).float().mean().item() * 100 / draws_k
                if k == 0:   # the first draw: pixel statistics and the replay
                    ours, ref_float, draws = ours_k, ref_k, draws_
                    acc_ref0 = (top1(ref_k) == labels).float().mean().item() * 100 if shift.random else acc_ref
            delta = acc_ours - acc_ref
            note = ""
            if shift.random:
                label, a = statistic(name, s, x, ours)
                _, b = statistic(name, s, x, ref_float)
                pix = f"{label[:18]:>18s} {a:6.4g}/{b:<6.4g}"
                kind = "random"
                if draws:
                    rep = replay.replay(name, x, s, draws)
                    mad = (rep - ref_float).abs().mean().item() * 255
                    acc_rep = (top1(rep) == labels).float().mean().item() * 100
                    note = f"replayed draws: pixels {mad:.2e}, acc {acc_rep:.1f} (delta {acc_rep - acc_ref0:+.1f})"
                    replayed.append(acc_rep - acc_ref0)
            else:
                mad = (ours - ref_float).abs().mean().item() * 255
                pix = f"{'mean |diff|':>18s} {mad:13.2e}"
                kind = "determ"
            floor = float("nan")
            if args.floor and shift.random:   # the reference against itself, other draws (as many)
                acc_ref2 = 0.0
                for k in range(draws_k):
                    ref2, _ = reference_outputs(name, s, u8, seed=7 + (k + 1) * 10 ** 7)
                    ref2 = torch.from_numpy(np.clip(ref2, 0, 255) / 255).permute(0, 3, 1, 2).float()
                    acc_ref2 += (top1(ref2) == labels).float().mean().item() * 100 / draws_k
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
        like = np.concatenate([det, np.asarray(replayed)])
        print(f"like for like (deterministic + replayed random, {len(like)} cells): mean |delta| "
              f"{np.abs(like).mean():.2f}, max {np.abs(like).max():.1f}, cells with |delta| > 1.5: "
              f"{(np.abs(like) > 1.5).sum()} -> targets {'met' if np.abs(like).max() <= 1.5 and np.abs(like).mean() <= 0.5 else 'NOT met'}")
    print(f"targets: |delta| <= 1.5 per cell, <= 0.5 on average; {time.time() - t_start:.0f} s, "
          f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
