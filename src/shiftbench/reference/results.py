"""The results table of a store, placed beside the reference testbeds.

A model evaluated as ``timm:NAME`` is stored under ``NAME``, the row name of
``timm-reference``; a torchvision model under its imagenet-reference name where one exists
(``resnet50``). For every finished (model, setting) that a reference testbed also has, the
table shows the reference accuracy and the difference: reproducing the published number is
the first check that data and preprocessing are right.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from shiftbench.errors import ConfigError
from shiftbench.reference import load_testbed
from shiftbench.store import Store

REFERENCES = ("timm-reference", "imagenet-reference")


def results_with_reference(store: str | Path) -> pd.DataFrame:
    """``Store.results()`` plus ``reference``, ``reference_accuracy`` and ``reference_delta``."""
    frame = Store(store).results()
    frame["reference"] = None
    frame["reference_accuracy"] = np.nan
    frame["reference_delta"] = np.nan
    if frame.empty:
        return frame
    for name in REFERENCES:
        tb = load_testbed(name)
        for i, r in frame.iterrows():
            if frame.at[i, "reference"] is not None:
                continue
            if r["model"] in tb.accuracies.index and r["setting"] in tb.accuracies.columns:
                ref = tb.accuracies.at[r["model"], r["setting"]]
                if np.isfinite(ref):
                    frame.at[i, "reference"] = name
                    frame.at[i, "reference_accuracy"] = float(ref)
                    frame.at[i, "reference_delta"] = float(r["accuracy"]) - float(ref)
    return frame


#: Conventions an exported table prefers where a (model, setting) was scored under several: the
#: published class-subset protocol (``restricted``) and the settings without a subset (``full``),
#: as ``Testbed.from_store`` picks by default.
EXPORT_CONVENTIONS = ("restricted", "full")


def one_row_per_setting(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (current results, one per model, setting and convention) with one row per (model,
    setting): where a setting was also scored under ``--convention argmax-all``, the
    :data:`EXPORT_CONVENTIONS` row. Row order is kept."""
    if frame.empty or not {"model", "setting", "convention"} <= set(frame.columns):
        return frame
    other = ~frame["convention"].isin(EXPORT_CONVENTIONS)
    ranked = frame[["model", "setting"]].assign(_other=other.to_numpy()).sort_values("_other", kind="stable")
    keep = ranked.drop_duplicates(["model", "setting"], keep="first").index
    return frame.loc[frame.index.isin(keep)]


def export_results(frame: pd.DataFrame, path: str | Path) -> Path:
    """Write the results table to ``.csv`` or ``.parquet``: one row per (model, setting)
    (:func:`one_row_per_setting`), so the file loads back as a testbed (``fit --testbed FILE``)."""
    path = Path(path)
    flat = one_row_per_setting(frame).copy()
    for col in flat.columns:
        if flat[col].map(lambda v: isinstance(v, (list, dict))).any():
            flat[col] = flat[col].map(lambda v: v if not isinstance(v, (list, dict)) else str(v))
    if path.suffix.lower() == ".csv":
        flat.to_csv(path, index=False)
    elif path.suffix.lower() in (".parquet", ".pq"):
        flat.to_parquet(path, index=False)
    else:
        raise ConfigError(f"{path}: use a .csv or .parquet file name")
    return path
