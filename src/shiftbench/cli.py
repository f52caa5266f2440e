"""The ``shiftbench`` command line: a thin layer over the public Python API.

Every command is one call into :mod:`shiftbench` (``load_testbed``, ``fit_trend``,
``effective_robustness``, ``plot_trend``, ``write_report``, ``write_html_report``). Errors print
as one line on stderr with a non-zero exit; ``--debug`` shows the traceback.
"""
from __future__ import annotations

import fnmatch
import importlib
import json
import os
import pkgutil
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from shiftbench.cli_options import (  # noqa: F401  (re-exported: the commands' modules import them from here too)
    DEFAULT_STORE,
    FigureFormatsOpt,
    FitOnOpt,
    FractionsOpt,
    JsonOpt,
    ListTestbedOpt,
    LongOpt,
    ModelOpt,
    ModelsOpt,
    PatternArg,
    PivotOpt,
    ResamplesOpt,
    ScaleOpt,
    StoreAddOpt,
    StoreOpt,
    TestbedOpt,
    XOpt,
    YOpt,
    canonical_settings,
    setting_aliases,
)
from shiftbench.cli_help import PlainHelpGroup
from shiftbench.cli_support import Table, err, out  # noqa: F401  (the names the commands used from here)
from shiftbench.cli_support import check_count as _check_count
from shiftbench.cli_support import check_output_parent as _check_output_parent
from shiftbench.cli_support import clean as _clean
from shiftbench.cli_support import error_message as _error_message
from shiftbench.cli_support import fit as _fit
from shiftbench.cli_support import fit_note as _fit_note
from shiftbench.cli_support import jsonable as _jsonable
from shiftbench.cli_support import fit_on as _fit_on
from shiftbench.cli_support import fit_used as _fit_used
from shiftbench.cli_support import old_spelling as _old_spelling
from shiftbench.cli_support import notes_to_stderr as _notes_to_stderr
from shiftbench.cli_support import print_json as _print_json
from shiftbench.cli_support import output_folder as _output_folder
from shiftbench.cli_support import pivot as _pivot
from shiftbench.cli_support import progress as _progress
from shiftbench.cli_support import testbed_from_options as _testbed
from shiftbench.errors import ConfigError, ShiftbenchError, require  # noqa: F401  (ShiftbenchError: re-exported)
from shiftbench.shifts import list_shifts
from shiftbench.version import __version__

# numpy, pandas, scipy, rich.progress and the analysis, testbed and model modules are imported
# inside the commands that use them, so `shiftbench --help` starts fast (tests/test_startup.py).
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, cls=PlainHelpGroup,
                  help="Measure how image classifiers hold up under distribution shift.")
list_app = typer.Typer(no_args_is_help=True, cls=PlainHelpGroup, help="List testbeds, settings or models.")
app.add_typer(list_app, name="list")

_state = {"debug": False}

# the options shared by the commands are declared once, in shiftbench.cli_options


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"shiftbench {__version__}")
        raise typer.Exit()


@app.callback()
def _main(debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
          version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                                help="Print the version and exit.")] = False) -> None:
    _state["debug"] = debug


# ---------------------------------------------------------------------------- list
def _matching(names, pattern: str | None, what: str) -> list[str]:
    """``names`` matching the fnmatch ``pattern`` (all without one; case-sensitive, as timm's
    ``list_models``). Nothing matching: a one-line message on stderr and exit status 1."""
    names = list(names)
    if pattern is None:
        return names
    hits = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
    if not hits:
        hint = "" if any(c in pattern for c in "*?[") else " (add wildcards, e.g. '*" + pattern + "*')"
        typer.echo(f"no {what} matches {pattern!r}{hint}", err=True)
        raise typer.Exit(1)
    return hits


@list_app.command("testbeds")
def list_testbeds_cmd(pattern: PatternArg = None) -> None:
    """The testbeds that ship with shiftbench (PATTERN: only those matching it; none matching: exit 1)."""
    from shiftbench.reference import list_testbeds  # deferred: loads pandas

    testbeds = list_testbeds()
    for name in _matching(testbeds, pattern, "testbed"):
        typer.echo(f"{name}\t{testbeds[name]}")


@list_app.command("settings")
def list_settings(pattern: PatternArg = None, testbed: ListTestbedOpt = None, long: LongOpt = False,
                  fractions: FractionsOpt = None) -> None:
    """Settings, one per line: of a testbed, or (without --testbed) those `shiftbench eval` can run.

    PATTERN keeps the names matching it (fnmatch wildcards), e.g. 'imagenet-c.fog.*'; when
    nothing matches, a one-line message goes to stderr and the exit status is 1."""
    if not testbed:
        from shiftbench.settings import list_settings as registered  # here: `list_settings` is this command's name

        settings = registered()
        names = _matching(settings, pattern, "setting")
        if not long:
            typer.echo("\n".join(names))
            return
        table = Table("setting", "description", title=f"{len(names)} evaluation settings, plus folder:<dir>, "
                      "manifest:<file>, hf:<dir>, composite:<spec.json>, <video>_pm<k>, <setting>+<shift>[.<severity>] "
                      "(shiftbench list shifts) and <setting>@classmap:<name|file>")
        for name in names:
            table.add_row(name, settings[name])
        out.print(table)
        return
    tb = _testbed(testbed, fractions=fractions)
    names = _matching(tb.settings, pattern, f"setting of {tb.name}")
    if not long:
        typer.echo("\n".join(names))
        return
    table = Table("setting", "models evaluated", "examples", title=f"{tb.name}: {len(names)} settings")
    for s in names:
        n = tb.sizes[s].dropna()
        table.add_row(s, str(int(tb.accuracies[s].notna().sum())), f"{int(n.median()):,}" if len(n) else "?")
    out.print(table)


@list_app.command("shifts")
def list_shifts_cmd(pattern: PatternArg = None) -> None:
    """Synthetic shifts, usable as <setting>+<shift>[.<severity>] (e.g. cifar10+fog.3).

    PATTERN keeps the names matching it (fnmatch wildcards), e.g. '*blur*'; when nothing
    matches, a one-line message goes to stderr and the exit status is 1."""

    shifts = list_shifts()
    for name in _matching(shifts, pattern, "shift"):
        typer.echo(f"{name}\t{shifts[name]}")


@list_app.command("models")
def list_models(pattern: PatternArg = None, testbed: ListTestbedOpt = None,
                model_type: Annotated[Optional[str], typer.Option("--type", help="Only this model type.")] = None,
                long: LongOpt = False, fractions: FractionsOpt = None) -> None:
    """Models of a testbed, one per line; without --testbed, the model sources `eval` accepts.

    PATTERN keeps the names matching it (fnmatch wildcards, as timm.list_models), e.g.
    `shiftbench list models -t imagenet-reference '*resnet*'`; when nothing matches, a one-line
    message goes to stderr and the exit status is 1."""
    if not testbed:
        from shiftbench.models import list_sources  # deferred: loads numpy

        sources = list_sources()
        for name in _matching(sources, pattern, "model source"):
            typer.echo(f"{name}\t{sources[name]}")
        return
    tb = _testbed(testbed, fractions=fractions)
    models = tb.models if model_type is None else tb.resolve([f"type:{model_type}"])
    models = _matching(models, pattern, f"model of {tb.name}" + ("" if model_type is None else f" of type {model_type}"))
    if not long:
        typer.echo("\n".join(models))
        return
    table = Table("model", "model_type", "arch", title=f"{tb.name}: {len(models)} models")
    for m in models:
        arch = tb.metadata.at[m, "arch"]
        table.add_row(m, tb.model_types[m], "" if arch is None or arch != arch else str(arch))
    out.print(table)


