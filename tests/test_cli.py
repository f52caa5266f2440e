"""The ``shiftbench`` command line: spellings, JSON output, user tables and one-line errors.

Most tests drive ``shiftbench.cli.app`` in-process with typer's CliRunner; a few run the
installed console script in a subprocess to check the exact stdout / stderr a user sees.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import shiftbench
from shiftbench import cli
from shiftbench.errors import ConfigError, DataError, ShiftbenchError
from clirun import run_main  # noqa: E402 - tests/ helper

REF = "imagenet-reference"
X, Y = "val", "imagenetv2-matched-frequency-format-val"
ER_KEYS = {"model", "model_type", "x_acc", "y_acc", "predicted_y_acc", "effective_robustness"}
FIT_KEYS = {"slope", "intercept", "r2", "n_models", "scale", "x", "y"}
SCRIPT = Path(sys.executable).with_name("shiftbench")
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "MPLBACKEND": "Agg"}

runner = CliRunner()


# --------------------------------------------------------------------------- helpers
@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "MPLBACKEND"):
        monkeypatch.setenv(key, ENV[key])


def invoke(*args: str):
    """Run the typer app in-process; ShiftbenchErrors surface as ``result.exception``."""
    return runner.invoke(cli.app, list(args))


def ok(*args: str) -> str:
    result = invoke(*args)
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout


def run_script(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the installed console script (goes through ``main()``)."""
    assert SCRIPT.exists(), f"console script not installed next to {sys.executable}"
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=ENV, cwd=cwd, timeout=120)




def assert_one_line_error(code: int, out: str, err: str, *needles: str) -> str:
    assert code != 0
    assert out == ""
    lines = err.strip("\n").splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def ref() -> shiftbench.Testbed:
    return shiftbench.load_testbed(REF)


USER_ROWS = [
    # model, model_type, id, ood
    ("m1", "STANDARD", 60.0, 45.0),
    ("m2", "STANDARD", 65.0, 50.5),
    ("m3", "STANDARD", 70.0, 56.0),
    ("m4", "STANDARD", 75.0, None),      # empty cell: skipped and counted
    ("m5", "MORE_DATA", 68.0, 62.0),
    ("m6", "ROBUST_INTV", 72.0, 60.0),
]


def write_user_csv(path: Path, rows=USER_ROWS) -> Path:
    lines = ["model,model_type,id,ood"]
    for model, mtype, a, b in rows:
        lines.append(",".join([model, mtype, "" if a is None else str(a), "" if b is None else str(b)]))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def user_csv(tmp_path: Path) -> Path:
    return write_user_csv(tmp_path / "mine.csv")


# --------------------------------------------------------------------------- list
def test_list_testbeds_names_both_references() -> None:
    names = [line.split()[0] for line in ok("list", "testbeds").splitlines()]
    assert names == list(shiftbench.list_testbeds())
    assert {"imagenet-reference", "timm-reference"} <= set(names)


def test_list_testbeds_is_tab_separated() -> None:
    lines = ok("list", "testbeds").splitlines()
    assert [line.split("\t")[0] for line in lines] == list(shiftbench.list_testbeds())


def test_list_settings_prints_one_setting_per_line(ref: shiftbench.Testbed) -> None:
    assert ok("list", "settings", "--testbed", REF).splitlines() == ref.settings


def test_list_models_prints_one_model_per_line(ref: shiftbench.Testbed) -> None:
    assert ok("list", "models", "--testbed", REF).splitlines() == ref.models


def test_list_models_type_standard_lists_the_87_standard_models(ref: shiftbench.Testbed) -> None:
    lines = ok("list", "models", "--testbed", REF, "--type", "STANDARD").splitlines()
    assert len(lines) == 87
    assert set(ref.model_types[lines]) == {"STANDARD"}


