"""The HTML report in a real browser: Debian's headless Chromium driven by Playwright.

The page is opened from ``file://`` (as a user double-clicking index.html would) and checked
for console errors, network requests, rendered plots, hover text, table sorting and filtering,
and that a model named ``<img src=x onerror=alert(1)>`` is shown as text with no script run.
``make venv`` installs Chromium (``apt-get install chromium chromium-driver``) when missing.
"""
from __future__ import annotations

import os

os.environ.setdefault("MPLBACKEND", "Agg")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from report_testbed import ODD, XSS, calibration_store, tiny_testbed  # noqa: E402
from shiftbench.report import write_html_report  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
PNG = b"\x89PNG\r\n\x1a\n"

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("browser")
    store = calibration_store(root / "store")
    return write_html_report([tiny_testbed()], root / "report", store=store, n_resamples=100, figure_formats=())


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run `make venv` (it installs Debian's chromium) or "
                    "`apt-get install -y chromium chromium-driver`")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield b
        b.close()


class Page:
    """A loaded report page with everything it logged, fetched or tried to pop up."""

    def __init__(self, browser, url: str) -> None:
        self.page = browser.new_page(viewport={"width": 1300, "height": 900})
        self.console: list[tuple[str, str]] = []
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("console", lambda m: self.console.append((m.type, m.text)))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))

        def dialog(d) -> None:
            self.dialogs.append(d.message)
            d.dismiss()

        self.page.on("dialog", dialog)
        self.page.goto(url, wait_until="load")
        self.page.wait_for_function("document.querySelectorAll('.plotly-graph-div svg.main-svg').length > 0")


@pytest.fixture(scope="module")
def loaded(browser, report: Path) -> Page:
    page = Page(browser, report.resolve().as_uri())
    yield page
    page.page.close()


def _hovertext(page) -> str:
    page.wait_for_selector(".hoverlayer .hovertext", timeout=5000)
    return page.eval_on_selector_all(".hoverlayer .hovertext", "els => els.map(e => e.textContent).join('\\n')")


def _plot_with_model(page, name: str) -> tuple[str, int, int]:
    """(div id, curve, point) of the first scatter point whose hover name is ``name``."""
    escaped = name.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    found = page.evaluate("""name => {
        for (const gd of document.querySelectorAll('.plotly-graph-div')) {
            for (let c = 0; c < gd.data.length; c++) {
                const cd = gd.data[c].customdata || [];
                for (let p = 0; p < cd.length; p++) if (Array.isArray(cd[p]) && cd[p][0] === name) return [gd.id, c, p];
            }
        }
        return null; }""", escaped)
    assert found is not None, f"no plotted point for {name!r}"
    return found


def test_page_loads_from_file_url_without_errors_or_network(loaded: Page, report: Path, tmp_path: Path):
    assert loaded.page.url.startswith("file://")
    assert loaded.errors == []
    assert [m for m in loaded.console if m[0] == "error"] == []
    assert all(u.startswith(("file://", "data:", "blob:", "about:")) for u in loaded.requests), loaded.requests
    shot = tmp_path / "report.png"
    loaded.page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == PNG and shot.stat().st_size > 20_000


def test_every_plot_renders(loaded: Page):
    counts = loaded.page.evaluate("""() => {
        const divs = [...document.querySelectorAll('.plotly-graph-div')];
        return [divs.length, divs.filter(d => d.querySelector('svg.main-svg') && d.querySelector('.cartesianlayer')).length,
                divs.filter(d => d.querySelectorAll('.scatterlayer .point, .barlayer .point, .heatmaplayer image, .hm image')
                    .length > 0).length]; }""")
    # ImageNetV2, ImageNet-A, the unfitted Sketch points, synthetic scatter and bars, calibration, trend r2 heatmap
    assert counts[0] == 7
    assert counts == [counts[0]] * 3