# ---------------------------------------------------------------------------- analysis
YMetricOpt = Annotated[str, typer.Option(
    "--y-metric", help="The number --y takes from --store: accuracy (default), worst_group_accuracy (settings with "
    "?groups=), top5 or map; x keeps accuracy (Testbed.from_store(metric={y: ...})).")]
_RECIPES_HELP = ("How the trend is fitted: taori2020 (the authors': their model selection, ImageNet-A as two lines "
                 "split at ResNet-50), standard (every --fit-on model) or hinge (a continuous hinge at the pivot, "
                 "shiftbench's variant).")
FitRecipeOpt = Annotated[Optional[str], typer.Option(
    "--recipe", show_default=False, help=_RECIPES_HELP + " Default: taori2020 around a pivot (ImageNet-A, --pivot), "
    "standard otherwise.")]
PlaceRecipeOpt = Annotated[Optional[str], typer.Option(
    "--recipe", show_default=False, help=_RECIPES_HELP + " Default, as in the report: taori2020 on ImageNet-A and on "
    "imagenet-reference, standard elsewhere; hinge: ImageNet-A's hinge, standard lines elsewhere.")]


def _fit_table_rows(fit, d: dict) -> list[tuple[str, str]]:
    """The ``fit`` table's rows of what the recipe chose: the recipe, a two-line trend's lines and
    pivot, the models used and those left out, per reason."""
    rows = [("recipe", f"{fit.recipe} ({fit.kind})")]
    if fit.kind == "two-line":
        rows.append(("pivot", f"{d['pivot']:.2f}%" + (f" ({d['pivot_model']}, in neither line)"
                                                       if d["pivot_model"] else "")))
        for side in ("below", "above"):
            line = d[side]
            rows.append((f"line {side}", f"slope {line['slope']:.4f} ± {line['slope_se']:.4f}, intercept "
                                         f"{line['intercept']:.4f} ± {line['intercept_se']:.4f}, r2 "
                                         f"{line['r2']:.4f}, {line['n_models']} models"))
    left = "; ".join(f"{n} {why}" for why, n in fit.excluded)
    rows.append(("excluded", f"{fit.n_excluded}" + (f": {left}" if left else "")))
    return rows


def _testbed_y(testbed: list[str] | None, store: Path | None, y: str, y_metric: str,
               fractions: bool | None = None):
    """The analysis testbed; with ``--y-metric`` other than accuracy, the store's testbed with that
    metric on the y setting (a store only: reference testbeds hold accuracies)."""
    if y_metric == "accuracy":
        return _testbed(testbed, store, fractions)
    if store is None or testbed or fractions:
        raise ConfigError(f"--y-metric {y_metric} reads the results store: pass --store DIR without --testbed"
                          + (" (and without --fractions: a store holds percentages)" if fractions else ""))
    from shiftbench.store import Store  # deferred: loads pyarrow
    from shiftbench.testbed import Testbed  # deferred: loads pandas

    Store.existing(store)                    # a missing folder, or one that is not a store: one line
    tb = Testbed.from_store(store, metric={y: y_metric})
    for note in tb.notes:
        err.print(f"note: {note}")
    return tb


CoefCiOpt = Annotated[bool, typer.Option(
    "--coef-ci", help="Percentile bootstrap intervals of the slope and intercept (every coefficient): models "
    "resampled with replacement, as Recht et al. 2019 report their fits.")]
CoefResamplesOpt = Annotated[Optional[int], typer.Option(
    "--resamples", show_default=False, help="Bootstrap resamples for --coef-ci (default 100,000, Recht et al.'s count).")]
CoefConfidenceOpt = Annotated[Optional[float], typer.Option(
    "--confidence", show_default=False, help="Level of the --coef-ci intervals (default 0.95).")]
CoefSeedOpt = Annotated[Optional[int], typer.Option(
    "--seed", show_default=False, help="Seed of the --coef-ci resamples (default 0; same seed, same intervals).")]


def _coef_ci(fit, wanted: bool, n_resamples: int | None, confidence: float | None, seed: int | None):
    """``fit``'s :func:`~shiftbench.analysis.trend.coefficient_intervals` for ``--coef-ci`` (else
    ``None``); ``--resamples``, ``--confidence`` or ``--seed`` without it is a ConfigError. With
    ``fit=None`` it only checks the options (before any work)."""
    if not wanted:
        given = [o for o, v in (("--resamples", n_resamples), ("--confidence", confidence), ("--seed", seed))
                 if v is not None]
        if given:
            raise ConfigError(f"{', '.join(given)} set the bootstrap of --coef-ci; add --coef-ci")
        return None
    from shiftbench.analysis.trend import COEF_CI_RESAMPLES, coefficient_intervals  # deferred: loads pandas

    n = COEF_CI_RESAMPLES if n_resamples is None else _check_count(n_resamples, "--resamples")
    if confidence is not None and not 0 < confidence < 1:
        raise ConfigError(f"--confidence {confidence:g}: give a level strictly between 0 and 1, e.g. 0.95")
    if fit is None:
        return None
    return coefficient_intervals(fit, n_resamples=n, confidence=0.95 if confidence is None else confidence,
                                 seed=0 if seed is None else seed)


def _coef_ci_rows(ci) -> list[tuple[str, str]]:
    """The fit table's rows of ``--coef-ci``: one interval per coefficient and how it was drawn."""
    if ci is None:
        return []
    level = f"{100 * ci.confidence:g}%"
    rows = [(f"{name} {level} CI", f"[{lo:.4f}, {hi:.4f}]") for name, lo, hi in zip(ci.names, ci.lower, ci.upper)]
    return [*rows, ("coef_ci", f"percentile bootstrap, {ci.n_resamples:,} resamples of the models, seed {ci.seed}"
                    + (f", {ci.n_resamples - ci.n_kept:,} degenerate dropped" if ci.n_kept < ci.n_resamples else ""))]


