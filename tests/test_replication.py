"""Dataset replication (Recht et al. 2019): hand-worked strategies, seeding, errors, and an
end-to-end run whose manifest the engine evaluates with the oracle model."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from typer.testing import CliRunner

from shiftbench import cli
from shiftbench.datasets import manifest as read_manifest
from shiftbench.datasets.replication import (
    BINS,
    TooFewCandidates,
    class_rng,
    frequency_bin,
    matched_frequency,
    round_histogram,
    selection_histogram,
    threshold,
    top_images,
)
from shiftbench.errors import ConfigError, DataError
from shiftbench.studies.replication import replicate

from oracle_models import colour_of  # tests/fixtures, on sys.path via conftest.py


def pool(n_classes: int = 3, per_class: int = 20, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Random candidates (relative paths) and a reference of 10 images per class."""
    rng = np.random.default_rng(seed)
    cand = pd.DataFrame({"path": [f"c{c}/{i:03d}.png" for c in range(n_classes) for i in range(per_class)],
                         "label": [c for c in range(n_classes) for _ in range(per_class)],
                         "selection_frequency": rng.integers(0, 11, n_classes * per_class) / 10})
    ref = pd.DataFrame({"label": [c for c in range(n_classes) for _ in range(10)],
                        "selection_frequency": rng.integers(0, 11, n_classes * 10) / 10})
    return cand, ref


# --------------------------------------------------------------------------- histograms
def test_bins_are_half_open_with_the_last_one_closed():
    assert frequency_bin([0.0, 0.19, 0.2, 0.6, 0.79, 0.8, 1.0]).tolist() == [0, 0, 1, 3, 3, 4, 4]
    assert selection_histogram([0.0, 0.19, 0.2, 0.6, 0.8, 1.0]).tolist() == [2, 1, 0, 1, 2]
    assert selection_histogram([0.3, 0.7], bins=[0, 0.5, 1]).tolist() == [1, 1]


def test_round_histogram_uses_largest_remainder_with_ties_to_the_higher_bin():
    # 10 * (3,4,5,13,25)/50 = (.6,.8,1,2.6,5): floors (0,0,1,2,5) leave 2; remainders .8 (bin 1), then .6 twice -> bin 3
    assert round_histogram([3, 4, 5, 13, 25], 10).tolist() == [0, 1, 1, 3, 5]
    assert round_histogram([1, 1, 1], 2).tolist() == [0, 1, 1]
    assert round_histogram([50, 0, 0, 0, 0], 10).tolist() == [10, 0, 0, 0, 0]
    assert round_histogram([7, 3], 10).tolist() == [7, 3]


# --------------------------------------------------------------------------- strategies
def test_matched_frequency_reproduces_the_reference_histogram():
    # reference (0.1, 0.1, 0.9, 0.9) -> histogram (2,0,0,0,2) -> 2 images: one from [0,0.2), one from [0.8,1]
    cands = [0.05, 0.15, 0.5, 0.85, 0.95]
    for seed in range(20):
        idx = matched_frequency(cands, [0.1, 0.1, 0.9, 0.9], 2, rng=seed)
        assert len(idx) == 2 and idx[0] in (0, 1) and idx[1] in (3, 4)
    assert matched_frequency([0.1, 0.5, 0.9], [0.0, 0.95], 2).tolist() == [0, 2]


def test_matched_frequency_draws_uniformly_inside_a_bin():
    picks = [int(matched_frequency([0.05, 0.15], [0.1], 1, rng=s)[0]) for s in range(400)]
    assert 150 < picks.count(0) < 250


def test_matched_frequency_short_bin_is_an_error_naming_each_bin():
    with pytest.raises(TooFewCandidates, match=r"bin \[0.8, 1\] needs 2, has 0"):
        matched_frequency([0.1, 0.1, 0.5], [0.9, 0.9], 2)
    with pytest.raises(TooFewCandidates, match=r"bin \[0, 0.2\) needs 2, has 1; bin \[0.8, 1\] needs 1, has 0"):
        matched_frequency([0.1, 0.5], [0.1, 0.1, 0.9], 3)


