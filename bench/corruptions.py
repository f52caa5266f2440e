"""Benchmark: our batched torch corruptions against the reference ``imagecorruptions``, side by side.

For every corruption registered in shiftbench that the reference also has (so the weather and
digital ones appear when their module is present), on 224 x 224 crops of scikit-image's real
colour photos:

* **reference**: ``imagecorruptions`` one image at a time, as its users run it (a PIL image in,
  the corruption's float output; NumPy single-threaded, OpenCV with its default threads);
  numba's glass-blur loop is compiled before timing;
* **ours**: ``get_shift(name, severity)`` on a batch (default 32 images, ``torch`` threads 2);

milliseconds per image for each corruption and severity (default all five), their ratio, the
ratio per corruption (summed over severities) and the whole suite's (every corruption x
severity). Targets: each corruption >= 5x, the suite >= 20x.

Timing: the two sides alternate, each timed ``--repeat`` times; the table shows the fastest
repeat of each (the least disturbed by other processes - this machine may be shared: the load
average is printed), wall-clock. ``--cpu`` adds process CPU time per image (both threads).

Usage: python bench/corruptions.py [--severities 1 2 3 4 5] [--batch-size 32] [--threads 2]
       [--images 8] [--repeat 3] [--cpu] [--only NAME ...]
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
from PIL import Image

TARGET_EACH, TARGET_SUITE = 5.0, 20.0


def photos(n: int, size: int = 224, seed: int = 0) -> np.ndarray:
    """``n`` uint8 (size, size, 3) crops of scikit-image's colour photos, resized (bicubic)."""
    from skimage import data

    sources = [getattr(data, p)()[..., :3] for p in ("chelsea", "coffee", "astronaut", "rocket",
                                                      "immunohistochemistry", "hubble_deep_field")]
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        img = sources[i % len(sources)]
        h, w = img.shape[:2]
        s = int(rng.integers(min(h, w) // 2, min(h, w) + 1))
        y, x = int(rng.integers(0, h - s + 1)), int(rng.integers(0, w - s + 1))
        out.append(np.asarray(Image.fromarray(img[y:y + s, x:x + s]).resize((size, size), Image.BICUBIC)))
    return np.stack(out)


def reference_call(name: str):
    """The reference corruption as ``f(uint8 HWC, severity) -> array`` (no uint8 truncation)."""
    import imagecorruptions

    fn = imagecorruptions.corruption_dict[name]
    return lambda img, severity: np.asarray(fn(Image.fromarray(img), severity))


def best_of(fn, repeat: int, cpu: bool) -> tuple[float, float]:
    """(min wall seconds, min CPU seconds) over ``repeat`` calls."""
    wall = proc = float("inf")
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall, proc = min(wall, time.perf_counter() - t), min(proc, time.process_time() - c)
    return wall, proc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--severities", nargs="*", type=int, default=[1, 2, 3, 4, 5])
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2, help="torch threads for ours")
    ap.add_argument("--images", type=int, default=8, help="images per reference timing")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cpu", action="store_true", help="also show CPU ms per image")
    ap.add_argument("--only", nargs="*", help="only these corruptions")
    args = ap.parse_args()

    import torch
    from imagecorruptions import get_corruption_names

    from shiftbench.shifts import get_shift, list_shifts

    torch.set_num_threads(args.threads)
    ours_names = set(list_shifts())
    names = [n for n in get_corruption_names("all") if n in ours_names and (not args.only or n in args.only)]
    missing = [n for n in get_corruption_names("all") if n not in ours_names]
    severities = args.severities

    u8 = photos(max(args.batch_size, args.images))
    x = torch.from_numpy(u8[:args.batch_size]).permute(0, 3, 1, 2).float().div(255).contiguous()
    indices = list(range(args.batch_size))
    ref_imgs = u8[:args.images]

    print(f"224x224 crops of scikit-image photos; ours: batch {args.batch_size}, torch threads {args.threads}; "
          f"reference: imagecorruptions one image at a time ({len(ref_imgs)} images); fastest of {args.repeat}")
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    if missing:
        print(f"not registered in shiftbench (skipped): {', '.join(missing)}")
    # warm-up: numba's glass loop, our caches (filter matrices, Poisson tables, FFT plans)
    for name in names:
        for s in severities:
            reference_call(name)(ref_imgs[0], s)
            get_shift(name, s)(x[:2], indices[:2], seed=0)

    head = f"{'corruption':18s} {'sev':>3s} {'reference':>10s} {'ours':>8s} {'speed-up':>9s}"
    print(("\n" + head + ("  ref CPU  ours CPU" if args.cpu else "") + "   (ms per image)"))
    times: dict[str, list[tuple[float, float]]] = {}
    cpu_times: dict[str, list[tuple[float, float]]] = {}
    for name in names:
        ref = reference_call(name)
        for s in severities:
            shift = get_shift(name, s)
            rw = rc = ow = oc = float("inf")
            for _ in range(args.repeat):  # alternate the two sides
                w, c = best_of(lambda: [ref(img, s) for img in ref_imgs], 1, args.cpu)
                rw, rc = min(rw, w / len(ref_imgs)), min(rc, c / len(ref_imgs))
                w, c = best_of(lambda: shift(x, indices, seed=0), 1, args.cpu)
                ow, oc = min(ow, w / args.batch_size), min(oc, c / args.batch_size)
            times.setdefault(name, []).append((rw, ow))
            cpu_times.setdefault(name, []).append((rc, oc))
            line = f"{name:18s} {s:3d} {rw * 1e3:10.2f} {ow * 1e3:8.3f} {rw / ow:8.1f}x"
            if args.cpu:
                line += f" {rc * 1e3:8.2f} {oc * 1e3:9.3f}"
            print(line + ("" if rw / ow >= TARGET_EACH else f"   < {TARGET_EACH:.0f}x"), flush=True)

    sev = f"severities {', '.join(map(str, severities))}"
    print(f"\nper corruption, summed over {sev} (ms per image):")
    print(f"{'corruption':18s} {'reference':>10s} {'ours':>8s} {'speed-up':>9s} {'lowest':>7s}")
    for name, t in times.items():
        r, o = sum(a for a, _ in t), sum(b for _, b in t)
        low = min(a / b for a, b in t)
        print(f"{name:18s} {r * 1e3:10.2f} {o * 1e3:8.3f} {r / o:8.1f}x {low:6.1f}x"
              + ("" if r / o >= TARGET_EACH else f"   < {TARGET_EACH:.0f}x"))
    ref_total = sum(a for t in times.values() for a, _ in t)
    ours_total = sum(b for t in times.values() for _, b in t)
    ratio = ref_total / ours_total
    print(f"{'suite':18s} {ref_total * 1e3:10.1f} {ours_total * 1e3:8.2f} {ratio:8.1f}x   "
          f"({len(times)} corruptions x {sev}; target {TARGET_SUITE:.0f}x: {'met' if ratio >= TARGET_SUITE else 'NOT met'})")
    if args.cpu:   # CPU time: less sensitive to other processes on a shared machine than wall-clock
        rc_total = sum(a for t in cpu_times.values() for a, _ in t)
        oc_total = sum(b for t in cpu_times.values() for _, b in t)
        low = sorted((sum(a for a, _ in t) / sum(b for _, b in t), n) for n, t in cpu_times.items())[:3]
        print(f"{'suite (CPU time)':18s} {rc_total * 1e3:10.1f} {oc_total * 1e3:8.2f} {rc_total / oc_total:8.1f}x   "
              f"(process CPU ms per image, both threads; lowest: "
              + ", ".join(f"{n} {r:.1f}x" for r, n in low) + ")")
    below = [n for n, t in times.items() if sum(a for a, _ in t) / sum(b for _, b in t) < TARGET_EACH]
    print(f"corruptions below {TARGET_EACH:.0f}x: {len(below)} of {len(times)}" + (f" ({', '.join(below)})" if below else ""))
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
