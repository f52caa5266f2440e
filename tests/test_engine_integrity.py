"""What a hostile tester found in the engine, the store and the folder scan (issue 30): a forced
run racing another run of the same keys, files in formats a dataset never holds, one result per
(model, setting) whatever the chunk size or a re-trained model, a folder confined to its root,
non-UTF-8 file names, malformed finished results and a model that returns too few rows.

The models are the colour oracles of ``tests/fixtures/oracle_models.py``: every accuracy is known.
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from PIL import EpsImagePlugin, Image

from shiftbench.errors import ModelError, StoreError
from shiftbench.store import Store

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
from oracle_models import Oracle, colour_of  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ORACLE7 = "python:oracle_models:oracle7"
EPS = (b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 16 16\n"
       b"newpath 0 0 moveto 16 0 lineto 16 16 lineto closepath fill\nshowpage\n%%EOF\n")


def png_bytes(cls: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), colour_of(cls)).save(buf, "PNG")
    return buf.getvalue()


def folder(root: Path, n: int = 14, classes: int = 7) -> Path:
    """``root/class<c>/<i>.png``: image ``i`` of class ``i % classes``, coloured as its class
    except every third (so the oracle is right on 2 of 3)."""
    for i in range(n):
        cls = i % classes
        d = root / f"class{cls}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{i:04d}.png").write_bytes(png_bytes(cls if i % 3 else (cls + 1) % classes))
    return root


def evaluate(model, settings, store: Path, **kw) -> pd.DataFrame:
    from shiftbench.engine import evaluate as run

    kw.setdefault("workers", 0)
    kw.setdefault("batch_size", 2)
    return run(model, settings, store=store, progress=False, **kw)


@pytest.fixture(autouse=True)
def _fixture_models(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))


def predictions(store: Path) -> pd.DataFrame:
    s = Store(store)
    res = s.results()
    frames = [s.read_predictions(k).assign(key=k, model=m, setting=st)
              for k, m, st in zip(res["key"], res["model"], res["setting"])]
    return pd.concat(frames, ignore_index=True).sort_values(["model", "setting", "index"]).reset_index(drop=True)


# ---------------------------------------------------------------------------- item 3: --force racing a run
def _two_settings(tmp_path: Path) -> list[str]:
    return [f"folder:{folder(tmp_path / 'a', 14)}", f"folder:{folder(tmp_path / 'b', 9)}"]


def test_a_forced_run_forgetting_keys_mid_run_leaves_every_result_listed(tmp_path, monkeypatch):
    """Run A has written its first chunk when run B starts with --force on the same keys (B's
    first step forgets them, exactly as B's Pass does). A must still report all 4 results, each
    complete and equal to an undisturbed run's."""
    from shiftbench.engine import runner

    models = [ORACLE7, "python:oracle_models:slow_oracle7_twin"]
    settings = _two_settings(tmp_path)
    monkeypatch.setenv("ORACLE_DELAY", "0")
    clean = evaluate(models, settings, tmp_path / "clean", chunk_size=4)

    original = runner.Pass.write
    forced: list[str] = []

    def write(self, chunk, batches):
        original(self, chunk, batches)
        if chunk == 1 and (self.model.name, self.dataset.name) not in forced:   # B starts now, with --force
            forced.append((self.model.name, self.dataset.name))
            runner.Pass(self.model, self.dataset, [j.setting for j in self.jobs], Store(self.store.root),
                        chunk_size=self.chunk_size, force=True)
            assert not any(Store(self.store.root).parts(j.key) for j in self.jobs)  # B really forgot them

    monkeypatch.setattr(runner.Pass, "write", write)
    res = evaluate(models, settings, tmp_path / "store", chunk_size=4)
    assert len(forced) == 4                                   # both models, both datasets were reset
    assert len(res) == 4
    pd.testing.assert_frame_equal(res.drop(columns=["finished", "key"]), clean.drop(columns=["finished", "key"]))
    got, want = predictions(tmp_path / "store"), predictions(tmp_path / "clean")
    pd.testing.assert_frame_equal(got, want)
    assert got.groupby("key")["index"].apply(lambda s: s.is_unique).all() and len(got) == 2 * (14 + 9)
    # B, finishing afterwards, reports the same 4 results
    monkeypatch.setattr(runner.Pass, "write", original)
    again = evaluate(models, settings, tmp_path / "store", chunk_size=4, force=True)
    pd.testing.assert_frame_equal(again.drop(columns=["finished", "key"]), clean.drop(columns=["finished", "key"]))


def test_a_run_whose_keys_keep_being_forgotten_says_so_instead_of_listing_fewer(tmp_path, monkeypatch):
    from shiftbench.engine import runner

    settings = _two_settings(tmp_path)[:1]
    original = runner.Pass.write

    def write(self, chunk, batches):
        original(self, chunk, batches)
        for j in self.jobs:                                   # another run forgets the key every time
            with self.store.key_lock(j.key):
                self.store.forget(j.key)

    monkeypatch.setattr(runner.Pass, "write", write)
    with pytest.raises(StoreError, match=r"another run removed the parts of 1 result\(s\) 3 times.*"
                                         r"oracle_models.oracle7.*rerun when it has finished"):
        evaluate(ORACLE7, settings, tmp_path / "store", chunk_size=4)


@pytest.mark.slow
def test_two_processes_the_second_forced_both_list_every_result(tmp_path):
    """The hostile tester's recipe with two real processes: `shiftbench eval` of 2 models x 2
    settings, and the same with --force started once the first has written parts. Whatever the
    interleaving, both exit 0 listing all 4 results, with the undisturbed accuracies."""
    import time

    settings = _two_settings(tmp_path)
    cmd = [str(ROOT / ".venv" / "bin" / "shiftbench"), "eval", "--model", "python:oracle_models:slow_oracle7",
           "--model", "python:oracle_models:slow_oracle7_twin", "--setting", settings[0], "--setting", settings[1],
           "--store", str(tmp_path / "store"), "--batch-size", "2", "--chunk-size", "4", "--workers", "0", "--json"]
    env = {**os.environ, "PYTHONPATH": str(FIXTURES), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "MPLBACKEND": "Agg", "ORACLE_DELAY": "0.05"}
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not list((tmp_path / "store").glob("predictions/*/part-*.parquet")):
        time.sleep(0.02)
    second = subprocess.Popen(cmd + ["--force"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outs = [p.communicate(timeout=300) for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], [o[1][-2000:] for o in outs]
    rows = [sorted((r["model"], r["setting"], r["accuracy"], r["n_examples"]) for r in json.loads(o[0]))
            for o in outs]
    assert len(rows[0]) == 4 and rows[0] == rows[1]
    assert len(Store(tmp_path / "store").results()) == 4


# ---------------------------------------------------------------------------- item 4: image formats
def test_postscript_named_jpg_never_reaches_the_eps_plugin_and_is_skipped(tmp_path, monkeypatch):
    from shiftbench.datasets import decode_image

    opened, ghostscript = [], []
    monkeypatch.setattr(EpsImagePlugin.EpsImageFile, "_open", lambda self: opened.append(self))
    monkeypatch.setattr(EpsImagePlugin, "Ghostscript", lambda *a, **k: ghostscript.append(a))
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail(f"a process was started: {a}"))
    data = folder(tmp_path / "imgs", 7)
    (data / "class0" / "x.jpg").write_bytes(EPS)
    with pytest.raises(Exception, match="cannot decode .*not an image in a supported format"):
        decode_image(data / "class0" / "x.jpg", "class0/x.jpg")
    res = evaluate(ORACLE7, [f"folder:{data}"], tmp_path / "store").iloc[0]
    assert opened == [] and ghostscript == []
    assert res["n_skipped"] == 1 and res["n_examples"] == 7
    assert [f for f in res["skipped_files"] if "x.jpg" in f] == [
        "class0/x.jpg: cannot decode (not an image in a supported format: JPEG, PNG, WEBP, BMP, GIF, TIFF, PPM)"]


def test_every_documented_format_still_decodes(tmp_path):
    from shiftbench.datasets import decode_image

    for fmt, ext in (("JPEG", "jpg"), ("PNG", "png"), ("WEBP", "webp"), ("BMP", "bmp"), ("GIF", "gif"),
                     ("TIFF", "tif"), ("PPM", "ppm")):
        path = tmp_path / f"x.{ext}"
        Image.new("RGB", (8, 8), (200, 10, 10)).save(path, fmt)
        assert decode_image(path, path.name).size == (8, 8), fmt
    Image.new("L", (8, 8), 7).save(tmp_path / "g.pgm", "PPM")
    assert decode_image(tmp_path / "g.pgm", "g.pgm").mode == "RGB"


# ---------------------------------------------------------------------------- item 6: one result per (model, setting)
def test_another_chunk_size_reuses_the_finished_result_and_export_loads_as_a_testbed(tmp_path):
    from shiftbench import Testbed
    from shiftbench.reference.results import export_results, results_with_reference

    setting = f"folder:{folder(tmp_path / 'imgs', 14)}"
    first = evaluate(ORACLE7, setting, tmp_path / "store", chunk_size=4)
    Oracle.seen = 0
    again = evaluate(ORACLE7, setting, tmp_path / "store", chunk_size=5)
    assert Oracle.seen == 0                                   # the finished key, reused
    assert again["key"].tolist() == first["key"].tolist()
    assert len(Store(tmp_path / "store").results(history=True)) == 1
    path = export_results(results_with_reference(tmp_path / "store"), tmp_path / "exported.csv")
    tb = Testbed.read(path)
    assert tb.accuracies.shape == (1, 1) and tb.accuracies.iloc[0, 0] == pytest.approx(first["accuracy"][0])


def test_an_unfinished_key_with_another_chunk_size_restarts_cleanly(tmp_path):
    setting = f"folder:{folder(tmp_path / 'imgs', 14)}"
    clean = evaluate(ORACLE7, setting, tmp_path / "clean", chunk_size=5)
    store = Store(tmp_path / "store")
    key = evaluate(ORACLE7, setting, store.root, chunk_size=4)["key"][0]
    (store.root / "done" / f"{key}.json").unlink()            # as if killed before its last chunk ...
    (store.root / "predictions" / f"key={key}" / "part-000003.parquet").unlink()
    assert store.parts(key) == {0, 1, 2} and store.key_meta(key)["chunk_size"] == 4
    Oracle.seen = 0
    res = evaluate(ORACLE7, setting, store.root, chunk_size=5)  # ... then resumed with another chunk size
    assert Oracle.seen == 14                                  # restarted, not continued with mixed numbering
    assert store.parts(key) == {0, 1, 2} and store.key_meta(key)["chunk_size"] == 5
    assert res["key"][0] == key and res["accuracy"][0] == clean["accuracy"][0]
    pd.testing.assert_frame_equal(predictions(store.root), predictions(tmp_path / "clean"))


def test_the_same_chunk_size_still_resumes_at_the_first_missing_chunk(tmp_path):
    setting = f"folder:{folder(tmp_path / 'imgs', 14)}"
    store = Store(tmp_path / "store")
    key = evaluate(ORACLE7, setting, store.root, chunk_size=4)["key"][0]
    (store.root / "done" / f"{key}.json").unlink()
    (store.root / "predictions" / f"key={key}" / "part-000003.parquet").unlink()
    Oracle.seen = 0
    evaluate(ORACLE7, setting, store.root, chunk_size=4)
    assert Oracle.seen == 2                                   # only the last chunk (examples 12, 13)


def imagenet_val(root: Path) -> Path:
    """A few ImageNet val images of ImageNet-A classes (the oracle is right on 3 of 5)."""
    from shiftbench.datasets import classmaps as cm

    val, wnids, a = root / "imagenet" / "val", cm.imagenet_wnids(), cm.imagenet_a_indices()
    for i, (folder_cls, colour_cls) in enumerate(((a[0], a[0]), (a[1], a[1]), (a[2], a[3]), (a[4], a[4]),
                                                  (a[5], 999))):
        (val / wnids[folder_cls]).mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (20, 20), colour_of(colour_cls)).save(val / wnids[folder_cls] / f"{i}.png")
    return root


def test_kept_logits_are_only_reused_under_their_own_chunk_size(tmp_path):
    data = imagenet_val(tmp_path / "data")
    opts = dict(data_root=data, partial=True)
    evaluate("python:oracle_models:oracle", ["val"], tmp_path / "store", chunk_size=2, keep_logits=True, **opts)
    clean = evaluate("python:oracle_models:oracle", ["val-on-imagenet-a-classes"], tmp_path / "clean", **opts)
    Oracle.seen = 0
    other = evaluate("python:oracle_models:oracle", ["val-on-imagenet-a-classes"], tmp_path / "store",
                     chunk_size=3, **opts)
    assert Oracle.seen == 5                                   # logits numbered in chunks of 2: not read as 3
    assert other["accuracy"][0] == clean["accuracy"][0] == pytest.approx(100 * 3 / 5)
    Oracle.seen = 0
    evaluate("python:oracle_models:oracle", ["val-on-imagenet-a-classes"], tmp_path / "store", chunk_size=2,
             convention="argmax-all", **opts)
    assert Oracle.seen == 0                                   # the same chunk size reads them back


def test_a_changed_model_replaces_its_own_result_in_the_views_and_the_export(tmp_path):
    from shiftbench import Testbed
    from shiftbench.models import load_model
    from shiftbench.reference.results import export_results, results_with_reference

    setting = f"folder:{folder(tmp_path / 'imgs', 14)}"
    old = load_model(ORACLE7)
    evaluate(old, setting, tmp_path / "store")
    new = dataclasses.replace(old, fingerprint="retrained")   # same name, new weights: a new key
    evaluate(new, setting, tmp_path / "store")
    store = Store(tmp_path / "store")
    assert len(store.results(history=True)) == 2              # the old one stays on disk ...
    current = store.results()
    assert current["weights"].tolist() == ["retrained"]        # ... but only the new one is current
    # and under both class-subset conventions the export keeps one row per (model, setting)
    path = export_results(results_with_reference(tmp_path / "store"), tmp_path / "exported.csv")
    assert len(pd.read_csv(path)) == 1
    assert Testbed.read(path).models == [old.name]


def test_export_keeps_one_row_per_setting_across_conventions(tmp_path):
    from shiftbench import Testbed
    from shiftbench.reference.results import export_results, results_with_reference

    data = imagenet_val(tmp_path / "data")
    for conv in ("argmax-all", "restricted"):
        evaluate("python:oracle_models:oracle", ["val-on-imagenet-a-classes"], tmp_path / "store",
                 data_root=data, partial=True, convention=conv)
    assert len(Store(tmp_path / "store").results()) == 2      # both conventions, side by side
    path = export_results(results_with_reference(tmp_path / "store"), tmp_path / "exported.csv")
    frame = pd.read_csv(path)
    assert frame["convention"].tolist() == ["restricted"]
    assert Testbed.read(path).settings == ["val-on-imagenet-a-classes"]


# ---------------------------------------------------------------------------- folder: confined to its root
def test_folder_symlinks_out_of_the_root_are_skipped_and_listed(tmp_path):
    from shiftbench.datasets import load_dataset

    data = folder(tmp_path / "imgs", 12, classes=6)
    outside = folder(tmp_path / "elsewhere", 20, classes=7)   # 20 images that must never be scanned
    (data / "class6").symlink_to(outside / "class6", target_is_directory=True)     # a class folder
    (data / "class0" / "more").symlink_to(outside / "class0", target_is_directory=True)  # a sub-folder
    (data / "class1" / "one.png").symlink_to(outside / "class1" / "0001.png")      # a file
    (data / "class2" / "inside").symlink_to(data / "class3", target_is_directory=True)  # stays inside: read
    ds = load_dataset("folder", ".", path=str(data))
    assert not any("elsewhere" in str(p) for p in ds.paths)
    assert len(ds) == 12 + 2                                   # class2/inside holds class3's 2 images
    skipped = dict(ds.skipped_on_scan)
    for id_ in ("class6", "class0/more", "class1/one.png"):
        assert "outside the data root" in skipped[id_]
    assert any("3 symlink(s)" in n and "class0/more" in n for n in ds.notes)
    res = evaluate(ORACLE7, [f"folder:{data}"], tmp_path / "store").iloc[0]
    assert res["n_examples"] == 14
    assert sum("outside the data root" in f for f in res["skipped_on_scan"]) == 3


# ---------------------------------------------------------------------------- non-UTF-8 file names
def test_a_non_utf8_file_name_is_evaluated_under_an_escaped_id(tmp_path):
    data = folder(tmp_path / "imgs", 7)
    raw = os.path.join(os.fsencode(data / "class2"), b"caf\xe9.png")
    with open(raw, "wb") as fh:
        fh.write(png_bytes(2))
    res = evaluate(ORACLE7, [f"folder:{data}"], tmp_path / "store").iloc[0]
    assert res["n_examples"] == 8 and res["n_skipped"] == 0
    preds = predictions(tmp_path / "store").set_index("id")
    assert bool(preds.loc["class2/caf\\xe9.png", "correct"])


def test_an_escaped_name_equal_to_another_file_is_skipped_not_duplicated(tmp_path):
    from shiftbench.datasets import load_dataset

    data = folder(tmp_path / "imgs", 7)
    (data / "class2" / "caf\\xe9.png").write_bytes(png_bytes(2))     # a literal backslash in the name
    with open(os.path.join(os.fsencode(data / "class2"), b"caf\xe9.png"), "wb") as fh:
        fh.write(png_bytes(2))
    ds = load_dataset("folder", ".", path=str(data))
    assert ds.ids.count("class2/caf\\xe9.png") == 1 and len(ds) == 8
    assert any("not UTF-8" in why for _, why in ds.skipped_on_scan)


# ---------------------------------------------------------------------------- malformed records and models
@pytest.mark.parametrize("bad", ["{}", "[1, 2]", "dir"])
def test_a_malformed_finished_result_is_a_one_line_store_error(tmp_path, bad):
    setting = f"folder:{folder(tmp_path / 'imgs', 7)}"
    key = evaluate(ORACLE7, setting, tmp_path / "store")["key"][0]
    done = tmp_path / "store" / "done" / f"{key}.json"
    done.unlink()
    if bad == "dir":
        done.mkdir()
    else:
        done.write_text(bad)
    what = {"{}": "an empty JSON object", "[1, 2]": "a JSON array", "dir": "a folder"}[bad]
    for call in (lambda: evaluate(ORACLE7, setting, tmp_path / "store"), lambda: Store(tmp_path / "store").results()):
        with pytest.raises(StoreError) as err:
            call()
        msg = str(err.value)
        assert msg.startswith(str(done)) and what in msg and "remove it" in msg and "\n" not in msg
    if bad != "dir":                                          # --force replaces a malformed file
        assert evaluate(ORACLE7, setting, tmp_path / "store", force=True)["n_examples"][0] == 7


def test_a_model_returning_one_row_too_few_is_a_model_error_naming_the_shapes(tmp_path):
    import torch

    from shiftbench.models import load_model

    class OneShort(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x)[:-1]

    good = load_model(ORACLE7)
    short = dataclasses.replace(good, module=OneShort(good.module), name="one_short")
    with pytest.raises(ModelError) as err:
        evaluate(short, [f"folder:{folder(tmp_path / 'imgs', 7)}"], tmp_path / "store", batch_size=4)
    msg = str(err.value)
    assert "'one_short'" in msg and "(3, 7)" in msg and "batch of 4 images" in msg and "\n" not in msg
