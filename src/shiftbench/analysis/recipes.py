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
         "mean ± s.d. over bootstrap resamples of the models; the groups are the testbed's model types "
         "(STANDARD, MORE_DATA, ...), not the model families the paper predicts"),
        ("Djolonga et al. 2021, On Robustness and Transferability of Convolutional Neural Networks (CVPR), §3, "
         "Fig. 4 (the paper's classifier, cross-validation and bootstrap; shiftbench's groups)")),
    "one-vs-standard": (
        ("per group, a binary logistic regression (balanced class weights) tells the group's models from the "
         "baseline (STANDARD) ones from ID accuracy, then from ID accuracy and the metric; informativeness is the "
         "gain in cross-validated balanced accuracy, mean ± s.d. over stratified bootstrap resamples"),
        "shiftbench's variant of Djolonga et al. 2021 (CVPR), §3: one group against the standard models at a time"),
}
#: The informativeness recipe used when none is named, and its bootstrap resamples of the models.
DEFAULT_METHOD = "djolonga2021"
DEFAULT_RESAMPLES = 1000

#: The natural shift :func:`~shiftbench.analysis.synthetic.synthetic_vs_natural` compares with
#: (ImageNetV2, as Taori et al. 2020, §4.2).
NATURAL_DEFAULT = "imagenetv2-matched-frequency-format-val"

PAPER_TAORI_SYNTHETIC = ("Taori et al. 2020, Measuring Robustness to Natural Distribution Shifts in Image "
                         "Classification (NeurIPS), §4.2")

#: Named synthetic-vs-natural recipes (:func:`~shiftbench.analysis.synthetic.synthetic_vs_natural`).
SYNTHETIC_RECIPES: dict[str, tuple[str, str]] = {
    "taori2020": (
        ("effective robustness of each model's average accuracy over every ImageNet-C corruption "
         "(in-memory and on-disk, each averaged over its severities), Stylized ImageNet and greyscale, "
         "against one logit trend on val; Pearson r with ImageNetV2 effective robustness"),
        PAPER_TAORI_SYNTHETIC),
    "per-setting": (
        ("mean over the in-memory ImageNet-C settings of each setting's effective robustness (one "
         "logit trend per setting); Pearson r with ImageNetV2 effective robustness"),
        "shiftbench's variant of " + PAPER_TAORI_SYNTHETIC),
}
#: The synthetic-vs-natural recipe used when none is named (the paper's).
SYNTHETIC_DEFAULT = "taori2020"

PAPER_HENDRYCKS_C = ("Hendrycks & Dietterich 2019, Benchmarking Neural Network Robustness to Common Corruptions "
                     "and Perturbations (ICLR), §3")

#: The mCE recipe (:func:`~shiftbench.analysis.corruption.mce`).
MCE_RECIPES: dict[str, tuple[str, str]] = {
    "hendrycks2019": (
        ("mean over the 15 benchmark corruptions of the summed top-1 error over five severities divided by "
         "AlexNet's (CE), on the on-disk ImageNet-C cells when the testbed has them"),
        PAPER_HENDRYCKS_C),
}
#: What mCE divides by (``mce(..., normaliser=)``, ``shiftbench mce --normaliser``).
MCE_NORMALISERS: dict[str, tuple[str, str]] = {
    "testbed-alexnet": (
        ("the alexnet row of the testbed itself (else of imagenet-reference), on the same ImageNet-C cells "
         "as the model, so both errors come from one evaluation pipeline"),
        "shiftbench's variant of " + PAPER_HENDRYCKS_C),
    "hendrycks2019": (
        ("AlexNet's published errors: per corruption the mean over five severities (the 15 values of the "
         "authors' mCE spreadsheet, as AugMix's imagenet.py lists them) and 43.48% clean"),
        PAPER_HENDRYCKS_C + ", Appendix C"),
}
#: The normaliser used when none is named: on the published testbed it reproduces the papers'
#: mCE values (ResNet-50 76.5 vs 76.7); the published errors give 78.2 (see corruption.py).
MCE_NORMALISER_DEFAULT = "testbed-alexnet"

