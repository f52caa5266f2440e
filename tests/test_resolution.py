"""Resolution sweep: every resolution evaluated with the right preprocessing under its own
model name, accuracy that really depends on resolution, and the best one picked."""
from __future__ import annotations

import doctest
import textwrap
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from shiftbench.errors import ConfigError
from shiftbench.models import Preprocessing, load_model
from shiftbench.studies import resolution
from shiftbench.studies.resolution import RESOLUTIONS, resolution_preprocessing, resolution_sweep
from shiftbench.store import Store

PERIODS = (2, 3, 4, 6, 8, 12)

STRIPE_MODEL = textwrap.dedent('''
    import torch

    SEEN = []

    class StripeDetector(torch.nn.Module):
        """Class 1 ('striped') when neighbouring pixels differ a lot on average, else 0 ('flat').

        Fine stripes blur away when the image is shrunk, so accuracy grows with resolution."""

        num_classes = 2  # (declared, so loading needs no probe forward pass)

        def forward(self, x):
            SEEN.append(tuple(x.shape[-2:]))
            energy = (x[..., 1:] - x[..., :-1]).abs().mean(dim=(1, 2, 3))
            return torch.stack([torch.full_like(energy, 0.1), energy], 1)

    def build():
        return StripeDetector()

    class FixedSize(torch.nn.Module):
        """A network that only takes 96 x 96 inputs (like a ViT without dynamic image size)."""

        num_classes = 2

        def forward(self, x):
            if x.shape[-1] != 96:
                raise RuntimeError(f"Input width ({x.shape[-1]}) doesn't match model (96).")
            return torch.zeros(x.shape[0], 2)

    def fixed():
        return FixedSize()

    class Constant(torch.nn.Module):
        num_classes = 2

        def forward(self, x):
            return torch.zeros(x.shape[0], 2)

    def constant():
        return Constant()
''')


