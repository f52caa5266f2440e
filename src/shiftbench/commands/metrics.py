"""``shiftbench informativeness`` and ``shiftbench diagnostics``: which settings tell model groups
apart beyond ID accuracy (Djolonga et al. 2021, §3; ``--method`` picks the recipe), and how well
each shift's trend holds per scaling."""
from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from shiftbench.analysis.recipes import DEFAULT_METHOD, DEFAULT_RESAMPLES, METHODS, check_recipe
from shiftbench.cli_options import JsonOpt, SeedOpt, StoreAddOpt, TestbedOpt, canonical_settings
from shiftbench.cli_support import Table, out
from shiftbench.cli_support import clean as _clean
from shiftbench.cli_support import fit_on as _fit_on
from shiftbench.cli_support import progress as _progress
from shiftbench.cli_support import testbed_from_options as _testbed


def _split(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def _min_models(value: str) -> int | float:
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not (0 < number < 1 or (number >= 1 and number.is_integer())):
        raise typer.BadParameter(f"{value}: give a count of models (e.g. 100) or a fraction of the groups' models "
                                 "(e.g. 0.5)", param_hint="--min-models")
    return number if number < 1 else int(number)


def informativeness_cmd(
    testbed: TestbedOpt = None,
    store: StoreAddOpt = None,
    method: Annotated[str, typer.Option("--method", help="Recipe: " + "; ".join(
        f"{k}: {v[0]} ({v[1]})" for k, v in METHODS.items()) + ".")] = DEFAULT_METHOD,
    x: Annotated[str, typer.Option("--x", help="In-distribution setting every classifier gets.",
                                       callback=canonical_settings)] = "val",
    group: Annotated[Optional[list[str]], typer.Option(
        "--group", help="Model types to use (repeat or comma-separate; default every type with "
        "--min-models-per-group models).")] = None,
    baseline: Annotated[str, typer.Option("--baseline", help="one-vs-standard: the model type the groups are told "
                                          "from.")] = "STANDARD",
    n_resamples: Annotated[int, typer.Option("--resamples", help="Bootstrap resamples of the gain (1,000 as in "
                                             "Djolonga et al.).")] = DEFAULT_RESAMPLES,
    folds: Annotated[int, typer.Option("--folds", help="Stratified cross-validation folds.")] = 5,
    min_per_group: Annotated[int, typer.Option("--min-models-per-group", help="Fewest models of a group on a "
                                               "setting for the group to count.")] = 10,
    min_models: Annotated[str, typer.Option("--min-models", help="Fewest models a setting is computed on: a count, "
                                            "or a fraction of the same groups' models on --x.")] = "0.5",
    scale: Annotated[str, typer.Option("--scale", help="Feature scaling of accuracies: logit, probit, linear.")] = "logit",
    seed: SeedOpt = 0,
    jobs: Annotated[int, typer.Option("--jobs", help="Processes for the djolonga2021 fits (-1: every core); the "
                                      "result does not depend on it.")] = 1,
    top: Annotated[int, typer.Option("--top", help="Show the K most informative settings per group.")] = 10,
    as_json: JsonOpt = False,
) -> None:
    """Rank settings by how much their accuracy adds to ID accuracy for predicting a model's group
    (gain in cross-validated accuracy of a logistic regression; Djolonga et al. 2021, §3)."""
    check_recipe("informativeness", method, option="--method")      # before loading anything
    from shiftbench.analysis.informativeness import (  # deferred: loads pandas, scipy, scikit-learn
        informativeness_ranking,
        top_informative,
    )

    if top < 1:
        raise typer.BadParameter(f"{top}: show at least 1 setting per group", param_hint="--top")
    tb = _testbed(testbed, store)
    kwargs = dict(method=method, x=x, groups=_split(group), baseline=baseline, n_resamples=n_resamples,
                  n_folds=folds, min_models_per_group=min_per_group, min_models=_min_models(min_models), scale=scale,
                  seed=seed, n_jobs=jobs)
    if as_json:
        ranking = informativeness_ranking(tb, **kwargs)
    else:
        n_settings = len([s for s in tb.settings if s != x])
        with _progress() as progress:
            task = progress.add_task("informativeness", total=n_settings)

            def step(setting: str) -> None:
                progress.update(task, description=f"informativeness: {setting}")
                progress.advance(task)

            ranking = informativeness_ranking(tb, on_step=step, **kwargs)
            progress.update(task, description="informativeness ranked")
    best = top_informative(ranking, top)
    a = ranking.attrs
    if as_json:
        keep = ("testbed", "x", "baseline", "groups", "scale", "n_resamples", "n_folds", "n_repeats", "seed",
                "min_models_per_group", "min_models", "seconds")
        print(json.dumps({"method": a["method"], **{k: _clean(a[k]) for k in keep},
                          "ranking": [{k: _clean(v) for k, v in r.items()}
                                      for r in best.astype(object).where(best.notna(), None).to_dict("records")],
                          "dropped": a["dropped"]}))
        return
    one_vs = method == "one-vs-standard"
    score = "balanced accuracy" if one_vs else "accuracy"
    out.print(f"method {method}: {a['method']['description']} [{a['method']['paper']}]")
    for g in dict.fromkeys(best["group"]):
        rows = best[best["group"] == g]
        what = f"tell {g} from {baseline}" if one_vs else f"predict the group ({', '.join(a['groups'])})"
        table = Table("rank", "setting", "gain (pp)", "gain on data", f"{x} only", f"{x} + setting", "n models",
                      "models per group",
                      title=f"{tb.name}: settings that {what} beyond {x} accuracy ({score} %, {folds}-fold CV; "
                      f"gain = bootstrap mean ± s.d. over {n_resamples} resamples)")
        for r in rows.itertuples(index=False):
            table.add_row(str(r.rank), r.setting, f"{r.gain_mean:+.1f} ± {r.gain_sd:.1f}", f"{r.gain:+.1f}",
                          f"{r.score_id:.1f}", f"{r.score_metric:.1f}", str(r.n_models), r.models_per_group)
        out.print(table)
    groups = f" for {len(a['groups'])} groups" if one_vs else f" over {len(a['groups'])} groups"
    out.print(f"ranked {ranking['setting'].nunique()} settings{groups} in {a['seconds']:.1f} s; "
              f"{len(a['dropped'])} dropped (a group below {min_per_group} models, or below --min-models {min_models}).")
    for d in a["dropped"][:10]:
        out.print(f"  dropped {d['setting']}" + (f" ({d['group']})" if one_vs else "")
                  + f": {d['reason']} [{d['models_per_group']}]")
    if len(a["dropped"]) > 10:
        out.print(f"  ... and {len(a['dropped']) - 10} more (--json lists them all)")


def diagnostics_cmd(
    testbed: TestbedOpt = None,
    store: StoreAddOpt = None,
    x: Annotated[Optional[str], typer.Option("--x", callback=canonical_settings,
                                             help="Diagnose every setting against this one (default: the "
                                             "natural shifts the report analyses).")] = None,
    scale: Annotated[Optional[list[str]], typer.Option(
        "--scale", help="Scalings to compare (repeat or comma-separate; default logit, probit, linear).")] = None,
    weak_r2: Annotated[float, typer.Option("--weak-r2", help="Flag trends with r² below this.")] = 0.5,
    better_by: Annotated[float, typer.Option("--better-by", help="Flag when another scaling's r² is higher by "
                                             "this much.")] = 0.05,
    fit_on: Annotated[Optional[list[str]], typer.Option(
        "--fit-on", help="Fit on these model types, tags or models (default STANDARD).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """r² (and slope, models) of each shift's trend under each scaling; weak trends flagged."""
    from shiftbench.analysis.diagnostics import trend_diagnostics  # deferred: loads pandas, scipy
    from shiftbench.analysis.scaling import SCALES  # deferred: loads numpy, scipy
    from shiftbench.report.shifts import NATURAL_SHIFTS  # deferred: loads Pillow, loads matplotlib, loads plotly, loads pyarrow

    tb = _testbed(testbed, store)
    pairs = None
    if x is None:
        pairs = [s for s in NATURAL_SHIFTS if s.x in tb.settings and s.y in tb.settings]
        if not pairs:
            raise typer.BadParameter(f"testbed {tb.name!r} has none of the natural shifts; pass --x SETTING to "
                                     "diagnose every setting against it", param_hint="--x")
    scales = tuple(_split(scale) or SCALES)
    diag = trend_diagnostics(tb, pairs, x=x, scales=scales, weak_r2=weak_r2, better_by=better_by,
                             fit_on=_fit_on(fit_on))
    if as_json:
        print(json.dumps([{k: _clean(v) for k, v in r.items()} for r in diag.to_dict("records")]))
        return
    table = Table("shift", "x → y", *(f"r² {s}" for s in scales), "slope " + scales[0], "models", "flag",
                  title=f"{tb.name}: trend diagnostics (fit on {', '.join(_fit_on(fit_on))}; weak below r² "
                  f"{weak_r2:g})")
    for (label, px, py), rows in diag.groupby(["shift", "x", "y"], sort=False):
        by = rows.set_index("scale")
        first = by.loc[scales[0]]
        flags = [f"weak in {s}" for s in scales if by.loc[s, "weak"]]
        flags += [f"{by.loc[s, 'better_scale']} beats {s}" for s in scales if by.loc[s, "better_scale"]]
        if first["error"]:
            flags.append(first["error"])
        table.add_row(label, f"{px} → {py}", *(f"{by.loc[s, 'r2']:.3f}" for s in scales),
                      f"{first['slope']:.3f}", str(int(first["n_models"])), "; ".join(flags))
    out.print(table)


def register(app: typer.Typer) -> None:
    """Add ``informativeness`` and ``diagnostics`` to the ``shiftbench`` app."""
    app.command("informativeness")(informativeness_cmd)
    app.command("diagnostics")(diagnostics_cmd)