def test_matched_frequency_upward_fallback_takes_the_next_higher_bin():
    # bin [0,0.2) needs 2 but has one candidate (index 0); the next higher bin with candidates is [0.4,0.6)
    assert matched_frequency([0.1, 0.5, 0.9], [0.1, 0.1], 2, fallback="upward").tolist() == [0, 1]
    with pytest.raises(TooFewCandidates, match="no higher bin"):
        matched_frequency([0.1, 0.1, 0.5], [0.9, 0.9], 2, fallback="upward")


def test_threshold_samples_only_at_or_above_tau():
    f = [0.1, 0.7, 0.8, 0.69, 1.0]
    assert threshold(f, 3, 0.7).tolist() == [1, 2, 4]                # all three eligible are taken
    for seed in range(10):
        assert set(threshold(f, 2, 0.7, rng=seed)) <= {1, 2, 4}
    with pytest.raises(TooFewCandidates, match=r"3 candidates have selection frequency >= 0.7, need 4"):
        threshold(f, 4, 0.7)


def test_top_images_takes_the_highest_frequency_and_breaks_ties_by_annotators_then_order():
    f = [0.5, 0.9, 0.9, 0.1]
    assert top_images(f, 2).tolist() == [1, 2]
    assert top_images(f, 1).tolist() == [1]                                      # tie: earlier path
    assert top_images(f, 1, n_annotators=[10, 10, 12, 3]).tolist() == [2]        # tie: more annotators
    with pytest.raises(TooFewCandidates, match="4 candidates, need 5"):
        top_images(f, 5)


# --------------------------------------------------------------------------- replicate
def test_replicate_summary_reports_counts_and_mean_frequencies(tmp_path):
    cand = pd.DataFrame({"path": ["a1", "a2", "a3", "b1", "b2"], "label": ["a", "a", "a", "b", "b"],
                         "selection_frequency": [0.9, 0.2, 0.8, 0.6, 1.0]})
    ref = pd.DataFrame({"label": ["a", "b", "b"], "selection_frequency": [0.5, 0.7, 0.9]})
    rep = replicate(cand, ref, "top-images", images_per_class=2, root=tmp_path)
    assert rep.manifest["path"].tolist() == [str(tmp_path / p) for p in ("a1", "a3", "b1", "b2")]
    assert rep.manifest["label"].tolist() == ["a", "a", "b", "b"]
    s = rep.summary
    assert s.loc["a", "n_candidates"] == 3 and s.loc["a", "n_images"] == 2
    assert s.loc["a", "mean_selection_frequency"] == pytest.approx(0.85)
    assert s.loc["b", "mean_selection_frequency"] == pytest.approx(0.8)
    assert s.loc["b", "reference_n_images"] == 2 and s.loc["b", "reference_mean_selection_frequency"] == pytest.approx(0.8)
    assert rep.mean_selection_frequency == pytest.approx((0.9 + 0.8 + 0.6 + 1.0) / 4)
    assert rep.reference_mean_selection_frequency == pytest.approx(0.7)
    assert json.loads(json.dumps(rep.to_dict()))["classes"][0]["label"] == "a"


def test_replicate_derives_frequency_from_annotator_counts(tmp_path):
    cand = pd.DataFrame({"path": ["x", "y", "z"], "label": [0, 0, 0], "n_selected": [3, 10, 7], "n_annotators": [10, 10, 10]})
    rep = replicate(cand, strategy="threshold", images_per_class=2, threshold=0.7, root=tmp_path)
    assert sorted(rep.manifest["selection_frequency"]) == [0.7, 1.0]
    assert rep.reference_mean_selection_frequency is None


def test_same_seed_gives_the_same_manifest_and_row_order_does_not_matter():
    cand, ref = pool()
    a = replicate(cand, ref, images_per_class=5, seed=3, fallback="upward", root="/data")
    b = replicate(cand.sample(frac=1, random_state=1), ref.sample(frac=1, random_state=2), images_per_class=5, seed=3,
                  fallback="upward", root="/data")
    pd.testing.assert_frame_equal(a.manifest, b.manifest)
    c = replicate(cand, ref, images_per_class=5, seed=4, fallback="upward", root="/data")
    assert not a.manifest["path"].equals(c.manifest["path"])


