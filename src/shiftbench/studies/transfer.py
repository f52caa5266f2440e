"""VTAB-1k-style transfer: how well a model's representation adapts to new tasks from 1,000 labels.

Zhai et al. 2019 ("A Large-scale Study of Representation Learning with the Visual Task
Adaptation Benchmark", VTAB) measure a representation by adapting it to each task from 1,000
labelled examples; Djolonga et al. 2021 ("On Robustness and Transferability of Convolutional
Neural Networks", CVPR) use the same protocol to ask whether robust models transfer better.
A *task* (:class:`TransferTask`) is a training and a test dataset that shiftbench reads
(``folder:``, ``manifest:``, ``hf:`` settings, ...) and a group (natural / specialized /
structured, :mod:`shiftbench.analysis.transfer`). The protocol, per (model, task, seed):

1. **Draw.** ``n_train + n_val`` (800 + 200 = 1,000) training examples are drawn without
   replacement with ``numpy.random.default_rng(seed)`` (a permutation of the training set, its
   first 1,000); the first 800 are the *train* part, the last 200 the *validation* part (VTAB's
   ``train800`` / ``val200``). A task with fewer than 1,000 training examples uses all of them,
   split in the same 4:1 proportion (the result's ``notes`` say so); fewer than
   :data:`MIN_EXAMPLES` is a :class:`~shiftbench.errors.DataError`.
2. **Choose.** Each hyper-parameter of the grid is trained on the 800 and scored on the 200;
   the best validation accuracy wins (ties: the first in grid order, the most regularised).
3. **Refit and test.** The chosen hyper-parameter is trained again on all 1,000 and scored on
   the task's whole test set (top-1 accuracy, percent).

``protocol="linear"`` (default): the frozen network's *penultimate* features (the input of its
last ``nn.Linear``, or timm's ``forward_head(pre_logits=True)``; :func:`penultimate`), images
preprocessed exactly as the model's own eval transform, standardised (mean/std of the training
part), then scikit-learn's ``LogisticRegression(C=C, max_iter=1000)`` (L2, lbfgs, multinomial)
for ``C`` in :data:`C_GRID`. Features are computed once per (model, dataset, examples) and cached
in the store (``features/<digest>.npz``), so a run killed while probing, another seed's split or
the other protocol's selection never recompute them.

``protocol="finetune"``: the whole network with a new zero-initialised linear head on its
penultimate features, SGD (momentum 0.9, batch 64, no weight decay, no augmentation) for
``finetune_steps`` (500) steps with a cosine-decayed learning rate from :data:`LR_GRID`
(0.001 or 0.01, chosen on the 200). Shorter than VTAB's (2,500 steps, batch 512): it is meant
for small models (the digits zoo's 8-wide CNN: about 4 CPU-minutes per task, three runs of 500
steps); a ResNet-50 at 224 px costs 3 x 500 x 64 forward-backward passes per task, which needs a GPU.

Results are keyed by what determines them (model weights and preprocessing, the task's datasets
and their example ids and labels, protocol, seed, grid) and stored as ordinary results
(``done/<key>.json``) with setting ``transfer:<task>`` (``transfer:<task>@finetune``), so they
are cells of ``Testbed.from_store`` beside the robustness settings; a finished key is skipped
(resume). Each model's rows are also kept as the study ``transfer`` /
``<model>__<protocol>__seed<seed>-<hash>``. :func:`transfer` runs models x tasks locally or, with
``executor="ray"``, one Ray task per (model, task) (:func:`transfer_task` is picklable).
"""
from __future__ import annotations

import copy
import csv
import dataclasses
import io
import math
import re
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from shiftbench.analysis.transfer import PROTOCOLS, task_groups, transfer_setting
from shiftbench.errors import ConfigError, DataError, ModelError
from shiftbench.models import LoadedModel, load_model
from shiftbench.store.store import Store, digest
from shiftbench.studies.base import Study, StudyResult, as_store, register_study, stored_study_name
from shiftbench.version import __version__

__all__ = [
    "C_GRID",
    "LR_GRID",
    "MIN_EXAMPLES",
    "ProbeResult",
    "TransferConfig",
    "TransferStudy",
    "TransferTask",
    "draw_split",
    "extract_features",
    "linear_probe",
    "parse_task",
    "penultimate",
    "read_tasks",
    "stored_groups",
    "transfer",
    "transfer_task",
]

#: inverse L2 strengths of the logistic-regression probe (scikit-learn's ``C``)
C_GRID = (0.01, 0.1, 1.0, 10.0, 100.0)
#: fine-tuning learning rates (SGD, momentum 0.9, cosine decay)
LR_GRID = (0.001, 0.01)
#: fewest training examples a task may have (below, there is no meaningful 4:1 split)
MIN_EXAMPLES = 20
STUDY_KIND = "transfer"
COLUMNS = ["model", "task", "group", "protocol", "seed", "accuracy", "val_accuracy", "hyperparameter", "chosen",
           "n_train", "n_val", "n_test", "n_skipped", "seconds", "setting", "key", "notes"]
