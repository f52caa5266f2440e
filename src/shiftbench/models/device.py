"""Which device a model runs on: ``--device`` checked where it enters, not when torch moves a model.

``torch`` reports a bad device late and at length (``RuntimeError: Invalid device string``, or
"Found no NVIDIA driver" from deep inside ``module.to``); :func:`check_device` turns the same
mistakes into a one-line :class:`~shiftbench.errors.ConfigError` before any work starts.
"""
from __future__ import annotations

from shiftbench.errors import ConfigError

#: device types shiftbench runs models on (torch names them; ``cuda`` also covers ROCm builds)
DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu")
_USE = "use cpu, cuda, cuda:N (N: a GPU index), mps or xpu, or leave --device out (cuda if present, else cpu)"


def _count(kind: str, torch) -> int:  # noqa: ANN001 - torch, imported by the caller
    """Devices of ``kind`` this machine has (without initialising CUDA)."""
    if kind == "cuda":
        return int(torch.cuda.device_count())
    if kind == "mps":
        backend = getattr(torch.backends, "mps", None)
        return int(bool(backend is not None and backend.is_available()))
    if kind == "xpu":
        xpu = getattr(torch, "xpu", None)
        return int(xpu.device_count()) if xpu is not None and xpu.is_available() else 0
    return 1


def check_device(device: str | None, *, here: bool = True, option: str = "--device") -> str | None:
    """``device`` if torch can parse it and (with ``here``) this machine has it, else a ConfigError.

    ``None`` (the default device) passes. ``here=False`` checks the spelling only, for devices
    on other machines (Ray workers).

    >>> check_device("cpu")
    'cpu'
    >>> check_device("tpu7")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    shiftbench.errors.ConfigError: --device 'tpu7': not a device; use cpu, cuda, cuda:N ...
    """
    if device is None:
        return None
    if not isinstance(device, str):
        raise ConfigError(f"{option} {device!r}: give the device as a string; {_USE}")
    try:
        import torch  # deferred: loads torch
    except ImportError as exc:  # pragma: no cover - the [eval] extra brings torch
        raise ConfigError(f"{option} {device}: running models needs torch: pip install 'shiftbench[eval]'") from exc
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ConfigError(f"{option} {device!r}: not a device; {_USE}") from None
    if parsed.type not in DEVICE_TYPES:
        raise ConfigError(f"{option} {device!r}: shiftbench does not run models on {parsed.type} devices; {_USE}")
    if not here or parsed.type == "cpu":
        return device
    n = _count(parsed.type, torch)
    if n == 0:
        raise ConfigError(f"{option} {device}: this machine has no {parsed.type} device (torch sees none); "
                          "use --device cpu, or leave --device out")
    if parsed.index is not None and parsed.index >= n:
        listed = ", ".join(f"{parsed.type}:{i}" for i in range(min(n, 8))) + (", ..." if n > 8 else "")
        raise ConfigError(f"{option} {device}: this machine has {n} {parsed.type} device(s) ({listed}); "
                          f"pick one of those or use --device cpu")
    return device
