"""Training recipes of the digits zoo: torch networks (plain, augmented, adversarial, pretrained)
and scikit-learn estimators, all on the demo's 32 x 32 representation.

A recipe is a plain dict (it is part of the cache key of the model it trains):

torch (``"framework": "torch"``)
    ``arch`` (an architecture name of :mod:`shiftbench.demo.archs`), ``epochs``, ``n_train``
    (the first ``n_train`` training digits, or all), ``lr`` (Adam), ``batch_size``, ``seed``, and
    at most one intervention (``deepaugment`` combines with ``augment``):

    * ``augment``: ``"augmix"`` (torchvision's ``v2.AugMix`` with its defaults, Hendrycks et al.
      2020, on a fraction ``p`` of each batch, drawing from torch's RNG seeded by the recipe; the
      transform :mod:`shiftbench.shifts.augment` wraps, without its per-image RNG fork, which costs
      ~6x more per image), ``"noise2net"`` (:class:`shiftbench.shifts.noise2net.Noise2Net`, a fresh random
      Res2Net per image, Hendrycks et al. 2021, on a fraction ``p``), ``"gaussian"`` (additive
      Gaussian noise with sigma ~ U(0, ``sigma``) per image);
    * ``deepaugment``: ``{"networks", "width", "train_steps", "seed", "p"}``, DeepAugment
      (Hendrycks et al. 2021, §4): each image of a batch is replaced by its DeepAugment copy
      (:mod:`shiftbench.demo.deepaugment`, made by :func:`shiftbench.deepaugment`) with probability
      ``p``, before the ``augment`` above if the recipe has one (DeepAugment + AugMix: AugMix on top
      of the mix of originals and copies, as the authors train it);
    * ``adversarial``: ``{"norm", "eps", "steps"}``, PGD adversarial training (Madry et al. 2018):
      every batch is replaced by its PGD adversarial examples (random start, step 2.5 eps / steps),
      attacked with the network in eval mode;
    * ``pretrain``: ``{"data": "fashion-mnist", "n", "epochs"}``, the same network first trained
      on Fashion-MNIST, then its classifier re-initialised and every weight fine-tuned on MNIST
      with the recipe's budget.

scikit-learn (``"framework": "sklearn"``)
    ``estimator`` (a key of :data:`ESTIMATORS`), ``params``, ``n_train``. Features are the
    1,024 greyscale pixels in [0, 1].
"""
from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from shiftbench.errors import ConfigError

ESTIMATORS = ("logistic_regression", "linear_svm", "rbf_svm", "knn", "nearest_centroid", "gaussian_nb",
              "decision_tree", "random_forest", "mlp")


def _subset(x: np.ndarray, y: np.ndarray, n: int | None) -> tuple[np.ndarray, np.ndarray]:
    return (x, y) if n is None else (x[:n], y[:n])


def pixels(x_uint8: np.ndarray) -> np.ndarray:
    """``(N, 32, 32)`` uint8 -> ``(N, 1024)`` float32 in [0, 1] (the scikit-learn features)."""
    return x_uint8.reshape(len(x_uint8), -1).astype(np.float32) / 255.0


# ----------------------------------------------------------------------------- scikit-learn
def make_estimator(name: str, params: dict[str, Any]) -> Any:
    from sklearn.ensemble import RandomForestClassifier  # deferred: loads scikit-learn
    from sklearn.linear_model import LogisticRegression  # deferred: loads scikit-learn
    from sklearn.naive_bayes import GaussianNB  # deferred: loads scikit-learn
    from sklearn.neighbors import KNeighborsClassifier, NearestCentroid  # deferred: loads scikit-learn
    from sklearn.neural_network import MLPClassifier  # deferred: loads scikit-learn
    from sklearn.svm import SVC, LinearSVC  # deferred: loads scikit-learn
    from sklearn.tree import DecisionTreeClassifier  # deferred: loads scikit-learn

    table = {"logistic_regression": LogisticRegression, "linear_svm": LinearSVC, "rbf_svm": SVC,
             "knn": KNeighborsClassifier, "nearest_centroid": NearestCentroid, "gaussian_nb": GaussianNB,
             "decision_tree": DecisionTreeClassifier, "random_forest": RandomForestClassifier, "mlp": MLPClassifier}
    if name not in table:
        raise ConfigError(f"unknown estimator {name!r}; one of {', '.join(table)}")
    return table[name](**params)


def train_sklearn(recipe: dict[str, Any], train_x: np.ndarray, train_y: np.ndarray) -> Any:
    """Fit the recipe's estimator on the (first ``n_train``) training digits."""
    import warnings  # deferred: registers on import

    from sklearn.exceptions import ConvergenceWarning  # deferred: loads scikit-learn

    x, y = _subset(train_x, train_y, recipe.get("n_train"))
    est = make_estimator(recipe["estimator"], dict(recipe.get("params", {})))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # budgets are deliberately small for some models
        warnings.filterwarnings("ignore", message=".*within_class_std_dev_.*")  # NearestCentroid: constant pixels
        est.fit(pixels(x), y)
    return est