_TASK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


# ---------------------------------------------------------------------------- tasks
@dataclass(frozen=True)
class TransferTask:
    """One task: ``train`` and ``test`` are setting names of datasets shiftbench reads
    (``folder:<dir>``, ``manifest:<file>``, ``hf:<dir>``, a registered dataset setting), ``group``
    its VTAB group (``natural``, ``specialized``, ``structured`` or the user's own)."""

    name: str
    train: str
    test: str
    group: str = "other"

    def __post_init__(self) -> None:
        if not _TASK_NAME.match(self.name or ""):
            raise ConfigError(f"task name {self.name!r}: use letters, digits, '.', '_' or '-' (it becomes the "
                              "setting transfer:<name>)")
        if not self.train or not self.test:
            raise ConfigError(f"task {self.name!r}: give both a training and a test setting")


def parse_task(text: str, groups: Mapping[str, str] | None = None) -> TransferTask:
    """``NAME=TRAIN,TEST[,GROUP]`` (the CLI's ``--task``) as a :class:`TransferTask`; without
    GROUP, the group the task table gives ``NAME`` (:func:`~shiftbench.analysis.transfer.task_groups`),
    else ``other``.

    >>> parse_task("eurosat=folder:eurosat/train,folder:eurosat/test").group
    'specialized'
    """
    name, eq, rest = text.partition("=")
    parts = [p.strip() for p in rest.split(",")] if eq else []
    if not eq or len(parts) not in (2, 3) or not all(parts):
        raise ConfigError(f"--task {text!r}: write NAME=TRAIN_SETTING,TEST_SETTING[,GROUP], e.g. "
                          "pets=folder:pets/train,folder:pets/test,natural")
    group = parts[2] if len(parts) == 3 else task_groups(groups).get(name.strip(), "other")
    return TransferTask(name.strip(), parts[0], parts[1], group)


