"""The one shape of a study: a config dataclass, ``run(config, store) -> StudyResult``, and a
registry of study kinds.

A *study* runs models (through :func:`shiftbench.evaluate`, like any user) or samples data to
answer one question -- a resolution sweep, an object-compositing study, a fine-tuning
trajectory, attribute-controlled splits, a dataset replication -- and keeps its answer as one
long-form table in the results store (``Store.write_study(kind, name, frame, meta)``, read back
with ``Store.read_study`` / ``Store.read_studies``). Each kind is a :class:`Study` subclass
registered with :func:`register_study`; its ``section`` names the report section
(:mod:`shiftbench.report`) that reads the kind back from the store::

    @register_study
    class ResolutionStudy(Study):
        kind, config_type, section = "resolution", ResolutionConfig, "resolution"

        def run(self, config, store=None) -> StudyResult: ...

    result = run_study(ResolutionConfig("timm:resnet50", "val"), store="shiftbench-results")
    result.frame, result.attrs, result.name

:func:`run_study` picks the study from the config's type; ``store=None`` runs a study without
writing it (where the study allows that: carving splits, sampling a replication).
"""
from __future__ import annotations

import hashlib
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd

from shiftbench.errors import ConfigError, did_you_mean
from shiftbench.store.store import DEFAULT_STORE, Store

__all__ = ["StudyResult", "Study", "register_study", "get_study", "list_studies", "run_study", "as_store",
           "study_name", "stored_study_name"]

#: At most this many characters of a derived study name are readable text (then ``-`` and its hash).
STUDY_NAME_MAX = 96


@dataclass
class StudyResult:
    """What a study produced: the long-form table ``frame`` stored as study ``kind`` / ``name``,
    its metadata ``attrs`` (stored beside it as JSON), and ``value``, the study's own result
    object where it has one (an :class:`~shiftbench.datasets.attributes.AttributeSplits`, a
    :class:`~shiftbench.datasets.replication.Replication`, a
    :class:`~shiftbench.studies.trajectory.Trajectory`); ``path`` is where it was written."""

    kind: str
    name: str
    frame: pd.DataFrame
    attrs: dict[str, Any] = field(default_factory=dict)
    value: Any = None
    path: Path | None = None

    def write(self, store: str | Path | Store | None = None) -> Path:
        """Store (replace, atomically) ``frame`` and ``attrs`` through :meth:`Store.write_study`."""
        self.path = as_store(store).write_study(self.kind, self.name, self.frame, self.attrs)
        return self.path


class Study(ABC):
    """A kind of study: ``kind`` (the store's study kind), ``config_type`` (its config
    dataclass), ``section`` (the key of the report section that draws it) and :meth:`run`."""

    kind: ClassVar[str] = ""
    config_type: ClassVar[type] = object
    section: ClassVar[str | None] = None
    description: ClassVar[str] = ""

    @abstractmethod
    def run(self, config: Any, store: str | Path | Store | None = None) -> StudyResult:
        """Run the study described by ``config``; write its result to ``store`` (when given) and
        return it."""


_STUDIES: dict[str, type[Study]] = {}


def register_study(cls: type[Study]) -> type[Study]:
    """Class decorator: register a :class:`Study` subclass under its ``kind``."""
    if not cls.kind or not isinstance(cls.config_type, type) or cls.config_type is object:
        raise ConfigError(f"{cls.__name__}: a study needs a kind and a config dataclass (config_type)")
    _STUDIES[cls.kind] = cls
    return cls


def list_studies() -> dict[str, type[Study]]:
    """The registered study kinds (``kind -> Study subclass``), in registration order."""
    _import_studies()
    return dict(_STUDIES)


def get_study(kind: str) -> Study:
    """The study of ``kind`` (a :class:`ConfigError` with the closest kinds if there is none)."""
    _import_studies()
    if kind not in _STUDIES:
        raise ConfigError(did_you_mean("study kind", kind, _STUDIES))
    return _STUDIES[kind]()


def run_study(config: Any, store: str | Path | Store | None = None) -> StudyResult:
    """Run the study whose ``config_type`` is the type of ``config``."""
    _import_studies()
    for cls in _STUDIES.values():
        if isinstance(config, cls.config_type):
            return cls().run(config, store)
    raise ConfigError(f"run_study: {type(config).__name__} is not the config of a study; give one of "
                      + ", ".join(c.config_type.__name__ for c in _STUDIES.values()))


def _import_studies() -> None:
    """Import the study modules of this package (each registers its kind)."""
    import shiftbench.studies  # noqa: F401 - the package imports every study module


def as_store(store: str | Path | Store | None) -> Store:
    """``store`` as a :class:`Store` (``None``: the default ``shiftbench-results``)."""
    return store if isinstance(store, Store) else Store(store or DEFAULT_STORE)


def study_name(*parts: object, hashed: Sequence[object] = ()) -> str:
    """A store study name from ``parts``: a readable form (``parts`` joined by ``__``, characters
    outside ``[A-Za-z0-9._+@=-]`` become ``_``, at most :data:`STUDY_NAME_MAX` characters, no
    leading dot), then ``-`` and the first 10 hex digits of the SHA-256 of the parts themselves
    and of ``hashed`` (more of the study's identity than the readable form shows, e.g. a
    manifest's full path beside its file name). Different parts never give one name, also when
    they differ only in ``/``, ``_``, ``-``, spaces or case, or in where one part ends (DESIGN:
    "every name on disk is derived injectively"); the same parts give the same name in every
    process.

    >>> study_name("timm/resnet50.a1_in1k", "folder:/data/x")
    'timm_resnet50.a1_in1k__folder_data_x-86e4acd3cc'
    >>> study_name("m", "folder:/data_x") != study_name("m", "folder:/data/x")
    True
    """
    readable = _readable(parts)[:STUDY_NAME_MAX].rstrip("_.-") or "study"
    identity = json.dumps([str(p) for p in (*parts, *hashed)])      # ASCII, and unambiguous about part ends
    return f"{readable}-{hashlib.sha256(identity.encode()).hexdigest()[:10]}"


def _readable(parts: Sequence[object]) -> str:
    """``parts`` joined by ``__``, characters outside ``[A-Za-z0-9._+@=-]`` as ``_``, no leading
    dot: the whole study name before names carried a hash (and the readable part since)."""
    clean = [re.sub(r"[^A-Za-z0-9._+@=-]+", "_", str(p)).strip("_") for p in parts]
    return "__".join(clean).lstrip(".") or "study"


def stored_study_name(store: Store, kind: str, parts: Sequence[object], identity: Mapping[str, object],
                      hashed: Sequence[object] = ()) -> str:
    """The name to store the study ``study_name(*parts, hashed=hashed)`` of ``kind`` under in
    ``store``: that name, unless ``store`` keeps this study under the name shiftbench gave it
    before study names carried a hash (``<model>__<setting>``, no hash) and that study's recorded
    metadata (``Store.study_meta``) holds every ``identity`` value (``model=..., setting=...``).
    A re-run in an older store then replaces its study instead of adding a second copy; an old
    study of another identity (a setting that reduced to the same old name) is never taken."""
    name = study_name(*parts, hashed=hashed)
    names = set(store.study_names(kind))
    old = _readable(parts)
    if name not in names and old in names and identity:
        meta = store.study_meta(kind, old)
        if all(k in meta and meta[k] == v for k, v in identity.items()):
            return old
    return name
