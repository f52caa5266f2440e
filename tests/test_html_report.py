"""write_html_report / `shiftbench report`: one self-contained index.html, static figures and
tables beside it, sections only where there is data, reasons where a trend cannot be fitted."""
from __future__ import annotations

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import base64  # noqa: E402
import hashlib  # noqa: E402
import re  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

import shiftbench as sb  # noqa: E402
from report_testbed import CORRUPTIONS, ODD, V2, XSS, calibration_store, tiny_testbed  # noqa: E402
from shiftbench import cli  # noqa: E402
from shiftbench.analysis.synthetic import corruption_settings, synthetic_effective_robustness  # noqa: E402
from shiftbench.errors import ConfigError  # noqa: E402
from shiftbench.report import NATURAL_SHIFTS, ShiftPair, write_html_report  # noqa: E402
from shiftbench.report.html import n_steps  # noqa: E402
from shiftbench.report.sections import list_sections  # noqa: E402
from shiftbench.report.tables import file_slug  # noqa: E402

PNG, PDF = b"\x89PNG\r\n\x1a\n", b"%PDF"
MB = 1_000_000
SCRIPT = re.compile(r"<script(?: type=\"text/javascript\")?>(.*?)</script>", re.S)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("html")
    path = write_html_report([tiny_testbed()], root / "out", store=calibration_store(root / "store"), n_resamples=100)
    return path, path.read_text(encoding="utf-8")


def markup(document: str) -> str:
    """The document without the bodies of its scripts (plotly.js, figures, table data)."""
    return re.sub(r"(<script[^>]*>).*?(</script>)", r"\1\2", document, flags=re.S)


def section(document: str, anchor: str) -> str:
    start = document.index(f'id="{anchor}"')
    end = document.find('<section class="sb-section"', start + 1)
    return document[start:end if end > 0 else len(document)]


def test_index_html_is_one_self_contained_file(report):
    path, doc = report
    assert path.name == "index.html" and doc.startswith("<!DOCTYPE html>")
    tags = markup(doc)
    # nothing to fetch: no external scripts, styles, images or frames
    assert not re.search(r"<(script|link|img|iframe|object|embed)\b[^>]*\b(src|href)\s*=", tags, re.I)
    assert not re.search(r"""\b(src|href)\s*=\s*["']?(https?:)?//""", tags, re.I)
    # plotly.js inlined exactly once; every figure is drawn with it
    assert doc.count("* plotly.js v") == 1
    # one plotly call per figure div: 6 natural-shift/overview figures plus the trend diagnostics
    assert doc.count("Plotly.newPlot(") == doc.count('<div class="sb-plot">') == 7


def test_content_security_policy_allows_exactly_the_inline_scripts(report):
    _, doc = report
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', doc).group(1).replace("&#x27;", "'")
    assert "default-src 'none'" in csp and "connect-src 'none'" in csp and "unsafe-inline" not in csp.split(";")[1]
    scripts = SCRIPT.findall(doc)
    wanted = {"'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'" for s in scripts}
    assert set(re.findall(r"'sha256-[^']+'", csp)) == wanted


def test_static_figures_are_written_as_png_and_pdf_by_default(report):
    path, _ = report
    out = path.parent
    v2, a = file_slug("ImageNetV2"), file_slug("ImageNet-A")     # a shift's figure: its label's slug and hash
    for stem in (f"tiny/{v2}", f"tiny/{a}", "tiny/synthetic_vs_natural", "tiny/corruption_correlation",
                 "calibration"):
        assert (out / f"{stem}.png").read_bytes()[:8] == PNG, stem
        assert (out / f"{stem}.pdf").read_bytes()[:4] == PDF, stem
        assert not (out / f"{stem}.svg").exists(), "SVG only on request"
    assert not (out / "tiny" / f"{file_slug('ImageNet-Sketch')}.png").exists()      # no trend, no paper figure
    assert f'href="tiny/{v2}.pdf"' in report[1] and f'{v2}.svg"' not in report[1]
    assert "Static figures (PNG, PDF) and tables" in report[1]


