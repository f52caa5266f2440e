"""The named recipes of the analyses and their defaults, as plain data (standard library only).

The command line's options show them in ``shiftbench --help``, so they are read at start-up,
before numpy, pandas or scipy is imported (tests/test_startup.py); the analysis modules re-export
their own (:data:`shiftbench.analysis.informativeness.METHODS`, ...).
"""
from __future__ import annotations

#: name -> (one-line description, paper): the recipes :func:`~shiftbench.analysis.informativeness.informativeness_ranking`
#: implements.
METHODS: dict[str, tuple[str, str]] = {
    "djolonga2021": (
        ("a multinomial logistic regression predicts each model's group (all groups at once) from ID accuracy, "
         "then from ID accuracy and the metric; informativeness is the gain in cross-validated accuracy, "
         "mean ± s.d. over bootstrap resamples of the models"),
        ("Djolonga et al. 2021, On Robustness and Transferability of Convolutional Neural Networks (CVPR), §3, "
         "Fig. 4")),
    "one-vs-standard": (
        ("per group, a binary logistic regression (balanced class weights) tells the group's models from the "
         "baseline (STANDARD) ones from ID accuracy, then from ID accuracy and the metric; informativeness is the "
         "gain in cross-validated balanced accuracy, mean ± s.d. over stratified bootstrap resamples"),
        "shiftbench's one-group-against-standard variant of Djolonga et al. 2021 (CVPR), §3"),
}
#: The informativeness recipe used when none is named, and its bootstrap resamples of the models.
DEFAULT_METHOD = "djolonga2021"
DEFAULT_RESAMPLES = 1000

#: The natural shift :func:`~shiftbench.analysis.synthetic.synthetic_vs_natural` compares with
#: (ImageNetV2, as Taori et al. 2020, §4.2).
NATURAL_DEFAULT = "imagenetv2-matched-frequency-format-val"
