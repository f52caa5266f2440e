"""save_figure_formats (shiftbench.report.figures): one layout draw for every format's tight box,
and each file as ``fig.savefig(path, bbox_inches="tight")`` writes it - the PNG, when the tight
box lies inside the canvas, cut from that first draw along whole pixels (at most 2 px wider and
taller than savefig's, the same drawing; byte for byte savefig with the snapped box).

Real report figures: the ImageNetV2 trend of the reference testbed (``plot_trend`` with
``analyse_shift``), ``plot_calibration`` and ``plot_similarity_matrices``. SVG and PDF embed a
random id salt and the date, so the byte comparisons pin ``svg.hashsalt`` and
``SOURCE_DATE_EPOCH``; the page sizes are compared without them. SVG coordinates are written
to 6 decimals and a clip path's id is a hash of the clip rectangle's floats, and their last bits
can depend on what the figure drew before (the per-format layout draw at 72 dpi is what is no
longer done): SVGs are compared with clip ids blanked and numbers within 1e-5 pt.
"""
from __future__ import annotations

import os
import pickle
import re

os.environ.setdefault("MPLBACKEND", "Agg")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import shiftbench  # noqa: E402
from shiftbench.analysis.similarity import model_similarity  # noqa: E402
from shiftbench.report.figures import FORMATS, _tight_boxes, plot_calibration, plot_trend, save_figure_formats  # noqa: E402
from shiftbench.report.shifts import NATURAL_SHIFTS, analyse_shift  # noqa: E402
from shiftbench.report.similarity_figures import plot_similarity_matrices  # noqa: E402


@pytest.fixture(scope="module")
def trend_figure():
    tb = shiftbench.load_testbed("imagenet-reference")
    shift = NATURAL_SHIFTS[0]
    a = analyse_shift(tb, shift, n_resamples=100)
    return lambda: plot_trend(tb, shift.x, shift.y, fit=a.fit, band=a.band, title=shift.label)


def calibration_figure():
    rng = np.random.default_rng(0)
    rows = pd.DataFrame({"setting": np.repeat(["val", "v2", "sketch"], 30),
                         "accuracy": rng.uniform(30, 90, 90), "ece": rng.uniform(0, 15, 90)})
    return plot_calibration(rows)


def similarity_figure():
    rng = np.random.default_rng(0)
    return plot_similarity_matrices(model_similarity(rng.random((20, 500)) < np.linspace(0.2, 0.9, 20)[:, None]))


@pytest.fixture(params=["trend", "calibration", "similarity"])
def make_figure(request, trend_figure):
    return {"trend": trend_figure, "calibration": calibration_figure, "similarity": similarity_figure}[request.param]


