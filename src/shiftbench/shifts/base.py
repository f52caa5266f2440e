"""What the engine needs from a synthetic shift: a batched function on [0, 1] pixels.

A :class:`Shift` maps a float batch ``x`` of shape ``(B, 3, H, W)`` in ``[0, 1]`` (after the
model's resize and crop, before normalisation: DESIGN principle 2) to a batch of the same
shape and range. Random shifts draw every random number from a generator seeded by
``(seed, shift name, severity, dataset index of the image)`` (:func:`image_generator`), so a
result never depends on batch size, batch order or worker count. Shifts run on whatever
device ``x`` is on (CPU here, CUDA on a GPU box).

Registry: ``@register_shift("gaussian_noise")`` on a factory ``(severity) -> Shift`` (the one
factory shape); the engine looks shifts up by name with :func:`get_shift`. Validation happens
once, at that boundary: :func:`check_shift` (unknown names and severities outside the registered
ones are a ConfigError listing the valid ones), so factories trust their severity; a batch is
checked (shape, size, float pixels) the first time a :class:`Shift` sees its image shape and
dtype, not on every batch.
"""
from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from shiftbench.errors import ConfigError, did_you_mean

MIN_SIZE = 32


@dataclass(frozen=True)
class Shift:
    """A named, parameterised batch transform on [0, 1] images."""

    name: str
    severity: int | None
    fn: Callable[..., Any]
    random: bool = False
    #: shifts that attack the model (PGD) get ``model=`` (a [0, 1]-input module) and
    #: ``targets=`` (a LongTensor of labels in the model's output space) as keyword arguments
    needs_model: bool = False
    #: image shapes and dtypes already checked (:meth:`check_input`); not part of the identity
    _checked: set = field(default_factory=set, init=False, repr=False, compare=False)

    @property
    def id(self) -> str:
        """``<name>.<severity>`` (or ``<name>``): part of every results key."""
        return self.name if self.severity is None else f"{self.name}.{self.severity}"

    def check_input(self, x: Any) -> None:
        """The boundary check of a batch: a float ``(B, 3, H, W)`` tensor of images at least
        ``MIN_SIZE`` px a side; a ConfigError naming the fix otherwise."""
        if not hasattr(x, "is_floating_point"):
            raise ConfigError(f"shift {self.id}: expects a torch tensor, got {type(x).__name__}")
        if x.ndim != 4 or x.shape[1] != 3:
            raise ConfigError(f"shift {self.id}: expects a (B, 3, H, W) batch, got {tuple(x.shape)}")
        h, w = x.shape[-2:]
        if min(h, w) < MIN_SIZE:
            raise ConfigError(f"shift {self.id}: images must be at least {MIN_SIZE}x{MIN_SIZE} px, got {w}x{h}; "
                              "resize them first (e.g. a larger model input size)")
        if not x.is_floating_point():
            raise ConfigError(f"shift {self.id}: expects float pixels in [0, 1], got dtype {x.dtype} "
                              "(divide uint8 images by 255 first)")

    def __call__(self, x: Any, indices: Any, seed: int = 0, **model_kwargs: Any) -> Any:
        """Apply to batch ``x`` whose images have dataset indices ``indices`` (one per image).

        The batch is checked (:meth:`check_input`) the first time its image shape and dtype
        are seen; the engine's batches all share one, so they are checked once."""
        key = (type(x).__name__, tuple(getattr(x, "shape", ())[1:]), str(getattr(x, "dtype", "")))
        if key not in self._checked:
            self.check_input(x)
            self._checked.add(key)
        if len(indices) != x.shape[0]:
            raise ConfigError(f"shift {self.id}: got {len(indices)} dataset indices for a batch of "
                              f"{x.shape[0]} images")
        if self.needs_model:
            return self.fn(x, indices, seed, **model_kwargs)
        return self.fn(x, indices, seed)


def image_seed(seed: int, shift_id: str, index: int) -> int:
    """A 63-bit seed for one image's random draws under one shift."""
    h = hashlib.blake2b(f"{seed}|{shift_id}|{int(index)}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") & ((1 << 63) - 1)


def image_generator(seed: int, shift_id: str, index: int, device: Any = "cpu") -> Any:
    """A ``torch.Generator`` for one image (see module docstring)."""
    import torch  # deferred: loads torch

    g = torch.Generator(device=device)
    g.manual_seed(image_seed(seed, shift_id, index))
    return g


class ShiftEntry(NamedTuple):
    """A registered shift: its factory ``(severity) -> Shift``, its severities (``None``: the
    shift takes none) and a one-line description (read by unpacking: plain tuples work too)."""

    factory: Callable[[int | None], Shift]
    severities: tuple[int, ...] | None
    description: str


_SHIFTS: dict[str, ShiftEntry] = {}


def register_shift(name: str, severities: tuple[int, ...] | None = (1, 2, 3, 4, 5), description: str = ""):
    """Decorator: register ``factory(severity) -> Shift`` under ``name``. The factory receives a
    severity already checked against ``severities`` (:func:`check_shift`)."""
    def wrap(factory: Callable[[int | None], Shift]) -> Callable[[int | None], Shift]:
        _SHIFTS[name] = ShiftEntry(factory, severities, description)
        return factory
    return wrap


def check_shift(name: str, severity: int | None = None) -> tuple[str, int | None]:
    """``(name, severity)`` if ``name`` is registered and takes ``severity`` (the one validation
    of a shift's name and severity), else a ConfigError with the closest names / valid severities."""
    _load_builtin()
    if name not in _SHIFTS:
        raise ConfigError(did_you_mean("shift", name, sorted(_SHIFTS), "`shiftbench list shifts` shows them"))
    _, severities, _ = _SHIFTS[name]
    if severities is None and severity is not None:
        raise ConfigError(f"shift {name!r} has no severities; got severity {severity!r} (leave it out)")
    if severities is not None and (isinstance(severity, bool) or severity not in severities):
        raise ConfigError(f"shift {name!r}: severity {severity!r} is not one of {', '.join(map(str, severities))}")
    return name, severity


def get_shift(name: str, severity: int | None = None) -> Shift:
    """The registered shift ``name`` at ``severity`` (checked by :func:`check_shift`)."""
    check_shift(name, severity)
    factory, _, _ = _SHIFTS[name]
    return factory(severity)


def list_shifts() -> dict[str, str]:
    _load_builtin()
    return {name: desc for name, (_, _, desc) in sorted(_SHIFTS.items())}


def _load_builtin() -> None:

    for module in ("shiftbench.shifts.corruptions", "shiftbench.shifts.adversarial", "shiftbench.shifts.noise2net",
                   "shiftbench.shifts.greyscale"):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
