"""The "seven hypotheses" verdict table (Hendrycks et al. 2021, §5): mean effective robustness per
intervention group with a bootstrap interval over models, relative robustness, and the verdict."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import shiftbench
from shiftbench import cli
from shiftbench.analysis.hypotheses import (
    bootstrap_mean_interval,
    hypotheses_table,
    load_groups,
    select_models,
    shipped_groups_path,
)
from shiftbench.errors import ConfigError, DataError
from shiftbench.report.sections import ReportContext
from shiftbench.report.sections import TestbedReport as _Report
from shiftbench.report.shifts import NATURAL_SHIFTS, analyse_shift
from shiftbench.testbed import Testbed as _Testbed

V2 = "imagenetv2-matched-frequency-format-val"


def _logit(p):
    p = np.asarray(p, dtype=float) / 100
    return np.log(p / (1 - p))


def _inv(z):
    return 100 / (1 + np.exp(-np.asarray(z, dtype=float)))


def line(x):
    """The standard models' trend: logit(y) = logit(x) - 0.6."""
    return _inv(_logit(x) - 0.6)


def toy() -> _Testbed:
    std_x = [55.0, 60.0, 65.0, 70.0, 75.0, 80.0]
    rows = [dict(model=f"std{i}", model_type="STANDARD", arch=f"cnn{i}", val=x, v2=float(line(x)))
            for i, x in enumerate(std_x)]
    groups = {"up": [3.0, 4.0, 5.0, 6.0], "down": [-3.0, -4.5, -5.0, -6.0], "on": [-1.0, 0.5, 1.0, -0.5],
              "few": [2.0, 3.0]}
    xs = [62.0, 67.0, 72.0, 77.0]
    for g, offsets in groups.items():
        for j, off in enumerate(offsets):
            rows.append(dict(model=f"{g}{j}", model_type="ROBUST_INTV", arch=f"{g}_net{j}", val=xs[j],
                             v2=float(line(xs[j])) + off))
    frame = pd.DataFrame(rows).rename(columns={"v2": V2})
    return _Testbed.from_frame(frame, name="toy")


GROUPS = pd.DataFrame({
    "group": ["above", "below", "on the line", "two only", "nothing"],
    "hypothesis": ["pretraining", "adversarial training", "larger models", "texture bias", "self-attention"],
    "select": ["up*", "arch~down_*", "on0;on1;on2;on3", "few*", "arch~vit*"],
    "baseline": ["std2", "", "", "", ""],
})


def test_groups_above_below_and_on_the_line_get_helps_hurts_and_no_evidence() -> None:
    res = hypotheses_table(toy(), GROUPS, n_resamples=500, seed=1)
    rows = res.rows.set_index("group")
    assert list(rows["shift"].unique()) == ["ImageNetV2"]
    assert rows.loc["above", "verdict"] == "helps" and rows.loc["above", "mean_er"] == pytest.approx(4.5, abs=1e-6)
    assert rows.loc["below", "verdict"] == "hurts" and rows.loc["below", "high"] < 0
    assert rows.loc["on the line", "verdict"] == "no evidence"
    assert rows.loc["on the line", "low"] < 0 < rows.loc["on the line", "high"]


def test_the_interval_is_a_percentile_bootstrap_over_models_computed_independently() -> None:
    tb = toy()
    res = hypotheses_table(tb, GROUPS, n_resamples=700, seed=3)
    row = res.rows.set_index("group").loc["on the line"]
    std = [f"std{i}" for i in range(6)]
    slope, intercept = np.polyfit(_logit(tb.accuracies.loc[std, "val"]), _logit(tb.accuracies.loc[std, V2]), 1)
    members = ["on0", "on1", "on2", "on3"]
    er = tb.accuracies.loc[members, V2].to_numpy() - _inv(slope * _logit(tb.accuracies.loc[members, "val"]) + intercept)
    idx = np.random.default_rng(3).integers(0, 4, size=(700, 4))
    low, high = np.percentile(er[idx].mean(axis=1), [2.5, 97.5])
    assert row["mean_er"] == pytest.approx(er.mean(), abs=1e-9)
    assert (row["low"], row["high"]) == pytest.approx((low, high), abs=1e-9)
    assert bootstrap_mean_interval(er, 700, 3) == pytest.approx((low, high), abs=1e-12)