@pytest.mark.parametrize("strategy", ["matched-frequency", "threshold"])
def test_a_class_draw_does_not_depend_on_the_other_classes(strategy):
    cand, ref = pool(n_classes=4, per_class=30)
    kw = dict(strategy=strategy, images_per_class=3, threshold=0.5, seed=7, fallback=None, root="/d")
    if strategy != "matched-frequency":
        kw.pop("fallback")
    try:
        full = replicate(cand, ref, **kw)
    except TooFewCandidates:
        pytest.skip("random pool too small")
    only2 = replicate(cand[cand.label == 2], ref[ref.label == 2], **kw)
    assert full.manifest[full.manifest.label == 2]["path"].tolist() == only2.manifest["path"].tolist()
    assert class_rng(7, 2).random() == class_rng(7, 2).random() != class_rng(7, 3).random()


# --------------------------------------------------------------------------- errors
def write_csv(path: Path, frame: pd.DataFrame) -> Path:
    frame.to_csv(path, index=False)
    return path


def test_candidates_without_required_columns_name_the_file_and_column(tmp_path):
    f = write_csv(tmp_path / "cands.csv", pd.DataFrame({"file": ["a"], "label": [0], "selection_frequency": [0.5]}))
    with pytest.raises(DataError, match=r"candidates .*cands.csv: no column 'path'"):
        replicate(f, strategy="top-images", images_per_class=1)
    f = write_csv(tmp_path / "cands.csv", pd.DataFrame({"path": ["a"], "label": [0], "n_selected": [3]}))
    with pytest.raises(DataError, match=r"cands.csv: no column 'selection_frequency' \(nor n_selected and n_annotators\)"):
        replicate(f, strategy="top-images", images_per_class=1)


@pytest.mark.parametrize("value, needle", [
    ("1.5", r"column 'selection_frequency' at line 3 is 1.5, outside \[0, 1\]"),
    ("-0.1", r"column 'selection_frequency' at line 3 is -0.1, outside \[0, 1\]"),
    ("", r"column 'selection_frequency' at line 3 is empty; it must be a number"),
    ("high", r"column 'selection_frequency' at line 3 is 'high'; it must be a number"),
])
def test_bad_frequencies_name_the_file_column_and_line(tmp_path, value, needle):
    (tmp_path / "c.csv").write_text(f"path,label,selection_frequency\na.png,0,0.5\nb.png,0,{value}\n")
    with pytest.raises(DataError, match="c.csv: " + needle):
        replicate(tmp_path / "c.csv", strategy="top-images", images_per_class=1)


def test_bad_counts_and_duplicate_paths_are_errors(tmp_path):
    (tmp_path / "c.csv").write_text("path,label,n_selected,n_annotators\na.png,0,3,10\nb.png,0,11,10\n")
    with pytest.raises(DataError, match=r"column 'n_selected/n_annotators' at line 3 is 1.1, outside"):
        replicate(tmp_path / "c.csv", strategy="top-images", images_per_class=1)
    (tmp_path / "c.csv").write_text("path,label,n_selected,n_annotators\na.png,0,3,0\n")
    with pytest.raises(DataError, match=r"column 'n_annotators' at line 2 is 0"):
        replicate(tmp_path / "c.csv", strategy="top-images", images_per_class=1)
    (tmp_path / "c.csv").write_text("path,label,selection_frequency\na.png,0,0.5\nsub/../a.png,0,0.6\n")
    with pytest.raises(DataError, match=r"c.csv: column 'path' at line 3 repeats 'sub/../a.png'"):
        replicate(tmp_path / "c.csv", strategy="top-images", images_per_class=1)


