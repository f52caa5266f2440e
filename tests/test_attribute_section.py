"""The report's attribute-controlled-shift section reads ``attributes`` studies from the store."""
import sys
from pathlib import Path

import pandas as pd

from shiftbench.report import write_html_report
from shiftbench.store import Store

sys.path.insert(0, str(Path(__file__).parent))
from report_testbed import XSS, tiny_testbed  # noqa: E402


def study() -> pd.DataFrame:
    return pd.DataFrame({
        "split": ["thickness=thin", "id-test", XSS], "kind": ["ood", "id-test", "ood"],
        "attribute": ["thickness", None, "slant"], "value": ["thin", None, "x"], "n": [200, 100, 50],
        "accuracy": [91.5, 98.25, 80.0], "ci_low": [87.0, 93.0, 66.0], "ci_high": [95.0, 99.8, 90.0],
        "drop": [-6.75, 0.0, -18.25]})


def test_section_shows_each_split_with_the_id_test_first_and_escapes_names(tmp_path):
    store = Store(tmp_path / "store")
    store.write_study("attributes", "digits", study())
    doc = write_html_report([tiny_testbed()], tmp_path / "out", store=store.root, n_resamples=20,
                            figure_formats=(".png",)).read_text()
    start = doc.index('id="attributes"')
    section = doc[start:doc.find('<section class="sb-section"', start + 1)]
    assert "98.25" in section and "-18.25" in section and section.index("id-test") < section.index("thickness=thin")
    assert XSS not in doc and "&lt;img src=x onerror=alert(1)&gt;" in section
    assert (tmp_path / "out" / "attributes" / "digits.png").stat().st_size > 1000
    assert (tmp_path / "out" / "attributes" / "digits-table.csv").exists()


def test_section_is_absent_without_an_attributes_study(tmp_path):
    store = Store(tmp_path / "store")
    store.write_study("resolution", "m", pd.DataFrame({"resolution": [64], "accuracy": [1.0]}))
    doc = write_html_report([tiny_testbed()], tmp_path / "out", store=store.root, n_resamples=20,
                            figure_formats=()).read_text()
    assert 'id="attributes"' not in doc
