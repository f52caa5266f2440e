"""Multi-label evaluation: label sets in a manifest, every class's score stored per example, mAP
(scikit-learn's AP, macro over classes with positives) with a bootstrap interval over examples,
and trend fits on mAP through ``Testbed.from_store(metric="map")``."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from sklearn.metrics import average_precision_score

import shiftbench
from shiftbench.datasets.manifest import manifest
from shiftbench.engine import evaluate
from shiftbench.errors import ConfigError, DataError
from shiftbench.store import Store
from shiftbench.testbed import Testbed
from shiftbench.views.multilabel import _weighted_ap, label_indicator, mean_average_precision

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
MODELS = [f"python:multimodel_models:{m}" for m in ("cnn_a", "cnn_b", "cnn_c")]


def scored(n: int = 400, c: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.random((n, c)) < 0.3
    return np.round(y + rng.normal(0, 0.8, (n, c)), 1), y  # rounded: ties between scores


def test_map_is_sklearns_macro_average_precision_over_classes_with_positives():
    s, y = scored()
    y[:, 4] = False  # a class nobody has
    sets = [tuple(np.flatnonzero(r)) for r in y]
    r = mean_average_precision(s, sets, n_resamples=0, class_names=list("abcdef"))
    have = [0, 1, 2, 3, 5]
    assert r.map == pytest.approx(100 * average_precision_score(y[:, have], s[:, have], average="macro"))
    assert r.per_class[2] == pytest.approx(100 * average_precision_score(y[:, 2], s[:, 2]))
    assert r.classes_without_positives == [4] and 4 not in r.per_class
    assert r.n_no_labels == int((~y.any(axis=1)).sum()) > 0
    assert "left out (no positives): e" in r.summary()
    assert np.isnan(r.low) and np.isnan(r.high)


def test_resampled_ap_is_sklearns_weighted_ap_with_ties():
    s, y = scored(n=300)
    w = np.random.default_rng(1).integers(0, 4, (6, 300)).astype(np.float32)
    w[0] = 1.0
    for c in range(3):
        want = [average_precision_score(y[:, c], s[:, c], sample_weight=wi) for wi in w]
        np.testing.assert_allclose(_weighted_ap(s[:, c], y[:, c], w), want, rtol=0, atol=1e-12)


def test_bootstrap_interval_is_seeded_holds_the_estimate_and_narrows_with_more_examples():
    s, y = scored(n=2000)
    big = mean_average_precision(s, y, n_resamples=400, seed=3)
    again = mean_average_precision(s, y, n_resamples=400, seed=3)
    small = mean_average_precision(s[:200], y[:200], n_resamples=400, seed=3)
    assert (big.low, big.high) == (again.low, again.high)
    assert big.low < big.map < big.high
    assert (small.high - small.low) > 2 * (big.high - big.low)
    # the percentile interval of an independent resampling loop, within Monte-Carlo error
    rng = np.random.default_rng(7)
    boots = []
    for _ in range(200):
        i = rng.integers(0, 2000, 2000)
        have = y[i].any(axis=0)
        boots.append(100 * average_precision_score(y[i][:, have], s[i][:, have], average="macro"))
    lo, hi = np.quantile(boots, [0.025, 0.975])
    assert abs(big.low - lo) < 0.5 and abs(big.high - hi) < 0.5


def test_bad_scores_and_labels_are_one_line_errors():
    with pytest.raises(DataError, match="outside the 3 classes"):
        mean_average_precision(np.zeros((2, 3)), [(0,), (5,)])
    with pytest.raises(DataError, match="NaN or inf"):
        mean_average_precision(np.full((2, 3), np.nan), [(0,), (1,)])
    with pytest.raises(DataError, match="no class has a positive"):
        mean_average_precision(np.zeros((2, 3)), [(), ()])
    assert label_indicator([(1,), ()], 3).tolist() == [[False, True, False], [False, False, False]]


def digits_like(root: Path, n: int = 36, classes: int = 7) -> Path:
    """``n`` RGB images with 1-3 colour patches; the labels are the patches' classes."""
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        img = np.full((40, 40, 3), 20, np.uint8)
        labels = sorted(set(rng.choice(classes - 1, size=1 + i % 3).tolist()))  # class 6 never present
        for j, c in enumerate(labels):
            img[4 + 12 * j:14 + 12 * j, 4:36] = ((37 * c) % 256, 40 * c % 256, 200 - 25 * c)
        Image.fromarray(img).save(root / f"{i:03d}.png")
        rows.append({"path": f"{i:03d}.png", "labels": ";".join(map(str, labels)), "scale": "m"})
    rows[5]["labels"] = ""  # an image with no labels
    pd.DataFrame(rows).to_csv(root / "multi.csv", index=False)
    (root / "multi.csv.classes.txt").write_text("\n".join(str(c) for c in range(classes)) + "\n")
    return root / "multi.csv"