def test_too_few_candidates_names_the_file_class_and_strategy(tmp_path):
    f = write_csv(tmp_path / "c.csv", pd.DataFrame({"path": ["a", "b", "c"], "label": ["cat", "cat", "dog"],
                                                    "selection_frequency": [0.9, 0.8, 0.9]}))
    with pytest.raises(TooFewCandidates, match=r"c.csv: too few candidates for class 'dog' under top-images "
                                               r"\(1 candidates\): 1 candidates, need 2"):
        replicate(f, strategy="top-images", images_per_class=2)
    ref = write_csv(tmp_path / "r.csv", pd.DataFrame({"label": ["cat", "dog", "dog"], "selection_frequency": [.9, .1, .1]}))
    with pytest.raises(TooFewCandidates, match=r"class 'dog' under matched-frequency .*bin \[0, 0.2\) needs 2, has 0"):
        replicate(f, ref, images_per_class=2)
    ref = write_csv(tmp_path / "r.csv", pd.DataFrame({"label": ["cat", "dog", "eel"], "selection_frequency": [.9] * 3}))
    with pytest.raises(TooFewCandidates, match=r"class 'eel' under threshold \(0 candidates\)"):
        replicate(f, ref, "threshold", images_per_class=1)


def test_inconsistent_inputs_and_options_are_one_line_errors(tmp_path):
    cand, ref = pool()
    with pytest.raises(ConfigError, match=r"unknown replication strategy 'matched'; did you mean 'matched-frequency'"):
        replicate(cand, ref, "matched")
    with pytest.raises(ConfigError, match="matched-frequency needs a reference"):
        replicate(cand)
    with pytest.raises(ConfigError, match="edges must rise strictly from 0 to 1"):
        replicate(cand, ref, bins=[0, 0.5, 0.4, 1])
    with pytest.raises(ConfigError, match=r"threshold=1.5: .* must lie in \[0, 1\]"):
        replicate(cand, strategy="threshold", threshold=1.5)
    with pytest.raises(ConfigError, match="images_per_class=0"):
        replicate(cand, ref, images_per_class=0)
    with pytest.raises(ConfigError, match="applies to the matched-frequency strategy only"):
        replicate(cand, strategy="top-images", fallback="upward")
    with pytest.raises(DataError, match="class 2 has candidates but no images in reference"):
        replicate(cand, ref[ref.label != 2])
    with pytest.raises(DataError, match="labels are class indices but reference table labels are class names"):
        replicate(cand, ref.assign(label="x"))


def test_write_refuses_images_outside_the_manifest_folder(tmp_path):
    cand = pd.DataFrame({"path": ["imgs/a.png"], "label": [0], "selection_frequency": [1.0]})
    rep = replicate(cand, strategy="top-images", images_per_class=1, root=tmp_path)
    with pytest.raises(DataError, match=r"image .*a.png is outside the manifest's folder"):
        rep.write(tmp_path / "elsewhere" / "m.csv")
    with pytest.raises(ConfigError, match="unknown format '.txt'"):
        rep.write(tmp_path / "m.txt")
    assert (rep.write(tmp_path / "m.parquet").exists()
            and pd.read_parquet(tmp_path / "m.parquet")["path"].tolist() == ["imgs/a.png"])


# --------------------------------------------------------------------------- end to end
@pytest.fixture
def candidates(tmp_path: Path) -> Path:
    """7 classes x 4 real images: two right (f = 0.9, 0.8), two showing another class (f = 0.3, 0.1)."""
    rows = []
    for c in range(7):
        for i, (f, shown) in enumerate([(0.9, c), (0.8, c), (0.3, (c + 1) % 7), (0.1, (c + 2) % 7)]):
            p = f"images/{c}/{i}.png"
            (tmp_path / p).parent.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (16, 16), colour_of(shown)).save(tmp_path / p)
            rows.append((p, c, round(f * 10), 10))
    path = tmp_path / "candidates.csv"
    pd.DataFrame(rows, columns=["path", "label", "n_selected", "n_annotators"]).to_csv(path, index=False)
    pd.DataFrame({"label": [c for c in range(7) for _ in range(2)],
                  "selection_frequency": [0.95, 0.05] * 7}).to_csv(tmp_path / "reference.csv", index=False)
    return path


