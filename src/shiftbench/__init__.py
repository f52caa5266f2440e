"""shiftbench: measure how image classifiers hold up under distribution shift.

The analysis API needs only numpy, scipy and pandas:

>>> import shiftbench
>>> tb = shiftbench.load_testbed("imagenet-reference")
>>> fit = shiftbench.fit_trend("val", "imagenetv2-matched-frequency-format-val", testbed=tb)
>>> round(fit.slope, 2)
0.92
"""
import importlib

from shiftbench.analysis import (
    Band,
    Correlation,
    MultiTrendFit,
    PiecewiseTrendFit,
    TrendFit,
    accuracy_interval,
    bootstrap_band,
    clopper_pearson,
    effective_robustness,
    fit_piecewise_trend,
    fit_trend,
    most_effectively_robust,
    relative_robustness,
    robustness_correlation,
)
from shiftbench.errors import ConfigError, DataError, ModelError, ShiftbenchError, ShiftError, StoreError
from shiftbench.reference import list_testbeds, load_testbed
from shiftbench.testbed import Testbed
from shiftbench.version import __version__  # noqa: F401  (re-exported)

#: Public names imported on first use (torch, pyarrow or scikit-learn stay unloaded until needed).
_LAZY = {
    "evaluate": "shiftbench.engine", "load_model": "shiftbench.models",
    "Trajectory": "shiftbench.studies.trajectory",
    "trajectory_effective_robustness": "shiftbench.analysis.trajectory",
    "correctness_matrix": "shiftbench.correctness", "CorrectnessMatrix": "shiftbench.correctness",
    "model_similarity": "shiftbench.analysis.similarity", "dominance_probability": "shiftbench.analysis.similarity",
    "error_consistency": "shiftbench.analysis.similarity", "unsolved_examples": "shiftbench.analysis.similarity",
    "metric_informativeness": "shiftbench.analysis.informativeness",
    "informativeness_ranking": "shiftbench.analysis.informativeness",
    "trend_diagnostics": "shiftbench.analysis.diagnostics",
    "estimate_ood_accuracy": "shiftbench.analysis.agreement", "pairwise_agreement": "shiftbench.analysis.agreement",
    "LabelFreeEstimates": "shiftbench.analysis.agreement",
    "label_free_inputs": "shiftbench.correctness", "prediction_matrix": "shiftbench.correctness",
    "place_models": "shiftbench.analysis.placement",
    "synthetic_vs_natural": "shiftbench.analysis.synthetic", "SyntheticVsNatural": "shiftbench.analysis.synthetic",
    "replicate": "shiftbench.studies.replication", "Replication": "shiftbench.datasets.replication",
    "attribute_splits": "shiftbench.studies.attributes", "AttributeSplits": "shiftbench.datasets.attributes",
    "ClassMapView": "shiftbench.views.classmap",
    "hypotheses_table": "shiftbench.analysis.hypotheses", "HypothesesTable": "shiftbench.analysis.hypotheses",
    "load_groups": "shiftbench.analysis.hypotheses",
    "transfer": "shiftbench.studies.transfer", "TransferTask": "shiftbench.studies.transfer",
    "TransferConfig": "shiftbench.studies.transfer", "parse_task": "shiftbench.studies.transfer",
    "read_tasks": "shiftbench.studies.transfer", "transfer_group_means": "shiftbench.analysis.transfer",
    "task_groups": "shiftbench.analysis.transfer",
    "robustness_transfer_correlation": "shiftbench.analysis.transferability",
    "group_accuracy": "shiftbench.views.groups", "GroupAccuracy": "shiftbench.views.groups",
    "mean_average_precision": "shiftbench.views.multilabel", "MeanAveragePrecision": "shiftbench.views.multilabel",
    "resolution_sweep": "shiftbench.studies.resolution", "compositing_study": "shiftbench.studies.compositing",
    "corrupt": "shiftbench.shifts.api",
}


def __getattr__(name: str):
    """Names in ``_LAZY`` (``evaluate``, ``Trajectory``, ...) are imported when first used."""
    if name in _LAZY:

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'shiftbench' has no attribute {name!r}")

__all__ = [
    "Testbed", "load_testbed", "list_testbeds",
    "fit_trend", "fit_piecewise_trend", "bootstrap_band", "TrendFit", "PiecewiseTrendFit", "MultiTrendFit", "Band",
    "clopper_pearson", "accuracy_interval",
    "effective_robustness", "relative_robustness", "most_effectively_robust",
    "robustness_correlation", "Correlation",
    "ShiftbenchError", "ConfigError", "DataError", "ModelError", "ShiftError", "StoreError", *_LAZY,
]
