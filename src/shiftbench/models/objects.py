"""Model objects in: an ``nn.Module`` or any callable from a normalised batch to logits, turned
once, at the boundary, into a :class:`~shiftbench.models.base.LoadedModel` (DESIGN: "Inputs take
the forms users already hold").

* **Name**: ``name=``, else the class name (``TinyCNN``; a function's ``__qualname__``).
* **Preprocessing**: ``preprocessing=`` (a :class:`Preprocessing`), or ``input_size=``, ``mean=``,
  ``std=``; else a ``preprocessing`` attribute of the object; else, for a timm model, timm's own
  eval transform from its ``pretrained_cfg`` (``timm.data.resolve_data_config``); else the
  default of ``python:`` specs: resize 256, centre crop 224, bilinear, ``mean = 0, std = 1`` (the
  model gets [0, 1] pixels), and the model's ``notes`` say that size was assumed.
  ``input_size=N`` alone resizes the shorter side to ``N`` and centre-crops ``N`` (no border
  crop: small models are trained on whole images); for a border crop give
  ``preprocessing=Preprocessing(input_size=224, resize=256, ...)``. A torchvision ``nn.Module``
  does not know its weights' transforms: give them (``weights.transforms()`` shows them).
* **Fingerprint** (part of every results key, so changed weights are never served from the
  cache): :func:`object_fingerprint` - the sha256 of the state dict (names, dtypes, shapes,
  bytes), the module tree's ``repr`` (layer hyperparameters), the code of every non-torch class
  in it and its plain attributes; for a callable, its code, defaults, closure and the modules and
  tensors it reads from its globals.

A hand-built :class:`LoadedModel` passes through :func:`prepare_loaded`: an empty ``fingerprint``
is filled in the same way, and a ``module`` that is not already a
:class:`~shiftbench.models.wrapper.Normalized` is wrapped in one with the preprocessing's
``mean``/``std`` (so they are applied, as for every spec).
"""
from __future__ import annotations

import dataclasses
import hashlib
import types
from typing import Any

from shiftbench.errors import ConfigError, ModelError
from shiftbench.models.base import LoadedModel, Preprocessing
from shiftbench.models.registry import DEFAULT_MODEL_TYPE, IMAGENET_LABEL_SPACE, _check_model_type, state_dict_sha256

#: what a model object is evaluated with when nothing says otherwise (that of ``python:`` specs)
ASSUMED_PREPROCESSING = Preprocessing(mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))
ACCEPTED_MODELS = ("a model spec string ('timm:resnet50', 'python:mymodule:build', ...), an nn.Module, a callable "
                   "from a normalised (B, 3, H, W) batch to logits, a shiftbench LoadedModel, a dict {name: model} "
                   "or a list of these")
_SIMPLE = (int, float, str, bool, type(None))


def assumed_note(name: str, pre: Preprocessing, how: str) -> str:
    """The one-line note for a model evaluated at a size nobody declared."""
    return (f"model {name!r}: no input size declared; evaluated at {pre.input_size} px (resize {pre.resize}, centre "
            f"crop {pre.input_size}, {pre.interpolation}) on [0, 1] pixels (mean 0, std 1); {how}")


def callable_module(fn: Any) -> Any:
    """A plain callable as an ``nn.Module`` (so it can be wrapped, moved and put in eval mode)."""
    from torch import nn  # deferred: loads torch

    class CallableModule(nn.Module):
        """A plain callable as a module (so it can be wrapped, moved and put in eval mode)."""

        def __init__(self, f: Any) -> None:
            super().__init__()
            self.f = f

        def forward(self, x: Any) -> Any:
            return self.f(x)

        def extra_repr(self) -> str:
            return getattr(self.f, "__qualname__", type(self.f).__qualname__)

    return CallableModule(fn)


def probe_num_classes(net: Any, pre: Preprocessing, what: str) -> int:
    """The output width of ``net`` from one forward pass on a mid-grey, normalised
    ``(1, 3, H, W)`` batch at the preprocessing's input size; a :class:`ModelError` naming
    ``what`` when the pass fails or does not return ``(batch, classes)`` logits."""
    import torch  # deferred: loads torch

    h, w = pre.input_hw
    x = torch.full((1, 3, h, w), 0.5)
    x = (x - torch.tensor(pre.mean).view(1, -1, 1, 1)) / torch.tensor(pre.std).view(1, -1, 1, 1)
    try:
        with torch.no_grad():
            out = net(x)
    except Exception as exc:
        raise ModelError(f"{what}: a forward pass on a (1, 3, {h}, {w}) batch failed ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:300]}); if the model takes another input size, declare it "
                         "(input_size=N, --input-size N, or a preprocessing attribute)") from exc
    if not isinstance(out, torch.Tensor) or out.ndim != 2:
        shape = f" of shape {tuple(out.shape)}" if isinstance(out, torch.Tensor) else ""
        raise ModelError(f"{what}: the model returned {type(out).__name__}{shape}, not logits of shape "
                         "(batch, classes)")
    return int(out.shape[1])


