"""Model sources, architectures and built-in models as explicit registries, and :func:`load_model`.

Three dictionaries, each filled by a decorator in the module that defines the entry (the way
timm's ``@register_model`` works); nothing else happens at import time:

* :data:`SOURCES` - ``@register_source("timm")``: the part of a spec before the first ``:``;
* :data:`ARCH_SOURCES` / :data:`ARCHS` - what ``arch=`` of a checkpoint may name: a source that
  builds untrained architectures (``torchvision:resnet18``, ``timm:resnet18``) or a built-in
  architecture (``efficientnet-lite0``);
* :data:`BUILTINS` - named ready-to-use models (``efficientnet-lite0``), the targets of
  ``builtin:<name>`` and of a bare spec without a source.

A source returns a :class:`Built` (a network that expects *normalised* input, its preprocessing
and metadata); :func:`load_model` finishes it the same way for every source: user overrides,
:class:`~shiftbench.models.wrapper.Normalized` around the network, eval mode.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata
import os
import pickle
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from shiftbench.errors import ConfigError, did_you_mean, require
from shiftbench.model_types import MODEL_TYPES
from shiftbench.models.base import LoadedModel, Preprocessing

DEFAULT_MODEL_TYPE = "UNKNOWN"  # a user model never enters a trend fit unless typed (--model-type)
IMAGENET_LABEL_SPACE = "imagenet-1k"


@dataclass(frozen=True)
class ModelSpec:
    """A parsed model spec and the options given with it (see the package docstring)."""

    spec: str
    source: str
    target: str
    pretrained: bool = True
    model_type: str | None = None
    tags: tuple[str, ...] = ()
    name: str | None = None
    arch: str | None = None
    num_classes: int | None = None
    label_space: str | None = None
    preprocessing: Preprocessing | None = None
    #: evaluate at this many pixels (:meth:`Preprocessing.with_input_size`), the source's
    #: interpolation and mean/std kept (``shiftbench eval --input-size``)
    input_size: int | None = None


@dataclass
class Built:
    """What a source or architecture builder returns: ``net`` expects *normalised* input
    (``(x - preprocessing.mean) / preprocessing.std``); :func:`load_model` adds the wrapper."""

    net: Any  # torch.nn.Module
    preprocessing: Preprocessing
    num_classes: int
    name: str
    fingerprint: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    class_names: list[str] | None = None
    label_space: str | None = None


SourceFn = Callable[[ModelSpec], Built]
ArchFn = Callable[[str, "int | None"], Built]

#: source name -> (loader, one-line description)
SOURCES: dict[str, tuple[SourceFn, str]] = {}
#: source name -> builder of an untrained architecture from the text after ``source:``
ARCH_SOURCES: dict[str, ArchFn] = {}
#: built-in architecture name -> builder ``(num_classes) -> Built`` (untrained)
ARCHS: dict[str, Callable[["int | None"], Built]] = {}
#: built-in model name -> (loader, one-line description)
BUILTINS: dict[str, tuple[SourceFn, str]] = {}


def register_source(name: str, description: str = "") -> Callable[[SourceFn], SourceFn]:
    """Decorator: register ``fn(spec: ModelSpec) -> Built`` as the loader of ``<name>:...`` specs."""
    def wrap(fn: SourceFn) -> SourceFn:
        SOURCES[name] = (fn, description or (fn.__doc__ or "").strip().splitlines()[0])
        return fn
    return wrap


def register_arch_source(name: str) -> Callable[[ArchFn], ArchFn]:
    """Decorator: ``fn(target, num_classes) -> Built`` builds the untrained ``<name>:<target>``."""
    def wrap(fn: ArchFn) -> ArchFn:
        ARCH_SOURCES[name] = fn
        return fn
    return wrap


#: entry-point group of packages that register models or architectures on import
PLUGIN_GROUP = "shiftbench.plugins"
_plugins_loaded = False


def load_plugins() -> list[str]:
    """Import every module registered under the ``shiftbench.plugins`` entry-point group (once).

    A package makes its architectures available to specs and the CLI (``--arch NAME``) by
    registering them on import and declaring, in its ``pyproject.toml``::

        [project.entry-points."shiftbench.plugins"]
        mymodels = "mypackage.shiftbench_models"

    shiftbench's own digits zoo is such a plugin (``digits-cnn-w8``, ... from
    ``shiftbench.demo.archs``). Plugins are imported only when a name is not found, so
    ``import shiftbench`` stays light. Returns the names of the modules imported now; one that
    fails to import is a ConfigError naming it.
    """
    global _plugins_loaded
    if _plugins_loaded:
        return []
    _plugins_loaded = True

    loaded = []
    for ep in importlib.metadata.entry_points(group=PLUGIN_GROUP):
        try:
            importlib.import_module(ep.value.split(":")[0])
        except Exception as exc:  # a broken plugin must say which one
            raise ConfigError(f"shiftbench plugin {ep.name!r} ({ep.value}) failed to import: {exc}; "
                              "fix or uninstall that package") from exc
        loaded.append(ep.value)
    return loaded


def register_arch(name: str) -> Callable[[Callable[[int | None], Built]], Callable[[int | None], Built]]:
    """Decorator: ``fn(num_classes) -> Built`` builds the untrained built-in architecture ``name``."""
    def wrap(fn: Callable[[int | None], Built]) -> Callable[[int | None], Built]:
        ARCHS[name] = fn
        return fn
    return wrap


def register_builtin(name: str, description: str) -> Callable[[SourceFn], SourceFn]:
    """Decorator: register a named ready-to-use model (``builtin:<name>`` or just ``<name>``)."""
    def wrap(fn: SourceFn) -> SourceFn:
        BUILTINS[name] = (fn, description)
        return fn
    return wrap


def list_sources() -> dict[str, str]:
    """Source names (the part of a spec before ``:``) and a one-line description of each."""
    return {name: desc for name, (_, desc) in SOURCES.items()}


def list_builtins() -> dict[str, str]:
    """Built-in model names and a one-line description of each."""
    return {name: desc for name, (_, desc) in BUILTINS.items()}


def parse_spec(spec: str, **options: Any) -> ModelSpec:
    """Split ``spec`` at its first ``:`` into source and target; a spec without ``:`` names a
    built-in model. Unknown sources and built-ins are :class:`ConfigError` with the closest names."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"a model spec must be a non-empty string like 'torchvision:resnet50', got {spec!r}")
    text = spec.strip()
    source, sep, target = text.partition(":")
    if (not sep and text not in BUILTINS) or (sep and source not in SOURCES):
        load_plugins()
    if not sep:
        if text in BUILTINS:
            return ModelSpec(spec=text, source="builtin", target=text, **options)
        choices = list(BUILTINS) + [f"{s}:" for s in SOURCES]
        raise ConfigError(did_you_mean("model", text, choices,
                                       "a spec is '<source>:<name>' (sources: " + ", ".join(SOURCES) +
                                       ") or a built-in model name"))
    if source not in SOURCES:
        raise ConfigError(did_you_mean("model source", source, SOURCES,
                                       "specs look like 'torchvision:resnet50' or 'timm:resnet50.a1_in1k'"))
    if not target:
        raise ConfigError(f"model spec {text!r} names no model after '{source}:'")
    return ModelSpec(spec=text, source=source, target=target, **options)


