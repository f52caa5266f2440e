"""``shiftbench transfer``: VTAB-1k-style transfer of models to tasks (Zhai et al. 2019), a linear
probe on frozen penultimate features or fine-tuning from 1,000 examples per task.

One call into :func:`shiftbench.studies.transfer.transfer`; the per-group means are
:func:`shiftbench.analysis.transfer.transfer_group_means` of its rows.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer

from shiftbench.cli_options import (
    DEFAULT_STORE,
    BatchSizeOpt,
    DataRootOpt,
    DeviceOpt,
    JsonOpt,
    ModelsOpt,
    SeedOpt,
    StoreOpt,
)
from shiftbench.cli_support import Table, out
from shiftbench.errors import ConfigError


def _num(v: object) -> float | None:
    return None if v is None or not math.isfinite(float(v)) else float(v)


def register(app: typer.Typer) -> None:
    """Add ``transfer`` to the ``shiftbench`` app."""

    @app.command("transfer")
    def transfer_cmd(
        model: ModelsOpt = None,
        task: Annotated[list[str] | None, typer.Option(
            "--task", help="A task: NAME=TRAIN_SETTING,TEST_SETTING[,GROUP], e.g. "
            "pets=folder:pets/train,folder:pets/test,natural. Repeatable.")] = None,
        tasks: Annotated[Path | None, typer.Option(
            "--tasks", help="CSV task table with columns task,train,test[,group].")] = None,
        groups: Annotated[Path | None, typer.Option(
            "--groups", help="CSV with columns task,group: your tasks' groups (added to VTAB's table).")] = None,
        protocol: Annotated[str, typer.Option(
            "--protocol", help="linear (logistic regression on frozen penultimate features) or finetune.")] = "linear",
        store: StoreOpt = DEFAULT_STORE,
        seed: SeedOpt = 0,
        n_train: Annotated[int, typer.Option("--n-train", help="Training part of the draw (VTAB-1k: 800).")] = 800,
        n_val: Annotated[int, typer.Option("--n-val", help="Validation part of the draw (VTAB-1k: 200).")] = 200,
        finetune_steps: Annotated[int, typer.Option(
            "--finetune-steps", help="SGD steps of each fine-tuning run (--protocol finetune).")] = 500,
        data_root: DataRootOpt = Path("."),
        batch_size: BatchSizeOpt = 128,
        device: DeviceOpt = None,
        executor: Annotated[str, typer.Option(
            "--executor", help="local, or ray: one Ray task per (model, task) writing to the same store.")] = "local",
        force: Annotated[bool, typer.Option("--force", help="Recompute finished results and cached features.")] = False,
        features: Annotated[str | None, typer.Option(
            "--features", help="The layer whose output is the feature vector (a name of the network's "
            "named_modules(), e.g. avgpool); default: the input of the final Linear classifier.")] = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Transfer each model to each task (VTAB-1k: 800 + 200 training examples drawn with --seed, the
        hyper-parameter chosen on the 200, refit on all 1,000, scored on the test set); results are the
        settings transfer:<task> of the store's testbed."""
        from shiftbench.analysis.transfer import transfer_group_means  # deferred: loads pandas
        from shiftbench.models.device import check_device  # deferred: shiftbench.models loads numpy
        from shiftbench.studies.transfer import (  # deferred: loads torch
            parse_task,
            read_tasks,
            transfer,
        )

        device = check_device(device, here=executor != "ray")   # a Ray worker's GPUs are not this machine's
        task_list = [parse_task(t, _groups(groups)) for t in (task or [])]
        if tasks is not None:
            task_list += read_tasks(tasks, _groups(groups))
        if not task_list:
            raise ConfigError("shiftbench transfer: no task; give --task NAME=TRAIN,TEST[,GROUP] or --tasks FILE")
        if not model:
            raise ConfigError("no model to transfer; give one or more --model SPEC (timm:..., torchvision:..., "
                              "checkpoint:FILE, python:mod:fn)")
        frame = transfer(model, task_list, protocol=protocol, store=store or DEFAULT_STORE, seed=seed,
                         executor=executor, progress=not as_json, n_train=n_train, n_val=n_val,
                         finetune_steps=finetune_steps, data_root=data_root, batch_size=batch_size, device=device,
                         force=force, features=features)
        means = transfer_group_means(frame, _groups(groups), protocol=protocol)
        if as_json:
            rows = [{k: (_num(v) if isinstance(v, float) else v) for k, v in r.items()}
                    for r in frame.drop(columns=["key"]).to_dict("records")]
            print(json.dumps({"protocol": protocol, "seed": seed, "store": str(store or DEFAULT_STORE),
                              "results": rows,
                              "group_means": {m: {k: (_num(v) if k != "n_tasks" else int(v)) for k, v in r.items()}
                                              for m, r in means.to_dict("index").items()}}, default=str))
            return
        table = Table("model", "task", "group", "top-1 %", "chosen", "val %", "train+val", "test",
                      title=f"transfer ({protocol}, seed {seed}): {frame['model'].nunique()} models x "
                      f"{frame['task'].nunique()} tasks")
        for _, r in frame.iterrows():
            table.add_row(str(r["model"]), str(r["task"]), str(r["group"]), f"{r['accuracy']:.2f}",
                          f"{r['hyperparameter']}={r['chosen']:g}", f"{r['val_accuracy']:.2f}",
                          f"{int(r['n_train'])}+{int(r['n_val'])}", f"{int(r['n_test']):,}")
        out.print(table)
        group_cols = [c for c in means.columns if c != "n_tasks"]
        mean_table = Table("model", *group_cols, "tasks", title="mean top-1 % per task group")
        for m, r in means.iterrows():
            mean_table.add_row(str(m), *("n/a" if not math.isfinite(r[c]) else f"{r[c]:.2f}" for c in group_cols),
                               str(int(r["n_tasks"])))
        out.print(mean_table)
        for _, r in frame[frame["notes"].astype(bool)].iterrows():
            out.print(f"note: {r['model']} on {r['task']}: {r['notes']}")


def _groups(path: Path | None) -> dict[str, str] | None:
    from shiftbench.analysis.transfer import task_groups  # deferred: loads pandas

    return None if path is None else task_groups(path)
