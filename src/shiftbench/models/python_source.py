"""``python:<module>:<function>``: any importable callable that returns a classifier.

``<module>`` is imported (it must be on ``sys.path``) and ``<function>`` (a dotted attribute path
is allowed, e.g. ``Factory.build``) is called with ``pretrained=`` and ``num_classes=`` if its
signature takes them, otherwise with no arguments. It returns a ``torch.nn.Module`` or any
callable mapping a float batch ``(B, 3, H, W)`` to logits ``(B, C)``.

``<module>`` is looked up on ``sys.path`` and then in the current directory (as ``python -m``
finds it), so ``shiftbench eval -m python:mymodels:build`` works in the folder holding
``mymodels.py``.

By default the returned model gets **[0, 1] pixels** (preprocessing: resize 256, crop 224,
bilinear, ``mean = (0, 0, 0)``, ``std = (1, 1, 1)``; a timm model: timm's own eval transform from
its ``pretrained_cfg``), and a one-line note says which size was assumed. ``--input-size N``
(``load_model(spec, input_size=N)``) evaluates at ``N`` px instead: the shorter side resized to
``N``, then an ``N`` x ``N`` centre crop. Optional attributes, looked up first on the returned
object and then on the function, declare the preprocessing instead:

``preprocessing``  a :class:`~shiftbench.models.Preprocessing` or a dict of its fields
                   (``{"input_size": 64, "resize": 64}``); its ``mean``/``std`` are then applied
                   by the wrapper *before* your model is called
``num_classes``    output width (else the ``num_classes`` option, else one probe forward pass)
``class_names``    names of the output classes
``label_space``    e.g. ``"imagenet-1k"`` or ``"cifar-10"``
``fingerprint``    identifies the weights (else the sha256 of the module's state dict, or of the
                   source file for a parameter-free callable)
``metadata``       dict merged into the model's metadata (``model_type``, ``training_data``, ...)

The result is named ``<module>.<function>``.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import inspect
import os
import sys
from collections.abc import Iterator
from typing import Any

from shiftbench.errors import ConfigError, ModelError, did_you_mean
from shiftbench.models.base import Preprocessing
from shiftbench.models.objects import ASSUMED_PREPROCESSING, _timm_preprocessing, assumed_note, probe_num_classes
from shiftbench.models.objects import callable_module as _callable_module
from shiftbench.models.registry import Built, ModelSpec, register_source, state_dict_sha256

IDENTITY_PREPROCESSING = ASSUMED_PREPROCESSING
ATTRIBUTES = ("preprocessing", "num_classes", "class_names", "label_space", "fingerprint", "metadata")


@contextlib.contextmanager
def cwd_importable() -> Iterator[None]:
    """The current directory on ``sys.path`` (searched last, so it shadows no installed package)
    while a ``python:`` spec's module is imported and its builder runs, as ``python -m`` has it."""
    cwd = os.getcwd()
    present = any(os.path.abspath(p or os.curdir) == cwd for p in sys.path if isinstance(p, str))
    if not present:
        sys.path.append(cwd)
        importlib.invalidate_caches()   # a module written since the last import is seen
    try:
        yield
    finally:
        if not present:
            with contextlib.suppress(ValueError):
                sys.path.remove(cwd)


def _resolve(target: str, spec_text: str) -> tuple[str, str, Any]:
    module_name, sep, attr_path = target.partition(":")
    if not sep or not module_name or not attr_path:
        raise ConfigError(f"{spec_text!r}: python specs look like 'python:package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ConfigError(f"{spec_text!r}: no module named {exc.name!r} on sys.path or in the current "
                              f"directory {os.getcwd()}") from exc
        raise ModelError(f"{spec_text!r}: importing {module_name!r} failed: {exc}") from exc
    except Exception as exc:
        raise ModelError(f"{spec_text!r}: importing {module_name!r} failed ({type(exc).__name__}: {exc})") from exc
    obj: Any = module
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(obj) if not n.startswith("_") and callable(getattr(obj, n, None))]
            raise ConfigError(did_you_mean(f"function in {module_name}", part, names, spec_text))
        obj = getattr(obj, part)
    if not callable(obj):
        raise ConfigError(f"{spec_text!r}: {module_name}:{attr_path} is not callable")
    return module_name, attr_path, obj


