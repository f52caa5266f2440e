"""shiftbench: measure how image classifiers hold up under distribution shift.

The analysis API needs only numpy, scipy and pandas:

>>> import shiftbench
>>> tb = shiftbench.load_testbed("imagenet-reference")
>>> fit = shiftbench.fit_trend("val", "imagenetv2-matched-frequency-format-val", testbed=tb)
>>> round(fit.slope, 2)
0.92
"""
from shiftbench.analysis import (
    Band, Correlation, PiecewiseTrendFit, TrendFit, accuracy_interval, bootstrap_band, clopper_pearson,
    effective_robustness, fit_piecewise_trend, fit_trend, most_effectively_robust, relative_robustness,
    robustness_correlation)
from shiftbench.errors import ConfigError, DataError, ModelError, ShiftbenchError, StoreError
from shiftbench.reference import list_testbeds, load_testbed
from shiftbench.testbed import Testbed

__version__ = "0.1.0"


def __getattr__(name: str):
    """``shiftbench.evaluate`` / ``shiftbench.load_model`` import torch only when first used."""
    if name == "evaluate":
        from shiftbench.engine import evaluate

        return evaluate
    if name == "load_model":
        from shiftbench.models import load_model

        return load_model
    raise AttributeError(f"module 'shiftbench' has no attribute {name!r}")

__all__ = [
    "Testbed", "load_testbed", "list_testbeds",
    "fit_trend", "fit_piecewise_trend", "bootstrap_band", "TrendFit", "PiecewiseTrendFit", "Band",
    "clopper_pearson", "accuracy_interval",
    "effective_robustness", "relative_robustness", "most_effectively_robust",
    "robustness_correlation", "Correlation",
    "ShiftbenchError", "ConfigError", "DataError", "ModelError", "StoreError", "evaluate", "load_model",
]
