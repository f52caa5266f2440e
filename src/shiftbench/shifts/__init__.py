"""Synthetic distribution shifts on [0, 1] image batches (corruptions, PGD, Noise2Net, ...)."""
from shiftbench.shifts.base import (
    Shift,
    check_shift,
    get_shift,
    image_generator,
    image_seed,
    list_shifts,
    register_shift,
)

__all__ = ["Shift", "check_shift", "get_shift", "image_generator", "image_seed", "list_shifts", "register_shift"]