def test_cli_figure_formats_asks_for_svg_and_rejects_an_unknown_format(tmp_path):
    csv = tiny_testbed().save(tmp_path / "mine.csv")
    res = CliRunner().invoke(cli.app, ["report", "--testbed", str(csv), "-o", str(tmp_path / "rep"),
                                       "--resamples", "20", "--figure-formats", "SVG, pdf"])
    assert res.exit_code == 0, res.output
    out, v2 = tmp_path / "rep" / "mine", file_slug("ImageNetV2")
    assert b"<svg" in (out / f"{v2}.svg").read_bytes()[:2000]
    assert (out / f"{v2}.pdf").read_bytes()[:4] == PDF and not (out / f"{v2}.png").exists()
    assert f'href="mine/{v2}.svg"' in (tmp_path / "rep" / "index.html").read_text()
    res = CliRunner().invoke(cli.app, ["report", "--testbed", str(csv), "-o", str(tmp_path / "bad"),
                                       "--figure-formats", "png,gif"])
    assert res.exit_code != 0 and "unknown format 'gif'" in str(res.exception)
    assert not (tmp_path / "bad").exists(), "refused before any work"
    res = CliRunner().invoke(cli.app, ["demo", "-o", str(tmp_path / "demo"), "--figure-formats", "eps"])
    assert res.exit_code != 0 and "unknown format 'eps'" in str(res.exception)
    assert not (tmp_path / "demo").exists(), "the demo refuses a typo before training anything"
    res = CliRunner().invoke(cli.app, ["report", "--testbed", str(csv), "-o", str(tmp_path / "none"),
                                       "--resamples", "20", "--figure-formats", "none"])
    assert res.exit_code == 0, res.output
    assert not list((tmp_path / "none").rglob("*.png")) and not list((tmp_path / "none").rglob("*.pdf"))


def test_tables_are_written_as_csv_markdown_and_latex(report):
    out = report[0].parent
    for stem in ("fits", "models", "synthetic_vs_natural", "corruption_correlation"):
        for ext in (".csv", ".md", ".tex"):
            assert (out / "tiny" / f"{stem}{ext}").stat().st_size > 50, (stem, ext)
    models = pd.read_csv(out / "tiny" / "models.csv", keep_default_na=False, na_values=[""])
    assert len(models) == 15 and {XSS, ODD} <= set(models["model"])
    # every shift's accuracy next to its effective robustness (the tiny testbed has no architecture etc.)
    assert list(models.columns) == ["model", "model_type", "val_acc", "acc_imagenetv2", "er_imagenetv2",
                                    "acc_imagenet-a", "er_imagenet-a", "er_synthetic"]
    md = (out / "tiny" / "models.md").read_text()
    assert "&lt;img src=x onerror=alert(1)&gt;" in md and "<img" not in md
    tex = (out / "tiny" / "models.tex").read_text()
    assert r"\begin{tabular}" in tex and r"\textless{}img src=x onerror=alert(1)\textgreater{}" in tex
    assert r"a\&b" in tex and r"100\%" in tex and r"(\%)" in tex
    cal = pd.read_csv(out / "calibration.csv")
    assert list(cal.columns) == ["model", "setting", "accuracy", "ece", "nll", "brier", "n_examples"] and len(cal) == 5


def test_synthetic_section_uses_the_papers_recipe_and_names_the_alternative(report):
    path, document = report
    text = section(markup(document), "tb-tiny-synthetic")
    assert "Recipe <code>taori2020</code>" in text and "Taori et al. 2020" in text
    assert "<code>per-setting</code> variant" in text and "--recipe per-setting" in text
    # the tiny testbed has in-memory ImageNet-C only: the recipe says what it computed without
    assert "fallback: testbed lacks" in text and "_on-disk" in text
    table = pd.read_csv(path.parent / "tiny" / "synthetic_vs_natural.csv")
    assert set(table["recipe"]) == {"taori2020"}
    res = sb.synthetic_vs_natural(tiny_testbed(), "taori2020", V2, fallback=True)
    shown = table.set_index("model")
    assert shown["in_correlation"].sum() == res.n == 7
    np.testing.assert_allclose(shown.loc[res.models, "synthetic_er"], res.table.loc[res.models, "synthetic_er"])
    assert f"Pearson r = {res.r:.2f}" in text
    models = pd.read_csv(path.parent / "tiny" / "models.csv", keep_default_na=False, na_values=[""]).set_index("model")
    np.testing.assert_allclose(models.loc[res.models, "er_synthetic"], res.table.loc[res.models, "synthetic_er"],
                               atol=0.006)       # the models table rounds to 2 digits


