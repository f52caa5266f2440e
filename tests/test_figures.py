"""plot_trend / save_figure (shiftbench.report.figures) on a small hand-built testbed."""
from __future__ import annotations

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402
from matplotlib.container import ErrorbarContainer  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from shiftbench import bootstrap_band, fit_piecewise_trend, fit_trend  # noqa: E402
from shiftbench import testbed as tbmod  # noqa: E402
from shiftbench.analysis.scaling import transform  # noqa: E402
from shiftbench.errors import ConfigError  # noqa: E402
from shiftbench.report import plot_trend, save_figure  # noqa: E402
from shiftbench.report.figures import TYPE_STYLE  # noqa: E402

SCALES = ["logit", "probit", "linear"]


def small_testbed(zero_model: bool = False) -> tbmod.Testbed:
    """10 STANDARD models on a line, a few of other types above/below it, one empty cell."""
    std_x = np.linspace(52, 82, 10)
    rows = [(f"std-{i}", "STANDARD", x, x - 13 + (0.4 if i % 2 else -0.4)) for i, x in enumerate(std_x)]
    rows += [
        ("std-empty", "STANDARD", 70.0, np.nan),
        ("more-1", "MORE_DATA", 64.0, 61.0),
        ("more-2", "MORE_DATA", 76.0, 72.0),
        ("robust-1", "ROBUST_INTV", 71.0, 63.0),
        ("ssl-1", "SELF_SUPERVISED", 68.0, 57.0),
    ]
    if zero_model:
        rows.append(("chance", "LOW_ACCURACY_CNN", 20.0, 0.0))
    frame = pd.DataFrame(rows, columns=["model", "model_type", "val", "v2"])
    frame["val_dataset_size"] = 50_000
    frame["v2_dataset_size"] = 10_000
    return tbmod.Testbed.from_frame(frame, name="tiny")


@pytest.fixture
def tb() -> tbmod.Testbed:
    return small_testbed()


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def type_entries(ax) -> list[str]:
    return [c.get_label() for c in ax.containers if isinstance(c, ErrorbarContainer)]


def bands(ax) -> list[PolyCollection]:
    return [c for c in ax.collections if isinstance(c, PolyCollection)]


def line(ax, label_part: str):
    found = [ln for ln in ax.lines if label_part in ln.get_label()]
    assert len(found) == 1, [ln.get_label() for ln in ax.lines]
    return found[0]


def points(ax) -> tuple[np.ndarray, np.ndarray]:
    data = [c.lines[0] for c in ax.containers if isinstance(c, ErrorbarContainer)]
    return np.concatenate([d.get_xdata() for d in data]), np.concatenate([d.get_ydata() for d in data])


# --------------------------------------------------------------------------- structure
def test_plot_trend_returns_a_figure_with_one_axes(tb: tbmod.Testbed) -> None:
    fig = plot_trend(tb, "val", "v2", n_resamples=50)
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 1


