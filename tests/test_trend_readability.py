"""Trend figures readable at a glance (issue 21): the axes zoom on the models that matter with the
rest one click (HTML) or one panel (static) away, the fitted-on models on top, a colour and marker
per model type, emphasised highlighted models with labels that do not overlap, legends outside
the plot, titles clear of the modebar, and a light form for dense testbeds."""
from __future__ import annotations

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.container import ErrorbarContainer  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

import shiftbench as sb  # noqa: E402
from shiftbench.analysis.placement import NATURAL_SHIFTS, fit_shift  # noqa: E402
from shiftbench.analysis.scaling import transform  # noqa: E402
from shiftbench.report import plot_trend  # noqa: E402
from shiftbench.report.figures import (  # noqa: E402
    HIGHLIGHT_LABEL, STAR_SIZE, TYPE_STYLE, trend_views, type_looks)
from shiftbench.report.interactive import POINT_PX, STAR_PX, trend_figure, type_styles  # noqa: E402

V2 = "imagenetv2-matched-frequency-format-val"
V2_SHIFT = next(s for s in NATURAL_SHIFTS if s.label == "ImageNetV2")
OBJECTNET = next(s for s in NATURAL_SHIFTS if s.label == "ObjectNet")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def ref() -> sb.Testbed:
    return sb.load_testbed("imagenet-reference")


@pytest.fixture(scope="module")
def v2_fit(ref):
    return fit_shift(ref, V2_SHIFT)


def x_pct(lim: tuple[float, float]) -> tuple[float, float]:
    from shiftbench.analysis.scaling import inverse

    return float(inverse(lim[0], "logit")), float(inverse(lim[1], "logit"))


# --------------------------------------------------------------------------- the zoom rule
def test_the_zoom_starts_at_the_least_accurate_fitted_model_and_leaves_the_low_accuracy_cnns_out(ref, v2_fit):
    frame, _ = ref.paired("val", V2)
    xs, ys = transform(frame["x_acc"], "logit", frame["x_n"]), transform(frame["y_acc"], "logit", frame["y_n"])
    full, zoom, inside = trend_views(xs, ys, v2_fit)
    lo, hi = x_pct((zoom.x_lo, zoom.x_hi))
    assert 50 < lo < v2_fit.x_range[0] <= 57 and 88 < hi < 93                # about 55-90%, as in the issue
    assert x_pct((full.x_lo, full.x_hi))[0] < 1                             # all models: down to chance
    low = (frame["model_type"] == "LOW_ACCURACY_CNN").to_numpy()
    assert (~inside[low]).mean() > 0.9 and inside[(frame["model_type"] == "STANDARD").to_numpy()].all()
    # a highlighted model below the fitted range pulls the zoom down to it
    keep = frame.index == frame["x_acc"].idxmin()
    assert trend_views(xs, ys, v2_fit, keep)[1] == full


def test_static_figure_zooms_and_shows_every_model_in_a_second_panel_with_the_zoom_marked(ref, v2_fit):
    fig = plot_trend(ref, "val", V2, fit=v2_fit, n_resamples=0)
    ax, overview = fig.axes
    lo, hi = x_pct(ax.get_xlim())
    assert 50 < lo < 57 and hi < 93
    assert x_pct(overview.get_xlim())[0] < 1
    (box,) = [p for p in overview.patches if isinstance(p, Rectangle)]
    assert box.get_x() == pytest.approx(ax.get_xlim()[0]) and box.get_width() == pytest.approx(np.ptp(ax.get_xlim()))
    n = sum(len(c.get_offsets()) for c in overview.collections)
    assert n == len(ref.paired("val", V2)[0])
    assert x_pct(plot_trend(ref, "val", V2, fit=v2_fit, n_resamples=0, zoom=False).axes[0].get_xlim())[0] < 1


def test_html_figure_zooms_by_default_and_one_button_shows_all_models(ref, v2_fit):
    frame, _ = ref.paired("val", V2)
    fig = trend_figure(frame, x="val", y=V2, title="V2", fit=v2_fit)
    lo, hi = x_pct(fig.layout.xaxis.range)
    assert 50 < lo < 57 and hi < 93
    (menu,) = fig.layout.updatemenus
    zoom, every = menu.buttons
    assert "models that matter" in zoom.label and every.label.startswith(f"all {len(frame)} models")
    assert list(zoom.args[0]["xaxis.range"]) == list(fig.layout.xaxis.range)
    assert x_pct(every.args[0]["xaxis.range"])[0] < 1
    ticks = every.args[0]["xaxis.ticktext"]
    assert ticks[0] in ("0.01%", "0.05%", "0.1%", "0.5%") and len(ticks) == len(every.args[0]["xaxis.tickvals"])
    # no zoom asked, or nothing left out: no buttons
    assert not trend_figure(frame, x="val", y=V2, title="V2", fit=v2_fit, zoom=False).layout.updatemenus
    assert not trend_figure(frame, x="val", y=V2, title="V2").layout.updatemenus


# --------------------------------------------------------------------------- draw order and styles
def test_fitted_on_models_are_drawn_after_every_other_type(ref, v2_fit):
    frame, _ = ref.paired("val", V2)
    fig = trend_figure(frame, x="val", y=V2, title="V2", fit=v2_fit, highlight=["resnet50"])
    markers = [t.name for t in fig.data if t.mode == "markers"]
    assert markers[-2].startswith(TYPE_STYLE["STANDARD"][1]) and markers[-1] == HIGHLIGHT_LABEL
    std = next(t for t in fig.data if t.name.startswith(TYPE_STYLE["STANDARD"][1]))
    assert std.legendrank < min(t.legendrank for t in fig.data if t.mode == "markers" and t is not std)
    ax = plot_trend(ref, "val", V2, fit=v2_fit, n_resamples=0).axes[0]
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert bars[-1].get_label().startswith(TYPE_STYLE["STANDARD"][1])
    std_z = bars[-1].lines[0].get_zorder()
    assert all(c.lines[0].get_zorder() < std_z for c in bars[:-1])