@pytest.fixture
def stripes(tmp_path: Path, monkeypatch) -> dict:
    """A folder dataset: 6 striped images (vertical stripes, periods 2-12 px) and 6 flat ones."""
    root = tmp_path / "data"
    for cls in ("flat", "striped"):
        (root / cls).mkdir(parents=True)
    cols = np.arange(320)
    for p in PERIODS:
        row = np.where((cols // (p / 2)).astype(int) % 2 == 0, 40, 215).astype(np.uint8)
        Image.fromarray(np.repeat(np.tile(row, (320, 1))[..., None], 3, axis=2)).save(root / "striped" / f"p{p}.png")
        shade = 60 + 25 * p
        Image.new("RGB", (320, 320), (shade, shade, shade - 20)).save(root / "flat" / f"f{p}.png")
    (tmp_path / "stripe_models.py").write_text(STRIPE_MODEL)
    monkeypatch.syspath_prepend(str(tmp_path))
    return {"setting": f"folder:{root}", "store": tmp_path / "store"}


def test_each_resolution_is_evaluated_with_its_own_preprocessing_and_name(stripes):
    import stripe_models

    stripe_models.SEEN.clear()
    res = resolution_sweep("python:stripe_models:build", stripes["setting"], resolutions=(48, 96, 224),
                           store=stripes["store"], batch_size=4)
    assert res["resolution"].tolist() == [48, 96, 224]
    assert res["model"].tolist() == [f"stripe_models.build@res{r}" for r in (48, 96, 224)]
    assert res["input_size"].tolist() == [48, 96, 224]
    assert res["resize"].tolist() == [55, 110, 256]  # round(r / 0.875): the model's 256 -> 224 ratio
    assert res["crop_pct"].round(2).tolist() == [0.87, 0.87, 0.88]
    assert res["n_examples"].tolist() == [12, 12, 12]
    assert {s[0] for s in stripe_models.SEEN} == {48, 96, 224}
    stored = Store(stripes["store"]).results().set_index("model")
    for r, resize in ((48, 55), (96, 110), (224, 256)):
        pre = stored.loc[f"stripe_models.build@res{r}", "preprocessing"]
        assert (pre["input_size"], pre["resize"]) == (r, resize)
    # accuracy really depends on resolution here: fine stripes survive only at high resolution
    acc = res["accuracy"].tolist()
    assert acc[0] < acc[1] < acc[2] == 100.0
    assert res["best"].tolist() == [False, False, True] and res.attrs["best_resolution"] == 224
    # the native resolution reproduces the model's ordinary evaluation
    import shiftbench

    plain = shiftbench.evaluate("python:stripe_models:build", stripes["setting"], store=stripes["store"],
                                progress=False)
    assert plain["accuracy"][0] == acc[2]
    # finished points are reused, not recomputed
    stripe_models.SEEN.clear()
    again = resolution_sweep("python:stripe_models:build", stripes["setting"], resolutions=(48, 96, 224),
                             store=stripes["store"])
    assert stripe_models.SEEN == [] and again["accuracy"].tolist() == acc


def test_without_the_ratio_adjustment_the_crop_is_the_whole_centre_square(stripes):
    res = resolution_sweep("python:stripe_models:build", stripes["setting"], resolutions=(64, 128),
                           store=stripes["store"], adjust_resize_ratio=False)
    assert res["resize"].tolist() == [64, 128] and res["crop_pct"].tolist() == [1.0, 1.0]


def test_ties_pick_the_smallest_resolution_and_unrunnable_sizes_are_recorded(stripes):
    res = resolution_sweep("python:stripe_models:fixed", stripes["setting"], resolutions=(64, 96, 128),
                           store=stripes["store"])
    assert res["accuracy"].isna().tolist() == [True, False, True]
    assert "doesn't match model" in res.loc[0, "error"]
    assert res["accuracy"][1] == 50.0 and res["best"].tolist() == [False, True, False]
    flat = resolution_sweep(load_model("python:stripe_models:constant"), stripes["setting"], resolutions=(320, 224),
                            store=stripes["store"])
    assert flat["accuracy"].tolist() == [50.0, 50.0] and flat.attrs["best_resolution"] == 224
    assert flat["model"].tolist() == ["stripe_models.constant@res320", "stripe_models.constant@res224"]


def test_resolution_preprocessing_keeps_everything_else():
    base = Preprocessing(input_size=224, resize=248, interpolation="bicubic", mean=(0.5,) * 3, std=(0.5,) * 3)
    assert resolution_preprocessing(base, 224) == base  # native size: exactly the model's own
    p = resolution_preprocessing(base, 384)
    assert (p.input_size, p.resize, p.interpolation, p.mean) == (384, round(384 * 248 / 224), "bicubic", (0.5,) * 3)
    assert resolution_preprocessing(base, 384, adjust_resize_ratio=False).resize == 384
    assert RESOLUTIONS == (64, 128, 224, 288, 320, 384, 512, 768)
    with pytest.raises(ConfigError, match="positive integer"):
        resolution_preprocessing(base, 0)


def test_bad_arguments_are_config_errors(stripes):
    with pytest.raises(ConfigError, match="repeated"):
        resolution_sweep("python:stripe_models:build", stripes["setting"], resolutions=(64, 64))
    with pytest.raises(ConfigError, match="one setting"):
        resolution_sweep("python:stripe_models:build", [stripes["setting"]], resolutions=(64,))
    with pytest.raises(ConfigError, match="positive integers"):
        resolution_sweep("python:stripe_models:build", stripes["setting"], resolutions=(64.5,))


def test_docstring_examples_run():
    result = doctest.testmod(resolution)
    assert result.attempted > 0 and result.failed == 0


def test_a_sweep_is_stored_as_a_study_and_a_rerun_replaces_it(stripes):
    store = Store(stripes["store"])
    res = resolution_sweep("python:stripe_models:build", stripes["setting"], resolutions=(48, 96), store=store)
    name = res.attrs["study"]
    assert name.startswith("stripe_models.build__folder_") and "/" not in name
    assert store.study_names("resolution") == [name]
    stored = store.read_study("resolution", name)
    assert stored["resolution"].tolist() == [48, 96] and stored["accuracy"].tolist() == res["accuracy"].tolist()
    assert stored["best"].tolist() == [False, True] and stored["error"].isna().all()
    assert (stored["native_resolution"] == 224).all() and (stored["setting"] == stripes["setting"]).all()
    assert (stored["base_model"] == "stripe_models.build").all()
    meta = store.study_meta("resolution", name)
    assert meta["best_resolution"] == 96 and meta["resolutions"] == [48, 96] and meta["adjust_resize_ratio"] is True
    again = resolution_sweep("python:stripe_models:build", stripes["setting"], resolutions=(96, 224), store=store)
    assert store.study_names("resolution") == [name]
    replaced = store.read_study("resolution", name)
    assert replaced["resolution"].tolist() == [96, 224] and replaced["accuracy"][0] == res["accuracy"][1]
    assert again.attrs["best_resolution"] == 224


def test_failed_resolutions_are_stored_with_their_reason(stripes):
    res = resolution_sweep("python:stripe_models:fixed", stripes["setting"], resolutions=(64, 96),
                           store=stripes["store"])
    stored = Store(stripes["store"]).read_study("resolution", res.attrs["study"])
    assert "doesn't match model (96)" in stored.loc[0, "error"] and stored["error"].isna().tolist() == [False, True]
    assert np.isnan(stored.loc[0, "accuracy"]) and stored.loc[1, "accuracy"] == 50.0
