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
    check_trajectory, is_checkpoint, trajectory_effective_robustness, trajectory_summary)
from shiftbench.engine.trajectory import Trajectory  # noqa: E402
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
    fit = fit_trend([20, 50, 80], [10, 40, 70], scale="linear")             # exactly y = x - 10
    er = trajectory_effective_robustness(_traj([(0, 30, 35), (5, 60, 58), (9, 90, 80)]), "id", "ood", fit=fit)
    assert er["step"].tolist() == [0, 5, 9]
    assert er["predicted_y_acc"].tolist() == pytest.approx([20, 50, 80])
    assert er["effective_robustness"].tolist() == pytest.approx([15, 8, 0])
    s = trajectory_summary(er)
    assert (s["start_er"], s["peak_step"], s["peak_er"], s["end_er"]) == pytest.approx((15, 0, 15, 0))


def test_effective_robustness_against_a_testbed_logit_trend_ignores_checkpoints_in_it():
    # standard models on logit(y) = logit(x) - 1 exactly; a checkpoint stored in the testbed must not be fitted on
    xs = np.array([40.0, 60.0, 75.0, 90.0])
    ys = 100 / (1 + np.exp(-(np.log(xs / (100 - xs)) - 1)))
    frame = pd.DataFrame({"model": [f"m{i}" for i in range(4)] + ["r@step0"], "model_type": ["STANDARD"] * 5,
                          "id": list(xs) + [50.0], "ood": list(ys) + [49.0]})
    tb = TB.from_frame(frame)
    er = trajectory_effective_robustness(_traj([(0, 50, 49), (1, 75, 50)]), "id", "ood", testbed=tb)
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
        trajectory_effective_robustness(bad, "id", "v2", fit=fit_trend([1, 2, 3], [1, 2, 3]))