def _check_model_type(model_type: str | None) -> None:
    if model_type is None:
        return
    if model_type not in MODEL_TYPES:
        raise ConfigError(did_you_mean("model type", model_type, MODEL_TYPES))


def load_model(spec: str, *, pretrained: bool = True, model_type: str | None = None,
               tags: tuple[str, ...] | list[str] = (), name: str | None = None,
               checkpoint: str | os.PathLike[str] | None = None, arch: str | None = None,
               num_classes: int | None = None, label_space: str | None = None,
               preprocessing: Preprocessing | None = None, input_size: int | None = None) -> LoadedModel:
    """Build the model ``spec`` names (grammar in :mod:`shiftbench.models`) as a :class:`LoadedModel`
    whose module takes [0, 1] pixels.

    ``pretrained=False`` builds random weights (nothing is downloaded); ``model_type``, ``tags``
    and ``name`` override what the source derives; ``checkpoint`` loads a weights file into the
    architecture ``spec`` names (the same as ``load_model(f"checkpoint:{checkpoint}", arch=spec)``);
    ``arch`` is the architecture of a ``checkpoint:`` spec; ``num_classes`` sets the classifier
    width of an untrained or checkpoint model (inferred from the checkpoint when omitted);
    ``label_space`` names the output classes (default ``imagenet-1k`` for 1000 outputs, else
    ``<n>-classes``); ``preprocessing`` replaces the source's own; ``input_size`` evaluates at that
    many pixels (shorter side resized to it, then a centre crop of it; interpolation and
    mean/std as the source says).
    """
    require("shiftbench.load_model", "torch", "torchvision")   # without [eval]: one line naming it
    if checkpoint is not None:
        if arch is not None:
            raise ConfigError("give the architecture once: either load_model(arch_spec, checkpoint=path) "
                              "or load_model('checkpoint:path', arch=arch_spec)")
        if spec.strip().startswith("checkpoint:"):
            raise ConfigError(f"{spec!r} already names a checkpoint; drop checkpoint={str(checkpoint)!r}")
        spec, arch = f"checkpoint:{os.fspath(checkpoint)}", spec
    if isinstance(tags, str):
        tags = (tags,)
    if num_classes is not None and (not isinstance(num_classes, int) or num_classes < 1):
        raise ConfigError(f"num_classes must be a positive integer, got {num_classes!r}")
    if preprocessing is not None and not isinstance(preprocessing, Preprocessing):
        raise ConfigError("preprocessing must be a shiftbench.models.Preprocessing, "
                          f"got {type(preprocessing).__name__}")
    _check_model_type(model_type)
    if input_size is not None and (isinstance(input_size, bool) or not isinstance(input_size, int) or input_size < 1):
        raise ConfigError(f"input_size must be a positive number of pixels, got {input_size!r}")
    parsed = parse_spec(spec, pretrained=pretrained, model_type=model_type, tags=tuple(tags), name=name,
                        arch=arch, num_classes=num_classes, label_space=label_space, preprocessing=preprocessing,
                        input_size=input_size)
    if parsed.arch is not None and parsed.source != "checkpoint":
        raise ConfigError(f"arch={arch!r} only applies to 'checkpoint:<path>' specs, not {parsed.spec!r}")
    built = SOURCES[parsed.source][0](parsed)
    return finish(parsed, built)


