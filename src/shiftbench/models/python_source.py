"""``python:<module>:<function>``: any importable callable that returns a classifier.

``<module>`` is imported (it must be on ``sys.path``) and ``<function>`` (a dotted attribute path
is allowed, e.g. ``Factory.build``) is called with ``pretrained=`` and ``num_classes=`` if its
signature takes them, otherwise with no arguments. It returns a ``torch.nn.Module`` or any
callable mapping a float batch ``(B, 3, H, W)`` to logits ``(B, C)``.

By default the returned model gets **[0, 1] pixels** (preprocessing: resize 256, crop 224,
bilinear, ``mean = (0, 0, 0)``, ``std = (1, 1, 1)``). Optional attributes, looked up first on the
returned object and then on the function, change that:

``preprocessing``  a :class:`~shiftbench.models.Preprocessing` or a dict of its fields; its
                   ``mean``/``std`` are then applied by the wrapper *before* your model is called
``num_classes``    output width (else the ``num_classes`` option, else one probe forward pass)
``class_names``    names of the output classes
``label_space``    e.g. ``"imagenet-1k"`` or ``"cifar-10"``
``fingerprint``    identifies the weights (else the sha256 of the module's state dict, or of the
                   source file for a parameter-free callable)
``metadata``       dict merged into the model's metadata (``model_type``, ``training_data``, ...)

The result is named ``<module>.<function>``.
"""
from __future__ import annotations

import hashlib
import importlib
import inspect
from typing import Any

from shiftbench.errors import ConfigError, ModelError, did_you_mean
from shiftbench.models.base import Preprocessing
from shiftbench.models.registry import Built, ModelSpec, register_source, state_dict_sha256

IDENTITY_PREPROCESSING = Preprocessing(mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))
ATTRIBUTES = ("preprocessing", "num_classes", "class_names", "label_space", "fingerprint", "metadata")


def _callable_module(fn: Any) -> Any:
    from torch import nn  # deferred: loads torch

    class CallableModule(nn.Module):
        """A plain callable as a module (so it can be wrapped, moved and put in eval mode)."""

        def __init__(self, f: Any) -> None:
            super().__init__()
            self.f = f

        def forward(self, x: Any) -> Any:
            return self.f(x)

    return CallableModule(fn)


def _resolve(target: str, spec_text: str) -> tuple[str, str, Any]:
    module_name, sep, attr_path = target.partition(":")
    if not sep or not module_name or not attr_path:
        raise ConfigError(f"{spec_text!r}: python specs look like 'python:package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ConfigError(f"{spec_text!r}: no module named {exc.name!r} on sys.path") from exc
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
    import torch  # deferred: loads torch
    from torch import nn  # deferred: loads torch

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
    pre = _preprocessing(attrs["preprocessing"], spec.spec)
    num_classes = attrs["num_classes"] or spec.num_classes
    if num_classes is None:
        x = torch.full((1, 3, pre.input_size, pre.input_size), 0.5)
        x = (x - torch.tensor(pre.mean).view(1, -1, 1, 1)) / torch.tensor(pre.std).view(1, -1, 1, 1)
        try:
            with torch.no_grad():
                out = net(x)
        except Exception as exc:
            raise ModelError(f"{spec.spec!r}: a forward pass on a (1, 3, {pre.input_size}, {pre.input_size}) batch "
                             f"failed ({type(exc).__name__}: {exc})") from exc
        if not isinstance(out, torch.Tensor) or out.ndim != 2:
            raise ModelError(f"{spec.spec!r}: the model returned {type(out).__name__}"
                             f"{' of shape ' + str(tuple(out.shape)) if isinstance(out, torch.Tensor) else ''}, "
                             "not logits of shape (batch, classes)")
        num_classes = int(out.shape[1])
    meta = {"arch": f"{module_name}.{attr_path}", "model_type": "UNKNOWN", "training_data": "unknown",
            "tags": ("python",), **dict(attrs["metadata"] or {})}
    return Built(net=net, preprocessing=pre, num_classes=int(num_classes), name=f"{module_name}.{attr_path}",
                 fingerprint=str(attrs["fingerprint"] or _fingerprint(net, fn)), metadata=meta,
                 class_names=list(attrs["class_names"]) if attrs["class_names"] is not None else None,
                 label_space=attrs["label_space"])


def _parameters(fn: Any) -> set[str]:
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()