def test_synthetic_section_falls_back_to_per_setting_without_imagenet_c(tmp_path):
    tb = tiny_testbed("generic")
    frame = tb.accuracies.rename(columns={c: c.replace("imagenet-c.", "val+").replace("_in-memory", "")
                                          for c in CORRUPTIONS})
    sizes = tb.sizes.rename(columns={c: c.replace("imagenet-c.", "val+").replace("_in-memory", "")
                                     for c in CORRUPTIONS})
    generic = sb.Testbed(frame, sizes, tb.metadata, name="generic")
    path = write_html_report([generic], tmp_path / "out", n_resamples=20)
    text = section(markup(path.read_text(encoding="utf-8")), "tb-generic-synthetic")
    assert "Recipe <code>per-setting</code>" in text
    assert "Not the paper's recipe: <code>taori2020</code>" in text and "needs ImageNet-C settings" in text
    table = pd.read_csv(path.parent / "generic" / "synthetic_vs_natural.csv")
    assert set(table["recipe"]) == {"per-setting"}


def test_model_names_are_escaped_everywhere(report):
    _, doc = report
    assert "<img" not in doc                                  # not in markup, JSON or plotly data
    assert "onerror=alert(1)" in doc                         # ... but the name is there, escaped
    tags = markup(doc)
    assert "&lt;img src=x onerror=alert(1)&gt;" in tags       # top-5 tables, as text
    # plotly receives the name HTML-escaped, so it draws text, not a tag
    assert '"&lt;img src=x onerror=alert(1)&gt;"' in doc


def test_a_shift_with_too_few_models_shows_the_reason_and_the_rest_renders(report):
    _, doc = report
    sketch = section(doc, "tb-tiny-imagenet-sketch")
    assert 'class="sb-reason"' in sketch and "needs at least 3 models" in sketch and "STANDARD gave 2" in sketch
    assert "plotly-graph-div" in sketch                       # its points are still drawn
    for anchor in ("tb-tiny-imagenetv2", "tb-tiny-imagenet-a", "tb-tiny-models", "tb-tiny-synthetic", "calibration"):
        assert f'id="{anchor}"' in doc


def test_shifts_without_data_are_listed_not_drawn(report):
    _, doc = report
    assert "Not in this testbed: ObjectNet (no setting <code>val-on-objectnet-classes</code>)" in doc
    assert 'id="tb-tiny-objectnet"' not in doc


def test_imagenet_a_is_fitted_as_two_lines_split_at_resnet50(report):
    _, doc = report
    a = section(doc, "tb-tiny-imagenet-a")                  # the authors' recipe: resnet50 on the A classes
    assert "Two independent lines" in a and "resnet50&#x27;s in-distribution accuracy (86.10%)" in a
    assert "recipe taori2020: 7 models (STANDARD) in two lines" in a and "pivot: resnet50 86.10%" in a


def test_sections_without_data_are_absent(report, tmp_path):
    _, doc = report
    registered = list_sections()
    assert {"compositing", "resolution", "fine-tuning", "calibration", "synthetic"} <= set(registered)
    for title in ("Object compositing", "Resolution sweeps", "Fine-tuning trajectories"):
        assert title not in doc
    # without a store there is no calibration, and without corruptions no synthetic section
    tb = tiny_testbed().select(settings=["val", V2])
    bare = write_html_report([tb], tmp_path, n_resamples=20, figure_formats=()).read_text()
    assert 'id="calibration"' not in bare and "Synthetic vs natural" not in bare and "Calibration" not in bare
    assert not list(tmp_path.rglob("*.png"))