@app.command("fit")
def fit_cmd(x: Annotated[list[str], typer.Option(
                "--x", help="In-distribution setting (x axis), e.g. val; repeat for a plane over several ID test sets "
                "(Shi et al. 2023).", callback=canonical_settings)],
            y: YOpt, testbed: TestbedOpt = None, store: StoreAddOpt = None, scale: ScaleOpt = "logit",
            fit_on: FitOnOpt = None, pivot: PivotOpt = None, as_json: JsonOpt = False,
            y_metric: YMetricOpt = "accuracy", fractions: FractionsOpt = None,
            coef_ci: CoefCiOpt = False, n_resamples: CoefResamplesOpt = None, confidence: CoefConfidenceOpt = None,
            seed: CoefSeedOpt = None, recipe: FitRecipeOpt = None) -> None:
    """Fit the trend of y on x over the chosen models (default: STANDARD, by --recipe); with several --x, the
    plane logit(y) = sum_k a_k logit(x_k) + b. --coef-ci adds percentile bootstrap intervals of the slope and
    intercept (Recht et al. 2019: 100,000 resamples of the models)."""
    _coef_ci(None, coef_ci, n_resamples, confidence, seed)      # its options, before any work
    tb = _testbed_y(testbed, store, y, y_metric, fractions)
    fit = _fit(tb, x[0] if len(x) == 1 else x, y, scale, _fit_on(fit_on), _pivot(pivot), recipe)
    _fit_used(tb, fit)
    d = fit.to_dict()
    lines = {"below": fit.below, "above": fit.above} if fit.kind == "two-line" else {"": fit}
    cis = {side: _coef_ci(line, coef_ci, n_resamples, confidence, seed) for side, line in lines.items()}
    for side, ci in cis.items():                 # a two-line trend: one set of coefficients per line
        if ci is not None:
            (d[side] if side else d)["coef_ci"] = ci.to_dict()
    if as_json:
        print(json.dumps({k: _clean(v) for k, v in d.items()}))
        return
    table = Table(title=f"{tb.name}: {y} vs {' + '.join(x)} ({scale})", show_header=False)
    if fit.kind == "multi":
        for name, a in d["coefficients"].items():
            table.add_row(f"coef[{name}]", f"{a:.4f}")
            table.add_row(f"coef_se[{name}]", f"{d['coefficient_se'][name]:.4f}")
    keys = {"multi": ("intercept", "intercept_se"), "two-line": ()}.get(
        fit.kind, ("slope", "slope_se", "intercept", "intercept_se"))
    for key in (*keys, "r2", "n_models", "n_skipped"):
        v = d[key]
        table.add_row(key, f"{v:.4f}" if isinstance(v, float) else str(v))
    if fit.kind == "piecewise":
        table.add_row("pivot", f"{d['pivot']:.2f}%")
        table.add_row("slope_below", f"{d['slope_below']:.4f}")
    for side, ci in cis.items():
        for name, value in _coef_ci_rows(ci):
            table.add_row(f"{side} {name}" if side else name, value)
    table.add_row("fit_on", ", ".join(fit.fit_on))
    for row in _fit_table_rows(fit, d):
        table.add_row(*row)
    out.print(table)


@app.command("effective-robustness")
def er_cmd(x: Annotated[list[str], typer.Option(
               "--x", help="In-distribution setting (x axis), e.g. val; repeat to measure against the plane over "
               "several ID test sets (Shi et al. 2023).", callback=canonical_settings)],
           y: YOpt, testbed: TestbedOpt = None, store: StoreAddOpt = None, scale: ScaleOpt = "logit",
           fit_on: FitOnOpt = None, pivot: PivotOpt = None,
           top: Annotated[Optional[int], typer.Option("--top", help="Only the N most effectively robust models.")] = None,
           as_json: JsonOpt = False, y_metric: YMetricOpt = "accuracy", fractions: FractionsOpt = None,
           recipe: FitRecipeOpt = None) -> None:
    """Effective robustness (percentage points) of every model: y minus the trend's prediction (with several
    --x, minus the plane's; ImageNet-A: minus the line on the model's side of ResNet-50, by default)."""
    from shiftbench.analysis.robustness import (  # deferred: loads pandas, scipy
        effective_robustness,
        most_effectively_robust,
    )

    tb = _testbed_y(testbed, store, y, y_metric, fractions)
    xs = x[0] if len(x) == 1 else x
    fit = _fit(tb, xs, y, scale, _fit_on(fit_on), _pivot(pivot), recipe)
    _fit_used(tb, fit)
    er = effective_robustness(tb, xs, y, fit=fit)
    er = most_effectively_robust(er, top) if top is not None else er.sort_values("effective_robustness", ascending=False)
    x_cols = ["x_acc"] if len(x) == 1 else [f"x_acc:{s}" for s in x]
    rows = er.reset_index()[["model", "model_type", *x_cols, "y_acc", "predicted_y_acc", "effective_robustness",
                             "er_low", "er_high"]]
    if as_json:                                 # each row names the recipe; stderr says what it left out
        _fit_note(fit)
        print(json.dumps([{k: _clean(v) for k, v in r.items()} | {"recipe": fit.recipe}
                          for r in rows.to_dict("records")]))
        return
    from shiftbench.analysis.trend import fit_note  # deferred: loads pandas

    title = f"{tb.name}: {y} vs {' + '.join(x)} ({scale}; trend {fit_note(fit)})"
    table = Table("model", "type", *(f"{s} %" for s in x), f"{y} %", "predicted %", "eff. robustness (pp)",
                  "95% interval", title=title)
    for r in rows.to_dict("records"):
        table.add_row(r["model"], r["model_type"], *(f"{r[c]:.2f}" for c in x_cols), f"{r['y_acc']:.2f}",
                      f"{r['predicted_y_acc']:.2f}", f"{r['effective_robustness']:+.2f}",
                      f"[{r['er_low']:+.2f}, {r['er_high']:+.2f}]")
    out.print(table)
    skipped = er.attrs.get("n_skipped", 0)
    if skipped:
        out.print(f"{skipped} models skipped: no accuracy on " + ("both settings." if len(x) == 1 else "all settings."))


