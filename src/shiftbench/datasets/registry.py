"""Named datasets: where each lives under ``--data-root`` and how to build it.

Entries are registered by the module that defines their layout, with :func:`register_dataset`
(the way timm's ``@register_model`` works); :func:`load_dataset` looks one up by name::

    >>> from shiftbench.datasets import DATASETS
    >>> DATASETS["imagenet-a"].default_dir
    'imagenet-a'

A dataset's folder is ``overrides[name]`` if given, else ``<data_root>/<default_dir>`` (the first
of ``default_dir`` and ``alt_dirs`` that exists). Custom data (``folder``, ``manifest``, ``hf``)
has no default folder and takes ``path=``.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shiftbench.datasets.base import ImageDataset
from shiftbench.errors import ConfigError, did_you_mean
from shiftbench.setting_names import (  # how a folder: setting's path is found (and named)
    is_data_uri,
    local_uri_path,
    resolve_user_path,
)

Builder = Callable[..., ImageDataset]


@dataclass(frozen=True)
class DatasetEntry:
    """One named dataset.

    ``builder(root, **kwargs)`` builds it from its folder; ``layout`` is the one-line on-disk
    layout shown by ``shiftbench list datasets`` and in errors; ``required`` names keyword
    arguments the builder needs (ImageNet-C: ``corruption``, ``severity``).
    """

    name: str
    default_dir: str | None
    builder: Builder
    layout: str
    label_space: str
    alt_dirs: tuple[str, ...] = ()
    required: tuple[str, ...] = ()


DATASETS: dict[str, DatasetEntry] = {}


def register_dataset(name: str, *, default_dir: str | None, layout: str, label_space: str,
                     alt_dirs: tuple[str, ...] = (), required: tuple[str, ...] = ()) -> Callable[[Builder], Builder]:
    """Decorator registering ``builder(root, **kwargs)`` as the dataset ``name``."""

    def deco(builder: Builder) -> Builder:
        DATASETS[name] = DatasetEntry(name, default_dir, builder, layout, label_space, alt_dirs, required)
        return builder

    return deco


def get_dataset_entry(name: str) -> DatasetEntry:
    """The entry called ``name``, else :class:`ConfigError` with the closest names."""
    if name not in DATASETS:
        raise ConfigError(did_you_mean("dataset", name, DATASETS, "`shiftbench list datasets` shows them all"))
    return DATASETS[name]


def list_datasets() -> dict[str, str]:
    """Dataset name -> ``<default dir>: <layout>``."""
    return {n: f"{e.default_dir or '<path>'}: {e.layout}" for n, e in DATASETS.items()}


def dataset_root(name: str, data_root: Path | str = ".", overrides: Mapping[str, Path | str] | None = None) -> Path:
    """The folder dataset ``name`` is read from (see the module docstring)."""
    entry = get_dataset_entry(name)
    if overrides and name in overrides:
        return Path(overrides[name]).expanduser()
    if entry.default_dir is None:
        raise ConfigError(f"dataset {name!r} has no default folder; give its path (path=...)")
    base = Path(data_root).expanduser()
    for d in (entry.default_dir, *entry.alt_dirs):
        if (base / d).exists():
            return base / d
    return base / entry.default_dir


def load_dataset(name: str, data_root: Path | str = ".", overrides: Mapping[str, Path | str] | None = None,
                 **kwargs: Any) -> ImageDataset:
    """Build the registered dataset ``name`` from ``data_root`` (or its override).

    ``overrides`` maps dataset names to folders (``--data-dir imagenet-a=/fast/imagenet-a``);
    an unknown name there is a :class:`ConfigError` too, so a typo is not silently ignored.
    ``kwargs`` go to the builder (``corruption``/``severity`` for ``imagenet-c``, ``path`` for
    ``folder``/``manifest``/``hf``, ``strict=False`` to accept a partial copy, ...).
    A missing or malformed folder raises :class:`~shiftbench.datasets.LayoutError` (a
    ``DataError``) naming the dataset, the expected layout and the first missing path.
    """
    entry = get_dataset_entry(name)
    for key in overrides or {}:
        get_dataset_entry(key)
    missing = [r for r in entry.required if kwargs.get(r) is None]
    if missing:
        raise ConfigError(f"dataset {name!r} needs {', '.join(missing)} (e.g. "
                          + ", ".join(f"{r}=..." for r in entry.required) + ")")
    if entry.default_dir is None:
        if overrides and name in overrides and "path" not in kwargs:
            kwargs["path"] = overrides[name]
        if kwargs.get("path") is None:
            raise ConfigError(f"dataset {name!r} needs path=<{entry.layout}>")
        if not is_data_uri(kwargs["path"]):  # a bucket's URI (folder:s3://...) is read as it is
            kwargs["path"] = resolve_user_path(local_uri_path(kwargs["path"]), data_root)
        return entry.builder(**kwargs)
    return entry.builder(dataset_root(name, data_root, overrides), **kwargs)
