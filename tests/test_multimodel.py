"""Shift once, evaluate many: one stream over a dataset serves every model of a request.

Models with one preprocessing share the decoded tensor and each shift's output; a model with
another resize/crop shares the decode. The store a multi-model pass leaves is the store of
one-model-at-a-time runs, bit for bit; a kill mid-run resumes every model; a failing model
is named while the others finish; a memory bound splits the models into passes that fit.
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

from shiftbench.engine import EvalRequest, LocalExecutor, evaluate
from shiftbench.engine import runner as R
from shiftbench.errors import ConfigError, ModelError
from shiftbench.store import Store

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
ROOT = Path(__file__).resolve().parents[1]
SHIFTBENCH = str(ROOT / ".venv" / "bin" / "shiftbench")
MODELS = [f"python:multimodel_models:{m}" for m in ("cnn_a", "cnn_b", "cnn_c")]
SHIFTS = ("gaussian_noise.3", "contrast.2", "pixelate.4", "elastic_transform.1")


def textured_folder(root: Path, n: int = 30, size: int = 48) -> Path:
    """``n`` textured RGB images (seeded noise on a class colour) in ``class0``..``class6``."""
    rng = np.random.default_rng(0)
    for i in range(n):
        d = root / f"class{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        base = np.array([(37 * (i % 7)) % 256, 90, 160], np.float32)
        img = np.clip(base + rng.normal(0, 40, (size, size + 8 * (i % 3), 3)), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(d / f"{i:03d}.png")
    return root


def settings_for(data: Path) -> list[str]:
    return [f"folder:{data}", *(f"folder:{data}+{s}" for s in SHIFTS)]


def stored(store: Path) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    s = Store(store)
    results = s.results().drop(columns=["finished"]).sort_values("key").reset_index(drop=True)
    return results, {k: s.read_predictions(k) for k in results["key"]}


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return textured_folder(tmp_path / "imgs")


def test_one_pass_for_three_models_leaves_the_store_of_one_model_at_a_time(tmp_path, data, monkeypatch):
    """Bit for bit: results and per-example rows; and every image decoded once, every shift run
    once per pixel pipeline (cnn_a and cnn_b share one, cnn_c has its own), not once per model."""
    monkeypatch.syspath_prepend(str(FIXTURES))
    settings = settings_for(data)
    for m in MODELS:
        evaluate(m, settings, store=tmp_path / "alone", batch_size=8, chunk_size=16, workers=0, progress=False)

    decoded, shifted = [], []
    load, apply = R._Decoded.__getitems__, R.Pass._shifted     # the loader asks for a batch at a time
    monkeypatch.setattr(R._Decoded, "__getitems__", lambda self, idx: decoded.extend(idx) or load(self, idx))
    monkeypatch.setattr(R.Pass, "_shifted", lambda self, module, x, idx: shifted.append(
        (self.shift.id, self.model.preprocessing.resize, len(idx))) or apply(self, module, x, idx))
    together = evaluate(MODELS, settings, store=tmp_path / "together", batch_size=8, chunk_size=16, workers=0,
                        progress=False)

    assert sorted(decoded) == list(range(30)), "each image is decoded exactly once"
    per_pipeline = {(s, r): sum(n for s2, r2, n in shifted if (s2, r2) == (s, r)) for s, r, _ in shifted}
    assert per_pipeline == {(s, r): 30 for s in SHIFTS for r in (32, 40)}
    alone_results, alone_preds = stored(tmp_path / "alone")
    together_results, together_preds = stored(tmp_path / "together")
    pd.testing.assert_frame_equal(together_results, alone_results)
    assert together_preds.keys() == alone_preds.keys() and len(together_preds) == 3 * 5
    for key, rows in together_preds.items():
        pd.testing.assert_frame_equal(rows, alone_preds[key])
    assert list(together["model"].unique()) == ["multimodel_models.cnn_a", "multimodel_models.cnn_b",
                                               "multimodel_models.cnn_c"]
    runs = Store(tmp_path / "together").runs()
    assert len(runs) == 3 and set(runs["models_in_pass"]) == {3}


def test_a_seeded_shift_is_the_same_image_whatever_the_models_and_the_batch_size(tmp_path, data, monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    seen: dict[tuple[str, int, str], list[np.ndarray]] = {}
    apply = R.Pass._shifted

    def record(run):
        def wrapped(self, module, x, idx):
            out = apply(self, module, x, idx)
            for i, img in zip(idx.tolist(), out):
                seen.setdefault((self.shift.id, int(i), run), []).append(img.numpy().copy())
            return out
        return wrapped

    settings = settings_for(data)[1:]
    monkeypatch.setattr(R.Pass, "_shifted", record("alone"))
    evaluate(MODELS[0], settings, store=tmp_path / "a", batch_size=3, workers=0, progress=False)
    monkeypatch.setattr(R.Pass, "_shifted", record("group"))
    evaluate(MODELS[:2], settings, store=tmp_path / "b", batch_size=16, workers=0, progress=False)
    for shift in SHIFTS:
        for i in range(30):
            alone, group = seen[(shift, i, "alone")], seen[(shift, i, "group")]
            assert len(alone) == len(group) == 1, "one shift per image and pipeline, shared by both models"
            np.testing.assert_array_equal(alone[0], group[0])


def test_a_failing_model_is_named_and_the_others_finish(tmp_path, data, monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    models = [MODELS[0], "python:multimodel_models:wide_7", MODELS[1], "python:multimodel_models:nan_7"]
    with pytest.raises(ModelError) as info:
        evaluate(models, settings_for(data)[:2], store=tmp_path / "s", workers=0, progress=False)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("2 of 4 models failed")
    assert "'multimodel_models.wide_7' outputs 9 logits" in msg and "'multimodel_models.nan_7'" in msg
    done = Store(tmp_path / "s").results()
    assert sorted(set(done["model"])) == ["multimodel_models.cnn_a", "multimodel_models.cnn_b"] and len(done) == 4
    runs = Store(tmp_path / "s").runs().set_index("model")
    assert "outputs 9 logits" in runs.loc["multimodel_models.wide_7", "error"]
    # the finished models are not recomputed: a rerun without the bad ones only reads the store
    again = evaluate(models[::2], settings_for(data)[:2], store=tmp_path / "s", workers=0, progress=False)
    assert len(again) == 4 and len(Store(tmp_path / "s").runs()) == 4 + 2


def test_the_cli_names_the_failing_model_in_one_line(tmp_path, data):
    proc = subprocess.run([SHIFTBENCH, "eval", "-m", MODELS[0], "-m", "python:multimodel_models:wide_7",
                           "-s", f"folder:{data}", "--store", str(tmp_path / "s"), "--workers", "0"],
                          env={**os.environ, "PYTHONPATH": str(FIXTURES)}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "models failed" in ln]
    assert len(lines) == 1 and "wide_7" in lines[0] and "cnn_a" not in lines[0].split("(", 1)[0]
    assert set(Store(tmp_path / "s").results()["model"]) == {"multimodel_models.cnn_a"}


def test_a_memory_limit_splits_the_models_into_passes_that_fit(tmp_path, data, monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    settings = settings_for(data)[:3]
    req = EvalRequest.build(MODELS, settings, store=tmp_path / "s", batch_size=8, workers=0)
    loaded = [R.load_for(m, req, "cpu") for m in MODELS]
    one = max(R.memory_need([m], 8) for m in loaded)
    # room for one model and its batches, not two: three passes, one model each
    LocalExecutor().run(EvalRequest.build(MODELS, settings, store=tmp_path / "s", batch_size=8, workers=0,
                                          memory_limit=one + 1), progress=False)
    assert list(Store(tmp_path / "s").runs()["models_in_pass"]) == [1, 1, 1]
    pd.testing.assert_frame_equal(stored(tmp_path / "s")[0].drop(columns=["key"]),
                                  stored(_together(tmp_path, settings))[0].drop(columns=["key"]))
    with pytest.raises(ConfigError, match=r"memory limit 1\.0 KiB is too small for model 'multimodel_models\.cnn_a': "
                                          r"it needs at least .* KiB .*raise --max-memory or lower --batch-size"):
        evaluate(MODELS, settings, store=tmp_path / "t", batch_size=8, workers=0, memory_limit="1KiB",
                 progress=False)
    assert R.memory_need(loaded[:2], 8) < R.memory_need(loaded[:1], 8) + R.memory_need(loaded[1:2], 8), \
        "models of one pipeline share its batches"


def _together(tmp_path: Path, settings: list[str]) -> Path:
    evaluate(MODELS, settings, store=tmp_path / "one-pass", batch_size=8, workers=0, progress=False)
    return tmp_path / "one-pass"


def test_the_cli_says_when_models_share_only_the_decode(tmp_path, data):
    proc = subprocess.run([SHIFTBENCH, "eval", *(a for m in MODELS for a in ("-m", m)), "-s", f"folder:{data}",
                           "-s", f"folder:{data}+contrast.2", "--store", str(tmp_path / "s"), "--workers", "0",
                           "--max-memory", "2GiB", "--json"],
                          env={**os.environ, "PYTHONPATH": str(FIXTURES)}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)) == 6
    bad = subprocess.run([SHIFTBENCH, "eval", "-m", MODELS[0], "-s", f"folder:{data}", "--store",
                          str(tmp_path / "s"), "--max-memory", "lots"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(FIXTURES)}, timeout=300)
    assert bad.returncode != 0 and "memory limit 'lots' is not a size" in bad.stderr and "Traceback" not in bad.stderr


def test_the_pipelines_note_names_each_resize(tmp_path, data, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(FIXTURES))
    evaluate(MODELS, [f"folder:{data}+contrast.2"], store=tmp_path / "s", workers=0, progress=True)
    err = capsys.readouterr().err
    assert ("note: 3 models on" in err and "2 pixel pipelines: 32x32 px, resize 32, bilinear: 2 models; "
            "32x32 px, resize 40, bicubic: 1 models" in err)


@pytest.mark.slow
def test_kill_9_mid_multi_model_run_resumes_every_model_to_the_uninterrupted_store(tmp_path, data):
    slow = ["python:multimodel_models:slow_a", "python:multimodel_models:slow_b"]

    def cmd(store: Path) -> list[str]:
        return [SHIFTBENCH, "eval", *(a for m in slow for a in ("-m", m)), "-s", f"folder:{data}",
                "-s", f"folder:{data}+gaussian_noise.2", "--store", str(store), "--workers", "0",
                "--batch-size", "2", "--chunk-size", "4", "--json"]

    env = {**os.environ, "PYTHONPATH": str(FIXTURES)}
    clean = subprocess.run(cmd(tmp_path / "clean"), env={**env, "CNN_DELAY": "0"}, capture_output=True, text=True,
                           timeout=300)
    assert clean.returncode == 0, clean.stderr
    store = tmp_path / "killed"
    proc = subprocess.Popen(cmd(store), env={**env, "CNN_DELAY": "0.1"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and len(list(store.glob("predictions/*/part-*.parquet"))) < 8:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    parts = list(store.glob("predictions/*/part-*.parquet"))
    assert 8 <= len(parts) < 32 and not list(store.glob("done/*.json")), "killed too late to test a resume"
    assert len({p.parent for p in parts}) == 4, "every model had finished chunks of both settings"
    again = subprocess.run(cmd(store), env={**env, "CNN_DELAY": "0"}, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    clean_results, clean_preds = stored(tmp_path / "clean")
    results, preds = stored(store)
    pd.testing.assert_frame_equal(results, clean_results)
    for key, rows in preds.items():
        assert rows["index"].is_unique
        pd.testing.assert_frame_equal(rows, clean_preds[key])
    assert json.loads(again.stdout) == json.loads(clean.stdout)
