"""write_report / analyse_shift (shiftbench.report.shifts): the Markdown report, its figures and CSVs."""
from __future__ import annotations

import os

os.environ.setdefault("MPLBACKEND", "Agg")

from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import shiftbench  # noqa: E402
from shiftbench import testbed as tbmod  # noqa: E402
from shiftbench.report import NATURAL_SHIFTS, ShiftPair, analyse_shift, write_report  # noqa: E402
from shiftbench.report.tables import file_slug  # noqa: E402

#: The figure files of two shifts: each label's slug and the hash of the label.
V2_PNG, SKETCH_PNG = f"{file_slug('ImageNetV2')}.png", f"{file_slug('ImageNet-Sketch')}.png"

V2 = "imagenetv2-matched-frequency-format-val"
SKETCH = "imagenet-sketch"
PNG = b"\x89PNG\r\n\x1a\n"
FITS_COLUMNS = ["shift", "x", "y", "kind", "slope", "intercept", "r2", "n_models", "n_skipped",
                "recipe", "slope_below", "intercept_below", "n_excluded", "excluded"]


def hand_built(sketch_standard: int = 6, name: str = "tiny") -> tbmod.Testbed:
    """6 STANDARD models on a line, 3 MORE_DATA and 1 ROBUST_INTV above it, on val / ImageNetV2 /
    ImageNet-Sketch; only the first ``sketch_standard`` STANDARD models have a Sketch accuracy."""
    rng = np.random.default_rng(0)
    rows = []
    for i, x in enumerate([60.0, 64.0, 68.0, 72.0, 76.0, 80.0]):
        sketch = x - 40 + rng.normal(0, 0.5) if i < sketch_standard else np.nan
        rows.append((f"std{i}", "STANDARD", x, x - 12 + rng.normal(0, 0.4), sketch))
    rows += [
        ("more0", "MORE_DATA", 66.0, 61.0, 40.0),
        ("more1", "MORE_DATA", 70.0, 63.0, 36.0),
        ("more2", "MORE_DATA", 74.0, 68.5, 45.0),
        ("robust0", "ROBUST_INTV", 72.0, 61.0, 38.0),
    ]
    frame = pd.DataFrame(rows, columns=["model", "model_type", "val", V2, SKETCH])
    frame["val_dataset_size"] = 50_000
    frame[f"{V2}_dataset_size"] = 10_000
    frame[f"{SKETCH}_dataset_size"] = 50_889
    return tbmod.Testbed.from_frame(frame, name=name)


def section(text: str, label: str) -> str:
    """The Markdown under ``### {label}:`` up to the next heading."""
    start = text.index(f"### {label}:")
    rest = text[start + 4:]
    end = min((rest.index(h) for h in ("\n### ", "\n## ") if h in rest), default=len(rest))
    return text[start:start + 4 + end]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, tbmod.Testbed]:
    tb = hand_built()
    out = tmp_path_factory.mktemp("report")
    path = write_report([tb], out, n_resamples=200)
    return out, path.read_text(), tb


# --------------------------------------------------------------------------- the files
def test_write_report_writes_summary_png_and_csvs(report) -> None:
    out, text, tb = report
    assert (out / "summary.md").is_file()
    assert V2_PNG.startswith("imagenetv2-") and len(V2_PNG) == len("imagenetv2-") + 10 + len(".png")
    assert (out / "tiny" / V2_PNG).read_bytes().startswith(PNG)
    assert (out / "tiny" / SKETCH_PNG).read_bytes().startswith(PNG)
    assert (out / "tiny" / "fits.csv").is_file()
    assert (out / "tiny" / "effective_robustness.csv").is_file()
    assert text.startswith("# shiftbench report")
    assert "## tiny" in text and "10 models, 3 settings" in text


def test_summary_links_the_figures_relative_to_itself(report) -> None:
    out, text, _ = report
    assert f"![ImageNetV2](tiny/{V2_PNG})" in text
    assert (out / "tiny" / V2_PNG).exists()