def test_a_labels_column_reads_label_sets_and_names_what_it_left_out(tmp_path):
    path = digits_like(tmp_path / "d")
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    frame.loc[7, "labels"] = frame.loc[7, "labels"] + ";hat"
    frame.to_csv(path, index=False)
    ds = manifest(path)
    assert ds.multi_label and ds.num_classes == 7
    assert ds.targets[5] == () and all(isinstance(t, tuple) for t in ds.targets)
    assert ds.targets[7] == tuple(sorted(int(v) for v in frame.loc[7, "labels"].split(";")[:-1]))
    notes = " ".join(ds.notes)
    assert "1 label(s) outside the 7 declared classes were dropped: line 9 'hat'" in notes
    assert "1 image(s) have no labels" in notes and "005.png" in notes
    assert not manifest(_single(path)).multi_label


def _single(path: Path) -> Path:
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    out = path.with_name("single.csv")
    frame.assign(label=[(v or "0").split(";")[0] for v in frame["labels"]]).drop(columns="labels").to_csv(out, index=False)
    out.with_name("single.csv.classes.txt").write_text(path.with_name("multi.csv.classes.txt").read_text())
    return out


def test_evaluating_a_multi_label_manifest_stores_scores_and_map(tmp_path):
    path = digits_like(tmp_path / "d")
    settings = [f"manifest:{path}", f"manifest:{path}+gaussian_noise.3"]
    res = evaluate(MODELS, settings, store=tmp_path / "s", batch_size=8, workers=0, progress=False)
    assert len(res) == 6 and res["map"].notna().all()
    store = Store(tmp_path / "s")
    row = store.results().iloc[0]
    preds = store.read_predictions(row["key"])
    scores = np.stack(preds["scores"].to_numpy())
    assert scores.shape == (36, 7) and scores.dtype == np.float32
    sets = [tuple(t) for t in preds["target"]]
    y = label_indicator(sets, 7)
    have = y.any(axis=0)
    assert row["map"] == pytest.approx(100 * average_precision_score(y[:, have], scores[:, have], average="macro"))
    assert row["map_low"] < row["map"] < row["map_high"]
    assert row["classes_without_positives"] == ["6"] and set(row["ap_per_class"]) == {"0", "1", "2", "3", "4", "5"}
    assert row["n_no_labels"] == 1 and row["no_label_examples"] == ["005.png"]
    # top-1-in-set accuracy leaves the unlabelled image out
    labelled = preds[[len(t) > 0 for t in preds["target"]]]
    assert row["accuracy"] == pytest.approx(100 * labelled["correct"].mean()) and row["accuracy_rule"] == "top-1-in-set"
    assert row["n_examples"] == 35


def test_trend_fits_and_effective_robustness_run_on_map(tmp_path):
    path = digits_like(tmp_path / "d")
    ood = f"manifest:{path}+gaussian_noise.3"
    evaluate(MODELS, [f"manifest:{path}", ood], store=tmp_path / "s", batch_size=8, workers=0, progress=False)
    tb = Testbed.from_store(tmp_path / "s", metric="map")
    res = Store(tmp_path / "s").results().set_index(["model", "setting"])
    model = tb.models[0]
    assert tb.accuracies.loc[model, ood] == pytest.approx(res.loc[(model, ood), "map"])
    assert tb.metric == "map" and tb.sizes.isna().all().all()
    assert any("mAP" in n for n in tb.notes)
    fit = shiftbench.fit_trend(tb, f"manifest:{path}", ood, fit_on="all")
    assert np.isfinite(fit.slope)
    with pytest.raises(ConfigError, match="did you mean 'map'"):
        Testbed.from_store(tmp_path / "s", metric="mapp")


def test_single_label_stores_have_no_map_and_say_so(tmp_path):
    path = _single(digits_like(tmp_path / "d"))
    evaluate(MODELS[0], [f"manifest:{path}"], store=tmp_path / "s", batch_size=8, workers=0, progress=False)
    assert "scores" not in Store(tmp_path / "s").read_predictions(Store(tmp_path / "s").results()["key"][0])
    with pytest.raises(DataError, match="multi-label manifest"):
        Testbed.from_store(tmp_path / "s", metric="map")


def test_the_cli_evaluates_a_multi_label_manifest_and_prints_map(tmp_path):
    import json

    from typer.testing import CliRunner

    from shiftbench.cli import app

    path = digits_like(tmp_path / "d")
    runner = CliRunner()
    run = runner.invoke(app, ["eval", "-m", MODELS[0], "-s", f"manifest:{path}", "--store", str(tmp_path / "s"),
                              "--workers", "0"])
    assert run.exit_code == 0, run.output
    shown = runner.invoke(app, ["results", "--store", str(tmp_path / "s")])
    assert "mAP % [95% CI]" in shown.output and "top-1 prediction in the image's label set" in shown.output
    rows = json.loads(runner.invoke(app, ["results", "--store", str(tmp_path / "s"), "--json"]).output)
    assert rows[0]["map_low"] < rows[0]["map"] < rows[0]["map_high"]
