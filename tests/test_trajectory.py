"""Fine-tuning trajectories: the Trajectory hook (engine), their effective robustness
(analysis), figures, the report section, the CLI and the digits fine-tuning experiment."""
from __future__ import annotations

import os

os.environ.setdefault("MPLBACKEND", "Agg")

from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402
from torch import nn  # noqa: E402

from shiftbench.analysis import fit_trend  # noqa: E402
from shiftbench.analysis.trajectory import (  # noqa: E402
    check_trajectory, is_checkpoint, trajectory_effective_robustness, trajectory_endpoints)
from shiftbench.studies.trajectory import Trajectory  # noqa: E402
from shiftbench.errors import ConfigError, DataError, StoreError  # noqa: E402
from shiftbench.models import Preprocessing  # noqa: E402
from shiftbench.store import Store  # noqa: E402
from shiftbench.testbed import Testbed as TB  # noqa: E402

PRE = Preprocessing(input_size=8, resize=8, interpolation="bilinear", mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))
#: grey levels of the images: class 0 below 128, class 1 above
ID_LEVELS = {0: [20, 60, 100, 120], 1: [140, 160, 200, 240]}
OOD_LEVELS = {0: [90, 110, 125, 126], 1: [130, 135, 150, 250]}


def _folder(root: Path, levels: dict[int, list[int]]) -> Path:
    for cls, values in levels.items():
        (root / f"c{cls}").mkdir(parents=True)
        for i, v in enumerate(values):
            Image.new("RGB", (8, 8), (v, v, v)).save(root / f"c{cls}" / f"{i}.png")
    return root


class Threshold(nn.Module):
    """Class 1 when an image's mean grey level exceeds ``t`` (0-255): a 'network' whose one
    weight fine-tuning moves, with accuracies that can be counted by hand."""

    def __init__(self, t: float) -> None:
        super().__init__()
        self.t = nn.Parameter(torch.tensor(float(t)))
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        m = x.mean(dim=(1, 2, 3)) * 255.0 - self.t
        return torch.stack([-m, m], dim=1)


@pytest.fixture()
def data(tmp_path: Path) -> dict[str, str]:
    return {"id": f"folder:{_folder(tmp_path / 'id', ID_LEVELS)}", "ood": f"folder:{_folder(tmp_path / 'ood', OOD_LEVELS)}"}


def _tracker(data, store, name="run") -> Trajectory:
    return Trajectory(name, [data["id"], data["ood"]], store=store, preprocessing=PRE, batch_size=4)


# ----------------------------------------------------------------------------- engine hook
def test_evaluate_scores_each_checkpoint_exactly_and_stores_it(data, tmp_path):
    tr = _tracker(data, tmp_path / "store")
    rows = tr.evaluate(Threshold(50), step=0, epoch=0)
    # t = 50: ID class 0 {20} right (1/4), class 1 all right -> 5/8; OOD class 0 none, class 1 all -> 4/8
    assert rows["setting"].tolist() == [data["id"], data["ood"]]
    assert rows["accuracy"].tolist() == pytest.approx([62.5, 50.0])
    tr.evaluate(Threshold(128), step=10, epoch=1.0)
    # t = 128: ID all right; OOD class 0 all right, class 1 all right (130 > 128) -> 100
    frame = tr.frame
    assert frame["step"].tolist() == [0, 0, 10, 10]
    assert frame.loc[frame["step"] == 10, "accuracy"].tolist() == pytest.approx([100.0, 100.0])
    assert set(frame["model"]) == {"run@step0", "run@step10"}
    assert (frame["n_examples"] == 8).all()


def test_resumed_run_does_not_recompute_a_stored_step_and_never_duplicates_it(data, tmp_path):
    store = tmp_path / "store"
    first = _tracker(data, store)
    for step, t in ((0, 50), (1, 100)):
        first.evaluate(Threshold(t), step=step, epoch=step)
    done = sorted((store / "done").glob("*.json"))
    mtimes = {p: p.stat().st_mtime_ns for p in done}
    # "the training run was interrupted": a new tracker on the same store and name resumes
    again = _tracker(data, store)
    net = Threshold(100)
    rows = again.evaluate(net, step=1, epoch=1)
    assert again.n_engine_calls == 0 and net.calls == 0           # step 1 came from the store
    assert rows["accuracy"].tolist() == pytest.approx(first.frame.query("step == 1")["accuracy"].tolist())
    again.evaluate(Threshold(128), step=2, epoch=2)
    assert again.n_engine_calls == 1
    assert {p: p.stat().st_mtime_ns for p in done} == mtimes        # old keys untouched
    frame = Trajectory.load(store, "run").frame
    assert frame["step"].tolist() == [0, 0, 1, 1, 2, 2]
    assert not frame.duplicated(["step", "setting"]).any()