def read_tasks(path: str | Path, groups: Mapping[str, str] | None = None) -> list[TransferTask]:
    """The tasks of a CSV table with columns ``task,train,test`` and optionally ``group``
    (a row without a group takes the task table's, else ``other``)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such task table; give a CSV with columns task,train,test[,group]")
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    missing = {"task", "train", "test"} - set(rows[0] if rows else {})
    if not rows or missing:
        raise DataError(f"{path}: a task table needs columns task,train,test[,group]"
                        + (f" (missing {', '.join(sorted(missing))})" if rows else " and at least one row"))
    known = task_groups(groups)
    return [TransferTask(r["task"].strip(), r["train"].strip(), r["test"].strip(),
                         (r.get("group") or "").strip() or known.get(r["task"].strip(), "other")) for r in rows]


@dataclass(frozen=True)
class TransferConfig:
    """One model's transfer evaluation on ``tasks`` (module docstring for the protocol).
    ``model`` is a spec or a :class:`~shiftbench.models.LoadedModel`; ``load_kwargs`` go to
    :func:`~shiftbench.models.load_model`."""

    model: Any
    tasks: Sequence[TransferTask]
    protocol: str = "linear"
    seed: int = 0
    n_train: int = 800
    n_val: int = 200
    c_grid: Sequence[float] = C_GRID
    lr_grid: Sequence[float] = LR_GRID
    finetune_steps: int = 500
    finetune_batch_size: int = 64
    batch_size: int = 128
    data_root: str | Path = "."
    device: str | None = None
    workers: int = 0
    force: bool = False
    progress: bool = False
    load_kwargs: Mapping[str, Any] = field(default_factory=dict)
    #: the module (a name of ``named_modules()``) whose output is the feature vector; None: the
    #: penultimate layer found automatically (:func:`penultimate`)
    features: str | None = None

    def check(self) -> None:
        """Validate at the boundary (a :class:`ConfigError` naming the option)."""
        if self.protocol not in PROTOCOLS:
            raise ConfigError(f"unknown transfer protocol {self.protocol!r}; use one of {', '.join(PROTOCOLS)}")
        if self.n_train < 1 or self.n_val < 1:
            raise ConfigError(f"n_train={self.n_train}, n_val={self.n_val}: both must be at least 1 (VTAB-1k: 800, 200)")
        grid = self.c_grid if self.protocol == "linear" else self.lr_grid
        if not grid or any(not (float(v) > 0 and math.isfinite(float(v))) for v in grid):
            raise ConfigError(f"{'c_grid' if self.protocol == 'linear' else 'lr_grid'} {tuple(grid)!r}: give positive numbers")
        if self.finetune_steps < 1 or self.finetune_batch_size < 1 or self.batch_size < 1:
            raise ConfigError(f"finetune_steps={self.finetune_steps}, finetune_batch_size={self.finetune_batch_size}, "
                              f"batch_size={self.batch_size}: each must be at least 1")
        if not self.tasks:
            raise ConfigError("no transfer task; give --task NAME=TRAIN,TEST[,GROUP] or --tasks FILE")
        names = [t.name for t in self.tasks]
        if len(set(names)) != len(names):
            raise ConfigError(f"task {next(n for n in names if names.count(n) > 1)!r} is given twice")


# ---------------------------------------------------------------------------- the split
def draw_split(n: int, n_train: int = 800, n_val: int = 200, seed: int = 0) -> tuple[np.ndarray, np.ndarray, str]:
    """VTAB-1k's draw: indices ``(train, val)`` into a training set of ``n`` examples, and a note.

    A permutation by ``numpy.random.default_rng(seed)``; its first ``n_train`` are the train part,
    the next ``n_val`` the validation part. With fewer than ``n_train + n_val`` examples all are
    used, in the same proportion (at least one validation example); fewer than :data:`MIN_EXAMPLES`
    is a DataError.

    >>> tr, va, note = draw_split(2000, seed=0)
    >>> len(tr), len(va), len(set(tr) & set(va)), note
    (800, 200, 0, '')
    """
    want = n_train + n_val
    if n < MIN_EXAMPLES:
        raise DataError(f"{n} training examples: a transfer task needs at least {MIN_EXAMPLES} "
                        f"(VTAB-1k draws {want:,}); add examples to its training set")
    perm = np.random.default_rng(seed).permutation(n)
    note = ""
    if n < want:
        n_val = max(1, round(n * n_val / want))
        n_train = n - n_val
        note = (f"{n:,} training examples, fewer than {want:,}: used all of them, "
                f"{n_train:,} to train and {n_val:,} to validate")
    return np.sort(perm[:n_train]), np.sort(perm[n_train:n_train + n_val]), note


# ---------------------------------------------------------------------------- penultimate features
def penultimate(loaded: LoadedModel, layer: str | None = None) -> Callable[[Any], Any]:
    """A function from a [0, 1] batch ``(B, 3, H, W)`` to the model's penultimate features ``(B, D)``.

    ``layer`` names a module of the network (as ``named_modules()`` lists it, e.g. ``avgpool`` or
    ``features.6``; ``--features`` on the command line): its output, flattened, is the feature
    vector instead.

    timm models: ``forward_head(forward_features(x), pre_logits=True)`` (timm's own pre-logits).
    Any other ``nn.Module`` (torchvision, checkpoints, the digits zoo, python models): the input
    of the last ``nn.Linear`` that runs, captured by a forward hook, provided that layer's output
    *is* the model's output (checked on a probe batch). A model without such a layer (a final
    convolution, a zero-shot text head, a plain callable) is a :class:`ModelError` naming it.
    """
    import torch  # deferred: loads torch

    from shiftbench.models.wrapper import Normalized  # deferred: loads torch

    module = loaded.module
    net = module.net if isinstance(module, Normalized) else module
    if layer is not None:
        return _layer_features(loaded, module, net, layer)
    if hasattr(net, "forward_head") and hasattr(net, "forward_features") and "timm" in type(net).__module__:
        def timm_features(x):
            z = (x - module.mean.to(x.dtype)) / module.std.to(x.dtype) if net is not module else x
            return net.forward_head(net.forward_features(z), pre_logits=True).flatten(1)
        return timm_features

    hint = ("name the layer whose output to use with --features LAYER (features= in Python; a name of the "
            "network's named_modules()), or give a model whose last layer is a torch.nn.Linear classifier")
    if not isinstance(module, torch.nn.Module):
        raise ModelError(f"model {loaded.name!r}: not a torch module, so it has no penultimate layer; {hint}")
    ran: list[tuple[Any, Any]] = []
    linears = [m for m in module.modules() if isinstance(m, torch.nn.Linear)]
    hooks = [m.register_forward_hook(lambda m, i, o: ran.append((m, o))) for m in linears]
    size = loaded.preprocessing.input_hw
    probe = torch.rand(2, 3, *size, generator=torch.Generator().manual_seed(0))
    try:
        param = next(module.parameters(), None)
        if param is not None:
            probe = probe.to(param.device)
        was_training = module.training
        module.eval()
        with torch.no_grad():
            logits = module(probe)
        module.train(was_training)
    finally:
        for h in hooks:
            h.remove()
    if not ran:
        raise ModelError(f"model {loaded.name!r}: no torch.nn.Linear layer runs in its forward pass, so shiftbench "
                         f"cannot reach its penultimate features; {hint}")
    last, out = ran[-1]
    if (not isinstance(logits, torch.Tensor) or out.shape != logits.shape
            or not torch.allclose(out, logits, rtol=1e-4, atol=1e-5)):
        raise ModelError(f"model {loaded.name!r}: its last torch.nn.Linear layer is not its output layer (the model "
                         f"changes the logits after it), so shiftbench cannot reach its penultimate features; {hint}")

    def hooked_features(x):
        box: list[Any] = []
        handle = last.register_forward_hook(lambda m, i, o: box.append(i[0]))
        try:
            module(x)
        finally:
            handle.remove()
        return box[-1].flatten(1)
    return hooked_features


def _layer_features(loaded: LoadedModel, module: Any, net: Any, layer: str) -> Callable[[Any], Any]:
    """The flattened output of the module ``layer`` of ``net`` as features (``--features``)."""
    import torch  # deferred: loads torch

    from shiftbench.errors import did_you_mean  # deferred: registers on import

    if not isinstance(net, torch.nn.Module):
        raise ModelError(f"model {loaded.name!r}: not a torch module, so it has no layer {layer!r}")
    named = dict(net.named_modules())
    if layer not in named or layer == "":
        raise ModelError(did_you_mean(f"layer of model {loaded.name!r}", layer, [n for n in named if n],
                                      "pass one of its named_modules() to --features"))

    def layer_features(x):
        box: list[Any] = []
        handle = named[layer].register_forward_hook(lambda m, i, o: box.append(o))
        try:
            module(x)
        finally:
            handle.remove()
        if not box or not isinstance(box[-1], torch.Tensor):
            raise ModelError(f"model {loaded.name!r}: layer {layer!r} did not run or returned no tensor; choose "
                             "another --features layer")
        return box[-1].flatten(1)
    return layer_features


class _Pixels:
    """torch Dataset: example ``indices[k]`` of ``dataset`` through ``transform`` -> (pixels, k, error)."""

    def __init__(self, dataset: Any, indices: Sequence[int], transform: Callable, size: tuple[int, int]) -> None:
        self.dataset, self.indices, self.transform, self.size = dataset, list(indices), transform, size

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, k: int):
        import torch  # deferred: loads torch

        from shiftbench.datasets.base import ImageDecodeError  # deferred: loads Pillow

        try:
            return self.transform(self.dataset.load(self.indices[k])), k, ""
        except ImageDecodeError as exc:
            return torch.zeros(3, *self.size), k, f"{exc.example_id}: {exc.reason}"


def _batches(loaded: LoadedModel, dataset: Any, indices: Sequence[int], batch_size: int, workers: int):
    """Batches ``(pixels, positions, errors)`` of the examples at ``indices``, as the model's eval transform makes them."""
    from torch.utils.data import DataLoader  # deferred: loads torch

    pixels = _Pixels(dataset, indices, loaded.preprocessing.transform(), loaded.preprocessing.input_hw)
    return DataLoader(pixels, batch_size=batch_size, num_workers=workers, shuffle=False)


