"""``shiftbench synthetic-vs-natural``: does robustness to synthetic shifts (ImageNet-C, PGD)
predict robustness to a natural one (ImageNetV2)? Taori et al. 2020, §4.2, under a named recipe
(``--recipe``: :data:`shiftbench.analysis.synthetic.RECIPES`).

One call into :func:`shiftbench.analysis.synthetic.synthetic_vs_natural`; on the cleaned
``imagenet-reference`` the taori2020 recipe is also run on ``imagenet-reference-raw`` to show how
r changes with the cleaning.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from shiftbench.analysis.recipes import (
    DEFAULTS,
    NATURAL_DEFAULT,
    SYNTHETIC_RECIPES,
    check_recipe,
)
from shiftbench.cli_options import JsonOpt, StoreAddOpt, TestbedOpt, canonical_settings
from shiftbench.cli_support import Table, out
from shiftbench.cli_support import testbed_from_options as _testbed

if TYPE_CHECKING:   # the analysis itself is imported where it runs: a fast `shiftbench --help`
    from shiftbench.analysis.synthetic import SyntheticVsNatural

#: The cleaned reference testbed and the one it was cleaned from.
CLEANED, RAW = "imagenet-reference", "imagenet-reference-raw"


def _rnp(res: SyntheticVsNatural | None) -> dict[str, object] | None:
    if res is None:
        return None
    d = res.to_dict()
    return {"r": d["r"], "n": d["n"], "p": d["p"]}


def cleaning_effect(res: SyntheticVsNatural, scale: str = "logit") -> dict[str, object] | None:
    """r, n and p with the cleaning (``res``, on ``imagenet-reference``) and without it (the same
    recipe on ``imagenet-reference-raw``), for the synthetic and the adversarial average;
    ``None`` unless ``res`` is the taori2020 recipe on the cleaned reference testbed."""
    if res.recipe != "taori2020" or res.testbed != CLEANED:
        return None
    from shiftbench.analysis.synthetic import synthetic_vs_natural  # deferred: loads pandas, scipy.stats
    from shiftbench.reference import load_testbed  # deferred: loads pandas

    raw = synthetic_vs_natural(load_testbed(RAW), res.recipe, res.natural, x=res.x, scale=scale, fallback=True)
    return {"cleaned": {**_rnp(res), "adversarial": _rnp(res.adversarial)},  # type: ignore[dict-item]
            "raw": {**_rnp(raw), "adversarial": _rnp(raw.adversarial)}}  # type: ignore[dict-item]


def register(app: typer.Typer) -> None:
    """Add ``synthetic-vs-natural`` to the ``shiftbench`` app."""

    @app.command("synthetic-vs-natural")
    def synthetic_vs_natural_cmd(
        testbed: TestbedOpt = None,
        store: StoreAddOpt = None,
        recipe: Annotated[str, typer.Option(
            "--recipe", help="Recipe: " + "; ".join(f"{k}: {v[0]} ({v[1]})" for k, v in SYNTHETIC_RECIPES.items())
            + ".")] = DEFAULTS["synthetic-vs-natural"],
        natural: Annotated[str, typer.Option("--y", help="The natural shift (its setting).",
                                             callback=canonical_settings)] = NATURAL_DEFAULT,
        x: Annotated[str, typer.Option("--x", help="In-distribution setting.", callback=canonical_settings)] = "val",
        fallback: Annotated[bool, typer.Option(
            "--fallback", help="When the testbed lacks settings the recipe needs, use those it has (and say so) "
            "instead of failing.")] = False,
        csv: Annotated[Optional[Path], typer.Option(
            "--output", "-o", help="Write the per-model table (with the recipe, its description and paper) to this "
            "CSV.")] = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Pearson r between effective robustness on synthetic shifts (ImageNet-C average; PGD) and on a
        natural shift (ImageNetV2), over the non-standard models, under a named recipe."""
        check_recipe("synthetic-vs-natural", recipe, option="--recipe")      # before loading anything
        from shiftbench.analysis.synthetic import recipe_line, synthetic_vs_natural  # deferred: pandas, scipy

        res = synthetic_vs_natural(_testbed(testbed, store), recipe, natural, x=x, fallback=fallback)
        cleaning = cleaning_effect(res)
        if csv is not None:
            csv.parent.mkdir(parents=True, exist_ok=True)
            res.to_csv_frame().to_csv(csv, index=False)
        if as_json:
            d = res.to_dict()
            if cleaning is not None:
                d["cleaning"] = cleaning
            print(json.dumps(d))
            return
        t = Table("synthetic shift", "Pearson r", "n", "p", "settings averaged",
                  title=f"Synthetic vs {natural} effective robustness on {res.testbed} (recipe {recipe})")
        for label, part in (("ImageNet-C average", res), ("adversarial (PGD) average", res.adversarial)):
            if part is None:
                t.add_row(label, "-", "-", "-", "none in the testbed")
            else:
                t.add_row(label, f"{part.r:.3f}", str(part.n), f"{part.p:.2g}", str(len(part.settings)))
        out.print(t)
        out.print(f"recipe {recipe_line(recipe)}", markup=False, highlight=False)
        for note in res.notes:
            out.print(f"note: {note}", markup=False, highlight=False)
        if cleaning is not None:
            c, r = cleaning["cleaned"], cleaning["raw"]
            out.print(f"cleaning: r = {c['r']:.3f} (n = {c['n']}) on {CLEANED}, {r['r']:.3f} (n = {r['n']}) on {RAW}"
                      f" (change {c['r'] - r['r']:+.3f}); adversarial r unchanged at {c['adversarial']['r']:.3f}"
                      if c["adversarial"] and r["adversarial"] and c["adversarial"]["r"] == r["adversarial"]["r"]
                      else f"cleaning: r = {c['r']:.3f} (n = {c['n']}) on {CLEANED}, {r['r']:.3f} (n = {r['n']}) "
                      f"on {RAW} (change {c['r'] - r['r']:+.3f})", markup=False, highlight=False)
        if csv is not None:
            out.print(f"wrote {csv}", markup=False, highlight=False)
