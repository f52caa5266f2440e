"""Resolution sweep: a model's accuracy as a function of its test resolution.

Touvron et al. 2019 ("Fixing the train-test resolution discrepancy", FixRes) show that the
usual pipeline -- ``RandomResizedCrop`` at train time, resize + centre crop at test time --
makes objects look *larger* at test time than during training, so a model is often more
accurate when tested at a *higher* resolution than it was trained at (and worse below it).
:func:`resolution_sweep` measures that curve: the model is evaluated at each test resolution
``r`` (the side of the centre crop fed to the network) with

* ``adjust_resize_ratio=True`` (default): ``resize = round(r / crop_pct)``, keeping the model's
  own resize-to-crop ratio (timm's ``crop_pct``, 0.875 for the classic 256 -> 224), so the
  crop shows the same part of the image at every resolution and only the apparent object size
  (in pixels) changes;
* ``adjust_resize_ratio=False``: ``resize = r`` (the crop is the whole centre square).

Interpolation, mean and std stay the model's own. At the model's native input size and with
the adjustment, the preprocessing is exactly the model's, so that row reproduces its ordinary
result. Each resolution is stored under its own model name ``<name>@res<r>`` (and its own
preprocessing), so the store keeps the points apart and a finished point is not recomputed.
Networks with global pooling take any resolution; models with a fixed input size (e.g. many
ViTs) fail at the others, and those rows carry the error instead of a number.

The sweep is a study (:mod:`shiftbench.studies`): :class:`ResolutionConfig` describes it,
:class:`ResolutionStudy` runs it (``run_study(config, store)``), and :func:`resolution_sweep`
is the one-call form. It is kept in the results store as the study ``resolution`` /
``<model>__<setting>-<hash>`` (:func:`~shiftbench.studies.base.study_name`; the table's
``.attrs["study"]``; one row per resolution, replaced by a re-run), which the report's
"Resolution sweeps" section draws. An interrupted sweep resumes: finished resolutions are
finished keys of the engine and are not recomputed.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from shiftbench.errors import ConfigError, ModelError
from shiftbench.models import LoadedModel, load_model
from shiftbench.store.store import Store
from shiftbench.studies.base import Study, StudyResult, as_store, register_study, stored_study_name

RESOLUTIONS = (64, 128, 224, 288, 320, 384, 512, 768)
#: the largest test resolution a sweep accepts (a 4096 x 4096 float32 image is 192 MiB already)
MAX_RESOLUTION = 4096
COLUMNS = ["model", "resolution", "input_size", "resize", "crop_pct", "accuracy", "top5", "n_examples", "best"]
#: Columns after :data:`COLUMNS` in every sweep (and its stored study).
STUDY_COLUMNS = ["error", "base_model", "setting", "native_resolution", "adjust_resize_ratio"]
STUDY_KIND = "resolution"


def resolution_preprocessing(base: Any, resolution: int, adjust_resize_ratio: bool = True) -> Any:
    """``base`` (a :class:`~shiftbench.models.Preprocessing`) at test resolution ``resolution``.

    >>> from shiftbench.models import Preprocessing
    >>> p = resolution_preprocessing(Preprocessing(input_size=224, resize=256), 288)
    >>> p.input_size, p.resize
    (288, 329)
    >>> resolution_preprocessing(Preprocessing(), 288, adjust_resize_ratio=False).resize
    288

    A non-square input (a timm config's ``(H, W)``) is swept as square ``resolution`` crops,
    except at its own width, where the model's own input is kept.
    """
    if int(resolution) != resolution or resolution < 1:
        raise ConfigError(f"resolution must be a positive integer, got {resolution!r}")
    r = int(resolution)
    if not adjust_resize_ratio:
        resize = r
    elif r == base.input_size:
        resize = base.resize
    else:
        resize = max(r, round(r / base.crop_pct))
    square = {f.name: None for f in dataclasses.fields(base) if f.name in ("input_height", "resize_height")}
    if square and r == base.input_size:
        square = {}                  # the model's own (possibly non-square) input at its own resolution
    return dataclasses.replace(base, input_size=r, resize=resize, **square)


@dataclass(frozen=True)
class ResolutionConfig:
    """One resolution sweep: ``model`` (a spec or a loaded model) on one ``setting`` at each of
    ``resolutions``; ``load_kwargs`` go to :func:`shiftbench.models.load_model`,
    ``evaluate_kwargs`` to :func:`shiftbench.evaluate` (see :func:`resolution_sweep`)."""

    model: Any
    setting: str
    resolutions: Sequence[int] = RESOLUTIONS
    data_root: str | Path = "."
    adjust_resize_ratio: bool = True
    load_kwargs: Mapping[str, Any] = field(default_factory=dict)
    evaluate_kwargs: Mapping[str, Any] = field(default_factory=dict)


@register_study
class ResolutionStudy(Study):
    """Accuracy against test resolution (Touvron et al. 2019); the report section ``resolution``."""

    kind, config_type, section = STUDY_KIND, ResolutionConfig, "resolution"
    description = "a model's accuracy at each test resolution (FixRes)"

    def run(self, config: ResolutionConfig, store: str | Path | Store | None = None) -> StudyResult:
        from shiftbench.engine.runner import evaluate  # deferred: loads Pillow, loads pyarrow

        model, setting, resolutions = config.model, config.setting, config.resolutions
        adjust = bool(config.adjust_resize_ratio)
        res = [int(r) for r in resolutions]
        if not res or any(r < 1 or r != q for r, q in zip(res, resolutions)):
            raise ConfigError(f"resolutions must be positive integers, got {tuple(resolutions)!r}")
        if len(set(res)) != len(res):
            raise ConfigError(f"resolutions has repeated values: {tuple(resolutions)!r}")
        if max(res) > MAX_RESOLUTION:      # before any work: 100000 px would be a 120 GB image
            r = max(res)
            raise ConfigError(f"resolution {r} is above {MAX_RESOLUTION}: one {r}x{r} RGB image is "
                              f"{r * r * 12 / 2**30:,.1f} GiB as float32; give resolutions up to {MAX_RESOLUTION}, "
                              "e.g. --resolutions 224,288,384")
        if not isinstance(setting, str):
            raise ConfigError("resolution_sweep takes one setting name; loop over settings for several")
        if model is None or not isinstance(model, str | LoadedModel):
            raise ConfigError(f"model must be a spec string or a LoadedModel, got {type(model).__name__}")
        base = model if isinstance(model, LoadedModel) else load_model(model, **dict(config.load_kwargs or {}))
        evaluate_kwargs = {"progress": False, **dict(config.evaluate_kwargs)}
        target = as_store(store)
        rows = []
        native = int(base.preprocessing.input_size)
        for r in res:
            pre = resolution_preprocessing(base.preprocessing, r, adjust)
            variant = dataclasses.replace(base, name=f"{base.name}@res{r}", preprocessing=pre,
                                          metadata={**base.metadata, "test_resolution": r})
            row: dict[str, Any] = {"model": variant.name, "resolution": r, "input_size": pre.input_size,
                                   "resize": pre.resize, "crop_pct": pre.crop_pct, "error": None,
                                   "base_model": base.name, "setting": setting, "native_resolution": native,
                                   "adjust_resize_ratio": adjust}
            try:
                out = evaluate(variant, setting, data_root=config.data_root, store=target, **evaluate_kwargs)
                row.update(out.iloc[0][["accuracy", "top5", "n_examples"]].to_dict())
            except ModelError as exc:  # the engine names a failure inside the model; its cause is the reason
                cause = exc.__cause__
                if not isinstance(cause, (RuntimeError, AssertionError, ValueError)):
                    raise
                row.update(accuracy=float("nan"), top5=float("nan"), n_examples=0,  # cannot take this input size
                           error=f"{type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''}")
            rows.append(row)
        frame = pd.DataFrame(rows)
        frame["best"] = False
        scored = frame["accuracy"].notna()
        best_resolution = None
        if scored.any():
            best = frame.loc[scored].sort_values(["accuracy", "resolution"], ascending=[False, True]).index[0]
            frame.loc[best, "best"] = True
            best_resolution = int(frame.loc[best, "resolution"])
        frame = frame[COLUMNS + STUDY_COLUMNS].copy()
        name = stored_study_name(target, STUDY_KIND, (base.name, setting), {"model": base.name, "setting": setting})
        meta = {"model": base.name, "setting": setting, "resolutions": res, "native_resolution": native,
                "adjust_resize_ratio": adjust, "best_resolution": best_resolution,
                "limit": evaluate_kwargs.get("limit"), "data_root": str(config.data_root)}
        result = StudyResult(STUDY_KIND, name, frame, meta)
        result.write(target)
        if best_resolution is not None:
            frame.attrs["best_resolution"] = best_resolution
        frame.attrs["study"] = name
        return result


def resolution_sweep(
    model: Any,
    setting: str,
    resolutions: Sequence[int] = RESOLUTIONS,
    *,
    data_root: str | Path = ".",
    store: Any = None,
    adjust_resize_ratio: bool = True,
    load_kwargs: Mapping[str, Any] | None = None,
    **evaluate_kwargs: Any,
) -> pd.DataFrame:
    """Evaluate ``model`` on ``setting`` at each test resolution (module docstring).

    Parameters
    ----------
    model:
        A model spec (``timm:resnet50.a1_in1k``, ``python:mod:fn``, ...) or a loaded
        :class:`~shiftbench.models.LoadedModel`; it is loaded once and re-wrapped per
        resolution (same weights, new preprocessing, name ``<name>@res<r>``).
    setting:
        One evaluation setting (``val``, ``folder:<dir>``, ...).
    resolutions:
        Test resolutions (crop sides); default 64, 128, 224, 288, 320, 384, 512, 768.
    data_root, store, evaluate_kwargs:
        Passed to :func:`shiftbench.evaluate` (``batch_size``, ``limit``, ``device``, ...).
    load_kwargs:
        Passed to :func:`shiftbench.models.load_model` (``pretrained``, ``arch``, ...).

    Returns
    -------
    DataFrame with one row per resolution: ``model, resolution, input_size, resize, crop_pct,
    accuracy, top5, n_examples, best`` (``best`` marks the most accurate resolution, the
    smallest on ties; ``.attrs["best_resolution"]`` holds it), ``error`` (why the model could
    not run at a resolution, else None), ``base_model``, ``setting``, ``native_resolution``
    (the model's own input size) and ``adjust_resize_ratio``. The same table is written to the
    store as the study ``resolution`` / ``<base model>__<setting>-<hash>`` (replacing an earlier
    one; ``.attrs["study"]`` holds the name).
    """
    config = ResolutionConfig(model, setting, resolutions, data_root=data_root,
                              adjust_resize_ratio=adjust_resize_ratio, load_kwargs=dict(load_kwargs or {}),
                              evaluate_kwargs=evaluate_kwargs)
    return ResolutionStudy().run(config, store).frame
