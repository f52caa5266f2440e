"""The small error hierarchy of shiftbench.

Every message names the thing that is wrong (file, model, setting) and what to do about it.
The CLI prints these in one line and exits non-zero; ``--debug`` shows the traceback.
"""
from __future__ import annotations

import difflib
from collections.abc import Iterable


class ShiftbenchError(Exception):
    """Base class of every error shiftbench raises on purpose."""


class ConfigError(ShiftbenchError, ValueError):
    """A setting, option or name the user gave is unknown or inconsistent."""


class DataError(ShiftbenchError, ValueError):
    """Input data (a table, a file, a dataset layout) is missing or malformed."""


class ModelError(ShiftbenchError):
    """A model cannot be found, built or run."""


class StoreError(ShiftbenchError):
    """The results store is unreadable, corrupted or locked."""


def closest(name: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """The ``n`` names in ``choices`` closest to ``name`` (difflib ratio, then substring matches)."""
    choices = list(choices)
    found = difflib.get_close_matches(name, choices, n=n, cutoff=0.5)
    if len(found) < n:
        low = name.lower()
        found += [c for c in choices if low in c.lower() and c not in found][: n - len(found)]
    return found


def did_you_mean(kind: str, name: str, choices: Iterable[str], hint: str = "") -> str:
    """One-line message for an unknown ``kind`` called ``name``, with the closest valid names."""
    near = closest(name, choices)
    msg = f"unknown {kind} {name!r}"
    if near:
        msg += "; did you mean " + ", ".join(repr(c) for c in near) + "?"
    if hint:
        msg += f" ({hint})"
    return msg