def test_relative_robustness_against_a_fixed_baseline() -> None:
    tb = toy()
    row = hypotheses_table(tb, GROUPS, n_resamples=200).rows.set_index("group").loc["above"]
    want = tb.accuracies.loc[["up0", "up1", "up2", "up3"], V2] - tb.accuracies.at["std2", V2]
    assert row["n_pairs"] == 4 and row["mean_rr"] == pytest.approx(want.mean())
    assert row["rr_low"] <= row["mean_rr"] <= row["rr_high"] and row["rr_verdict"] in ("helps", "no evidence")
    assert row["mean_er_diff"] == pytest.approx(4.5, abs=1e-6)   # std2 is on the line


def test_a_group_under_the_minimum_gets_too_few_models_and_no_interval() -> None:
    row = hypotheses_table(toy(), GROUPS, n_resamples=200).rows.set_index("group").loc["two only"]
    assert row["verdict"] == "too few models" and row["n_models"] == 2
    assert np.isnan(row["low"]) and np.isnan(row["high"])
    row = hypotheses_table(toy(), GROUPS, n_resamples=200, min_models=2).rows.set_index("group").loc["two only"]
    assert row["verdict"] == "helps"


def test_a_selector_matching_nothing_is_a_row_with_a_note_not_an_error() -> None:
    row = hypotheses_table(toy(), GROUPS, n_resamples=200).rows.set_index("group").loc["nothing"]
    assert row["n_models"] == 0 and row["verdict"] == "no models" and "arch~vit*" in row["note"]
    models, notes = select_models(toy(), "no_such_model")
    assert models == [] and "no_such_model" in notes[0]


def test_selectors_combine_types_globs_metadata_and_negation() -> None:
    tb = toy().with_metadata(param_count={"std4": 80.0, "std5": 300.0, "std3": 20.0})
    assert select_models(tb, "type:ROBUST_INTV&!up*&!down*&!few*")[0] == ["on0", "on1", "on2", "on3"]
    assert select_models(tb, "STANDARD&param_count>=80")[0] == ["std4", "std5"]
    assert select_models(tb, "arch~CNN1;model:few?")[0] == ["std1", "few0", "few1"]


def test_baseline_templates_take_the_first_model_that_exists() -> None:
    tb = toy().with_metadata(base={"up0": "std1", "up1": "std1", "up2": "nope", "up3": "std4"})
    groups = pd.DataFrame({"group": ["a"], "hypothesis": ["x"], "select": ["up*"], "baseline": ["{base}|std0"]})
    row = hypotheses_table(tb, groups, n_resamples=100).rows.iloc[0]
    acc = tb.accuracies[V2]
    expected = np.mean([acc["up0"] - acc["std1"], acc["up1"] - acc["std1"], acc["up2"] - acc["std0"],
                        acc["up3"] - acc["std4"]])
    assert row["n_pairs"] == 4 and row["mean_rr"] == pytest.approx(expected)


def test_same_column_baselines_average_the_matching_standard_models() -> None:
    tb = toy().with_metadata(arch={"up0": "cnn1", "up1": "cnn1", "up2": "cnn4", "up3": "zzz", "std5": "cnn4"})
    same = pd.DataFrame({"group": ["s"], "hypothesis": ["x"], "select": ["up*"], "baseline": ["same:arch"]})
    row = hypotheses_table(tb, same, n_resamples=100).rows.iloc[0]
    acc = tb.accuracies[V2]
    base4 = (acc["std4"] + acc["std5"]) / 2
    expected = np.mean([acc["up0"] - acc["std1"], acc["up1"] - acc["std1"], acc["up2"] - base4])
    assert row["n_pairs"] == 3 and row["mean_rr"] == pytest.approx(expected)


