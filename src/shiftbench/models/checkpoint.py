"""``checkpoint:<path>`` with ``arch=``: weights from a file, never through unrestricted pickle.

* ``.safetensors`` files (recognised by suffix or by their header) are read with
  :func:`safetensors.torch.load_file`;
* anything else with ``torch.load(path, weights_only=True, map_location="cpu")``; a pickle that
  wants to build other objects (a saved ``nn.Module``, or worse) is refused with a
  :class:`ModelError` that says how to convert a trusted file to safetensors.

The file holds a state dict, or a dict with the state dict under ``state_dict``, ``model`` or
``model_state_dict``; a ``module.`` (DataParallel) or ``_orig_mod.`` (torch.compile) prefix on
every key is stripped. It is loaded strictly: missing, unexpected or mis-shaped keys are a
:class:`ModelError` naming the file and the first offending keys. When ``num_classes`` is not
given and only the classifier's width differs from the architecture's default, the width is
taken from the checkpoint. The fingerprint is the file's sha256; the name defaults to the file's
stem.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

from shiftbench.errors import ConfigError, ModelError
from shiftbench.models.registry import (
    Built,
    ModelSpec,
    build_arch,
    is_unsafe_pickle_error,
    refused_pickle_message,
    register_source,
    sha256_file,
)

STATE_DICT_KEYS = ("state_dict", "model", "model_state_dict")
PREFIXES = ("module.", "_orig_mod.")
SHOW = 5  # keys named in a mismatch message


def _is_safetensors(path: Path) -> bool:
    if path.suffix == ".safetensors":
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(9)
    except OSError:
        return False
    if len(head) < 9:
        return False
    (n,) = struct.unpack("<Q", head[:8])
    return 2 <= n < 100_000_000 and head[8:9] == b"{"


def _reason(exc: BaseException) -> str:
    """The informative line of an exception (torch.load wraps its reason in boilerplate)."""
    boiler = ("weights only load failed", "in pytorch", "please file an issue", "check the documentation",
              "re-running", "(1)", "(2)")
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    useful = [ln for ln in lines if not ln.lower().startswith(boiler)]
    return (useful or lines or [type(exc).__name__])[0]


def read_state_dict(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The tensors of a weights file (safetensors or a ``weights_only`` torch file), unwrapped and
    with DataParallel/compile prefixes stripped. Raises :class:`ModelError` naming the file."""
    import torch  # deferred: loads torch

    path = Path(path)
    if not path.is_file():
        raise ModelError(f"checkpoint file not found: {path}")
    if _is_safetensors(path):
        from safetensors.torch import load_file  # deferred: loads safetensors, loads torch

        try:
            obj: Any = load_file(str(path), device="cpu")
        except Exception as exc:
            raise ModelError(f"cannot read safetensors checkpoint {path}: {exc}") from exc
    else:
        try:
            obj = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:
            if is_unsafe_pickle_error(exc):
                raise ModelError(refused_pickle_message(f"checkpoint {path}", exc)) from exc
            raise ModelError(f"cannot read checkpoint {path}: it is neither a safetensors file nor a torch.save "
                             f"weights file ({type(exc).__name__}: {_reason(exc)})") from exc
    if isinstance(obj, dict):
        for key in STATE_DICT_KEYS:
            if isinstance(obj.get(key), dict):
                obj = obj[key]
                break
    if not isinstance(obj, dict) or not obj:
        raise ModelError(f"checkpoint {path} holds {type(obj).__name__}, not a state dict "
                         f"(a dict of tensors, optionally under {' / '.join(STATE_DICT_KEYS)})")
    not_tensors = [k for k, v in obj.items() if not isinstance(v, torch.Tensor)]
    if not_tensors:
        raise ModelError(f"checkpoint {path}: entries that are not tensors: {not_tensors[:SHOW]} "
                         f"(expected a state dict, optionally under {' / '.join(STATE_DICT_KEYS)})")
    for prefix in PREFIXES:
        if all(k.startswith(prefix) for k in obj):
            obj = {k[len(prefix):]: v for k, v in obj.items()}
    return obj


