"""The fine-tuning section at 1,400 px (headless Chromium): the trajectory scatter and the
effective-robustness-by-epoch plot side by side, one height, their legends under the plots (in
view, every entry inside its figure), and the section short."""
from __future__ import annotations

import pytest

from test_report_browser import browser  # noqa: F401 - the module-scoped Chromium fixture
from test_report_browser_studies import loaded  # noqa: F401 - the page with a stored trajectory
from test_report_layout import MAX_TESTBED_SECTION, layout_problems

pytestmark = pytest.mark.timeout(180)


def test_trajectory_plots_sit_side_by_side_with_their_legends_under_them(loaded):  # noqa: F811
    page, _ = loaded
    page.page.set_viewport_size({"width": 1400, "height": 900})
    page.page.wait_for_timeout(300)
    info = page.page.evaluate("""() => {
        const sec = document.getElementById('tb-tiny-fine-tuning');
        const cols = [...sec.querySelector('.sb-pair').querySelectorAll(':scope > div')];
        const plots = cols.map(c => c.querySelector('.js-plotly-plot'));
        const box = el => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
        return {cols: cols.map(box), plots: plots.map(box), height: sec.getBoundingClientRect().height,
                legends: plots.map(gd => box(gd.querySelector('.legend'))),
                areas: plots.map(gd => box(gd.querySelector('.nsewdrag'))),
                orient: plots.map(gd => gd.layout.legend.orientation),
                names: plots[0].data.map(t => t.name || '')}; }""")
    (l0, t0, r0, _), (l1, t1, _, _) = info["cols"]
    assert t0 == t1 and l1 >= r0 - 1                                  # beside each other
    assert abs((info["plots"][0][3] - info["plots"][0][1]) - (info["plots"][1][3] - info["plots"][1][1])) <= 1
    assert info["orient"] == ["h", "h"]
    for legend, area, plot in zip(info["legends"], info["areas"], info["plots"]):
        assert legend[1] >= area[3]                                  # under the plotting area, not over points
        assert legend[3] <= plot[3] + 1                              # and inside its figure
    assert any(n.startswith("trajectory:") for n in info["names"])
    assert info["height"] <= MAX_TESTBED_SECTION
    assert layout_problems(page.page) == {"toolbar over title": [], "labels outside": [], "wide sections": []}


def test_the_checkpoint_table_is_folded_beside_its_files(loaded):  # noqa: F811
    page, doc = loaded
    row = page.page.evaluate("""() => { const r = document.querySelector('#tb-tiny-fine-tuning details')
        .closest('.sb-filerow'); return r ? r.textContent : ''; }""")
    assert "CSV" in row and "Every checkpoint (" in row and "rows" in row