# ---------------------------------------------------------------------------- fingerprints
def _code_digest(code: types.CodeType, h: Any) -> None:
    """Bytecode, names and constants of ``code`` (nested functions too), without its file name or
    line numbers: re-running a notebook cell keeps the digest, editing a function changes it."""
    h.update(code.co_code)
    h.update(repr((code.co_names, code.co_varnames, code.co_freevars)).encode())
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _code_digest(c, h)
        elif isinstance(c, frozenset):
            h.update(repr(sorted(map(repr, c))).encode())
        else:
            h.update(repr(c).encode())


def _function(obj: Any) -> Any:
    if isinstance(obj, staticmethod | classmethod):
        return obj.__func__
    if isinstance(obj, property):
        return obj.fget
    return obj


def _class_digest(cls: type, h: Any) -> None:
    """The code of a class's own functions (and of its non-torch bases)."""
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] in ("torch", "builtins"):
            continue
        h.update(f"class {klass.__module__}.{klass.__qualname__}|".encode())
        for key, value in sorted(vars(klass).items()):
            fn = _function(value)
            if isinstance(fn, types.FunctionType):
                h.update(key.encode())
                _code_digest(fn.__code__, h)
            elif isinstance(value, _SIMPLE):
                h.update(f"{key}={value!r}".encode())