def test_each_testbed_can_have_its_own_shifts_and_progress_counts_every_step(tmp_path):
    tb = tiny_testbed()
    steps: list[str] = []
    shifts = {"tiny": [ShiftPair("V2 only", "val", V2)]}
    doc = write_html_report([tb], tmp_path, shifts=shifts, n_resamples=20, figure_formats=(),
                            on_step=steps.append).read_text()
    assert 'id="tb-tiny-v2-only"' in doc and "Not in this testbed" not in doc and 'id="tb-tiny-imagenet-a"' not in doc
    assert len(steps) == n_steps([tb], shifts) == 4
    steps.clear()
    write_html_report([tb], tmp_path, n_resamples=20, figure_formats=(), on_step=steps.append)
    assert len(steps) == n_steps([tb]) == 2 * len(NATURAL_SHIFTS) + 2


def test_synthetic_effective_robustness_is_the_mean_over_corruption_settings():
    tb = tiny_testbed()
    assert corruption_settings(tb) == {"fog": CORRUPTIONS[:2], "snow": CORRUPTIONS[2:]}
    syn = synthetic_effective_robustness(tb)
    ers = [sb.effective_robustness(tb, "val", s, n_resamples=0)["effective_robustness"] for s in CORRUPTIONS]
    np.testing.assert_allclose(syn["synthetic_er"], sum(ers) / 3)
    np.testing.assert_allclose(syn["fog"], (ers[0] + ers[1]) / 2)
    assert (syn["n_settings"] == 3).all()


def test_a_severity_with_a_gap_is_left_out_for_every_model_and_the_report_says_so(tmp_path):
    """more0 lacks fog severity 1 but has fog 2: fog 1 is a gap in the data, left out for all
    (more0 keeps its synthetic average); a model missing a whole corruption still gets NaN."""
    from shiftbench.analysis.synthetic import complete_severities
    from shiftbench.testbed import Testbed

    tb = tiny_testbed()
    acc = tb.accuracies.copy()
    acc.loc["more0", CORRUPTIONS[0]] = np.nan
    acc.loc["more1", CORRUPTIONS[2]] = np.nan                  # snow's only severity: not a gap
    gappy = Testbed(acc, tb.sizes, tb.metadata, name="gappy")
    kept, left_out = complete_severities(gappy, corruption_settings(gappy))
    assert left_out == [CORRUPTIONS[0]] and kept == {"fog": [CORRUPTIONS[1]], "snow": [CORRUPTIONS[2]]}
    syn = synthetic_effective_robustness(gappy)
    assert syn.attrs["left_out"] == [CORRUPTIONS[0]] and (syn.loc[syn.index != "more1", "n_settings"] == 2).all()
    assert np.isfinite(syn.at["more0", "synthetic_er"]) and np.isnan(syn.at["more1", "synthetic_er"])
    explicit = synthetic_effective_robustness(gappy, settings=corruption_settings(gappy))   # as asked
    assert np.isnan(explicit.at["more0", "synthetic_er"]) and explicit.attrs["left_out"] == []
    doc = write_html_report([gappy], tmp_path, n_resamples=20, figure_formats=()).read_text()
    assert "Left out as gaps in the data (1 setting)" in doc and CORRUPTIONS[0] in doc


@pytest.mark.parametrize("name", ["imagenet-reference", "timm-reference"])
def test_reference_testbed_report_is_under_15_mb(name, tmp_path):
    tb = sb.load_testbed(name)
    path = write_html_report([tb], tmp_path, n_resamples=50, figure_formats=())
    size = path.stat().st_size
    assert size < 15 * MB, f"{name}: {size / MB:.1f} MB"
    doc = path.read_text()
    notes = doc.count('<p class="sb-note">Data note: ')
    assert notes == (2 if name == "imagenet-reference" else 0)     # defective cells, corrected counts
    fitted = 9 if name == "imagenet-reference" else 4
    extra = 2 if name == "imagenet-reference" else 0           # synthetic scatter + per-corruption bars
    diagnostics = 2                                                # r2 heatmap + metric informativeness
    assert doc.count("Plotly.newPlot(") == doc.count('<div class="sb-plot">') == fitted + extra + diagnostics
    assert doc.count('class="sb-reason"') == 0