def finish(spec: ModelSpec, built: Built) -> LoadedModel:
    """Apply the user's overrides to ``built`` and wrap its network in :class:`Normalized`."""
    from shiftbench.models.wrapper import Normalized  # deferred: loads torch

    pre = spec.preprocessing or built.preprocessing
    if spec.input_size is not None:
        pre = pre.with_input_size(spec.input_size)
    module = Normalized(built.net, pre.mean, pre.std)
    meta = dict(built.metadata)
    meta["source"] = spec.source
    meta["model_type"] = spec.model_type or meta.get("model_type") or DEFAULT_MODEL_TYPE
    _check_model_type(meta["model_type"])
    meta.setdefault("training_data", "unknown")
    meta.setdefault("arch", built.name)
    meta["tags"] = tuple(dict.fromkeys((*meta.get("tags", ()), *spec.tags)))
    if hasattr(built.net, "parameters") and "param_count" not in meta:
        meta["param_count"] = int(sum(p.numel() for p in built.net.parameters()))
    label_space = spec.label_space or built.label_space or (
        IMAGENET_LABEL_SPACE if built.num_classes == 1000 else f"{built.num_classes}-classes")
    return LoadedModel(spec=spec.spec, name=spec.name or built.name, module=module, preprocessing=pre,
                       num_classes=built.num_classes, label_space=label_space, fingerprint=built.fingerprint,
                       metadata=meta, class_names=built.class_names)