def test_evaluation_restores_the_training_mode(data, tmp_path):
    net = Threshold(50).train()
    _tracker(data, tmp_path / "store").evaluate(net, step=0)
    assert net.training
    net.eval()
    _tracker(data, tmp_path / "store2").evaluate(net, step=0)
    assert not net.training


def test_load_reads_settings_and_id_setting_back(data, tmp_path):
    tr = Trajectory("r", [data["ood"], data["id"]], id_setting=data["id"], store=tmp_path / "s", preprocessing=PRE)
    tr.evaluate(Threshold(50), step=3)
    back = Trajectory.load(tmp_path / "s", "r")
    assert back.id_setting == data["id"] and back.ood_settings == [data["ood"]] and back.steps == [3]
    assert np.isnan(back.frame["epoch"]).all()


def test_bad_trajectory_arguments_are_one_line_errors(data, tmp_path):
    with pytest.raises(ConfigError, match="plain name"):
        Trajectory("a/b", [data["id"]], store=tmp_path)
    with pytest.raises(ConfigError, match="id_setting 'x' is not one of"):
        Trajectory("a", [data["id"]], id_setting="x", store=tmp_path)
    tr = _tracker(data, tmp_path / "s")
    with pytest.raises(ConfigError, match="step must be >= 0"):
        tr.evaluate(Threshold(1), step=-1)
    with pytest.raises(ConfigError, match="step must be an integer"):
        tr.evaluate(Threshold(1), step=1.5)
    with pytest.raises(ConfigError, match=r"preprocessing=Preprocessing"):
        Trajectory("p", [data["id"]], store=tmp_path / "s").evaluate(Threshold(1), step=0)
    with pytest.raises(StoreError, match="no trajectory study named 'nope'"):
        Trajectory.load(tmp_path / "s", "nope")
    tr.evaluate(Threshold(50), step=0)
    with pytest.raises(ConfigError, match="stored with id_setting"):
        Trajectory("run", [data["ood"], data["id"]], store=tmp_path / "s")


# ----------------------------------------------------------------------------- analysis
def _traj(points: list[tuple[int, float, float]], name: str = "r") -> pd.DataFrame:
    rows = []
    for step, x, y in points:
        rows += [dict(step=step, epoch=step / 10, setting="id", accuracy=x, n_examples=1000, model=f"{name}@step{step}"),
                 dict(step=step, epoch=step / 10, setting="ood", accuracy=y, n_examples=1000, model=f"{name}@step{step}")]
    return pd.DataFrame(rows)


def test_effective_robustness_of_checkpoints_against_a_known_linear_trend():
    fit = fit_trend(x=[20, 50, 80], y=[10, 40, 70], scale="linear")             # exactly y = x - 10
    er = trajectory_effective_robustness(frame=_traj([(0, 30, 35), (5, 60, 58), (9, 90, 80)]), x="id", y="ood", fit=fit)
    assert er["step"].tolist() == [0, 5, 9]
    assert er["predicted_y_acc"].tolist() == pytest.approx([20, 50, 80])
    assert er["effective_robustness"].tolist() == pytest.approx([15, 8, 0])
    s = trajectory_endpoints(er)
    assert (s["start_er"], s["peak_step"], s["peak_er"], s["end_er"]) == pytest.approx((15, 0, 15, 0))


def test_effective_robustness_against_a_testbed_logit_trend_ignores_checkpoints_in_it():
    # standard models on logit(y) = logit(x) - 1 exactly; a checkpoint stored in the testbed must not be fitted on
    xs = np.array([40.0, 60.0, 75.0, 90.0])
    ys = 100 / (1 + np.exp(-(np.log(xs / (100 - xs)) - 1)))
    frame = pd.DataFrame({"model": [f"m{i}" for i in range(4)] + ["r@step0"], "model_type": ["STANDARD"] * 5,
                          "id": list(xs) + [50.0], "ood": list(ys) + [49.0]})
    tb = TB.from_frame(frame)
    er = trajectory_effective_robustness(tb, _traj([(0, 50, 49), (1, 75, 50)]), "id", "ood")
    fit = er.attrs["fit"]
    assert fit.n_models == 4 and fit.slope == pytest.approx(1) and fit.intercept == pytest.approx(-1)
    # logit(50%) - 1 = -1 -> 26.894%; logit(75%) - 1 = ln 3 - 1 -> 52.463%
    assert er["predicted_y_acc"].tolist() == pytest.approx([26.8941, 52.4633], abs=1e-3)
    assert er["effective_robustness"].tolist() == pytest.approx([49 - 26.8941, 50 - 52.4633], abs=1e-3)
    assert is_checkpoint("r@step0") and not is_checkpoint("m0")