def test_cli_report_writes_index_html(tmp_path):
    csv = tiny_testbed().save(tmp_path / "mine.csv")
    store = calibration_store(tmp_path / "store")
    res = CliRunner().invoke(cli.app, ["report", "--testbed", str(csv), "-o", str(tmp_path / "rep"),
                                       "--resamples", "50"])
    assert res.exit_code == 0, res.output
    index = tmp_path / "rep" / "index.html"
    assert f"report: {index.resolve()}" in res.output
    doc = index.read_text()
    assert "mine (15 models)" in doc
    # --store next to --testbed: the store's models join the testbed, so cells that disagree with
    # the table are a one-line conflict; on a table without those models the report is written
    res = CliRunner().invoke(cli.app, ["report", "--testbed", str(csv), "--store", str(store),
                                       "-o", str(tmp_path / "rep2"), "--resamples", "50"])
    assert res.exit_code != 0 and "on_conflict=" in str(res.exception)
    renamed = tiny_testbed()
    renamed.accuracies.index = [f"table-{m}" for m in renamed.accuracies.index]
    renamed = type(renamed)(renamed.accuracies, renamed.sizes.set_axis(renamed.accuracies.index),
                            renamed.metadata.set_axis(renamed.accuracies.index), name="mine")
    csv = renamed.save(tmp_path / "mine.csv")
    res = CliRunner().invoke(cli.app, ["report", "--testbed", str(csv), "--store", str(store),
                                       "-o", str(tmp_path / "rep3"), "--resamples", "50"])
    assert res.exit_code == 0, res.output
    doc = (tmp_path / "rep3" / "index.html").read_text()
    assert 'id="calibration"' in doc and "Your models" in doc


def test_report_refuses_bad_input(tmp_path):
    with pytest.raises(ConfigError, match="at least one testbed"):
        write_html_report([], tmp_path)
    with pytest.raises(ConfigError, match="no results store"):
        write_html_report([tiny_testbed()], tmp_path, store=tmp_path / "nope")
    with pytest.raises(ConfigError, match="scale"):
        write_html_report([tiny_testbed()], tmp_path, scale="logti")
    with pytest.raises(ConfigError, match="figure format"):
        write_html_report([tiny_testbed()], tmp_path, figure_formats=(".jpg",))
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        write_html_report([tiny_testbed()], tmp_path / "file")
    res = CliRunner().invoke(cli.app, ["report", "--testbed", "imagenet-refrence", "-o", str(tmp_path / "r")])
    assert res.exit_code != 0 and isinstance(res.exception, ConfigError) and "did you mean" in str(res.exception)


def test_cli_a_second_report_copies_the_first_reports_figures_and_shiftbench_cache_shows_them(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    monkeypatch.setenv("SHIFTBENCH_CACHE_DIR", str(shared))
    csv = tiny_testbed().save(tmp_path / "mine.csv")

    def report(out: str, *extra: str):
        res = CliRunner().invoke(cli.app, ["report", "--testbed", str(csv), "-o", str(tmp_path / out),
                                           "--resamples", "20", "--figure-formats", "png", *extra])
        assert res.exit_code == 0, res.output

    report("first")
    res = CliRunner().invoke(cli.app, ["cache"])
    assert res.exit_code == 0 and str(shared) in res.output
    n = len(list((shared / "figures").glob("*.png")))
    assert n >= 3 and f"{n} figure files" in res.output
    # a figure the first report drew is copied, byte for byte, not drawn again
    entry = next(p for p in (shared / "figures").glob("*.png")
                 if p.read_bytes() == (tmp_path / "first" / "mine" / f"{file_slug('ImageNetV2')}.png").read_bytes())
    entry.write_bytes(entry.read_bytes() + b"copied")
    report("second")
    assert (tmp_path / "second" / "mine" / f"{file_slug('ImageNetV2')}.png").read_bytes().endswith(b"copied")
    assert len(list((shared / "figures").glob("*.png"))) == n           # nothing new to keep
    report("third", "--no-cache")
    assert not (tmp_path / "third" / "mine" / f"{file_slug('ImageNetV2')}.png").read_bytes().endswith(b"copied")
    kept = len(list(shared.glob("*/*")))
    res = CliRunner().invoke(cli.app, ["cache", "--clear"])
    assert res.exit_code == 0 and f"removed {kept} entries" in res.output
    assert not list(shared.glob("*/*"))
    monkeypatch.setenv("SHIFTBENCH_CACHE_DIR", "off")
    res = CliRunner().invoke(cli.app, ["cache"])
    assert res.exit_code == 0 and "off" in res.output