@pytest.fixture
def deterministic_vectors(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    with matplotlib.rc_context({"svg.hashsalt": "shiftbench"}):
        yield


def old_way(fig, stem):
    """What save_figure_formats did before: matplotlib computes the tight box per format."""
    paths = [stem.with_name(stem.name + ext) for ext in FORMATS]
    for path in paths:
        fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return paths


NUMBER = re.compile(r"-?\d+\.\d+")


def pixels(path):
    from PIL import Image

    return np.asarray(Image.open(path)).astype(int)


def same_png(new, old):
    """Byte-identical, or cut from the first draw: at most 2 px wider and taller than ``old``
    (savefig's tight box, rounded down to pixels), and at the best whole-pixel alignment the same
    drawing shifted by under a pixel (mean difference under 2 of 255 levels)."""
    if new.read_bytes() == old.read_bytes():
        return True
    a, b = pixels(new), pixels(old)
    dh, dw = a.shape[0] - b.shape[0], a.shape[1] - b.shape[1]
    if not (0 <= dh <= 2 and 0 <= dw <= 2):
        return False
    return min(np.abs(a[i:i + b.shape[0], j:j + b.shape[1]] - b).mean()
               for i in range(dh + 1) for j in range(dw + 1)) < 2


def same_file(new, old):
    """Byte-identical, or for SVG: the same text with clip ids blanked and numbers within 1e-5,
    for PNG :func:`same_png`."""
    if new.suffix == ".png":
        return same_png(new, old)
    if new.suffix != ".svg":
        return new.read_bytes() == old.read_bytes()
    a, b = (re.sub(r'(clip-path="url\(#|<clipPath id=")p[0-9a-f]+', r"\1p", p.read_text()) for p in (new, old))
    if NUMBER.split(a) != NUMBER.split(b):
        return False
    return np.allclose(np.array(NUMBER.findall(a), float), np.array(NUMBER.findall(b), float), rtol=0, atol=1e-5)


def page_size_pt(path):
    """(width, height) in points of an SVG or a single-page PDF written by matplotlib."""
    text = path.read_bytes().decode("latin-1")
    if path.suffix == ".svg":
        m = re.search(r'<svg[^>]*width="([\d.]+)pt" height="([\d.]+)pt"', text)
        return float(m[1]), float(m[2])
    m = re.search(r"/MediaBox \[\s*0 0 ([\d.]+) ([\d.]+)\s*\]", text)
    return float(m[1]), float(m[2])


def test_every_format_matches_savefig_tight_and_the_figure_is_closed(make_figure, tmp_path, deterministic_vectors):
    old = old_way(make_figure(), tmp_path / "old")
    fig = make_figure()
    new = save_figure_formats(fig, tmp_path / "new")
    assert new == [tmp_path / f"new{ext}" for ext in FORMATS]
    assert all(p.stat().st_size > 0 for p in new), "every format is written"
    assert not plt.fignum_exists(fig.number), "the figure is closed afterwards"
    for o, n in zip(old, new):
        if n.suffix == ".png":
            assert same_png(n, o), "PNG is savefig(bbox_inches='tight')'s drawing"
        else:
            assert page_size_pt(n) == pytest.approx(page_size_pt(o), abs=1.0)
            assert same_file(n, o), f"{n.suffix} differs from savefig(bbox_inches='tight')"


def test_page_sizes_agree_without_pinned_ids_or_dates(trend_figure, tmp_path):
    old = old_way(trend_figure(), tmp_path / "old")
    new = save_figure_formats(trend_figure(), tmp_path / "new")
    assert same_png(new[0], old[0])
    for o, n in zip(old[1:], new[1:]):
        assert page_size_pt(n) == pytest.approx(page_size_pt(o), abs=1.0)


def test_vector_formats_get_their_own_tight_box(trend_figure):
    """The vector renderers measure text at 72 dpi without hinting, so their tight box is not
    Agg's (a few points wider or narrower on the trend figure): each format keeps its own."""
    fig = trend_figure()
    boxes = _tight_boxes(fig, list(FORMATS))
    plt.close(fig)
    assert set(boxes) == set(FORMATS)
    assert boxes[".svg"].width == pytest.approx(boxes[".pdf"].width, abs=1 / 72)


@pytest.mark.parametrize("formats", [[".svg", ".pdf"], [".PDF", ".png"], [".png"]])
def test_any_subset_and_order_of_formats(formats, tmp_path, deterministic_vectors):
    old = [tmp_path / f"old{ext.lower()}" for ext in formats]
    fig = calibration_figure()
    for path in old:
        fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    new = save_figure_formats(calibration_figure(), tmp_path / "new", formats)
    assert [p.suffix for p in new] == [ext.lower() for ext in formats]
    assert all(same_file(n, o) for n, o in zip(new, old))


def test_an_unpickled_figure_as_the_background_writer_saves_it(tmp_path, deterministic_vectors):
    """FigureWriter's worker saves unpickled figures, whose canvas is a bare FigureCanvasBase."""
    blob = pickle.dumps(calibration_figure())
    old = old_way(pickle.loads(blob), tmp_path / "old")  # noqa: S301 - our own figure
    new = save_figure_formats(pickle.loads(blob), tmp_path / "new")  # noqa: S301 - as above
    assert all(same_file(n, o) for n, o in zip(new, old))


def test_a_figure_with_a_layout_engine_is_saved_per_format(tmp_path):
    fig, ax = plt.subplots(figsize=(3, 2), layout="constrained")
    ax.plot([0, 1], [1, 0])
    ax.set_title("constrained")
    assert _tight_boxes(fig, list(FORMATS)) is None
    old = old_way(fig, tmp_path / "old")
    fig, ax = plt.subplots(figsize=(3, 2), layout="constrained")
    ax.plot([0, 1], [1, 0])
    ax.set_title("constrained")
    new = save_figure_formats(fig, tmp_path / "new")
    assert new[0].read_bytes() == old[0].read_bytes()
    assert not plt.fignum_exists(fig.number)


def small_figure(outside: bool = False):
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1], [1, 0], label="line")
    ax.set_title("a small figure")
    fig.tight_layout()                              # leaves a placeholder layout engine
    if outside:                                     # a label past the right edge: the tight box leaves the canvas
        fig.text(1.02, 0.5, "outside the canvas")
    return fig