def sklearn_logits(est: Any, features: np.ndarray) -> np.ndarray:
    """Scores ``(B, 10)`` whose argmax is the estimator's prediction: ``decision_function`` where
    the estimator has one (linear models, SVMs), else ``predict_log_proba`` (clipped at -1e4) or
    ``log(predict_proba + 1e-6)``; for nearest centroid minus the squared distance to each
    centroid (its ``decision_function`` is a discriminant that need not agree with ``predict``)."""
    if type(est).__name__ == "NearestCentroid":
        c = np.asarray(est.centroids_, np.float32)
        scores = -((features ** 2).sum(1, keepdims=True) - 2 * features @ c.T + (c ** 2).sum(1))
    elif hasattr(est, "decision_function"):
        scores = np.asarray(est.decision_function(features), np.float32)
    elif hasattr(est, "predict_log_proba"):
        with np.errstate(divide="ignore"):
            scores = np.maximum(np.asarray(est.predict_log_proba(features), np.float32), -1e4)
    else:
        scores = np.log(np.asarray(est.predict_proba(features), np.float32) + 1e-6)
    classes = np.asarray(est.classes_)
    if scores.shape[1] != 10 or not np.array_equal(classes, np.arange(10)):
        full = np.full((len(features), 10), -1e6, np.float32)
        full[:, classes] = scores
        scores = full
    return scores


# ----------------------------------------------------------------------------- torch
def _to_float(x_uint8: np.ndarray):
    import torch  # deferred: loads torch

    return torch.from_numpy(np.ascontiguousarray(x_uint8)).float().div_(255.0)[:, None].expand(-1, 3, -1, -1)


class _Augmenter:
    """The recipe's training-time augmentation of a [0, 1] batch (B, 3, 32, 32)."""

    def __init__(self, recipe: dict[str, Any], generator: Any) -> None:
        self.kind = recipe.get("augment")
        self.p = float(recipe.get("p", 1.0))
        self.sigma = float(recipe.get("sigma", 0.3))
        self.g = generator
        if self.kind == "augmix":
            from torchvision.transforms import v2  # deferred: loads Pillow, loads torch

            self.augmix = v2.AugMix()  # torchvision defaults: severity 3, width 3, depth 1-3, alpha 1
        elif self.kind == "noise2net":
            from shiftbench.shifts.noise2net import Noise2Net  # deferred: registers on import

            self.noise2net = Noise2Net(p=1.0, seed=int(recipe.get("seed", 0)))
        elif self.kind not in (None, "gaussian"):
            raise ConfigError(f"unknown augmentation {self.kind!r}; use augmix, noise2net or gaussian")

    def __call__(self, x: Any) -> Any:
        import torch  # deferred: loads torch

        if self.kind is None:
            return x
        chosen = (torch.rand(len(x), generator=self.g) < self.p).nonzero().flatten()
        if not len(chosen):
            return x
        x = x.clone()
        if self.kind == "gaussian":
            sig = torch.rand(len(chosen), 1, 1, 1, generator=self.g) * self.sigma
            noise = torch.randn(x[chosen].shape, generator=self.g) * sig
            x[chosen] = (x[chosen] + noise).clamp(0, 1)
        elif self.kind == "augmix":
            u8 = (x[chosen] * 255).round().to(torch.uint8)
            x[chosen] = torch.stack([self.augmix(im) for im in u8]).float() / 255.0
        else:
            x[chosen] = self.noise2net(x[chosen]).clamp(0, 1)
        return x


def _attack(recipe: dict[str, Any], model: Any, x: Any, y: Any, g: Any) -> Any:
    """PGD adversarial examples for training (:func:`shiftbench.shifts.adversarial.pgd`)."""
    adv = recipe["adversarial"]
    norm, eps, steps = adv["norm"], float(adv["eps"]), int(adv["steps"])
    was_training = model.training
    model.eval()
    try:
        import torch  # deferred: loads torch

        from shiftbench.shifts.adversarial import pgd  # deferred: registers on import

        gens = [torch.Generator().manual_seed(int(s)) for s in torch.randint(0, 2**62, (len(x),), generator=g)]
        out = pgd(model, x, y, norm, eps, steps=steps, generators=gens)
    finally:
        model.train(was_training)
    return out.detach()


def _deepaugmented(x: Any, idx: Any, copies: np.ndarray, p: float, g: Any) -> Any:
    """``x`` (the images ``idx`` of the training set) with each image replaced by its DeepAugment
    copy with probability ``p``."""
    import torch  # deferred: loads torch

    chosen = (torch.rand(len(idx), generator=g) < p).nonzero().flatten()
    if not len(chosen):
        return x
    x = x.clone()
    x[chosen] = torch.from_numpy(copies[idx[chosen].numpy()]).permute(0, 3, 1, 2).float().div_(255.0)
    return x


