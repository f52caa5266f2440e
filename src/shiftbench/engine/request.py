"""One evaluation, as data: which models on which settings, read from where, written to which store.

An :class:`EvalRequest` is built (and validated) once where user input enters — the public
:func:`shiftbench.evaluate`, the ``shiftbench eval`` command — and then handed unchanged to an
executor (:class:`~shiftbench.engine.executor.LocalExecutor`,
:class:`~shiftbench.engine.ray_executor.RayExecutor`), which owns the loop over
(model × dataset group). Settings are resolved into :class:`~shiftbench.settings.Setting`
objects here, once; a Ray task receives a slice of the request (:meth:`EvalRequest.tasks`: the
settings of one dataset, one shard of its chunks, every model), not a fan-out of keyword arguments.

>>> req = EvalRequest.build("python:mod:fn", ["val", "val-on-imagenet-a-classes", "imagenet-r"])
>>> [[s.name for s in g] for g in req.groups()]
[['val', 'val-on-imagenet-a-classes'], ['imagenet-r']]
>>> [(t.setting_names, t.shard) for t in req.tasks(shards=2)][:2]
[(['val', 'val-on-imagenet-a-classes'], (0, 2)), (['val', 'val-on-imagenet-a-classes'], (1, 2))]
>>> EvalRequest.build("python:mod:fn", "val", memory_limit="1.5GiB").memory_limit
1610612736
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from shiftbench.errors import ConfigError
from shiftbench.models.base import LoadedModel
from shiftbench.settings import Setting, check_convention, get_setting
from shiftbench.store.store import DEFAULT_STORE, Store


@dataclass(frozen=True)
class EvalRequest:
    """Models × settings to evaluate and how (the arguments of :func:`shiftbench.evaluate`).

    ``models`` are specs (``timm:resnet50.a1_in1k``, ``python:mod:fn``, ...) or
    :class:`~shiftbench.models.base.LoadedModel` objects; ``settings`` are resolved
    :class:`~shiftbench.settings.Setting` objects in the order asked for; ``store`` is the store
    directory (a path every executor's workers can reach); ``device=None`` picks ``cuda`` where
    present on the machine that runs the pass. Build one with :meth:`build`, which validates.
    """

    models: tuple[Any, ...]
    settings: tuple[Setting, ...]
    data_root: Path = Path(".")
    data_dirs: Mapping[str, str] | None = None
    store: Path = Path(DEFAULT_STORE)
    batch_size: int = 64
    workers: int = 1
    limit: int | None = None
    keep_logits: bool = False
    force: bool = False
    device: str | None = None
    convention: str = "restricted"
    chunk_size: int = 1024
    partial: bool = False
    arch: str | None = None
    model_type: str | None = None
    seed: int = 0
    #: bytes a pass may hold on its device (the weights of the models streamed together, plus one
    #: decoded and one shifted batch per pixel pipeline); ``None``: every model in one pass
    memory_limit: int | None = None
    #: ``(index, count)``: compute only the chunks ``c`` with ``c % count == index`` (a Ray task's
    #: shard of each dataset); a key is finished by whichever shard completes it last (shards
    #: running at once must not ``force``: each would forget the others' parts)
    shard: tuple[int, int] | None = None

    def __post_init__(self) -> None:

        if not self.models:
            raise ConfigError("no model given; pass --model SPEC (shiftbench.evaluate(model, ...))")
        for m in self.models:
            if not isinstance(m, (str, LoadedModel)):
                raise ConfigError(f"model must be a spec string or a LoadedModel, got {type(m).__name__}")
        if not self.settings:
            raise ConfigError("no setting given; pass --setting NAME (shiftbench list settings)")
        if not all(isinstance(s, Setting) for s in self.settings):
            raise ConfigError("EvalRequest.settings must be resolved Setting objects; use EvalRequest.build")
        check_convention(self.convention)
        if self.batch_size < 1 or self.chunk_size < 1:
            raise ConfigError(f"batch_size={self.batch_size} and chunk_size={self.chunk_size} must be at least 1")
        if self.workers < 0:
            raise ConfigError(f"workers={self.workers} must be 0 (decode in the main process) or more")
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"limit={self.limit} must be at least 1")
        if self.shard is not None and not (len(self.shard) == 2 and 0 <= self.shard[0] < self.shard[1]):
            raise ConfigError(f"shard={self.shard} must be (index, count) with 0 <= index < count")
        if self.memory_limit is not None and self.memory_limit < 1:
            raise ConfigError(f"memory_limit={self.memory_limit} must be a positive size, e.g. 4GiB")

    @classmethod
    def build(cls, models: Any, settings: str | Setting | Sequence[str | Setting], *,
              data_root: str | Path = ".", data_dirs: Mapping[str, str | Path] | None = None,
              store: str | Path | Store = DEFAULT_STORE, **options: Any) -> EvalRequest:
        """A validated request from user input: one model or a list, setting names (resolved here,
        with a did-you-mean error for unknown ones) and the options of :func:`shiftbench.evaluate`."""
        unknown = set(options) - {f for f in cls.__dataclass_fields__ if f not in ("models", "settings")}
        if unknown:
            raise ConfigError(f"unknown evaluation option(s) {sorted(unknown)}")
        model_list = (models,) if isinstance(models, str) or not isinstance(models, Sequence) else tuple(models)
        names = [settings] if isinstance(settings, (str, Setting)) else list(settings)
        resolved = tuple(s if isinstance(s, Setting) else get_setting(s) for s in names)
        root = store.root if isinstance(store, Store) else Path(store)
        dirs = None if data_dirs is None else {str(k): str(v) for k, v in data_dirs.items()}
        if options.get("memory_limit") is not None:
            options["memory_limit"] = parse_size(options["memory_limit"])
        return cls(models=model_list, settings=resolved, data_root=Path(data_root), data_dirs=dirs, store=root,
                   **options)

    # ------------------------------------------------------------------ what executors loop over
    @property
    def setting_names(self) -> list[str]:
        return [s.name for s in self.settings]

    def groups(self) -> list[tuple[Setting, ...]]:
        """The settings grouped by dataset (settings of one dataset share one forward pass), in the
        order the datasets are first asked for."""
        groups: dict[Any, list[Setting]] = {}
        for s in self.settings:
            groups.setdefault(s.dataset_key, []).append(s)
        return [tuple(g) for g in groups.values()]

    def tasks(self, shards: int = 1) -> Iterator[EvalRequest]:
        """The unit a distributed executor schedules: one dataset group × one of ``shards``
        interleaved shards of its chunks, with every model (one decode and one shift per image
        serves them all)."""
        for group in self.groups():
            for i in range(shards):
                yield replace(self, settings=group, shard=None if shards == 1 else (i, shards))

    def open_store(self) -> Store:
        return Store(self.store)


def parse_size(value: int | str) -> int:
    """Bytes from ``4GiB``, ``512MB``, ``1.5G`` or a plain number (pydantic's ``ByteSize``)."""
    from pydantic import ByteSize, TypeAdapter, ValidationError  # deferred: loads pydantic

    try:
        return int(TypeAdapter(ByteSize).validate_python(value))
    except ValidationError:
        raise ConfigError(f"memory limit {value!r} is not a size; write e.g. 4GiB, 512MB or 2000000000") from None