def _fingerprint(net: Any, fn: Any) -> str:
    if any(True for _ in net.parameters()) or any(True for _ in net.buffers()):
        return "python:" + state_dict_sha256(net)
    try:
        source = inspect.getsource(inspect.getmodule(fn) or fn)
    except (OSError, TypeError):
        source = repr(fn)
    return "python-source:" + hashlib.sha256(source.encode()).hexdigest()


def _preprocessing(value: Any, spec_text: str) -> Preprocessing:
    if value is None:
        return IDENTITY_PREPROCESSING
    if isinstance(value, Preprocessing):
        return value
    if isinstance(value, dict):
        try:
            return Preprocessing(**{k: tuple(v) if k in ("mean", "std") else v for k, v in value.items()})
        except TypeError as exc:
            raise ConfigError(f"{spec_text!r}: bad preprocessing attribute {value!r}: {exc}") from exc
    raise ConfigError(f"{spec_text!r}: preprocessing must be a Preprocessing or a dict, got {type(value).__name__}")


@register_source("python", "any callable returning a classifier: python:<module>:<function>")
def load_python(spec: ModelSpec) -> Built:
    """python:<module>:<function>"""
    from torch import nn  # deferred: loads torch

    with cwd_importable():
        module_name, attr_path, fn = _resolve(spec.target, spec.spec)
        params = _parameters(fn)
        kwargs: dict[str, Any] = {}
        if "pretrained" in params:
            kwargs["pretrained"] = spec.pretrained
        if "num_classes" in params and spec.num_classes is not None:
            kwargs["num_classes"] = spec.num_classes
        try:
            model = fn(**kwargs)
        except Exception as exc:
            raise ModelError(f"{spec.spec!r}: calling {module_name}:{attr_path} failed "
                             f"({type(exc).__name__}: {exc})") from exc
    if not callable(model):
        raise ModelError(f"{spec.spec!r}: {module_name}:{attr_path} returned {type(model).__name__}, "
                         "not an nn.Module or a callable mapping a batch to logits")
    attrs = {a: getattr(model, a, None) if getattr(model, a, None) is not None else getattr(fn, a, None)
             for a in ATTRIBUTES}
    net = model if isinstance(model, nn.Module) else _callable_module(model)
    net.eval()
    notes: list[str] = []
    if attrs["preprocessing"] is not None:
        pre = _preprocessing(attrs["preprocessing"], spec.spec)
    elif spec.preprocessing is None and (timm_pre := _timm_preprocessing(model)) is not None:
        pre = timm_pre
    else:
        pre = IDENTITY_PREPROCESSING
        if spec.input_size is None and spec.preprocessing is None:
            notes.append(assumed_note(f"{module_name}.{attr_path}", pre, "declare a `preprocessing` attribute "
                                      "on the builder, or pass --input-size N (input_size=N)"))
    if spec.preprocessing is not None:
        pre = spec.preprocessing
    if spec.input_size is not None:
        pre = pre.with_input_size(spec.input_size)
    num_classes = attrs["num_classes"] or spec.num_classes
    if num_classes is None:
        num_classes = probe_num_classes(net, pre, repr(spec.spec))
    meta = {"arch": f"{module_name}.{attr_path}", "model_type": "UNKNOWN", "training_data": "unknown",
            "tags": ("python",), **dict(attrs["metadata"] or {})}
    if notes:
        meta["notes"] = (*meta.get("notes", ()), *notes)
    return Built(net=net, preprocessing=pre, num_classes=int(num_classes), name=f"{module_name}.{attr_path}",
                 fingerprint=str(attrs["fingerprint"] or _fingerprint(net, fn)), metadata=meta,
                 class_names=list(attrs["class_names"]) if attrs["class_names"] is not None else None,
                 label_space=attrs["label_space"])


def _parameters(fn: Any) -> set[str]:
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()
