"""``Trajectory``: a hook for any PyTorch training loop that evaluates checkpoints through the
engine and stores them as a fine-tuning trajectory (Andreassen et al. 2021, "The Evolution of
Out-of-Distribution Robustness Throughout Fine-Tuning").

>>> tracker = Trajectory("fmnist-pretrained", ["mnist-test", "uci-digits"],
...                      store="shiftbench-results", data_root="data",
...                      preprocessing=DIGITS_PREPROCESSING)             # doctest: +SKIP
>>> for epoch in range(epochs):                                       # doctest: +SKIP
...     train_one_epoch(net)
...     tracker.evaluate(net, step=global_step, epoch=epoch + 1)
>>> tracker.effective_robustness(testbed)                              # doctest: +SKIP

Each call evaluates every setting with :func:`shiftbench.evaluate` under the model name
``<name>@step<step>`` (the weights' sha256 is the key's fingerprint, so each checkpoint is its
own key) and appends one row per setting to the store's study ``trajectory/<name>``
(``step, epoch, setting, accuracy, n_examples, model, top5, ece, weights, evaluated``). The
append is a locked read-modify-write replaced atomically, and a step is never stored twice: an
interrupted training run that is restarted and calls ``evaluate`` for a step already stored
gets the stored rows back without a forward pass, and appending resumes after it.

The model is evaluated in place, on its own device (or ``device``), under ``torch.inference_mode``
in eval mode; its train/eval mode is restored afterwards. torch is imported only when a
checkpoint is evaluated, so :meth:`Trajectory.load` and the analysis work without it.

As a study (:mod:`shiftbench.studies`): :class:`TrajectoryConfig` holds the constructor's
arguments and a list of :class:`Checkpoint` s; ``run_study(config, store)`` evaluates them
(:class:`TrajectoryStudy`) and returns the stored trajectory as a
:class:`~shiftbench.studies.base.StudyResult` (``value`` is the :class:`Trajectory`). The
report's "Fine-tuning trajectories" section draws every stored one.
"""
from __future__ import annotations

import numbers
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from shiftbench.analysis.trajectory import (
    TRAJECTORY_COLUMNS,
    check_trajectory,
    checkpoint_name,
    trajectory_accuracies,
    trajectory_effective_robustness,
)
from shiftbench.errors import ConfigError, StoreError
from shiftbench.models.base import LoadedModel, Preprocessing
from shiftbench.models.registry import state_dict_sha256
from shiftbench.store.store import DEFAULT_STORE, Store
from shiftbench.studies.base import Study, StudyResult, register_study
from shiftbench.testbed import MODEL_TYPES