def _value_digest(value: Any, h: Any, seen: set[int]) -> None:
    """Tensors by their bytes, modules by :func:`_module_digest`, plain values by repr; anything
    else by its type only (its repr may hold a memory address)."""
    import torch  # deferred: loads torch

    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, torch.nn.Module):
        _module_digest(value, h, seen)
    elif isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous().reshape(-1)
        h.update(f"tensor|{t.dtype}|{tuple(value.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(value, _SIMPLE):
        h.update(repr(value).encode())
    elif isinstance(value, tuple | list) and all(isinstance(v, _SIMPLE) for v in value):
        h.update(repr(value).encode())
    elif isinstance(value, types.FunctionType | types.MethodType):
        _callable_digest(value, h, seen)
    else:
        h.update(f"<{type(value).__module__}.{type(value).__qualname__}>".encode())


def _module_digest(net: Any, h: Any, seen: set[int]) -> None:
    h.update(state_dict_sha256(net).encode())
    h.update(repr(net).encode())
    for sub in net.modules():
        if id(type(sub)) not in seen:     # each class's code once
            seen.add(id(type(sub)))
            _class_digest(type(sub), h)
        for key, value in sorted(vars(sub).items()):
            if not key.startswith("_") and key != "training" and isinstance(value, _SIMPLE):
                h.update(f"{key}={value!r}".encode())
            elif key == "f" and callable(value):  # a CallableModule's function
                _callable_digest(value, h, seen)


def _callable_digest(fn: Any, h: Any, seen: set[int]) -> None:
    if isinstance(fn, types.MethodType):
        _value_digest(fn.__self__, h, seen)
        fn = fn.__func__
    if isinstance(fn, types.FunctionType):
        h.update(f"def {fn.__module__}.{fn.__qualname__}|".encode())
        _code_digest(fn.__code__, h)
        for value in (*(fn.__defaults__ or ()), *(c.cell_contents for c in fn.__closure__ or ()
                                                   if _has_contents(c))):
            _value_digest(value, h, seen)
        names = _global_names(fn.__code__)
        for name in sorted(names):  # modules and tensors a notebook function reads from its globals
            value = fn.__globals__.get(name)
            if value is not None and _is_torch_value(value):
                h.update(f"global {name}|".encode())
                _value_digest(value, h, seen)
        return
    _class_digest(type(fn), h)   # a callable object: its class's code and its attributes
    for key, value in sorted(getattr(fn, "__dict__", {}).items()):
        h.update(key.encode())
        _value_digest(value, h, seen)


def _has_contents(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _global_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _global_names(c)
    return names


def _is_torch_value(value: Any) -> bool:
    import torch  # deferred: loads torch

    return isinstance(value, torch.nn.Module | torch.Tensor)


def object_fingerprint(obj: Any) -> str:
    """``object:<sha256>`` of what determines a model object's outputs: for an ``nn.Module`` its
    state dict (names, dtypes, shapes, bytes), its module tree's ``repr``, the code of its
    non-torch classes and their plain attributes; for any other callable its code, defaults,
    closure and the modules and tensors it reads from its globals (a notebook's ``net``)."""
    import torch  # deferred: loads torch

    h = hashlib.sha256()
    if isinstance(obj, torch.nn.Module):
        _module_digest(obj, h, {id(obj)})
    else:
        _callable_digest(obj, h, set())
    return "object:" + h.hexdigest()


# ---------------------------------------------------------------------------- objects in
def default_name(obj: Any) -> str:
    """``TinyCNN`` for an instance, ``predict`` for a function, ``Net.logits`` for a method."""
    if isinstance(obj, types.FunctionType | types.MethodType | types.BuiltinFunctionType):
        name = obj.__qualname__
    else:
        name = type(obj).__name__
    return name.replace("<lambda>", "lambda").replace("<locals>.", "")


def _timm_preprocessing(obj: Any) -> Preprocessing | None:
    """timm's eval transform for a timm model (one with a ``pretrained_cfg``), else ``None``."""
    if not isinstance(getattr(obj, "pretrained_cfg", None), dict) or not type(obj).__module__.startswith("timm."):
        return None
    try:
        from shiftbench.models.timm_source import preprocessing_of  # deferred: loads timm
    except ImportError:  # pragma: no cover - timm is a dependency of the eval extra
        return None
    return preprocessing_of(obj)[0]


def resolve_preprocessing(obj: Any, name: str, *, preprocessing: Any = None, input_size: int | None = None,
                          mean: Any = None, std: Any = None, how: str = "") -> tuple[Preprocessing, list[str]]:
    """``(preprocessing, notes)`` of a model object (order in the module docstring)."""
    given = {k: v for k, v in (("input_size", input_size), ("mean", mean), ("std", std)) if v is not None}
    if preprocessing is not None:
        if given:
            raise ConfigError(f"model {name!r}: give either preprocessing= or {', '.join(f'{k}=' for k in given)}, "
                              "not both")
        if isinstance(preprocessing, dict):
            preprocessing = Preprocessing(**preprocessing)
        if not isinstance(preprocessing, Preprocessing):
            raise ConfigError(f"model {name!r}: preprocessing must be a shiftbench.models.Preprocessing, "
                              f"got {type(preprocessing).__name__}")
        return preprocessing, []
    own = getattr(obj, "preprocessing", None)
    if own is not None and not isinstance(own, Preprocessing | dict):
        own = None
    base = (Preprocessing(**own) if isinstance(own, dict) else own) or _timm_preprocessing(obj)
    notes: list[str] = []
    if base is None:
        base = ASSUMED_PREPROCESSING
        if input_size is None:
            notes.append(assumed_note(name, base, how or "pass input_size=N (and mean=/std= if the model expects "
                                                          "normalised input) or preprocessing=Preprocessing(...)"))
    pre = base.with_input_size(input_size) if input_size is not None else base
    if mean is not None or std is not None:
        pre = dataclasses.replace(pre, mean=pre.mean if mean is None else mean, std=pre.std if std is None else std)
    return pre, notes


def as_model(obj: Any, *, name: str | None = None, preprocessing: Preprocessing | None = None,
             input_size: int | None = None, mean: Any = None, std: Any = None, num_classes: int | None = None,
             label_space: str | None = None, class_names: list[str] | None = None,
             model_type: str | None = None) -> LoadedModel:
    """A :class:`LoadedModel` of a model object: an ``nn.Module`` or a callable mapping a batch
    normalised with ``mean``/``std`` to logits ``(B, classes)`` (see the module docstring).

    ``num_classes`` defaults to the object's ``num_classes`` attribute, else one probe forward
    pass; ``label_space`` to ``imagenet-1k`` for 1000 outputs, else ``<n>-classes``. A
    :class:`LoadedModel` is returned through :func:`prepare_loaded` (renamed with ``name=``).

    >>> import torch
    >>> m = as_model(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LazyLinear(3)), input_size=8)
    >>> m.name, m.num_classes, m.preprocessing.input_size, m.fingerprint[:7]
    ('Sequential', 3, 8, 'object:')
    """
    from torch import nn  # deferred: loads torch

    from shiftbench.models.wrapper import Normalized  # deferred: loads torch

    if isinstance(obj, LoadedModel):
        if any(v is not None for v in (preprocessing, input_size, mean, std)):
            raise ConfigError(f"model {obj.name!r} is a LoadedModel: it carries its preprocessing already; build it "
                              "with the Preprocessing you want")
        loaded = prepare_loaded(obj)
        return loaded if name is None else dataclasses.replace(loaded, name=_check_name(name))
    if isinstance(obj, type):
        raise ConfigError(f"model {obj.__name__!r} is a class, not a model: pass an instance ({obj.__name__}(...))")
    if isinstance(obj, str) or not callable(obj):
        raise ConfigError(f"model of type {type(obj).__name__} is not accepted; give {ACCEPTED_MODELS}")
    name = _check_name(name if name is not None else default_name(obj))
    pre, notes = resolve_preprocessing(obj, name, preprocessing=preprocessing, input_size=input_size,
                                       mean=mean, std=std)
    net = obj if isinstance(obj, nn.Module) else callable_module(obj)
    num_classes = num_classes if num_classes is not None else getattr(obj, "num_classes", None)
    if not isinstance(num_classes, int) or isinstance(num_classes, bool):
        was = net.training
        net.eval()
        try:
            num_classes = probe_num_classes(net, pre, f"model {name!r}")
        finally:
            net.train(was)
    if num_classes < 1:
        raise ConfigError(f"model {name!r}: num_classes must be a positive integer, got {num_classes!r}")
    fingerprint = object_fingerprint(obj)      # after the probe: a lazy module's weights exist by now
    _check_model_type(model_type)
    arch = f"{type(obj).__module__}.{type(obj).__qualname__}" if isinstance(obj, nn.Module) else (
        f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__qualname__)}")
    meta: dict[str, Any] = {"source": "object", "arch": arch, "model_type": model_type or DEFAULT_MODEL_TYPE,
                            "training_data": "unknown", "tags": ("object",),
                            "param_count": int(sum(p.numel() for p in net.parameters())), "notes": tuple(notes)}
    names = class_names if class_names is not None else getattr(obj, "class_names", None)
    return LoadedModel(spec=f"object:{arch}", name=name, module=Normalized(net, pre.mean, pre.std), preprocessing=pre,
                       num_classes=int(num_classes),
                       label_space=label_space or (IMAGENET_LABEL_SPACE if num_classes == 1000
                                                   else f"{num_classes}-classes"),
                       fingerprint=fingerprint, metadata=meta, class_names=list(names) if names is not None else None)


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"a model name must be a non-empty string, got {name!r}")
    return name.strip()


