"""``shiftbench ranks``: Recht et al.'s rank table (2019, Table 1) of the models on two settings.

One call into :func:`shiftbench.analysis.ranks.rank_table`: per model, original (``--x``) and new
(``--y``) accuracy with Clopper–Pearson intervals, the gap, original rank, new rank and Δ rank,
and Kendall's τ over the ranking.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Optional

import typer

from shiftbench.cli_options import FractionsOpt, JsonOpt, ModelsOpt, StoreAddOpt, TestbedOpt, XOpt, YOpt
from shiftbench.cli_support import Table, check_count, check_output_parent, out, print_json, testbed_from_options
from shiftbench.errors import ConfigError

#: what ``-o`` writes, by suffix
OUTPUT_SUFFIXES = (".csv", ".md", ".tex")


def _interval(acc: float, low: float, high: float) -> str:
    """``76.13 [75.76, 76.51]`` (Recht et al.'s cells), or the accuracy alone without a count."""
    return f"{acc:.2f} [{low:.2f}, {high:.2f}]" if math.isfinite(low) and math.isfinite(high) else f"{acc:.2f}"


def _write(table, path: Path, caption: str) -> Path:
    """The whole rank table at ``path`` (.csv full precision; .md / .tex rounded to 2 places)."""
    frame = table.reset_index()
    if path.suffix.lower() == ".csv":
        frame.to_csv(path, index=False)
        return path
    from shiftbench.report.tables import write_table  # deferred: loads plotly, matplotlib

    return write_table(frame, path.with_suffix(""), caption=caption, formats=(path.suffix.lower(),))[0]


def register(app: typer.Typer) -> None:
    """Add ``ranks`` to the ``shiftbench`` app."""

    @app.command("ranks")
    def ranks_cmd(
        x: XOpt,
        y: YOpt,
        testbed: TestbedOpt = None,
        store: StoreAddOpt = None,
        model: ModelsOpt = None,  # rank only these (types, tags or names); default every model with both
        confidence: Annotated[float, typer.Option(
            "--confidence", help="Level of the Clopper-Pearson intervals (Recht et al.: 0.95).")] = 0.95,
        top: Annotated[Optional[int], typer.Option(
            "--top", help="Show only the N best models on --x (ranks stay over all ranked models).")] = None,
        output: Annotated[Optional[Path], typer.Option(
            "--output", "-o", help="Write the whole table to FILE.csv, FILE.md or FILE.tex.")] = None,
        as_json: JsonOpt = False,
        fractions: FractionsOpt = None,
    ) -> None:
        """Rank table of Recht et al. (2019, Table 1): per model, --x (original) and --y (new) accuracy
        with Clopper-Pearson intervals, the gap, original rank, new rank and Δ rank (original − new:
        negative = fell), and Kendall's τ between the two rankings.

        --json: {"testbed", "x", "y", "confidence", "kendall_tau", "kendall_p", "n_models", "n_skipped",
        "models": [{"model", "model_type", "x_rank", "x_acc", "x_low", "x_high", "y_acc", "y_low", "y_high",
        "gap", "y_rank", "delta_rank"}, ...]}."""
        from shiftbench.analysis.ranks import rank_table  # deferred: loads pandas, scipy.stats

        check_count(top, "--top", what="(the rows shown)")
        if not 0 < confidence < 1:
            raise ConfigError(f"--confidence {confidence:g}: give a level strictly between 0 and 1, e.g. 0.95")
        if output is not None:
            if output.suffix.lower() not in OUTPUT_SUFFIXES:
                raise ConfigError(f"--output {output}: give a file name ending in {', '.join(OUTPUT_SUFFIXES)}")
            check_output_parent(output, "--output")
        tb = testbed_from_options(testbed, store, fractions)
        selectors = [v.strip() for item in model for v in item.split(",") if v.strip()] if model else None
        table = rank_table(tb, x, y, models=selectors, confidence=confidence)
        a = table.attrs
        if output is not None:
            path = _write(table, output, f"Ranks of {a['n_models']} models of {tb.name} on {y} against {x}")
            if not as_json:
                out.print(f"wrote {path}")
        shown = table if top is None else table.head(top)
        if as_json:
            print_json({"testbed": tb.name, "x": x, "y": y, "confidence": confidence,
                        "kendall_tau": a["kendall_tau"], "kendall_p": a["kendall_p"], "n_models": a["n_models"],
                        "n_skipped": a["n_skipped"],
                        "models": shown.reset_index().to_dict("records")})
            return
        level = f"{100 * confidence:g}%"
        rows = Table("orig. rank", "model", f"orig. accuracy % [{level}]", f"new accuracy % [{level}]", "gap (pp)",
                     "new rank", "Δ rank",
                     title=f"{tb.name}: original {x}, new {y} ({a['n_models']} models)")
        for name, r in shown.iterrows():
            rows.add_row(str(r.x_rank), str(name), _interval(r.x_acc, r.x_low, r.x_high),
                         _interval(r.y_acc, r.y_low, r.y_high), f"{r.gap:.2f}", str(r.y_rank),
                         f"{r.delta_rank:+d}" if r.delta_rank else "0")
        out.print(rows)
        if top is not None and top < len(table):
            out.print(f"showing the {top} best of {len(table)} models on {x}; ranks are over all {len(table)}.")
        out.print(f"Kendall's τ between the rankings: {a['kendall_tau']:.3f} over {a['n_models']} models; "
                  f"intervals: {level} Clopper-Pearson; Δ rank = original rank − new rank (negative: fell on {y}).")
        if a["n_skipped"]:
            out.print(f"{a['n_skipped']} models skipped: no accuracy on both settings.")