@app.command("place")
def place_cmd(testbed: TestbedOpt = None, store: StoreAddOpt = None,
              model: ModelsOpt = None, scale: ScaleOpt = "logit", fit_on: FitOnOpt = None,
              n_resamples: ResamplesOpt = 1000, as_json: JsonOpt = False, fractions: FractionsOpt = None,
              recipe: PlaceRecipeOpt = None) -> None:
    """Where your models sit: on every natural shift, accuracy, effective robustness with its 95%
    interval, and rank among all models of the testbed (Taori et al. 2020; each trend by --recipe).

    --model: the models to place (default: the models of the tables and stores added to a
    reference testbed)."""
    from shiftbench.analysis.placement import (  # deferred: loads pandas, scipy
        fitted_on_note,
        place_models,
        skipped_lines,
    )
    from shiftbench.analysis.scaling import check_scale  # deferred: loads numpy, scipy

    check_scale(scale)                        # as fit and report do: a per-shift error would be skipped
    _check_count(n_resamples, "--resamples", minimum=0, what="(0: no bootstrap band; default 1000)")
    tb = _testbed(testbed, store, fractions)
    tb.resolve(list(_fit_on(fit_on)))         # an unknown --fit-on type, tag or model fails here, not per shift
    models = [tb.check_model(m) for m in model] if model else tb.added
    if not models:
        raise ConfigError("no models to place; add your table or store (-t imagenet-reference -t mine.csv, "
                          "--store DIR) or name models with --model")
    placed = place_models(tb, models, scale=scale, fit_on=_fit_on(fit_on), n_resamples=n_resamples, recipe=recipe)
    if as_json:
        print(json.dumps({"placed": [{k: _clean(v) for k, v in r.items()} for r in placed.to_dict("records")],
                          "skipped": placed.attrs["skipped"],
                          "fits": {k: _jsonable(f.to_dict()) for k, f in placed.attrs["fits"].items()}}))
        return
    table = Table("model", "shift", "x %", "y %", "predicted %", "eff. robustness (pp)", "95% interval", "rank",
                  title=f"{tb.name}: your models against the trend of each natural shift ({scale})")
    for r in placed.itertuples(index=False):
        table.add_row(r.model, r.shift, f"{r.x_acc:.2f}", f"{r.y_acc:.2f}", f"{r.predicted_y_acc:.2f}",
                      f"{r.effective_robustness:+.2f}" + ("" if r.in_fit_range else " *"),
                      f"[{r.er_low:+.2f}, {r.er_high:+.2f}]", f"{r.rank} of {r.n_ranked}")
    if len(placed):
        out.print(table)
    if not placed["in_fit_range"].all():
        out.print("* outside the x range of the fitted models: the trend is extrapolated there.")
    for m in placed.attrs.get("unplaced", []):
        out.print(f"{m}: placed on none of the natural shifts of {tb.name}; each is listed below with what it lacks.")
    for line in skipped_lines(placed.attrs["skipped"]):
        out.print(f"not placed: {line}")
    out.print(fitted_on_note(placed.attrs["fits"], tb, models))


@app.command("plot")
def plot_cmd(x: XOpt, y: YOpt,
             output: Annotated[Path, typer.Option("--output", "-o", help="Figure file: .png, .svg or .pdf.")],
             testbed: TestbedOpt = None, store: StoreAddOpt = None, scale: ScaleOpt = "logit", fit_on: FitOnOpt = None, pivot: PivotOpt = None,
             ci: Annotated[float, typer.Option("--ci", help="Clopper-Pearson level of the error bars.")] = 0.995,
             highlight: Annotated[Optional[list[str]], typer.Option(
                 "--highlight", help="Mark and label these models (default: the models of the tables and stores "
                 "added to a reference testbed).")] = None,
             fractions: FractionsOpt = None,
             as_json: JsonOpt = False, recipe: FitRecipeOpt = None,
             ) -> None:
    """Scatter of y against x with the fitted trend (ImageNet-A: its two lines, by default), its bootstrap
    band and y = x.

    --json: {"files": [...], "x", "y", "scale", "fit": {"kind", "recipe", "slope", "intercept", "r2",
    "n_models", "n_excluded", "excluded"}} (a two-line trend: "below" and "above" for slope and intercept)."""
    from shiftbench.report import (  # deferred: loads Pillow, loads matplotlib, loads plotly, loads pyarrow
        plot_trend,
        save_figure,
    )
    from shiftbench.report.figures import FORMATS  # deferred: loads Pillow, loads matplotlib, loads plotly, loads pyarrow

    if output.suffix.lower() not in FORMATS:
        raise typer.BadParameter(f"{output}: use a .png, .svg or .pdf file name", param_hint="-o")
    tb = _testbed(testbed, store, fractions)
    fit = _fit(tb, x, y, scale, _fit_on(fit_on), _pivot(pivot), recipe)
    _fit_used(tb, fit)
    marked = [tb.check_model(m) for m in highlight] if highlight else tb.added
    path = save_figure(plot_trend(tb, x, y, fit=fit, confidence=ci, highlight=marked), output)
    if as_json:
        d = fit.to_dict()
        _print_json({"files": [str(path)], "x": x, "y": y, "scale": scale,
                     "fit": {k: d[k] for k in ("kind", "recipe", "slope", "intercept", "below", "above", "r2",
                                               "n_models", "n_excluded", "excluded") if k in d}})
        return
    typer.echo(f"wrote {path}")


@app.command("mce")
def mce_cmd(model: ModelOpt,
            testbed: TestbedOpt = None, store: StoreAddOpt = None,
            mode: Annotated[Optional[str], typer.Option(
                "--mode", help="on-disk or in-memory ImageNet-C cells (default: on-disk when the testbed has every "
                "on-disk benchmark setting, as the published mCE numbers are, else in-memory).")] = None,
            normaliser: Annotated[Optional[str], typer.Option(
                "--normaliser", help="AlexNet's errors to divide by: testbed-alexnet (default; the alexnet row of "
                "the testbed, else of imagenet-reference, on the same cells as the model) or hendrycks2019 (the "
                "published AlexNet errors of Hendrycks & Dietterich 2019).")] = None,
            as_json: JsonOpt = False, fractions: FractionsOpt = None) -> None:
    """mCE and relative mCE (normalised by AlexNet) with the per-corruption table of --model (a testbed's model)."""
    from shiftbench.analysis.corruption import DEFAULT_NORMALISER, NORMALISERS, mce  # deferred: loads pandas
    from shiftbench.analysis.corruption import RECIPE as MCE_RECIPE  # deferred: loads pandas

    res = mce(_testbed(testbed, store, fractions), model, mode=mode, normaliser=normaliser or DEFAULT_NORMALISER)
    table, used, norm = res["table"], res["mode"], res["normaliser"]
    if as_json:
        print(json.dumps({"model": model, "mCE": res["mCE"], "relative_mCE": res["relative_mCE"], "mode": used,
                          "recipe": MCE_RECIPE[0], "description": MCE_RECIPE[1], "paper": MCE_RECIPE[2],
                          "normaliser": norm, "normaliser_description": NORMALISERS[norm][0],
                          "normaliser_source": res["normaliser_source"],
                          "corruptions": {c: {k: _clean(v) for k, v in row.items()} for c, row in
                                          table.to_dict("index").items()}}))
        return
    t = Table("corruption", "CE %", "relative CE %", "mean error %", "AlexNet error %",
              title=f"{model}: mCE {res['mCE']:.1f}%, relative mCE {res['relative_mCE']:.1f}% ({used} ImageNet-C), "
                    f"normaliser {norm}")
    for c, row in table.iterrows():
        t.add_row(c + ("" if row["benchmark"] else " (extra)"), *(
            "-" if row[k] != row[k] else f"{row[k]:.1f}" for k in ("CE", "relative_CE", "mean_error", "normaliser_error")))
    out.print(t)
    other = "in-memory" if used == "on-disk" else "on-disk"
    out.print(f"ImageNet-C cells: {used}" + (" (default)" if mode is None else "") + f"; --mode {other} for the "
              f"{other} cells. Recipe {MCE_RECIPE[0]}: {MCE_RECIPE[2]}", markup=False, highlight=False)
    alt = next(n for n in NORMALISERS if n != norm)
    out.print(f"Normaliser {norm}" + (" (default)" if normaliser is None else "") + f": {res['normaliser_source']}; "
              f"--normaliser {alt} for {NORMALISERS[alt][0].split(':')[0].split(' (')[0]}.",
              markup=False, highlight=False)
    fell_back = [c for c, row in table.iterrows() if row["mode"] != used]
    if fell_back:
        out.print(f"{', '.join(fell_back)}: {used} cells incomplete for {model} or the normaliser; "
                  f"{table.loc[fell_back[0], 'mode']} cells used for both", markup=False, highlight=False)


