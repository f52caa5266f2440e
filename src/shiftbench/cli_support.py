"""What the commands of ``shiftbench`` share: the consoles, tables, progress bars, JSON
cleaning, the ``--testbed``/``--store``/``--fit-on``/``--pivot`` handling of the analysis
commands, the checks of count, device and output options, and the one-line error messages of
``main()``. :mod:`shiftbench.cli` and :mod:`shiftbench.commands` import it; it imports neither."""
from __future__ import annotations

import errno
import json
import math
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table as _RichTable

from shiftbench.errors import ConfigError, ShiftbenchError, as_missing_extra
from shiftbench.setting_names import SETTING_ALIASES

if TYPE_CHECKING:   # the analysis, the testbeds and rich.progress are imported where used: a fast `--help`
    from rich.progress import Progress

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


def testbed_from_options(testbeds: list[str] | None, store: Path | None = None,
                         fractions: bool | None = None) -> Testbed:
    """The testbeds given (``--testbed``, repeatable, and ``--store``) merged left to right; what
    the merge did (example counts taken from a reference, aliases) goes to stderr; an alias column
    (``imagenetv2``) whose reference name the testbed lacks is renamed to it. ``fractions``:
    ``--fractions``/``--percent``, the unit of the table files (``load_testbed(fractions=...)``)."""
    if not testbeds and store is None:
        raise ConfigError("no testbed given; pass --testbed imagenet-reference (or timm-reference, a "
                          "CSV/Parquet table, a results store), repeatable to merge")
    if store is not None:
        from shiftbench.store import Store  # deferred: loads pyarrow

        Store.existing(store)   # a missing folder, or one that is not a store: one line
    from shiftbench.reference import load_testbed  # deferred: loads pandas

    tb = load_testbed(list(testbeds or []), store=store, fractions=fractions)
    # the options read setting aliases as the reference names (cli_options.canonical_settings): a
    # lone table's alias columns are renamed the same way, as a merge onto a reference renames them
    tb, renamed = tb._renamed_aliases(SETTING_ALIASES, ())
    for note in [*tb.notes, *renamed]:
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


def fit(testbed, x, y, scale, fit_on, pivot, recipe=None):
    """The trend ``--x``/``--y`` ask for (``fit``, ``effective-robustness``, ``plot``), by
    ``--recipe``: by default the authors' two lines ``taori2020`` around a pivot (``--pivot``, or
    ImageNet-A's ResNet-50; ``hinge`` with other ``--fit-on`` models) and the ``standard`` line
    otherwise (``--recipe taori2020`` selects the authors' model selection, which ``place`` and the
    report use on the published testbed); :func:`~shiftbench.analysis.placement.fit_shift`.
    Several ``--x``: the plane (recipe ``standard``)."""
    from shiftbench.analysis.placement import as_shift, fit_shift  # deferred: loads pandas, scipy
    from shiftbench.analysis.trend import fit_trend  # deferred: loads pandas, scipy

    if not isinstance(x, str):
        if pivot is not None:
            raise ConfigError(f"--pivot splits the trend (two lines or a piecewise hinge) along one x; got {len(x)} "
                              "--x settings; drop --pivot or give one --x")
        return fit_trend(testbed, x, y, scale, fit_on=fit_on, recipe=recipe or "standard")
    shift = as_shift((x, y))
    if recipe is None and pivot is None and not any(m in testbed.models for m in shift.pivot):
        recipe = "standard"
    return fit_shift(testbed, shift, scale, fit_on=fit_on, recipe=recipe, pivot=pivot)


def fit_note(fit) -> None:
    """Say on stderr which recipe the trend followed and which models it left out, per reason."""
    from shiftbench.analysis.trend import fit_note as note  # deferred: loads pandas, scipy

    err.print(f"note: trend {note(fit)}")


def clean(value):
    """A JSON-safe scalar: numpy scalars unwrapped, NaN and infinities as ``None``."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):
        return clean(value.item())
    return value


def jsonable(value):
    """``value`` made JSON-safe all the way down: :func:`clean` on scalars, paths as strings,
    mappings and sequences (tuples, numpy arrays) walked, anything else JSON cannot hold (a
    DuckDB date, a Decimal) as its string."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "tolist") and getattr(value, "ndim", 0):
        return jsonable(value.tolist())
    value = clean(value)
    return value if value is None or isinstance(value, (str, int, float, bool)) else str(value)


def print_json(value) -> None:
    """The one JSON value a ``--json`` command prints on stdout (see :func:`jsonable`)."""
    print(json.dumps(jsonable(value)))


