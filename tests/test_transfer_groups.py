"""``transfer-correlation`` on a store uses the task groups its transfer runs declared (``group`` in
each result's ``done/<key>.json``), unless ``--groups`` / ``groups=`` overrides them, and says where
they came from; a task left in ``other`` is a one-line note naming it."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from shiftbench.analysis.transferability import (
    resolve_task_groups,
    robustness_transfer_correlation,
)
from shiftbench.cli import app
from shiftbench.errors import DataError
from shiftbench.reference import load_testbed
from shiftbench.store import Store
from shiftbench.testbed import Testbed

#: tasks no shipped table knows: their groups can only come from the store (or the user)
DECLARED = {"wheels": "natural", "xrays": "specialized", "counting": "structured"}


def transfer_store(root: Path, n: int = 12, *, declare: bool = True, extra_task: str | None = None) -> Path:
    """A results store: ``n`` models on mnist-test and uci, and a linear-probe transfer result per
    model and task, each declaring its task's group (or none with ``declare=False``)."""
    rng = np.random.default_rng(0)
    store = Store(root)
    tasks = {**DECLARED, **({extra_task: "natural"} if extra_task else {})}
    k = 0
    for i in range(n):
        model, idacc = f"m{i:02d}", rng.uniform(60, 95)
        cells = {"mnist-test": idacc, "uci": 0.7 * idacc + rng.normal(0, 3)}
        for setting, acc in cells.items():
            store.finish(f"k{k}", {"model": model, "setting": setting, "accuracy": acc, "n_examples": 500,
                                   "n_skipped": 0, "convention": "full", "model_type": "STANDARD"})
            k += 1
        for task, group in tasks.items():
            extra = {"group": group} if declare else {}
            store.finish(f"k{k}", {"model": model, "setting": f"transfer:{task}", "accuracy": 30 + 0.5 * idacc
                                   + rng.normal(0, 4), "n_examples": 200, "n_skipped": 0, "convention": "full",
                                   "task": task, "protocol": "linear", "model_type": "STANDARD", **extra})
            k += 1
    return root


def test_a_store_testbed_uses_the_groups_its_transfer_runs_declared(tmp_path):
    store = transfer_store(tmp_path / "store")
    res = robustness_transfer_correlation(Testbed.from_store(store), "mnist-test", n_resamples=50)
    assert list(res.matrix().columns) == ["natural", "specialized", "structured", "mean"]
    assert res.task_groups == DECLARED and set(res.groups_from.values()) == {"store"}
    assert res.groups_origin.startswith(f"task groups declared by the transfer runs in {store}")
    assert "natural: wheels; specialized: xrays; structured: counting" in res.groups_origin
    assert res.notes == []
    # a testbed merged from a table and the store (--testbed T --store DIR) still finds them
    table = tmp_path / "other.csv"
    Testbed.from_store(store).select(["m00"], settings=["mnist-test"]).to_frame().assign(
        model="outside").to_csv(table, index=False)
    merged = load_testbed([str(table)], store=store)
    assert resolve_task_groups(merged).groups == DECLARED


def test_groups_override_the_declared_ones_and_the_origin_names_both(tmp_path):
    tb = Testbed.from_store(transfer_store(tmp_path / "store"))
    res = robustness_transfer_correlation(tb, "mnist-test", groups={"wheels": "structured"}, n_resamples=0)
    assert res.task_groups == {**DECLARED, "wheels": "structured"}
    assert res.groups_from == {"wheels": "groups", "xrays": "store", "counting": "store"}
    assert "natural" not in set(res.rows["group"])
    assert "from the groups given for wheels" in res.groups_origin and "in " + str(tmp_path / "store") in \
        res.groups_origin


def test_the_cli_prints_the_declared_groups_and_says_where_they_came_from(tmp_path):
    store = transfer_store(tmp_path / "store")
    args = ["transfer-correlation", "--store", str(store), "--x", "mnist-test", "--resamples", "50"]
    shown = CliRunner().invoke(app, args)
    assert shown.exit_code == 0, shown.output
    for header in ("natural ρ [95%]", "specialized ρ [95%]", "structured ρ [95%]", "structured partial"):
        assert header in shown.stdout
    assert "other ρ" not in shown.stdout
    assert f"Task groups declared by the transfer runs in {store}" in shown.stdout
    rows = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    by_group = {r["group"]: r for r in rows}
    assert by_group["specialized"]["tasks"] == ["xrays"] and by_group["specialized"]["groups_from"] == "store"
    assert sorted(by_group["mean"]["tasks"]) == sorted(DECLARED)


def test_groups_naming_a_task_the_store_lacks_is_a_one_line_note(tmp_path):
    store = transfer_store(tmp_path / "store", extra_task="dials")
    csv = tmp_path / "groups.csv"
    csv.write_text("task,group\nwheelz,structured\n")
    shown = CliRunner().invoke(app, ["transfer-correlation", "--store", str(store), "--x", "mnist-test",
                                     "--groups", str(csv), "--resamples", "0"])
    assert shown.exit_code == 0, shown.output
    notes = [line for line in shown.stderr.splitlines() if line.startswith("note:")]
    assert notes == [(f"note: {csv} names 1 task(s) with no linear transfer results in 'store', left unused: "
                      "'wheelz' (did you mean 'wheels'?)")]
    assert "natural ρ" in shown.stdout            # the store's groups still hold for every task


def test_a_store_whose_runs_declare_no_group_puts_them_in_other_with_a_note(tmp_path):
    store = transfer_store(tmp_path / "store", declare=False)
    shown = CliRunner().invoke(app, ["transfer-correlation", "--store", str(store), "--x", "mnist-test",
                                     "--resamples", "0"])
    assert shown.exit_code == 0, shown.output
    notes = [line for line in shown.stderr.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and notes[0].startswith("note: 3 task(s) placed in 'other': ")
    assert all(t in notes[0] for t in DECLARED) and "declare no group" in notes[0] and "--groups FILE" in notes[0]
    assert "other ρ [95%]" in shown.stdout and "Task groups unknown (other: " in shown.stdout


def test_a_table_testbed_keeps_no_groups_but_knows_vtab_tasks(tmp_path):
    tb = Testbed.from_store(transfer_store(tmp_path / "store"))
    acc = tb.accuracies.rename(columns={"transfer:wheels": "transfer:eurosat"})
    table = Testbed(acc, metadata=tb.metadata, name="table")           # no store behind it
    resolved = resolve_task_groups(table)
    assert resolved.groups == {"eurosat": "specialized", "xrays": "other", "counting": "other"}
    assert resolved.sources == {"eurosat": "vtab", "xrays": "none", "counting": "none"}
    assert len(resolved.notes) == 1 and "testbed 'table' keeps no groups" in resolved.notes[0]
    with pytest.raises(DataError, match="no such task-group table"):
        resolve_task_groups(table, tmp_path / "missing.csv")
