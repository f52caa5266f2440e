"""The report's store sections (trajectories, resolution sweeps, compositing, attribute shifts,
multi-label shifts, calibration) in headless Chromium: every plot renders, no console error, no
network, a model, study or split named like an HTML payload shows as text without running
anything, and at 1,400 px the report-wide sections are laid out short (figures beside their
tables, long tables folded, legends beside the plots)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from report_testbed import V2, XSS, calibration_store, tiny_testbed
from shiftbench.report import write_html_report
from shiftbench.store import Store
from test_report_browser import Page, browser  # noqa: F401 - the module-scoped Chromium fixture
from test_sweep_sections import sweep_rows

pytestmark = pytest.mark.timeout(180)
SECTIONS = ("compositing", "resolution", "attributes", "multilabel", "tb-tiny-fine-tuning")
#: the report-wide sections of this page and the most each may be tall at 1,400 px
REPORT_WIDE = ("calibration", "compositing", "resolution", "attributes", "multilabel")
MAX_SECTION_HEIGHT = 950


def _studies(root: Path) -> Path:
    store = Store(calibration_store(root))
    store.write_study("trajectory", XSS, pd.DataFrame({
        "step": [0, 0, 5, 5, 50, 50], "epoch": [0.0, 0.0, 0.1, 0.1, 1.0, 1.0],
        "setting": ["val", V2] * 3, "accuracy": [12.0, 9.0, 60.0, 55.0, 80.0, 68.0],
        "n_examples": [1000] * 6, "model": [f"{XSS}@step{s}" for s in (0, 0, 5, 5, 50, 50)]}),
        {"settings": ["val", V2], "id_setting": "val"})
    store.write_study("resolution", "m__val", sweep_rows(XSS, [20.0, 40.0, 55.5]))
    rows = [("size", 0.1, "0.1", np.nan, np.nan, 25.0, 8, np.nan),
            ("rotation", 0.0, "0", np.nan, np.nan, 62.5, 8, np.nan),
            ("location", np.nan, "0.25,0.25", 0.25, 0.25, 50.0, 4, 0.5),
            ("location", np.nan, "0.75,0.25", 0.75, 0.25, 100.0, 4, 1.0)]
    frame = pd.DataFrame(rows, columns=["factor", "value", "label", "x", "y", "accuracy", "n", "normalised"])
    frame.insert(0, "setting", "composite:spec.json")
    frame.insert(0, "dataset", XSS)
    frame.insert(0, "spec", "spec.json")
    frame.insert(0, "model", XSS)
    store.write_study("compositing", "x__mini", frame, {"accuracy": 50.0, "n_examples": 16})
    store.write_study("attributes", "digits", pd.DataFrame({
        "split": ["id-test", XSS], "kind": ["id-test", "ood"], "n": [100, 50], "accuracy": [98.0, 80.0],
        "ci_low": [93.0, 66.0], "ci_high": [99.8, 90.0]}))
    iid = [40.0, 50.0, 60.0, 70.0]
    store.write_study("multilabel", "mini", pd.DataFrame({
        "model": [m for m in ("a", "b", "c", XSS) for _ in range(3)],
        "split": ["id-test", "zoom=large", XSS] * 4,
        "map": [v for x in iid for v in (x, x - 10 + x / 20, x - 5)]}))
    return store.root


@pytest.fixture(scope="module")
def loaded(browser, tmp_path_factory):  # noqa: F811 - browser is the imported fixture
    root = tmp_path_factory.mktemp("studies")
    index = write_html_report([tiny_testbed()], root / "report", store=_studies(root / "store"), n_resamples=50,
                              figure_formats=())
    page = Page(browser, index.resolve().as_uri())
    yield page, index.read_text()
    page.page.close()


def test_every_study_section_is_on_the_page_and_its_plots_render(loaded):
    page, doc = loaded
    for anchor in SECTIONS:
        assert f'id="{anchor}"' in doc, anchor
    counts = page.page.evaluate("""anchors => anchors.map(a => {
        const divs = [...document.getElementById(a).querySelectorAll('.plotly-graph-div')];
        return [divs.length, divs.filter(d => d.querySelector('svg.main-svg .cartesianlayer')).length]; })""",
                                list(SECTIONS))
    assert all(n > 0 and drawn == n for n, drawn in counts), dict(zip(SECTIONS, counts))
    assert page.errors == [] and [m for m in page.console if m[0] == "error"] == []
    assert all(u.startswith(("file://", "data:", "blob:", "about:")) for u in page.requests)


def test_hostile_names_in_studies_are_text_and_run_nothing(loaded):
    page, _ = loaded
    assert page.dialogs == []
    assert page.page.evaluate("() => document.querySelectorAll('img[src=x]').length") == 0
    for anchor in SECTIONS:
        text = page.page.evaluate("a => document.getElementById(a).textContent", anchor)
        assert XSS in text, anchor


def test_study_sections_at_1400px_screenshot_and_nothing_overflows_or_is_covered(loaded, tmp_path):
    from test_report_layout import layout_problems

    page, _ = loaded
    page.page.set_viewport_size({"width": 1400, "height": 900})
    page.page.wait_for_timeout(300)
    for anchor in SECTIONS:
        shot = tmp_path / f"{anchor}.png"
        page.page.locator(f"[id='{anchor}']").screenshot(path=str(shot))
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 5_000, anchor
    assert layout_problems(page.page) == {"toolbar over title": [], "labels outside": [], "wide sections": []}


def test_trajectory_is_drawn_in_its_own_colour_with_the_epoch_axis_in_words(loaded):
    page, _ = loaded
    info = page.page.evaluate("""() => {
        const divs = [...document.getElementById('tb-tiny-fine-tuning').querySelectorAll('.js-plotly-plot')];
        const scatter = divs[0], er = divs[1];
        const trend = scatter.data.find(t => (t.name || '').includes('fit'));
        const traj = scatter.data.find(t => (t.name || '').startsWith('trajectory:'));
        return {trend: trend.line.color, traj: traj.line.color, axis: er.layout.xaxis.title.text,
                ticks: er.layout.xaxis.ticktext}; }""")
    assert info["traj"] != info["trend"] and info["traj"].lower() not in ("black", "#000", "#000000", "#111111")
    assert info["axis"] == "fine-tuning epoch (log scale)"
    assert info["ticks"][0] == "0" and "1" in info["ticks"]


def test_compositing_curves_sit_side_by_side_at_1400px(loaded):
    """The size and rotation curves share a row (half the page each), so the section stays short."""
    page, _ = loaded
    boxes = page.page.evaluate("""() => [...document.querySelectorAll('#compositing .sb-pair')[0]
        .querySelectorAll(':scope > div')].map(d => { const r = d.getBoundingClientRect();
        return [Math.round(r.top), Math.round(r.left), Math.round(r.width)]; })""")
    assert len(boxes) == 2 and boxes[0][0] == boxes[1][0] and boxes[1][1] > boxes[0][1] + boxes[0][2] - 1


def _boxes(page, selector: str) -> list[list[int]]:
    """[top, left, width, height] of the elements matching ``selector``."""
    return page.page.evaluate("""sel => [...document.querySelectorAll(sel)].map(e => {
        const r = e.getBoundingClientRect();
        return [Math.round(r.top), Math.round(r.left), Math.round(r.width), Math.round(r.height)]; })""", selector)


def _side_by_side(boxes: list[list[int]]) -> bool:
    """Two boxes on one row: same top, the second starting right of the first's right edge."""
    return len(boxes) == 2 and abs(boxes[0][0] - boxes[1][0]) <= 1 and boxes[1][1] >= boxes[0][1] + boxes[0][2] - 1


