"""The report as a person sees it at 1,400 px: every section screenshot, and what can be asserted
from the DOM and the plotly figure objects - nothing wider than its box, the model table scrolling
inside its own box with a sticky header and model column, a family of shifts (one per corruption)
shown one figure at a time behind a selector, a long calibration legend grouped by shift family
and placed beside the plot, the plotly toolbar clear of every title, and every label in view.

The screenshots land in pytest's tmp_path (``--basetemp`` to keep them); the sizes of the page and
of each section are asserted so that a regression to one figure per corrupted setting shows.
"""
from __future__ import annotations

import os

os.environ.setdefault("MPLBACKEND", "Agg")

from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from report_testbed import CORRUPTIONS, XSS, calibration_store, tiny_testbed  # noqa: E402
from shiftbench.report import NATURAL_SHIFTS, ShiftPair, write_html_report  # noqa: E402
from shiftbench.report.html import _toc  # noqa: E402
from shiftbench.report.sections import Rendered, group_legend, setting_family, shift_families  # noqa: E402
from shiftbench.store import Store  # noqa: E402
from shiftbench import testbed as testbed_module  # noqa: E402
from test_report_browser import Page, browser  # noqa: E402,F401 - the module-scoped Chromium fixture

pytestmark = pytest.mark.timeout(240)
PNG = b"\x89PNG\r\n\x1a\n"
WIDTH = 1400
FAMILY = [ShiftPair(f"Corruption: {c.split('.')[1]} {c.split('.')[2][0]}", "val", c) for c in CORRUPTIONS]


def _testbed() -> testbed_module.Testbed:
    """The tiny testbed with architecture, parameter and training-data columns (as timm's has)."""
    tb = tiny_testbed()
    frame = tb.accuracies.copy()
    meta = tb.metadata.copy()
    meta["arch"] = ["resnet_" + "x" * (i % 4) for i in range(len(meta))]
    meta["param_count"] = [1.5 * (i + 1) for i in range(len(meta))]
    meta["pretrain"] = ["tag names extra data: in22k" if t == "MORE_DATA" else "ImageNet-1k only"
                        for t in meta["model_type"]]
    return testbed_module.Testbed(frame, tb.sizes, meta, name="tiny")


def _store(root: Path) -> Path:
    """The calibration store plus 12 corrupted settings (3 corruptions x 4 severities)."""
    store = Store(calibration_store(root))
    i = 100
    for corruption in ("fog", "snow", "contrast"):
        for severity in range(1, 5):
            for model, acc in (("resnet50", 70.0 - 5 * severity), (XSS, 72.0 - 4 * severity)):
                store.finish(f"key{i}", {"model": model, "setting": f"val+{corruption}.{severity}", "accuracy": acc,
                                         "top5": acc + 10, "n_examples": 1000, "n_skipped": 0, "convention": "full",
                                         "ece": 3.0 + severity, "nll": 1.0, "brier": 0.3, "dataset": "x"})
                i += 1
    return root


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("layout")
    return write_html_report([_testbed()], root / "report", store=_store(root / "store"), n_resamples=50,
                             figure_formats=(), shifts=list(NATURAL_SHIFTS) + FAMILY)


@pytest.fixture(scope="module")
def loaded(browser, report):  # noqa: F811 - browser is the imported fixture
    page = Page(browser, report.resolve().as_uri())
    page.page.set_viewport_size({"width": WIDTH, "height": 900})
    page.page.wait_for_timeout(300)
    yield page
    page.page.close()


# ------------------------------------------------------------------------------------ pure helpers
def test_shifts_labelled_family_member_are_gathered_at_the_first_place():
    from types import SimpleNamespace as NS

    def a(label):
        return NS(shift=NS(label=label))

    analyses = [a("UCI"), a("Corruption: fog"), a("Other"), a("Corruption: snow"), a("Corruption: blur"), a("X: y")]
    families = shift_families(analyses)
    assert [(f, [m.shift.label for m in ms]) for f, ms in families] == [
        (None, ["UCI"]), ("Corruption", ["Corruption: fog", "Corruption: snow", "Corruption: blur"]),
        (None, ["Other"]), (None, ["X: y"])]


