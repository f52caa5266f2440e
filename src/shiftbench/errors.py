"""The small error hierarchy of shiftbench.

Every message names the thing that is wrong (file, model, setting) and what to do about it.
The CLI prints these in one line and exits non-zero; ``--debug`` shows the traceback.
"""
from __future__ import annotations

import difflib
import re
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


class ShiftError(ShiftbenchError, RuntimeError):
    """A synthetic shift (corruption, PGD, Noise2Net, ...) failed while the engine applied it;
    the message names the shift and the settings, the original exception is its ``__cause__``."""


def _tokens(name: str) -> list[str]:
    return [t for t in re.split(r"[-_.\s/:]+", name.lower()) if t]


def _abbreviates(token: str, words: list[str]) -> bool:
    """``token`` is a prefix of some word, or the initials of consecutive words ('mf' for
    'matched-frequency'); a one-letter token only matches a one-letter word."""
    if len(token) == 1:          # one letter abbreviates too much ('imagenet-b' is not 'imagenet-c.brightness')
        return token in words
    if any(w.startswith(token) for w in words):
        return True
    initials = "".join(w[0] for w in words)
    return len(token) > 1 and token in initials


def closest(name: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """The ``n`` names in ``choices`` closest to ``name``.

    First names equal but for case and separators (``resnet-50`` -> ``resnet50``), then names
    whose words the query abbreviates (``imagenetv2-mf`` -> ``imagenetv2-matched-frequency``;
    shorter names first), then difflib's closest matches.
    """
    choices = list(dict.fromkeys(choices))
    query = _tokens(name)
    compact = "".join(query)
    same = [c for c in choices if "".join(_tokens(c)) == compact]
    abbreviated = [c for c in choices if query and c not in same and all(_abbreviates(t, _tokens(c)) for t in query)]
    abbreviated.sort(key=lambda c: (len(_tokens(c)), len(c)))
    found = (same + abbreviated)[:n]
    for c in difflib.get_close_matches(name, choices, n=n, cutoff=0.5):
        if len(found) < n and c not in found:
            found.append(c)
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