def extract_features(loaded: LoadedModel, dataset: Any, indices: Sequence[int], *, batch_size: int = 128,
                     device: str = "cpu", workers: int = 0, layer: str | None = None
                     ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Penultimate features (float32, ``(m, D)``) of the examples ``indices`` of ``dataset``, the
    positions (into ``indices``) of the ``m`` that decoded, and the decode errors of the others."""
    import torch  # deferred: loads torch

    features = penultimate(loaded, layer)
    loaded.module.to(device).eval()
    chunks, kept, errors = [], [], []
    with torch.inference_mode():
        for x, pos, errs in _batches(loaded, dataset, indices, batch_size, workers):
            ok = np.array([not e for e in errs], dtype=bool)
            errors += [e for e in errs if e]
            if ok.any():
                chunks.append(features(x[torch.from_numpy(ok)].to(device)).float().cpu().numpy())
                kept.append(pos.numpy()[ok])
    if not chunks:
        return np.zeros((0, 0), np.float32), np.zeros(0, np.int64), errors
    return np.concatenate(chunks).astype(np.float32), np.concatenate(kept), errors


def _cached_features(store: Store, loaded: LoadedModel, dataset: Any, setting: str, indices: np.ndarray,
                     config: TransferConfig, device: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """:func:`extract_features`, read from ``<store>/features/<digest>.npz`` when computed before."""
    key = digest({"model": loaded.name, "weights": loaded.fingerprint, "preprocessing": loaded.preprocessing.to_dict(),
                  "setting": setting, "dataset": dataset.name, "ids": digest([dataset.ids[i] for i in indices]),
                  "features": config.features or "penultimate", "version": ".".join(__version__.split(".")[:2])})
    cached = None if config.force else store.read_features(key)
    if cached is not None:
        try:
            with np.load(io.BytesIO(cached)) as z:
                return z["features"], z["positions"], [str(e) for e in z["errors"]]
        except (OSError, ValueError, KeyError):
            pass  # an unreadable cache file is recomputed and replaced
    feats, pos, errors = extract_features(loaded, dataset, indices, batch_size=config.batch_size, device=device,
                                          workers=config.workers, layer=config.features)

    def write(target: Any) -> None:  # a temporary path (a local store) or a buffer (a bucket)
        if isinstance(target, (str, Path)):
            with open(target, "wb") as fh:
                np.savez(fh, features=feats, positions=pos, errors=np.array(errors, dtype=str))
        else:
            np.savez(target, features=feats, positions=pos, errors=np.array(errors, dtype=str))
    store.write_features(key, write)
    return feats, pos, errors


# ---------------------------------------------------------------------------- the linear probe
@dataclass
class ProbeResult:
    """A protocol's outcome: the ``chosen`` hyper-parameter, validation accuracy (percent) of
    each grid value, and the refit's test accuracy (percent)."""

    chosen: float
    val_accuracy: dict[float, float]
    accuracy: float


def _logistic(x: np.ndarray, y: np.ndarray, c: float):
    from sklearn.exceptions import ConvergenceWarning  # deferred: loads scikit-learn
    from sklearn.linear_model import LogisticRegression  # deferred: loads scikit-learn
    from sklearn.pipeline import make_pipeline  # deferred: loads scikit-learn
    from sklearn.preprocessing import StandardScaler  # deferred: loads scikit-learn
    from threadpoolctl import threadpool_limits  # deferred: scikit-learn's dependency

    # One BLAS thread: a 1,000 x D problem is far too small to split, and multi-threaded BLAS on a
    # busy machine made the grid 100x slower (bench/transfer.py). Large C on separable features
    # stops at max_iter, which is still a fine probe.
    with warnings.catch_warnings(), threadpool_limits(limits=1):
        warnings.simplefilter("ignore", ConvergenceWarning)
        return make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=1000)).fit(x, y)