def _head_width(model_sd: dict[str, Any], ckpt: dict[str, Any], default: int) -> int | None:
    """The checkpoint's classifier width when the keys match and the only shape differences are
    in first dimensions equal to ``default`` (the classifier's weight and bias)."""
    if set(model_sd) != set(ckpt):
        return None
    diff = [k for k in ckpt if tuple(ckpt[k].shape) != tuple(model_sd[k].shape)]
    widths = {int(ckpt[k].shape[0]) for k in diff if ckpt[k].ndim >= 1}
    if not diff or len(widths) != 1 or any(
            model_sd[k].ndim == 0 or model_sd[k].shape[0] != default or ckpt[k].shape[1:] != model_sd[k].shape[1:]
            for k in diff):
        return None
    return widths.pop()


def _fmt(keys: list[str]) -> str:
    return ", ".join(keys[:SHOW]) + (f", ... ({len(keys) - SHOW} more)" if len(keys) > SHOW else "")


def load_into(net: Any, state: dict[str, Any], path: Path, arch: str) -> None:
    """``net.load_state_dict(state, strict=True)`` with a message naming the file and the keys."""
    own = net.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    shapes = [f"{k} {tuple(state[k].shape)} vs {tuple(own[k].shape)}" for k in state
              if k in own and tuple(state[k].shape) != tuple(own[k].shape)]
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing key{'s' * (len(missing) > 1)} ({_fmt(missing)})")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected key{'s' * (len(unexpected) > 1)} ({_fmt(unexpected)})")
        if shapes:
            parts.append(f"{len(shapes)} shape mismatch{'es' * (len(shapes) > 1)}, checkpoint vs architecture "
                         f"({_fmt(shapes)})")
        raise ModelError(f"checkpoint {path} does not fit architecture {arch!r}: " + "; ".join(parts))
    try:
        net.load_state_dict(state, strict=True)
    except Exception as exc:
        raise ModelError(f"checkpoint {path} does not fit architecture {arch!r}: {exc}") from exc


def load_checkpoint(path: Path, arch: str, num_classes: int | None) -> Built:
    """``arch`` built untrained, with the weights of ``path`` loaded strictly; fingerprint = sha256."""
    built = build_arch(arch, num_classes)  # unknown architectures fail before the file is read
    state = read_state_dict(path)
    if num_classes is None:
        width = _head_width(built.net.state_dict(), state, built.num_classes)
        if width is not None and width != built.num_classes:
            built = build_arch(arch, width)
    load_into(built.net, state, path, arch)
    built.net.eval()
    built.fingerprint = sha256_file(path)
    if built.num_classes != len(built.class_names or ()):
        built.class_names = None
    return built


@register_source("checkpoint", "a weights file (safetensors or weights-only torch.save) with arch=")
def load_checkpoint_source(spec: ModelSpec) -> Built:
    """checkpoint:<path> with arch=<torchvision:...|timm:...|built-in architecture>"""
    if spec.arch is None:
        raise ConfigError(f"{spec.spec!r} needs arch=, e.g. arch='torchvision:resnet50', 'timm:resnet50.a1_in1k' "
                          "or 'efficientnet-lite0'")
    path = Path(os.path.expanduser(spec.target))
    built = load_checkpoint(path, spec.arch, spec.num_classes)
    # what described the architecture's own pretrained weights does not describe these weights
    meta = {k: v for k, v in built.metadata.items() if k in ("arch", "crop_pct", "crop_mode")}
    meta.update({"checkpoint": str(path.resolve()), "arch_spec": spec.arch, "model_type": "UNKNOWN",
                 "training_data": "unknown (checkpoint)", "tags": ("checkpoint",)})
    built.metadata = meta
    built.name = path.stem
    return built
