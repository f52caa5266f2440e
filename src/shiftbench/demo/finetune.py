"""Fine-tuning trajectories on the digits testbed (Andreassen et al. 2021, on real offline data).

The same small CNN (``digits-cnn-w8`` by default, :mod:`shiftbench.demo.archs`) is fine-tuned on
the MNIST training split with two recipes, each run with several seeds (default three, so the
statistics of :func:`~shiftbench.analysis.trajectory.trajectory_summary` over runs are live):

* ``<arch>-fmnist-pretrained``: first trained on Fashion-MNIST (``n_pretrain`` images,
  ``pretrain_epochs`` epochs: other real data, once, shared by every seed), then its classifier
  re-initialised;
* ``<arch>-scratch``: from random initialisation.

The run of the first seed keeps the recipe's name; the others are ``<recipe>-seed<k>``, and all
carry the tag ``recipe:<recipe>``. A seed sets the random initialisation (scratch), the new
classifier's initialisation and the data order.

Both use the same recipe (Adam, constant ``lr``, batches of ``batch_size``, the same seeded data
order and the same classifier initialisation), and a :class:`~shiftbench.studies.trajectory.Trajectory`
evaluates ``mnist-test`` (in-distribution) and ``uci-digits`` (natural shift) through the engine
at step 0, at the sub-epoch steps ``early_steps`` (where pre-training's effective robustness
shows, if anywhere) and after every epoch. Each checkpoint is then placed against the digits
testbed's trend (fitted on its STANDARD models) as effective robustness.

Resumable: the pre-trained weights are cached in ``<workspace>/finetune/`` (safetensors + a JSON
marker written last, both atomic), every epoch's network and optimizer state are checkpointed
there the same way, and the trajectory's stored steps are returned without evaluating again, so
a killed run continues from its last finished epoch.

Cost on the 2-core machine (defaults: 7,000 MNIST training digits, 5 epochs, 15,000 Fashion-MNIST
images for 2 epochs, full test sets: 2,999 MNIST and 1,797 UCI digits per checkpoint): see
``docs/trajectories.md``.
"""
from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from shiftbench.errors import DataError
from shiftbench.store.files import atomic_write_with as atomic_write

ID_SETTING, OOD_SETTING = "mnist-test", "uci-digits"
FINETUNE_DIR = "finetune"
EARLY_STEPS = (2, 5, 10, 20, 35)


def _save(path: Path, tensors: dict[str, Any], meta: dict[str, Any]) -> None:
    """Weights (safetensors) then the JSON marker with their sha256, both atomically."""
    from safetensors.torch import save_file  # deferred: loads safetensors, loads torch

    from shiftbench.demo.zoo import sha256_file  # deferred: loads Pillow, loads pyarrow

    atomic_write(path, lambda tmp: save_file({k: v.detach().contiguous() for k, v in tensors.items()}, tmp))
    text = json.dumps({**meta, "sha256": sha256_file(path)}, sort_keys=True, indent=1)
    atomic_write(path.with_suffix(".json"), lambda tmp: Path(tmp).write_text(text))


