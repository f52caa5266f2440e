"""Named synthetic-vs-natural recipes (Taori et al. 2020 §4.2) and mCE on the on-disk cells.

On small constructed testbeds, where the recipe's choices change the numbers, and on the shipped
reference testbeds (loaded offline).
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import special, stats
from typer.testing import CliRunner

import shiftbench
from shiftbench import cli
from shiftbench.analysis import RECIPES, SyntheticVsNatural, synthetic_vs_natural
from shiftbench.analysis.corruption import default_mode, mce
from shiftbench.analysis.synthetic import (
    complete_severities,
    corruption_correlations,
    corruption_settings,
    synthetic_effective_robustness,
)
from shiftbench.errors import DataError
from shiftbench.testbed import Testbed

NAT = "imagenetv2-matched-frequency-format-val"
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(cli.app, list(args))


# ---------------------------------------------------------------------------- a constructed testbed
STANDARD = {"s1": 62.0, "s2": 66.0, "s3": 70.0, "s4": 74.0, "s5": 78.0}
# standard models the recipe keeps out of the fit: their accuracies would move the trend a lot
OUT_OF_FIT = {"net_aws_baseline": 72.0, "net_batch64_original": 71.0, "net_subsample_1_of_2": 68.0, "tiny": 50.0}
ROBUST = {"r1": 60.0, "r2": 64.0, "r3": 68.0, "r4": 72.0, "r5": 76.0, "r6": 70.0}
EXTRA_ROWS = {"robust_subsample_1_of_4": ("ROBUST_INTV", 63.0), "early": ("LOW_ACCURACY_CNN", 58.0)}
GROUPS = {"fog_in-memory": [f"imagenet-c.fog.{s}_in-memory" for s in range(1, 6)],
          "fog_on-disk": [f"imagenet-c.fog.{s}_on-disk" for s in range(1, 6)],
          "snow_on-disk": [f"imagenet-c.snow.{s}_on-disk" for s in range(1, 4)]}   # 3 severities: weights differ
PGD = ["pgd.l2.eps0.5", "pgd.linf.eps2"]


def constructed(drop_on_disk: bool = False, drop_pgd: bool = False) -> Testbed:
    rng = np.random.default_rng(0)
    rows, types = {}, {}
    everyone = ({m: ("STANDARD", v) for m, v in {**STANDARD, **OUT_OF_FIT}.items()}
                | {m: ("ROBUST_INTV", v) for m, v in ROBUST.items()} | EXTRA_ROWS)
    for i, (m, (t, val)) in enumerate(everyone.items()):
        bad = m in OUT_OF_FIT                           # wildly off the standard trend
        boost = 0.0 if t == "STANDARD" and not bad else (15.0 if bad else rng.normal(0, 4))
        row = {"val": val, NAT: val - 11 + (12.0 if bad else 0.0) + (0.5 * boost if t == "ROBUST_INTV" else 0.0)
               + rng.normal(0, 0.3)}
        for names in GROUPS.values():
            for k, s in enumerate(names):
                row[s] = val - 20 - 6 * k + boost + rng.normal(0, 0.5)
        row["stylized_imagenet"] = val / 5 + boost
        row["greyscale"] = val - 5 + boost
        for k, s in enumerate(PGD):
            row[s] = max(1.0, val / 3 - 10 * k + rng.normal(0, 2) + (20.0 if bad else 0.0))
        rows[m], types[m] = row, t
    acc = pd.DataFrame(rows).T
    if drop_on_disk:
        acc = acc.drop(columns=[c for c in acc.columns if c.endswith("_on-disk")])
    if drop_pgd:
        acc = acc.drop(columns=PGD)
    meta = pd.DataFrame({"model_type": pd.Series(types)})
    return Testbed(acc, metadata=meta, name="constructed")


def test_the_fit_uses_only_standard_models_with_val_at_least_55_and_no_aws_batch64_subsample():
    res = synthetic_vs_natural(constructed(), "taori2020", NAT)
    assert set(res.table.index[res.table["in_fit"]]) == set(STANDARD)
    # the effective robustness is against the trend of exactly those five models
    tb = constructed()
    a = tb.accuracies
    avg = res.table["synthetic_acc"]
    fit = stats.linregress(special.logit(a.loc[list(STANDARD), "val"] / 100),
                           special.logit(avg.loc[list(STANDARD)] / 100))
    pred = 100 * special.expit(fit.slope * special.logit(a.loc["r3", "val"] / 100) + fit.intercept)
    assert res.table.loc["r3", "synthetic_er"] == pytest.approx(avg["r3"] - pred)
    # a fit that took the excluded models in would move r3's effective robustness
    everyone = list(STANDARD) + list(OUT_OF_FIT)
    fit_all = stats.linregress(special.logit(a.loc[everyone, "val"] / 100), special.logit(avg.loc[everyone] / 100))
    pred_all = 100 * special.expit(fit_all.slope * special.logit(a.loc["r3", "val"] / 100) + fit_all.intercept)
    assert abs((avg["r3"] - pred_all) - res.table.loc["r3", "synthetic_er"]) > 0.5


def test_correlation_is_over_non_standard_models_without_subsample_variants():
    res = synthetic_vs_natural(constructed(), "taori2020", NAT)
    assert sorted(res.models) == sorted(ROBUST)         # not the subsample variant, not LOW_ACCURACY_CNN
    t = res.table.loc[res.models]
    r, p = stats.pearsonr(t["synthetic_er"], t["natural_er"])
    assert (res.r, res.p, res.n) == (pytest.approx(r), pytest.approx(p), len(ROBUST))


def test_the_average_is_over_severity_averaged_accuracies_per_corruption_and_mode_plus_extras():
    tb = constructed()
    a = tb.accuracies.loc["r2"]
    res = synthetic_vs_natural(tb, "taori2020", NAT)
    parts = [a[names].mean() for names in GROUPS.values()] + [a["stylized_imagenet"], a["greyscale"]]
    assert res.table.loc["r2", "synthetic_acc"] == pytest.approx(np.mean(parts))
    flat = a[[s for names in GROUPS.values() for s in names] + ["stylized_imagenet", "greyscale"]].mean()
    assert abs(flat - np.mean(parts)) > 0.1              # the flat mean over settings is not the recipe
    assert sorted(res.settings) == sorted([*GROUPS, "stylized_imagenet", "greyscale"])
    # adversarial: the plain mean over the PGD settings
    assert res.adversarial.table.loc["r2", "synthetic_acc"] == pytest.approx(a[PGD].mean())
    assert res.adversarial.settings == PGD


def test_a_model_missing_one_severity_is_averaged_over_the_others_and_not_dropped():
    tb = constructed()
    acc = tb.accuracies.copy()
    acc.loc["r2", "imagenet-c.fog.1_in-memory"] = np.nan
    tb = Testbed(acc, metadata=pd.DataFrame({"model_type": tb.model_types}), name="gappy")
    res = synthetic_vs_natural(tb, "taori2020", NAT)
    assert "r2" in res.models and res.n == len(ROBUST)
    a = acc.loc["r2"]
    parts = [a[GROUPS["fog_in-memory"][1:]].mean(), a[GROUPS["fog_on-disk"]].mean(), a[GROUPS["snow_on-disk"]].mean(),
             a["stylized_imagenet"], a["greyscale"]]
    assert res.table.loc["r2", "synthetic_acc"] == pytest.approx(np.mean(parts))
    assert any("fog_in-memory (1 model)" in n for n in res.notes)


def test_missing_settings_are_named_in_one_line_and_fallback_only_when_asked():
    tb = constructed(drop_on_disk=True)
    with pytest.raises(DataError, match=r"imagenet-c\.<corruption>\.<severity>_on-disk") as info:
        synthetic_vs_natural(tb, "taori2020", NAT)
    assert "\n" not in str(info.value) and "fallback" in str(info.value)
    res = synthetic_vs_natural(tb, "taori2020", NAT, fallback=True)
    assert any("on-disk" in n for n in res.notes) and not any(s.endswith("on-disk") for s in res.settings)
    with pytest.raises(DataError, match=r"pgd"):
        synthetic_vs_natural(constructed(drop_pgd=True), "taori2020", NAT)
    res = synthetic_vs_natural(constructed(drop_pgd=True), "taori2020", NAT, fallback=True)
    assert res.adversarial is None and res.to_dict()["adversarial"] is None
    result = invoke("synthetic-vs-natural", "-t", "imagenet-reference-raw", "--y", "no-such-setting")
    assert result.exit_code != 0


def test_unknown_recipe_is_a_config_error():
    with pytest.raises(shiftbench.ConfigError, match="taori2020"):
        synthetic_vs_natural(constructed(), "nope", NAT)


# ---------------------------------------------------------------------------- the reference testbeds
@pytest.fixture(scope="module")
def raw():
    return shiftbench.load_testbed("imagenet-reference-raw")


@pytest.fixture(scope="module")
def cleaned():
    return shiftbench.load_testbed("imagenet-reference")


def test_taori2020_on_the_published_files(raw):
    res = synthetic_vs_natural(raw, "taori2020")
    assert isinstance(res, SyntheticVsNatural)
    assert res.r == pytest.approx(0.240, abs=0.001) and res.n == 115 and res.p < 0.05
    assert res.adversarial.r == pytest.approx(0.015, abs=0.001) and res.adversarial.n == 105
    assert len(res.settings) == 39                      # 19 on disk + 18 in memory + stylized + greyscale
    fit = res.table.index[res.table["in_fit"]]
    assert not any(k in m for m in fit for k in ("_aws", "batch64", "subsample"))
    assert (raw.accuracies.loc[fit, "val"] >= 55).all()
    assert set(raw.model_types.loc[fit]) == {"STANDARD"}
    # standard models the recipe excludes by name are in the testbed with every accuracy
    assert "resnet50_aws_baseline" in res.table.index and "resnet50_aws_baseline" not in fit
    assert not set(raw.model_types.loc[res.models]) & {"STANDARD", "LOW_ACCURACY_CNN"}
    assert not any("subsample" in m for m in res.models)


def test_cleaning_drops_no_model_and_says_how_the_average_was_taken(raw, cleaned):
    a, b = synthetic_vs_natural(raw, "taori2020"), synthetic_vs_natural(cleaned, "taori2020")
    assert b.models == a.models and b.n == a.n
    assert b.r == pytest.approx(0.243, abs=0.001) and b.r != a.r
    assert any("zoom_blur_in-memory (119 models)" in n for n in b.notes) and not a.notes


def test_per_setting_recipe_is_the_mean_of_each_settings_effective_robustness(cleaned):
    res = synthetic_vs_natural(cleaned, "per-setting")
    settings, _ = complete_severities(cleaned, corruption_settings(cleaned))
    syn = synthetic_effective_robustness(cleaned, "val", settings)
    nat = shiftbench.effective_robustness(cleaned, "val", NAT, n_resamples=0)
    overall = corruption_correlations(syn, nat).iloc[0]
    assert res.r == pytest.approx(overall["pearson_r"]) and res.n == overall["n_models"]
    assert res.r != pytest.approx(synthetic_vs_natural(cleaned, "taori2020").r, abs=0.01)


def test_cli_json_has_r_n_p_models_adversarial_and_the_cleaning(tmp_path):
    result = invoke("synthetic-vs-natural", "--recipe", "taori2020", "--testbed", "imagenet-reference", "--json",
                    "-o", str(tmp_path / "t.csv"))
    assert result.exit_code == 0, result.output
    d = json.loads(result.stdout)
    assert {"r", "n", "p", "models", "adversarial", "recipe", "description", "paper"} <= set(d)
    assert {"r", "n", "p", "models"} <= set(d["adversarial"])
    assert d["recipe"] == "taori2020" and d["paper"] == RECIPES["taori2020"][1] and len(d["models"]) == d["n"]
    assert d["cleaning"]["raw"]["r"] == pytest.approx(0.240, abs=0.001)
    assert d["cleaning"]["cleaned"]["r"] == pytest.approx(d["r"])
    csv = pd.read_csv(tmp_path / "t.csv")
    assert set(csv["recipe"]) == {"taori2020"} and set(csv["kind"]) == {"synthetic", "adversarial"}
    text = invoke("synthetic-vs-natural", "-t", "imagenet-reference").stdout
    assert "cleaning: r = 0.243" in text and "imagenet-reference-raw" in text and "recipe taori2020:" in text


def test_cli_missing_settings_one_line_error(tmp_path):
    path = tmp_path / "noondisk.csv"
    tb = constructed(drop_on_disk=True)
    frame = tb.accuracies.copy()
    frame.insert(0, "model_type", tb.model_types)
    frame.rename_axis("model").to_csv(path)
    result = invoke("synthetic-vs-natural", "-t", str(path))
    assert isinstance(result.exception, DataError) and "_on-disk" in str(result.exception)
    result = invoke("synthetic-vs-natural", "-t", str(path), "--fallback")
    assert result.exit_code == 0, result.output
    assert "fallback" in result.stdout


# ---------------------------------------------------------------------------- mCE on the published files
def test_mce_defaults_to_on_disk_cells_when_the_testbed_has_them(cleaned):
    assert default_mode(cleaned) == "on-disk"
    res = mce(cleaned, "resnet50")
    assert res["mode"] == "on-disk" and res["mCE"] == pytest.approx(76.7, abs=0.6)
    assert (res["table"]["mode"] == "on-disk").all()
    assert mce(cleaned, "resnet50_augmix")["mCE"] == pytest.approx(65.3, abs=0.6)
    inmem = mce(cleaned, "resnet50", mode="in-memory")
    assert inmem["mode"] == "in-memory" and abs(inmem["mCE"] - res["mCE"]) > 1


def test_mce_cli_names_the_cells_used():
    d = json.loads(invoke("mce", "-m", "resnet50", "-t", "imagenet-reference", "--json").stdout)
    assert d["mode"] == "on-disk" and d["mCE"] == pytest.approx(76.5, abs=0.05) and d["recipe"] == "hendrycks2019"
    text = invoke("mce", "-m", "resnet50", "-t", "imagenet-reference", "--mode", "in-memory").stdout
    assert "(in-memory ImageNet-C)" in text and "ImageNet-C cells: in-memory;" in text
    text = invoke("mce", "-m", "resnet50", "-t", "imagenet-reference").stdout
    assert "(on-disk ImageNet-C)" in text and "on-disk (default)" in text


def test_mce_without_on_disk_cells_defaults_to_in_memory():
    tb = constructed(drop_on_disk=True)
    assert default_mode(tb) == "in-memory"
