"""mCE and relative mCE (Hendrycks & Dietterich 2019) against hand-worked and published values."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from shiftbench import load_testbed
from shiftbench.analysis.corruption import BENCHMARK, EXTRA, SEVERITIES, corruption_accuracy, mce
from shiftbench.errors import DataError
from shiftbench.testbed import Testbed


def tiny(model_err: float, ref_err: float, clean: tuple[float, float] = (20.0, 40.0), missing: str | None = None):
    cols = {"val": [100 - clean[0], 100 - clean[1]]}
    for c in BENCHMARK + EXTRA:
        for s in SEVERITIES:
            cols[f"imagenet-c.{c}.{s}_in-memory"] = [100 - (model_err + s), 100 - (ref_err + s)]
    frame = pd.DataFrame(cols, index=["mine", "alexnet"])
    if missing:
        frame.loc["mine", missing] = np.nan
    return Testbed(frame, name="tiny")


def test_ce_is_the_ratio_of_summed_errors_to_alexnets():
    r = mce(tiny(30.0, 60.0), "mine")
    # sum_s (30 + s) / sum_s (60 + s) = 165 / 315 for every corruption
    assert r["mCE"] == pytest.approx(100 * 165 / 315)
    # relative: sum_s (30 + s - 20) / sum_s (60 + s - 40) = 65 / 115
    assert r["relative_mCE"] == pytest.approx(100 * 65 / 115)
    assert r["table"]["benchmark"].sum() == 15 and len(r["table"]) == 19


def test_normaliser_has_mce_100():
    r = mce(load_testbed("imagenet-reference"), "alexnet")
    assert r["mCE"] == pytest.approx(100.0) and r["relative_mCE"] == pytest.approx(100.0)


@pytest.mark.parametrize("model, published", [("resnet50", 76.7), ("resnet50_augmix", 65.3), ("resnet18", 84.7)])
def test_on_disk_mce_reproduces_the_published_numbers(model, published):
    # ImageNet-C paper / AugMix paper values; the reference testbed re-evaluated the same models
    assert mce(load_testbed("imagenet-reference"), model, mode="on-disk")["mCE"] == pytest.approx(published, abs=0.6)


def test_missing_benchmark_cell_names_the_setting():
    with pytest.raises(DataError, match=r"imagenet-c\.fog\.3_in-memory"):
        mce(tiny(30, 60, missing="imagenet-c.fog.3_in-memory"), "mine", fallback_mode=None)


def test_corruption_accuracy_averages_severities():
    acc = corruption_accuracy(tiny(30, 60), "mine")
    assert acc["fog"] == pytest.approx(100 - 33.0)


def test_a_corruption_incomplete_for_the_normaliser_uses_the_fallback_cells_for_both():
    tb = tiny(30.0, 60.0)
    acc = tb.accuracies.copy()
    for s in SEVERITIES:                       # on-disk cells: model errors 40 + s, AlexNet 50 + s
        acc[f"imagenet-c.fog.{s}_on-disk"] = [100 - (40.0 + s), 100 - (50.0 + s)]
    acc.loc["alexnet", "imagenet-c.fog.1_in-memory"] = np.nan   # the normaliser's in-memory fog has a gap
    r = mce(Testbed(acc, name="tiny"), "mine")
    fog = r["table"].loc["fog"]
    assert fog["mode"] == fog["normaliser_mode"] == "on-disk"
    assert fog["CE"] == pytest.approx(100 * 215 / 265)          # both from disk, not in-memory over on-disk
    assert (r["table"].drop("fog")["mode"] == "in-memory").all()
