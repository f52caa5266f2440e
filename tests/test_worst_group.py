"""Worst-group accuracy (the WILDS convention): accuracy per group, the worst over non-empty groups,
group counts; groups from a manifest's metadata columns (``manifest:<file>?groups=a,b``), stored
beside the average by the engine, and a y axis for trend fits and effective robustness through
``shiftbench.Testbed.from_store(metric=...)``."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

import shiftbench
from shiftbench.datasets.manifest import manifest, metadata_groups
from shiftbench.engine import evaluate
from shiftbench.engine.runner import summarise
from shiftbench.errors import ConfigError, DataError
from shiftbench.settings import get_setting
from shiftbench.store import Store
from shiftbench.views.groups import GROUP_KEYS, group_accuracy

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
MODELS = [f"python:multimodel_models:{m}" for m in ("cnn_a", "cnn_b", "cnn_c")]


# ----------------------------------------------------------------------------- the view
def test_hand_worked_example_takes_the_lowest_group_mean():
    # a: 2 of 3 right (66.7%), b: 1 of 1 (100%), c: 1 of 2 (50%) -> worst c at 50%, average 4/6
    r = group_accuracy([1, 0, 1, 1, 0, 1], ["a", "a", "a", "b", "c", "c"])
    assert r.accuracy == pytest.approx({"a": 200 / 3, "b": 100.0, "c": 50.0})
    assert r.counts == {"a": 3, "b": 1, "c": 2} and r.n_groups == 3
    assert (r.worst, r.worst_group, r.worst_n) == (50.0, "c", 2)
    assert r.average == pytest.approx(400 / 6)
    d = r.to_dict()
    assert set(d) == set(GROUP_KEYS) and d["worst_group_accuracy"] == 50.0 and d["worst_group"] == "c"


def test_an_empty_group_is_reported_but_never_the_worst():
    # An empty group arises when the group set is declared beforehand (every class, every
    # attribute combination) and this test set has no scored example of it: a combination the
    # carve left out, or a group whose every image failed to decode. WILDS leaves it out of
    # the worst (group_counts > 0); a naive min over groups would call it 0%.
    r = group_accuracy([True, False, True], ["x", "x", "y"], declared=["x", "y", "z"])
    assert r.counts == {"x": 2, "y": 1, "z": 0}
    assert math.isnan(r.accuracy["z"])
    assert (r.worst, r.worst_group, r.worst_n, r.n_groups) == (50.0, "x", 2, 2)
    empty = group_accuracy(np.zeros(0, bool), [], declared=["a"])
    assert math.isnan(empty.worst) and empty.worst_group is None and empty.worst_n == 0 and empty.n_groups == 0


def test_singleton_groups_make_the_worst_group_any_wrong_example_and_ties_go_to_the_first_name():
    r = group_accuracy([True, False, True, False], ["d", "c", "b", "a"])
    assert r.counts == {"a": 1, "b": 1, "c": 1, "d": 1}
    assert (r.worst, r.worst_group, r.worst_n) == (0.0, "a", 1)     # a and c tie at 0%: a sorts first
    right = group_accuracy([True, True], ["q", "p"])
    assert (right.worst, right.worst_group) == (100.0, "p")


def test_an_all_wrong_group_is_the_worst_at_zero():
    r = group_accuracy([True] * 5 + [False] * 3, ["big"] * 5 + ["bad"] * 3)
    assert (r.worst, r.worst_group, r.worst_n) == (0.0, "bad", 3)
    assert r.average == pytest.approx(62.5)


def test_matches_an_independent_pandas_groupby():
    rng = np.random.default_rng(0)
    groups = rng.choice(["g0", "g1", "g2", "g3", "g4"], size=500, p=[0.5, 0.3, 0.15, 0.04, 0.01])
    correct = rng.random(500) < np.select([groups == "g3"], [0.2], 0.8)
    r = group_accuracy(correct, groups)
    by = pd.DataFrame({"g": groups, "c": correct}).groupby("g")["c"].agg(["mean", "size"])
    assert r.accuracy == pytest.approx((100 * by["mean"]).to_dict())
    assert r.counts == by["size"].to_dict()
    assert r.worst == pytest.approx(100 * by["mean"].min()) and r.worst_group == by["mean"].idxmin()


def test_bad_inputs_are_one_line_data_errors():
    with pytest.raises(DataError, match="3 correct values but 2 groups"):
        group_accuracy([True, False, True], ["a", "b"])
    with pytest.raises(DataError, match="booleans or 0/1"):
        group_accuracy([0.5, 1.0], ["a", "b"])


# ----------------------------------------------------------------------------- manifests
def tiny_manifest(root: Path, n: int = 28, broken: bool = False) -> Path:
    """``n`` RGB images of 7 colour classes with metadata ``size`` (small/large) and ``tone``
    (dark/light); with ``broken``, one extra undecodable image alone in tone ``broken``."""
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        c = i % 7
        base = np.array([(37 * c) % 256, 40 * c % 256, 200 - 25 * c], np.float32)
        img = np.clip(base + rng.normal(0, 30, (36, 36, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(root / f"{i:03d}.png")
        rows.append({"path": f"{i:03d}.png", "label": c, "size": "small" if i % 2 else "large",
                     "tone": "dark" if i % 3 else "light"})
    if broken:
        (root / "broken.png").write_bytes(b"not a png")
        rows.append({"path": "broken.png", "label": 0, "size": "small", "tone": "broken"})
    pd.DataFrame(rows).to_csv(root / "m.csv", index=False)
    return root / "m.csv"


def test_manifest_groups_are_the_combinations_of_the_named_columns(tmp_path):
    path = tiny_manifest(tmp_path / "d")
    frame = pd.read_csv(path)
    ds = manifest(path, groups=["size", "tone"])
    assert ds.groups[:3] == ["size=large|tone=light", "size=small|tone=dark", "size=large|tone=dark"]
    assert manifest(path, groups="label").groups[:2] == ["label=0", "label=1"]
    assert metadata_groups(pd.DataFrame({"a": [1.0, None], "b": ["x", "y"]}), ["a", "b"]) == ["a=1|b=x", "a=|b=y"]
    assert manifest(path).groups is None                     # no group column, no option: no groups
    frame.assign(group="g").to_csv(tmp_path / "d" / "g.csv", index=False)
    assert manifest(tmp_path / "d" / "g.csv").groups[0] == "g"
    assert manifest(tmp_path / "d" / "g.csv", groups="tone").groups[0] == "tone=light"   # the option wins


def test_an_unknown_group_column_names_the_file_the_column_and_the_columns_it_has(tmp_path):
    path = tiny_manifest(tmp_path / "d")
    with pytest.raises(DataError, match=r"m\.csv: no column 'colour' to group by \(columns: path, label, size, "
                                        r"tone\)"):
        manifest(path, groups="size,colour")
    with pytest.raises(ConfigError, match="did you mean 'groups'"):
        get_setting(f"manifest:{path}?group=size")
    with pytest.raises(ConfigError, match=r"\?groups=label"):
        get_setting(f"manifest:{path}?groups=")


def test_a_groups_option_is_its_own_setting_passed_to_the_manifest(tmp_path):
    path = tiny_manifest(tmp_path / "d")
    s = get_setting(f"manifest:{path}?groups=size,tone&classes=imagenet-1k")
    assert s.dataset_args == (("path", str(path)), ("groups", "size,tone"), ("classes", "imagenet-1k"))
    assert get_setting(f"manifest:{path}?groups=size").name != get_setting(f"manifest:{path}").name


# ----------------------------------------------------------------------------- end to end
def test_evaluate_stores_worst_group_beside_the_average_and_leaves_ungrouped_results_alone(tmp_path):
    path = tiny_manifest(tmp_path / "d", broken=True)
    grouped, plain = f"manifest:{path}?groups=size,tone", f"manifest:{path}"
    res = evaluate(MODELS[0], [grouped, plain], store=tmp_path / "s", batch_size=8, workers=0, progress=False)
    store = Store(tmp_path / "s")
    done = store.results().set_index("setting")
    assert done.loc[grouped, "key"] != done.loc[plain, "key"]
    g, p = done.loc[grouped], done.loc[plain]
    assert g["accuracy"] == p["accuracy"] and g["n_examples"] == p["n_examples"] == 28 and g["n_skipped"] == 1
    assert all(k not in p or p[k] is None or p[k] != p[k] for k in GROUP_KEYS)   # ungrouped: no group keys
    assert set(GROUP_KEYS) <= set(res.columns)
    # independent: stored per-example rows joined with the manifest's columns, pandas groupby
    preds = store.read_predictions(g["key"])
    meta = pd.read_csv(path).set_index("path")
    ok = preds[preds["status"] == "ok"]
    by = (ok.assign(key=[f"size={meta.at[i, 'size']}|tone={meta.at[i, 'tone']}" for i in ok["id"]])
          .groupby("key")["correct"].agg(["mean", "size"]))
    assert g["group_counts"] == {**by["size"].to_dict(), "size=small|tone=broken": 0}   # all skipped: empty
    assert g["n_groups"] == 4 and g["worst_group_n"] == by["size"][g["worst_group"]]
    assert g["worst_group_accuracy"] == pytest.approx(100 * by["mean"].min())
    assert g["group_accuracy"]["size=small|tone=broken"] != g["group_accuracy"]["size=small|tone=broken"]  # NaN


def test_summarise_skips_pm_sets_and_rows_without_groups():
    rows = pd.DataFrame({"index": range(4), "id": list("abcd"), "status": ["ok"] * 4, "error": [None] * 4,
                         "correct": [True, False, True, True], "correct5": [True] * 4,
                         "confidence": [0.9] * 4, "p_true": [0.5] * 4, "p_sq_sum": [0.5] * 4,
                         "group": ["s1", "s1", "s2", "s2"], "offset": [0, 1, 0, -1]})
    assert "worst_group_accuracy" not in summarise(rows, get_setting("imagenet-vid-robust_pm0"))
    plain = summarise(rows.assign(group=None, offset=None), get_setting("cifar10"))
    assert "worst_group_accuracy" not in plain
    meta = summarise(rows.assign(offset=None), get_setting("cifar10"))
    assert (meta["worst_group_accuracy"], meta["worst_group"]) == (50.0, "s1")


def test_worst_group_is_a_testbed_metric_and_the_y_axis_of_effective_robustness(tmp_path):
    path = tiny_manifest(tmp_path / "d")
    id_setting, ood = f"manifest:{path}", f"manifest:{path}?groups=size+gaussian_noise.3"
    evaluate(MODELS, [id_setting, ood], store=tmp_path / "s", batch_size=8, workers=0, progress=False)
    res = Store(tmp_path / "s").results().set_index(["model", "setting"])
    tb = shiftbench.Testbed.from_store(tmp_path / "s", metric="worst_group_accuracy")
    assert tb.settings == [ood] and tb.metric == "worst_group_accuracy"
    m = tb.models[0]
    assert tb.accuracies.loc[m, ood] == pytest.approx(res.loc[(m, ood), "worst_group_accuracy"])
    assert tb.sizes.loc[m, ood] == res.loc[(m, ood), "worst_group_n"]          # the worst group's count
    mixed = shiftbench.Testbed.from_store(tmp_path / "s", metric={ood: "worst_group_accuracy"})
    assert mixed.metric == "mixed" and any("worst-group" in n for n in mixed.notes)
    for model in mixed.models:
        assert mixed.accuracies.loc[model, id_setting] == pytest.approx(res.loc[(model, id_setting), "accuracy"])
        assert mixed.accuracies.loc[model, ood] == pytest.approx(res.loc[(model, ood), "worst_group_accuracy"])
    er = shiftbench.effective_robustness(mixed, id_setting, ood, "linear", fit_on="all")
    assert len(er) == 3
    assert er["y_acc"].to_dict() == pytest.approx(mixed.accuracies[ood].to_dict())
    assert np.allclose(er["effective_robustness"], er["y_acc"] - er["predicted_y_acc"])
    with pytest.raises(DataError, match=r"setting .*: no finished result has worst-group accuracy .*\?groups="):
        shiftbench.Testbed.from_store(tmp_path / "s", metric={id_setting: "worst_group_accuracy"})
    with pytest.raises(DataError, match="did you mean"):
        shiftbench.Testbed.from_store(tmp_path / "s", metric={id_setting + "x": "worst_group_accuracy"})
    with pytest.raises(ConfigError, match="did you mean 'worst_group_accuracy'"):
        shiftbench.Testbed.from_store(tmp_path / "s", metric="worst_group_acc")
    # the CLI: --y-metric on the store's testbed
    import json

    from typer.testing import CliRunner

    from shiftbench.cli import app

    args = ["--x", id_setting, "--y", ood, "--store", str(tmp_path / "s"), "--scale", "linear", "--fit-on", "all",
            "--y-metric", "worst_group_accuracy", "--json"]
    run = CliRunner().invoke(app, ["effective-robustness", *args])
    assert run.exit_code == 0, run.output
    rows = json.loads(run.stdout.strip().splitlines()[-1])
    assert {r["model"]: r["y_acc"] for r in rows} == pytest.approx(mixed.accuracies[ood].to_dict())
    fit = CliRunner().invoke(app, ["fit", *args])
    assert fit.exit_code == 0 and json.loads(fit.stdout.strip().splitlines()[-1])["n_models"] == 3
    bad = CliRunner().invoke(app, ["fit", *args, "-t", "imagenet-reference"])
    assert bad.exit_code != 0 and "--y-metric worst_group_accuracy reads the results store" in str(bad.exception)