def linear_probe(train_x: np.ndarray, train_y: np.ndarray, val_x: np.ndarray, val_y: np.ndarray,
                 test_x: np.ndarray, test_y: np.ndarray, c_grid: Sequence[float] = C_GRID) -> ProbeResult:
    """VTAB-1k's linear protocol on features: for each ``C``, standardise on ``train_x`` and fit
    L2 logistic regression, score on ``val_x``; the best ``C`` (first on ties) is refit on train
    + val and scored on ``test_x`` (Zhai et al. 2019, §3.3)."""
    if len(np.unique(train_y)) < 2:
        raise DataError(f"the training part has only class {train_y[0] if len(train_y) else '-'}; a probe "
                        "needs examples of at least two classes")
    scores = {float(c): 100.0 * float(np.mean(_logistic(train_x, train_y, c).predict(val_x) == val_y))
              for c in c_grid}
    best = max(scores, key=lambda c: (scores[c], -list(scores).index(c)))
    probe = _logistic(np.concatenate([train_x, val_x]), np.concatenate([train_y, val_y]), best)
    return ProbeResult(best, scores, 100.0 * float(np.mean(probe.predict(test_x) == test_y)) if len(test_y) else float("nan"))


# ---------------------------------------------------------------------------- fine-tuning
def _pixels(loaded: LoadedModel, dataset: Any, indices: np.ndarray, config: TransferConfig):
    """All pixels of ``indices`` in memory (float32) and the positions that decoded."""
    import torch  # deferred: loads torch

    xs, kept, errors = [], [], []
    for x, pos, errs in _batches(loaded, dataset, indices, config.batch_size, config.workers):
        ok = torch.tensor([not e for e in errs])
        errors += [e for e in errs if e]
        xs.append(x[ok])
        kept.append(pos[ok].numpy())
    return torch.cat(xs), np.concatenate(kept), errors