def build_arch(arch: str, num_classes: int | None = None) -> Built:
    """The untrained architecture ``arch`` names: ``torchvision:<builder>[@<WEIGHTS>]``,
    ``timm:<name>`` or a built-in architecture (``efficientnet-lite0``; ``builtin:`` optional).
    Its preprocessing is the one of the named (or default) pretrained weights."""
    text = arch.strip()
    source, sep, target = text.partition(":")
    if sep and source in ARCH_SOURCES:
        return ARCH_SOURCES[source](target, num_classes)
    key = target if sep and source == "builtin" else text
    if key not in ARCHS:
        load_plugins()
    if key in ARCHS:
        return ARCHS[key](num_classes)
    raise ConfigError(did_you_mean("architecture", text, list(ARCHS) + [f"{s}:" for s in ARCH_SOURCES],
                                   "give 'torchvision:<builder>', 'timm:<name>' or a built-in architecture"))


# ---------------------------------------------------------------- helpers shared by the sources

def sha256_file(path: str | os.PathLike[str], chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes (the fingerprint of weights loaded from a file)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def state_dict_sha256(net: Any) -> str:
    """Hex sha256 over a module's state dict (names, dtypes, shapes and bytes): the fingerprint
    of weights that come from no file (random initialisation, a Python callable)."""
    import torch  # deferred: loads torch

    h = hashlib.sha256()
    for key, value in sorted(net.state_dict().items()):
        if not isinstance(value, torch.Tensor):
            continue
        t = value.detach().cpu().contiguous().reshape(-1)
        h.update(f"{key}|{t.dtype}|{tuple(value.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


_FORCE_LOCK = threading.Lock()


@contextlib.contextmanager
def weights_only_loads() -> Iterator[None]:
    """Force ``torch.load(..., weights_only=True)`` for the duration (torchvision's and timm's
    URL loaders call ``torch.hub.load_state_dict_from_url(weights_only=False)``), through torch's
    documented ``TORCH_FORCE_WEIGHTS_ONLY_LOAD`` switch, restored afterwards."""
    with _FORCE_LOCK:
        old = os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD")
        os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
        try:
            yield
        finally:
            if old is None:
                os.environ.pop("TORCH_FORCE_WEIGHTS_ONLY_LOAD", None)
            else:
                os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = old


def is_unsafe_pickle_error(exc: BaseException) -> bool:
    """``torch.load(weights_only=True)`` refused a pickle that wants to build arbitrary objects."""

    text = str(exc).lower()
    return isinstance(exc, pickle.UnpicklingError) and "weights only load failed" in text and "global" in text


def refused_pickle_message(what: str, exc: BaseException) -> str:
    """The message for a refused pickle: the global it wanted, and how to convert a trusted file."""
    line = next((ln for ln in str(exc).splitlines() if "GLOBAL" in ln), "")
    found = re.search(r"GLOBAL ([\w.]+)", line)
    reason = f"it wants to import and call {found.group(1)}" if found else "it holds objects other than tensors"
    return (f"refusing to unpickle {what}: {reason}, and unpickling it could run arbitrary code "
            "(a saved nn.Module, or a malicious file). If, and only if, you trust it, convert it once to safetensors: "
            "python -c \"import torch, safetensors.torch as st; o = torch.load('IN.pt', weights_only=False); "
            "sd = o.state_dict() if hasattr(o, 'state_dict') else o.get('state_dict', o); "
            "st.save_file({k: v.contiguous() for k, v in sd.items()}, 'OUT.safetensors')\"")


def untrained_fingerprint(net: Any) -> str:
    return "untrained:" + state_dict_sha256(net)[:16]