def test_no_two_model_types_share_a_colour_and_marker():
    types = [*TYPE_STYLE, "RANDOM_FEATURES", "RANDOM_FORESTS", "LINEAR_PIXELS", "NEAREST_NEIGHBORS",
             *[f"EXTRA_{i}" for i in range(30)]]
    looks = type_looks(types)
    assert len(looks) == len(types)
    pairs = [(lk.colour.lower(), lk.marker) for lk in looks.values()]
    assert len(set(pairs)) == len(pairs)
    # the four published baselines no longer share one colour
    assert len({looks[t].colour for t in ("RANDOM_FEATURES", "RANDOM_FORESTS", "LINEAR_PIXELS", "NEAREST_NEIGHBORS")}) == 4
    assert set(type_styles(types)) == set(types)


def test_each_type_has_its_own_marker_in_both_renderers(ref, v2_fit):
    frame, _ = ref.paired("val", V2)
    fig = trend_figure(frame, x="val", y=V2, title="V2", fit=v2_fit)
    pts = [t for t in fig.data if t.mode == "markers"]
    assert len({(t.marker.color, t.marker.symbol) for t in pts}) == len(pts)
    ax = plot_trend(ref, "val", V2, fit=v2_fit, n_resamples=0).axes[0]
    lines = [c.lines[0] for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert len({(ln.get_color(), ln.get_marker()) for ln in lines}) == len(lines)


# --------------------------------------------------------------------------- highlighted models
def test_highlighted_models_are_larger_outlined_and_their_labels_do_not_overlap(ref, v2_fit):
    mine = ["resnet50", "resnet101", "resnet152", "densenet121", "vgg16"]
    fig = plot_trend(ref, "val", V2, fit=v2_fit, n_resamples=0, highlight=mine)
    ax = fig.axes[0]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    (star,) = [c for c in ax.collections if str(c.get_label()).startswith(HIGHLIGHT_LABEL)]
    assert np.sqrt(star.get_sizes()[0]) == STAR_SIZE > max(c.lines[0].get_markersize() for c in ax.containers
                                                          if isinstance(c, ErrorbarContainer) and c.lines[0])
    assert matplotlib.colors.to_hex(star.get_edgecolor()[0]) == "#000000"
    boxes = [t.get_window_extent(renderer) for t in ax.texts]
    assert len(boxes) == len(mine)
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b)
    frame, _ = ref.paired("val", V2)
    last = trend_figure(frame, x="val", y=V2, title="V2", fit=v2_fit, highlight=mine).data[-1]
    assert last.marker.size == STAR_PX > POINT_PX and last.marker.line.color == "black"


# --------------------------------------------------------------------------- legend, title, words
def test_legends_sit_outside_the_plot_and_the_title_clears_the_modebar(ref, v2_fit):
    fig = plot_trend(ref, "val", V2, fit=v2_fit, n_resamples=0, highlight=["resnet50"])
    ax = fig.axes[0]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    assert ax.get_legend().get_window_extent(renderer).x0 > ax.get_window_extent(renderer).x1
    frame, _ = ref.paired("val", V2)
    pfig = trend_figure(frame, x="val", y=V2, title="V2", fit=v2_fit)
    assert pfig.layout.legend.x > 1 and pfig.layout.legend.xanchor == "left"
    assert pfig.layout.title.yref == "container" and pfig.layout.title.yanchor == "top"
    assert pfig.layout.margin.t >= 80                      # room for the title and the buttons below it


def test_axis_titles_name_the_settings_in_words(ref, v2_fit):
    ax = plot_trend(ref, "val", V2, fit=v2_fit, n_resamples=0).axes[0]
    assert ax.get_xlabel() == "Accuracy on ImageNet validation (logit scale)"
    assert ax.get_ylabel() == "Accuracy on ImageNetV2 matched-frequency (logit scale)"


# --------------------------------------------------------------------------- dense testbeds
def test_dense_testbeds_get_small_translucent_markers_and_keep_the_highlighted_ones_emphasised():
    timm = sb.load_testbed("timm-reference")
    mine = list(timm.models[:2])
    frame, _ = timm.paired("val", V2)
    fig = trend_figure(frame, x="val", y=V2, title="timm", fit=fit_shift(timm, V2_SHIFT), highlight=mine)
    pts = [t for t in fig.data if t.mode == "markers" and t.name != HIGHLIGHT_LABEL]
    assert all(t.marker.size <= 4 and t.marker.opacity <= 0.4 for t in pts)
    assert fig.data[-1].name == HIGHLIGHT_LABEL and fig.data[-1].marker.size == STAR_PX
    assert len(fig.layout.annotations) == len(mine)                 # labels only for the highlighted models
    ax = plot_trend(timm, "val", V2, n_resamples=0, highlight=mine).axes[0]
    lines = [c.lines[0] for c in ax.containers if isinstance(c, ErrorbarContainer) and c.lines[0] is not None]
    assert all(ln.get_alpha() <= 0.4 and ln.get_markersize() < 4 for ln in lines)
    assert len(ax.texts) == len(mine)