@pytest.mark.parametrize("text, problem", [
    ("group,hypothesis\na,b\n", "no 'select' column"),
    ("group,hypothesis,select,colour\na,b,c,d\n", "unknown column 'colour'"),
    ("group,hypothesis,select\na,b,c\na,b,d\n", "row 2: group 'a' appears twice"),
    ("group,hypothesis,select\na,b,\n", "row 1: empty 'select'"),
    ("group,hypothesis,select\na,b,param_count>big\n", "row 1 (group 'a'): 'param_count>big' compares"),
])
def test_a_bad_group_table_names_the_file_row_and_problem(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "groups.csv"
    path.write_text(text)
    with pytest.raises(DataError, match="groups.csv") as info:
        load_groups(path)
    assert problem in str(info.value) and "\n" not in str(info.value)


def test_no_shipped_table_for_an_unknown_testbed_says_to_pass_groups() -> None:
    with pytest.raises(ConfigError, match=r"testbed 'toy'.*--groups FILE"):
        hypotheses_table(toy())


@pytest.mark.parametrize("name", ["imagenet-reference", "timm-reference"])
def test_every_shipped_group_matches_at_least_three_models(name: str) -> None:
    assert shipped_groups_path(name) is not None
    tb = shiftbench.load_testbed(name)
    groups = load_groups(name)
    assert len(groups) >= 8 and groups["hypothesis"].nunique() >= 4
    for g in groups.itertuples(index=False):
        models, notes = select_models(tb, g.select)
        assert len(models) >= 3 and not notes, (g.group, models, notes)


def test_cli_json_rows_have_the_verdict_fields() -> None:
    result = CliRunner().invoke(cli.app, ["hypotheses", "--testbed", "imagenet-reference", "--y", "ImageNet-R",
                                          "--json", "--resamples", "200", "--seed", "2"])
    assert result.exit_code == 0, (result.output, result.exception)
    rows = json.loads(result.stdout)
    assert len(rows) == len(load_groups("imagenet-reference")) and {r["shift"] for r in rows} == {"ImageNet-R"}
    for r in rows:
        assert {"group", "shift", "n_models", "mean_er", "low", "high", "verdict", "n_pairs", "mean_rr", "rr_low",
                "rr_high"} <= set(r)
        assert r["verdict"] in ("helps", "hurts", "no evidence", "too few models")
    deep = next(r for r in rows if r["group"] == "DeepAugment and AugMix")
    assert deep["verdict"] == "helps" and deep["n_pairs"] == 4


def test_the_report_section_renders_a_coloured_verdict_table(tmp_path: Path) -> None:
    from shiftbench.report.section_hypotheses import HypothesesSection

    tb = shiftbench.load_testbed("imagenet-reference")
    shift = next(s for s in NATURAL_SHIFTS if s.label == "ImageNet-R")
    report = _Report(tb, [analyse_shift(tb, shift, n_resamples=20)], tmp_path / tb.name, "imagenet")
    report.dir.mkdir()
    ctx = ReportContext(tmp_path, [report])
    section = HypothesesSection()
    assert section.available(ctx, report)
    html = section.render(ctx, report)[0].html
    assert "DeepAugment and AugMix" in html and "ImageNet-R" in html and "#d4edda" in html
    assert (report.dir / "hypotheses.csv").exists()
    assert not section.available(ctx, _Report(toy(), [], tmp_path, "toy"))


def test_the_module_docstring_example_runs() -> None:
    import doctest

    import shiftbench.analysis.hypotheses as module

    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_the_verdict_table_puts_few_shifts_intervals_beside_the_mean(tmp_path: Path) -> None:
    from shiftbench.report.section_hypotheses import ONE_LINE_SHIFTS, HypothesesSection

    tb = shiftbench.load_testbed("imagenet-reference")
    shift = next(s for s in NATURAL_SHIFTS if s.label == "ImageNet-R")
    report = _Report(tb, [analyse_shift(tb, shift, n_resamples=20)], tmp_path / tb.name, "imagenet")
    report.dir.mkdir()
    html = HypothesesSection().render(ReportContext(tmp_path, [report]), report)[0].html
    assert ONE_LINE_SHIFTS >= 1
    # one shift: "mean mark [low, high]" on one line; the group's name in its wide column
    assert "<br><small>[" not in html and " <small>[" in html and 'class="sb-group"' in html
    assert "beside it the 95% percentile bootstrap interval" in html and "sb-verdicts" in html
