"""Placing your own models against a reference testbed: merging tables and stores from the CLI
(repeated --testbed, `+` with paths, --store), equality to the precision written, example counts
taken from the reference, aliases, and added models kept out of the default fit."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_engine import run, val  # noqa: F401  (a fixture: a partial ImageNet val the oracle model scores)
from typer.testing import CliRunner

import shiftbench as sb
from shiftbench import cli
from shiftbench.errors import DataError
from shiftbench.testbed import agree_to_written_precision

REF = "imagenet-reference"
X, Y = "val", "imagenetv2-matched-frequency-format-val"


def invoke(*args: str):
    result = CliRunner().invoke(cli.app, list(args))
    if isinstance(result.exception, sb.ShiftbenchError):   # main() prints these in one line
        result.output_error = str(result.exception)
    return result


@pytest.fixture
def mine(tmp_path: Path) -> Path:
    path = tmp_path / "mine.csv"
    path.write_text("model,model_type,val,imagenetv2-matched-frequency-format-val\n"
                    "resnet50,STANDARD,76.13,63.21\n"
                    "my-robust-net,ROBUST_INTV,75.80,66.10\n"
                    "my-untyped-net,,74.00,61.00\n")
    return path


def test_equal_to_the_precision_written_merges_and_a_real_conflict_names_both_numbers(tmp_path):
    ref = sb.load_testbed(REF)
    assert ref.accuracies.at["resnet50", "val"] != 76.13          # stored as float32: 76.1300048828125
    table = sb.Testbed.from_frame(pd.DataFrame({"model": ["resnet50"], "val": [76.13]}), name="mine")
    merged = ref.merge(table)
    assert merged.accuracies.at["resnet50", "val"] == ref.accuracies.at["resnet50", "val"]
    clash = sb.Testbed.from_frame(pd.DataFrame({"model": ["resnet50"], "val": [76.16]}), name="mine")
    with pytest.raises(DataError) as info:
        ref.merge(clash)
    message = str(info.value)
    assert "76.1300048828125" in message and "76.16" in message and "on_conflict=" in message
    assert ref.merge(clash, on_conflict="right").accuracies.at["resnet50", "val"] == 76.16
    assert list(agree_to_written_precision(np.array([76.0, 76.0, np.nan]), np.array([76.4, 76.6, 1.0]))) == \
        [True, False, False]


def test_missing_example_counts_come_from_the_reference_and_widen_the_intervals(mine):
    alone = sb.Testbed.read(mine)
    assert alone.sizes.isna().all().all()
    merged = sb.load_testbed([REF, mine])
    assert merged.sizes.at["my-robust-net", X] == 50_000 and merged.sizes.at["my-robust-net", Y] == 10_000
    assert any("no example counts" in n and "50,000" in n for n in merged.notes)
    er = sb.effective_robustness(merged, X, Y).loc["my-robust-net"]
    assert er.er_high - er.er_low > 1.0        # a 10,000-image interval, not the 0.01% clip of no size


def test_an_alias_spelling_is_renamed_and_said(tmp_path):
    path = tmp_path / "aliased.csv"
    path.write_text("model,model_type,val,imagenetv2\nnet,ROBUST_INTV,75.8,66.1\n")
    merged = sb.load_testbed(f"{REF}+{path}")
    assert merged.accuracies.at["net", Y] == 66.1 and "imagenetv2" not in merged.settings
    assert any("'imagenetv2' read as 'imagenetv2-matched-frequency-format-val'" in n for n in merged.notes)


def test_added_models_are_listed_and_untyped_ones_stay_out_of_the_default_fit(mine):
    merged = sb.load_testbed(f"{REF}+{mine}")
    assert merged.added == ["resnet50", "my-robust-net", "my-untyped-net"]
    assert merged.model_types["my-untyped-net"] == "UNKNOWN"
    fit = sb.fit_trend(merged, X, Y)
    assert fit.n_models == 87 == sb.fit_trend(sb.load_testbed(REF), X, Y).n_models
    assert merged.select(models=["my-robust-net", "vgg16"]).added == ["my-robust-net"]


def test_cli_repeated_testbed_plus_paths_and_the_api_agree(mine):
    expected = sb.effective_robustness(sb.load_testbed(REF).merge(sb.Testbed.read(mine)), X, Y)
    for args in (["-t", REF, "-t", str(mine)], ["-t", f"{REF}+{mine}"]):
        result = invoke("effective-robustness", *args, "--x", X, "--y", Y, "--json")
        assert result.exit_code == 0, result.output
        rows = {r["model"]: r for r in json.loads(result.stdout)}
        assert rows["my-robust-net"]["effective_robustness"] == pytest.approx(
            expected.at["my-robust-net", "effective_robustness"], abs=1e-9)
        assert len(rows) == len(expected)
    result = invoke("fit", "-t", REF, "-t", str(mine), "--x", X, "--y", Y)
    assert result.exit_code == 0
    assert "not fitted: 2 added model(s) of type ROBUST_INTV, UNKNOWN" in result.stderr
    assert "took imagenet-reference's (val 50,000" in result.stderr


def test_cli_bad_testbeds_are_one_line_errors(tmp_path):
    result = invoke("fit", "-t", REF, "-t", str(tmp_path / "missing.csv"), "--x", X, "--y", Y)
    assert result.exit_code != 0 and "missing.csv: no such testbed file" in result.output_error
    result = invoke("fit", "--x", X, "--y", Y)
    assert result.exit_code != 0 and "no testbed given" in result.output_error
    (tmp_path / "empty-dir").mkdir()
    result = invoke("fit", "-t", REF, "-t", str(tmp_path / "empty-dir"), "--x", X, "--y", Y)
    assert "not a results store" in result.output_error


def test_models_evaluated_into_a_store_join_a_reference_from_the_cli(val, tmp_path, monkeypatch):  # noqa: F811
    from conftest import FIXTURES

    monkeypatch.syspath_prepend(str(FIXTURES))
    run(val, ["val", "val-on-imagenet-a-classes"], tmp_path / "store")
    model = "oracle_models.oracle"
    merged = sb.load_testbed(REF, store=tmp_path / "store")
    assert merged.added == [model] and merged.model_types[model] == "UNKNOWN"
    assert sb.load_testbed([REF, tmp_path / "store"]).added == [model]
    result = invoke("effective-robustness", "-t", REF, "--store", str(tmp_path / "store"),
                    "--x", "val", "--y", "val-on-imagenet-a-classes", "--json")
    assert result.exit_code == 0, result.output
    rows = {r["model"]: r for r in json.loads(result.stdout)}
    assert rows[model]["x_acc"] == pytest.approx(50.0)
    target = tmp_path / "placed.png"
    result = invoke("plot", "-t", REF, "--store", str(tmp_path / "store"), "--x", "val",
                    "--y", "val-on-imagenet-a-classes", "-o", str(target))
    assert result.exit_code == 0 and target.stat().st_size > 10_000


def test_cli_place_ranks_the_added_models_on_every_shift_they_have(mine):
    result = invoke("place", "-t", REF, "-t", str(mine), "--json", "--resamples", "200")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["placed"]
    assert {r["model"] for r in rows} == {"resnet50", "my-robust-net", "my-untyped-net"}
    assert {r["shift"] for r in rows if r["model"] != "resnet50"} == {"ImageNetV2"}
    assert {"ImageNet-R", "ImageNet-A", "ObjectNet"} <= {r["shift"] for r in rows}   # the reference's resnet50
    er = sb.effective_robustness(sb.load_testbed([REF, mine]), X, Y)
    robust = next(r for r in rows if r["model"] == "my-robust-net")
    assert robust["rank"] == int((er["effective_robustness"] > er.at["my-robust-net", "effective_robustness"]).sum()) + 1
    assert robust["n_ranked"] == len(er)
    text = invoke("place", "-t", REF, "-t", str(mine), "--resamples", "200").stdout
    assert "of your models, resnet50 is in the fit" in text
    result = invoke("place", "-t", REF)
    assert "no models to place" in result.output_error


def test_every_analysis_command_merges_repeated_testbeds(mine):
    result = invoke("diagnostics", "-t", REF, "-t", str(mine), "--json")
    assert result.exit_code == 0, result.output
    assert any(r["shift"] == "ImageNetV2" for r in json.loads(result.stdout))
    result = invoke("mce", "-t", REF, "-t", str(mine), "--model", "resnet50", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["model"] == "resnet50"
    result = invoke("list", "models", "-t", REF, "-t", str(mine), "--type", "UNKNOWN")
    assert result.stdout.split() == ["my-untyped-net"]