def test_setting_family_and_a_grouped_legend():
    import plotly.graph_objects as go

    assert setting_family("mnist-test+gaussian_noise.3") == ("gaussian_noise", 3)
    assert setting_family("uci-digits") == ("uci-digits", None)
    fig = go.Figure([go.Scatter(x=[1], y=[1], name=s) for s in
                     ["val"] + [f"val+{c}.{k}" for c in ("fog", "snow") for k in range(1, 6)]])
    group_legend(fig)
    shown = [t.name for t in fig.data if t.showlegend is not False]
    assert shown == ["val", "fog (5 severities)", "snow (5 severities)"]
    assert len({t.marker.color for t in fig.data if t.legendgroup == "fog"}) == 1
    assert fig.layout.legend.x > 1            # beside the plot, not over its points
    few = go.Figure([go.Scatter(x=[1], y=[1], name=f"val+fog.{k}") for k in range(1, 4)])
    assert all(t.showlegend is None for t in group_legend(few).data)


def test_toc_folds_testbeds_when_long_and_opens_them_when_short():
    short = _toc([("tb", "tb-a", [Rendered("Overview", "o", "")])])
    assert "<details open>" in short and 'href="#o"' in short
    many = [Rendered(f"s{i}", f"s{i}", "") for i in range(30)]
    long = _toc([("tb", "tb-a", many), ("Calibration", "calibration", [])])
    assert "<details>" in long and long.count("<details") == 1 and 'href="#calibration"' in long


# ------------------------------------------------------------------------------------ in the browser
def test_every_section_screenshot_at_1400px_and_nothing_overflows(loaded: Page, tmp_path: Path):
    page = loaded.page
    assert loaded.errors == [] and [m for m in loaded.console if m[0] == "error"] == []
    width = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert width[0] <= width[1], f"the page scrolls sideways: {width}"
    sections = page.evaluate("""() => [...document.querySelectorAll('section.sb-section')].map(s =>
        ({id: s.id, sw: s.scrollWidth, cw: s.clientWidth}))""")
    assert len(sections) >= 6  # the store has results only (no per-example predictions): no similarity section
    wide = [s for s in sections if s["sw"] > s["cw"] + 1]
    assert wide == [], wide
    for s in sections:
        shot = tmp_path / f"{s['id']}.png"
        page.locator(f"[id='{s['id']}']").screenshot(path=str(shot))
        assert shot.read_bytes()[:8] == PNG and shot.stat().st_size > 2_000, s["id"]
    # every block inside a section stays inside it (figures, tables, notes)
    spill = page.evaluate("""() => {
        const out = [];
        for (const s of document.querySelectorAll('section.sb-section')) {
            const box = s.getBoundingClientRect();
            for (const el of s.querySelectorAll('.sb-plot, .sb-table, table.sb-small, p, h3, h4')) {
                const r = el.getBoundingClientRect();
                if (r.width && (r.left < box.left - 1 || r.right > box.right + 1)) out.push([s.id, el.tagName, el.className]);
            }
        }
        return out; }""")
    assert spill == []


def test_model_table_has_metadata_every_shift_and_scrolls_in_its_own_box(loaded: Page):
    page = loaded.page
    table = page.locator("#tb-tiny-models .sb-table")
    headers = table.locator("thead th").all_text_contents()
    assert headers[:6] == ["model", "type", "architecture", "params (M)", "training data", "val %"]
    assert "ImageNetV2 %" in headers and "ER ImageNetV2" in headers and "ER Corruption: fog 1" in headers
    assert table.locator("select").count() == 2                 # model type and training data
    box = page.evaluate("""() => {
        const s = document.querySelector('#tb-tiny-models .sb-table-scroll');
        const sec = document.getElementById('tb-tiny-models');
        return {sw: s.scrollWidth, cw: s.clientWidth, right: s.getBoundingClientRect().right,
                secRight: sec.getBoundingClientRect().right,
                head: getComputedStyle(s.querySelector('thead th')).position,
                first: getComputedStyle(s.querySelector('tbody td')).position}; }""")
    assert box["right"] <= box["secRight"] + 1
    assert box["head"] == "sticky" and box["first"] == "sticky"
    table.locator("select").nth(1).select_option("in22k")
    assert "4 of 15 models" in table.locator(".sb-table-count").text_content()
    table.locator("select").nth(1).select_option("")
    # scrolled sideways, the model column stays at the left edge of the box
    page.evaluate("() => { const s = document.querySelector('#tb-tiny-models .sb-table-scroll'); s.scrollLeft = 400; }")
    left = page.evaluate("""() => {
        const s = document.querySelector('#tb-tiny-models .sb-table-scroll');
        return [s.getBoundingClientRect().left, s.querySelector('tbody td').getBoundingClientRect().left]; }""")
    assert abs(left[0] - left[1]) <= 2


