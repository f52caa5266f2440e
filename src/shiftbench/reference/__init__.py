"""Published testbeds that ship with shiftbench, and :func:`load_testbed`.

``imagenet-reference``: 338 models on 213 settings (Taori et al. 2020, MIT licence).
``timm-reference``: timm's published results for 1,556 (model, resolution) rows (Apache 2.0).
Both are read from package data; nothing is downloaded.
"""
from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from shiftbench.errors import ConfigError, did_you_mean
from shiftbench.testbed import Testbed

_REGISTRY: dict[str, tuple[Callable[[], Testbed], str]] = {}


def register_testbed(name: str, description: str) -> Callable[[Callable[[], Testbed]], Callable[[], Testbed]]:
    """Decorator: register a zero-argument builder of a named reference testbed."""
    def wrap(fn: Callable[[], Testbed]) -> Callable[[], Testbed]:
        _REGISTRY[name] = (fn, description)
        return fn
    return wrap


_NOTES: dict[str, list[str]] = {}


def register_data_note(name: str, note: str) -> None:
    """Attach a note about the data of reference testbed ``name`` (what was corrected, and why)."""
    _NOTES.setdefault(name, []).append(note)


def data_notes(name: str) -> list[str]:
    """The data notes of a reference testbed, or of each part of a merged ``a+b`` name."""
    return [n for part in str(name).split("+") for n in _NOTES.get(part, [])]


def list_testbeds() -> dict[str, str]:
    """Names of the shipped testbeds and a one-line description of each."""
    return {name: desc for name, (_, desc) in _REGISTRY.items()}


@lru_cache(maxsize=None)
def _build(name: str) -> Testbed:
    return _REGISTRY[name][0]()


def load_testbed(name_or_path: str | Path | Testbed) -> Testbed:
    """A reference testbed by name (``imagenet-reference``, ``timm-reference``), or a table file.

    Several names joined by ``+`` are merged, e.g. ``"imagenet-reference+timm-reference"``.
    """
    if isinstance(name_or_path, Testbed):
        return name_or_path
    text = str(name_or_path)
    if text in _REGISTRY:
        tb = _build(text)
        return Testbed(tb.accuracies, tb.sizes, tb.metadata, name=tb.name, source=tb.source)
    if "+" in text and all(part in _REGISTRY for part in text.split("+")):
        parts = [load_testbed(p) for p in text.split("+")]
        merged = parts[0]
        for p in parts[1:]:
            merged = merged.merge(p)
        return merged
    path = Path(text)
    if path.suffix.lower() in (".csv", ".parquet", ".pq") or path.exists():
        return Testbed.read(path)
    raise ConfigError(did_you_mean("testbed", text, list(_REGISTRY),
                                   "give a reference name or a path to a .csv/.parquet table"))


def data_path(*parts: str) -> Path:
    """Path of a package data file under ``shiftbench/data``."""
    return Path(__file__).resolve().parent.parent.joinpath("data", *parts)


from shiftbench.reference import imagenet as _imagenet  # noqa: E402,F401  (registers)
from shiftbench.reference import timm as _timm  # noqa: E402,F401  (registers)

__all__ = ["load_testbed", "list_testbeds", "register_testbed"]
