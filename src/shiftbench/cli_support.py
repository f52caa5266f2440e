"""What the commands of ``shiftbench`` share: the consoles, tables, progress bars, JSON
cleaning, and the ``--testbed``/``--store``/``--fit-on``/``--pivot`` handling of the analysis
commands. :mod:`shiftbench.cli` and :mod:`shiftbench.commands` import it; it imports neither."""
from __future__ import annotations

import math
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as _RichTable

from shiftbench.analysis import fit_piecewise_trend, fit_trend
from shiftbench.errors import ConfigError
from shiftbench.reference import load_testbed
from shiftbench.testbed import Testbed

# rich only for tables and progress; names and paths go through typer.echo verbatim
# piped output is not cut to 80 columns: tables keep whole model and setting names
out = Console(soft_wrap=True, emoji=False, highlight=False, markup=False, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, soft_wrap=True, emoji=False, highlight=False, markup=False)


def Table(*headers: str, **kwargs) -> _RichTable:  # noqa: N802 - a drop-in for rich's Table
    """A rich table whose cells fold instead of being cut with '…' on narrow terminals."""
    table = _RichTable(**kwargs)
    for h in headers:
        table.add_column(h, overflow="fold")
    return table


def testbed_from_options(testbeds: list[str] | None, store: Path | None = None) -> Testbed:
    """The testbeds given (``--testbed``, repeatable, and ``--store``) merged left to right; what
    the merge did (example counts taken from a reference, aliases) goes to stderr."""
    if not testbeds and store is None:
        raise ConfigError("no testbed given; pass --testbed imagenet-reference (or timm-reference, a "
                          "CSV/Parquet table, a results store), repeatable to merge")
    if store is not None and not store.is_dir():
        raise ConfigError(f"{store}: no results store there; pass the --store directory that `shiftbench eval` wrote")
    tb = load_testbed(list(testbeds or []), store=store)
    for note in tb.notes:
        err.print(f"note: {note}")
    return tb


def fit_used(tb, fit) -> None:
    """Say on stderr which models the trend was fitted on, and which added models it left out."""
    left_out = [m for m in tb.added if m not in set(tb.resolve(list(fit.fit_on)))]
    if left_out:
        types = ", ".join(sorted({tb.model_types[m] for m in left_out}))
        err.print(f"note: trend fitted on {fit.n_models} models ({', '.join(fit.fit_on)}); not fitted: "
                  f"{len(left_out)} added model(s) of type {types} ({', '.join(left_out[:5])}"
                  f"{', ...' if len(left_out) > 5 else ''}); --fit-on to change")


def fit_on(values: list[str] | None) -> tuple[str, ...]:
    """``--fit-on`` values, repeated or comma-separated; default ``STANDARD``."""
    if not values:
        return ("STANDARD",)
    return tuple(v.strip() for item in values for v in item.split(",") if v.strip())


def pivot(value: str | None) -> str | float | None:
    """``--pivot``: a percentage, or a model name."""
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return value


def fit(testbed, x, y, scale, fit_on, pivot):
    """The trend ``--x``/``--y`` ask for: piecewise around ``pivot`` when given, else linear."""
    if pivot is not None:
        return fit_piecewise_trend(x, y, pivot, scale, testbed=testbed, fit_on=fit_on)
    return fit_trend(x, y, scale, testbed=testbed, fit_on=fit_on)


def clean(value):
    """A JSON-safe scalar: numpy scalars unwrapped, NaN and infinities as ``None``."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):
        return clean(value.item())
    return value


def progress() -> Progress:
    """A progress bar on stderr (rich), as every long command shows."""
    return Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                    TimeElapsedColumn(), console=err, transient=False)
