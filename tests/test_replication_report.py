"""The replication toolkit's stored study, figure and report section (Recht et al. 2019, Figure 3):
hand-worked bin tables, the bars the figure draws, the "Dataset replication" section appearing
only with stored replications, and the ``replicate --store`` round trip."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from report_testbed import XSS, tiny_testbed  # noqa: E402
from shiftbench import cli  # noqa: E402
from shiftbench.studies.replication import replicate  # noqa: E402
from shiftbench.errors import DataError, StoreError  # noqa: E402
from shiftbench.report import write_html_report  # noqa: E402
from shiftbench.report.replication_figures import (class_means_figure, plot_replication,  # noqa: E402
                                                   replication_figure, study_parts)
from shiftbench.store import Store  # noqa: E402

FREQS = [0.1, 0.3, 0.5, 0.7, 0.9, 1.0]


def hand_case(strategy: str = "top-images", **kw):
    """2 classes x 6 candidates (f = 0.1, 0.3, 0.5, 0.7, 0.9, 1.0); reference: class 0 has
    f = 0.1 and 0.9, class 1 has f = 0.5 and 1.0 (mean 0.625)."""
    cand = pd.DataFrame({"path": [f"c{c}/{i}.png" for c in (0, 1) for i in range(6)],
                         "label": [c for c in (0, 1) for _ in range(6)], "selection_frequency": FREQS * 2})
    ref = pd.DataFrame({"label": [0, 0, 1, 1], "selection_frequency": [0.1, 0.9, 0.5, 1.0]})
    return replicate(cand, ref, strategy, images_per_class=2, root="/data", **kw)


# --------------------------------------------------------------------------- the study table
def test_study_bins_count_and_share_both_sets_on_a_hand_worked_case():
    rep = hand_case()
    # top-2 per class: 1.0 and 0.9 twice -> 4 images in [0.8, 1]; the reference 0.1, 0.9, 0.5, 1.0 -> bins 0, 4, 2, 4
    study = rep.to_study()
    bins, classes = study_parts(study)
    assert bins["lower"].tolist() == [0.0, 0.2, 0.4, 0.6, 0.8] and bins["upper"].tolist() == [0.2, 0.4, 0.6, 0.8, 1]
    assert bins["count"].tolist() == [0, 0, 0, 0, 4] and bins["share"].tolist() == [0, 0, 0, 0, 1]
    assert bins["reference_count"].tolist() == [1, 0, 1, 0, 2]
    assert bins["reference_share"].tolist() == [0.25, 0, 0.25, 0, 0.5]
    assert classes["label"].tolist() == ["0", "1"]
    assert classes["mean_selection_frequency"].tolist() == pytest.approx([0.95, 0.95])
    assert classes["reference_mean_selection_frequency"].tolist() == pytest.approx([0.5, 0.75])
    meta = rep.study_meta()
    assert meta["strategy"] == "top-images" and meta["images_per_class"] == 2 and meta["seed"] == 0
    assert meta["mean_selection_frequency"] == pytest.approx(0.95)
    assert meta["reference_mean_selection_frequency"] == pytest.approx(0.625)
    assert meta["bins"] == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0] and meta["n_images"] == 4 and meta["n_classes"] == 2


def test_study_uses_the_matched_frequency_bins_given():
    # bins [0, 0.5), [0.5, 1]: reference class 0 -> (1, 1), class 1 -> (0, 2); k = 2 matches them exactly
    rep = hand_case("matched-frequency", bins=[0, 0.5, 1], seed=3)
    bins, _ = study_parts(rep.to_study())
    assert bins["upper"].tolist() == [0.5, 1.0]
    assert bins["count"].tolist() == [1, 3] and bins["reference_count"].tolist() == [1, 3]
    assert bins["share"].tolist() == [0.25, 0.75] == bins["reference_share"].tolist()
    assert rep.study_meta()["bins"] == [0.0, 0.5, 1.0] and rep.study_meta()["fallback"] == "error"


def test_study_without_a_reference_leaves_the_reference_columns_empty():
    cand = pd.DataFrame({"path": ["a.png", "b.png", "c.png"], "label": [0, 0, 0], "selection_frequency": [0.2, 0.75, 0.8]})
    rep = replicate(cand, strategy="threshold", images_per_class=2, threshold=0.7, root="/data")
    bins, classes = study_parts(rep.to_study())
    assert bins["count"].tolist() == [0, 0, 0, 1, 1] and bins["reference_share"].isna().all()
    assert classes["reference_mean_selection_frequency"].isna().all()
    assert rep.study_meta()["threshold"] == 0.7 and rep.study_meta()["reference_mean_selection_frequency"] is None


def test_study_parts_rejects_a_table_that_is_not_a_replication_study():
    with pytest.raises(DataError, match="lacks the columns of Replication.to_study"):
        study_parts(pd.DataFrame({"step": [0]}))


# --------------------------------------------------------------------------- figures
def test_static_figure_draws_reference_then_replicated_bars_at_their_shares():
    rep = hand_case()
    fig = plot_replication(rep.to_study(), rep.study_meta())
    ax, scatter = fig.axes
    bars = ax.patches
    assert len(bars) == 10
    assert [b.get_height() for b in bars[:5]] == pytest.approx([0.25, 0, 0.25, 0, 0.5])   # reference
    assert [b.get_height() for b in bars[5:]] == pytest.approx([0, 0, 0, 0, 1])           # replicated
    assert bars[0].get_x() == pytest.approx(0.01) and bars[5].get_x() == pytest.approx(0.1)  # side by side in bin 0
    assert bars[4].get_x() + bars[4].get_width() <= bars[9].get_x() + 1e-9
    means = sorted(line.get_xdata()[0] for line in ax.lines)
    assert means == pytest.approx([0.625, 0.95])
    assert "top-images" in ax.get_title() and "k=2" in ax.get_title()
    np.testing.assert_allclose(scatter.collections[0].get_offsets(), [[0.5, 0.95], [0.75, 0.95]])
    plt.close(fig)


def test_static_figure_without_reference_has_one_panel_and_one_mean():
    cand = pd.DataFrame({"path": ["a.png", "b.png"], "label": [0, 0], "selection_frequency": [0.3, 0.9]})
    rep = replicate(cand, strategy="top-images", images_per_class=2, root="/data")
    fig = plot_replication(rep.to_study(), rep.study_meta())
    assert len(fig.axes) == 1 and len(fig.axes[0].patches) == 5
    assert [b.get_height() for b in fig.axes[0].patches] == pytest.approx([0, 0.5, 0, 0, 0.5])
    assert [line.get_xdata()[0] for line in fig.axes[0].lines] == pytest.approx([0.6])
    plt.close(fig)


def test_plotly_figures_carry_the_shares_and_class_means():
    rep = hand_case()
    fig = replication_figure(rep.to_study(), rep.study_meta())
    assert [t.name for t in fig.data] == ["reference", "replicated", "reference mean 0.625", "replicated mean 0.950"]
    assert list(fig.data[0].y) == [0.25, 0, 0.25, 0, 0.5] and list(fig.data[1].y) == [0, 0, 0, 0, 1]
    assert list(fig.data[2].x) == [0.625, 0.625] and list(fig.data[3].x) == [0.95, 0.95]
    assert "top-images" in fig.layout.title.text
    scatter = class_means_figure(rep.to_study(), title="t")
    assert list(scatter.data[1].x) == [0.5, 0.75] and list(scatter.data[1].y) == [0.95, 0.95]


# --------------------------------------------------------------------------- report section
def section(doc: str, key: str) -> str | None:
    m = re.search(rf'<section class="sb-section" id="{key}">(.*?)</section>', doc, re.S)
    return m.group(1) if m else None


def report(tmp: Path, store: Path | None) -> str:
    path = write_html_report([tiny_testbed()], tmp, store=store, shifts=[], figure_formats=(".png",))
    return path.read_text(encoding="utf-8")


def test_section_shows_each_stored_replication_with_its_means(tmp_path):
    store = Store(tmp_path / "store")
    top = hand_case()
    store.write_study("replication", "top", top.to_study(), top.study_meta())
    mf = hand_case("matched-frequency", bins=[0, 0.5, 1], seed=3)
    store.write_study("replication", XSS, mf.to_study(), mf.study_meta())
    doc = report(tmp_path / "rep", tmp_path / "store")
    body = section(doc, "replication")
    assert body is not None and "Dataset replication" in doc
    assert "top-images: 4 images, 2 classes (k=2, seed=0)" in body
    assert "mean selection frequency 0.950 (reference 0.625, +0.325)" in body
    assert XSS not in doc and "&lt;" in body                     # the hostile study name stays text
    assert body.count('class="sb-plot"') == 4                     # histogram + per-class scatter, twice
    assert "<td>[0.8, 1]</td>" in body and "<td>[0, 0.5)</td>" in body
    assert (tmp_path / "rep" / "replication" / "top.png").read_bytes()[:4] == b"\x89PNG"
    table = pd.read_csv(tmp_path / "rep" / "replication" / "top.csv")
    assert table.loc[table["part"] == "bin", "count"].tolist() == [0, 0, 0, 0, 4]


def test_section_is_left_out_without_replications(tmp_path):
    other = tmp_path / "store"
    Store(other).write_study("trajectory", "x", pd.DataFrame({"step": [0], "accuracy": [1.0]}))
    for store in (None, other):
        doc = report(tmp_path / f"rep-{store is None}", store)
        assert section(doc, "replication") is None and "Dataset replication" not in doc


# --------------------------------------------------------------------------- CLI
@pytest.fixture
def files(tmp_path: Path) -> Path:
    cand = pd.DataFrame({"path": [f"c{c}/{i}.png" for c in (0, 1) for i in range(6)],
                         "label": [c for c in (0, 1) for _ in range(6)], "selection_frequency": FREQS * 2})
    cand.to_csv(tmp_path / "candidates.csv", index=False)
    pd.DataFrame({"label": [0, 0, 1, 1], "selection_frequency": [0.1, 0.9, 0.5, 1.0]}).to_csv(
        tmp_path / "reference.csv", index=False)
    return tmp_path


def test_cli_store_round_trip_writes_study_meta_and_figure(files):
    args = ["replicate", "--candidates", str(files / "candidates.csv"), "--reference", str(files / "reference.csv"),
            "--strategy", "top-images", "-k", "2", "-o", str(files / "v2.csv"), "--store", str(files / "store")]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, (result.output, result.exception)
    assert f"figure: {files / 'v2.png'}" in result.stdout and "study: replication/v2 in" in result.stdout
    assert (files / "v2.png").read_bytes()[:4] == b"\x89PNG"
    store = Store(files / "store")
    assert store.study_names("replication") == ["v2"]
    bins, _ = study_parts(store.read_study("replication", "v2"))
    assert bins["count"].tolist() == [0, 0, 0, 0, 4] and bins["reference_count"].tolist() == [1, 0, 1, 0, 2]
    meta = store.study_meta("replication", "v2")
    assert meta["strategy"] == "top-images" and meta["images_per_class"] == 2
    assert meta["mean_selection_frequency"] == pytest.approx(0.95)
    assert meta["reference_mean_selection_frequency"] == pytest.approx(0.625)

    result = CliRunner().invoke(cli.app, [*args[:-4], "-o", str(files / "other.csv"), "--store", str(files / "store"),
                                          "--name", "named", "--no-figure", "--json"])
    assert result.exit_code == 0, (result.output, result.exception)
    got = json.loads(result.stdout)
    assert got["study"] == "named" and got["figure"] is None and not (files / "other.png").exists()
    assert store.study_names("replication") == ["named", "v2"]


def test_cli_rejects_a_bad_study_name_before_writing(files):
    result = CliRunner().invoke(cli.app, ["replicate", "--candidates", str(files / "candidates.csv"), "--strategy",
                                          "top-images", "-k", "2", "-o", str(files / "m.csv"),
                                          "--store", str(files / "store"), "--name", "a/b"])
    assert isinstance(result.exception, StoreError) and "study name 'a/b'" in str(result.exception)
    assert not (files / "m.csv").exists() and not (files / "m.png").exists()
