"""Benchmark: evaluating a folder of images on the local disk vs the same images in an S3 bucket.

An S3-compatible server (moto's server mode, ``pip install 'moto[server]' s3fs``) runs as a
process of its own on a free port of localhost (so it does not share this process's interpreter
lock). ``--images`` 32 px PNGs in 7 class folders are written to a local folder and uploaded under
a bucket prefix; then the same evaluation (the fixture CNN ``cnn_a`` and the compute-free
``oracle7``, tests/fixtures/) runs on ``folder:<local dir>`` and on ``folder:s3://bucket/prefix``,
each into a new local store, with ``--workers`` DataLoader workers. The bucket side pays one
listing of the prefix and one GET per image; the oracle does no arithmetic to speak of, so its
row is the worst case: nearly all of its time is reading the images.

Each side reports the best of ``--repeat`` runs (as ``timeit`` does); the ratio is bucket / local.
Last, the bucket's images read one GET after the other against 32 at once (``load_many``, what
the engine's loader asks for per batch): the server here is on the same machine, so this shows
the least the concurrency gains; a server across a network, where each GET waits a round trip,
gains more.

Usage: python bench/bucket_data.py [--images 100] [--workers 0] [--repeat 3]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
sys.path.insert(0, str(ROOT / "bench"))

from store_bucket import best, images, s3_server  # noqa: E402 - the same server start and images


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=100)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    import s3fs

    from shiftbench.datasets import image_folder
    from shiftbench.engine import evaluate

    server, host, port = s3_server()
    bucket = f"bench-{uuid.uuid4().hex[:8]}"
    fs = s3fs.S3FileSystem()
    fs.mkdir(bucket)
    tmp = Path(tempfile.mkdtemp(prefix="shiftbench-bench-"))
    data = images(tmp / "imgs", args.images)
    fs.put(f"{data}/", f"{bucket}/imgs", recursive=True)
    uri = f"s3://{bucket}/imgs"
    print(f"S3 server: moto (its own process) on {host}:{port}; {args.images} images, {args.workers} workers; "
          f"best of {args.repeat}")
    print(f"{'':44s} {'local s':>9s} {'bucket s':>9s} {'ratio':>6s}")
    try:
        local = best(lambda: image_folder(data), args.repeat)
        remote = best(lambda: image_folder(uri), args.repeat)
        print(f"{'scan (local: os.scandir; bucket: 1 listing)':44s} {local:9.3f} {remote:9.3f} {remote / local:6.2f}")
        for label, model in (("eval cnn_a", "python:multimodel_models:cnn_a"),
                             ("eval oracle7 (no compute: read-bound)", "python:oracle_models:oracle7")):
            def run(folder: str | Path) -> None:
                evaluate(model, [f"folder:{folder}"], store=tmp / f"st-{uuid.uuid4().hex[:6]}",
                         workers=args.workers, batch_size=32, progress=False)
            local = best(lambda: run(data), args.repeat)
            remote = best(lambda: run(uri), args.repeat)
            print(f"{label:44s} {local:9.3f} {remote:9.3f} {remote / local:6.2f}")
        # the bucket's images one GET after the other (ImageDataset.load) vs a batch's GETs at once
        # (load_many, what the engine's loader asks for: one concurrent request per batch)
        ds = image_folder(uri)
        one = best(lambda: [ds.load(i) for i in range(len(ds))], args.repeat)
        many = best(lambda: [ds.load_many(list(range(s, min(len(ds), s + 32)))) for s in range(0, len(ds), 32)],
                    args.repeat)
        print(f"bucket: {len(ds)} images one GET at a time {one:.3f} s, 32 at once {many:.3f} s ({one / many:.1f}x)")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