@pytest.mark.parametrize("outside, n_draws", [(False, 3), (True, 4)])
def test_three_formats_draw_the_figure_three_or_four_times_and_keep_its_layout_placeholder(
        monkeypatch, tmp_path, outside, n_draws):
    """Inside the canvas the PNG is cut from the layout draw (3 draws for 3 formats, not 6);
    a tight box past the canvas's edge needs savefig's own PNG draw (4)."""
    from matplotlib.figure import Figure
    from matplotlib.layout_engine import PlaceHolderLayoutEngine

    draws = []
    real_draw = Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda self, renderer: draws.append(type(renderer).__name__)
                        or real_draw(self, renderer))
    old = old_way(small_figure(outside), tmp_path / "old")
    assert len(draws) == 6, draws
    draws.clear()
    fig = small_figure(outside)
    placeholder = fig.get_layout_engine()
    assert isinstance(placeholder, PlaceHolderLayoutEngine)
    new = save_figure_formats(fig, tmp_path / "new")
    assert len(draws) == n_draws, draws
    assert fig.get_layout_engine() is placeholder
    if outside:
        assert new[0].read_bytes() == old[0].read_bytes(), "past the canvas: savefig's own PNG"
    else:
        assert same_png(new[0], old[0])


@pytest.mark.parametrize("make", [small_figure, similarity_figure])
def test_a_png_cut_from_the_first_draw_is_savefig_with_its_whole_pixel_box(make, tmp_path):
    """The cut is savefig(bbox_inches=box) for the tight box widened to whole pixels (equal to one
    level in 255: Agg's antialiasing rounds a few edge pixels differently at another offset)."""
    fig = make()
    tight = _tight_boxes(fig, list(FORMATS))[".png"]
    plt.close(fig)
    fig = make()
    boxes = _tight_boxes(fig, list(FORMATS), tmp_path / "cut.png")
    plt.close(fig)
    box, dpi = boxes["written"], fig.dpi
    assert boxes[".png"] is box
    for a, b in ((box.x0, tight.x0), (box.y0, tight.y0)):
        assert b - 1 / dpi - 1e-9 <= a <= b + 1e-9, "widened outwards by under a pixel"
    for a, b in ((box.x1, tight.x1), (box.y1, tight.y1)):
        assert b - 1e-9 <= a <= b + 1 / dpi + 1e-9, "widened outwards by under a pixel"
    fig = make()
    fig.savefig(tmp_path / "savefig.png", bbox_inches=box)
    plt.close(fig)
    a, b = pixels(tmp_path / "cut.png"), pixels(tmp_path / "savefig.png")
    assert a.shape == b.shape
    assert np.abs(a - b).max() <= 1
