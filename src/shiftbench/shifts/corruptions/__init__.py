"""The 19 ImageNet-C corruptions (Hendrycks & Dietterich 2019) in batched torch.

``noise``: gaussian, shot, impulse and speckle noise. ``blur``: gaussian, defocus, glass,
motion and zoom blur. ``weather``: snow, frost, fog, spatter. ``digital``: brightness, contrast,
saturate, elastic transform, pixelate, JPEG. Each registers ``<name>`` at severities 1-5 with
the reference implementation's parameters (``imagecorruptions``); importing this package
registers them all.
"""
from shiftbench.shifts.corruptions import blur, digital, noise, weather  # noqa: F401  (registers)

NAMES = (
    "gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur", "glass_blur", "motion_blur", "zoom_blur",
    "snow", "frost", "fog", "brightness", "contrast", "elastic_transform", "pixelate", "jpeg_compression",
    "speckle_noise", "gaussian_blur", "spatter", "saturate",
)