def test_replicated_manifest_evaluates_through_the_engine(candidates, tmp_path, monkeypatch):
    from shiftbench.engine import evaluate

    ref = tmp_path / "reference.csv"
    top = replicate(candidates, ref, "top-images", images_per_class=2).write(tmp_path / "top.csv")
    mf = replicate(candidates, ref, "matched-frequency", images_per_class=2, seed=1).write(tmp_path / "mf.csv")
    ds = read_manifest(mf)
    assert len(ds) == 14 and ds.num_classes == 7
    res = evaluate("python:oracle_models:oracle7", [f"manifest:{top}", f"manifest:{mf}"], store=tmp_path / "store",
                   workers=0, batch_size=8, progress=False).set_index("setting")
    assert res.loc[f"manifest:{top}", "accuracy"] == pytest.approx(100.0)     # f 0.9 and 0.8: both right
    assert res.loc[f"manifest:{mf}", "accuracy"] == pytest.approx(50.0)       # one image from each end bin
    assert res.loc[f"manifest:{mf}", "n_examples"] == 14


def test_cli_writes_the_manifest_and_prints_the_summary(candidates, tmp_path):
    out = tmp_path / "v2.csv"
    result = CliRunner().invoke(cli.app, ["replicate", "--candidates", str(candidates), "--reference",
                                          str(tmp_path / "reference.csv"), "-k", "2", "-o", str(out), "--json"])
    assert result.exit_code == 0, (result.output, result.exception)
    got = json.loads(result.stdout)
    assert got["n_images"] == 14 and got["strategy"] == "matched-frequency" and got["bins"] == list(BINS)
    assert 0.45 <= got["mean_selection_frequency"] <= 0.5               # 0.9 or 0.8, with 0.1, per class
    assert got["reference_mean_selection_frequency"] == pytest.approx(0.5)
    assert len(pd.read_csv(out)) == 14
    result = CliRunner().invoke(cli.app, ["replicate", "--candidates", str(candidates), "--strategy", "threshold",
                                          "--threshold", "0.75", "-k", "2", "-o", str(out)])
    assert result.exit_code == 0, (result.output, result.exception)
    assert "mean selection frequency 0.850" in result.stdout and f"manifest: {out}" in result.stdout
    result = CliRunner().invoke(cli.app, ["replicate", "--candidates", str(candidates), "--strategy", "threshold",
                                          "-k", "3", "-o", str(out)])
    assert isinstance(result.exception, TooFewCandidates) and "class 0 under threshold" in str(result.exception)


def test_parquet_candidates_give_the_same_manifest_as_csv(tmp_path):
    cand, ref = pool(per_class=15)
    cand.to_csv(tmp_path / "c.csv", index=False)
    cand.to_parquet(tmp_path / "c.parquet", index=False)
    ref.to_parquet(tmp_path / "r.parquet", index=False)
    a = replicate(tmp_path / "c.csv", tmp_path / "r.parquet", "threshold", images_per_class=2, threshold=0.3, seed=5)
    b = replicate(tmp_path / "c.parquet", ref, "threshold", images_per_class=2, threshold=0.3, seed=5)
    pd.testing.assert_frame_equal(a.manifest, b.manifest)
    assert a.manifest["path"].str.startswith(str(tmp_path)).all()       # relative to the candidates' folder


def test_bad_reference_rows_name_the_reference_file(tmp_path):
    cand, ref = pool()
    ref.loc[4, "selection_frequency"] = np.nan
    ref.to_parquet(tmp_path / "val.parquet", index=False)
    with pytest.raises(DataError, match=r"reference .*val.parquet: column 'selection_frequency' at row 5 is empty"):
        replicate(cand, tmp_path / "val.parquet")
    (tmp_path / "val.csv").write_text("label,selection_frequency\n0,0.5\n,0.5\n")
    with pytest.raises(DataError, match=r"val.csv: column 'label' at line 3 is empty"):
        replicate(cand, tmp_path / "val.csv")


