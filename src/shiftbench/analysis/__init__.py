"""Pure numpy/scipy/pandas analysis over a :class:`~shiftbench.testbed.Testbed` (no torch).

Scalings, trend fits with bootstrap bands, Clopper-Pearson intervals, effective and relative
robustness, piecewise trends, correlations and synthetic-vs-natural robustness (Taori et al.
2020; Miller et al. 2021), and where given models sit among a testbed's (placement).
"""
from shiftbench.analysis.agreement import (
                                          LabelFreeEstimates,
                                          aline_d,
                                          aline_s,
                                          atc_estimate,
                                          atc_threshold,
                                          average_confidence,
                                          difference_of_confidences,
                                          estimate_ood_accuracy,
                                          estimation_errors,
                                          fit_probit_line,
                                          pairwise_agreement,
                                          setting_errors,
)
from shiftbench.analysis.correlation import Correlation, robustness_correlation
from shiftbench.analysis.corruption import corruption_accuracy, mce
from shiftbench.analysis.intervals import accuracy_interval, clopper_pearson
from shiftbench.analysis.placement import NATURAL_SHIFTS, ShiftPair, fit_shift, place_models
from shiftbench.analysis.robustness import effective_robustness, most_effectively_robust, relative_robustness
from shiftbench.analysis.scaling import SCALES, inverse, transform
from shiftbench.analysis.synthetic import (
                                          RECIPES,
                                          SyntheticVsNatural,
                                          complete_severities,
                                          corruption_correlations,
                                          corruption_settings,
                                          synthetic_effective_robustness,
                                          synthetic_vs_natural,
)
from shiftbench.analysis.trend import (
                                          Band,
                                          MultiTrendFit,
                                          PiecewiseTrendFit,
                                          TrendFit,
                                          bootstrap_band,
                                          bootstrap_coefficients,
                                          bootstrap_interval,
                                          fit_piecewise_trend,
                                          fit_trend,
)

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
]