def _fit(net: Any, x_uint8: np.ndarray, y: np.ndarray, recipe: dict[str, Any], epochs: float,
         seed: int, on_step: Any = None, copies: np.ndarray | None = None) -> None:
    """Adam on cross-entropy for ``epochs`` passes (a fractional epoch stops early), with the
    recipe's augmentation or adversarial training (``copies``: the DeepAugment copies of
    ``x_uint8``, ``(N, H, W, 3)`` uint8, for a ``deepaugment`` recipe)."""
    import torch  # deferred: loads torch
    import torch.nn.functional as F  # deferred: loads torch

    from shiftbench.demo.archs import DIGITS_PREPROCESSING  # deferred: loads Pillow, loads pyarrow
    from shiftbench.models.wrapper import Normalized  # deferred: loads torch

    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)  # AugMix draws from torch's global RNG
    model = Normalized(net, DIGITS_PREPROCESSING.mean, DIGITS_PREPROCESSING.std)
    model.train()
    x_all, y_all = _to_float(x_uint8), torch.from_numpy(np.asarray(y, np.int64))
    bs = int(recipe.get("batch_size", 128))
    opt = torch.optim.Adam(net.parameters(), lr=float(recipe.get("lr", 1e-3)))
    total = max(1, int(math.ceil(epochs * len(x_all) / bs)))
    augment = _Augmenter(recipe, g)
    deep = recipe.get("deepaugment")
    if deep and (copies is None or len(copies) != len(x_all)):
        raise ConfigError("a deepaugment recipe needs the DeepAugment copies of its training digits "
                          "(shiftbench.demo.deepaugment.make_copies)")
    # one-cycle schedule, warm-up 20% of the steps (at least 2: OneCycleLR divides by the warm-up
    # length); runs of 1-2 steps keep the constant rate
    sched = (torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=float(recipe.get("lr", 1e-3)) * 3, total_steps=total,
                                                 pct_start=min(0.5, max(0.2, 2.0 / total)))
             if total >= 3 else None)
    step = 0
    while step < total:
        perm = torch.randperm(len(x_all), generator=g)
        for i in range(0, len(x_all), bs):
            if step >= total:
                break
            idx = perm[i:i + bs]
            x, yb = x_all[idx], y_all[idx]
            if deep:
                x = _deepaugmented(x, idx, copies, float(deep["p"]), g)
            x = augment(x)
            if recipe.get("adversarial"):
                x = _attack(recipe, model, x, yb, g)
            loss = F.cross_entropy(model(x.contiguous(memory_format=torch.channels_last)), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if sched is not None:
                sched.step()
            step += 1
    model.eval()


def train_torch(recipe: dict[str, Any], train_x: np.ndarray, train_y: np.ndarray,
                fashion: tuple[np.ndarray, np.ndarray] | None = None, copies: np.ndarray | None = None) -> Any:
    """Train the recipe's network; returns it (eval mode, CPU). ``copies``: the DeepAugment copies
    of ``train_x`` (a ``deepaugment`` recipe)."""
    import torch  # deferred: loads torch

    from shiftbench.models.registry import build_arch  # deferred: registers on import

    seed = int(recipe.get("seed", 0))
    torch.manual_seed(seed)
    net = build_arch(recipe["arch"], 10).net.to(memory_format=torch.channels_last)
    pre = recipe.get("pretrain")
    if pre:
        if fashion is None:
            raise ConfigError("this model is pretrained on Fashion-MNIST, which is not available")
        fx, fy = fashion
        _fit(net, fx[: pre.get("n")], fy[: pre.get("n")], {"lr": recipe.get("lr", 1e-3)}, float(pre["epochs"]),
             seed + 1)
        head = net.head if hasattr(net, "head") else net.net[-1]
        head.reset_parameters()
    x, y = _subset(train_x, train_y, recipe.get("n_train"))
    if copies is not None:
        copies = copies[: len(x)]
    _fit(net, x, y, recipe, float(recipe["epochs"]), seed, copies=copies)
    return net.eval()


def train(recipe: dict[str, Any], train_x: np.ndarray, train_y: np.ndarray,
          fashion: tuple[np.ndarray, np.ndarray] | None = None, copies: np.ndarray | None = None
          ) -> tuple[Any, float]:
    """Train the recipe (either framework); returns (model, seconds). ``copies``: the
    DeepAugment copies of ``train_x`` (a ``deepaugment`` recipe)."""
    start = time.perf_counter()
    if recipe["framework"] == "sklearn":
        model = train_sklearn(recipe, train_x, train_y)
    elif recipe["framework"] == "torch":
        model = train_torch(recipe, train_x, train_y, fashion, copies)
    else:
        raise ConfigError(f"unknown framework {recipe['framework']!r}")
    return model, time.perf_counter() - start
