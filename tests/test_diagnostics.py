"""Linear-trend diagnostics: r² per shift and scaling, weak and better-scale flags."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import special

from shiftbench.analysis.diagnostics import flagged, r2_table, trend_diagnostics
from shiftbench.errors import ConfigError
from shiftbench.report.shifts import ShiftPair
from shiftbench import testbed as tbmod


def make_testbed(**settings: list[float]) -> tbmod.Testbed:
    n = len(next(iter(settings.values())))
    frame = pd.DataFrame({"model": [f"m{i}" for i in range(n)], "model_type": ["STANDARD"] * n, **settings})
    return tbmod.Testbed.from_frame(frame, name="hand")


def test_exactly_linear_data_has_r2_one_in_linear_scale_with_the_hand_worked_slope():
    tb = make_testbed(id=[60.0, 70.0, 80.0, 90.0], ood=[45.0, 56.0, 67.0, 78.0])   # y = 1.1 x - 0.21 (fractions)
    d = trend_diagnostics(tb, [("id", "ood")], scales=("linear",))
    row = d.iloc[0]
    assert row["r2"] == pytest.approx(1.0)
    assert (row["slope"], row["intercept"]) == (pytest.approx(1.1), pytest.approx(-0.21))
    assert (row["n_models"], row["weak"], row["better_scale"], row["shift"]) == (4, False, "", "ood")


def test_a_shift_made_weak_is_flagged_with_the_hand_worked_r2():
    # centred x = [-15, -5, 5, 15], y = [-10, 10, -10, 10] (percent): r = 200 / sqrt(500 * 400), r² = 0.2
    tb = make_testbed(id=[10.0, 20.0, 30.0, 40.0], ood=[10.0, 30.0, 10.0, 30.0], good=[5.0, 15.0, 25.0, 35.0])
    d = trend_diagnostics(tb, [("weak shift", "id", "ood"), ("id", "good")], scales=("linear",))
    weak = d.set_index("shift").loc["weak shift"]
    assert weak["r2"] == pytest.approx(0.2)
    assert bool(weak["weak"]) and not bool(d.set_index("shift").loc["good", "weak"])
    assert list(flagged(d, "linear")["shift"]) == ["weak shift"]
    assert bool(trend_diagnostics(tb, [("id", "ood")], scales=("linear",), weak_r2=0.1).loc[0, "weak"]) is False


def test_the_scaling_in_which_the_trend_is_exactly_linear_is_named_better():
    x = np.array([5.0, 20.0, 50.0, 80.0, 95.0, 99.0])
    y = 100 * special.expit(0.8 * special.logit(x / 100) - 1.0)                 # linear in logit coordinates
    tb = make_testbed(id=list(x), ood=list(y))
    d = trend_diagnostics(tb, [("id", "ood")]).set_index("scale")
    assert d.loc["logit", "r2"] == pytest.approx(1.0)
    assert d.loc["linear", "r2"] < 0.95
    assert d.loc["linear", "better_scale"] == "logit"
    assert d.loc["logit", "better_scale"] == ""
    assert list(r2_table(trend_diagnostics(tb, [("id", "ood")])).columns) == ["logit", "probit", "linear"]


def test_a_shift_pair_with_a_pivot_model_is_fitted_piecewise():
    tb = make_testbed(id=[50.0, 60.0, 70.0, 75.0, 80.0, 85.0], ood=[1.0, 1.5, 2.0, 10.0, 20.0, 30.0])
    d = trend_diagnostics(tb, [ShiftPair("filtered", "id", "ood", pivot=("nope", "m2"))], scales=("logit",))
    assert d.loc[0, "kind"] == "piecewise" and d.loc[0, "shift"] == "filtered"
    assert d.loc[0, "r2"] > trend_diagnostics(tb, [("id", "ood")], scales=("logit",)).loc[0, "r2"]


def test_a_pair_that_cannot_be_fitted_gets_its_reason_not_an_exception():
    tb = make_testbed(id=[60.0, 70.0, 80.0, 90.0], ood=[50.0, np.nan, np.nan, 70.0])
    d = trend_diagnostics(tb, [("id", "ood")], scales=("linear",))
    assert np.isnan(d.loc[0, "r2"]) and not bool(d.loc[0, "weak"])
    assert "needs at least 3 models" in d.loc[0, "error"]


def test_default_pairs_are_every_setting_against_val():
    tb = make_testbed(val=[60.0, 70.0, 80.0, 90.0], a=[50.0, 60.0, 72.0, 80.0], b=[40.0, 50.0, 61.0, 70.0])
    d = trend_diagnostics(tb)
    assert list(dict.fromkeys(d["shift"])) == ["a", "b"] and set(d["x"]) == {"val"}
    assert len(d) == 6
    assert list(dict.fromkeys(trend_diagnostics(tb, x="a")["shift"])) == ["val", "b"]


def test_bad_input_errors_name_the_fix():
    tb = make_testbed(id=[60.0, 70.0, 80.0, 90.0], ood=[50.0, 60.0, 72.0, 80.0])
    with pytest.raises(ConfigError, match="unknown setting 'odd'; did you mean 'ood'"):
        trend_diagnostics(tb, [("id", "odd")])
    with pytest.raises(ConfigError, match="no 'val' setting; pass x="):
        trend_diagnostics(tb)
    with pytest.raises(ConfigError, match="unknown scale 'log'"):
        trend_diagnostics(tb, [("id", "ood")], scales=("log",))
    with pytest.raises(ConfigError, match="weak_r2=1.5 must be in"):
        trend_diagnostics(tb, [("id", "ood")], weak_r2=1.5)
    with pytest.raises(ConfigError, match="give \\(x, y\\), \\(label, x, y\\) or a ShiftPair"):
        trend_diagnostics(tb, ["id"])


def test_cli_diagnostics_json_matches_the_api_and_the_table_flags_weak_shifts(tmp_path):
    import json

    from typer.testing import CliRunner

    from shiftbench.cli import app

    tb = make_testbed(val=[10.0, 20.0, 30.0, 40.0], ood=[10.0, 30.0, 10.0, 30.0], good=[5.0, 15.0, 25.0, 35.0])
    path = tb.save(tmp_path / "hand.csv")
    res = CliRunner().invoke(app, ["diagnostics", "-t", str(path), "--x", "val", "--scale", "linear", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert [(r["shift"], r["weak"]) for r in rows] == [("ood", True), ("good", False)]
    assert rows[0]["r2"] == pytest.approx(0.2)
    res = CliRunner().invoke(app, ["diagnostics", "-t", str(path), "--x", "val"])
    assert res.exit_code == 0 and "weak in linear" in res.stdout
    res = CliRunner().invoke(app, ["diagnostics", "-t", str(path)])
    assert res.exit_code != 0 and "none of the natural shifts" in res.output


def test_report_has_the_trend_diagnostics_section_with_its_table(tmp_path):
    from shiftbench.report import write_html_report
    from shiftbench.report.shifts import ShiftPair

    tb = make_testbed(val=[10.0, 20.0, 30.0, 40.0], ood=[10.0, 30.0, 10.0, 30.0])
    html = write_html_report([tb], tmp_path, shifts=[ShiftPair("Weak one", "val", "ood")], n_resamples=10,
                             figure_formats=()).read_text()
    assert "Trend diagnostics" in html and "Flagged in logit coordinates" in html
    table = pd.read_csv(tmp_path / "hand" / "trend_diagnostics.csv")
    assert list(table["scale"]) == ["logit", "probit", "linear"] and table["weak"].all()
