"""Label-free estimates over many shifts: the per-family error table (``estimation_errors``) and
the report section that draws the agreement lines, the estimates against the truth and the table."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from shiftbench.analysis.agreement import (
    LabelFreeEstimates,
    LineTest,
    corruption_family,
    estimation_errors,
    setting_errors,
)
from shiftbench.errors import DataError

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
sys.path.insert(0, str(Path(__file__).parent))


# ---------------------------------------------------------------------------- the summary, by hand
def _estimates(truth, errors: dict[str, list[float]], p_value: float | None) -> LabelFreeEstimates:
    """Three models with the given true OOD accuracy and per-method errors (estimate − truth)."""
    table = pd.DataFrame({"model": ["a", "b", "c"], "accuracy_id": [90.0, 80.0, 70.0], "accuracy_ood": truth})
    for m, err in errors.items():
        table[m] = table["accuracy_ood"] + np.asarray(err)
        table[f"error_{m}"] = np.asarray(err, dtype=float)
    test = None if p_value is None else LineTest(0.0, 0.0, 1.0, p_value, 2, 10)
    mae = {m: float(np.mean(np.abs(e))) for m, e in errors.items()}
    return LabelFreeEstimates(table, pd.DataFrame(), None, None, test, tuple(errors), mae)


def test_estimation_errors_by_hand():
    shifts = {
        "uci": _estimates([60, 50, 40], {"aline-d": [1, -2, 3], "atc": [10, 10, -10]}, p_value=0.4),
        "x+gaussian_noise.3": _estimates([70, 60, 50], {"aline-d": [-4, 4, 4], "atc": [0, 3, -3]}, p_value=0.001),
        "x+impulse_noise.3": _estimates([70, 60, 50], {"aline-d": [0, 0, 3], "atc": [6, 6, 6]}, p_value=0.5),
        "x+fog.3": _estimates([30, 20, 10], {"aline-d": [5, 5, 5], "atc": [1, 1, 1]}, p_value=None),
    }
    table = estimation_errors(shifts, {"uci": "UCI digits"}).set_index("family")
    assert list(table.index) == ["UCI digits", "noise", "weather", "all"]
    assert table.loc["UCI digits", "mae_aline-d"] == pytest.approx(2.0)
    assert table.loc["UCI digits", "mae_atc"] == pytest.approx(10.0)
    assert np.isnan(table.loc["UCI digits", "mae_doc"])                      # not computed: NaN, not 0
    # noise: pooled over its two shifts' six (model, shift) errors
    assert table.loc["noise", "n_shifts"] == 2 and table.loc["noise", "n_estimates"] == 6
    assert table.loc["noise", "mae_aline-d"] == pytest.approx((4 + 4 + 4 + 0 + 0 + 3) / 6)
    assert table.loc["noise", "mae_atc"] == pytest.approx((0 + 3 + 3 + 6 + 6 + 6) / 6)
    assert table.loc["noise", "on_line_share"] == pytest.approx(50.0)
    assert table.loc["noise", "mae_aline-d_on_line"] == pytest.approx(1.0)   # impulse noise
    assert table.loc["noise", "mae_aline-d_off_line"] == pytest.approx(4.0)  # gaussian noise
    # weather: no same-line test, so no share and neither group
    assert table.loc["weather", "n_tested"] == 0 and np.isnan(table.loc["weather", "on_line_share"])
    assert np.isnan(table.loc["weather", "mae_aline-d_on_line"]) and np.isnan(table.loc["weather", "mae_aline-d_off_line"])
    assert table.loc["all", "n_shifts"] == 4 and table.loc["all", "n_tested"] == 3
    assert table.loc["all", "on_line_share"] == pytest.approx(200 / 3)
    assert table.loc["all", "mae_aline-d"] == pytest.approx(np.mean([1, 2, 3, 4, 4, 4, 0, 0, 3, 5, 5, 5]))
    assert table.loc["all", "mae_aline-d_on_line"] == pytest.approx(np.mean([1, 2, 3, 0, 0, 3]))
    # the label-free diagnostic needs an agreement line: none here, so no split
    assert np.isnan(table.loc["all", "strong_agreement_share"]) and np.isnan(table.loc["all", "mae_aline-d_strong"])
    per = setting_errors(shifts).set_index("shift")
    assert per.loc["uci", "family"] == "natural" and per.loc["x+fog.3", "family"] == "weather"
    assert per.loc["x+gaussian_noise.3", "on_line"] is False and per.loc["x+fog.3", "on_line"] is None
    with pytest.raises(DataError, match="no shifts"):
        estimation_errors({})


def test_corruption_families_follow_imagenet_c():
    assert corruption_family("mnist-test+gaussian_noise.3") == "noise"
    assert corruption_family("imagenet-c.motion_blur.2_on-disk") == "blur"
    assert corruption_family("val+snow.5") == "weather"
    assert corruption_family("folder:/a/b+jpeg_compression.1") == "digital"
    assert corruption_family("uci-digits") is None and corruption_family("val+noise2net") is None


# ---------------------------------------------------------------------------- the section on a store
MODELS = [f"python:agreement_models:red_{c}" for c in "abcde"]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> tuple[Path, str]:
    from test_multimodel import textured_folder

    from shiftbench.engine import evaluate

    root = tmp_path_factory.mktemp("label-free")
    data = textured_folder(root / "imgs", n=42)
    ind = f"folder:{data}"
    settings = [ind, f"{ind}+gaussian_noise.3", f"{ind}+defocus_blur.3", f"{ind}+gaussian_noise.5"]
    evaluate(MODELS, settings, store=root / "store", batch_size=16, workers=0, progress=False)
    return root / "store", ind


def _ctx(out: Path, store_root: Path | None):
    from shiftbench.report.figures import FigureWriter
    from shiftbench.report.sections import ReportContext
    from shiftbench.store import Store

    st = Store(store_root) if store_root is not None else None
    return ReportContext(out_dir=out, testbeds=[], store=st, store_results=st.results() if st else None,
                         figures=FigureWriter(0), figure_formats=(".png",))


def test_section_draws_lines_estimates_and_table(store, tmp_path):
    from shiftbench.correctness import prediction_matrix
    from shiftbench.report.section_label_free import (
        LabelFreeSection,
        label_free_shifts,
        read_setting,
        result_keys,
    )
    from shiftbench.store import Store

    root, ind = store
    ctx = _ctx(tmp_path, root)
    section = LabelFreeSection()
    assert section.available(ctx, None)
    shifts = label_free_shifts(ctx.store_results)
    assert [s.ood_setting for s in shifts] == [f"{ind}+gaussian_noise.3", f"{ind}+defocus_blur.3"]  # severity 3 only
    assert [s.family for s in shifts] == ["noise", "blur"]
    html = section.render(ctx, None)[0].html
    assert html.count('class="sb-plot"') == 2                       # the lines (dropdown) and the scatter
    assert "Agreement and accuracy lines" in html and "Estimates against the truth" in html
    assert "ALine-D" in html and "<table" in html and ">noise<" in html and ">blur<" in html and ">all<" in html
    out = tmp_path / "label-free"
    assert (out / "lines.png").stat().st_size > 10_000 and (out / "estimates.png").stat().st_size > 10_000
    table = pd.read_csv(out / "mae.csv")
    assert list(table["family"]) == ["noise", "blur", "all"]
    assert table["mae_aline-d"].notna().all() and table["mae_atc"].notna().all()
    assert table["strong_agreement_share"].between(0, 100).all()
    # the one-scan reader gives what prediction_matrix gives
    st = Store(root)
    models = sorted(st.results()["model"].unique())
    fast = read_setting(st, result_keys(st.results()), ind, models)
    slow = prediction_matrix(st, ind, models)
    assert fast.example_ids == slow.example_ids
    for col in ("pred", "correct", "confidence", "entropy"):
        np.testing.assert_array_equal(getattr(fast, col), getattr(slow, col))


def test_the_static_lines_have_one_legend_off_the_data(store):
    """Two shifts on a 1 x 2 grid: the legend goes under the axis title, outside every panel;
    four on a 2 x 3 grid: into the first empty cell."""
    import matplotlib.pyplot as plt

    from shiftbench.report.section_label_free import label_free_shifts, plot_lines, run_estimates
    from shiftbench.store import Store

    root, _ = store
    st = Store(root)
    run = run_estimates(st, label_free_shifts(st.results()), st.results())
    fig = plot_lines(run, run.shifts)                   # 2 panels, 1 x 2: nowhere empty
    assert [ax.get_legend() for ax in fig.axes] == [None, None] and len(fig.legends) == 1
    fig.canvas.draw()
    legend = fig.legends[0].get_window_extent()
    assert all(legend.y1 <= ax.get_window_extent().y0 for ax in fig.axes)       # under every panel
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "agreement (pairs)", "accuracy (models)", "agreement line", "accuracy line", "y = x"]
    plt.close(fig)
    fig = plot_lines(run, run.shifts * 2)               # 4 panels on 2 x 3: the fifth cell holds it
    holder = [ax for ax in fig.axes if ax.get_legend() is not None]
    assert len(holder) == 1 and not holder[0].axison and not fig.legends
    plt.close(fig)


def test_section_is_left_out_without_predictions(store, tmp_path):
    from shiftbench.report.section_label_free import LabelFreeSection
    from shiftbench.store import Store

    section = LabelFreeSection()
    assert not section.available(_ctx(tmp_path, None), None)                    # no store
    empty = Store(tmp_path / "empty")
    empty.write_study("resolution", "m", pd.DataFrame({"resolution": [64], "accuracy": [1.0]}))
    assert not section.available(_ctx(tmp_path, empty.root), None)              # a store with no predictions
    no_parts = Store(tmp_path / "no-parts")                                    # results, no per-example rows
    for i, setting in enumerate(["val", "val+gaussian_noise.3"] * 3):
        no_parts.finish(f"k{i}", {"model": f"m{i // 2}", "setting": setting, "accuracy": 50.0, "n_examples": 10,
                                  "convention": "full"})
    assert not section.available(_ctx(tmp_path, no_parts.root), None)
    from shiftbench.engine import evaluate

    _, ind = store
    only_id = tmp_path / "only-id"
    evaluate(MODELS[:3], [ind], store=only_id, batch_size=16, workers=0, progress=False)
    assert not section.available(_ctx(tmp_path, only_id), None)                 # no shifted setting