# ---------------------------------------------------------------------------- evaluation
def _data_dirs(values: list[str] | None) -> dict[str, str]:
    dirs = {}
    for item in values or []:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise typer.BadParameter(f"{item!r}: use NAME=PATH, e.g. imagenet-a=/data/imagenet-a", param_hint="--data-dir")
        dirs[name] = path
    return dirs


@app.command("eval")
def eval_cmd(
    model: ModelsOpt,
    setting: Annotated[list[str], typer.Option("--setting", "-s", help="Setting name (shiftbench list settings). "
                                                          "Repeatable.", callback=setting_aliases)],
    data_root: Annotated[Path, typer.Option("--data-root", help="Folder holding the datasets in their default folders.")] = Path("."),
    data_dir: Annotated[Optional[list[str]], typer.Option("--data-dir", help="Per-dataset override NAME=PATH. Repeatable.")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Images per forward pass.")] = 64,
    workers: Annotated[int, typer.Option("--workers", help="DataLoader worker processes decoding images.")] = 1,
    limit: Annotated[Optional[int], typer.Option("--limit", help="Only the first N examples of each dataset.")] = None,
    keep_logits: Annotated[bool, typer.Option("--keep-logits", help="Also store float16 logits.")] = False,
    store: StoreOpt = DEFAULT_STORE,
    executor: Annotated[str, typer.Option("--executor", help="local, or ray: a Ray cluster (--store then a bucket URI, or a folder every node mounts).")] = "local",
    address: Annotated[Optional[str], typer.Option("--address", help="Ray cluster address (with --executor ray).")] = None,
    convention: Annotated[str, typer.Option("--convention", help="Class-subset scoring: restricted (published) "
                                             "or argmax-all.")] = "restricted",
    force: Annotated[bool, typer.Option("--force", help="Recompute finished results.")] = False,
    device: Annotated[Optional[str], typer.Option("--device", help="cuda, cuda:1 or cpu (default: cuda if present).")] = None,
    chunk_size: Annotated[int, typer.Option("--chunk-size", help="Examples per stored part (the resume unit).")] = 1024,
    seed: Annotated[int, typer.Option("--seed", help="Seed of random shifts (reproducible per image).")] = 0,
    arch: Annotated[Optional[str], typer.Option("--arch", help="Architecture of a checkpoint: spec, e.g. "
                                                "timm:resnet50 or torchvision:resnet50.")] = None,
    model_type: Annotated[Optional[str], typer.Option("--model-type", help="Override the model type "
                                                      "(STANDARD, ROBUST_INTV, LP_ADV, MORE_DATA, ...).")] = None,
    partial: Annotated[bool, typer.Option("--partial", help="Accept a partial copy of a dataset (missing class "
                                           "folders) instead of failing.")] = False,
    max_memory: Annotated[Optional[str], typer.Option(
        "--max-memory", help="Bound on what one pass holds on its device (weights of the models streamed "
        "together + a decoded and a shifted batch), e.g. 8GiB; models are split into passes that fit.")] = None,
    input_size: Annotated[Optional[int], typer.Option(
        "--input-size", help="Evaluate python: models at N px: the shorter side resized to N, then an N x N centre "
        "crop (default: the size the builder declares, else 224 with a note).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Evaluate models on settings; results go to the store and are printed.

    Several --model: each dataset is read once for all of them (each image decoded once, each
    shift applied once per pixel pipeline, every model fed the same batches)."""
    from shiftbench.engine import EvalRequest, LocalExecutor  # deferred: loads Pillow, loads pyarrow
    from shiftbench.models.device import check_device  # deferred: shiftbench.models loads numpy

    if executor not in ("local", "ray"):
        raise typer.BadParameter(f"{executor!r}: use local or ray", param_hint="--executor")
    if address is not None and executor != "ray":
        raise ConfigError(f"--address {address}: --address only applies with --executor ray (add --executor ray, "
                          "or drop --address to run here)")
    device = check_device(device, here=executor == "local")   # a Ray worker's GPUs are not this machine's
    request = EvalRequest.build(
        model, setting, data_root=data_root, data_dirs=_data_dirs(data_dir), store=store, batch_size=batch_size,
        workers=workers, limit=limit, keep_logits=keep_logits, force=force, device=device, convention=convention,
        chunk_size=chunk_size, partial=partial, arch=arch, model_type=model_type, seed=seed, memory_limit=max_memory,
        input_size=input_size)
    if executor == "ray":
        from shiftbench.engine.ray_executor import RayExecutor  # deferred: loads Pillow, loads pyarrow

        runner = RayExecutor(address)
    else:
        runner = LocalExecutor()
    frame = runner.run(request, progress=not as_json)
    rows = frame[["model", "setting", "accuracy", "top5", "n_examples", "n_skipped"]]
    if as_json:
        print(json.dumps([{k: _clean(v) for k, v in r.items()} for r in rows.to_dict("records")]))
        return
    _results_table(frame, title=f"{len(frame)} results in {store}")


def _results_table(frame, title: str) -> None:
    multi = "map" in frame and frame["map"].notna().any()  # multi-label settings: mAP beside top-1-in-set
    table = Table("model", "setting", "top-1 %", "top-5 %", *(["mAP % [95% CI]"] if multi else []), "examples",
                  "skipped", "convention", "Δ reference", title=title)
    for r in frame.to_dict("records"):
        delta = r.get("reference_delta")
        ml = [] if not multi else ["" if r.get("map") != r.get("map") or r.get("map") is None
                                   else f"{r['map']:.2f} [{r['map_low']:.1f}, {r['map_high']:.1f}]"]
        table.add_row(str(r["model"]), str(r["setting"]), f"{r['accuracy']:.2f}", f"{r['top5']:.2f}", *ml,
                      f"{int(r['n_examples']):,}", str(int(r["n_skipped"])), str(r.get("convention", "")),
                      "" if delta is None or delta != delta else f"{delta:+.2f} ({r['reference']})")
    out.print(table)
    if multi:
        out.print("top-1 % on multi-label settings: top-1 prediction in the image's label set; mAP: mean average "
                  "precision over the classes with positives (95% bootstrap interval over images)")
    for key, what in (("skipped_files", "images that could not be decoded"),
                      ("skipped_on_scan", "files left out when scanning the dataset")):
        listed = sorted({f for r in frame.to_dict("records") for f in (r.get(key) or [])})
        if listed:
            out.print(f"{what} ({len(listed)} listed):")
            for f in listed[:20]:
                out.print(f"  {f}")


@app.command("results")
def results_cmd(
    store: StoreOpt = DEFAULT_STORE,
    export: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the table to FILE.csv or "
                                                   "FILE.parquet.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """The finished results in a store, with the difference to a reference row where one exists."""
    from shiftbench.reference.results import results_with_reference  # deferred: loads pyarrow

    from shiftbench.store import Store  # deferred: loads pyarrow

    if export is not None:                   # before the work: a missing folder is not created
        _check_output_parent(export, "--output")
    Store.existing(store)                    # a missing folder, or one that is not a store: one line
    frame = results_with_reference(store)
    if export is not None:
        from shiftbench.reference.results import export_results  # deferred: loads pyarrow

        path = export_results(frame, export)
        if not as_json:
            typer.echo(f"wrote {path}")
    if as_json:
        cols = ["model", "setting", "accuracy", "top5", "n_examples", "n_skipped", "convention",
                "reference", "reference_accuracy", "reference_delta"]
        cols += [c for c in ("map", "map_low", "map_high") if c in frame and frame[c].notna().any()]
        print(json.dumps([{k: _clean(v) for k, v in r.items()} for r in frame[cols].to_dict("records")]))
        return
    _results_table(frame, title=f"{len(frame)} results in {store}")


# ---------------------------------------------------------------------------- report
REFERENCE_TESTBEDS = ("imagenet-reference", "timm-reference")


def _figure_formats(text: str) -> tuple[str, ...]:
    """``--figure-formats png,pdf`` as ``(".png", ".pdf")``; ``none`` (or empty) for none."""
    from shiftbench.report.figures import FORMATS  # deferred: loads Pillow, loads matplotlib, loads plotly, loads pyarrow

    names = [f.strip().lower().lstrip(".") for f in text.split(",") if f.strip()]
    if names in ([], ["none"]):
        return ()
    bad = [n for n in names if f".{n}" not in FORMATS]
    if bad:
        raise ConfigError(f"--figure-formats {text!r}: unknown format {bad[0]!r}; use png, svg and/or pdf "
                          "(comma-separated), or none")
    return tuple(dict.fromkeys(f".{n}" for n in names))


def _html_report(testbeds, output: Path, *, store: Path | None, n_resamples: int, scale: str = "logit",
                 shifts=None, highlight=(), cache: bool = True, figure_formats: tuple[str, ...] = (".png", ".pdf")
                 ) -> Path:
    """write_html_report with a progress bar on stderr (``figure_formats``: :func:`_figure_formats`)."""
    from shiftbench.report import (  # deferred: loads Pillow, loads matplotlib, loads plotly, loads pyarrow
        NATURAL_SHIFTS,
        write_html_report,
    )
    from shiftbench.report.html import n_steps  # deferred: loads Pillow, loads matplotlib, loads plotly, loads pyarrow

    shifts = NATURAL_SHIFTS if shifts is None else shifts
    with _progress() as progress:
        task = progress.add_task("HTML report", total=n_steps(testbeds, shifts))

        def step(label: str) -> None:
            progress.update(task, description=f"HTML report: {label}")
            progress.advance(task)

        path = write_html_report(testbeds, output, store=store, shifts=shifts, n_resamples=n_resamples,
                                 scale=scale, on_step=step, highlight=list(highlight) or None, cache=cache,
                                 figure_formats=figure_formats)
        progress.update(task, description="HTML report written")
    return path


@app.command("report")
def report_cmd(
    output: Annotated[Path, typer.Option("--output", "-o", help="Report directory (index.html, figures, tables).")],
    testbed: TestbedOpt = None,
    store: StoreAddOpt = None,
    scale: ScaleOpt = "logit",
    n_resamples: ResamplesOpt = 1000,
    cache: Annotated[bool, typer.Option("--cache/--no-cache", help="Reuse the slow analyses and unchanged "
                                        "figures of the last build (OUTPUT/.shiftbench-cache) and of any earlier "
                                        "report on this machine (see `shiftbench cache`).")] = True,
    figure_formats: FigureFormatsOpt = "png,pdf",
    fractions: FractionsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write a self-contained interactive HTML report (index.html) plus static figures and tables.

    Without --testbed: both reference testbeds, each in its own section. With --testbed (and
    --store): the testbeds given merged left to right into one, the added models highlighted
    on every figure and placed in a "Your models" table. --store also adds the store's calibration,
    model similarity and stored studies (trajectories, resolution sweeps, compositing, replication,
    attribute shifts)."""
    from shiftbench.analysis.scaling import check_scale  # deferred: loads numpy, scipy
    from shiftbench.reference import load_testbed  # deferred: loads pandas

    if store is not None:                           # before any work or progress bar
        from shiftbench.store import Store  # deferred: loads pyarrow

        Store.existing(store)                       # a missing folder, or one that is not a store: one line
    check_scale(scale)
    _check_count(n_resamples, "--resamples", what="(the report draws every trend's bootstrap band; default 1000)")
    formats = _figure_formats(figure_formats)
    _output_folder(output)                        # an unwritable -o fails here, in one line, not mid-report
    if fractions and not testbed:
        raise ConfigError("--fractions converts the accuracies of your table files (-t FILE), and none was given; "
                          "drop it")
    if testbed:
        merged = _testbed(testbed, store, fractions)
        testbeds, highlight = [merged], merged.added
    else:
        testbeds, highlight = [load_testbed(t) for t in REFERENCE_TESTBEDS], []
    start = time.perf_counter()
    with _notes_to_stderr(as_json):
        path = _html_report(testbeds, output, store=store, n_resamples=n_resamples, scale=scale,
                            highlight=highlight, cache=cache, figure_formats=formats)
    if as_json:   # {"index", "testbeds", "sections", "figures", "times": {"total"}}
        _print_json({"index": str(path.resolve()), "testbeds": [t.name for t in testbeds],
                     "sections": _report_sections(path), "figures": _figure_count(output),
                     "times": {"total": round(time.perf_counter() - start, 3)}})
        return
    typer.echo(f"report: {path.resolve()}")


def _report_sections(index: Path) -> list[str]:
    """The ids of the sections of a written report's index.html, in page order."""
    import re  # deferred: only `report --json` reads the page back

    return re.findall(r'<section class="sb-section" id="([^"]+)"', index.read_text(encoding="utf-8"))


def _figure_count(output: Path) -> int:
    """The static figure files (.png, .svg, .pdf) under a report folder, its cache left out."""
    from shiftbench.report.figures import FORMATS  # deferred: loads matplotlib

    return sum(1 for p in output.rglob("*") if p.suffix.lower() in FORMATS and p.is_file()
               and ".shiftbench-cache" not in p.relative_to(output).parts)


@app.command("cache")
def cache_cmd(clear: Annotated[bool, typer.Option("--clear", help="Remove every entry.")] = False,
              as_json: JsonOpt = False) -> None:
    """Where the cache shared by every report on this machine is, and what it holds.

    Reports keep their slow analyses and static figures there by content hash, so a report built
    into a new folder copies what an earlier one computed and drew. Its folder is
    $SHIFTBENCH_CACHE_DIR (off: none), else $XDG_CACHE_HOME/shiftbench/report, else
    ~/.cache/shiftbench/report; it keeps at most 2 GiB, dropping the least recently used. The folder
    is marked with a CACHEDIR.TAG, and only the cache's own entries in it are ever removed: a folder
    that holds other files and no tag is refused.

    --json: {"root", "enabled", "foreign", "analyses", "figures", "bytes", "max_bytes"}; with
    --clear {"root", "enabled", "removed"}; off: {"root": null, "enabled": false, ...}."""
    from shiftbench.report.cache import SHARED_ENV, SharedCache  # deferred: loads pandas

    shared = SharedCache.default()
    if as_json:
        _cache_json(shared, clear)
        return
    if shared is None:
        typer.echo(f"shared report cache: off ({SHARED_ENV}={os.environ.get(SHARED_ENV, '')!r})")
        return
    if clear:   # a folder that is not a shiftbench cache: a one-line ConfigError, nothing removed
        typer.echo(f"shared report cache: {shared.root}: removed {shared.clear()} entries")
        return
    if shared.is_foreign():
        typer.echo(f"shared report cache: {shared.root}: not a shiftbench cache (no CACHEDIR.TAG), so reports skip "
                   f"it; set {SHARED_ENV} to a new or empty folder")
        return
    found = shared.entries()
    kinds = {kind: sum(1 for _, _, p in found if p.parent.name == kind) for kind in ("analyses", "figures")}
    size = sum(n for _, n, _ in found) / 1024**2
    typer.echo(f"shared report cache: {shared.root}: {kinds['analyses']} analyses, {kinds['figures']} figure files, "
               f"{size:.1f} MiB of at most {shared.max_bytes / 1024**3:.0f} GiB")


def _cache_json(shared, clear: bool) -> None:
    """``shiftbench cache --json``: one JSON object (see cache_cmd)."""
    if shared is None:
        _print_json({"root": None, "enabled": False, "analyses": 0, "figures": 0, "bytes": 0}
                    | ({"removed": 0} if clear else {}))
        return
    if clear:
        _print_json({"root": str(shared.root), "enabled": True, "removed": shared.clear()})
        return
    foreign = shared.is_foreign()
    found = [] if foreign else shared.entries()
    _print_json({"root": str(shared.root), "enabled": not foreign, "foreign": foreign,
                 "analyses": sum(1 for _, _, p in found if p.parent.name == "analyses"),
                 "figures": sum(1 for _, _, p in found if p.parent.name == "figures"),
                 "bytes": sum(n for _, n, _ in found), "max_bytes": shared.max_bytes})


def _offline_testbeds(output: Path, *, workspace: Path, data_dir: Path, models: str = "all",
                      n_test: int | None = None, corruptions: str | None = None, n_resamples: int = 1000) -> list:
    """The offline digits testbed (MNIST -> UCI digits, trained and evaluated live), as
    ``(testbed, shifts)`` pairs reported beside the reference testbeds."""
    from shiftbench.demo import run_digits_demo  # deferred: loads Pillow, loads pyarrow

    res = run_digits_demo(workspace, output, data_dir=data_dir, models=models, n_test=n_test,
                          corruptions=corruptions, n_resamples=n_resamples, console=err)
    typer.echo(f"digits testbed: {len(res['models'])} models ({len(res['trained'])} trained now), "
               f"{res['times']['total']:.1f} s; report: {Path(res['report']).resolve()}")
    typer.echo("digits stage times: " + ", ".join(f"{k} {v:.1f} s" for k, v in res["times"].items()))
    with open(output / "summary.md", "a") as fh:
        fh.write("\n## The digits testbed\n\nTrained and evaluated on this machine: [digits.md](digits.md).\n")
    _digits_studies(output, workspace=workspace, data_dir=data_dir, testbed=res["testbed"])
    return [(res["testbed"], res["shifts"])]


def _digits_studies(output: Path, *, workspace: Path, data_dir: Path, testbed) -> None:
    """The studies beyond the end point on the digits data, stored in the digits store so the
    report shows them: fine-tuning trajectories (pretrained vs scratch), attribute-controlled
    shifts (stroke thickness, slant), resolution sweeps, object compositing and the mini-VTAB
    transfer (:mod:`shiftbench.demo.transfer`). All resume from their caches."""
    from shiftbench.demo.attributes import run_attribute_demo  # deferred: loads Pillow, loads pyarrow
    from shiftbench.demo.finetune import run_finetune_demo  # deferred: loads Pillow, loads pyarrow
    from shiftbench.store import Store  # deferred: loads pyarrow

    start = time.perf_counter()
    traj = run_finetune_demo(data_dir, workspace, testbed=testbed, console=err)
    last = traj.sort_values("step").groupby("trajectory").tail(1)
    typer.echo(f"fine-tuning trajectories ({time.perf_counter() - start:.1f} s): " + "; ".join(
        f"{r.trajectory} final ER {r.effective_robustness:+.2f} pp at {r.x_acc:.1f}% mnist-test"
        for r in last.itertuples()))
    start = time.perf_counter()
    attrs = run_attribute_demo(data_dir, workspace.parent / "attributes")
    Store(workspace / "store").write_study("attributes", "digits", attrs, meta={"source": "run_attribute_demo"})
    typer.echo(f"attribute-controlled shifts ({time.perf_counter() - start:.1f} s): " + ", ".join(
        f"{r.split} {r.accuracy:.1f}%" for r in attrs.itertuples()))
    from shiftbench.demo.multilabel import run_multilabel_demo  # deferred: loads Pillow, loads pyarrow

    start = time.perf_counter()
    multi = run_multilabel_demo(data_dir, workspace.parent / "multilabel")
    Store(workspace / "store").write_study("multilabel", "digits", multi, meta={"source": "run_multilabel_demo"})
    iid = multi[multi["split"] == "id-test"].set_index("model")["map"]
    ood = multi[multi["split"] != "id-test"].groupby("model")["map"].mean()
    typer.echo(f"multi-label shifts ({time.perf_counter() - start:.1f} s): {len(iid)} models, IID mAP "
               f"{iid.min():.1f}-{iid.max():.1f}%, OOD average {ood.min():.1f}-{ood.max():.1f}%")
    from shiftbench.demo.sweeps import run_sweeps_demo  # deferred: loads Pillow, loads pyarrow

    start = time.perf_counter()
    sweeps = run_sweeps_demo(data_dir, workspace, console=err)
    best = {m: t.loc[t["accuracy"].idxmax(), "resolution"] for m, t in sweeps["resolution"].items()
            if t["accuracy"].notna().any()}
    typer.echo(f"resolution sweeps and object compositing ({time.perf_counter() - start:.1f} s): "
               f"{len(sweeps['resolution'])} sweeps (best resolution: " + ", ".join(
                   f"{m} {int(r)} px" for m, r in list(best.items())[:3]) + f"), {len(sweeps['compositing'])} "
               "compositing studies")
    from shiftbench.demo.transfer import run_transfer_demo  # deferred: loads Pillow, loads pyarrow

    start = time.perf_counter()
    moved = run_transfer_demo(data_dir, workspace, workspace / "store", list(testbed.models))
    if len(moved):    # none when the zoo chosen has no torch model
        means = moved.groupby(["group", "model"])["accuracy"].mean().groupby("group")
        typer.echo(f"mini-VTAB transfer ({time.perf_counter() - start:.1f} s): {moved['model'].nunique()} models "
                   f"x {moved['task'].nunique()} tasks, linear probe; group means " + ", ".join(
                       f"{g} {v.min():.1f}-{v.max():.1f}%" for g, v in means))
    with open(output / "summary.md", "a") as fh:
        fh.write("\nFine-tuning trajectories, attribute-controlled shifts, multi-label shifts, resolution sweeps, "
                 "object compositing and mini-VTAB transfer of the digits testbed: see index.html.\n")


# ---------------------------------------------------------------------------- demo
@app.command("demo")
def demo_cmd(output: Annotated[Path, typer.Option("--output", "-o", help="Report directory.")] = Path("shiftbench-report"),
             n_resamples: ResamplesOpt = 1000,
             digits: Annotated[bool, typer.Option("--digits/--no-digits", help="Also train and evaluate the offline "
                                                  "digits testbed.")] = True,
             workspace: Annotated[Path, typer.Option("--workspace", help="Digits testbed workspace (model cache, store).")]
             = Path("shiftbench-workspace/digits"),
             data_dir: Annotated[Path, typer.Option("--data-dir", help="Where `make demo-data` put MNIST.")]
             = Path("shiftbench-data"),
             models: Annotated[str, typer.Option("--models", help="all or small.")] = "all",
             n_test: Annotated[Optional[int], typer.Option("--n-test", help="Test digits per setting.")] = None,
             corruptions: Annotated[Optional[str], typer.Option("--corruptions", help="Comma-separated corruptions, "
                                                                "or all.")] = None,
             figure_formats: FigureFormatsOpt = "png,pdf", as_json: JsonOpt = False) -> None:
    """Analyse every natural shift of both reference testbeds; write summary.md and index.html.

    --json: {"report", "summary", "testbeds", "times": {"reference", "digits", "html", "total"}}."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn  # deferred: only the demo draws it

    from shiftbench.reference import load_testbed  # deferred: loads pandas
    from shiftbench.report import (  # deferred: loads Pillow, loads matplotlib, loads plotly, loads pyarrow
        NATURAL_SHIFTS,
        write_report,
    )

    formats = _figure_formats(figure_formats)     # a typo fails now, not after the digits testbed is trained
    _check_count(n_resamples, "--resamples", what="(the report draws every trend's bootstrap band; default 1000)")
    _check_count(n_test, "--n-test", what="of test digits per setting")
    _output_folder(output)                        # an unwritable -o fails here, in one line, not mid-report
    if digits:                                    # trains and evaluates models: without [demo], one line now
        require("shiftbench demo", "torch", "torchvision", "safetensors", "skops", "skimage", extra="demo")
    with _notes_to_stderr(as_json):   # --json: the notes go to stderr, stdout holds the JSON only
        start = time.perf_counter()
        names = list(REFERENCE_TESTBEDS)
        with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                      TimeElapsedColumn(), console=err, transient=False) as progress:
            task = progress.add_task("loading reference testbeds", total=len(names) * len(NATURAL_SHIFTS))
            testbeds = [load_testbed(n) for n in names]

            def step(label: str) -> None:
                progress.update(task, description=label)
                progress.advance(task)

            summary = write_report(testbeds, output, n_resamples=n_resamples, on_step=step)
            progress.update(task, description="reference testbeds analysed")
        typer.echo(f"reference analysis: {len(testbeds)} testbeds, {sum(len(t) for t in testbeds)} models, "
                   f"{time.perf_counter() - start:.1f} s")
        typer.echo(f"report: {summary.resolve()}")
        times = {"reference": time.perf_counter() - start}
        start = time.perf_counter()
        offline = (_offline_testbeds(output, workspace=workspace, data_dir=data_dir, models=models, n_test=n_test,
                                     corruptions=corruptions, n_resamples=n_resamples) if digits else [])
        times["digits"] = time.perf_counter() - start
        start = time.perf_counter()
        shifts = {tb.name: NATURAL_SHIFTS for tb in testbeds} | {tb.name: list(s) for tb, s in offline}
        store = workspace / "store" if digits else None     # its calibration, similarity, trajectories, attributes
        index = _html_report(testbeds + [tb for tb, _ in offline], output, store=store, n_resamples=n_resamples,
                             shifts=shifts, figure_formats=formats)
        typer.echo(f"html report ({time.perf_counter() - start:.1f} s): {index.resolve()}")
        times["html"] = time.perf_counter() - start
        res = {"report": index.resolve(), "summary": summary.resolve(), "testbeds": [t.name for t in testbeds]
                + [t.name for t, _ in offline], "times": times | {"total": sum(times.values())}}
    if as_json:
        _print_json(res | {"times": {k: round(v, 3) for k, v in res["times"].items()}})


def _register_command_modules() -> None:
    """Commands defined in ``shiftbench.commands.<name>`` modules: each has ``register(app)``."""

    import shiftbench.commands as package  # deferred: registers on import

    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"shiftbench.commands.{info.name}")
        module.register(app)


_register_command_modules()


def _interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` (typer's exit 130) comes from a KeyboardInterrupt."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def _options_of(argv: list[str]) -> set[str]:
    """The option names (``--x``, ``-m``, ...) of the command that ``argv`` runs (its leading
    words: ``fit``, ``list settings``); empty when it names none."""
    import typer.main  # deferred: builds the click commands, only for an old option spelling

    command = typer.main.get_command(app)
    for word in (a for a in argv if not a.startswith("-")):
        sub = getattr(command, "commands", {}).get(word)
        if sub is None:
            break
        command = sub
    if hasattr(command, "commands"):           # a group (no command named): nothing to compare with
        return set()
    return {o for p in command.params for o in [*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ())]}


def main() -> None:
    """Console-script entry point: every error is one line on stderr, ``error: <what and the fix>``,
    with exit status 1 (a ShiftbenchError's message; an OSError's path and fix; anything else
    with a pointer to --debug); an option spelling of earlier versions (``--id``) exits 2 with
    the spelling now (:data:`shiftbench.cli_support.OLD_SPELLINGS`); Ctrl-C exits 130;
    tracebacks only with --debug."""
    renamed = _old_spelling(sys.argv[1:], _options_of)
    if renamed is not None:
        typer.echo(f"error: {renamed}", err=True)
        sys.exit(2)
    try:
        app()
    except SystemExit as exc:
        if exc.code == 130 and _interrupted(exc):
            typer.echo("error: interrupted (Ctrl-C)", err=True)
        raise
    except Exception as exc:  # noqa: BLE001 - the one place where any error becomes one line
        if _state["debug"]:
            raise
        typer.echo(f"error: {_error_message(exc, sys.argv[1:])}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