PAPER_CLIP = ("Radford et al. 2021, Learning Transferable Visual Models From Natural Language Supervision "
              "(ICML), §3.1.4")

#: Zero-shot ImageNet heads of ``open_clip:`` models (``open_clip:<arch>@<tag>[+<head>]``).
CLIP_HEADS: dict[str, tuple[str, str]] = {
    "clip-paper": (
        ("the CLIP paper's curated ImageNet class names and its 80-prompt ensemble (open_clip's "
         "IMAGENET_CLASSNAMES and OPENAI_IMAGENET_TEMPLATES); per class the mean of the normalised prompt "
         "embeddings, normalised"),
        PAPER_CLIP),
    "plain-names": (
        "torchvision's ImageNet category names with the same 80-prompt ensemble",
        "shiftbench's variant of " + PAPER_CLIP),
}
#: The zero-shot head used when the spec names none (the paper's).
CLIP_HEAD_DEFAULT = "clip-paper"

PAPER_TAORI_FIT = ("Taori et al. 2020, Measuring Robustness to Natural Distribution Shifts in Image "
                   "Classification (NeurIPS), §3 and the natural-shift figures, with the model selection of the "
                   "published testbed's figure scripts (modestyachts/imagenet-testbed, plotting/paper_*.py)")
PAPER_TAORI_IMAGENET_A = ("Taori et al. 2020, Measuring Robustness to Natural Distribution Shifts in Image "
                          "Classification (NeurIPS), the ImageNet-A figure, as the published testbed draws it "
                          "(modestyachts/imagenet-testbed, plotting/paper_imagenet_a.py and "
                          "plotting/paper_appendix_eff_robust.py)")
#: Name fragments (matched in the lower-cased model name) of the models every figure script of the
#: published testbed leaves out of its trend fits: AWS re-trainings (``aws``), batch-size variants
#: (``batch64``) and ImageNet subsamples (``subsample``, which the figures do not show at all).
TAORI_FIT_EXCLUDE = ("aws", "batch64", "subsample")
#: The figures of the published testbed show (and fit) only models with at least this ``val``
#: accuracy (ImageNetV2, ImageNet-Sketch, the synthetic shifts).
TAORI_MIN_X = 55.0
#: Each natural-shift figure's own display rule, by shifted setting: (the setting it thresholds,
#: the minimum accuracy in %), read from the figure scripts (``show_in_plot``). A shifted setting
#: not listed here takes ``val`` >= :data:`TAORI_MIN_X`.
TAORI_SHOWN: dict[str, tuple[str, float]] = {
    "imagenetv2-matched-frequency-format-val": ("val", 55.0),
    "imagenet-sketch": ("val", 55.0),
    "objectnet-1.0-beta": ("val-on-objectnet-classes", 55.0),
    "imagenet-r": ("val-on-imagenet-r-classes", 75.0),
    "imagenet-a": ("val-on-imagenet-a-classes", 75.0),
    "imagenet-vid-robust_pm0": ("val-on-vid-robust-classes", 92.0),
    "imagenet-vid-robust_pm10": ("imagenet-vid-robust_pm0", 49.0),
    "ytbb-robust_pm0": ("val-on-ytbb-robust-classes", 95.0),
    "ytbb-robust_pm10": ("ytbb-robust_pm0", 45.0),
}
#: The shifts fitted around a pivot: (x, y) -> the pivot models, the first one a testbed has is used
#: (ImageNet-A was filtered against ResNet-50; ``resnet50.tv_in1k`` is its name in imagenet-timm).
PIVOTS: dict[tuple[str, str], tuple[str, ...]] = {
    ("val-on-imagenet-a-classes", "imagenet-a"): ("resnet50", "resnet50.tv_in1k"),
}
#: The published testbed: on it (also merged with your tables) the report, ``place`` and
#: ``fit_shift`` fit every shift by the authors' recipe ``taori2020`` by default; elsewhere
#: ``standard`` (ImageNet-A: ``taori2020`` on every testbed with its pivot model).
PUBLISHED_TESTBED = "imagenet-reference"

