"""Pure numpy/scipy/pandas analysis over a :class:`~shiftbench.testbed.Testbed` (no torch).

Scalings, trend fits with bootstrap bands, Clopper-Pearson intervals, effective and relative
robustness, piecewise trends, correlations and synthetic-vs-natural robustness (Taori et al.
2020; Miller et al. 2021), and where given models sit among a testbed's (placement).
"""
import importlib

#: Where each public name lives, imported on first use: ``import shiftbench.analysis.trend`` (or
#: ``from shiftbench.analysis import fit_trend``) loads only what that module needs, not scipy.stats
#: for every analysis (tests/test_startup.py).
_LAZY = {name: f"shiftbench.analysis.{module}" for module, names in {
    "agreement": ("LabelFreeEstimates", "aline_d", "aline_s", "atc_estimate", "atc_threshold", "average_confidence",
                  "difference_of_confidences", "estimate_ood_accuracy", "estimation_errors", "fit_probit_line",
                  "pairwise_agreement", "setting_errors"),
    "correlation": ("Correlation", "robustness_correlation"),
    "corruption": ("corruption_accuracy", "mce"),
    "intervals": ("accuracy_interval", "clopper_pearson"),
    "placement": ("NATURAL_SHIFTS", "ShiftPair", "fit_shift", "place_models", "default_recipe"),
    "robustness": ("effective_robustness", "most_effectively_robust", "relative_robustness"),
    "scaling": ("SCALES", "inverse", "transform"),
    "synthetic": ("RECIPES", "SyntheticVsNatural", "complete_severities", "corruption_correlations",
                  "corruption_settings", "synthetic_effective_robustness", "synthetic_vs_natural"),
    "ranks": ("rank_table",),
    "trajectory": ("trajectory_effective_robustness", "trajectory_summary", "trajectory_endpoints",
                   "mixed_classifier_curve"),
    "trend": ("Band", "MultiTrendFit", "PiecewiseTrendFit", "TrendFit", "bootstrap_band", "bootstrap_coefficients",
              "bootstrap_interval", "fit_piecewise_trend", "fit_trend", "CoefficientIntervals",
              "coefficient_intervals", "TwoLineTrendFit", "TwoLineBand", "fit_two_line_trend",
              "taori_fit_models"),
}.items() for name in names}


def __getattr__(name: str):
    """Names in ``_LAZY`` are imported from their module when first used."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'shiftbench.analysis' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "SCALES", "transform", "inverse", "clopper_pearson", "accuracy_interval",
    "TrendFit", "PiecewiseTrendFit", "Band", "fit_trend", "fit_piecewise_trend",
    "bootstrap_band", "bootstrap_coefficients", "MultiTrendFit", "bootstrap_interval",
    "effective_robustness", "relative_robustness", "most_effectively_robust",
    "Correlation", "robustness_correlation", "mce", "corruption_accuracy",
    "corruption_settings", "complete_severities", "synthetic_effective_robustness", "corruption_correlations",
    "synthetic_vs_natural", "SyntheticVsNatural", "RECIPES",
    "NATURAL_SHIFTS", "ShiftPair", "fit_shift", "place_models",
    "LabelFreeEstimates", "estimate_ood_accuracy", "pairwise_agreement", "fit_probit_line", "aline_s", "aline_d",
    "average_confidence", "difference_of_confidences", "atc_threshold", "atc_estimate",
    "estimation_errors", "setting_errors",
    "rank_table", "CoefficientIntervals", "coefficient_intervals",
    "trajectory_effective_robustness", "trajectory_summary", "trajectory_endpoints", "mixed_classifier_curve",
    "TwoLineTrendFit", "TwoLineBand", "fit_two_line_trend", "taori_fit_models", "default_recipe",
]
