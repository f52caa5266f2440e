"""Benchmark: the results store on the local disk vs in an S3 bucket on localhost.

An S3-compatible server (moto's server mode, ``pip install 'moto[server]' s3fs``) is started as
a process of its own on a free port of localhost (so it does not share this process's
interpreter lock); both sides run here, one after the other, on the same inputs:

1. **Evaluation**: the same models (the fixture CNNs ``cnn_a`` and ``cnn_b`` and the compute-free
   ``oracle7``, tests/fixtures/) on the same folder of ``--images`` 32 px images, written to a
   new local store and to a new bucket prefix (``--chunk-size`` examples per part, so a key is
   several uploads). The oracle does no arithmetic to speak of, so its row is the worst case:
   nearly all of its time is the store.
2. **Reading a 100-key store into a testbed**: a store of ``--keys`` finished keys (each with
   its per-example parts) written locally and synced to the bucket; then
   ``Testbed.from_store`` (the ``done/`` records) and ``Store.read_predictions_of`` over every
   key (what the report's per-example sections read), both ways.

Each side reports the best of ``--repeat`` runs (as ``timeit`` does); the ratio is bucket / local.

Usage: python bench/store_bucket.py [--images 2048] [--chunk-size 256] [--keys 100] [--repeat 3]
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def s3_server() -> tuple[subprocess.Popen, str, int]:
    """An S3-compatible server (moto's server mode) in a process of its own on a free port of
    localhost, and the environment every client reads (``AWS_ENDPOINT_URL``, test credentials):
    ``(process, host, port)``; the caller terminates the process."""
    host, port = "127.0.0.1", free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex((host, port)) == 0:
                break
        time.sleep(0.1)
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1",
                      AWS_ENDPOINT_URL=f"http://{host}:{port}")
    return server, host, port


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def images(root: Path, n: int) -> Path:
    from PIL import Image

    from oracle_models import colour_of

    for cls in range(7):
        (root / f"class{cls}").mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.new("RGB", (32, 32), colour_of(i % 7)).save(root / f"class{i % 7}" / f"{i:05d}.png")
    return root


def keyed_store(root: Path, n_keys: int, n_rows: int = 500) -> None:
    """A store of ``n_keys`` finished keys, each with two parts of per-example rows."""
    import numpy as np
    import pyarrow as pa

    from shiftbench.store import Store

    st = Store(root)
    rng = np.random.default_rng(0)
    for k in range(n_keys):
        key = f"{k:016x}"
        for chunk in range(2):
            idx = np.arange(chunk * n_rows, (chunk + 1) * n_rows)
            correct = rng.random(n_rows) < 0.7
            st.write_part(key, chunk, pa.table({"index": idx, "id": [f"img{i}" for i in idx],
                                                "status": ["ok"] * n_rows, "pred": rng.integers(0, 7, n_rows),
                                                "correct": correct, "confidence": rng.random(n_rows).astype("f4")}))
        st.finish(key, {"model": f"model-{k // 2}", "setting": ["val", "v2"][k % 2], "accuracy": 70.0,
                        "top5": 90.0, "n_examples": 2 * n_rows, "n_skipped": 0, "convention": "full"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2048)
    parser.add_argument("--chunk-size", type=int, default=256)
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    import s3fs

    from shiftbench import Testbed
    from shiftbench.engine import evaluate
    from shiftbench.store import Store
    from shiftbench.store.sync import sync_store

    server, host, port = s3_server()
    bucket = f"bench-{uuid.uuid4().hex[:8]}"
    s3fs.S3FileSystem().mkdir(bucket)
    tmp = Path(tempfile.mkdtemp(prefix="shiftbench-bench-"))
    data = images(tmp / "imgs", args.images)
    print(f"S3 server: moto (its own process) on {host}:{port}; {args.images} images, chunk size {args.chunk_size}; "
          f"best of {args.repeat}")
    print(f"{'':44s} {'local s':>9s} {'bucket s':>9s} {'ratio':>6s}")
    try:
        for label, models in (("eval cnn_a + cnn_b (2 models, 1 pass)", ["python:multimodel_models:cnn_a",
                                                                          "python:multimodel_models:cnn_b"]),
                              ("eval oracle7 (no compute: store-bound)", ["python:oracle_models:oracle7"])):
            def run(store: str | Path) -> None:
                evaluate(models, [f"folder:{data}"], store=store, workers=0, batch_size=64,
                         chunk_size=args.chunk_size, progress=False)
            local = best(lambda: run(tmp / f"local-{uuid.uuid4().hex[:6]}"), args.repeat)
            remote = best(lambda: run(f"s3://{bucket}/eval-{uuid.uuid4().hex[:6]}"), args.repeat)
            print(f"{label:44s} {local:9.3f} {remote:9.3f} {remote / local:6.2f}")
        keyed_store(tmp / "keyed", args.keys)
        uri = f"s3://{bucket}/keyed"
        sync_store(tmp / "keyed", uri)
        keys = Store(tmp / "keyed").results()["key"].tolist()
        for label, fn in ((f"Testbed.from_store ({args.keys} keys)", lambda s: Testbed.from_store(Store(s))),
                          (f"read_predictions_of ({args.keys} keys)",
                           lambda s: Store(s).read_predictions_of(keys, ["correct", "confidence"]))):
            local = best(lambda: fn(tmp / "keyed"), args.repeat)
            remote = best(lambda: fn(uri), args.repeat)
            print(f"{label:44s} {local:9.3f} {remote:9.3f} {remote / local:6.2f}")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