def prepare_loaded(model: LoadedModel) -> LoadedModel:
    """A hand-built :class:`LoadedModel` made whole (idempotent): its ``preprocessing`` checked,
    its ``module`` wrapped in :class:`~shiftbench.models.wrapper.Normalized` with that
    preprocessing's ``mean``/``std`` unless it is one already (whose ``mean``/``std`` must then
    agree with it), an empty ``fingerprint`` filled with :func:`object_fingerprint`."""
    import torch  # deferred: loads torch

    from shiftbench.models.wrapper import Normalized  # deferred: loads torch

    pre = model.preprocessing
    if not isinstance(pre, Preprocessing):
        raise ConfigError(f"LoadedModel {model.name!r}: preprocessing must be a shiftbench.models.Preprocessing, "
                          f"got {type(pre).__name__}")
    changes: dict[str, Any] = {}
    module = model.module
    if isinstance(module, Normalized):
        inner = module.net
        applied = (tuple(module.mean.flatten().tolist()), tuple(module.std.flatten().tolist()))
        if not all(len(a) == len(b) and all(abs(x - y) <= 1e-6 for x, y in zip(a, b))
                   for a, b in zip(applied, (pre.mean, pre.std))):
            raise ConfigError(f"LoadedModel {model.name!r}: its Normalized module applies mean {applied[0]} and std "
                              f"{applied[1]}, but its preprocessing says mean {pre.mean} and std {pre.std}; make "
                              "them agree (the store records the preprocessing)")
    else:
        if isinstance(module, type) or not callable(module):
            raise ConfigError(f"LoadedModel {model.name!r}: module must be an nn.Module or a callable, "
                              f"got {type(module).__name__}")
        inner = module if isinstance(module, torch.nn.Module) else callable_module(module)
        changes["module"] = Normalized(inner, pre.mean, pre.std)
    if not model.fingerprint:
        changes["fingerprint"] = object_fingerprint(inner if isinstance(module, Normalized) else module)
    return dataclasses.replace(model, **changes) if changes else model

