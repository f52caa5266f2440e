"""Highlighted models (your own) in the trend scatter: on top, a marker of their own, in the
legend as "your models", and labels placed in free space (matplotlib and plotly)."""
from __future__ import annotations

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import PathCollection  # noqa: E402
from matplotlib.container import ErrorbarContainer  # noqa: E402

import shiftbench as sb  # noqa: E402
from shiftbench import testbed as tbmod  # noqa: E402
from shiftbench.analysis.placement import NATURAL_SHIFTS, fit_shift  # noqa: E402
from shiftbench.errors import ConfigError  # noqa: E402
from shiftbench.report import plot_trend  # noqa: E402
from shiftbench.report.figures import (  # noqa: E402
    FALLBACK_COLOUR, HIGHLIGHT_COLOUR, HIGHLIGHT_LABEL, TYPE_STYLE, place_labels)
from shiftbench.report.interactive import EXTRA_COLOURS, trend_figure  # noqa: E402

V2 = "imagenetv2-matched-frequency-format-val"
A_X, A_Y = "val-on-imagenet-a-classes", "imagenet-a"
MINE = ["my-net", "my-robust-net-v2", "tiny-baseline"]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def merged() -> tbmod.Testbed:
    """imagenet-reference (338 models: a dense cloud) with three models of 'mine', one of them
    inside the cloud of standard models."""
    mine = tbmod.Testbed.from_frame(pd.DataFrame({
        "model": MINE, "val": [80.0, 77.0, 60.0], V2: [69.0, 70.0, 47.0],
        A_X: [93.0, 92.0, 80.0], A_Y: [10.0, 20.0, 1.0]}), name="mine")
    return sb.load_testbed("imagenet-reference").merge(mine)


def stars(ax) -> PathCollection:
    found = [c for c in ax.collections if str(c.get_label()).startswith(HIGHLIGHT_LABEL)]
    assert len(found) == 1, [c.get_label() for c in ax.collections]
    return found[0]


def marker_positions(ax) -> np.ndarray:
    """Display positions of every model's marker (the type points and the stars)."""
    data = [np.column_stack([c.lines[0].get_xdata(), c.lines[0].get_ydata()])
            for c in ax.containers if isinstance(c, ErrorbarContainer) and c.lines[0] is not None]
    data.append(stars(ax).get_offsets())
    return ax.transData.transform(np.concatenate(data))


@pytest.mark.parametrize("x, y, shift", [("val", V2, None), (A_X, A_Y, "ImageNet-A")])
def test_highlighted_models_are_drawn_on_top_with_their_own_marker_and_legend_entry(merged, x, y, shift):
    fit = fit_shift(merged, next(s for s in NATURAL_SHIFTS if s.label == shift)) if shift else None
    fig = plot_trend(merged, x, y, fit=fit, n_resamples=50, highlight=MINE + ["resnet50"])
    ax = fig.axes[0]
    star = stars(ax)
    others = [a for a in [*ax.collections, *ax.lines] if a is not star]
    assert star.get_zorder() > max(a.get_zorder() for a in others)
    assert all(t.get_zorder() > star.get_zorder() for t in ax.texts)
    assert len(star.get_offsets()) == 4
    # a colour no model type uses, a black edge, and a star
    used = {c.lower() for c, _ in TYPE_STYLE.values()} | {FALLBACK_COLOUR, *EXTRA_COLOURS}
    assert HIGHLIGHT_COLOUR.lower() not in used
    assert matplotlib.colors.to_hex(star.get_facecolor()[0]) == HIGHLIGHT_COLOUR
    assert matplotlib.colors.to_hex(star.get_edgecolor()[0]) == "#000000"
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert f"{HIGHLIGHT_LABEL} (4)" in legend
    # a highlighted model is a star, not also a point of its type (resnet50 is STANDARD)
    n_types = sum(int(t.split("(")[-1].rstrip(")")) for t in legend if t.split("(")[-1].rstrip(")").isdigit()
                  and not t.startswith(("Linear fit", "Piecewise fit", HIGHLIGHT_LABEL)))
    assert n_types == len(merged.paired(x, y)[0]) - 4