def test_trajectory_tables_are_validated():
    bad = _traj([(0, 30, 35)])
    with pytest.raises(DataError, match="outside"):
        check_trajectory(bad.assign(accuracy=[30, 135]))
    with pytest.raises(DataError, match="two rows for setting 'id'"):
        check_trajectory(pd.concat([bad, bad.iloc[:1]]))
    with pytest.raises(DataError, match="missing column"):
        check_trajectory(bad.drop(columns=["epoch"]))
    with pytest.raises(ConfigError, match="no setting 'v2'"):
        trajectory_effective_robustness(frame=bad, x="id", y="v2", fit=fit_trend(x=[1, 2, 3], y=[1, 2, 3]))


# ----------------------------------------------------------------------------- figures
def _figure_inputs():
    from report_testbed import V2, tiny_testbed

    tb = tiny_testbed()
    fit = fit_trend(tb, "val", V2)
    trajs = {name: trajectory_effective_robustness(frame=_traj(pts, name).replace({"id": "val", "ood": V2}),
                                                   x="val", y=V2, fit=fit)
             for name, pts in (("pre", [(0, 12, 9), (5, 60, 55), (10, 70, 58), (50, 80, 68)]),
                               ("scratch", [(0, 11, 10), (5, 40, 28), (50, 78, 65)]))}
    return tb, fit, trajs, V2


def test_static_trajectory_figure_draws_every_checkpoint_with_start_and_end():
    import matplotlib.pyplot as plt

    from shiftbench.report.trajectory_figures import plot_trajectory

    tb, fit, trajs, v2 = _figure_inputs()
    fig = plot_trajectory(tb, "val", v2, trajs, fit=fit, n_resamples=0)
    lines = {ln.get_gid(): ln for ln in fig.axes[0].lines if ln.get_gid()}
    assert len(lines["trajectory:pre"].get_xdata()) == 4 and len(lines["trajectory:scratch"].get_xdata()) == 3
    assert len(lines["start:pre"].get_xdata()) == 1 and len(lines["end:scratch"].get_xdata()) == 1
    arrows = [t for t in fig.axes[0].texts if t.arrow_patch is not None]
    assert len(arrows) == 3 + 2                                     # one per consecutive pair of checkpoints
    lo, hi = fig.axes[0].get_xlim()                                 # the 11% start (far left of the models) is in view
    assert lo < float(np.log(11 / 89)) < hi
    plt.close(fig)


def test_er_figures_have_one_line_per_trajectory_with_one_point_per_checkpoint():
    import matplotlib.pyplot as plt

    from shiftbench.report.trajectory_figures import plot_trajectory_er, trajectory_er_figure, trajectory_figure

    tb, fit, trajs, v2 = _figure_inputs()
    fig = plot_trajectory_er(trajs, by="step")
    lines = {ln.get_gid(): ln for ln in fig.axes[0].lines if ln.get_gid()}
    assert list(lines) == ["er:pre", "er:scratch"]
    assert list(lines["er:pre"].get_ydata()) == pytest.approx(trajs["pre"]["effective_robustness"].tolist())
    plt.close(fig)
    pfig = trajectory_er_figure(trajs, by="epoch")
    assert [len(t.x) for t in pfig.data] == [4, 3]
    tfig = trajectory_figure(tb, "val", v2, trajs, fit=fit)
    traces = [t for t in tfig.data if t.name and t.name.startswith("trajectory:")]
    assert [len(t.x) for t in traces] == [4, 3]
    assert list(traces[0].marker.symbol) == ["circle", "arrow", "arrow", "arrow"]
    with pytest.raises(ConfigError, match="'step' or 'epoch'"):
        plot_trajectory_er(trajs, by="batch")


# ----------------------------------------------------------------------------- report section
def _store_with_trajectory(root: Path, x: str, y: str) -> Path:
    rows = _traj([(0, 12, 9), (5, 60, 55), (50, 80, 68)], "ft-<b>").replace({"id": x, "ood": y})
    Store(root).write_study("trajectory", "ft-<b>", rows, {"settings": [x, y], "id_setting": x})
    return root


