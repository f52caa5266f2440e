"""Named evaluation settings = a dataset x a view (x an aggregation), with the reference names.

The names are those of the published testbed (``imagenet-reference``), so results from
``shiftbench eval`` merge cell for cell with it: ``val``, ``val-on-imagenet-a-classes``,
``imagenetv2-matched-frequency-format-val``, ``objectnet-1.0-beta``, ``imagenet-a``,
``imagenet-vid-robust_pm10``, ``imagenet-c.fog.3_on-disk``, ... plus ``cifar10``,
``cifar10.1`` and ``cifar10.2``. Settings on the same dataset share one forward pass: ``val``
and the five ``val-on-*-classes`` settings decode every validation image once.

Class-subset settings score by the published protocol (logits restricted to the subset) by
default; ``convention="argmax-all"`` scores by argmax over all classes (stricter). The
convention is stored beside every number.

Custom data: ``folder:<dir>``, ``manifest:<file.csv|parquet>``, ``hf:<saved dataset dir>`` and
``composite:<spec.json|yaml>`` (SI-SCORE-style object compositing, :mod:`shiftbench.datasets.composite`)
are settings too (full label space, top-1/top-5). ``folder:<dir>?classes=imagenet-1k`` (or
``manifest:<file>?classes=...``) declares the label space the class names belong to; a folder
of ImageNet wnid or class-name sub-folders is recognised as such with an ImageNet model anyway
(:func:`shiftbench.datasets.image_folder`). ``manifest:<file>?groups=colA,colB`` groups the
examples by those metadata columns and stores worst-group accuracy beside the average
(:mod:`shiftbench.views.groups`); options combine with ``&``. A folder in a bucket is
``folder:s3://bucket/prefix`` (any fsspec URI; :mod:`shiftbench.datasets.remote`), named by its URI.

Synthetic shifts are generated on the fly from the decoded images (one decode for every shift):
``imagenet-c.<corruption>.<severity>_in-memory``, ``greyscale`` and ``pgd.<norm>.eps<eps>`` on
ImageNet validation (the reference names), and ``<setting>+<shift>[.<severity>]`` for any
setting, e.g. ``cifar10+fog.3`` or ``folder:/data/digits+gaussian_noise.5``.

Zero-shot through a class map: ``<setting>@classmap:<shipped map or .csv/.json file>`` scores a
model trained on another label space (max-logit pooling, :mod:`shiftbench.views.classmap`), e.g.
``cifar10@classmap:imagenet-to-cifar10`` (registered for CIFAR-10/10.1/10.2) or
``folder:/data/x@classmap:/maps/m.csv``.

A folder is one setting whatever the spelling of its path: where a ``folder:`` setting enters
an evaluation (:func:`~shiftbench.setting_names.canonical_setting_name`, called by
``EvalRequest.build``), its path becomes
the absolute path of the folder read, symlinks resolved, so ``folder:val``, ``folder:./val``,
``folder:/abs/val/`` and a link to it are one setting name and one key. The commands that look a
setting up in a store canonicalise the name given the same way (from the working directory).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shiftbench.errors import ConfigError, did_you_mean
from shiftbench.setting_names import (  # noqa: F401  (canonical_setting_name, CANONICAL_PREFIXES: re-exported)
    CANONICAL_PREFIXES,
    canonical_setting_name,
    is_data_uri,
    split_query,
)
from shiftbench.shifts import check_shift, list_shifts
from shiftbench.shifts.corruptions import CORRUPTIONS, SEVERITIES
from shiftbench.views import (
    CONVENTIONS,  # noqa: F401  (re-exported)
    FullView,
    check_convention,  # noqa: F401  (re-exported: EvalRequest checks its convention here)
    imagenet_a_view,
    imagenet_r_view,
    objectnet_view,
    video_view,
)
from shiftbench.views.classmap import ClassMapSpec

CUSTOM_PREFIXES = ("folder", "manifest", "hf", "composite")


@dataclass(frozen=True)
class Setting:
    """One evaluation setting.

    ``dataset`` names a registered dataset (``dataset_args`` are passed to its builder);
    ``view`` builds the :class:`~shiftbench.views.base.View` for a subset convention;
    ``pm_k`` makes the accuracy the pm-k accuracy over the dataset's pm-sets.
    """

    name: str
    dataset: str
    view: Callable[[str], Any]
    description: str
    dataset_args: tuple[tuple[str, Any], ...] = ()
    pm_k: int | None = None
    uses_convention: bool = False
    #: a synthetic shift applied on the fly: (registered shift name, severity or None)
    shift: tuple[str, int | None] | None = None

    @property
    def dataset_key(self) -> tuple[str, tuple[tuple[str, Any], ...]]:
        """Settings with the same dataset key share one forward pass."""
        return (self.dataset, self.dataset_args)


_SETTINGS: dict[str, Setting] = {}


def register_setting(setting: Setting) -> Setting:
    _SETTINGS[setting.name] = setting
    return setting


def _full(_: str):

    return FullView()


def _subset(which: str):
    def build(convention: str):

        return (imagenet_a_view if which == "a" else imagenet_r_view)(convention)
    return build


def _objectnet(in_source: bool):
    def build(convention: str):

        return objectnet_view(convention, targets_in_source_space=in_source)
    return build


def _video(which: str, in_source: bool):
    def build(_: str):

        return video_view(which, targets_in_source_space=in_source)
    return build


def _register_defaults() -> None:
    reg = register_setting
    reg(Setting("val", "imagenet-val", _full, "ImageNet validation, 1000 classes"))
    for short, name in (("a", "imagenet-a"), ("r", "imagenet-r")):
        reg(Setting(f"val-on-{name}-classes", "imagenet-val", _subset(short),
                    f"ImageNet validation restricted to the 200 {name} classes", uses_convention=True))
        reg(Setting(name, name, _subset(short), f"{name} (200 classes)", uses_convention=True))
    reg(Setting("val-on-objectnet-classes", "imagenet-val", _objectnet(True),
                "ImageNet validation on the 125 ImageNet classes that map to ObjectNet's 113", uses_convention=True))
    reg(Setting("objectnet-1.0-beta", "objectnet", _objectnet(False),
                "ObjectNet 1.0, 113 classes overlapping ImageNet, 2 px border crop", uses_convention=True))
    reg(Setting("imagenet-sketch", "imagenet-sketch", _full, "ImageNet-Sketch, 1000 classes"))
    for variant, setting in (("matched-frequency", "imagenetv2-matched-frequency-format-val"),
                             ("threshold0.7", "imagenetv2-threshold-0.7-format-val"),
                             ("top-images", "imagenetv2-top-images-format-val")):
        reg(Setting(setting, f"imagenetv2-{variant}", _full, f"ImageNetV2 {variant}, 10,000 images"))
    for which, short in (("imagenet-vid-robust", "vid-robust"), ("ytbb-robust", "ytbb-robust")):
        reg(Setting(f"val-on-{short}-classes", "imagenet-val", _video(which, True),
                    f"ImageNet validation on the classes of {which}'s superclasses (superclass projection)"))
        for k in (0, 10):
            reg(Setting(f"{which}_pm{k}", which, _video(which, False),
                        f"{which}: pm-{k} accuracy over its pm-sets (superclass projection)", pm_k=k))
    for corruption in CORRUPTIONS:
        for severity in SEVERITIES:
            reg(Setting(f"imagenet-c.{corruption}.{severity}_on-disk", "imagenet-c", _full,
                        f"ImageNet-C {corruption} severity {severity}, from disk",
                        dataset_args=(("corruption", corruption), ("severity", severity))))
    for name in ("cifar10", "cifar10.1", "cifar10.2"):
        reg(Setting(name, name, _full, f"{name.upper()} test set, 10 classes"))
    for corruption in CORRUPTIONS:
        for severity in SEVERITIES:
            reg(Setting(f"imagenet-c.{corruption}.{severity}_in-memory", "imagenet-val", _full,
                        f"ImageNet validation with {corruption} at severity {severity}, generated on the fly",
                        shift=(corruption, severity)))
    reg(Setting("greyscale", "imagenet-val", _full, "ImageNet validation in greyscale", shift=("greyscale", None)))
    for norm, eps in (("linf", "0.5"), ("linf", "2"), ("l2", "0.1"), ("l2", "0.5")):
        name = f"pgd.{norm}.eps{eps}"
        reg(Setting(name, "imagenet-val", _full, f"ImageNet validation under untargeted PGD, {norm} eps {eps}"
                    + ("/255" if norm == "linf" else ""), shift=(name, None)))


_register_defaults()


def _classmap(spec: Any) -> Callable[[str], Any]:
    def build(_: str):
        return spec  # a ClassMapSpec: the runner binds it to the model's and the dataset's classes
    return build


def classmap_setting(base: Setting, ref: str, check: bool = True) -> Setting:
    """``<setting>@classmap:<shipped map or file>``: ``base`` scored zero-shot through a class map
    (max-logit pooling from the model's classes; :class:`~shiftbench.views.classmap.ClassMapView`).
    ``check`` reads the map file now, so a missing or malformed file fails before any model runs."""

    if base.pm_k is not None or base.view is not _full:
        raise ConfigError(f"{base.name!r} is scored through its own view; a class map applies to settings "
                          f"in a dataset's own label space (e.g. cifar10, folder:<dir>)")
    spec = ClassMapSpec(ref).check() if check else ClassMapSpec(ref)
    return Setting(f"{base.name}@classmap:{ref}", base.dataset, _classmap(spec),
                   f"{base.description}, scored through the class map {ref} (max-logit pooling)",
                   base.dataset_args, None, False, base.shift)


for _base in ("cifar10", "cifar10.1", "cifar10.2"):
    register_setting(classmap_setting(_SETTINGS[_base], "imagenet-to-cifar10", check=False))


def pm_setting(which: str, k: int) -> Setting:
    """``<which>_pm<k>`` for any k >= 0 (pm-0 and pm-10 are registered)."""
    short = "imagenet-vid-robust" if which.startswith("imagenet-vid") else "ytbb-robust"
    return Setting(f"{short}_pm{k}", short, _video(short, False), f"{short}: pm-{k} accuracy", pm_k=k)


def custom_setting(name: str) -> Setting:
    """A setting over user data: ``folder:<dir>``, ``manifest:<file>``, ``hf:<dir>`` or ``composite:<spec>``."""
    prefix, _, path = name.partition(":")
    if prefix not in CUSTOM_PREFIXES or not path:
        raise ConfigError(f"custom setting {name!r}: use folder:<dir>, manifest:<file.csv|parquet>, hf:<dir> "
                          "or composite:<spec.json|yaml>")
    if prefix == "composite":  # the dataset `composite` is registered on first use
        from shiftbench.datasets.composite import register_composite_dataset  # deferred: loads Pillow

        register_composite_dataset()
    path, options = _query(name, prefix, path)
    if prefix != "folder" and is_data_uri(path):
        raise ConfigError(f"custom setting {name!r}: {prefix}: settings read local files; of custom data only a "
                          "folder of images is read from a bucket (folder:s3://bucket/prefix)")
    described = "".join(f", {k} {v}" for k, v in options)
    return Setting(name, prefix, _full, f"user data ({prefix}) at {path}{described}",
                   dataset_args=(("path", path), *options))


#: ``<prefix>:<path>?<key>=<value>`` options of custom settings, passed to the dataset's builder.
CUSTOM_OPTIONS = {"folder": ("classes",), "manifest": ("classes", "groups")}
#: an example value of each option, for messages
_OPTION_EXAMPLES = {"classes": "?classes=imagenet-1k", "groups": "?groups=label"}


def _query(name: str, prefix: str, path: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """Split ``DIR?classes=imagenet-1k`` into the path and its options (``?a=x&b=y``); a ``?``
    not followed by ``key=value`` pairs is part of the path."""
    head, pairs = split_query(path)
    if not pairs:
        return path, ()
    allowed = CUSTOM_OPTIONS.get(prefix, ())
    for key, value in pairs:
        if key not in allowed:
            takes = ", ".join(f"?{k}=" for k in allowed) or "no ?options"
            where = f"{prefix}: settings take {takes}"
            raise ConfigError(f"custom setting {name!r}: " + did_you_mean("option", key, allowed, where))
        if not value:
            raise ConfigError(f"custom setting {name!r}: ?{key}= needs a value, e.g. {_OPTION_EXAMPLES[key]}")
        if key == "classes" and not value.lower().endswith((".txt", ".json")):
            from shiftbench.datasets.manifest import known_label_space  # deferred: loads Pillow

            known_label_space(value)  # an unknown name fails before any model is loaded
    return head, tuple(pairs)


def parse_shift(text: str) -> tuple[str, int | None]:
    """``gaussian_noise.3`` -> ('gaussian_noise', 3); ``greyscale`` / ``pgd.linf.eps2`` -> (name, None);
    checked against the shift registry (:func:`~shiftbench.shifts.check_shift`: nothing is built)."""

    if text in list_shifts():                 # names with dots and digits: pgd.l2.eps0.5
        return check_shift(text, None)
    head, _, tail = text.rpartition(".")
    return check_shift(*((head, int(tail)) if head and tail.isdigit() else (text, None)))


def shifted_setting(base: Setting, shift_text: str) -> Setting:
    """``<setting>+<shift>[.<severity>]``: any setting with a synthetic shift applied on the fly."""
    if base.shift is not None:
        raise ConfigError(f"{base.name!r} already has a shift; combine one shift per setting")
    shift = parse_shift(shift_text)
    return Setting(f"{base.name}+{shift_text}", base.dataset, base.view, f"{base.description}, with {shift_text}",
                   base.dataset_args, base.pm_k, base.uses_convention, shift)


def get_setting(name: str) -> Setting:
    """The registered setting ``name`` (or a pm-k / custom / shifted one), else ConfigError with the closest names."""
    if name in _SETTINGS:
        return _SETTINGS[name]
    if "@classmap:" in name and "+" not in name.rpartition("@classmap:")[2]:
        base, _, ref = name.rpartition("@classmap:")
        return classmap_setting(get_setting(base), ref)
    if "+" in name:
        base, _, shift_text = name.rpartition("+")
        return shifted_setting(get_setting(base), shift_text)
    head, _, tail = name.partition("_pm")
    if head in ("imagenet-vid-robust", "ytbb-robust") and tail.isdigit():
        return pm_setting(head, int(tail))
    if name.partition(":")[0] in CUSTOM_PREFIXES:
        return custom_setting(name)
    raise ConfigError(did_you_mean("setting", name, list(_SETTINGS),
                                   "`shiftbench list settings` shows them all"))


def list_settings() -> dict[str, str]:
    """Registered setting names and descriptions."""
    return {name: s.description for name, s in _SETTINGS.items()}

