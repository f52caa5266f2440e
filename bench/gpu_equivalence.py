"""GPU check: ``shiftbench.evaluate`` on ``--device cuda`` gives what ``--device cpu`` gives.

The real EfficientNet-Lite0 on generated 224 px JPEGs (crops of scikit-image's photos, in an
ImageNet-val layout: ``bench/engine.py``'s ``make_val``), on ``val`` and two corruption settings,
once per device, each into its own store with ``keep_logits=True``. Printed per setting: the two
accuracies, the fraction of examples whose top-1 prediction agrees, and the largest |difference|
of the kept (float16) logits; then images/s per device (after one untimed warm-up evaluation).
The crops' labels are arbitrary classes, so the accuracies are near 0: the agreement is the check.

Exit status 1 when the top-1 agreement on clean ``val`` is below ``--min-agreement`` (0.98:
floating-point differences may flip a rare near-tie, nothing more); without a CUDA device the
cuda half is skipped, saying so, and the exit status is 0.

Usage: python bench/gpu_equivalence.py [--images 64] [--batch-size 32] [--workers 2]
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine import make_val  # bench/engine.py, beside this file

MODEL = "efficientnet-lite0"
SETTINGS = ["val", "val+gaussian_noise.3", "val+motion_blur.2"]


def run(device: str, data: Path, store: Path, args: argparse.Namespace) -> tuple[dict, float]:
    """({setting: (accuracy, top-1 per example, logits or None)}, images/s) on ``device``."""
    import pyarrow.parquet as pq

    from shiftbench import evaluate
    from shiftbench.store.store import Store

    common = {"data_root": data, "batch_size": args.batch_size, "workers": args.workers, "partial": True,
              "progress": False, "device": device}
    evaluate(MODEL, ["val"], store=None, limit=args.batch_size, **common)   # warm-up: load, CUDA init
    t0 = time.perf_counter()
    res = evaluate(MODEL, SETTINGS, store=store, keep_logits=True, **common)
    ips = int(res["n_examples"].sum()) / (time.perf_counter() - t0)
    st = Store(store)
    out = {}
    for _, row in res.iterrows():
        pred = st.read_predictions(row["key"], ["pred"])
        logits_dir = store / "logits" / f"pass={st.key_meta(row['key'])['pass']}"
        logits = None
        if logits_dir.is_dir():
            table = pq.read_table(logits_dir).sort_by("index")
            width = table.schema.field("logits").type.list_size
            logits = table.column("logits").combine_chunks().flatten().to_numpy(zero_copy_only=False)
            logits = logits.reshape(-1, width).astype(np.float32)
        out[row["setting"]] = (float(row["accuracy"]), pred.sort_values("index")["pred"].to_numpy(), logits)
    return out, ips


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--min-agreement", type=float, default=0.98)
    args = parser.parse_args()

    import torch

    tmp = Path(tempfile.mkdtemp(prefix="sb-gpu-eq-"))
    try:
        make_val(tmp / "data" / "imagenet" / "val", args.images)
        cpu, cpu_ips = run("cpu", tmp / "data", tmp / "store-cpu", args)
        print(f"{MODEL}, {args.images} generated 224 px JPEGs, batch {args.batch_size}, {args.workers} decode worker(s)")
        if not torch.cuda.is_available():
            for s, (acc, _, _) in cpu.items():
                print(f"  {s:24s} cpu {acc:6.2f}%")
            print(f"  images/s: cpu {cpu_ips:.1f}")
            print("no CUDA device: cuda half skipped")
            return 0
        cuda, cuda_ips = run("cuda", tmp / "data", tmp / "store-cuda", args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"  cuda device: {torch.cuda.get_device_name(0)}")
    print(f"  {'setting':24s} {'cpu acc':>8s} {'cuda acc':>9s} {'top-1 agree':>12s} {'max |dlogit|':>13s}")
    agreement = {}
    for s in SETTINGS:
        (a_cpu, p_cpu, l_cpu), (a_gpu, p_gpu, l_gpu) = cpu[s], cuda[s]
        agreement[s] = float(np.mean(p_cpu == p_gpu)) if len(p_cpu) == len(p_gpu) else float("nan")
        diff = float(np.abs(l_cpu - l_gpu).max()) if l_cpu is not None and l_gpu is not None else float("nan")
        print(f"  {s:24s} {a_cpu:7.2f}% {a_gpu:8.2f}% {agreement[s]:12.4f} {diff:13.4f}")
    print(f"  images/s (3 settings, after a warm-up): cpu {cpu_ips:.1f}   cuda {cuda_ips:.1f}   "
          f"({cuda_ips / cpu_ips:.1f}x)")
    ok = agreement["val"] >= args.min_agreement
    print(f"top-1 agreement on val: {agreement['val']:.4f} ({'ok' if ok else 'FAIL'}: need >= {args.min_agreement})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