def _finetuned(loaded: LoadedModel, x: Any, y: np.ndarray, num_classes: int, lr: float,
               config: TransferConfig, device: str) -> Callable[[Any], np.ndarray]:
    """A copy of the model with a new zero-initialised head, trained for ``finetune_steps`` SGD
    steps on ``(x, y)``; returns its predict function (batch -> class indices)."""
    import torch  # deferred: loads torch

    torch.manual_seed(config.seed)
    copy_ = dataclasses.replace(loaded, module=copy.deepcopy(loaded.module).to(device))
    features = penultimate(copy_, config.features)
    with torch.no_grad():
        dim = features(x[:2].to(device)).shape[1]
    head = torch.nn.Linear(dim, num_classes).to(device)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.zeros_(head.bias)
    params = [*copy_.module.parameters(), *head.parameters()]
    opt = torch.optim.SGD(params, lr=lr, momentum=0.9)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=config.finetune_steps)
    targets = torch.as_tensor(y, dtype=torch.long)
    g = torch.Generator().manual_seed(config.seed)
    copy_.module.train()
    order = torch.randperm(len(x), generator=g)
    cursor = 0
    for _ in range(config.finetune_steps):
        if cursor + config.finetune_batch_size > len(x):
            order, cursor = torch.randperm(len(x), generator=g), 0
        b = order[cursor:cursor + config.finetune_batch_size]
        cursor += len(b)
        loss = torch.nn.functional.cross_entropy(head(features(x[b].to(device))), targets[b].to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    copy_.module.eval()

    def predict(batch):
        with torch.inference_mode():
            return np.concatenate([head(features(batch[i:i + 256].to(device))).argmax(1).cpu().numpy()
                                   for i in range(0, len(batch), 256)]) if len(batch) else np.zeros(0, int)
    return predict


def finetune_protocol(loaded: LoadedModel, train: tuple[Any, np.ndarray], val: tuple[Any, np.ndarray],
                      test: tuple[Any, np.ndarray], num_classes: int, config: TransferConfig,
                      device: str) -> ProbeResult:
    """The fine-tuning protocol (module docstring): learning rate chosen on ``val``, refit on
    ``train`` + ``val``, scored on ``test``; each of ``(pixels, targets)``."""
    import torch  # deferred: loads torch

    def acc(predict, data):
        return 100.0 * float(np.mean(predict(data[0]) == data[1])) if len(data[1]) else float("nan")
    scores = {float(lr): acc(_finetuned(loaded, *train, num_classes, lr, config, device), val)
              for lr in config.lr_grid}
    best = max(scores, key=lambda v: (scores[v], -list(scores).index(v)))
    both = (torch.cat([train[0], val[0]]), np.concatenate([train[1], val[1]]))
    return ProbeResult(best, scores, acc(_finetuned(loaded, *both, num_classes, best, config, device), test))


# ---------------------------------------------------------------------------- one (model, task)
def _load_task_data(task: TransferTask, config: TransferConfig):
    """The task's training and test datasets, checked: single-label, one label space."""
    from shiftbench.datasets import load_dataset  # deferred: loads Pillow
    from shiftbench.settings import get_setting  # deferred: loads the dataset registry

    out = []
    for which, name in (("training", task.train), ("test", task.test)):
        setting = get_setting(name)
        ds = load_dataset(setting.dataset, config.data_root, **dict(setting.dataset_args))
        if ds.multi_label:
            raise DataError(f"task {task.name!r}: the {which} set {name!r} is multi-label; transfer tasks need "
                            "one label per example")
        if not len(ds):
            raise DataError(f"task {task.name!r}: the {which} set {name!r} has no examples")
        out.append(ds)
    train, test = out
    same = (train.num_classes == test.num_classes and
            (train.class_names is None or test.class_names is None or list(train.class_names) == list(test.class_names)))
    if not same:
        def show(ds):
            names = list(ds.class_names or [])
            return f"{ds.num_classes} classes" + (f" ({', '.join(names[:5])}{', ...' if len(names) > 5 else ''})"
                                                 if names else "")
        raise DataError(f"task {task.name!r}: training set {task.train!r} has {show(train)} but test set "
                        f"{task.test!r} has {show(test)}; give both sets the same classes (same folder names, "
                        "or ?classes=<file> on both)")
    return train, test


def _done_row(store: Store, key: str) -> dict[str, Any]:
    return store._read_json(f"done/{key}.json")


def transfer_task(model: str | LoadedModel, task: TransferTask, config: TransferConfig,
                  store: str | Path | Store | None = None) -> dict[str, Any]:
    """Run (or read back, when finished) one (model, task) of the protocol; returns the stored
    result row (columns :data:`COLUMNS` and the model's metadata). A plain function of picklable
    arguments: ``ray.remote(transfer_task)`` runs it on a worker that reaches the same store."""
    import torch  # deferred: loads torch

    config.check()
    target = as_store(store)
    loaded = model if isinstance(model, LoadedModel) else load_model(model, **dict(config.load_kwargs or {}))
    train_ds, test_ds = _load_task_data(task, config)
    grid = ({"c_grid": [float(c) for c in config.c_grid]} if config.protocol == "linear" else
            {"lr_grid": [float(v) for v in config.lr_grid], "steps": config.finetune_steps,
             "batch": config.finetune_batch_size})
    setting = transfer_setting(task.name, config.protocol)
    key_meta = {"kind": STUDY_KIND, "model": loaded.name, "spec": loaded.spec, "weights": loaded.fingerprint,
                "preprocessing": loaded.preprocessing.to_dict(), "setting": setting, "task": task.name,
                "train": task.train, "test": task.test, "protocol": config.protocol, "seed": int(config.seed),
                "n_train": config.n_train, "n_val": config.n_val, **grid,
                "data": digest([train_ds.ids, train_ds.targets, test_ds.ids, test_ds.targets]),
                "version": ".".join(__version__.split(".")[:2]),
                **({"features": config.features} if config.features else {})}
    key = digest(key_meta)
    target.register(key, key_meta)
    if config.force:
        target.forget(key)
    if target.is_done(key):  # the group is a label, not part of the key: the task's current one wins
        return {**_done_row(target, key), "group": task.group}
    if config.progress:
        print(f"transfer: {loaded.name} on {task.name} ({config.protocol}, seed {config.seed})", file=sys.stderr)
    start = time.perf_counter()
    device = config.device or ("cuda" if torch.cuda.is_available() else "cpu")
    tr, va, note = draw_split(len(train_ds), config.n_train, config.n_val, config.seed)
    pool = np.concatenate([tr, va])
    test_idx = np.arange(len(test_ds))
    y_pool = np.asarray(train_ds.targets)[pool]
    y_test = np.asarray(test_ds.targets)
    if config.protocol == "linear":
        fp, kp, ep = _cached_features(target, loaded, train_ds, task.train, pool, config, device)
        ft, kt, et = _cached_features(target, loaded, test_ds, task.test, test_idx, config, device)
    else:
        fp, kp, ep = _pixels(loaded, train_ds, pool, config)
        ft, kt, et = _pixels(loaded, test_ds, test_idx, config)
    is_train = kp < len(tr)
    if is_train.sum() == 0 or (~is_train).sum() == 0:
        raise DataError(f"task {task.name!r}: no decodable example left in its train or validation part")
    parts = [(fp[m], y_pool[kp[m]]) for m in (np.flatnonzero(is_train), np.flatnonzero(~is_train))]
    test_data = (ft, y_test[kt])
    if config.protocol == "linear":
        result = linear_probe(*parts[0], *parts[1], *test_data, c_grid=config.c_grid)
    else:
        result = finetune_protocol(loaded, parts[0], parts[1], test_data, train_ds.num_classes, config, device)
    notes = [n for n in (note, *(f"{len(e)} {w} images could not be decoded and were left out"
                                 for e, w in ((ep, "training"), (et, "test")) if e)) if n]
    summary = {"model": loaded.name, "setting": setting, "accuracy": result.accuracy, "top5": None,
               "n_examples": len(kt), "n_skipped": len(et), "convention": "full",
               "dataset": test_ds.name, "task": task.name, "group": task.group, "protocol": config.protocol,
               "seed": int(config.seed), "val_accuracy": result.val_accuracy[result.chosen],
               "hyperparameter": "C" if config.protocol == "linear" else "lr", "chosen": result.chosen,
               "grid_val_accuracy": {str(k): v for k, v in result.val_accuracy.items()},
               "n_train": int(is_train.sum()), "n_val": int((~is_train).sum()), "n_test": len(kt),
               "seconds": time.perf_counter() - start, "notes": notes,
               "skipped_files": (ep + et)[:100], "spec": loaded.spec,
               "model_type": loaded.metadata.get("model_type", "UNKNOWN"), "arch": loaded.metadata.get("arch"),
               "tags": list(loaded.metadata.get("tags", ())), "weights": loaded.fingerprint,
               "preprocessing": loaded.preprocessing.to_dict(), "version": __version__}
    target.finish(key, summary)
    return _done_row(target, key)


def stored_groups(store: str | Path | Store) -> dict[str, str]:
    """``task -> group`` of every transfer result in ``store`` (the groups the tasks declared), for
    :func:`~shiftbench.analysis.transfer.transfer_group_means` over ``Testbed.from_store``."""
    return Store.existing(store).transfer_groups()


# ---------------------------------------------------------------------------- the study
def _frame(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame([dict(r) for r in rows])
    for c in COLUMNS:
        if c not in frame:
            frame[c] = pd.Series(dtype=object)
    frame["notes"] = ["; ".join(n) if isinstance(n, list) else (n or "") for n in frame["notes"]]
    return frame[COLUMNS].reset_index(drop=True)


def _study(model_name: str, config: TransferConfig, rows: Sequence[Mapping[str, Any]], store: Store) -> StudyResult:
    """The model's rows as the study ``transfer`` / ``<model>__<protocol>__seed<seed>-<hash>``
    (:func:`~shiftbench.studies.base.stored_study_name`: a study stored before names carried a hash
    keeps its name), merged with the stored rows of tasks not run now (a later run adds tasks, it
    does not drop them)."""
    name = stored_study_name(store, STUDY_KIND, (model_name, config.protocol, f"seed{config.seed}"),
                             {"model": model_name, "protocol": config.protocol, "seed": int(config.seed)})
    frame = _frame(rows)
    if name in store.study_names(STUDY_KIND):
        old = store.read_study(STUDY_KIND, name)
        frame = pd.concat([old[~old["task"].isin(frame["task"])][COLUMNS], frame], ignore_index=True)
    meta = {"model": model_name, "protocol": config.protocol, "seed": int(config.seed),
            "tasks": list(frame["task"]), "n_train": config.n_train, "n_val": config.n_val,
            "grid": list(config.c_grid if config.protocol == "linear" else config.lr_grid)}
    return StudyResult(STUDY_KIND, name, frame, meta)


@register_study
class TransferStudy(Study):
    """VTAB-1k transfer of one model to each task (Zhai et al. 2019; Djolonga et al. 2021).

    Its report section ``transfer`` (:mod:`shiftbench.report.section_transfer`) reads the
    ``transfer:<task>`` results back and correlates robustness metrics with transfer accuracy
    per task group.
    """

    kind, config_type, section = STUDY_KIND, TransferConfig, "transfer"
    description = "VTAB-1k transfer: a linear probe or fine-tuning from 1,000 examples per task"

    def run(self, config: TransferConfig, store: str | Path | Store | None = None) -> StudyResult:
        config.check()
        target = as_store(store)
        loaded = (config.model if isinstance(config.model, LoadedModel)
                  else load_model(config.model, **dict(config.load_kwargs or {})))
        rows = [transfer_task(loaded, task, config, target) for task in config.tasks]
        result = _study(loaded.name, config, rows, target)
        result.write(target)
        return result


def transfer(models: str | LoadedModel | Sequence[str | LoadedModel], tasks: TransferTask | Sequence[TransferTask],
             *, protocol: str = "linear", store: str | Path | Store | None = None, seed: int = 0,
             executor: str = "local", address: str | None = None, progress: bool = True,
             **options: Any) -> pd.DataFrame:
    """Transfer every model to every task (module docstring) and return one row per (model, task).

    Parameters
    ----------
    models:
        Model specs (``timm:resnet50.a1_in1k``, ``python:mod:fn``, ``checkpoint:...``) or loaded models.
    tasks:
        :class:`TransferTask` objects (:func:`parse_task`, :func:`read_tasks`).
    protocol:
        ``linear`` (default: logistic regression on frozen penultimate features) or ``finetune``.
    store:
        The results store (default ``shiftbench-results``): results are settings
        ``transfer:<task>`` of ``Testbed.from_store``, features are cached under ``features/``.
    seed:
        Seed of the 800/200 draw (and of fine-tuning).
    executor:
        ``local`` (one process; each model loaded once) or ``ray`` (one Ray task per (model, task)
        on the cluster at ``address``, or a local Ray; the store must be reachable by every worker).
    options:
        Fields of :class:`TransferConfig`: ``n_train``, ``n_val``, ``c_grid``, ``lr_grid``,
        ``finetune_steps``, ``batch_size``, ``data_root``, ``device``, ``workers``, ``force``,
        ``load_kwargs``.

    Returns
    -------
    DataFrame with columns :data:`COLUMNS`: ``model, task, group, protocol, seed, accuracy``
    (test top-1, percent), ``val_accuracy`` (of the chosen value on the 200), ``hyperparameter``
    (``C`` or ``lr``), ``chosen``, ``n_train, n_val, n_test, n_skipped, seconds``, ``setting``
    (``transfer:<task>``), ``key`` and ``notes``.
    """
    model_list = [models] if isinstance(models, str | LoadedModel) else list(models)
    task_list = [tasks] if isinstance(tasks, TransferTask) else list(tasks)
    unknown = set(options) - {f.name for f in dataclasses.fields(TransferConfig)}
    if unknown:
        raise ConfigError(f"transfer: unknown option {min(unknown)!r}; "
                          f"use fields of TransferConfig ({', '.join(f.name for f in dataclasses.fields(TransferConfig))})")
    if not model_list:
        raise ConfigError("transfer: no model; give at least one model spec")
    target = as_store(store)
    configs = [TransferConfig(m, tuple(task_list), protocol=protocol, seed=seed, progress=progress, **options)
               for m in model_list]
    configs[0].check()
    if executor == "local":
        frames = [TransferStudy().run(c, target).frame for c in configs]
        tasks_now = {t.name for t in task_list}
        return pd.concat([f[f["task"].isin(tasks_now)] for f in frames], ignore_index=True)
    if executor != "ray":
        raise ConfigError(f"unknown executor {executor!r}; use local or ray")
    rows = _ray_rows(configs, task_list, target, address)
    for c, r in zip(configs, rows):
        _study(r[0]["model"], c, r, target).write(target)
    return _frame([row for r in rows for row in r])


def _ray_rows(configs: Sequence[TransferConfig], tasks: Sequence[TransferTask], store: Store,
              address: str | None) -> list[list[dict[str, Any]]]:
    """One Ray task per (model, task) (each loads its model); rows grouped per model."""
    try:
        import ray  # deferred: loads ray
    except ImportError as exc:  # pragma: no cover - ray is installed by the Makefile
        raise ConfigError("executor='ray' needs Ray: pip install 'shiftbench[ray]'") from exc
    if any(isinstance(c.model, LoadedModel) for c in configs):
        raise ConfigError("executor='ray' takes model specs (strings), not loaded models")
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, ignore_reinit_error=True, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    try:
        remote = ray.remote(num_cpus=1, max_retries=3)(transfer_task)
        refs = [[remote.remote(c.model, t, dataclasses.replace(c, progress=False), store) for t in tasks]
                for c in configs]
        return [ray.get(r) for r in refs]
    finally:
        if started:
            ray.shutdown()