#: Named recipes of a trend line (:func:`~shiftbench.analysis.fit_trend`, ``--recipe``).
FIT_RECIPES: dict[str, tuple[str, str]] = {
    "standard": (
        ("one least-squares line (logit scale by default) on every model --fit-on selects (default: all "
         "STANDARD models with both accuracies)"),
        "shiftbench's variant: the published protocol without the authors' name filters and display rule, "
        + PAPER_TAORI_FIT),
    "taori2020": (
        ("one least-squares line (logit scale by default) on the STANDARD models the authors' figures fit: "
         "names without aws, batch64 or subsample, and shown in the figure (val >= 55%, or the shift figure's "
         "own rule, e.g. ImageNet-R: val-on-imagenet-r-classes >= 75%)"),
        PAPER_TAORI_FIT),
}
#: Named recipes of a trend around a pivot, ImageNet-A's (``--recipe`` where the shift has a pivot).
PIVOT_RECIPES: dict[str, tuple[str, str]] = {
    "taori2020": (
        ("two independent least-squares lines (logit scale by default) split at the pivot model's "
         "in-distribution accuracy (ResNet-50's 91.86% on val-on-imagenet-a-classes): STANDARD models strictly "
         "below it fit the lower line, those strictly above the upper one; the pivot model itself, names with "
         "aws, batch64 or subsample and models below 75% on the ImageNet-A classes are left out; a model at or "
         "below the pivot is measured against the lower line, one above it against the upper line"),
        PAPER_TAORI_IMAGENET_A),
    "hinge": (
        ("one continuous piecewise-linear trend with its knot at the pivot model's accuracy, least squares "
         "on every --fit-on model (default STANDARD), the pivot model included (its 0% clipped to half an "
         "example)"),
        "shiftbench's variant of " + PAPER_TAORI_IMAGENET_A),
}
#: The recipe of a trend line when none is named (``fit_trend``, ``fit``, ``effective-robustness``,
#: ``plot``); the report and ``place`` use ``taori2020`` on the published testbed (:data:`PUBLISHED_TESTBED`).
FIT_DEFAULT = "standard"
#: The recipe around a pivot when none is named (the authors').
PIVOT_DEFAULT = "taori2020"

#: Every named recipe of every analysis: analysis -> {recipe name: (one-line description,
#: where it comes from)}. "Where it comes from" names the paper (with section / figure) whose
#: authors computed it this way, or starts with "shiftbench's variant" when it is not a paper's
#: recipe. The docs name recipes only from here, and every recipe here is documented
#: (tests/test_recipes_registry.py). An analysis adds its entry here (plain data, no numpy: the
#: command line's --help reads it).
REGISTRY: dict[str, dict[str, tuple[str, str]]] = {
    "informativeness": METHODS,
    "synthetic-vs-natural": SYNTHETIC_RECIPES,
    "mce": MCE_RECIPES,
    "mce-normaliser": MCE_NORMALISERS,
    "clip-head": CLIP_HEADS,
    "fit": FIT_RECIPES,
    "imagenet-a": PIVOT_RECIPES,
}
#: The recipe each analysis uses when none is named.
DEFAULTS: dict[str, str] = {
    "informativeness": DEFAULT_METHOD,
    "synthetic-vs-natural": SYNTHETIC_DEFAULT,
    "mce": "hendrycks2019",
    "mce-normaliser": MCE_NORMALISER_DEFAULT,
    "clip-head": CLIP_HEAD_DEFAULT,
    "fit": FIT_DEFAULT,
    "imagenet-a": PIVOT_DEFAULT,
}


def check_recipe(analysis: str, name: str, *, option: str = "--recipe") -> str:
    """``name`` if it is a recipe of ``analysis``; otherwise a ConfigError (one line) that lists
    the recipes and suggests the closest one."""
    import difflib  # deferred: only a bad name needs it

    from shiftbench.errors import ConfigError  # deferred: recipes.py stays plain data at import

    known = REGISTRY[analysis]
    if name in known:
        return name
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigError(f"unknown {option} {name!r} for {analysis}{hint}; choose one of {', '.join(known)}")


def recipe_text(analysis: str, name: str) -> str:
    """``'<name>: <description> (<source>)'``: the line outputs print to say which recipe they used."""
    description, source = REGISTRY[analysis][name]
    return f"{name}: {description} ({source})"
