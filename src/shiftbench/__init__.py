"""shiftbench: measure how image classifiers hold up under distribution shift.

The analysis API needs only numpy, scipy and pandas:

>>> import shiftbench
>>> tb = shiftbench.load_testbed("imagenet-reference")
>>> fit = shiftbench.fit_trend(tb, "val", "imagenetv2-matched-frequency-format-val")
>>> round(fit.slope, 2)
0.92
"""
import importlib

from shiftbench.errors import (
    ConfigError, DataError, MissingExtraError, ModelError, ShiftbenchError, ShiftError, StoreError,
)
from shiftbench.errors import as_missing_extra as _as_missing_extra
from shiftbench.version import __version__  # noqa: F401  (re-exported)

#: Public names imported on first use, so ``import shiftbench`` loads none of numpy, pandas, scipy, torch,
#: pyarrow or scikit-learn (tests/test_startup.py keeps it so; bench/startup.py times it).
_LAZY = {
    "Testbed": "shiftbench.testbed", "load_testbed": "shiftbench.reference", "list_testbeds": "shiftbench.reference",
    "fit_trend": "shiftbench.analysis.trend", "fit_piecewise_trend": "shiftbench.analysis.trend",
    "bootstrap_band": "shiftbench.analysis.trend", "TrendFit": "shiftbench.analysis.trend",
    "PiecewiseTrendFit": "shiftbench.analysis.trend", "MultiTrendFit": "shiftbench.analysis.trend",
    "Band": "shiftbench.analysis.trend", "fit_two_line_trend": "shiftbench.analysis.trend",
    "TwoLineTrendFit": "shiftbench.analysis.trend", "TwoLineBand": "shiftbench.analysis.trend",
    "clopper_pearson": "shiftbench.analysis.intervals", "accuracy_interval": "shiftbench.analysis.intervals",
    "effective_robustness": "shiftbench.analysis.robustness", "relative_robustness": "shiftbench.analysis.robustness",
    "most_effectively_robust": "shiftbench.analysis.robustness",
    "robustness_correlation": "shiftbench.analysis.correlation", "Correlation": "shiftbench.analysis.correlation",
    "evaluate": "shiftbench.engine", "load_model": "shiftbench.models",
    "Trajectory": "shiftbench.studies.trajectory",
    "trajectory_effective_robustness": "shiftbench.analysis.trajectory",
    "trajectory_summary": "shiftbench.analysis.trajectory",
    "mixed_classifier_curve": "shiftbench.analysis.trajectory",
    "correctness_matrix": "shiftbench.correctness", "CorrectnessMatrix": "shiftbench.correctness",
    "model_similarity": "shiftbench.analysis.similarity", "dominance_probability": "shiftbench.analysis.similarity",
    "error_consistency": "shiftbench.analysis.similarity", "unsolved_examples": "shiftbench.analysis.similarity",
    "metric_informativeness": "shiftbench.analysis.informativeness",
    "informativeness_ranking": "shiftbench.analysis.informativeness",
    "trend_diagnostics": "shiftbench.analysis.diagnostics",
    "estimate_ood_accuracy": "shiftbench.analysis.agreement", "pairwise_agreement": "shiftbench.analysis.agreement",
    "LabelFreeEstimates": "shiftbench.analysis.agreement",
    "label_free_inputs": "shiftbench.correctness", "prediction_matrix": "shiftbench.correctness",
    "place_models": "shiftbench.analysis.placement", "rank_table": "shiftbench.analysis.ranks",
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
    "deepaugment": "shiftbench.datasets.deepaugment",
}

# Type checkers and IDEs see the lazy names' real types (the block never runs: no import cost).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from shiftbench.analysis.agreement import LabelFreeEstimates, estimate_ood_accuracy, pairwise_agreement
    from shiftbench.analysis.correlation import Correlation, robustness_correlation
    from shiftbench.analysis.diagnostics import trend_diagnostics
    from shiftbench.analysis.hypotheses import HypothesesTable, hypotheses_table, load_groups
    from shiftbench.analysis.informativeness import informativeness_ranking, metric_informativeness
    from shiftbench.analysis.intervals import accuracy_interval, clopper_pearson
    from shiftbench.analysis.placement import place_models
    from shiftbench.analysis.ranks import rank_table
    from shiftbench.analysis.robustness import (
        effective_robustness, most_effectively_robust, relative_robustness,
    )
    from shiftbench.analysis.similarity import (
        dominance_probability, error_consistency, model_similarity, unsolved_examples,
    )
    from shiftbench.analysis.synthetic import SyntheticVsNatural, synthetic_vs_natural
    from shiftbench.analysis.trajectory import (
        mixed_classifier_curve, trajectory_effective_robustness, trajectory_summary,
    )
    from shiftbench.analysis.transfer import task_groups, transfer_group_means
    from shiftbench.analysis.transferability import robustness_transfer_correlation
    from shiftbench.analysis.trend import (
        Band, MultiTrendFit, PiecewiseTrendFit, TrendFit, TwoLineBand, TwoLineTrendFit, bootstrap_band,
        fit_piecewise_trend, fit_trend, fit_two_line_trend,
    )
    from shiftbench.correctness import (
        CorrectnessMatrix, correctness_matrix, label_free_inputs, prediction_matrix,
    )
    from shiftbench.datasets.attributes import AttributeSplits
    from shiftbench.datasets.deepaugment import deepaugment
    from shiftbench.datasets.replication import Replication
    from shiftbench.engine import evaluate
    from shiftbench.models import load_model
    from shiftbench.reference import list_testbeds, load_testbed
    from shiftbench.shifts.api import corrupt
    from shiftbench.studies.attributes import attribute_splits
    from shiftbench.studies.compositing import compositing_study
    from shiftbench.studies.replication import replicate
    from shiftbench.studies.resolution import resolution_sweep
    from shiftbench.studies.trajectory import Trajectory
    from shiftbench.studies.transfer import TransferConfig, TransferTask, parse_task, read_tasks, transfer
    from shiftbench.testbed import Testbed
    from shiftbench.views.classmap import ClassMapView
    from shiftbench.views.groups import GroupAccuracy, group_accuracy
    from shiftbench.views.multilabel import MeanAveragePrecision, mean_average_precision


def __getattr__(name: str):
    """Names in ``_LAZY`` (``evaluate``, ``Trajectory``, ...) are imported when first used; one whose
    optional dependency is missing (torch without ``shiftbench[eval]``) raises MissingExtraError."""
    if name in _LAZY:
        try:
            module = importlib.import_module(_LAZY[name])
        except ModuleNotFoundError as exc:
            missing = _as_missing_extra(exc, f"shiftbench.{name}")
            if missing is None:
                raise
            raise missing from exc
        return getattr(module, name)
    raise AttributeError(f"module 'shiftbench' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The lazy names too (PEP 562), so ``dir(shiftbench)``, completion and ``help(shiftbench)`` list them."""
    return sorted(set(globals()) | set(__all__))

__all__ = [
    "ShiftbenchError", "ConfigError", "DataError", "ModelError", "ShiftError", "StoreError", "MissingExtraError",
    *_LAZY,
]