def test_list_models_of_a_user_csv(user_csv: Path) -> None:
    assert ok("list", "models", "--testbed", str(user_csv)).splitlines() == [r[0] for r in USER_ROWS]
    assert ok("list", "settings", "--testbed", str(user_csv)).splitlines() == ["id", "ood"]


def test_list_models_prints_names_verbatim(tmp_path: Path) -> None:
    path = tmp_path / "odd.csv"
    path.write_text("model,model_type,id,ood\nclip:fire:vit,STANDARD,60,45\n[bold]m2,STANDARD,65,50\n")
    assert ok("list", "models", "--testbed", str(path)).splitlines() == ["clip:fire:vit", "[bold]m2"]


# --------------------------------------------------------------------------- fit
def test_fit_json_agrees_with_fit_trend(ref: shiftbench.Testbed) -> None:
    d = json.loads(ok("fit", "--testbed", REF, "--x", X, "--y", Y, "--json"))
    assert FIT_KEYS <= set(d)
    fit = shiftbench.fit_trend(ref, X, Y)
    assert d["slope"] == pytest.approx(fit.slope, rel=1e-12)
    assert d["intercept"] == pytest.approx(fit.intercept, rel=1e-12)
    assert d["r2"] == pytest.approx(fit.r2, rel=1e-12)
    assert (d["n_models"], d["scale"], d["x"], d["y"]) == (fit.n_models, "logit", X, Y)
    assert d["slope"] == pytest.approx(0.92, abs=0.01)  # Taori et al. 2020, ImageNetV2


def test_fit_text_output_shows_slope_and_counts() -> None:
    out = ok("fit", "--testbed", REF, "--x", X, "--y", Y)
    assert "slope" in out and "n_models" in out and "n_skipped" in out and "87" in out


def test_fit_on_repeated_and_comma_separated_agree(ref: shiftbench.Testbed) -> None:
    base = ["fit", "--testbed", REF, "--x", X, "--y", Y, "--json"]
    repeated = json.loads(ok(*base, "--fit-on", "STANDARD", "--fit-on", "MORE_DATA"))
    comma = json.loads(ok(*base, "--fit-on", "STANDARD,MORE_DATA"))
    spaced = json.loads(ok(*base, "--fit-on", "STANDARD, MORE_DATA"))
    api = shiftbench.fit_trend(ref, X, Y, fit_on=["STANDARD", "MORE_DATA"])
    for d in (repeated, comma, spaced):
        assert d["n_models"] == api.n_models == 87 + 43
        assert d["slope"] == pytest.approx(api.slope, rel=1e-12)
        assert d["fit_on"] == ["STANDARD", "MORE_DATA"]


def test_fit_on_model_names(ref: shiftbench.Testbed) -> None:
    names = ref.resolve("STANDARD")[:5]
    d = json.loads(ok("fit", "--testbed", REF, "--x", X, "--y", Y, "--json", "--fit-on", ",".join(names)))
    assert d["n_models"] == 5
    assert d["slope"] == pytest.approx(shiftbench.fit_trend(ref, X, Y, fit_on=names).slope, rel=1e-12)


@pytest.mark.parametrize("scale", ["probit", "linear"])
def test_fit_scale_changes_the_slope(ref: shiftbench.Testbed, scale: str) -> None:
    base = ["fit", "--testbed", REF, "--x", X, "--y", Y, "--json"]
    logit = json.loads(ok(*base))
    other = json.loads(ok(*base, "--scale", scale))
    assert other["scale"] == scale
    assert other["slope"] != pytest.approx(logit["slope"], rel=1e-3)
    assert other["slope"] == pytest.approx(shiftbench.fit_trend(ref, X, Y, scale).slope, rel=1e-12)