def _load(path: Path, meta: dict[str, Any]) -> dict[str, Any] | None:
    """The tensors cached at ``path`` if its marker exists and matches ``meta`` and the file's sha256."""
    from safetensors.torch import load_file  # deferred: loads safetensors, loads torch

    from shiftbench.demo.zoo import sha256_file  # deferred: loads Pillow, loads pyarrow

    marker = path.with_suffix(".json")
    if not marker.exists() or not path.exists():
        return None
    try:
        saved = json.loads(marker.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if any(saved.get(k) != v for k, v in meta.items()) or saved.get("sha256") != sha256_file(path):
        return None
    return load_file(path)


def _pretrained(workspace: Path, arch: str, fashion: tuple[np.ndarray, np.ndarray], epochs: float, lr: float,
                seed: int) -> dict[str, Any]:
    """The network's state after pre-training on Fashion-MNIST (cached)."""
    import torch  # deferred: loads torch

    from shiftbench.demo.training import _fit  # deferred: loads Pillow, loads pyarrow
    from shiftbench.models.registry import build_arch  # deferred: registers on import

    fx, fy = fashion
    meta = {"arch": arch, "n": int(len(fx)), "epochs": float(epochs), "lr": lr, "seed": seed, "data": "fashion-mnist"}
    path = workspace / FINETUNE_DIR / f"pretrained-{arch}-n{len(fx)}-e{epochs:g}.safetensors"
    cached = _load(path, meta)
    if cached is not None:
        return cached
    torch.manual_seed(seed)
    net = build_arch(arch, 10).net
    _fit(net, fx, fy, {"lr": lr}, float(epochs), seed + 1)
    _save(path, net.state_dict(), meta)
    return net.state_dict()


def _optimizer_tensors(opt: Any) -> tuple[dict[str, Any], str]:
    state = opt.state_dict()
    tensors = {f"opt.{i}.{k}": v for i, s in state["state"].items() for k, v in s.items()}
    return tensors, json.dumps(state["param_groups"])


def _restore_optimizer(opt: Any, tensors: dict[str, Any], groups: str) -> None:
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        if key.startswith("opt."):
            _, i, name = key.split(".", 2)
            state.setdefault(int(i), {})[name] = value
    opt.load_state_dict({"state": state, "param_groups": json.loads(groups)})


def finetune(
    name: str,
    tracker: Any,
    init_state: dict[str, Any] | None,
    train_x: np.ndarray,
    train_y: np.ndarray,
    *,
    workspace: Path,
    arch: str,
    epochs: int,
    early_steps: Sequence[int],
    lr: float,
    batch_size: int,
    seed: int,
    on_checkpoint: Any = None,
) -> None:
    """Fine-tune ``arch`` (from ``init_state`` with a fresh classifier, or from random
    initialisation) on the digits, evaluating with ``tracker`` at step 0, at ``early_steps`` and
    after every epoch; resumes from the last epoch checkpointed in ``<workspace>/finetune/<name>/``."""
    import torch  # deferred: loads torch
    import torch.nn.functional as F  # deferred: loads torch

    from shiftbench.demo.archs import DIGITS_PREPROCESSING  # deferred: loads Pillow, loads pyarrow
    from shiftbench.demo.training import _to_float  # deferred: loads Pillow, loads pyarrow
    from shiftbench.models.registry import build_arch  # deferred: registers on import
    from shiftbench.models.wrapper import Normalized  # deferred: loads torch

    torch.manual_seed(seed)
    net = build_arch(arch, 10).net
    if init_state is not None:
        net.load_state_dict(init_state)
    torch.manual_seed(seed + 2)
    net.head.reset_parameters()          # the same classifier initialisation for both runs
    model = Normalized(net, DIGITS_PREPROCESSING.mean, DIGITS_PREPROCESSING.std)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    x_all, y_all = _to_float(train_x), torch.from_numpy(np.asarray(train_y, np.int64))
    per_epoch = math.ceil(len(x_all) / batch_size)
    run_dir = workspace / FINETUNE_DIR / name
    recipe = {"arch": arch, "lr": lr, "batch_size": batch_size, "seed": seed, "n_train": int(len(x_all)),
              "pretrained": init_state is not None}
    start = 0
    for k in range(epochs, 0, -1):                       # resume from the last finished epoch
        cached = _load(run_dir / f"epoch{k}.safetensors", {**recipe, "epoch": k})
        if cached is not None:
            net.load_state_dict({key[4:]: v for key, v in cached.items() if key.startswith("net.")})
            groups = json.loads((run_dir / f"epoch{k}.json").read_text())["param_groups"]
            _restore_optimizer(opt, cached, groups)
            start = k
            break

    def checkpoint(step: int, epoch: float) -> None:
        rows = tracker.evaluate(model, step=step, epoch=epoch)
        if on_checkpoint is not None:
            on_checkpoint(name, step, epoch, rows)

    if start == 0:
        checkpoint(0, 0.0)
    step = start * per_epoch
    for epoch in range(start + 1, epochs + 1):
        model.train()
        g = torch.Generator().manual_seed(seed * 1000 + epoch)
        perm = torch.randperm(len(x_all), generator=g)
        for i in range(0, len(x_all), batch_size):
            idx = perm[i:i + batch_size]
            loss = F.cross_entropy(model(x_all[idx]), y_all[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if step in early_steps and step % per_epoch:
                checkpoint(step, step / per_epoch)
        model.eval()
        checkpoint(step, float(epoch))
        tensors, groups = _optimizer_tensors(opt)
        _save(run_dir / f"epoch{epoch}.safetensors", {**{f"net.{k}": v for k, v in net.state_dict().items()},
                                                        **tensors},
              {**recipe, "epoch": epoch, "step": step, "param_groups": groups})


def digits_testbed(store: Path | str) -> Any:
    """The digits testbed of a results store without trajectory checkpoints (None if the store
    has no finished results)."""
    from shiftbench.analysis.trajectory import is_checkpoint  # deferred: registers on import
    from shiftbench.testbed import Testbed  # deferred: registers on import

    try:
        tb = Testbed.from_store(store, name="digits")
    except DataError:
        return None
    return tb.select([m for m in tb.models if not is_checkpoint(m)])


def run_finetune_demo(
    data_dir: Path | str,
    workspace: Path | str,
    store: Path | str | None = None,
    *,
    arch: str = "digits-cnn-w8",
    epochs: int = 5,
    early_steps: Sequence[int] = EARLY_STEPS,
    n_train: int | None = None,
    n_pretrain: int = 15_000,
    pretrain_epochs: float = 2,
    lr: float = 1e-3,
    batch_size: int = 128,
    limit: int | None = None,
    seed: int = 0,
    seeds: Sequence[int] | None = None,
    testbed: Any = None,
    console: Any = None,
) -> pd.DataFrame:
    """Fine-tune a Fashion-MNIST-pretrained and a randomly initialised CNN on MNIST, tracking
    both trajectories; returns one row per checkpoint with its effective robustness.

    Parameters
    ----------
    data_dir:
        Holds MNIST (``make demo-data``); Fashion-MNIST is found there or in Debian's
        ``/usr/share/datasets/fashion-mnist``.
    workspace:
        The digits workspace (prepared data ``data/``, the caches ``finetune/``).
    store:
        Results store for the checkpoints and the trajectory studies (default
        ``<workspace>/store``, the digits testbed's own store, so one ``--store`` shows both).
    arch, epochs, early_steps, lr, batch_size, seed:
        The network and the fine-tuning recipe (shared by both recipes; ``seed`` also seeds the
        pre-training).
    seeds:
        The seeds each recipe is run with (default ``seed, seed + 1, seed + 2``).
    n_train, n_pretrain, pretrain_epochs:
        MNIST training digits (default all 7,000), Fashion-MNIST images and epochs of pre-training.
    limit:
        Evaluate only the first ``limit`` examples of each setting (quick runs, tests).
    testbed:
        The testbed whose trend gives effective robustness (default: the store's own digits
        testbed, from ``make demo``); without one with 3+ STANDARD models the ER columns are NaN.

    Returns
    -------
    DataFrame with ``trajectory, recipe, seed, init, step, epoch, x_acc, y_acc, predicted_y_acc,
    effective_robustness`` (percent / pp); ``attrs`` holds ``fit`` (or ``note``) and ``seconds``.
    """
    from rich.console import Console  # deferred: registers on import

    import shiftbench.demo  # deferred: loads Pillow, loads pyarrow
    from shiftbench.analysis.trajectory import trajectory_effective_robustness  # deferred: registers on import
    from shiftbench.demo import data as D  # deferred: loads Pillow, loads pyarrow
    from shiftbench.demo.archs import DIGITS_PREPROCESSING  # deferred: loads Pillow, loads pyarrow
    from shiftbench.demo.datasets import load_prepared, prepare_data  # deferred: loads Pillow, loads pyarrow
    from shiftbench.demo.run import _one_thread  # deferred: loads Pillow, loads pyarrow
    from shiftbench.errors import ConfigError  # deferred: registers on import
    from shiftbench.studies.trajectory import Trajectory  # deferred: loads Pillow, loads pyarrow

    if epochs < 1 or batch_size < 1 or n_pretrain < 1:
        raise ConfigError(f"epochs={epochs}, batch_size={batch_size} and n_pretrain={n_pretrain} must be at least 1")
    seeds = (seed, seed + 1, seed + 2) if seeds is None else tuple(int(k) for k in seeds)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds={list(seeds)!r}: give one or more different seeds")
    shiftbench.demo.register()
    console = console or Console(stderr=True)
    t0 = time.perf_counter()
    ws = Path(workspace)
    store = Path(store) if store is not None else ws / "store"
    prepare_data(data_dir, ws)
    z = load_prepared(ws)
    train_x, train_y = z["train_x"][:n_train], z["train_y"][:n_train]
    fashion = D.load_fashion_pretraining(data_dir, n_pretrain)
    if fashion is None:
        raise DataError(f"Fashion-MNIST not found (in {Path(data_dir) / D.FASHION_DIR} or {D.FASHION_SYSTEM_DIR}); "
                        f"run `{D.FETCH_HINT}` or `apt-get install {D.FASHION_DEB}`")
    short = arch.removeprefix("digits-")
    recipes = {f"{short}-fmnist-pretrained": ("Fashion-MNIST pretrained", "MORE_DATA"),
               f"{short}-scratch": ("random initialisation", "UNKNOWN")}
    runs = {(r if k == seeds[0] else f"{r}-seed{k}"): (what, mtype, r, k)
            for r, (what, mtype) in recipes.items() for k in seeds}

    def report(name: str, step: int, epoch: float, rows: pd.DataFrame) -> None:
        acc = dict(zip(rows["setting"], rows["accuracy"]))
        console.print(f"finetune: {name} step {step} (epoch {epoch:.2f}): {ID_SETTING} {acc[ID_SETTING]:.2f}%, "
                      f"{OOD_SETTING} {acc[OOD_SETTING]:.2f}%")

    trackers = {}
    with _one_thread():
        init = _pretrained(ws, arch, fashion, pretrain_epochs, lr, seed)
        for name, (what, mtype, recipe, k) in runs.items():
            tracker = Trajectory(name, [ID_SETTING, OOD_SETTING], store=store, data_root=ws / "data",
                                 preprocessing=DIGITS_PREPROCESSING, model_type=mtype,
                                 tags=("digits", "finetune", f"recipe:{recipe}"), batch_size=500, limit=limit,
                                 device="cpu")
            finetune(name, tracker, init if mtype == "MORE_DATA" else None, train_x, train_y, workspace=ws, arch=arch,
                     epochs=epochs, early_steps=tuple(early_steps), lr=lr, batch_size=batch_size, seed=k,
                     on_checkpoint=report)
            trackers[name] = tracker
    tb = digits_testbed(store) if testbed is None else testbed
    frames, note, fit = [], None, None
    for name, tracker in trackers.items():
        try:
            er = trajectory_effective_robustness(tb, tracker.frame, ID_SETTING, OOD_SETTING, fit=fit) \
                if tb is not None else None
        except (DataError, ConfigError) as exc:
            er, note = None, f"no effective robustness: {exc}"
        if er is None:
            er = tracker.accuracies(OOD_SETTING).assign(predicted_y_acc=np.nan, effective_robustness=np.nan)
            note = note or f"no effective robustness: no digits testbed in {store}; run `make demo` first"
        else:
            fit = er.attrs["fit"]
        frames.append(er.assign(trajectory=name, recipe=runs[name][2], seed=runs[name][3], init=runs[name][0]))
    out = pd.concat(frames, ignore_index=True)[["trajectory", "recipe", "seed", "init", "step", "epoch", "x_acc",
                                                "y_acc", "predicted_y_acc", "effective_robustness"]]
    out.attrs.update(fit=fit, note=note, seconds=time.perf_counter() - t0, store=str(store))
    return out
