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


def export_results(frame: pd.DataFrame, path: str | Path) -> Path:
    """Write the results table to ``.csv`` or ``.parquet``."""
    path = Path(path)
    flat = frame.copy()
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
