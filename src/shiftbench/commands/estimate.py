"""``shiftbench estimate``: each model's accuracy on a shifted setting, estimated without its labels
(agreement on the line, ALine-S/ALine-D, Baek et al. 2022; AC, DoC, ATC, Garg et al. 2022).

One call into :func:`shiftbench.analysis.agreement.estimate_ood_accuracy` over the aligned
predictions :func:`~shiftbench.correctness.label_free_inputs` reads from the store; no forward pass.
"""
from __future__ import annotations

import json
import math
from typing import Annotated

import typer

from shiftbench.cli_options import DEFAULT_STORE, JsonOpt, ModelsOpt, StoreOpt, canonical_settings
from shiftbench.cli_support import Table, out


def _num(v: object) -> float | None:
    return None if v is None or not math.isfinite(float(v)) else float(v)


def register(app: typer.Typer) -> None:
    """Add ``estimate`` to the ``shiftbench`` app."""

    @app.command("estimate")
    def estimate_cmd(
        id_setting: Annotated[str, typer.Option("--x", help="In-distribution setting with labels, e.g. val.",
                                                callback=canonical_settings)],
        ood_setting: Annotated[str, typer.Option("--y", help="Shifted setting whose accuracy to estimate (its "
                                                 "labels are used only to report the error).",
                                                 callback=canonical_settings)],
        store: StoreOpt = DEFAULT_STORE,
        model: ModelsOpt = None,
        method: Annotated[list[str], typer.Option(
            "--method", help="aline-d, aline-s, atc, doc, ac or all (repeat or comma-separate).")] = ["all"],  # noqa: B006
        atc_score: Annotated[str, typer.Option("--atc-score", help="ATC's score: ne (negative entropy) or mc "
                                               "(max-softmax).")] = "ne",
        as_json: JsonOpt = False,
    ) -> None:
        """Estimate every model's accuracy on --y from its stored predictions, without the --y
        labels; where they exist, also the true accuracy, the error and each method's mean absolute error."""
        from shiftbench.analysis.agreement import estimate_ood_accuracy  # deferred: loads pandas, scipy.stats
        from shiftbench.correctness import label_free_inputs  # deferred: loads pyarrow

        names = [v.strip() for item in (model or []) for v in item.split(",") if v.strip()] or None
        ind, ood, left_out = label_free_inputs(store or DEFAULT_STORE, id_setting, ood_setting, names)
        res = estimate_ood_accuracy(
            ind.models, ind.pred, ind.correct, ood.pred, ood.correct, conf_id=ind.confidence,
            conf_ood=ood.confidence, entropy_id=ind.entropy, entropy_ood=ood.entropy, methods=method,
            atc_score=atc_score, where=f"{id_setting!r} -> {ood_setting!r}")
        est = res.estimates
        line = res.agreement_line
        if as_json:
            print(json.dumps({
                "x": id_setting, "y": ood_setting, "methods": list(res.methods), "atc_score": atc_score,
                "n_examples_id": len(ind.example_ids), "n_examples_ood": len(ood.example_ids),
                "left_out": left_out,
                "models": [{"model": r["model"], "accuracy_id": _num(r["accuracy_id"]),
                            "accuracy_ood": _num(r["accuracy_ood"]),
                            "estimates": {m: _num(r[m]) for m in res.methods},
                            "errors": {m: _num(r[f"error_{m}"]) for m in res.methods}} for _, r in est.iterrows()],
                "mae": {m: _num(v) for m, v in res.mae.items()},
                "agreement_line": None if line is None else {
                    "slope": line.slope, "bias": line.bias, "r2": _num(line.r2), "n_pairs": line.n_points,
                    "n_pairs_left_out": line.n_left_out},
                "accuracy_line": None if res.accuracy_line is None else {
                    "slope": res.accuracy_line.slope, "bias": res.accuracy_line.bias,
                    "r2": _num(res.accuracy_line.r2), "n_models": res.accuracy_line.n_points},
                "same_line_test": None if res.line_test is None else {
                    "slope_difference": res.line_test.slope_difference,
                    "bias_difference": res.line_test.bias_difference, "f": _num(res.line_test.f_statistic),
                    "p_value": _num(res.line_test.p_value)},
            }))
            return
        table = Table("model", "ID acc. %", *res.methods, "OOD acc. %",
                      title=f"{ood_setting} accuracy estimated from {id_setting}: {len(est)} models, "
                      f"{len(ind.example_ids):,} / {len(ood.example_ids):,} examples")
        for _, r in est.iterrows():
            cells = []
            for m in res.methods:
                e, err = r[m], r[f"error_{m}"]
                cells.append("n/a" if not math.isfinite(e) else
                             f"{e:.2f}" + (f" ({err:+.2f})" if math.isfinite(err) else ""))
            truth = r["accuracy_ood"]
            table.add_row(str(r["model"]), f"{r['accuracy_id']:.2f}", *cells,
                          f"{truth:.2f}" if math.isfinite(truth) else "unlabelled")
        out.print(table)
        if line is not None:
            out.print(f"agreement line (probit): slope {line.slope:.3f}, bias {line.bias:+.3f}, R² {line.r2:.3f} over "
                      f"{line.n_points} pairs; {line.n_left_out} left out (agreement outside [0.05, 0.98])")
        if res.line_test is not None:
            t = res.line_test
            out.print(f"accuracy line vs agreement line: slope {t.slope_difference:+.3f}, bias {t.bias_difference:+.3f} "
                      f"apart; F = {t.f_statistic:.2f}, p = {t.p_value:.3g}")
        if res.mae:
            out.print("mean absolute error: " + ", ".join(f"{m} {v:.2f}" for m, v in res.mae.items()))
        if left_out:
            out.print(f"left out (no predictions on both settings): {', '.join(left_out)}")