KIND = "trajectory"
#: Columns stored beside :data:`~shiftbench.analysis.trajectory.TRAJECTORY_COLUMNS`.
EXTRA_COLUMNS = ["top5", "ece", "weights", "evaluated"]


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint of a training run: ``model`` (a ``torch.nn.Module`` or a
    :class:`~shiftbench.models.base.LoadedModel`) at training step ``step`` (and ``epoch``)."""

    model: Any
    step: int
    epoch: float | None = None


@dataclass(frozen=True)
class TrajectoryConfig:
    """A fine-tuning trajectory: the arguments of :class:`Trajectory` and the ``checkpoints`` to
    evaluate (``run_study(config, store)``; a training loop calls :meth:`Trajectory.evaluate`
    per checkpoint instead)."""

    name: str
    settings: str | Sequence[str]
    data_root: str | Path = "."
    data_dirs: Mapping[str, str | Path] | None = None
    id_setting: str | None = None
    preprocessing: Preprocessing | None = None
    model_type: str = "UNKNOWN"
    tags: Iterable[str] = ()
    batch_size: int = 256
    limit: int | None = None
    device: str | None = None
    workers: int = 0
    seed: int = 0
    checkpoints: Sequence[Checkpoint] = field(default_factory=tuple)


@register_study
class TrajectoryStudy(Study):
    """Checkpoints of a training run on ID and shifted settings (Andreassen et al. 2021); the
    report section ``fine-tuning``."""

    kind, config_type, section = KIND, TrajectoryConfig, "fine-tuning"
    description = "accuracy of training checkpoints on in-distribution and shifted settings"

    def run(self, config: TrajectoryConfig, store: str | Path | Store | None = None) -> StudyResult:
        tracker = Trajectory.from_config(config, store)
        for ck in config.checkpoints:
            tracker.evaluate(ck.model, ck.step, ck.epoch)
        return tracker.result()


class Trajectory:
    """Evaluate checkpoints of a training run on ``settings`` and store them as a trajectory.

    Parameters
    ----------
    name:
        The trajectory's name (the study name in the store; checkpoints are stored as models
        ``<name>@step<step>``).
    settings:
        Setting names (``shiftbench list settings``): the in-distribution one and the shifted ones.
    store:
        The results store (directory or :class:`~shiftbench.store.Store`).
    data_root, data_dirs:
        Where the datasets live, as for :func:`shiftbench.evaluate`.
    id_setting:
        The in-distribution setting (x axis); default the first of ``settings``.
    preprocessing:
        How inputs reach a plain ``nn.Module`` given to :meth:`evaluate` (resize, crop, mean/std
        applied by a wrapper, so the module receives normalised pixels as in training). Not
        needed for a :class:`~shiftbench.models.base.LoadedModel` or a module carrying a
        ``preprocessing`` attribute.
    model_type, tags:
        Metadata of the stored checkpoints (default ``UNKNOWN``: checkpoints are never part of a
        trend fitted on ``STANDARD`` models).
    batch_size, limit, device, workers, seed:
        Passed to :func:`shiftbench.evaluate` (``limit``: the first ``limit`` examples of each set).
    """

    def __init__(
        self,
        name: str,
        settings: str | Sequence[str],
        *,
        store: str | Path | Store = DEFAULT_STORE,
        data_root: str | Path = ".",
        data_dirs: Mapping[str, str | Path] | None = None,
        id_setting: str | None = None,
        preprocessing: Preprocessing | None = None,
        model_type: str = "UNKNOWN",
        tags: Iterable[str] = (),
        batch_size: int = 256,
        limit: int | None = None,
        device: str | None = None,
        workers: int = 0,
        seed: int = 0,
    ) -> None:
        if not isinstance(name, str) or not name.strip() or "/" in name or name.startswith(".") or "@" in name:
            raise ConfigError(f"trajectory name {name!r}: use a plain name without '/', '@' or a leading '.'")
        names = [settings] if isinstance(settings, str) else list(settings)
        if len(names) < 1 or len(set(names)) != len(names):
            raise ConfigError(f"trajectory {name!r}: give one or more distinct settings, got {names!r}")
        id_setting = names[0] if id_setting is None else id_setting
        if id_setting not in names:
            raise ConfigError(f"trajectory {name!r}: id_setting {id_setting!r} is not one of its settings {names!r}")
        if preprocessing is not None and not isinstance(preprocessing, Preprocessing):
            raise ConfigError(f"trajectory {name!r}: preprocessing must be a shiftbench.models.Preprocessing")

        if model_type not in MODEL_TYPES:
            raise ConfigError(f"trajectory {name!r}: model_type {model_type!r} is not one of {', '.join(MODEL_TYPES)}")
        self.name, self.settings, self.id_setting = name, names, id_setting
        self.store = store if isinstance(store, Store) else Store(store)
        self.data_root, self.data_dirs = data_root, data_dirs
        self.preprocessing, self.model_type, self.tags = preprocessing, model_type, tuple(tags)
        self.batch_size, self.limit, self.device, self.workers, self.seed = batch_size, limit, device, workers, seed
        self.n_engine_calls = 0
        meta = self.store.study_meta(KIND, name) if self.store.has_study(KIND, name) else {}
        if meta.get("id_setting") not in (None, id_setting):
            raise ConfigError(f"trajectory {name!r} in {self.store.root} was stored with id_setting "
                              f"{meta['id_setting']!r}, not {id_setting!r}; use that or another name")

    # ------------------------------------------------------------------ stored table
    @property
    def _path(self) -> Path | str:
        return self.store.check_study_name(KIND, self.name)

    @classmethod
    def load(cls, store: str | Path | Store, name: str) -> Trajectory:
        """The stored trajectory ``name`` (to read or analyse it, or to keep appending to it)."""
        st = store if isinstance(store, Store) else Store(store)
        frame = st.read_study(KIND, name)          # StoreError naming the file when it is missing
        meta = st.study_meta(KIND, name)
        settings = list(meta.get("settings") or dict.fromkeys(frame["setting"]))
        return cls(name, settings, store=st, id_setting=meta.get("id_setting"),
                   model_type=meta.get("model_type", "UNKNOWN"), tags=meta.get("tags", ()))

    @property
    def frame(self) -> pd.DataFrame:
        """The stored rows (``step, epoch, setting, accuracy, n_examples, model, ...``), in step
        order; empty before the first checkpoint."""
        if not self.store.has_study(KIND, self.name):
            return pd.DataFrame(columns=TRAJECTORY_COLUMNS + EXTRA_COLUMNS)
        return check_trajectory(self.store.read_study(KIND, self.name), f"{self._path}")

    @property
    def steps(self) -> list[int]:
        """The stored steps, ascending."""
        return sorted(int(s) for s in self.frame["step"].unique())

    @property
    def ood_settings(self) -> list[str]:
        return [s for s in self.settings if s != self.id_setting]

    def accuracies(self, y: str | None = None) -> pd.DataFrame:
        """Per checkpoint: ``step, epoch, model, x_acc, y_acc, x_n, y_n`` (x: the ID setting;
        y: ``y`` or the first shifted setting)."""
        return trajectory_accuracies(self.frame, self.id_setting, y or self._default_y())

    def _default_y(self) -> str:
        if not self.ood_settings:
            raise ConfigError(f"trajectory {self.name!r} has only its in-distribution setting; give y=")
        return self.ood_settings[0]

    def effective_robustness(self, testbed: Any, x: str | None = None, y: str | None = None,
                             scale: str = "logit", **kwargs: Any) -> pd.DataFrame:
        """Effective robustness of every checkpoint against ``testbed``'s trend of ``y`` on ``x``
        (defaults: the ID setting and the first shifted one); see
        :func:`~shiftbench.analysis.trajectory.trajectory_effective_robustness`."""
        return trajectory_effective_robustness(testbed, self.frame, x or self.id_setting, y or self._default_y(),
                                               scale, **kwargs)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, model: Any, step: int, epoch: float | None = None) -> pd.DataFrame:
        """Evaluate the checkpoint ``model`` at training step ``step`` on every setting and
        append it to the stored trajectory; returns its rows (one per setting).

        ``model`` is a :class:`~shiftbench.models.base.LoadedModel` or a ``torch.nn.Module``
        taking normalised input (``preprocessing`` of the trajectory, or the module's own
        ``preprocessing`` attribute). A step already stored for every setting is returned
        from the store without evaluating anything.
        """
        if isinstance(step, bool) or not isinstance(step, int) and not (hasattr(step, "__index__")):
            raise ConfigError(f"trajectory {self.name!r}: step must be an integer, got {step!r}")
        step = int(step)
        if step < 0:
            raise ConfigError(f"trajectory {self.name!r}: step must be >= 0, got {step}")
        if epoch is not None and (isinstance(epoch, bool) or not isinstance(epoch, numbers.Real) or not epoch >= 0):
            raise ConfigError(f"trajectory {self.name!r}: epoch must be a number >= 0, got {epoch!r}")
        stored = self.frame
        have = stored[stored["step"] == step]
        todo = [s for s in self.settings if s not in set(have["setting"])]
        if not todo:
            return have.set_index("setting").loc[self.settings].reset_index()[stored.columns]
        rows = self._run(model, step, epoch, todo)
        with self._locked():
            current = self.frame
            merged = pd.concat([current, rows], ignore_index=True) if len(current) else rows
            merged = merged.drop_duplicates(["step", "setting"], keep="first")
            self.store.write_study(KIND, self.name, check_trajectory(merged, str(self._path)), self._meta())
        out = self.frame
        return out[out["step"] == step].set_index("setting").loc[self.settings].reset_index()[out.columns]

    def _meta(self) -> dict[str, Any]:
        return {"settings": self.settings, "id_setting": self.id_setting, "ood_settings": self.ood_settings,
                "model_type": self.model_type, "tags": list(self.tags), "limit": self.limit,
                "reference": "Andreassen et al. 2021"}

    def _locked(self):
        """An inter-process lock around the read-modify-write of the stored table."""
        return self.store.study_lock(KIND, self.name)

    @property
    def config(self) -> TrajectoryConfig:
        """This trajectory's :class:`TrajectoryConfig` (without checkpoints)."""
        return TrajectoryConfig(self.name, tuple(self.settings), data_root=self.data_root, data_dirs=self.data_dirs,
                                id_setting=self.id_setting, preprocessing=self.preprocessing,
                                model_type=self.model_type, tags=self.tags, batch_size=self.batch_size,
                                limit=self.limit, device=self.device, workers=self.workers, seed=self.seed)

    @classmethod
    def from_config(cls, config: TrajectoryConfig, store: str | Path | Store | None = None) -> Trajectory:
        """The trajectory of ``config`` in ``store`` (default ``shiftbench-results``)."""
        return cls(config.name, config.settings, store=store if store is not None else DEFAULT_STORE,
                   data_root=config.data_root, data_dirs=config.data_dirs, id_setting=config.id_setting,
                   preprocessing=config.preprocessing, model_type=config.model_type, tags=config.tags,
                   batch_size=config.batch_size, limit=config.limit, device=config.device, workers=config.workers,
                   seed=config.seed)

    def result(self) -> StudyResult:
        """The stored trajectory as a :class:`~shiftbench.studies.base.StudyResult` (``value``: self)."""
        return StudyResult(KIND, self.name, self.frame, self._meta(), value=self, path=self._path)

    def _loaded(self, model: Any, step: int) -> LoadedModel:
        """``model`` as a LoadedModel named ``<name>@step<step>``, fingerprinted by its weights."""

        cname = checkpoint_name(self.name, step)
        tags = tuple(dict.fromkeys(("trajectory", f"trajectory:{self.name}", *self.tags)))
        if isinstance(model, LoadedModel):
            meta = {**model.metadata, "model_type": self.model_type, "tags": tags, "trajectory": self.name,
                    "step": step}
            return LoadedModel(spec=f"trajectory:{self.name}", name=cname, module=model.module,
                               preprocessing=model.preprocessing, num_classes=model.num_classes,
                               label_space=model.label_space,
                               fingerprint="sha256:" + state_dict_sha256(model.module), metadata=meta,
                               class_names=model.class_names)
        import torch  # deferred: loads torch
        from torch import nn  # deferred: loads torch

        from shiftbench.models.wrapper import Normalized  # deferred: loads torch

        if not isinstance(model, nn.Module):
            raise ConfigError(f"trajectory {self.name!r}: evaluate() takes a torch.nn.Module or a LoadedModel, "
                              f"got {type(model).__name__}")
        pre = self.preprocessing or getattr(model, "preprocessing", None)
        if not isinstance(pre, Preprocessing):
            raise ConfigError(f"trajectory {self.name!r}: give Trajectory(..., preprocessing=Preprocessing(...)) "
                              "so shiftbench knows the module's input size and normalisation")
        num_classes = getattr(model, "num_classes", None)
        if num_classes is None:
            param = next(model.parameters(), None)
            x = torch.full((1, 3, *pre.input_hw), 0.5,
                           device=param.device if param is not None else "cpu")
            with torch.inference_mode():
                num_classes = int(Normalized(model, pre.mean, pre.std).to(x.device)(x).shape[1])
        meta = {"model_type": self.model_type, "tags": tags, "arch": type(model).__name__,
                "trajectory": self.name, "step": step}
        return LoadedModel(spec=f"trajectory:{self.name}", name=cname, module=Normalized(model, pre.mean, pre.std),
                           preprocessing=pre, num_classes=int(num_classes),
                           label_space=getattr(model, "label_space", None) or f"{num_classes}-classes",
                           fingerprint="sha256:" + state_dict_sha256(model), metadata=meta,
                           class_names=getattr(model, "class_names", None))

    def _run(self, model: Any, step: int, epoch: float | None, settings: list[str]) -> pd.DataFrame:
        from shiftbench.engine.runner import evaluate  # deferred: loads Pillow, loads pyarrow

        net = model.module if isinstance(model, LoadedModel) else model
        training = bool(getattr(net, "training", False))
        device = self.device
        if device is None and hasattr(net, "parameters"):
            param = next(net.parameters(), None)
            device = str(param.device) if param is not None else None
        try:
            loaded = self._loaded(model, step)
            self.n_engine_calls += 1
            res = evaluate(loaded, settings, data_root=self.data_root, data_dirs=self.data_dirs, store=self.store,
                           batch_size=self.batch_size, workers=self.workers, limit=self.limit, device=device,
                           seed=self.seed, progress=False)
        except StoreError as exc:
            raise StoreError(f"trajectory {self.name!r}, step {step}: {exc}") from exc
        finally:
            if hasattr(net, "train"):
                net.train(training)
        return pd.DataFrame({
            "step": step, "epoch": float("nan") if epoch is None else float(epoch),
            "setting": res["setting"].astype(str), "accuracy": res["accuracy"].astype(float),
            "n_examples": res["n_examples"].astype(int), "model": loaded.name,
            "top5": pd.to_numeric(res.get("top5"), errors="coerce"),
            "ece": pd.to_numeric(res["ece"], errors="coerce") if "ece" in res else float("nan"),
            "weights": loaded.fingerprint, "evaluated": time.time()})