def test_the_shifts_are_one_figure_with_a_selector_and_a_family_is_one_group(loaded: Page):
    page = loaded.page
    chooser = page.locator("#tb-tiny-shifts .sb-chooser")
    labels = chooser.locator("select option").all_text_contents()
    assert labels == ["ImageNetV2", "ImageNet-Sketch", "ImageNet-A", "fog 1", "fog 2", "snow 1"]
    assert chooser.locator("select optgroup[label=Corruption] option").count() == 3
    shown = """() => [...document.querySelectorAll('#tb-tiny-shifts .sb-choice')]
        .map(b => !b.hidden && b.getBoundingClientRect().height > 0)"""
    assert page.evaluate(shown) == [True, False, False, False, False, False]
    chooser.locator("select").select_option(label="snow 1")
    state = page.evaluate("""() => {
        const blocks = [...document.querySelectorAll('#tb-tiny-shifts .sb-choice')];
        const gd = blocks[5].querySelector('.js-plotly-plot');
        return [gd.getBoundingClientRect().width, gd.parentElement.getBoundingClientRect().width,
                gd.layout.title.text]; }""")
    assert page.evaluate(shown) == [False, False, False, False, False, True]
    assert abs(state[0] - state[1]) <= 2              # resized to its box when shown
    assert "snow" in state[2]
    # the table of contents lists each shift once and a family once; its link selects the figure
    toc = page.locator("nav.sb-toc").text_content()
    assert "Corruption (3)" in toc and "fog 2" not in toc
    page.locator("nav.sb-toc a", has_text="ImageNet-A").click()
    page.wait_for_function("() => !document.getElementById('tb-tiny-imagenet-a').hidden")
    assert page.evaluate(shown) == [False, False, True, False, False, False]
    top = page.evaluate("document.getElementById('tb-tiny-imagenet-a').getBoundingClientRect().top")
    assert -2 <= top < 300
    chooser.locator("select").select_option("0")


def test_calibration_legend_is_grouped_by_family_beside_the_plot(loaded: Page):
    page = loaded.page
    info = page.evaluate("""() => {
        const gd = document.querySelector('#calibration .js-plotly-plot');
        return {n: gd.data.length, shown: gd.data.filter(t => t.showlegend !== false).map(t => t.name),
                x: gd.layout.legend.x, legend: gd.querySelector('.legend').getBoundingClientRect().left,
                plot: gd.querySelector('.cartesianlayer .bg, .plotbg rect, .nsewdrag').getBoundingClientRect().right}; }""")
    assert info["n"] == 14 and len(info["shown"]) == 5       # val, V2 and three families
    assert any(n.startswith("fog (4 severities)") for n in info["shown"])
    assert info["x"] > 1 and info["legend"] >= info["plot"] - 1


TOOLBAR_OVER_TITLE = """() => {
    const out = [];
    const hit = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
    for (const gd of document.querySelectorAll('.js-plotly-plot')) {
        if (!gd.offsetParent) continue;                       // hidden behind a selector
        const bar = gd.querySelector('.modebar'), title = gd.querySelector('.gtitle');
        if (!bar || !title) continue;
        const m = bar.getBoundingClientRect(), t = title.getBoundingClientRect();
        if (m.width && hit(m, t)) out.push([gd.id, title.textContent]);
    }
    return out; }"""
LABELS_OUTSIDE = """() => {
    const out = [];
    for (const gd of document.querySelectorAll('.js-plotly-plot')) {
        if (!gd.offsetParent) continue;
        const box = gd.getBoundingClientRect();
        for (const t of gd.querySelectorAll('.gtitle, .xtitle, .ytitle, .legendtext, .annotation-text, .xtick text, ' +
                                            '.ytick text, .g-colorbar text')) {
            const r = t.getBoundingClientRect();
            if (!r.width) continue;
            if (r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 || r.bottom > box.bottom + 1)
                out.push([gd.id, t.textContent]);
        }
    }
    return out; }"""
WIDE_SECTIONS = """() => [...document.querySelectorAll('section.sb-section')]
    .filter(s => s.scrollWidth > s.clientWidth + 1).map(s => s.id)"""


def layout_problems(page) -> dict[str, list]:
    """What a person would see wrong at the page's width: the plotly toolbar over a title, a
    label (title, axis title, tick, legend entry, annotation) outside its figure, a section
    wider than its box."""
    return {"toolbar over title": page.evaluate(TOOLBAR_OVER_TITLE), "labels outside": page.evaluate(LABELS_OUTSIDE),
            "wide sections": page.evaluate(WIDE_SECTIONS)}