@pytest.mark.parametrize("x, y, shift", [("val", V2, None), (A_X, A_Y, "ImageNet-A")])
def test_labels_do_not_cover_any_marker_or_each_other(merged, x, y, shift):
    fit = fit_shift(merged, next(s for s in NATURAL_SHIFTS if s.label == shift)) if shift else None
    fig = plot_trend(merged, x, y, fit=fit, n_resamples=50, highlight=MINE + ["resnet50"])
    ax = fig.axes[0]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    assert sorted(t.get_text() for t in ax.texts) == sorted(MINE + ["resnet50"])
    points = marker_positions(ax)
    boxes = [t.get_window_extent(renderer) for t in ax.texts]
    area = ax.get_window_extent(renderer)
    legend = ax.get_legend().get_window_extent(renderer)
    for text, box in zip(ax.texts, boxes):
        inside = ((points[:, 0] >= box.x0) & (points[:, 0] <= box.x1) &
                  (points[:, 1] >= box.y0) & (points[:, 1] <= box.y1))
        assert not inside.any(), f"label {text.get_text()!r} covers {inside.sum()} markers"
        assert area.x0 <= box.x0 and box.x1 <= area.x1 and area.y0 <= box.y0 and box.y1 <= area.y1
        assert not box.overlaps(legend)
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b)


def test_each_label_has_a_leader_line_to_its_star(merged):
    ax = plot_trend(merged, "val", V2, n_resamples=0, highlight=MINE).axes[0]
    star_xy = stars(ax).get_offsets()
    leaders = [ln for ln in ax.lines if len(ln.get_xdata()) == 2 and ln.get_label().startswith("_")]
    starts = np.array([[ln.get_xdata()[0], ln.get_ydata()[0]] for ln in leaders])
    for xy in star_xy:
        assert np.isclose(starts, xy).all(axis=1).any()
    assert len(leaders) == len(MINE)


def test_a_highlighted_model_without_both_accuracies_is_left_out_and_an_unknown_one_raises(merged):
    ax = plot_trend(merged, "val", "objectnet-1.0-beta", n_resamples=0, highlight=MINE[:1] + ["resnet50"]).axes[0]
    assert [t.get_text() for t in ax.texts] == ["resnet50"]        # my-net has no ObjectNet accuracy
    with pytest.raises(ConfigError, match="my-net"):
        plot_trend(merged, "val", V2, n_resamples=0, highlight=["my-nett"])


def test_place_labels_avoids_obstacles_and_prefers_free_space_above_the_line():
    obstacles = np.array([[x, y] for x in range(0, 101, 5) for y in range(0, 101, 5) if y <= x])   # a lower triangle
    centres = place_labels(np.array([[50.0, 50.0]]), np.array([[20.0, 6.0]]), obstacles, 1.0, (0, 0, 100, 100),
                           below=lambda cx, cy: cy < cx)
    (cx, cy), = centres
    assert cy > cx                                                            # above the diagonal
    assert not ((np.abs(obstacles[:, 0] - cx) < 11 + 3) & (np.abs(obstacles[:, 1] - cy) < 3 + 3 + 1)).any()


# --------------------------------------------------------------------------- plotly
def test_plotly_draws_your_models_last_with_labels(merged):
    shift = next(s for s in NATURAL_SHIFTS if s.label == "ImageNet-A")
    fit = fit_shift(merged, shift)
    er = sb.effective_robustness(merged, shift.x, shift.y, fit=fit, n_resamples=0)
    frame, _ = merged.paired(shift.x, shift.y)
    fig = trend_figure(frame, x=shift.x, y=shift.y, title="ImageNet-A", fit=fit, er=er,
                       highlight=MINE + ["resnet50", "not-in-frame"])
    last = fig.data[-1]
    assert last.name == HIGHLIGHT_LABEL and last.marker.symbol == "star"
    assert last.marker.color == HIGHLIGHT_COLOUR and last.marker.line.color == "black"
    assert [c[0] for c in last.customdata] == MINE + ["resnet50"]
    assert sum(len(t.x) for t in fig.data if t.mode == "markers") == len(frame)   # each model drawn once
    labels = [a for a in fig.layout.annotations if a.text in MINE + ["resnet50"]]
    assert len(labels) == 4
    for a, x, y in zip(labels, last.x, last.y):
        assert (a.x, a.y) == (x, y) and a.showarrow and a.axref == "x" and a.ayref == "y"
        assert (a.ax, a.ay) != (a.x, a.y)                    # the label sits away from its point


def test_plotly_without_highlight_has_no_your_models_trace(merged):
    frame, _ = merged.paired("val", V2)
    fig = trend_figure(frame, x="val", y=V2, title="V2")
    assert HIGHLIGHT_LABEL not in [t.name for t in fig.data] and not fig.layout.annotations