def test_summary_has_a_fits_table(report) -> None:
    _, text, tb = report
    assert "| " + " | ".join(FITS_COLUMNS) + " |" in text
    fit = shiftbench.fit_trend(tb, "val", V2)
    row = next(line for line in text.splitlines() if line.startswith("| ImageNetV2 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:4] == ["ImageNetV2", "val", V2, "linear"]
    assert cells[4] == f"{fit.slope:.2f}" and cells[7] == "6"


def test_fits_csv_matches_fit_trend(report) -> None:
    out, _, tb = report
    fits = pd.read_csv(out / "tiny" / "fits.csv")
    assert list(fits.columns) == FITS_COLUMNS
    assert list(fits["shift"]) == ["ImageNetV2", "ImageNet-Sketch"]
    for shift, y in (("ImageNetV2", V2), ("ImageNet-Sketch", SKETCH)):
        row = fits.set_index("shift").loc[shift]
        fit = shiftbench.fit_trend(tb, "val", y)
        assert row["slope"] == pytest.approx(fit.slope, rel=1e-9)
        assert row["intercept"] == pytest.approx(fit.intercept, rel=1e-9)
        assert row["r2"] == pytest.approx(fit.r2, rel=1e-9)
        assert (row["n_models"], row["n_skipped"], row["kind"]) == (6, 0, "linear")


def test_effective_robustness_csv_matches_the_api(report) -> None:
    out, _, tb = report
    er = pd.read_csv(out / "tiny" / "effective_robustness.csv")
    assert {"model", "model_type", "effective_robustness", "er_low", "er_high", "in_fit", "shift"} <= set(er.columns)
    v2 = er[er["shift"] == "ImageNetV2"].set_index("model")
    assert set(v2.index) == set(tb.models)
    api = shiftbench.effective_robustness(tb, "val", V2, n_resamples=0)
    np.testing.assert_allclose(v2.loc[api.index, "effective_robustness"], api["effective_robustness"], rtol=1e-9)
    assert (v2["er_low"] <= v2["effective_robustness"] + 1e-9).all()
    assert (v2["effective_robustness"] <= v2["er_high"] + 1e-9).all()


def test_summary_lists_the_most_effectively_robust_models(report) -> None:
    _, text, tb = report
    part = section(text, "ImageNetV2")
    assert "Most effectively robust models (top 5):" in part
    assert "| model | model_type | x_acc | y_acc | predicted_y_acc | effective_robustness | er_low | er_high |" in part
    rows = [line for line in part.splitlines() if line.startswith("| ") and not line.startswith("| model ")]
    assert len(rows) == 5
    best = shiftbench.effective_robustness(tb, "val", V2, n_resamples=0)["effective_robustness"].idxmax()
    assert rows[0].startswith(f"| {best} |")
    assert best.startswith("more")
    assert "Fit: logit(y) = " in part and "recipe standard: 6 models (STANDARD); none left out" in part


def test_a_shift_the_testbed_lacks_is_not_analysed_with_the_reason(report) -> None:
    _, text, _ = report
    part = section(text, "ObjectNet")
    assert "Not analysed: testbed 'tiny' has no setting 'val-on-objectnet-classes'" in part
    for shift in NATURAL_SHIFTS:
        assert f"### {shift.label}:" in text
    assert text.count("Not analysed:") == len(NATURAL_SHIFTS) - 2


def test_the_correlation_section_compares_with_imagenetv2(report) -> None:
    _, text, _ = report
    part = text[text.index("### Does effective robustness on ImageNetV2 carry over?"):]
    row = next(line for line in part.splitlines() if line.startswith("| ImageNet-Sketch |"))
    assert row.split("|")[2].strip() == "4"  # the 4 non-standard models


def test_too_few_standard_models_gives_the_reason_and_the_rest_renders(tmp_path: Path) -> None:
    tb = hand_built(sketch_standard=2)
    text = write_report([tb], tmp_path, n_resamples=100).read_text()
    part = section(text, "ImageNet-Sketch")
    assert "Not analysed:" in part
    assert "at least 3" in part and "gave 2" in part and "4 skipped for empty cells" in part
    assert f"![ImageNetV2](tiny/{V2_PNG})" in section(text, "ImageNetV2")
    assert not (tmp_path / "tiny" / SKETCH_PNG).exists()
    fits = pd.read_csv(tmp_path / "tiny" / "fits.csv")
    assert list(fits["shift"]) == ["ImageNetV2"]
    er = pd.read_csv(tmp_path / "tiny" / "effective_robustness.csv")
    assert set(er["shift"]) == {"ImageNetV2"}


def test_on_step_is_called_once_per_shift(tmp_path: Path) -> None:
    steps: list[str] = []
    write_report([hand_built()], tmp_path, n_resamples=50, on_step=steps.append)
    assert steps == [f"tiny: {s.label}" for s in NATURAL_SHIFTS]


def test_two_testbeds_get_two_sections(tmp_path: Path) -> None:
    text = write_report([hand_built(name="one"), hand_built(name="two")], tmp_path, n_resamples=50).read_text()
    assert "## one" in text and "## two" in text
    assert (tmp_path / "one" / "fits.csv").exists() and (tmp_path / "two" / "fits.csv").exists()


def test_custom_shift_with_a_pivot_is_fitted_around_it(tmp_path: Path) -> None:
    extra = tbmod.Testbed.from_frame(pd.DataFrame({"model": ["std6", "std7"], "model_type": ["STANDARD"] * 2,
                                                   "val": [84.0, 88.0], V2: [72.2, 76.1]}), name="extra")
    tb = hand_built().merge(extra, name="tiny")
    shift = ShiftPair("My V2", "val", V2, pivot=("no-such-model", "std3"))
    text = write_report([tb], tmp_path, shifts=[shift], n_resamples=100).read_text()
    # the authors' recipe: two lines split at the pivot model's 72%, the pivot model in neither
    assert "two independent lines split at std3's 72.00%" in section(text, "My V2")
    assert "3 below, 4 above" in section(text, "My V2")
    assert (tmp_path / "tiny" / f"{file_slug('My V2')}.png").read_bytes().startswith(PNG)
    fits = pd.read_csv(tmp_path / "tiny" / "fits.csv")
    assert fits[["kind", "recipe", "n_models", "n_excluded"]].values.tolist() == [["two-line", "taori2020", 7, 1]]
    assert fits.at[0, "excluded"] == "1 the pivot model std3"
    assert analyse_shift(tb, shift, recipe="hinge", n_resamples=50).fit.kind == "piecewise"


def test_analyse_shift_records_failures_instead_of_raising() -> None:
    tb = hand_built(sketch_standard=2)
    bad = analyse_shift(tb, ShiftPair("Sketch", "val", SKETCH), n_resamples=50)
    assert bad.fit is None and bad.er is None and "at least 3" in bad.error
    good = analyse_shift(tb, ShiftPair("V2", "val", V2), n_resamples=50)
    assert good.error is None and good.fit.n_models == 6 and len(good.er) == len(tb)
    assert good.band is not None and good.band.n_resamples > 0


def test_summary_names_the_scale_it_was_fitted_in(tmp_path: Path) -> None:
    text = write_report([hand_built()], tmp_path, scale="probit", n_resamples=50).read_text()
    assert "probit(y) = " in section(text, "ImageNetV2")
    assert "logit" not in text


def test_fits_csv_has_a_header_when_nothing_was_analysed(tmp_path: Path) -> None:
    tb = hand_built().select(settings=["val"], name="val-only")
    text = write_report([tb], tmp_path, n_resamples=50).read_text()
    assert text.count("Not analysed:") == len(NATURAL_SHIFTS)
    fits = pd.read_csv(tmp_path / "val-only" / "fits.csv")
    assert list(fits.columns) == FITS_COLUMNS and len(fits) == 0


# --------------------------------------------------------------------------- the real reference
@pytest.mark.slow
def test_write_report_on_imagenet_reference(tmp_path: Path) -> None:
    tb = shiftbench.load_testbed("imagenet-reference")
    text = write_report([tb], tmp_path, n_resamples=200).read_text()
    assert "Not analysed" not in text
    fits = pd.read_csv(tmp_path / "imagenet-reference" / "fits.csv").set_index("shift")
    assert list(fits.index) == [s.label for s in NATURAL_SHIFTS]
    assert fits.at["ImageNetV2", "slope"] == pytest.approx(0.92, abs=0.01)  # Taori et al. 2020
    # the published testbed: the authors' recipe, their model selection and ImageNet-A's two lines
    assert fits.at["ImageNetV2", "n_models"] == 85 and fits.at["ImageNetV2", "n_excluded"] == 2
    assert (fits["recipe"] == "taori2020").all()
    assert fits.at["ImageNet-A", "kind"] == "two-line" and fits.at["ImageNet-A", "n_models"] == 33 + 51
    assert (fits.drop(index="ImageNet-A")["kind"] == "linear").all()
    for shift in NATURAL_SHIFTS:
        assert (tmp_path / "imagenet-reference" / f"{file_slug(shift.label)}.png").read_bytes().startswith(PNG)
    er = pd.read_csv(tmp_path / "imagenet-reference" / "effective_robustness.csv")
    assert set(er["shift"]) == {s.label for s in NATURAL_SHIFTS}
    assert "### Does effective robustness on ImageNetV2 carry over?" in text