def test_hovering_a_point_with_the_mouse_shows_a_model_name(loaded: Page):
    page = loaded.page
    div_id, curve, point = _plot_with_model(page, "more2")
    page.locator(f"#{div_id}").scroll_into_view_if_needed()
    box = page.evaluate("""([id, c, p]) => {
        const gd = document.getElementById(id);
        const trace = gd.querySelectorAll('.scatterlayer .trace')[c];
        const r = trace.querySelectorAll('.points .point')[p].getBoundingClientRect();
        return [r.x + r.width / 2, r.y + r.height / 2]; }""", [div_id, curve, point])
    page.mouse.move(box[0] - 40, box[1] - 40)
    page.mouse.move(box[0], box[1], steps=4)
    text = _hovertext(page)
    assert "more2" in text and "MORE_DATA" in text and "effective robustness" in text
    page.mouse.move(0, 0)


@pytest.mark.parametrize("name", [XSS, ODD])
def test_hover_shows_odd_model_names_as_text(loaded: Page, name: str):
    page = loaded.page
    div_id, curve, point = _plot_with_model(page, name)
    page.evaluate("([id, c, p]) => Plotly.Fx.hover(id, [{curveNumber: c, pointNumber: p}])", [div_id, curve, point])
    assert name in _hovertext(page)
    page.evaluate("id => Plotly.Fx.unhover(id)", div_id)
    assert page.query_selector_all("img") == []
    assert loaded.dialogs == []


def test_sorting_the_model_table_reorders_it(loaded: Page):
    table = loaded.page.locator(".sb-table").first
    headers = table.locator("thead th").all_text_contents()
    val = headers.index("val %")
    before = table.locator("tbody tr td:first-child").all_text_contents()
    table.locator("thead th button", has_text="val %").click()
    desc = [float(v) for v in table.locator(f"tbody tr td:nth-child({val + 1})").all_text_contents()]
    assert desc == sorted(desc, reverse=True)
    assert table.locator("thead th").nth(val).get_attribute("aria-sort") == "descending"
    assert table.locator("tbody tr td:first-child").first.text_content() == "std7"
    table.locator("thead th button", has_text="val %").click()
    asc = [float(v) for v in table.locator(f"tbody tr td:nth-child({val + 1})").all_text_contents()]
    assert asc == sorted(asc)
    after = table.locator("tbody tr td:first-child").all_text_contents()
    assert after != before and after[0] == "std0"
    # sort by name: text order, and the two odd names are plain cells
    table.locator("thead th button", has_text="model").first.click()
    names = table.locator("tbody tr td:first-child").all_text_contents()
    assert XSS in names and ODD in names


def test_filtering_the_model_table(loaded: Page):
    table = loaded.page.locator(".sb-table").first
    box = table.locator("input[type=search]")
    box.fill("STD")                     # case-insensitive, on names and types
    names = table.locator("tbody tr td:first-child").all_text_contents()
    assert sorted(names) == ["std0", "std1", "std2", "std3", "std4", "std6", "std7"]
    assert "7 of 15 models" in table.locator(".sb-table-count").text_content()
    box.fill("more_data")
    assert table.locator("tbody tr").count() == 4
    box.fill("")
    table.locator("select").select_option("ROBUST_INTV")
    assert sorted(table.locator("tbody tr td:nth-child(2)").all_text_contents()) == ["ROBUST_INTV"] * 3
    table.locator("select").select_option("")
    assert table.locator("tbody tr").count() == 15


def test_script_named_model_is_text_and_never_runs(loaded: Page):
    page = loaded.page
    assert loaded.dialogs == []
    assert page.query_selector_all('img[src="x"]') == [] and page.query_selector_all("img") == []
    cells = page.eval_on_selector_all("td", "tds => tds.filter(t => t.children.length === 0).map(t => t.textContent)")
    assert XSS in cells                 # the sortable table and the top-5 table show the name verbatim
    assert cells.count(XSS) >= 2
    legend = page.eval_on_selector_all(".legendtext", "els => els.map(e => e.textContent)")
    assert legend and all("<" not in t for t in legend)
    page.wait_for_timeout(200)
    assert loaded.dialogs == []


def test_calibration_section_from_the_store_renders(loaded: Page):
    page = loaded.page
    section = page.locator("#calibration")
    assert section.locator("svg.main-svg").count() > 0
    rows = section.locator(".sb-table tbody tr")
    assert rows.count() == 5
    assert XSS in section.locator(".sb-table tbody").text_content()