def test_fit_pivot_gives_a_piecewise_fit(ref: shiftbench.Testbed) -> None:
    xa, ya = "val-on-imagenet-a-classes", "imagenet-a"       # the hinge by name: the default is two lines
    d = json.loads(ok("fit", "--testbed", REF, "--x", xa, "--y", ya, "--pivot", "resnet50", "--recipe", "hinge",
                      "--json"))
    api = shiftbench.fit_piecewise_trend(ref, xa, ya, "resnet50")
    assert d["kind"] == "piecewise"
    assert d["pivot"] == pytest.approx(ref.accuracies.at["resnet50", xa])
    assert d["slope"] == pytest.approx(api.slope) and d["slope_below"] == pytest.approx(api.slope_below)


# --------------------------------------------------------------------------- effective robustness
def test_effective_robustness_json_agrees_with_the_api(ref: shiftbench.Testbed) -> None:
    rows = json.loads(ok("effective-robustness", "--testbed", REF, "--x", X, "--y", Y, "--json"))
    api = shiftbench.effective_robustness(ref, X, Y, n_resamples=0)
    assert isinstance(rows, list) and len(rows) == len(api) == 335
    assert all(ER_KEYS <= set(r) for r in rows)
    got = pd.DataFrame(rows).set_index("model").loc[api.index]
    for col in ("x_acc", "y_acc", "predicted_y_acc", "effective_robustness"):
        np.testing.assert_allclose(got[col].to_numpy(float), api[col].to_numpy(float), rtol=1e-10, atol=1e-10)
    assert (got["model_type"] == api["model_type"]).all()
    er = [r["effective_robustness"] for r in rows]
    assert er == sorted(er, reverse=True)


def test_effective_robustness_top_n_rows_sorted_descending() -> None:
    base = ["effective-robustness", "--testbed", REF, "--x", X, "--y", Y, "--json"]
    full = json.loads(ok(*base))
    top = json.loads(ok(*base, "--top", "7"))
    assert len(top) == 7
    er = [r["effective_robustness"] for r in top]
    assert er == sorted(er, reverse=True)
    assert [r["model"] for r in top] == [r["model"] for r in full[:7]]
    assert er[0] == max(r["effective_robustness"] for r in full)


def test_effective_robustness_top_zero_is_not_every_model() -> None:
    result = invoke("effective-robustness", "--testbed", REF, "--x", X, "--y", Y, "--json", "--top", "0")
    if result.exception is not None:
        assert isinstance(result.exception, ConfigError) and "top" in str(result.exception)
    else:
        assert json.loads(result.stdout) == []


def test_effective_robustness_negative_top_is_a_config_error() -> None:
    result = invoke("effective-robustness", "--testbed", REF, "--x", X, "--y", Y, "--top", "-3")
    assert isinstance(result.exception, ConfigError) and "top" in str(result.exception)


def test_effective_robustness_is_in_percentage_points(ref: shiftbench.Testbed) -> None:
    rows = json.loads(ok("effective-robustness", "--testbed", REF, "--x", X, "--y", Y, "--json", "--top", "1"))
    r = rows[0]
    assert r["effective_robustness"] == pytest.approx(r["y_acc"] - r["predicted_y_acc"])
    assert 1 < r["effective_robustness"] < 100  # points, not a fraction
    assert r["y_acc"] == pytest.approx(ref.accuracies.at[r["model"], Y])


def test_effective_robustness_text_output_has_a_table() -> None:
    out = ok("effective-robustness", "--testbed", REF, "--x", X, "--y", Y, "--top", "3")
    assert "model" in out and "eff." in out


# --------------------------------------------------------------------------- user tables
def test_user_csv_fit_counts_the_empty_cell(user_csv: Path) -> None:
    d = json.loads(ok("fit", "--testbed", str(user_csv), "--x", "id", "--y", "ood", "--json"))
    tb = shiftbench.load_testbed(str(user_csv))
    api = shiftbench.fit_trend(tb, "id", "ood")
    assert (d["n_models"], d["n_skipped"]) == (3, 1)
    assert d["slope"] == pytest.approx(api.slope, rel=1e-12)
    assert d["intercept"] == pytest.approx(api.intercept, rel=1e-12)