def test_toolbar_never_covers_a_title_and_labels_are_in_view(loaded: Page):
    assert layout_problems(loaded.page) == {"toolbar over title": [], "labels outside": [], "wide sections": []}


def test_every_section_is_two_clicks_from_the_top(loaded: Page):
    page = loaded.page
    page.evaluate("window.scrollTo(0, 0)")
    ids = page.evaluate("() => [...document.querySelectorAll('main section.sb-section, main section.sb-testbed')]"
                        ".filter(s => !s.closest('.sb-choice')).map(s => s.id)")
    reach = page.evaluate("""() => {
        const top = [...document.querySelectorAll('nav.sb-toc > ul > li')];
        const one = new Set(top.map(li => li.querySelector('a').getAttribute('href').slice(1)));
        const two = new Set([...document.querySelectorAll('nav.sb-toc details a')].map(a => a.getAttribute('href').slice(1)));
        return [[...one], [...two]]; }""")
    reachable = set(reach[0]) | set(reach[1])
    assert [i for i in ids if i not in reachable] == []
    # the sidebar stays in view while the page scrolls
    page.evaluate("window.scrollTo(0, document.body.scrollHeight / 2)")
    top = page.evaluate("document.querySelector('nav.sb-toc').getBoundingClientRect().top")
    assert 0 <= top <= 2
    page.evaluate("window.scrollTo(0, 0)")


def test_page_height_stays_small(loaded: Page, tmp_path: Path):
    page = loaded.page
    height = page.evaluate("document.body.scrollHeight")
    shot = tmp_path / "page.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == PNG
    # overview, 3 fitted shifts + Sketch, one family figure, synthetic, the table, the store sections
    assert height < 14_000, height


# ------------------------------------------------------------------------------------ per-testbed sections, short
#: the most a testbed's section may be tall at 1,400 px (its shifts' one scatter at a time: a little more)
MAX_TESTBED_SECTION, MAX_SHIFTS_SECTION = 950, 1000


def test_each_testbed_section_stays_short(loaded: Page):
    heights = loaded.page.evaluate("""() => Object.fromEntries([...document.querySelectorAll(
        'section.sb-testbed > section.sb-section')].map(s => [s.id, Math.round(s.getBoundingClientRect().height)]))""")
    assert {"tb-tiny-overview", "tb-tiny-shifts", "tb-tiny-synthetic", "tb-tiny-models",
            "tb-tiny-trend-diagnostics"} <= set(heights)
    too_tall = {k: h for k, h in heights.items()
                if h > (MAX_SHIFTS_SECTION if k.endswith("-shifts") else MAX_TESTBED_SECTION)}
    assert too_tall == {}


def _columns(page, selector: str) -> list[list[int]]:
    """[top, left, width] of each column of the first ``.sb-pair`` under ``selector``."""
    return page.evaluate("""sel => [...document.querySelector(sel + ' .sb-pair').querySelectorAll(':scope > div')]
        .map(d => { const r = d.getBoundingClientRect(); return [Math.round(r.top), Math.round(r.left),
                                                                 Math.round(r.width)]; })""", selector)


def test_trend_diagnostics_heatmap_sits_beside_its_flags_and_files(loaded: Page):
    page = loaded.page
    cols = _columns(page, "#tb-tiny-trend-diagnostics")
    assert len(cols) == 2 and cols[0][0] == cols[1][0] and cols[1][1] >= cols[0][1] + cols[0][2] - 1
    right = page.evaluate("""() => { const pair = document.querySelector('#tb-tiny-trend-diagnostics .sb-pair');
        const [l, r] = pair.querySelectorAll(':scope > div');
        return {heatmap: !!l.querySelector('.js-plotly-plot .heatmaplayer, .js-plotly-plot .hm'),
                text: r.textContent, files: r.querySelectorAll('.sb-filerow a').length}; }""")
    assert right["heatmap"] and "coordinates" in right["text"] and right["files"] >= 3   # flags (or none), CSV...
    # the half-width heatmap keeps its title clear of the toolbar and every label inside the figure
    assert layout_problems(page) == {"toolbar over title": [], "labels outside": [], "wide sections": []}