def test_report_wide_sections_stay_short_at_1400px(loaded):
    page, _ = loaded
    page.page.set_viewport_size({"width": 1400, "height": 900})
    page.page.wait_for_timeout(300)
    heights = {a: page.page.evaluate("a => document.getElementById(a).getBoundingClientRect().height", a)
               for a in REPORT_WIDE}
    assert all(0 < h <= MAX_SECTION_HEIGHT for h in heights.values()), heights


def test_calibration_table_is_folded_under_a_summary_with_its_size(loaded):
    """The scatter is the reading; the table of every (model, setting) folds, its summary counting the
    rows, and opened it is sortable and scrolls inside a box about ten rows tall."""
    page, _ = loaded
    page.page.set_viewport_size({"width": 1400, "height": 900})
    section = page.page.locator("#calibration")
    details = section.locator("details:has(.sb-table)")
    assert details.count() == 1 and details.get_attribute("open") is None
    assert "Every result: 5 rows" in details.locator("summary").text_content()
    assert section.locator(".js-plotly-plot").count() == 1 and not section.locator(".sb-table").is_visible()
    before = _boxes(page, "#calibration")[0][3]
    details.locator("summary").click()
    try:
        assert section.locator(".sb-table tbody tr").first.is_visible()
        assert section.locator(".sb-table tbody tr").count() == 5
        scroll = page.page.evaluate("""() => getComputedStyle(
            document.querySelector('#calibration .sb-table-scroll')).maxHeight""")
        assert scroll.endswith("px") and float(scroll[:-2]) <= 400
        assert _boxes(page, "#calibration")[0][3] > before
    finally:
        details.locator("summary").click()