def test_user_csv_effective_robustness_skips_and_reports_the_empty_cell(user_csv: Path) -> None:
    rows = json.loads(ok("effective-robustness", "--testbed", str(user_csv), "--x", "id", "--y", "ood", "--json"))
    assert {r["model"] for r in rows} == {"m1", "m2", "m3", "m5", "m6"}
    assert rows[0]["model"] == "m5" and rows[0]["model_type"] == "MORE_DATA"
    text = ok("effective-robustness", "--testbed", str(user_csv), "--x", "id", "--y", "ood")
    assert "1 models skipped" in text


def test_user_csv_fit_text_shows_skipped(user_csv: Path) -> None:
    out = ok("fit", "--testbed", str(user_csv), "--x", "id", "--y", "ood")
    line = next(line for line in out.splitlines() if "n_skipped" in line)
    assert "1" in line


def test_user_csv_plot_writes_a_png(user_csv: Path, tmp_path: Path) -> None:
    target = tmp_path / "mine.png"
    ok("plot", "--testbed", str(user_csv), "--x", "id", "--y", "ood", "-o", str(target))
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_user_parquet_table_works_like_the_csv(user_csv: Path, tmp_path: Path) -> None:
    parquet = shiftbench.Testbed.read(user_csv).save(tmp_path / "mine.parquet")
    a = json.loads(ok("fit", "--testbed", str(user_csv), "--x", "id", "--y", "ood", "--json"))
    b = json.loads(ok("fit", "--testbed", str(parquet), "--x", "id", "--y", "ood", "--json"))
    assert b["slope"] == pytest.approx(a["slope"], rel=1e-12)
    assert (b["n_models"], b["n_skipped"]) == (3, 1)


def test_long_form_user_csv_works(tmp_path: Path) -> None:
    rows = [(m, t, s, v) for m, t, a, b in USER_ROWS for s, v in (("id", a), ("ood", b)) if v is not None]
    path = tmp_path / "long.csv"
    pd.DataFrame(rows, columns=["model", "model_type", "setting", "accuracy"]).to_csv(path, index=False)
    d = json.loads(ok("fit", "--testbed", str(path), "--x", "id", "--y", "ood", "--json"))
    assert (d["n_models"], d["n_skipped"]) == (3, 1)


# --------------------------------------------------------------------------- plot
@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG\r\n\x1a\n"), (".svg", b"<svg"), (".pdf", b"%PDF")])
def test_plot_writes_a_nonempty_figure(tmp_path: Path, suffix: str, magic: bytes) -> None:
    target = tmp_path / f"v2{suffix}"
    out = ok("plot", "--testbed", REF, "--x", X, "--y", Y, "-o", str(target))
    data = target.read_bytes()
    assert len(data) > 1000
    if suffix == ".svg":
        assert magic in data
    else:
        assert data.startswith(magic)
    assert str(target) in out


def test_plot_rejects_a_txt_output(tmp_path: Path) -> None:
    target = tmp_path / "v2.txt"
    result = invoke("plot", "--testbed", REF, "--x", X, "--y", Y, "-o", str(target))
    assert result.exit_code != 0
    assert ".png" in result.output
    assert not target.exists()


# --------------------------------------------------------------------------- errors (in-process)
def test_unknown_testbed_suggests_imagenet_reference() -> None:
    result = invoke("fit", "--testbed", "imagenet-refrence", "--x", X, "--y", Y)
    assert result.exit_code != 0
    assert isinstance(result.exception, ConfigError)
    assert "'imagenet-reference'" in str(result.exception)


def test_unknown_setting_suggests_the_closest_names() -> None:
    result = invoke("fit", "--testbed", REF, "--x", "vall", "--y", Y)
    assert isinstance(result.exception, ConfigError)
    assert "unknown setting 'vall'" in str(result.exception) and "'val'" in str(result.exception)