@contextmanager
def notes_to_stderr(on: bool = True) -> Iterator[None]:
    """While ``on`` (a ``--json`` run): what would go to stdout (notes, tables) goes to stderr,
    so stdout holds only the JSON value printed after it."""
    if not on:
        yield
        return
    with redirect_stdout(sys.stderr):
        yield


def progress() -> Progress:
    """A progress bar on stderr (rich), as every long command shows."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn  # deferred: not for `--help`

    return Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                    TimeElapsedColumn(), console=err, transient=False)


# ---------------------------------------------------------------------------- checks at the boundary
def check_count(value: int | None, option: str, *, minimum: int = 1, what: str = "") -> int | None:
    """``value`` of a count option (``--resamples``, ``--limit``, ...) if it is at least
    ``minimum`` (``None`` passes: the option was not given), else a ConfigError naming the option."""
    if value is not None and value < minimum:
        floor = "a positive number" if minimum == 1 else f"{minimum} or more"
        raise ConfigError(f"{option} {value}: give {floor}{' ' + what if what else ''}")
    return value


def check_output_parent(path: Path, option: str) -> Path:
    """``path`` (a file to write, e.g. ``results -o``) if its folder exists, else a ConfigError
    saying which folder is missing (it is not created: a typo should not make folders); a folder
    at ``path`` itself is a ConfigError too."""
    parent = path.expanduser().parent
    if path.expanduser().is_dir():
        raise ConfigError(f"{option} {path}: is a folder, not a file; give a file name (e.g. {path}/results.csv)")
    if parent.is_dir():
        return path
    blocker = next((p for p in [parent, *parent.parents] if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise ConfigError(f"{option} {path}: {blocker} is a regular file, not a folder; choose another path")
    raise ConfigError(f"{option} {path}: folder {parent} does not exist; create it first (mkdir -p {parent}) "
                      "or choose another path")


def output_folder(path: Path, option: str = "-o") -> Path:
    """``path`` (an output folder, e.g. a report's ``-o``) created now, before any work: a file
    there is a ConfigError; an unwritable place is an OSError that ``main()`` prints in one line."""
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{option} {path}: is a file; give a folder (-o DIR)")
    path.mkdir(parents=True, exist_ok=True)
    return path


# ---------------------------------------------------------------------------- old spellings
#: option spellings of earlier versions -> (the spelling now, what it names): one spelling per
#: concept in every command (ID and shifted settings --x/--y, bootstrap counts --resamples, files
#: written -o/--output, -m only for --model); main() answers an old one with one line. A third
#: item limits the entry to those commands (``-m`` is an old spelling only in ``carve``)
OLD_SPELLINGS: dict[str, tuple] = {
    "--id": ("--x", "the in-distribution setting"),
    "--ood": ("--y", "the shifted setting"),
    "--shift": ("--y", "the shifted setting"),
    "--natural": ("--y", "the shifted setting"),
    "--n-boot": ("--resamples", "the bootstrap resamples"),
    "--export": ("--output", "the file written; -o for short"),
    "--csv": ("--output", "the file written; -o for short"),
    "-m": ("--manifest", "the manifest; -m is --model", ("carve",)),
}


def old_spelling(argv: list[str] | tuple[str, ...], options_of) -> str | None:
    """The one line for the first old option spelling (:data:`OLD_SPELLINGS`) in ``argv`` that
    its command does not take, e.g. ``no such option --id (it is --x now: the in-distribution
    setting)``; ``None`` if there is none. ``options_of(argv)`` gives the option names of the
    command ``argv`` runs (called only when an old spelling is there)."""
    args = list(argv[:argv.index("--")] if "--" in argv else argv)
    used = [a.partition("=")[0] for a in args if a.partition("=")[0] in OLD_SPELLINGS]
    if not used:
        return None
    known = options_of(args)
    command = next((a for a in args if not a.startswith("-")), "")
    for name in used:
        new, what, *only = OLD_SPELLINGS[name]
        if name not in known and (not only or command in only[0]):
            return (f"no such option {name} (it is {new} now: {what}; see shiftbench {command} --help)"
                    if command else f"no such option {name} (it is {new} now: {what})")
    return None


# ---------------------------------------------------------------------------- one-line errors
#: the options whose values are written to, named when an OSError carries no file name
OUTPUT_OPTIONS = ("--store", "--output", "-o", "--workspace")


def output_options(argv: list[str]) -> list[str]:
    """The ``--store X`` / ``-o X`` / ... pairs given in ``argv``, as typed."""
    found = []
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if name in OUTPUT_OPTIONS:
            if eq:
                found.append(f"{name} {value}")
            elif i + 1 < len(argv):
                found.append(f"{name} {argv[i + 1]}")
    return found


def _first_file_above(path: Path) -> Path | None:
    """The nearest existing ancestor of ``path`` that is not a folder (the cause of ENOTDIR)."""
    for p in [path, *path.parents]:
        try:
            if p.exists():
                return None if p.is_dir() else p
        except OSError:
            continue
    return None


def _missing_folder(path: Path) -> Path | None:
    """The topmost missing folder above ``path`` (``None``: its folder exists)."""
    missing = None
    for p in path.parents:
        if p.is_dir():
            break
        missing = p
    return missing


def os_error_message(exc: OSError, outputs: list[str] | tuple[str, ...] = ()) -> str:
    """One line for an OSError: the path (``exc.filename``), what went wrong, and the fix.

    ``outputs`` (``["--store DIR"]``) are named instead when the error has no file name (a write
    that fills the disk reports none)."""
    code, name = exc.errno, exc.filename
    path = None if name is None else Path(os.fsdecode(name))
    where = str(path) if path is not None else ("writing " + ", ".join(outputs) if outputs else "")
    reason = exc.strerror or str(exc) or type(exc).__name__
    choose = "choose another " + ("/".join(o.split()[0] for o in outputs) if outputs else "path")
    if code in (errno.EACCES, errno.EPERM):
        fix = f"permission denied; check the permissions of it and its folder, or {choose}"
    elif code == errno.EROFS:
        fix = f"read-only file system; {choose} on a writable disk"
    elif code in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
        fix = f"{reason[:1].lower() + reason[1:]}; free some space on that disk or {choose} on a disk with room"
    elif code == errno.ENOTDIR:
        blocker = _first_file_above(path) if path is not None else None
        fix = (f"{blocker} is a regular file, not a folder" if blocker is not None else "a parent is a regular "
               "file, not a folder") + f"; {choose} (or move that file away)"
    elif code == errno.ENOENT:
        missing = _missing_folder(path) if path is not None else None
        fix = (f"folder {missing} does not exist; create it (mkdir -p {path.parent}) or {choose}"
               if missing is not None else "no such file or folder; check the path")
    elif code == errno.EISDIR:
        fix = "is a folder, not a file; give a file name"
    elif code == errno.EEXIST:    # mkdir(exist_ok=True) onto a file
        fix = ("is a regular file, not a folder" if path is not None and path.exists() and not path.is_dir()
               else "already exists") + f"; {choose} (or move it away)"
    elif code in (errno.EMFILE, errno.ENFILE):
        fix = "too many open files; raise the limit (ulimit -n) or use fewer --workers"
    elif code == errno.ENAMETOOLONG:
        fix = "file name too long; choose a shorter path"
    elif code == errno.EIO:
        fix = "input/output error; check the disk (or network file system) it is on"
    elif isinstance(exc, ConnectionError):
        fix = f"{reason}; check the address and that the service there is running"
    else:
        fix = reason
    return f"{where}: {fix}" if where else fix


def one_line(text: object) -> str:
    """``text`` on one line: line breaks (and runs of spaces) become single spaces."""
    return " ".join(str(text).split())


def error_message(exc: BaseException, argv: list[str] | tuple[str, ...] = ()) -> str:
    """The one line the CLI prints for ``exc`` (without the ``error: `` prefix): a
    ShiftbenchError's own message, an OSError's path and fix (:func:`os_error_message`), a missing
    optional package as the extra that brings it (``shiftbench eval needs PyTorch: pip install
    'shiftbench[eval]'``), and for anything unexpected its type and message with a pointer to
    ``--debug``."""
    command = next((a for a in argv if not a.startswith("-")), "")
    missing = as_missing_extra(exc, f"shiftbench {command}".strip())
    if missing is not None:
        return one_line(missing)
    cause = getattr(exc, "cause", None)                 # a Ray task's error: the worker's exception
    if isinstance(exc, ShiftbenchError) and isinstance(cause, ShiftbenchError):
        exc = cause
    if isinstance(exc, ShiftbenchError):
        return one_line(exc)
    if isinstance(exc, OSError):
        return one_line(os_error_message(exc, output_options(list(argv))))
    if isinstance(exc, MemoryError):
        return ("out of memory; use a smaller --batch-size or --limit, or --max-memory to split the models into "
                "passes")
    module = type(exc).__module__.split(".")[0]
    if module == "duckdb":                              # the results store's database (not an OSError)
        return one_line(f"results store: {exc}; check that --store is a folder you can write to, on a disk with "
                        "room (run with --debug for the traceback)")
    text = one_line(exc)
    return f"unexpected {type(exc).__name__}{': ' + text if text else ''} (run with --debug for the traceback)"
