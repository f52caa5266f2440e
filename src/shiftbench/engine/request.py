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

Objects enter here too (DESIGN: "Inputs take the forms users already hold"): an ``nn.Module`` or
a callable becomes a :class:`~shiftbench.models.base.LoadedModel` (:func:`~shiftbench.models.objects.as_model`:
named, its preprocessing resolved, fingerprinted from its weights), a hand-built ``LoadedModel`` is
made whole (:func:`~shiftbench.models.objects.prepare_loaded`), and a torch ``Dataset`` or
``DataLoader`` is read once into a :class:`~shiftbench.datasets.torch_data.TorchImageDataset`
whose identity is its content; its setting has the dataset ``torch`` and that content hash, and
the data itself travels in :attr:`EvalRequest.data`.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from shiftbench.datasets.torch_data import ACCEPTED_DATA, TORCH_DATASET, TorchImageDataset, from_torch, is_torch_data
from shiftbench.datasets.torch_data import check_name as check_data_name
from shiftbench.datasets.torch_data import default_name as default_data_name
from shiftbench.errors import ConfigError
from shiftbench.models.base import LoadedModel, Preprocessing
from shiftbench.models.objects import ACCEPTED_MODELS, as_model, prepare_loaded
from shiftbench.settings import _full as _full_view  # the view of a setting in a dataset's own label space
from shiftbench.settings import (
    Setting,
    canonical_setting_name,
    check_convention,
    classmap_setting,
    get_setting,
    shifted_setting,
)
from shiftbench.store.fs import is_uri
from shiftbench.store.store import DEFAULT_STORE, Store


@dataclass(frozen=True)
class EvalRequest:
    """Models × settings to evaluate and how (the arguments of :func:`shiftbench.evaluate`).

    ``models`` are specs (``timm:resnet50.a1_in1k``, ``python:mod:fn``, ...) or
    :class:`~shiftbench.models.base.LoadedModel` objects; ``settings`` are resolved
    :class:`~shiftbench.settings.Setting` objects in the order asked for; ``store`` is the store
    directory (a path every executor's workers can reach; ``None``: nothing written, see
    :mod:`shiftbench.engine.memory_store`); ``device=None`` picks ``cuda`` where present on the
    machine that runs the pass; ``data`` holds in-memory datasets by content hash (the
    ``torch`` settings' data). Build one with :meth:`build`, which validates and converts objects.
    """

    models: tuple[Any, ...]
    settings: tuple[Setting, ...]
    data_root: Path = Path(".")
    data_dirs: Mapping[str, str] | None = None
    store: Path | str | None = Path(DEFAULT_STORE)
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
    #: evaluate ``python:`` specs at this many pixels (shorter side resized to it, then a centre
    #: crop of it; ``shiftbench eval --input-size``); other specs keep their own preprocessing
    input_size: int | None = None
    #: in-memory datasets (torch data) by content hash: what the ``torch`` settings evaluate
    data: Mapping[str, TorchImageDataset] | None = None
    #: keyword arguments for the fsspec filesystem of a store URI (``store="s3://bucket/prefix"``):
    #: endpoint, credentials... where the environment does not say them (:class:`Store`)
    storage_options: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:

        if not self.models:
            raise ConfigError("no model given; pass --model SPEC (shiftbench.evaluate(model, ...))")
        for m in self.models:
            if not isinstance(m, (str, LoadedModel)):
                raise ConfigError(f"model of type {type(m).__name__} is not accepted here; EvalRequest.build takes "
                                  f"{ACCEPTED_MODELS}")
        # a hand-built LoadedModel is made whole here, whichever way the request was built (idempotent)
        object.__setattr__(self, "models", tuple(m if isinstance(m, str) else prepare_loaded(m) for m in self.models))
        if not self.settings:
            raise ConfigError("no setting given; pass --setting NAME (shiftbench list settings)")
        if not all(isinstance(s, Setting) for s in self.settings):
            raise ConfigError("EvalRequest.settings must be resolved Setting objects; use EvalRequest.build")
        for s in self.settings:
            if s.dataset == TORCH_DATASET and dict(s.dataset_args).get("content") not in (self.data or {}):
                raise ConfigError(f"setting {s.name!r} evaluates in-memory data the request does not hold; "
                                  "build the request with EvalRequest.build(models, {name: dataset})")
        if self.input_size is not None and (isinstance(self.input_size, bool) or not isinstance(self.input_size, int)
                                            or self.input_size < 1):
            raise ConfigError(f"input_size={self.input_size!r} must be a positive number of pixels, e.g. 64")
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
    def build(cls, models: Any, settings: Any, *,
              data_root: str | Path = ".", data_dirs: Mapping[str, str | Path] | None = None,
              store: str | Path | Store | None = DEFAULT_STORE, name: str | None = None,
              preprocessing: Preprocessing | None = None, mean: Any = None, std: Any = None,
              shifts: str | Sequence[str] | None = None, **options: Any) -> EvalRequest:
        """A validated request from user input: models (specs, objects, a dict ``{name: model}``
        or a list), settings (names, resolved here with a did-you-mean error for unknown ones,
        torch ``Dataset``/``DataLoader`` objects, a dict ``{name: dataset}`` or a list) and the
        options of :func:`shiftbench.evaluate`. ``name``, ``preprocessing``, ``mean``, ``std`` and
        ``input_size`` apply to model objects (``input_size`` to ``python:`` specs too);
        ``shifts`` adds ``<setting>+<shift>`` for every setting without a shift."""
        unknown = set(options) - {f for f in cls.__dataclass_fields__ if f not in ("models", "settings", "data")}
        if unknown:
            raise ConfigError(f"unknown evaluation option(s) {sorted(unknown)}")
        model_list = _models(models, name=name, preprocessing=preprocessing, mean=mean, std=std,
                             input_size=options.get("input_size"), model_type=options.get("model_type"))
        resolved, data = _settings(settings, shifts, data_root)
        if isinstance(store, Store):
            root: Path | str | None = store.root
            if store.storage_options:
                options.setdefault("storage_options", store.storage_options)
        else:
            root = None if store is None else store if is_uri(store) else Path(store)
        dirs = None if data_dirs is None else {str(k): str(v) for k, v in data_dirs.items()}
        if options.get("memory_limit") is not None:
            options["memory_limit"] = parse_size(options["memory_limit"])
        return cls(models=model_list, settings=resolved, data_root=Path(data_root), data_dirs=dirs, store=root,
                   data=data or None, **options)

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

    def open_store(self) -> Any:
        """The request's :class:`Store`, or a :class:`~shiftbench.engine.memory_store.MemoryStore`
        for ``store=None`` (nothing written)."""
        if self.store is None:
            from shiftbench.engine.memory_store import MemoryStore  # deferred: loads pyarrow

            return MemoryStore()
        return Store(self.store, self.storage_options)