def test_unknown_setting_abbreviation_suggests_matched_frequency() -> None:
    result = invoke("fit", "--testbed", REF, "--x", X, "--y", "imagenetv2-matched-freq")
    assert isinstance(result.exception, ConfigError)
    assert "'imagenetv2-matched-frequency" in str(result.exception)


def test_a_setting_alias_is_read_as_its_reference_name() -> None:
    assert invoke("fit", "--testbed", REF, "--x", X, "--y", "imagenetv2-mf").exit_code == 0


def test_unknown_fit_on_model_suggests_the_closest_names() -> None:
    result = invoke("fit", "--testbed", REF, "--x", X, "--y", Y, "--fit-on", "resnet5")
    assert isinstance(result.exception, ConfigError)
    assert "'resnet5'" in str(result.exception) and "'resnet50'" in str(result.exception)


def test_unknown_pivot_model_is_a_config_error() -> None:
    result = invoke("fit", "--testbed", REF, "--x", X, "--y", Y, "--pivot", "resnet5")
    assert isinstance(result.exception, ConfigError)
    assert "'resnet50'" in str(result.exception)


def test_unknown_scale_is_a_config_error() -> None:
    result = invoke("fit", "--testbed", REF, "--x", X, "--y", Y, "--scale", "logistic")
    assert isinstance(result.exception, ConfigError)
    assert "logit" in str(result.exception)


def test_plot_highlight_unknown_model_is_an_error(tmp_path: Path) -> None:
    result = invoke("plot", "--testbed", REF, "--x", X, "--y", Y, "-o", str(tmp_path / "f.png"),
                    "--highlight", "resnet5")
    assert isinstance(result.exception, ConfigError)
    assert "'resnet50'" in str(result.exception)
    assert not (tmp_path / "f.png").exists()


def bad_rows(kind: str) -> list[tuple]:
    rows = list(USER_ROWS)
    if kind == "non-numeric":
        rows[2] = ("m3", "STANDARD", 70.0, "abc")
    elif kind == "out-of-range":
        rows[2] = ("m3", "STANDARD", 150, 56.0)
    elif kind == "two-standard":
        rows[2] = ("m3", "MORE_DATA", 70.0, 56.0)
    return rows


@pytest.mark.parametrize("kind, exc, needles", [
    ("non-numeric", DataError, ["'abc'", "'m3'", "'ood'"]),
    ("out-of-range", DataError, ["150", "'m3'", "'id'", "[0, 100]"]),
    ("two-standard", DataError, ["'ood'", "'id'", "at least 3", "gave 2", "1 skipped"]),
])
@pytest.mark.parametrize("command", ["fit", "effective-robustness", "plot"])
def test_bad_user_csv_is_a_clear_error(tmp_path: Path, kind: str, exc: type, needles: list[str], command: str) -> None:
    path = write_user_csv(tmp_path / f"{kind}.csv", bad_rows(kind))
    extra = ["-o", str(tmp_path / "f.png")] if command == "plot" else []
    result = invoke(command, "--testbed", str(path), "--x", "id", "--y", "ood", *extra)
    assert result.exit_code != 0
    assert isinstance(result.exception, exc)
    for needle in needles:
        assert needle in str(result.exception)
    assert not (tmp_path / "f.png").exists()


def test_negative_accuracy_is_rejected(tmp_path: Path) -> None:
    path = write_user_csv(tmp_path / "neg.csv", [("m1", "STANDARD", -1.0, 40.0)] + USER_ROWS[1:])
    result = invoke("fit", "--testbed", str(path), "--x", "id", "--y", "ood")
    assert isinstance(result.exception, DataError) and "'m1'" in str(result.exception)


def test_missing_table_file_is_a_data_error(tmp_path: Path) -> None:
    result = invoke("fit", "--testbed", str(tmp_path / "nope.csv"), "--x", "id", "--y", "ood")
    assert isinstance(result.exception, DataError) and "nope.csv" in str(result.exception)


