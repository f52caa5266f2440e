"""mCE's two named normalisers: the testbed's own AlexNet row (default) and Hendrycks & Dietterich's
published AlexNet errors; every output names the one it used."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from clirun import run_main

from shiftbench import load_testbed
from shiftbench.analysis.corruption import (
    BENCHMARK,
    EXTRA,
    HENDRYCKS2019_ALEXNET,
    HENDRYCKS2019_ALEXNET_CLEAN,
    SEVERITIES,
    mce,
)
from shiftbench.analysis.recipes import DEFAULTS, REGISTRY
from shiftbench.errors import ConfigError
from shiftbench.testbed import Testbed


@pytest.fixture(scope="module")
def reference():
    return load_testbed("imagenet-reference")


def test_both_normalisers_are_registered_with_the_testbed_row_as_default():
    assert set(REGISTRY["mce-normaliser"]) == {"testbed-alexnet", "hendrycks2019"}
    assert DEFAULTS["mce-normaliser"] == "testbed-alexnet"
    assert REGISTRY["mce-normaliser"]["testbed-alexnet"][1].startswith("shiftbench's variant")
    assert "Hendrycks & Dietterich 2019" in REGISTRY["mce-normaliser"]["hendrycks2019"][1]


def test_published_alexnet_errors_differ_from_the_testbed_row_by_up_to_4_4_points(reference):
    mine = mce(reference, "alexnet", normaliser="testbed-alexnet", mode="on-disk")["table"]
    published = mce(reference, "alexnet", normaliser="hendrycks2019", mode="on-disk")["table"]
    gap = (mine["normaliser_error"] - published["normaliser_error"])[list(BENCHMARK)]
    assert gap["jpeg_compression"] == pytest.approx(4.41, abs=0.005)
    assert gap["brightness"] == pytest.approx(3.18, abs=0.005)
    assert gap["defocus_blur"] == pytest.approx(3.07, abs=0.005)
    assert gap.abs().max() == pytest.approx(4.41, abs=0.005) and gap.idxmax() == "jpeg_compression"
    # the published normaliser: AugMix's ALEXNET_ERR, in percent
    assert published.loc["gaussian_noise", "normaliser_error"] == pytest.approx(88.6428)
    assert published["normaliser_mode"].eq("published").all()
    assert published.loc[list(EXTRA), "CE"].isna().all()      # no published values for the extra four


def test_the_testbed_row_reproduces_published_mce_and_the_published_errors_do_not(reference):
    own = mce(reference, "resnet50")
    paper = mce(reference, "resnet50", normaliser="hendrycks2019")
    assert own["normaliser"] == "testbed-alexnet" and paper["normaliser"] == "hendrycks2019"
    assert own["mCE"] == pytest.approx(76.7, abs=0.3)          # Hendrycks & Dietterich 2019, ResNet-50
    assert paper["mCE"] == pytest.approx(78.2, abs=0.05)       # the pipeline offset left in
    assert "imagenet-reference" in own["normaliser_source"]
    assert "Appendix C" in paper["normaliser_source"]


def test_published_normaliser_follows_the_formula_by_hand():
    # a model with error 30 + s on every cell, clean error 20; AlexNet's published values
    cols = {"val": [80.0]}
    for c in BENCHMARK + EXTRA:
        for s in SEVERITIES:
            cols[f"imagenet-c.{c}.{s}_on-disk"] = [100 - (30.0 + s)]
    tb = Testbed(pd.DataFrame(cols, index=["mine"]), name="tiny")
    r = mce(tb, "mine", normaliser="hendrycks2019")
    ce = [100 * 33.0 / (100 * HENDRYCKS2019_ALEXNET[c]) for c in BENCHMARK]
    rel = [100 * (33.0 - 20.0) / (100 * HENDRYCKS2019_ALEXNET[c] - HENDRYCKS2019_ALEXNET_CLEAN) for c in BENCHMARK]
    assert r["mCE"] == pytest.approx(np.mean(ce)) and r["relative_mCE"] == pytest.approx(np.mean(rel))


def test_an_unknown_normaliser_suggests_the_closest(reference, monkeypatch, capsys):
    with pytest.raises(ConfigError, match="did you mean 'testbed-alexnet'"):
        mce(reference, "resnet50", normaliser="alexnet")
    code, _, err = run_main(monkeypatch, capsys, "mce", "-m", "resnet50", "-t", "imagenet-reference",
                            "--normaliser", "hendrycks")
    assert code != 0 and err.startswith("error: ") and "did you mean 'hendrycks2019'" in err
    assert len(err.strip().splitlines()) == 1


def test_cli_table_and_json_name_the_normaliser(monkeypatch, capsys):
    code, text, _ = run_main(monkeypatch, capsys, "mce", "-m", "resnet50", "-t", "imagenet-reference")
    assert code == 0
    assert "normaliser testbed-alexnet" in text and "Normaliser testbed-alexnet (default)" in text
    assert "--normaliser hendrycks2019" in text
    code, text, _ = run_main(monkeypatch, capsys, "mce", "-m", "resnet50", "-t", "imagenet-reference",
                             "--normaliser", "hendrycks2019", "--json")
    d = json.loads(text)
    assert d["normaliser"] == "hendrycks2019" and d["mCE"] == pytest.approx(78.2, abs=0.05)
    assert "published" in d["normaliser_description"] and "Appendix C" in d["normaliser_source"]
    assert d["corruptions"]["saturate"]["CE"] is None