def test_report_shows_the_trajectory_section_only_when_a_trajectory_fits_the_testbed(tmp_path):
    from report_testbed import V2, calibration_store, tiny_testbed

    from shiftbench.report import write_html_report
    from shiftbench.report.tables import trajectory_stem

    without = write_html_report([tiny_testbed()], tmp_path / "a", store=calibration_store(tmp_path / "s1"),
                                n_resamples=50, figure_formats=()).read_text()
    assert "Fine-tuning trajectories" not in without
    other = _store_with_trajectory(tmp_path / "s2", "mnist-test", "uci-digits")    # settings not in the testbed
    assert "Fine-tuning trajectories" not in write_html_report([tiny_testbed()], tmp_path / "b", store=other,
                                                               n_resamples=50, figure_formats=()).read_text()
    store = _store_with_trajectory(tmp_path / "s3", "val", V2)
    doc = write_html_report([tiny_testbed()], tmp_path / "c", store=store, n_resamples=50,
                            figure_formats=(".png",)).read_text()
    assert "Fine-tuning trajectories" in doc and "ft-&lt;b&gt;" in doc and "ft-<b>" not in doc
    stem = trajectory_stem("val", V2)
    assert stem.startswith(f"trajectory_{V2}-") and "_vs_val-" in stem
    assert (tmp_path / "c" / "tiny" / f"{stem}.png").exists()
    assert (tmp_path / "c" / "tiny" / f"{stem}_er.png").exists()
    table = pd.read_csv(tmp_path / "c" / "tiny" / f"{stem}.csv")
    assert table["step"].tolist() == [0, 5, 50]
    fit = fit_trend(tiny_testbed(), "val", V2)
    assert table["effective_robustness"].tolist() == pytest.approx(
        [y - float(fit.predict(x)) for x, y in ((12, 9), (60, 55), (80, 68))], abs=1e-6)


# ----------------------------------------------------------------------------- digits experiment
ROOT = Path(__file__).resolve().parents[1]
DIGITS_DATA = Path(os.environ.get("SHIFTBENCH_DEMO_DATA", ROOT / "shiftbench-data"))


@pytest.fixture()
def demo_registries():
    """Import shiftbench.demo (it registers datasets, settings, architectures) and restore the
    registries afterwards, as tests/test_demo_digits.py does."""
    from shiftbench import settings
    from shiftbench.datasets import DATASETS
    from shiftbench.models.registry import ARCHS

    saved = [(registry, dict(registry)) for registry in (DATASETS, settings._SETTINGS, ARCHS)]
    import shiftbench.demo

    shiftbench.demo.register()
    yield
    for registry, old in saved:
        registry.clear()
        registry.update(old)


def test_finetune_demo_on_tiny_subsets_tracks_both_runs_and_resumes(demo_registries, tmp_path):
    from shiftbench.demo import data as D
    from shiftbench.demo.finetune import run_finetune_demo

    if not (DIGITS_DATA / D.MNIST_TARBALL).is_file():
        pytest.skip(f"{DIGITS_DATA / D.MNIST_TARBALL} is missing (run `make demo-data`)")
    if D.find_fashion_mnist(DIGITS_DATA) is None:
        pytest.skip("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist, or `make demo-data`)")
    tb = TB.from_frame(pd.DataFrame({"model": ["a", "b", "c"], "model_type": "STANDARD",
                                     "mnist-test": [30.0, 60.0, 90.0], "uci-digits": [20.0, 40.0, 70.0]}))
    kw = dict(n_train=192, n_pretrain=192, pretrain_epochs=1, batch_size=64, early_steps=(1,), limit=60, testbed=tb,
              seeds=(0, 1))
    first = run_finetune_demo(DIGITS_DATA, tmp_path / "ws", **kw, epochs=1)
    assert first["step"].tolist() == [0, 1, 3] * 4
    assert list(dict.fromkeys(first["trajectory"])) == ["cnn-w8-fmnist-pretrained", "cnn-w8-fmnist-pretrained-seed1",
                                                        "cnn-w8-scratch", "cnn-w8-scratch-seed1"]
    assert list(dict.fromkeys(first["recipe"])) == ["cnn-w8-fmnist-pretrained", "cnn-w8-scratch"]
    assert first.groupby("recipe")["seed"].unique().map(list).tolist() == [[0, 1], [0, 1]]
    # two seeds of one recipe differ (data order, classifier initialisation)
    runs = {n: g["y_acc"].to_numpy() for n, g in first.groupby("trajectory")}
    assert not np.array_equal(runs["cnn-w8-scratch"], runs["cnn-w8-scratch-seed1"])
    fit = fit_trend(tb, "mnist-test", "uci-digits")
    assert first["effective_robustness"].tolist() == pytest.approx(
        (first["y_acc"] - fit.predict(first["x_acc"].to_numpy())).tolist())
    # a longer run in the same workspace resumes from the epoch-1 checkpoint and appends epoch 2
    second = run_finetune_demo(DIGITS_DATA, tmp_path / "ws", **kw, epochs=2)
    assert second["step"].tolist() == [0, 1, 3, 6] * 4
    pd.testing.assert_frame_equal(second[second["step"] < 6].reset_index(drop=True), first)
    stored = Trajectory.load(tmp_path / "ws" / "store", "cnn-w8-scratch").frame
    assert len(stored) == 8 and (stored["n_examples"] == 60).all()
    seed1 = Trajectory.load(tmp_path / "ws" / "store", "cnn-w8-scratch-seed1")
    assert "recipe:cnn-w8-scratch" in seed1.tags


