"""Published testbeds that ship with shiftbench, and :func:`load_testbed`.

``imagenet-reference``: 338 models on 213 settings (Taori et al. 2020, MIT licence).
``timm-reference``: timm's published results for 1,556 (model, resolution) rows (Apache 2.0).
Both are read from package data; nothing is downloaded.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
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


from shiftbench.setting_names import SETTING_ALIASES  # noqa: E402  (re-exported; stdlib-only for the CLI)


def load_testbed(name_or_path: str | Path | Testbed | Sequence[str | Path | Testbed], *,
                 store: str | Path | None = None, on_conflict: str = "error",
                 fractions: bool | None = None) -> Testbed:
    """A testbed: a reference by name, a table file, a results store, or several of them merged.

    ``name_or_path`` is a reference name (``imagenet-reference``, ``timm-reference``), a
    ``.csv``/``.parquet`` table (:meth:`Testbed.read`), a results store directory
    (:meth:`Testbed.from_store`), a :class:`Testbed`, several of these joined by ``+``
    (``"imagenet-reference+my_results.csv"``), or a list of them. Parts are merged left to
    right (:meth:`Testbed.merge`: cells equal to the precision written, example counts a user
    table lacks taken from the reference, alias spellings of settings renamed; all said in
    ``notes``); ``store`` adds a results store's finished evaluations last. The models of the
    parts that are not shipped references are listed in ``added`` (what the report highlights).

    Accuracies are percentages: a table file whose accuracies all lie in [0, 1] is refused as
    fractions unless ``fractions`` says otherwise (``True``: its accuracies are fractions,
    multiplied by 100; ``False``: they are percentages, even below 1%). ``fractions`` applies to
    the table files only (references and stores hold percentages); ``True`` with no table file
    is a ConfigError.

    >>> tb = load_testbed("imagenet-reference")
    >>> len(tb), tb.model_types["resnet50"]
    (338, 'STANDARD')
    """
    if isinstance(name_or_path, (list, tuple)):
        parts: list[str | Path | Testbed] = list(name_or_path)
    else:
        parts = [name_or_path]
    if not parts and store is None:
        raise ConfigError("no testbed given; name a reference testbed, a table file or a results store")
    read: list[Path] = []
    loaded = [tb for part in parts for tb in _load_parts(part, fractions, read)]
    if fractions and not read:
        raise ConfigError("fractions=True (--fractions) converts the accuracies of table files, and none was given "
                          f"({', '.join(map(str, parts)) or 'a store only'}); drop it")
    if store is not None:        # read as a store even before it holds results (a one-line error then)
        loaded.append(_added(Testbed.from_store(store, name=Path(store).name)))
    merged = loaded[0]
    for tb in loaded[1:]:
        merged = merged.merge(tb, on_conflict=on_conflict, aliases=SETTING_ALIASES)
    return merged


def _load_parts(spec: str | Path | Testbed, fractions: bool | None = None,
                read: list[Path] | None = None) -> list[Testbed]:
    """The testbeds ``spec`` names; the table files read are appended to ``read``."""
    read = [] if read is None else read
    if isinstance(spec, Testbed):
        return [spec]
    text = str(spec)
    if text in _REGISTRY:
        tb = _build(text)
        return [Testbed(tb.accuracies, tb.sizes, tb.metadata, name=tb.name, source=tb.source, notes=tb.notes)]
    path = Path(text)
    if path.is_dir():
        if _is_store(path):
            return [_added(Testbed.from_store(path, name=path.name))]
        raise ConfigError(f"{path}: a directory but not a results store (no finished `shiftbench eval` "
                          f"results); give a reference name, a .csv/.parquet table or a store")
    if path.exists() or (path.suffix.lower() in (".csv", ".parquet", ".pq") and "+" not in text):
        read.append(path)
        return [_added(Testbed.read(path, fractions=fractions))]
    if "+" in text:
        return [tb for part in text.split("+") for tb in _load_parts(part, fractions, read)]
    if path.suffix.lower() in (".csv", ".parquet", ".pq") or "/" in text:
        read.append(path)
        return [_added(Testbed.read(path, fractions=fractions))]
    raise ConfigError(did_you_mean("testbed", text, list(_REGISTRY),
                                   "give a reference name, a path to a .csv/.parquet table or a results store"))


def _added(tb: Testbed) -> Testbed:
    tb.added = tb.models
    return tb


def _is_store(path: Path) -> bool:
    """Whether ``path`` looks like a shiftbench results store (catalog or parts present)."""
    return any((path / name).is_dir() for name in ("done", "keys", "predictions"))


def is_reference(spec: str | Path | Testbed) -> bool:
    """Whether ``spec`` names a shipped reference testbed (every ``+`` part a reference name)."""
    if isinstance(spec, Testbed):
        return all(part in _REGISTRY for part in spec.name.split("+"))
    return all(part in _REGISTRY for part in str(spec).split("+"))


def data_path(*parts: str) -> Path:
    """Path of a package data file under ``shiftbench/data``."""
    return Path(__file__).resolve().parent.parent.joinpath("data", *parts)


from shiftbench.reference import imagenet as _imagenet  # noqa: E402,F401  (registers)
from shiftbench.reference import timm as _timm  # noqa: E402,F401  (registers)

__all__ = ["load_testbed", "list_testbeds", "register_testbed"]