# ---------------------------------------------------------------------------- objects in
def _models(models: Any, *, name: str | None, preprocessing: Any, mean: Any, std: Any, input_size: int | None,
            model_type: str | None) -> tuple[Any, ...]:
    """Specs kept as they are (loaded by the runner), LoadedModels made whole, objects converted
    (:func:`~shiftbench.models.objects.as_model`); names of the converted objects unique."""
    if isinstance(models, Mapping):
        items: list[tuple[str | None, Any]] = list(models.items())
    elif isinstance(models, str) or not isinstance(models, Sequence):
        items = [(None, models)]
    else:
        items = [(None, m) for m in models]
    for key, m in items:
        if key is not None and isinstance(m, str):
            raise ConfigError(f"model {key!r}: a dict names model objects; a spec string ({m!r}) carries its own "
                              "name: put it in the list as it is")
        if isinstance(m, Mapping) or is_torch_data(m):
            raise ConfigError(f"model of type {type(m).__name__} is not accepted; give {ACCEPTED_MODELS}")
    objects = [m for _, m in items if not isinstance(m, str | LoadedModel)]
    if name is not None and (len(objects) != 1 or isinstance(models, Mapping)):
        raise ConfigError(f"name={name!r} names one model object, but {len(objects)} were given"
                          + (" in a dict (its keys are the names)" if isinstance(models, Mapping) else "")
                          + "; name several with a dict {name: model}")
    given = {k: v for k, v in (("preprocessing", preprocessing), ("mean", mean), ("std", std)) if v is not None}
    if given and not objects:
        raise ConfigError(f"{', '.join(f'{k}=' for k in given)} apply to model objects (nn.Module, callables); a spec "
                          "carries its own preprocessing (a python: builder declares it with a preprocessing attribute)")
    if input_size is not None and not objects and not any(isinstance(m, str) and m.strip().startswith("python:")
                                                          for _, m in items):
        raise ConfigError(f"input size {input_size} (--input-size, input_size=) applies to python: specs and model "
                          "objects (nn.Module, callables); the models given carry their own preprocessing")
    out: list[Any] = []
    for key, m in items:
        if isinstance(m, str):
            out.append(m)
        elif isinstance(m, LoadedModel):
            out.append(as_model(m, name=key))
        else:
            out.append(as_model(m, name=key if key is not None else name, preprocessing=preprocessing,
                                input_size=input_size, mean=mean, std=std, model_type=model_type))
    names = [m.name for m in out if isinstance(m, LoadedModel)]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"model name {twice[0]!r} is given to more than one model object; results are stored by "
                          f"model name: name them with a dict, evaluate({{'{twice[0]}-a': m1, '{twice[0]}-b': m2}}, ...)")
    return tuple(out)