# --------------------------------------------------------------------------- errors through main()
@pytest.mark.parametrize("kind, needles", [
    ("non-numeric", ["'abc'", "'m3'", "'ood'"]),
    ("out-of-range", ["150", "'m3'", "'id'"]),
    ("two-standard", ["'ood'", "'id'", "at least 3"]),
])
def test_main_prints_bad_table_errors_on_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str], kind: str,
                                                  needles: list[str]) -> None:
    path = write_user_csv(tmp_path / f"{kind}.csv", bad_rows(kind))
    code, out, err = run_main(monkeypatch, capsys, "fit", "--testbed", str(path), "--x", "id", "--y", "ood", "--json")
    assert_one_line_error(code, out, err, *needles)


def test_main_prints_unknown_model_errors_on_one_line(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(monkeypatch, capsys, "effective-robustness", "--testbed", REF, "--x", X, "--y", Y,
                              "--fit-on", "STANDARD,resnet5")
    assert_one_line_error(code, out, err, "'resnet5'", "'resnet50'")


def test_main_debug_reraises(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["shiftbench", "--debug", "fit", "--testbed", REF, "--x", "vall", "--y", Y])
    with pytest.raises(ConfigError, match="unknown setting 'vall'"):
        cli.main()
    # and the next invocation without --debug is back to one line
    code, out, err = run_main(monkeypatch, capsys, "fit", "--testbed", REF, "--x", "vall", "--y", Y)
    assert_one_line_error(code, out, err, "'vall'")


# --------------------------------------------------------------------------- the installed script
def test_script_fit_json_is_exactly_one_object(ref: shiftbench.Testbed) -> None:
    proc = run_script("fit", "--testbed", REF, "--x", X, "--y", Y, "--json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("\n") == 1 and proc.stdout.endswith("\n")
    d = json.loads(proc.stdout)
    assert isinstance(d, dict) and FIT_KEYS <= set(d)
    assert d["slope"] == pytest.approx(shiftbench.fit_trend(ref, X, Y).slope, rel=1e-12)


def test_script_effective_robustness_json_is_one_array(user_csv: Path) -> None:
    proc = run_script("effective-robustness", "--testbed", str(user_csv), "--x", "id", "--y", "ood",
                      "--top", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert isinstance(rows, list) and [r["model"] for r in rows] == ["m5", "m6"]
    assert all(ER_KEYS <= set(r) for r in rows)


def test_script_unknown_testbed_is_one_line_on_stderr() -> None:
    proc = run_script("fit", "--testbed", "imagenet-refrence", "--x", X, "--y", Y, "--json")
    assert_one_line_error(proc.returncode, proc.stdout, proc.stderr, "'imagenet-refrence'", "'imagenet-reference'")


def test_script_long_error_stays_on_one_line(tmp_path: Path) -> None:
    path = write_user_csv(tmp_path / "two.csv", bad_rows("two-standard"))
    proc = run_script("fit", "--testbed", str(path), "--x", "id", "--y", "ood")
    line = assert_one_line_error(proc.returncode, proc.stdout, proc.stderr, "'ood'", "'id'", "at least 3")
    assert len(line) > 120  # longer than a default terminal, still one line


def test_script_debug_shows_the_traceback() -> None:
    proc = run_script("--debug", "fit", "--testbed", REF, "--x", "vall", "--y", Y)
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr and "ConfigError" in proc.stderr and "'vall'" in proc.stderr


def test_errors_are_shiftbench_errors() -> None:
    assert issubclass(ConfigError, ShiftbenchError) and issubclass(DataError, ShiftbenchError)


def test_report_with_a_missing_store_fails_before_any_work(tmp_path: Path) -> None:
    result = invoke("report", "--testbed", "imagenet-reference", "--store", str(tmp_path / "nostore"),
                    "-o", str(tmp_path / "rep"))
    assert isinstance(result.exception, ConfigError) and "nostore: no results store there" in str(result.exception)
    assert "HTML report" not in result.output and not (tmp_path / "rep").exists()