# ----------------------------------------------------------------------------- CLI
def test_cli_prints_per_step_effective_robustness_and_writes_figures(tmp_path):
    from report_testbed import V2, tiny_testbed
    from typer.testing import CliRunner

    from shiftbench import cli

    store = _store_with_trajectory(tmp_path / "store", "val", V2)
    table = tiny_testbed().save(tmp_path / "tiny.csv")
    res = CliRunner().invoke(cli.app, ["trajectory", "--store", str(store), "-t", str(table), "-o",
                                       str(tmp_path / "out"), "--json"])
    assert res.exit_code == 0, res.output
    import json

    rows = json.loads(res.stdout)
    fit = fit_trend(tiny_testbed(), "val", V2)
    assert [r["step"] for r in rows] == [0, 5, 50]
    assert [r["effective_robustness"] for r in rows] == pytest.approx(
        [y - float(fit.predict(x)) for x, y in ((12, 9), (60, 55), (80, 68))])
    from shiftbench.report.tables import trajectory_stem

    stem = trajectory_stem("val", V2)
    assert (tmp_path / "out" / f"{stem}.png").exists() and (tmp_path / "out" / f"{stem}.csv").exists()
    plain = CliRunner().invoke(cli.app, ["trajectory", "--store", str(store)])   # no testbed: accuracies only
    assert plain.exit_code == 0 and "ft-<b>" in plain.stdout and "12.00" in plain.stdout
    empty = CliRunner().invoke(cli.app, ["trajectory", "--store", str(tmp_path)])   # a folder, not a store
    assert empty.exit_code != 0 and "not a results store" in str(empty.exception)
    (tmp_path / "other").mkdir()
    Store(tmp_path / "other").write_study("resolution", "r50", pd.DataFrame({"a": [1]}))
    none = CliRunner().invoke(cli.app, ["trajectory", "--store", str(tmp_path / "other")])
    assert none.exit_code != 0 and "no trajectories stored" in str(none.exception)


def test_a_legend_under_a_half_width_figure_wraps_long_names_and_keeps_the_plot_height():
    import plotly.graph_objects as go

    from shiftbench.report.trajectory_figures import _wrap, legend_below_plot

    assert _wrap("trajectory: a-long-model-name (11 checkpoints)", 20) == [
        "trajectory:", "a-long-model-name", "(11 checkpoints)"]
    assert all(len(line) <= 10 for line in _wrap("x" * 25 + " y", 10))
    fig = go.Figure([go.Scatter(x=[1], y=[1], name=n) for n in
                     ("y = x", "trajectory: a-very-long-fine-tuning-run-name (11 checkpoints)", "b")])
    fig.update_layout(margin=dict(t=70, l=70, r=20))
    legend_below_plot(fig, plot_height=300)
    assert fig.layout.legend.orientation == "h" and fig.layout.legend.yref == "container"
    assert fig.layout.legend.entrywidthmode == "fraction" and fig.layout.legend.entrywidth == 0.5
    assert "<br>" in fig.data[1].name and fig.data[1].name.replace("<br>", " ").startswith("trajectory: a-very")
    assert fig.data[0].name == "y = x"
    assert fig.layout.height == 70 + 300 + fig.layout.margin.b and fig.layout.margin.b > 60