def _settings(settings: Any, shifts: str | Sequence[str] | None,
              data_root: str | Path) -> tuple[tuple[Setting, ...], dict[str, TorchImageDataset]]:
    """Resolved settings (in the order given, each followed by its ``shifts``) and the in-memory
    datasets they evaluate, by content hash. A string may name in-memory data given in the same
    call (``"my-val+fog.3"`` beside ``{"my-val": ds}``)."""
    if isinstance(settings, str | Setting | Mapping) or is_torch_data(settings) or not isinstance(settings, Iterable):
        entries = [settings]
    else:
        entries = list(settings)
    named: dict[str, Setting] = {}
    data: dict[str, TorchImageDataset] = {}
    order: list[Setting | str] = []
    for entry in entries:
        if isinstance(entry, str | Setting):
            order.append(entry)
            continue
        if isinstance(entry, Mapping):
            pairs = list(entry.items())
        elif is_torch_data(entry):
            pairs = [(default_data_name(entry), entry)]
        else:
            raise ConfigError(f"data of type {type(entry).__name__} is not accepted; give {ACCEPTED_DATA}")
        for key, value in pairs:
            key = check_data_name(key)
            if not is_torch_data(value):
                raise ConfigError(f"data {key!r} is a {type(value).__name__}; a dict maps names to torch Datasets or "
                                  "DataLoaders (setting names go in the list as they are)")
            if key in named:
                raise ConfigError(f"two datasets are named {key!r}; name them with a dict {{'{key}-a': ds1, "
                                  f"'{key}-b': ds2}}")
            if _registered(key):
                raise ConfigError(f"data name {key!r} is a registered setting; name your data with a dict, e.g. "
                                  f"{{'my-{key}': dataset}}")
            ds = from_torch(value, key)
            data.setdefault(ds.content, ds)
            named[key] = Setting(key, TORCH_DATASET, _full_view,
                                 f"in-memory data {key} ({type(value).__name__}, {len(ds)} examples)",
                                 dataset_args=(("content", ds.content),))
            order.append(named[key])
    shift_list = [shifts] if isinstance(shifts, str) else list(shifts or [])
    resolved: list[Setting] = []
    for entry in order:
        base = entry if isinstance(entry, Setting) else _resolve(entry, named, data_root)
        resolved.append(base)
        if base.shift is None:
            resolved += [shifted_setting(base, t) for t in shift_list]
    return tuple(resolved), data


def _registered(name: str) -> bool:
    try:
        get_setting(name)
    except ConfigError:
        return False
    return True


def _resolve(text: str, named: Mapping[str, Setting], data_root: str | Path) -> Setting:
    """A setting name, where the base of ``<name>+<shift>`` or ``<name>@classmap:<map>`` may be
    in-memory data given in the same call; any other name as :func:`get_setting` reads it, with
    a folder's path made canonical (``folder:val``, ``folder:./val`` and ``/abs/val/`` are one setting)."""
    if text in named:
        return named[text]
    if "@classmap:" in text:
        base, _, ref = text.rpartition("@classmap:")
        if base in named:
            return classmap_setting(named[base], ref)
    if "+" in text:
        base, _, shift_text = text.rpartition("+")
        if base in named or base.partition("@classmap:")[0] in named:
            return shifted_setting(_resolve(base, named, data_root), shift_text)
    return get_setting(canonical_setting_name(text, data_root))


def parse_size(value: int | str) -> int:
    """Bytes from ``4GiB``, ``512MB``, ``1.5G`` or a plain number (pydantic's ``ByteSize``)."""
    from pydantic import ByteSize, TypeAdapter, ValidationError  # deferred: loads pydantic

    try:
        return int(TypeAdapter(ByteSize).validate_python(value))
    except ValidationError:
        raise ConfigError(f"memory limit {value!r} is not a size; write e.g. 4GiB, 512MB or 2000000000") from None
