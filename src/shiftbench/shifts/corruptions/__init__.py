"""The 19 ImageNet-C corruptions (Hendrycks & Dietterich 2019) in batched torch.

``noise``: gaussian, shot, impulse and speckle noise. ``blur``: gaussian, defocus, glass,
motion and zoom blur. ``weather``: snow, frost, fog, spatter. ``digital``: brightness, contrast,
saturate, elastic transform, pixelate, JPEG. Each registers ``<name>`` at severities 1-5 with
the reference implementation's parameters (``imagecorruptions``); importing this package
registers them all.

:data:`CORRUPTIONS` is the one list of their names (the 15 of the benchmark, then the 4 extra
ones, in the paper's order): the settings (``imagenet-c.<name>.<severity>_*``) and the on-disk
ImageNet-C loader import it from here.
"""
from shiftbench.shifts.corruptions import blur, digital, noise, weather  # noqa: F401  (registers)

#: The 15 ImageNet-C corruptions plus the 4 extra ones, in the order of Hendrycks & Dietterich 2019.
CORRUPTIONS = (
    "gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur", "glass_blur", "motion_blur", "zoom_blur",
    "snow", "frost", "fog", "brightness", "contrast", "elastic_transform", "pixelate", "jpeg_compression",
    "speckle_noise", "gaussian_blur", "spatter", "saturate",
)
#: The corruptions' severities (every one registers these)
SEVERITIES = (1, 2, 3, 4, 5)
NAMES = CORRUPTIONS  # the former name, kept for callers

__all__ = ["CORRUPTIONS", "NAMES", "SEVERITIES"]
