"""write_html_report / write_report with highlight=...: a "Your models" section first, with each
model's effective robustness, interval and rank, and every shift's scatter marking the models."""
from __future__ import annotations

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import re  # noqa: E402
from pathlib import Path  # noqa: E402

import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from report_testbed import A_X, A_Y, V2, tiny_testbed  # noqa: E402
from shiftbench import testbed as tbmod  # noqa: E402
from shiftbench.analysis.placement import place_models  # noqa: E402
from shiftbench.errors import ConfigError  # noqa: E402
from shiftbench.report import write_html_report, write_report  # noqa: E402
from shiftbench.report.tables import file_slug, signed_interval  # noqa: E402

MINE = ["my-net", "my-other"]


def merged() -> tbmod.Testbed:
    """The report fixture's testbed merged with a table of two models of 'mine' (no type given)."""
    mine = tbmod.Testbed.from_frame(pd.DataFrame({
        "model": MINE, "val": [73.0, 65.0], V2: [64.0, 52.0], A_X: [83.0, 75.0], A_Y: [20.0, 2.0]}), name="mine")
    return tiny_testbed().merge(mine, name="tiny")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[tbmod.Testbed, str]:
    tb = merged()
    path = write_html_report([tb], tmp_path_factory.mktemp("yours") / "out", n_resamples=50, figure_formats=(),
                             highlight=MINE)
    return tb, path.read_text(encoding="utf-8")


def section(document: str, anchor: str) -> str:
    start = document.index(f'id="{anchor}"')
    end = document.find('<section class="sb-', start + 1)
    return document[start:end if end > 0 else len(document)]


def test_your_models_section_comes_first_with_ranks_and_intervals(report):
    tb, doc = report
    assert 'id="your-models"' in doc
    first_shift = doc.index('id="tb-tiny-imagenetv2"')
    assert doc.index('id="your-models"') < doc.index('class="sb-testbed"') < first_shift
    # first in the table of contents too
    toc = re.search(r'<nav class="sb-toc".*?</nav>', doc, re.S).group(0)
    assert re.findall(r'href="#([^"]+)"', toc)[0] == "your-models"
    body = section(doc, "your-models")
    placed = place_models(tb, MINE, scale="logit", n_resamples=50, seed=0)
    assert set(placed["shift"]) == {"ImageNetV2", "ImageNet-A"}             # ImageNet-Sketch has no trend
    for r in placed.itertuples():
        assert f"{r.rank} of {r.n_ranked}" in body
        assert signed_interval(r.effective_robustness, r.er_low, r.er_high) in body
    assert "of 17" in body                                                    # ranked among all 17 models
    # the note naming the models the trend was fitted on
    assert "fitted on the STANDARD models of tiny: 8 models" in body and "not part of the fit" in body


def test_every_shift_scatter_marks_your_models(report):
    _, doc = report
    for anchor in ("tb-tiny-imagenetv2", "tb-tiny-imagenet-a"):
        body = section(doc, anchor)
        assert '"name":"your models"' in body
        assert all(f'"text":"{m}"' in body for m in MINE)


def test_without_highlight_there_is_no_your_models_section(tmp_path: Path):
    doc = write_html_report([merged()], tmp_path / "out", n_resamples=20, figure_formats=()).read_text()
    assert 'id="your-models"' not in doc and '"name":"your models"' not in doc


def test_an_unknown_highlighted_model_is_an_error_with_a_suggestion(tmp_path: Path):
    with pytest.raises(ConfigError, match="my-net"):
        write_html_report([merged()], tmp_path / "out", n_resamples=20, highlight=["my-nett"])


def test_markdown_report_puts_your_models_first(tmp_path: Path):
    tb = merged()
    path = write_report([tb], tmp_path / "md", n_resamples=20, highlight=MINE)
    text = path.read_text()
    assert text.index("## Your models") < text.index("## tiny")
    placed = place_models(tb, MINE, n_resamples=20)
    for r in placed.itertuples():
        assert f"| {r.rank} of {r.n_ranked} |" in text
    assert (tmp_path / "md" / "tiny" / "your_models.csv").exists()
    assert (tmp_path / "md" / "tiny" / f"{file_slug('ImageNetV2')}.png").stat().st_size > 10_000