def test_synthetic_figures_sit_side_by_side_each_with_its_files_under_it(loaded: Page):
    page = loaded.page
    cols = _columns(page, "#tb-tiny-synthetic")
    assert len(cols) == 2 and cols[0][0] == cols[1][0]
    links = page.evaluate("""() => [...document.querySelectorAll('#tb-tiny-synthetic .sb-pair > div')].map(d =>
        [d.querySelectorAll('.js-plotly-plot').length, d.querySelector('.sb-filerow') ? d.querySelector(
            '.sb-filerow').textContent : ''])""")
    assert [n for n, _ in links] == [1, 1]
    assert "Table" in links[0][1] and "Per-corruption table" in links[1][1]
    # the file links of a section take one line each: no paragraph of their own outside a row
    loose = page.evaluate("""() => [...document.querySelectorAll('section.sb-testbed p.sb-files')]
        .filter(p => !p.closest('.sb-filerow')).map(p => p.closest('section.sb-section').id)""")
    assert loose == []


def test_model_table_box_is_about_ten_rows_tall(loaded: Page):
    box = loaded.page.evaluate("""() => { const s = document.querySelector('#tb-tiny-models .sb-table-scroll');
        const row = s.querySelector('tbody tr').getBoundingClientRect().height;
        return {h: s.getBoundingClientRect().height, sh: s.scrollHeight, row: row,
                note: document.querySelector('#tb-tiny-models .sb-filerow').textContent}; }""")
    assert box["h"] <= 365 and box["h"] <= 120 + 11 * box["row"]
    assert box["sh"] > box["h"]                      # 15 models: the rest scroll inside the box
    assert "ER columns" in box["note"] and "CSV" in box["note"]   # the note and the table's files on one line


def test_shift_selector_says_what_it_shows_on_its_own_line(loaded: Page):
    page = loaded.page
    label = page.locator("#tb-tiny-shifts label.sb-choose")
    text = label.text_content()
    assert "(6 in all;" in text and "Overview" in text
    heights = page.evaluate("""() => { const l = document.querySelector('#tb-tiny-shifts label.sb-choose');
        return [l.getBoundingClientRect().height, l.querySelector('select').getBoundingClientRect().height]; }""")
    assert heights[0] <= heights[1] + 4              # one line: no wrapped note under the selector


def _legend_right_of_axes(fig) -> bool:
    fig.canvas.draw()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent()
    return legend.x0 >= ax.get_window_extent().x1


def test_static_calibration_groups_a_long_legend_by_family_beside_the_axes():
    """The PNG/SVG/PDF twin of the grouped plotly legend: 1 + 2 x 5 settings -> 3 entries, each
    family one colour, darker at higher severity, and the legend right of the axes."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    from shiftbench.report.figures import plot_calibration

    settings = ["val"] + [f"val+{c}.{k}" for c in ("fog", "snow") for k in range(1, 6)]
    rows = pd.DataFrame({"setting": np.repeat(settings, 4), "accuracy": np.linspace(40, 90, 44),
                         "ece": np.linspace(1, 12, 44)})
    fig = plot_calibration(rows)
    legend = fig.axes[0].get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["val", "fog (5 severities)", "snow (5 severities)"]
    fog = [c for c in fig.axes[0].collections if c.get_offsets()[0][1] in
           rows.loc[rows["setting"].str.contains("fog"), "ece"].to_numpy()]
    assert len({to_hex(c.get_facecolor()[0], keep_alpha=False) for c in fog}) == 1
    alphas = [c.get_alpha() for c in fog]
    assert alphas == sorted(alphas) and alphas[0] < alphas[-1]      # severity 1 lightest, 5 darkest
    assert _legend_right_of_axes(fig)
    plt.close(fig)
    few = plot_calibration(rows[rows["setting"].isin(settings[:4])])
    assert [t.get_text() for t in few.axes[0].get_legend().get_texts()] == settings[:4]
    assert _legend_right_of_axes(few)
    plt.close(few)


def test_synthetic_scatter_legends_stay_off_the_points():
    import matplotlib.pyplot as plt

    from shiftbench.report.figures import plot_synthetic_vs_natural
    from shiftbench.report.interactive import synthetic_figure

    frame = pd.DataFrame({"model_type": ["STANDARD"] * 6 + ["ROBUST_INTV"] * 4,
                          "synthetic_er": np.linspace(-3, 6, 10), "natural_er": np.linspace(-2, 4, 10)},
                         index=[f"m{i}" for i in range(10)])
    fig = plot_synthetic_vs_natural(frame, natural_label="UCI", r=0.9)
    assert _legend_right_of_axes(fig)
    plt.close(fig)
    legend = synthetic_figure(frame, natural_label="UCI", r=0.9, title="t").layout.legend
    assert legend.orientation == "h" and legend.y < 0          # in rows under the plot
