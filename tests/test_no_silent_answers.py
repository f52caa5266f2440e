"""No silent wrong answers when placing your own models (issue 31, item 3).

* Accuracies are percentages: a table (or arrays) whose accuracies all lie in [0, 1] is refused as
  fractions, in one line naming the file and its columns and suggesting x100; ``--fractions`` /
  ``fractions=True`` converts them, ``--percent`` / ``fractions=False`` keeps sub-1% percentages.
* Every (model, shift) that ``place`` / ``place_models`` / the report's "Your models" could not
  place is listed with the setting it lacks: a table with ``val`` and ``objectnet`` but no
  ``val-on-objectnet-classes`` is told so, in the table, ``--json``, ``attrs["skipped"]`` and the report.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import shiftbench as sb  # noqa: E402
from shiftbench import cli  # noqa: E402
from shiftbench.analysis.placement import NATURAL_SHIFTS, place_models, skipped_lines  # noqa: E402
from shiftbench.errors import DataError  # noqa: E402
from shiftbench import testbed as tbmod  # noqa: E402
from clirun import run_main  # noqa: E402 - tests/ helper

REF = "imagenet-reference"
ON_X, ON_Y = "val-on-objectnet-classes", "objectnet-1.0-beta"
ON_WHAT = "ImageNet validation on the 125 ImageNet classes that map to ObjectNet's 113"   # settings' description




@pytest.fixture
def tables(tmp_path: Path) -> dict[str, Path]:
    """The same two models as fractions and as percentages, and one with val and objectnet only."""
    out = {"fractions": tmp_path / "fractions.csv", "percent": tmp_path / "percent.csv",
           "objectnet": tmp_path / "mine.csv"}
    out["fractions"].write_text("model,val,imagenet-sketch\nmine,0.76,0.25\nmine1,0.70,0.20\n")
    out["percent"].write_text("model,val,imagenet-sketch\nmine,76,25\nmine1,70,20\n")
    out["objectnet"].write_text("model,val,objectnet\nmine2,76.0,30.1\n")
    return out


# --------------------------------------------------------------------------- fractions
def test_a_csv_of_fractions_is_one_line_on_the_command_line_naming_the_file_columns_and_x100(
        tables, monkeypatch, capsys):
    code, out, err = run_main(monkeypatch, capsys, "place", "-t", REF, "-t", str(tables["fractions"]),
                              "--resamples", "0")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1 and out == "" and "Traceback" not in err and len(lines) == 1, err
    line = lines[0]
    for needle in ("error: ", "fractions.csv", "'val'", "'imagenet-sketch'", "multiply them by 100", "--fractions",
                   "--percent", "0.76 would be 0.76%, not 76%"):
        assert needle in line, (needle, line)


def test_fractions_place_the_same_as_the_table_times_100(tables, monkeypatch, capsys):
    runs = {}
    for kind, extra in (("fractions", ["--fractions"]), ("percent", [])):
        code, out, err = run_main(monkeypatch, capsys, "place", "-t", REF, "-t", str(tables[kind]),
                                  "--resamples", "50", "--json", *extra)
        assert code == 0, err
        runs[kind] = json.loads(out)
    assert runs["fractions"] == runs["percent"]
    assert [(r["model"], r["shift"]) for r in runs["percent"]["placed"]] == [("mine", "ImageNet-Sketch"),
                                                                          ("mine1", "ImageNet-Sketch")]
    assert runs["percent"]["placed"][0]["x_acc"] == 76.0


def test_the_python_api_refuses_fractions_and_converts_them_when_told(tables):
    with pytest.raises(DataError, match="fractions.csv.*multiply them by 100"):
        sb.load_testbed([REF, tables["fractions"]])
    with pytest.raises(DataError, match="fractions=True"):
        tbmod.Testbed.read(tables["fractions"])
    converted = sb.load_testbed([REF, tables["fractions"]], fractions=True)
    same = sb.load_testbed([REF, tables["percent"]])
    pd.testing.assert_frame_equal(converted.accuracies, same.accuracies)
    assert any("multiplied by 100" in n for n in converted.notes)
    # a table of percentages with --fractions is an error, not a x100 of percentages
    with pytest.raises(DataError, match="outside \\[0, 1\\]"):
        tbmod.Testbed.read(tables["percent"], fractions=True)
    # --fractions with no table to convert says so
    with pytest.raises(sb.ConfigError, match="none was given"):
        sb.load_testbed(REF, fractions=True)


def test_a_chance_level_model_in_percent_is_kept_with_fractions_false_and_lone_values_pass():
    frame = pd.DataFrame({"model": ["random"], "val": [0.1], "imagenet-sketch": [0.08]})    # 1000 classes, 0.1%
    with pytest.raises(DataError, match="fractions=False \\(--percent\\)"):
        tbmod.Testbed.from_frame(frame)
    tb = tbmod.Testbed.from_frame(frame, fractions=False)
    assert tb.accuracies.at["random", "val"] == 0.1
    lone = tbmod.Testbed.from_frame(frame[["model", "val"]])          # one value: too few to tell
    assert lone.accuracies.at["random", "val"] == 0.1
    zeros = pd.DataFrame({"model": ["broken"], "val": [0.0], "imagenet-sketch": [0.0]})      # 0 is 0 in both units
    assert tbmod.Testbed.from_frame(zeros).accuracies.to_numpy().sum() == 0


def test_one_column_below_1_among_percentages_is_read_with_a_note():
    frame = pd.DataFrame({"model": ["r50", "r18"], "val": [76.1, 69.8], "imagenet-a": [0.0, 0.8]})
    tb = tbmod.Testbed.from_frame(frame, name="mine")          # ImageNet-A: ResNets really score below 1%
    assert tb.accuracies.at["r18", "imagenet-a"] == 0.8
    assert any("'imagenet-a'" in n and "multiply them by 100" in n for n in tb.notes)
    assert not tbmod.Testbed.from_frame(frame, fractions=False).notes


def test_the_long_form_is_checked_too():
    long = pd.DataFrame({"model": ["m", "m"], "setting": ["val", "imagenet-sketch"], "accuracy": [0.76, 0.25]})
    with pytest.raises(DataError, match="'val', 'imagenet-sketch'"):
        tbmod.Testbed.from_frame(long)
    assert tbmod.Testbed.from_frame(long, fractions=True).accuracies.loc["m"].tolist() == [76.0, 25.0]


def test_fit_trend_and_effective_robustness_refuse_arrays_of_fractions():
    with pytest.raises(DataError, match="multiply them by 100"):
        sb.fit_trend(x=[0.7, 0.75, 0.8], y=[0.5, 0.55, 0.6])
    fit = sb.fit_trend(x=[0.7, 0.75, 0.8], y=[0.5, 0.55, 0.6], fractions=True)
    ref = sb.fit_trend(x=[70, 75, 80], y=[50, 55, 60])
    assert (fit.slope, fit.intercept) == pytest.approx((ref.slope, ref.intercept))
    with pytest.raises(DataError, match="fractions"):
        sb.effective_robustness(x=[0.7, 0.75, 0.8, 0.7], y=[0.5, 0.55, 0.6, 0.6])
    with pytest.raises(DataError, match="fractions"):
        sb.fit_trend(x=np.array([[0.7, 0.6], [0.75, 0.62], [0.8, 0.7], [0.7, 0.66]]), y=[0.5, 0.55, 0.6, 0.6])
    er = sb.effective_robustness(x=[0.7, 0.75, 0.8, 0.7], y=[0.5, 0.55, 0.6, 0.6], fractions=True, n_resamples=0)
    assert er["x_acc"].tolist() == [70.0, 75.0, 80.0, 70.0]
    assert sb.fit_trend(x=[0.2, 0.5, 0.9], y=[0.1, 0.3, 0.6], fractions=False).n_models == 3   # percentages < 1%


# --------------------------------------------------------------------------- what could not be placed
def test_a_model_with_val_and_objectnet_is_told_objectnet_needs_the_class_subset_column(tables, monkeypatch,
                                                                                        capsys):
    code, out, err = run_main(monkeypatch, capsys, "place", "-t", REF, "-t", str(tables["objectnet"]),
                              "--resamples", "0")
    assert code == 0, err
    assert f"not placed: mine2 on ObjectNet: needs {ON_X} ({ON_WHAT})" in out
    assert "mine2 on ImageNetV2: needs imagenetv2-matched-frequency-format-val" in out
    # --json: the same list, under "skipped"
    code, out, err = run_main(monkeypatch, capsys, "place", "-t", REF, "-t", str(tables["objectnet"]),
                              "--resamples", "0", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["placed"] == []
    objectnet = next(r for r in result["skipped"] if r["shift"] == "ObjectNet")
    assert objectnet["model"] == "mine2" and objectnet["missing"] == [ON_X] and ON_WHAT in objectnet["reason"]
    assert {r["shift"] for r in result["skipped"]} == {s.label for s in NATURAL_SHIFTS}


def test_place_models_lists_every_model_and_shift_it_skips_with_the_missing_column(tables):
    tb = sb.load_testbed([REF, tables["objectnet"], tables["percent"]])
    placed = place_models(tb, ["mine2", "mine"], n_resamples=0)
    assert list(zip(placed["model"], placed["shift"])) == [("mine", "ImageNet-Sketch")]    # mine has no ImageNetV2
    skipped = placed.attrs["skipped"]
    assert [r["model"] for r in skipped] == sorted((r["model"] for r in skipped), key=["mine2", "mine"].index)
    done = set(zip(placed["model"], placed["shift"]))
    listed = {(r["model"], r["shift"]) for r in skipped}
    assert done.isdisjoint(listed)
    assert done | listed == {(m, s.label) for m in ("mine2", "mine") for s in NATURAL_SHIFTS}   # all accounted for
    on = next(r for r in skipped if (r["model"], r["shift"]) == ("mine2", "ObjectNet"))
    assert on == {"model": "mine2", "shift": "ObjectNet", "x": ON_X, "y": ON_Y, "missing": [ON_X],
                  "reason": f"ObjectNet needs {ON_X} ({ON_WHAT})"}
    assert f"mine2 on ObjectNet: needs {ON_X} ({ON_WHAT})" in skipped_lines(skipped)
    # explicit shifts: the models lacking a cell are listed too
    explicit = place_models(tb, ["mine2"], [(ON_X, ON_Y)], n_resamples=0)
    assert len(explicit) == 0 and [r["missing"] for r in explicit.attrs["skipped"]] == [[ON_X]]


def _objectnet_testbed() -> tbmod.Testbed:
    """Five STANDARD models on ObjectNet and ImageNetV2, and mine2 with val and objectnet only."""
    xs = np.array([60.0, 65.0, 70.0, 75.0, 80.0])
    frame = pd.DataFrame({
        "model": [f"std{i}" for i in range(5)] + ["mine2"], "model_type": ["STANDARD"] * 5 + ["UNKNOWN"],
        "val": [*xs, 76.0], "imagenetv2-matched-frequency-format-val": [*(xs - 12), np.nan],
        ON_X: [*(xs + 3), np.nan], ON_Y: [*(xs - 40), 30.1]})
    return tbmod.Testbed.from_frame(frame, name="tinyon")


def test_the_report_your_models_section_lists_the_skip_and_the_missing_column(tmp_path: Path):
    from shiftbench.report import write_html_report, write_report

    tb = _objectnet_testbed()
    doc = write_html_report([tb], tmp_path / "html", n_resamples=20, figure_formats=(),
                            highlight=["mine2"]).read_text(encoding="utf-8")
    start = doc.index('id="your-models"')
    section = doc[start:doc.find('<section class="sb-', start + 1)]
    assert "Not placed:" in section
    assert f"mine2 on ObjectNet: needs {ON_X} ({ON_WHAT.replace(chr(39), '&#x27;')})" in section
    assert "mine2 on ImageNetV2: needs imagenetv2-matched-frequency-format-val" in section
    text = write_report([tb], tmp_path / "md", n_resamples=20, highlight=["mine2"]).read_text()
    assert f"- mine2 on ObjectNet: needs {ON_X} ({ON_WHAT})" in text