# --------------------------------------------------------------------------- label space
@pytest.fixture
def imagenet_candidates(tmp_path: Path) -> Path:
    """3 ImageNet classes labelled by wnid, 3 images each: f = 0.9 and 0.8 show the class, 0.1 the class before
    it (which the oracle ranks second: wrong at top-1, right at top-5)."""
    rows = []
    for wnid, c in (("n01440764", 0), ("n01443537", 1), ("n02782093", 417)):
        for i, (f, shown) in enumerate([(0.9, c), (0.8, c), (0.1, (c - 1) % 1000)]):
            p = f"images/{wnid}/{i}.png"
            (tmp_path / p).parent.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (16, 16), colour_of(shown)).save(tmp_path / p)
            rows.append((p, wnid, f))
    path = tmp_path / "candidates.csv"
    pd.DataFrame(rows, columns=["path", "label", "selection_frequency"]).to_csv(path, index=False)
    return path


def test_write_with_label_space_evaluates_a_1000_output_model(imagenet_candidates, tmp_path, monkeypatch):
    from shiftbench.engine import evaluate

    rep = replicate(imagenet_candidates, strategy="threshold", threshold=0.0, images_per_class=3)
    mf = rep.write(tmp_path / "v2.csv", label_space="imagenet-1k")
    assert json.loads((tmp_path / "v2.csv.classes.json").read_text()) == {"label_space": "imagenet-1k"}
    assert pd.read_csv(mf)["label"].tolist()[:3] == ["n01440764"] * 3          # labels written as given
    ds = read_manifest(mf)
    assert ds.num_classes == 1000 and sorted(set(ds.targets)) == [0, 1, 417]
    res = evaluate("python:oracle_models:oracle", [f"manifest:{mf}"], store=tmp_path / "store",
                   workers=0, batch_size=8, progress=False).iloc[0]
    assert res["accuracy"] == pytest.approx(100 * 6 / 9) and res["top5"] == pytest.approx(100.0)
    plain = rep.write(tmp_path / "plain.csv")                                   # no label space: as before
    assert not (tmp_path / "plain.csv.classes.json").exists() and read_manifest(plain).num_classes == 3


def test_write_with_a_label_space_missing_a_class_writes_nothing(imagenet_candidates, tmp_path):
    rep = replicate(imagenet_candidates, strategy="top-images", images_per_class=1)
    (tmp_path / "names.txt").write_text("n01443537\nn02782093\n")
    with pytest.raises(DataError, match=r"manifest .*v2.csv: label 'n01440764' is not a class of the 2 classes of "
                                        r".*names.txt; did you mean"):
        rep.write(tmp_path / "v2.csv", label_space=tmp_path / "names.txt")
    assert not (tmp_path / "v2.csv").exists() and not (tmp_path / "v2.csv.classes.json").exists()
    with pytest.raises(ConfigError, match="unknown label space 'imagenet'; did you mean 'imagenet-1k'"):
        rep.write(tmp_path / "v2.csv", label_space="imagenet")


def test_cli_label_space_writes_the_sidecar_and_says_so(imagenet_candidates, tmp_path):
    out = tmp_path / "v2.csv"
    args = ["replicate", "--candidates", str(imagenet_candidates), "--strategy", "top-images", "-k", "2",
            "-o", str(out), "--label-space", "imagenet-1k"]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, (result.output, result.exception)
    assert f"label space: imagenet-1k (sidecar {out}.classes.json)" in " ".join(result.stdout.split())
    assert read_manifest(out).num_classes == 1000
    result = CliRunner().invoke(cli.app, [*args, "--json"])
    assert json.loads(result.stdout)["label_space_sidecar"] == f"{out}.classes.json"


def test_rewriting_a_manifest_without_a_label_space_removes_the_old_sidecar(tmp_path):
    from shiftbench.datasets.manifest import sidecar_of
    from shiftbench.datasets.replication import Replication

    img = tmp_path / "a.png"
    img.write_bytes(b"")
    rep = Replication(manifest=pd.DataFrame({"path": [str(img)], "label": [0], "selection_frequency": [0.9]}),
                      summary=pd.DataFrame(), strategy="top-images")
    rep.write(tmp_path / "m.csv", label_space="imagenet-1k")
    assert sidecar_of(tmp_path / "m.csv") is not None
    rep.write(tmp_path / "m.csv")
    assert sidecar_of(tmp_path / "m.csv") is None
