"""Stored sweeps in the report and on the command line: the "Resolution sweeps" and "Object
compositing" sections appear only when the store holds such studies and show their numbers;
``shiftbench resolution-sweep`` / ``composite`` run real EfficientNet-Lite0 weights on real
scikit-image photos (an espresso cut out of ``coffee`` pasted onto ``grass`` and ``brick``)."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image, ImageDraw
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from report_testbed import XSS, tiny_testbed  # noqa: E402
from shiftbench import cli  # noqa: E402
from shiftbench.datasets import classmaps as cm  # noqa: E402
from shiftbench.report import write_html_report  # noqa: E402
from shiftbench.studies.compositing import compositing_study, heatmap_from_study  # noqa: E402
from shiftbench.studies.resolution import resolution_sweep  # noqa: E402
from shiftbench.report.tables import file_slug  # noqa: E402
from shiftbench.store import Store  # noqa: E402
from shiftbench.studies import study_name  # noqa: E402

PHOTOS = (("chelsea", 285), ("coffee", 967), ("rocket", 657))  # Egyptian cat, espresso, missile
ESPRESSO = 967


def section(doc: str, key: str) -> str | None:
    """The HTML of the report section with id ``key`` (None if absent)."""
    m = re.search(rf'<section class="sb-section" id="{key}">(.*?)</section>', doc, re.S)
    return m.group(1) if m else None


def report(tmp: Path, store: Path | None) -> str:
    path = write_html_report([tiny_testbed()], tmp, store=store, shifts=[], figure_formats=(".png",))
    return path.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> dict:
    """Real photos in the ImageNet val layout, an espresso composite spec, and a store holding a
    resolution sweep and a compositing study of efficientnet-lite0 on them."""
    from skimage import data as sk

    root = tmp_path_factory.mktemp("real")
    wnids = cm.imagenet_wnids()
    for name, cls in PHOTOS:
        d = root / "data" / "imagenet" / "val" / wnids[cls]
        d.mkdir(parents=True)
        Image.fromarray(getattr(sk, name)()[..., :3]).save(d / f"{name}.JPEG", quality=95)
    comp = root / "comp"
    (comp / "fg").mkdir(parents=True)
    (comp / "bg").mkdir()
    Image.fromarray(sk.coffee()).save(comp / "fg" / "espresso.jpg", quality=95)
    mask = Image.new("L", (600, 400), 0)
    ImageDraw.Draw(mask).ellipse((78, 62, 480, 392), fill=255)  # the cup on its saucer
    mask.save(comp / "fg" / "espresso_mask.png")
    for name in ("grass", "brick"):
        Image.fromarray(getattr(sk, name)()).convert("RGB").save(comp / "bg" / f"{name}.jpg", quality=95)
    spec = {"name": "espresso", "backgrounds": "bg", "sizes": [0.05, 0.5], "locations": [[0.3, 0.5], [0.7, 0.5]],
            "foregrounds": [{"image": "fg/espresso.jpg", "mask": "fg/espresso_mask.png", "class_id": ESPRESSO}]}
    (comp / "spec.json").write_text(json.dumps(spec))
    store = root / "store"
    sweep = resolution_sweep("efficientnet-lite0", "val", (64, 224, 320), data_root=root / "data", store=store,
                             partial=True, workers=0, batch_size=4)
    study = compositing_study("efficientnet-lite0", comp / "spec.json", store=store, workers=0, batch_size=8)
    return {"root": root, "store": store, "sweep": sweep, "study": study, "spec": comp / "spec.json"}


# ---------------------------------------------------------------------------- real data
def test_real_photos_are_recognised_better_at_higher_resolution(real):
    sweep = real["sweep"].set_index("resolution")
    # 64 px loses every photo; at 320 px (above the native 224) the cat, the espresso and the rocket are right
    assert sweep.loc[64, "accuracy"] < sweep.loc[224, "accuracy"] <= sweep.loc[320, "accuracy"]
    assert sweep.loc[64, "accuracy"] == 0.0 and sweep["n_examples"].tolist() == [3, 3, 3]
    assert (sweep["native_resolution"] == 224).all() and real["sweep"].attrs["best_resolution"] != 64
    stored = Store(real["store"]).read_study("resolution", study_name("efficientnet-lite0", "val"))
    assert stored["accuracy"].tolist() == real["sweep"]["accuracy"].tolist()


def test_real_espresso_composites_are_recognised_when_large(real):
    study = real["study"]
    size = study[study["factor"] == "size"].set_index("value")["accuracy"]
    assert size[0.5] > size[0.05] and size[0.5] >= 50
    assert study.attrs["n_examples"] == 8
    preds = Store(real["store"]).read_predictions(study.attrs["key"]).set_index("id")
    big = [i for i in preds.index if "size=0.5/" in i]
    assert any(preds.loc[i, "pred"] == ESPRESSO for i in big)


def test_sections_show_the_real_stored_numbers(real, tmp_path):
    doc = report(tmp_path / "rep", real["store"])
    res, comp = section(doc, "resolution"), section(doc, "compositing")
    assert res is not None and comp is not None
    assert "Resolution sweeps" in res and "efficientnet-lite0" in res
    for acc in real["sweep"]["accuracy"]:
        assert f">{acc:.2f}<" in res
    table = pd.read_csv(tmp_path / "rep" / "resolution" / f"{file_slug('val')}.csv")
    assert table["accuracy"].tolist() == pytest.approx(real["sweep"]["accuracy"].tolist(), abs=0.01)
    assert table.loc[table["native"], "resolution"].tolist() == [224]
    assert "espresso" in comp and comp.count("Plotly.newPlot(") == 3  # size, rotation, one location map
    assert f">{real['study'].attrs['accuracy']:.2f}<" in comp
    assert (tmp_path / "rep" / "compositing" / f"{file_slug('espresso')}.png").read_bytes()[:4] == b"\x89PNG"


# ---------------------------------------------------------------------------- hand-made studies
def test_sections_are_left_out_without_studies(tmp_path):
    empty = tmp_path / "store"
    Store(empty).write_study("trajectory", "x", pd.DataFrame({"step": [0], "accuracy": [1.0]}))
    for store in (None, empty):
        doc = report(tmp_path / f"rep-{store is None}", store)
        assert section(doc, "resolution") is None and section(doc, "compositing") is None
        assert "Resolution sweeps" not in doc and "Object compositing" not in doc


def sweep_rows(model: str, accs: list[float], native: int = 128, errors: dict | None = None) -> pd.DataFrame:
    res = [64, 128, 256]
    errors = errors or {}
    acc = [np.nan if r in errors else a for r, a in zip(res, accs)]
    best = int(np.nanargmax(acc))
    return pd.DataFrame({"model": [f"{model}@res{r}" for r in res], "resolution": res, "input_size": res,
                         "resize": res, "crop_pct": 1.0, "accuracy": acc, "top5": acc, "n_examples": 10,
                         "best": [i == best for i in range(3)], "error": [errors.get(r) for r in res],
                         "base_model": model, "setting": "val", "native_resolution": native,
                         "adjust_resize_ratio": False})


def test_resolution_section_marks_best_and_native_and_shows_why_a_resolution_failed(tmp_path):
    store = Store(tmp_path / "store")
    store.write_study("resolution", "cnn__val", sweep_rows("cnn", [20.0, 40.0, 55.5]))
    store.write_study("resolution", "vit__val", sweep_rows(XSS, [0, 61.25, 0], errors={
        64: "RuntimeError: Input height (64) doesn't match model (128).",
        256: "RuntimeError: Input height (256) doesn't match model (128)."}))
    doc = report(tmp_path / "rep", tmp_path / "store")
    html = section(doc, "resolution")
    assert html is not None and XSS not in html and "&lt;img src=x" in html
    # one line per failing model: its failed resolutions and the first reason
    assert "Not run at every resolution" in html
    assert "at 64, 256 px: RuntimeError: Input height (64) doesn&#x27;t match model (128).</li>" in html
    rows = re.findall(r"<tr>(.*?)</tr>", html)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", r) for r in rows]
    # per model, shown: its native and its best resolution with their top-1
    assert ["cnn", "128 px: 40.00%", "256 px: 55.50%"] in cells
    assert html.index("<details><summary>Every model at every resolution (4 rows)") > html.index("256 px: 55.50%")
    cells = [c for c in cells if len(c) == 8]   # folded: every (model, resolution) that ran
    cnn = [c for c in cells if c and c[0] == "cnn"]
    # model, resolution, resize, top-1, top-5, examples, best, native
    assert [c[1] for c in cnn] == ["64", "128", "256"] and [c[3] for c in cnn] == ["20.00", "40.00", "55.50"]
    assert [c[6] for c in cnn] == ["", "", "★"] and [c[7] for c in cnn] == ["", "○", ""]
    assert [c[1] for c in cells if c and "img src" in c[0]] == ["128"]     # failed rows only in the CSV
    assert doc.count("Plotly.newPlot(") == 1
    table = pd.read_csv(tmp_path / "rep" / "resolution" / f"{file_slug('val')}.csv")
    assert table["error"].notna().sum() == 2 and table["accuracy"].isna().sum() == 2


def test_compositing_section_renders_size_rotation_and_the_normalised_map(tmp_path):
    rows = [("size", 0.1, "0.1", np.nan, np.nan, 25.0, 8, np.nan),
            ("size", 0.4, "0.4", np.nan, np.nan, 75.0, 8, np.nan),
            ("rotation", 0.0, "0", np.nan, np.nan, 62.5, 8, np.nan),
            ("rotation", 90.0, "90", np.nan, np.nan, 37.5, 8, np.nan),
            ("location", np.nan, "0.25,0.25", 0.25, 0.25, 50.0, 4, 0.5),
            ("location", np.nan, "0.75,0.25", 0.75, 0.25, 100.0, 4, 1.0),
            ("location", np.nan, "0.25,0.75", 0.25, 0.75, 25.0, 4, 0.25),
            ("location", np.nan, "0.75,0.75", 0.75, 0.75, 25.0, 4, 0.25)]
    frame = pd.DataFrame(rows, columns=["factor", "value", "label", "x", "y", "accuracy", "n", "normalised"])
    frame.insert(0, "setting", "composite:spec.json")
    frame.insert(0, "dataset", "mini")
    frame.insert(0, "spec", "spec.json")
    frame.insert(0, "model", "cnn")
    Store(tmp_path / "store").write_study("compositing", "cnn__mini", frame, {"accuracy": 50.0, "n_examples": 16})
    heat = heatmap_from_study(frame)
    assert heat.to_numpy().tolist() == [[0.5, 1.0], [0.25, 0.25]]  # rows y (down), columns x
    doc = report(tmp_path / "rep", tmp_path / "store")
    html = section(doc, "compositing")
    assert html is not None and "<h3>mini</h3>" in html
    assert ">50.00<" in html and ">16<" in html            # the overall accuracy from the study's metadata
    assert ">25.00<" in html and ">75.00<" in html and ">62.50<" in html and ">37.50<" in html
    assert html.count("Plotly.newPlot(") == 3 and '"z":[[0.5,1.0],[0.25,0.25]]' in html
    # size and rotation side by side; the numbers per factor value fold under the per-model accuracies
    assert html.count('class="sb-pair"') == 2 and "<details><summary>Top-1 % per size and rotation (4 rows)" in html
    table = pd.read_csv(tmp_path / "rep" / "compositing" / f"{file_slug('mini')}.csv")
    assert table.loc[table["factor"] == "location", "normalised"].tolist() == [0.5, 1.0, 0.25, 0.25]


def test_static_compositing_figure_is_two_rows_a_page_holds(tmp_path):
    """Five models: the curves with one legend beside them, then five maps on one colour scale
    with one colour bar; about 13 inches wide (one row of 7 panels was 29)."""
    import matplotlib.pyplot as plt

    from shiftbench.report.section_compositing import plot_compositing

    rows = []
    for i in range(5):
        for factor, values in (("size", (0.1, 0.4)), ("rotation", (0.0, 90.0))):
            rows += [(f"model-{i}", factor, v, f"{v:g}", np.nan, np.nan, 30.0 + 10 * k + i, 8, np.nan)
                     for k, v in enumerate(values)]
        rows += [(f"model-{i}", "location", np.nan, f"{x},{y}", x, y, 50.0, 4, 0.5 + i * (x + y) / 4)
                 for x in (0.25, 0.75) for y in (0.25, 0.75)]
    frame = pd.DataFrame(rows, columns=["model", "factor", "value", "label", "x", "y", "accuracy", "n", "normalised"])
    fig = plot_compositing(frame, title="t")
    width, height = fig.get_size_inches()
    assert width <= 14 and height <= 7.5
    maps = [ax for ax in fig.axes if ax.images]
    assert len(maps) == 5 and len({im.get_clim() for ax in maps for im in ax.images}) == 1   # one colour scale
    bars = [ax for ax in fig.axes if ax.get_ylabel() == "accuracy / its 95th percentile"]
    assert len(bars) == 1                                                                     # one colour bar
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert len(legends) == 1 and [t.get_text() for t in legends[0].get_texts()] == [f"model-{i}" for i in range(5)]
    fig.canvas.draw()
    curves = [ax for ax in fig.axes if ax.lines]
    box = legends[0].get_window_extent()
    assert all(box.x0 >= ax.get_window_extent().x1 for ax in curves)                          # beside, not over
    plt.close(fig)


# ---------------------------------------------------------------------------- CLI
def test_cli_sweep_and_composite_print_the_stored_results_and_report_shows_them(real, tmp_path):
    runner = CliRunner()
    res = runner.invoke(cli.app, ["resolution-sweep", "--model", "efficientnet-lite0", "--setting", "val",
                                  "--resolutions", "64,224,320", "--store", str(real["store"]), "--data-root",
                                  str(real["root"] / "data"), "--partial"])
    assert res.exit_code == 0, (res.output, res.exception)
    line224 = next(line for line in res.stdout.splitlines() if line.startswith("│ 224"))
    assert "native" in line224 and f"{real['sweep'].set_index('resolution').loc[224, 'accuracy']:.2f}" in line224
    assert f"study {study_name('efficientnet-lite0', 'val')!r}" in res.stdout
    res = runner.invoke(cli.app, ["composite", "--model", "efficientnet-lite0", "--spec", str(real["spec"]),
                                  "--store", str(real["store"])])
    assert res.exit_code == 0, (res.output, res.exception)
    assert f"top-1 {real['study'].attrs['accuracy']:.2f}% over 8 images" in res.stdout
    assert "location map" in res.stdout and "brick" in res.stdout
    assert Store(real["store"]).study_names("compositing") == [study_name("efficientnet-lite0", "espresso")]  # replaced
    csv = tiny_testbed().save(tmp_path / "mine.csv")
    res = runner.invoke(cli.app, ["report", "--testbed", str(csv), "--store", str(real["store"]), "-o",
                                  str(tmp_path / "rep"), "--resamples", "20"])
    assert res.exit_code == 0, res.output
    doc = (tmp_path / "rep" / "index.html").read_text()
    assert section(doc, "resolution") is not None and section(doc, "compositing") is not None


def test_cli_rejects_bad_resolutions():
    res = CliRunner().invoke(cli.app, ["resolution-sweep", "--model", "efficientnet-lite0", "--setting", "val",
                                       "--resolutions", "64,big"])
    message = " ".join(res.output.replace("│", " ").split())
    assert res.exit_code == 2 and "positive integers separated by commas" in message