def test_resolution_curves_sit_beside_the_best_and_native_table(loaded):
    page, _ = loaded
    page.page.set_viewport_size({"width": 1400, "height": 900})
    page.page.wait_for_timeout(200)
    assert _side_by_side(_boxes(page, "#resolution .sb-side-main") + _boxes(page, "#resolution .sb-side-table"))
    assert page.page.locator("#resolution .sb-side-table table").count() == 1
    legend_x = page.page.evaluate("() => document.querySelector('#resolution .js-plotly-plot').layout.legend.x")
    assert legend_x > 1                                   # beside the plot, not over its lines


def test_multilabel_figure_sits_beside_the_fit_table(loaded):
    page, doc = loaded
    page.page.set_viewport_size({"width": 1400, "height": 900})
    page.page.wait_for_timeout(200)
    boxes = _boxes(page, "#multilabel .sb-side-main") + _boxes(page, "#multilabel .sb-side-table")
    assert _side_by_side(boxes) and boxes[0][2] >= 500      # the figure keeps half the page or more
    fit = page.page.locator("#multilabel .sb-side-table")
    assert "each over 4 models" in fit.text_content() and fit.locator("tbody tr").count() == 3
    assert page.page.locator("#multilabel details").get_attribute("open") is None   # the paper's table folds


def test_compositing_legends_are_beside_the_curves(loaded):
    page, _ = loaded
    xs = page.page.evaluate("""() => [...document.querySelectorAll('#compositing .sb-pair')[0]
        .querySelectorAll('.js-plotly-plot')].map(gd => gd.layout.legend.x)""")
    assert len(xs) == 2 and all(x > 1 for x in xs)


def test_file_links_of_a_section_share_one_line(loaded):
    """(This page is built without static figures: the figure links are not there, the tables' are.)"""
    page, _ = loaded
    for anchor in ("calibration", "attributes", "resolution", "multilabel", "compositing"):
        rows = _boxes(page, f"#{anchor} .sb-filerow > p.sb-files")
        assert len(rows) >= 1 and len({r[0] for r in rows}) == 1, (anchor, rows)


def test_a_figure_beside_a_table_is_drawn_at_its_width_when_the_page_opens(browser, loaded):  # noqa: F811
    """Opened at 1,400 px (no window resize after): the plots beside a table fit their box."""
    _, doc = loaded
    url = loaded[0].page.url
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        page.goto(url, wait_until="load")
        page.wait_for_function("document.querySelectorAll('.sb-side .js-plotly-plot svg.main-svg').length >= 2")
        widths = page.evaluate("""() => [...document.querySelectorAll('.sb-side .js-plotly-plot')].map(gd =>
            [Math.round(gd.getBoundingClientRect().width),
             Number(gd.querySelector('svg.main-svg').getAttribute('width'))])""")
        assert len(widths) == 2 and all(svg <= box + 1 for box, svg in widths), widths
    finally:
        page.close()
