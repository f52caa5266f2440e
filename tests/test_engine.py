"""The evaluation engine end to end: real image files in real layouts, the runner, the store.

Most tests use the ``oracle`` model (tests/fixtures/oracle_models.py), which reads the
ImageNet class out of an image's colour, so every expected accuracy is known exactly.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from shiftbench.datasets import classmaps as cm
from shiftbench.errors import ConfigError, ModelError
from shiftbench.store import Store

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
from oracle_models import Oracle, colour_of  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHIFTBENCH = str(ROOT / ".venv" / "bin" / "shiftbench")
ORACLE = "python:oracle_models:oracle"

A = cm.imagenet_a_indices()
R = cm.imagenet_r_indices()
WNIDS = cm.imagenet_wnids()


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(FIXTURES), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            "MPLBACKEND": "Agg"}


def put(root: Path, folder_cls: int, colour_cls: int, name: str) -> None:
    d = root / WNIDS[folder_cls]
    d.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (20, 20), colour_of(colour_cls)).save(d / f"{name}.png")


@pytest.fixture
def val(tmp_path: Path) -> Path:
    """A partial ImageNet val: 3 ImageNet-A-class images (2 right), 2 other images (1 right),
    1 image whose true class is in A but the model says a non-A class, and one empty file."""
    root = tmp_path / "data" / "imagenet" / "val"
    not_a = next(c for c in range(1000) if c not in A and c not in R)
    put(root, A[0], A[0], "a_right_0")
    put(root, A[1], A[1], "a_right_1")
    put(root, A[2], A[3], "a_wrong_in_subset")       # wrong under both conventions
    put(root, A[4], not_a, "a_wrong_outside")        # argmax-all wrong; restricted: picks within A
    put(root, not_a, not_a, "other_right")
    put(root, not_a + 1 if not_a + 1 not in A else not_a + 2, 999, "other_wrong")
    (root / WNIDS[0]).mkdir(exist_ok=True)
    (root / WNIDS[0] / "empty.png").write_bytes(b"")
    return tmp_path / "data"


def run(data: Path, settings, store: Path, **kw) -> pd.DataFrame:
    from shiftbench.engine import evaluate

    kw.setdefault("workers", 0)
    kw.setdefault("batch_size", 4)
    return evaluate(kw.pop("model", ORACLE), settings, data_root=data, store=store, partial=True,
                    progress=False, **kw).set_index("setting")


def test_val_and_class_subsets_share_one_decode_and_score_exactly(val, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    Oracle.seen = 0
    res = run(val, ["val", "val-on-imagenet-a-classes"], tmp_path / "store")
    assert Oracle.seen == 7                                   # 7 files, one pass for both settings
    assert res.loc["val", "n_examples"] == 6 and res.loc["val", "n_skipped"] == 1
    assert res.loc["val", "accuracy"] == pytest.approx(100 * 3 / 6)
    assert any("empty.png" in f for f in res.loc["val", "skipped_files"])
    sub = res.loc["val-on-imagenet-a-classes"]
    assert sub["n_examples"] == 4 and sub["convention"] == "restricted"
    # restricted to A's logits, the outside-A prediction falls back to the runner-up inside A?
    # No: the oracle's runner-up is cls+1, usually not in A, so within A all logits tie at -5
    # and the restricted argmax is A's first class -> wrong here; the two right ones stay right.
    assert sub["accuracy"] == pytest.approx(50.0)


def test_argmax_all_convention_is_stored_beside_the_number(val, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    strict = run(val, ["val-on-imagenet-a-classes"], tmp_path / "store", convention="argmax-all")
    published = run(val, ["val-on-imagenet-a-classes"], tmp_path / "store")
    assert strict.iloc[0]["convention"] == "argmax-all" and published.iloc[0]["convention"] == "restricted"
    assert len(Store(tmp_path / "store").results()) == 2      # two keys, side by side


def test_finished_setting_is_not_recomputed_unless_forced(val, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    first = run(val, ["val"], tmp_path / "store")
    Oracle.seen = 0
    again = run(val, ["val"], tmp_path / "store")
    assert Oracle.seen == 0
    assert again.loc["val", "accuracy"] == first.loc["val", "accuracy"]
    run(val, ["val"], tmp_path / "store", force=True)
    assert Oracle.seen == 7
    preds = Store(tmp_path / "store").read_predictions(Store(tmp_path / "store").results()["key"][0])
    assert len(preds) == 7 and preds["index"].is_unique      # forced rerun replaced, not appended


def test_new_view_over_kept_logits_needs_no_forward_pass(val, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    run(val, ["val"], tmp_path / "store", keep_logits=True)
    Oracle.seen = 0
    res = run(val, ["val-on-imagenet-a-classes", "val-on-objectnet-classes"], tmp_path / "store")
    assert Oracle.seen == 0
    assert res.loc["val-on-imagenet-a-classes", "accuracy"] == pytest.approx(50.0)


def test_limit_evaluates_the_first_examples_under_its_own_key(val, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    res = run(val, ["val"], tmp_path / "store", limit=3)
    full = run(val, ["val"], tmp_path / "store")
    assert res.loc["val", "n_examples"] + res.loc["val", "n_skipped"] == 3
    assert full.loc["val", "n_examples"] == 6
    assert len(Store(tmp_path / "store").results(history=True)) == 2
    assert Store(tmp_path / "store").results()["n_examples"].tolist() == [6]   # the quick look never hides it


def test_wrong_output_width_and_nan_logits_name_the_model(val, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    with pytest.raises(ModelError, match="ten_classes"):
        run(val, ["val"], tmp_path / "s1", model="python:oracle_models:ten_classes")
    with pytest.raises(ModelError, match="nan_model"):
        run(val, ["val"], tmp_path / "s2", model="python:oracle_models:nan_model")


def test_unknown_setting_and_missing_layout_are_one_line_errors(tmp_path, monkeypatch):
    from shiftbench.datasets import LayoutError
    from shiftbench.engine import evaluate

    monkeypatch.syspath_prepend(str(FIXTURES))
    with pytest.raises(ConfigError, match="did you mean 'imagenet-a'"):
        evaluate(ORACLE, ["imagenet-A"], store=tmp_path / "s", progress=False)
    with pytest.raises(LayoutError, match="imagenet-r: expected .*missing"):
        evaluate(ORACLE, ["imagenet-r"], data_root=tmp_path, store=tmp_path / "s", progress=False)


def test_store_results_testbed_and_duckdb_agree(val, tmp_path, monkeypatch):
    from shiftbench import Testbed, load_testbed

    monkeypatch.syspath_prepend(str(FIXTURES))
    run(val, ["val", "val-on-imagenet-a-classes"], tmp_path / "store")
    tb = Testbed.from_store(tmp_path / "store")
    model = "oracle_models.oracle"
    assert tb.accuracies.at[model, "val"] == pytest.approx(50.0)
    assert tb.sizes.at[model, "val-on-imagenet-a-classes"] == 4
    merged = load_testbed("imagenet-reference").merge(tb)
    assert model in merged.models and len(merged) == 339
    con = Store(tmp_path / "store").connect()
    n, acc = con.execute("SELECT count(*), avg(correct::INT) FROM predictions p JOIN results r USING (key) "
                         "WHERE r.setting = 'val' AND p.status = 'ok'").fetchone()
    assert (n, acc) == (6, 0.5)


def test_results_show_the_reference_difference(val, tmp_path, monkeypatch):
    from shiftbench.engine import evaluate
    from shiftbench.reference.results import results_with_reference
    from shiftbench.models import load_model

    monkeypatch.syspath_prepend(str(FIXTURES))
    m = load_model(ORACLE, name="resnet50")                # pretend to be torchvision's ResNet-50
    evaluate(m, ["val"], data_root=val, store=tmp_path / "store", partial=True, workers=0, progress=False)
    row = results_with_reference(tmp_path / "store").iloc[0]
    assert row["reference"] == "imagenet-reference"
    assert row["reference_delta"] == pytest.approx(50.0 - 76.130005, abs=1e-4)


# ---------------------------------------------------------------------------- processes
def folder_dataset(root: Path, n: int) -> Path:
    for i in range(n):
        cls = i % 7
        d = root / f"class{cls}"
        d.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (16, 16), colour_of(cls if i % 3 else (cls + 1) % 7)).save(d / f"{i:04d}.png")
    return root


def eval_cmd(store: Path, data: Path, model: str = "python:oracle_models:slow_oracle7", *extra: str) -> list[str]:
    return [SHIFTBENCH, "eval", "--model", model, "--setting", f"folder:{data}", "--store", str(store),
            "--batch-size", "4", "--chunk-size", "8", "--workers", "0", "--json", *extra]


def predictions(store: Path) -> pd.DataFrame:
    s = Store(store)
    frames = [s.read_predictions(k) for k in s.results()["key"]]
    return pd.concat(frames, ignore_index=True).drop(columns=["error"])


def test_cli_eval_json_is_one_array_with_the_documented_keys(tmp_path):
    data = folder_dataset(tmp_path / "imgs", 14)
    out = subprocess.run(eval_cmd(tmp_path / "store", data, "python:oracle_models:oracle7"), env=env(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [set(r) for r in rows] == [{"model", "setting", "accuracy", "top5", "n_examples", "n_skipped"}]
    assert rows[0]["n_examples"] == 14 and 0 <= rows[0]["accuracy"] <= 100


@pytest.mark.slow
def test_kill_9_mid_run_resumes_to_exactly_the_uninterrupted_result(tmp_path):
    data = folder_dataset(tmp_path / "imgs", 96)
    clean = subprocess.run(eval_cmd(tmp_path / "clean", data), env={**env(), "ORACLE_DELAY": "0"},
                           capture_output=True, text=True, timeout=300)
    assert clean.returncode == 0, clean.stderr
    store = tmp_path / "killed"
    proc = subprocess.Popen(eval_cmd(store, data), env={**env(), "ORACLE_DELAY": "0.15"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and len(list(store.glob("predictions/*/part-*.parquet"))) < 3:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    parts_before = len(list(store.glob("predictions/*/part-*.parquet")))
    assert 3 <= parts_before < 12, "killed too late to test a resume"
    assert not list(store.glob("done/*.json"))
    again = subprocess.run(eval_cmd(store, data), env={**env(), "ORACLE_DELAY": "0"}, capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    pd.testing.assert_frame_equal(predictions(store), predictions(tmp_path / "clean"))
    assert json.loads(again.stdout)[0]["accuracy"] == json.loads(clean.stdout)[0]["accuracy"]


@pytest.mark.slow
def test_two_runs_writing_one_store_at_once_agree_and_do_not_duplicate(tmp_path):
    data = folder_dataset(tmp_path / "imgs", 48)
    procs = [subprocess.Popen(eval_cmd(tmp_path / "store", data), env={**env(), "ORACLE_DELAY": "0.02"},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    assert json.loads(outs[0][0]) == json.loads(outs[1][0])
    preds = predictions(tmp_path / "store")
    assert len(preds) == 48 and preds["index"].is_unique
    assert not list((tmp_path / "store").rglob("*.tmp"))


@pytest.mark.slow
def test_ray_executor_retries_a_dead_worker_without_duplicates(tmp_path):
    data = folder_dataset(tmp_path / "imgs", 24)
    marker = tmp_path / "died"
    code = (
        "import json, sys; sys.path.insert(0, %r)\n"
        "from shiftbench.engine.ray_executor import evaluate_ray\n"
        "import ray; ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)\n"
        "res = evaluate_ray(['python:oracle_models:dying_oracle7', 'python:oracle_models:oracle7'], [%r], "
        "store=%r, batch_size=4, chunk_size=8, workers=0)\n"
        "print(json.dumps(res[['model', 'accuracy', 'n_examples']].to_dict('records')))\n"
    ) % (str(FIXTURES), f"folder:{data}", str(tmp_path / "store"))
    out = subprocess.run([sys.executable, "-c", code], env={**env(), "ORACLE_DIE_MARKER": str(marker)},
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    # Ray's raylet may print its "task failed, will be retried" line to stdout after the result
    rows = json.loads([ln for ln in out.stdout.splitlines() if ln.startswith("[")][-1])
    assert marker.exists()                                  # a worker really died once
    assert {r["model"] for r in rows} == {"oracle_models.dying_oracle7", "oracle_models.oracle7"}
    assert rows[0]["accuracy"] == rows[1]["accuracy"] and all(r["n_examples"] == 24 for r in rows)
    preds = predictions(tmp_path / "store")
    assert len(preds) == 48 and not preds.duplicated(["index", "id", "pred"]).sum() > 24


def test_real_efficientnet_lite0_recognises_real_photos_through_the_engine(tmp_path):
    from skimage import data as skdata

    from shiftbench.engine import evaluate

    root = tmp_path / "data" / "imagenet" / "val"
    for name, cls in (("chelsea", 285), ("coffee", 967)):       # Egyptian cat, espresso
        d = root / WNIDS[cls]
        d.mkdir(parents=True)
        Image.fromarray(getattr(skdata, name)()[..., :3]).save(d / f"{name}.JPEG", quality=95)
    res = evaluate("efficientnet-lite0", ["val"], data_root=tmp_path / "data", store=tmp_path / "store",
                   partial=True, workers=0, batch_size=2, progress=False)
    assert res.iloc[0]["top5"] == 100.0 and res.iloc[0]["n_examples"] == 2
    preds = predictions(tmp_path / "store").set_index("id")
    assert 285 in preds.loc[f"{WNIDS[285]}/chelsea.JPEG", "top5"]
    assert preds.loc[f"{WNIDS[967]}/coffee.JPEG", "pred"] == 967


# ---------------------------------------------------------------------------- synthetic shifts
def test_every_shift_reuses_one_decode_and_results_do_not_depend_on_batch_size(val, tmp_path, monkeypatch):
    from shiftbench.datasets.base import FileDataset

    monkeypatch.syspath_prepend(str(FIXTURES))
    decoded = []
    original = FileDataset.load
    monkeypatch.setattr(FileDataset, "load", lambda self, i: decoded.append(i) or original(self, i))
    settings = ["val", "val+spatter.3", "val+brightness.5", "greyscale"]
    a = run(val, settings, tmp_path / "s1", batch_size=4, model="python:oracle_models:oracle32")
    assert len(decoded) == 7                                  # 7 files, decoded once for 4 settings
    b = run(val, settings, tmp_path / "s2", batch_size=2, model="python:oracle_models:oracle32")
    pd.testing.assert_frame_equal(predictions(tmp_path / "s1").sort_values(["id", "pred"]).reset_index(drop=True),
                                  predictions(tmp_path / "s2").sort_values(["id", "pred"]).reset_index(drop=True))
    assert a.loc["val+spatter.3", "accuracy"] == b.loc["val+spatter.3", "accuracy"]
    # brightness at severity 5 lifts every colour: the colour oracle must fail
    assert a.loc["val+brightness.5", "accuracy"] < a.loc["val", "accuracy"]
    keys = Store(tmp_path / "s1").results().set_index("setting")
    assert keys.loc["val+spatter.3", "shift"] == "spatter.3" and pd.isna(keys.loc["val", "shift"])


def test_unknown_shift_or_severity_in_a_setting_is_a_config_error():
    from shiftbench.settings import get_setting

    with pytest.raises(ConfigError, match="did you mean 'spatter'"):
        get_setting("val+spater.3")
    with pytest.raises(ConfigError, match="severity 7"):
        get_setting("cifar10+contrast.7")