@pytest.mark.parametrize("scale", SCALES)
def test_tick_labels_are_percentages_at_the_scaled_positions(tb: tbmod.Testbed, scale: str) -> None:
    ax = plot_trend(tb, "val", "v2", scale=scale, n_resamples=0).axes[0]
    for ticks, labels in ((ax.get_xticks(), ax.get_xticklabels()), (ax.get_yticks(), ax.get_yticklabels())):
        texts = [t.get_text() for t in labels]
        assert len(texts) >= 2
        assert all(t.endswith("%") for t in texts), texts
        values = [float(t[:-1]) for t in texts]
        np.testing.assert_allclose(ticks, transform(values, scale), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("scale", SCALES)
def test_diagonal_and_fit_lines(tb: tbmod.Testbed, scale: str) -> None:
    fit = fit_trend(tb, "val", "v2", scale)
    ax = plot_trend(tb, "val", "v2", scale=scale, n_resamples=0).axes[0]
    diag = line(ax, "y = x")
    np.testing.assert_allclose(diag.get_xdata(), diag.get_ydata())
    trend = line(ax, "fit")
    np.testing.assert_allclose(trend.get_ydata(), fit.predict_scaled(trend.get_xdata()), rtol=1e-9)
    assert f"{fit.slope:.2f}" in trend.get_label() and f"{fit.n_models} models" in trend.get_label()
    assert scale in ax.get_xlabel() and "val" in ax.get_xlabel() and "v2" in ax.get_ylabel()


@pytest.mark.parametrize("scale", SCALES)
def test_every_model_with_both_accuracies_is_drawn_inside_the_axes(tb: tbmod.Testbed, scale: str) -> None:
    ax = plot_trend(tb, "val", "v2", scale=scale, n_resamples=0).axes[0]
    xs, ys = points(ax)
    frame, skipped = tb.paired("val", "v2")
    assert len(xs) == len(frame) == len(tb) - 1 and skipped == 1
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    assert ((xs >= x0) & (xs <= x1)).all() and ((ys >= y0) & (ys <= y1)).all()
    assert "1 without both accuracies" in ax.get_title(loc="left")


def test_a_model_at_zero_percent_is_still_visible_in_the_all_models_view() -> None:
    # by default the chance-level model (below the fitted range) is left to the overview panel
    tb = small_testbed(zero_model=True)
    fig = plot_trend(tb, "val", "v2", n_resamples=0)
    assert len(fig.axes) == 2
    overview = fig.axes[1]
    ys = np.concatenate([c.get_offsets()[:, 1] for c in overview.collections if len(c.get_offsets())])
    y0, y1 = overview.get_ylim()
    assert ((ys >= y0) & (ys <= y1)).all() and len(ys) == len(tb) - 1
    ax = plot_trend(tb, "val", "v2", n_resamples=0, zoom=False).axes[0]
    xs, ys = points(ax)
    y0, y1 = ax.get_ylim()
    assert ((ys >= y0) & (ys <= y1)).all()


def test_one_legend_entry_per_model_type_present(tb: tbmod.Testbed) -> None:
    ax = plot_trend(tb, "val", "v2", n_resamples=0).axes[0]
    entries = type_entries(ax)        # in drawing order: the fitted-on STANDARD models last, on top
    assert entries == [
        f"{TYPE_STYLE['ROBUST_INTV'][1]} (1)",
        f"{TYPE_STYLE['MORE_DATA'][1]} (2)",
        "Self supervised (1)",
        f"{TYPE_STYLE['STANDARD'][1]} (10)",
    ]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert [t for t in legend if t in entries] == [entries[-1], *entries[:-1]]      # the legend: usual order
    assert not any(TYPE_STYLE["LP_ADV"][1] in t for t in legend)


def test_only_the_types_of_a_selection_get_legend_entries(tb: tbmod.Testbed) -> None:
    sub = tb.select(model_types=["STANDARD"])
    ax = plot_trend(sub, "val", "v2", n_resamples=0).axes[0]
    assert type_entries(ax) == [f"{TYPE_STYLE['STANDARD'][1]} (10)"]


# --------------------------------------------------------------------------- band
def test_band_is_drawn_when_resampling(tb: tbmod.Testbed) -> None:
    ax = plot_trend(tb, "val", "v2", n_resamples=200).axes[0]
    polys = bands(ax)
    assert len(polys) == 1
    assert "bootstrap band" in polys[0].get_label()
    assert any("bootstrap band" in t.get_text() for t in ax.get_legend().get_texts())


def test_no_band_without_resamples(tb: tbmod.Testbed) -> None:
    ax = plot_trend(tb, "val", "v2", n_resamples=0).axes[0]
    assert bands(ax) == []
    assert not any("band" in t.get_text() for t in ax.get_legend().get_texts())


def test_a_given_band_is_drawn_and_contains_the_fit(tb: tbmod.Testbed) -> None:
    fit = fit_trend(tb, "val", "v2")
    band = bootstrap_band(fit, n_resamples=300, seed=1)
    ax = plot_trend(tb, "val", "v2", fit=fit, band=band, n_resamples=0).axes[0]
    (poly,) = bands(ax)
    verts = poly.get_paths()[0].vertices
    lo_x, hi_x = transform(fit.x_range[0], "logit"), transform(fit.x_range[1], "logit")
    assert verts[:, 0].min() >= lo_x - 0.1 and verts[:, 0].max() <= hi_x + 0.1  # band kept to the fitted range
    mid = transform(70.0, "logit")
    inside = verts[np.abs(verts[:, 0] - mid) < 0.05, 1]
    assert inside.min() <= fit.predict_scaled([mid])[0] <= inside.max()


# --------------------------------------------------------------------------- fits
@pytest.mark.parametrize("scale", SCALES)
def test_a_piecewise_fit_is_drawn(tb: tbmod.Testbed, scale: str) -> None:
    fit = fit_piecewise_trend(tb, "val", "v2", 66.0, scale)
    ax = plot_trend(tb, "val", "v2", fit=fit, n_resamples=100).axes[0]
    trend = line(ax, "Piecewise fit")
    np.testing.assert_allclose(trend.get_ydata(), fit.predict_scaled(trend.get_xdata()), rtol=1e-9)
    assert len(bands(ax)) == 1
    assert scale in ax.get_xlabel()


def test_the_given_fit_decides_the_scale(tb: tbmod.Testbed) -> None:
    fit = fit_trend(tb, "val", "v2", "probit")
    ax = plot_trend(tb, "val", "v2", fit=fit, n_resamples=0).axes[0]
    assert "probit" in ax.get_xlabel()


def test_fit_on_selects_the_fitted_models(tb: tbmod.Testbed) -> None:
    ax = plot_trend(tb, "val", "v2", fit_on="all", n_resamples=0).axes[0]
    assert "14 models" in line(ax, "fit").get_label()  # 15 minus the empty cell


def test_highlight_labels_the_model_and_title(tb: tbmod.Testbed) -> None:
    ax = plot_trend(tb, "val", "v2", n_resamples=0, highlight=["more-1"], title="My shift").axes[0]
    assert [t.get_text() for t in ax.texts] == ["more-1"]
    assert ax.get_title(loc="left").startswith("My shift") and "tiny" in ax.get_title(loc="left")


def test_draws_into_a_given_axes(tb: tbmod.Testbed) -> None:
    fig, (left, right) = plt.subplots(1, 2)
    out = plot_trend(tb, "val", "v2", n_resamples=0, ax=right)
    assert out is fig
    assert len(right.lines) >= 2 and len(left.lines) == 0


# --------------------------------------------------------------------------- save
@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG\r\n\x1a\n"), (".svg", b"<svg"), (".pdf", b"%PDF")])
def test_save_figure_writes_each_format(tb: tbmod.Testbed, tmp_path, suffix: str, magic: bytes) -> None:
    fig = plot_trend(tb, "val", "v2", n_resamples=0)
    path = save_figure(fig, tmp_path / "sub" / f"fig{suffix}")
    data = path.read_bytes()
    assert magic in data[:400] if suffix == ".svg" else data.startswith(magic)
    assert not plt.fignum_exists(fig.number)  # closed after saving


@pytest.mark.parametrize("name", ["fig.txt", "fig.jpg", "fig"])
def test_save_figure_rejects_unknown_extensions(tb: tbmod.Testbed, tmp_path, name: str) -> None:
    fig = plot_trend(tb, "val", "v2", n_resamples=0)
    with pytest.raises(ConfigError, match=r"\.png, \.svg or \.pdf"):
        save_figure(fig, tmp_path / name)
    assert not (tmp_path / name).exists()


def test_figure_writer_saves_in_the_background_exactly_what_inline_saving_writes(tmp_path):
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    import pickle

    from shiftbench.report.figures import FigureWriter, save_figure_formats

    def figure():
        fig, ax = plt.subplots(figsize=(3, 2), dpi=80)
        ax.plot([0, 1, 2], [2, 0, 1], marker="o")
        ax.set_title("same pixels")
        return fig

    inline = save_figure_formats(figure(), tmp_path / "inline", [".png"])
    writer = FigureWriter()
    paths = writer.save(figure(), tmp_path / "bg", [".png", ".svg"])
    assert paths == [tmp_path / "bg.png", tmp_path / "bg.svg"]
    weird = figure()
    weird.axes[0].xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"<{v:g}>"))   # a lambda cannot be pickled
    with pytest.raises(Exception):  # noqa: B017 - whatever pickle raises for a lambda
        pickle.dumps(weird)
    assert writer.save(weird, tmp_path / "weird", [".png"]) == [tmp_path / "weird.png"]
    assert (tmp_path / "weird.png").exists(), "an unpicklable figure is saved at once, inline"
    writer.wait()
    assert (tmp_path / "bg.png").read_bytes() == inline[0].read_bytes()
    assert (tmp_path / "bg.svg").stat().st_size > 1000
    with pytest.raises(ConfigError, match="unknown figure format '.jpg'"):
        FigureWriter().save(figure(), tmp_path / "x", [".jpg"])
