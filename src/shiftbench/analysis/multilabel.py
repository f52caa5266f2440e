"""Multi-label shifts in the form of DeepFashion Remixed (Hendrycks et al. 2021, *The Many Faces
of Robustness*, §3 and its DFR table): per model the IID mAP, the mAP on each OOD test set (one
attribute changed at a time) and the OOD average; and how closely OOD mAP tracks IID mAP.

Input is long-form: one row per model x split with the split's name and its mAP in percent
(the rows of a ``multilabel`` study, or a results store's ``map`` column). Pure pandas/numpy.

* :func:`dfr_table` - the paper's table: ``IID``, one column per OOD split, ``OOD average`` (the
  unweighted mean over the OOD splits, as the paper averages its eight sets), rows sorted by IID.
* :func:`dfr_trends` - per OOD split, the least-squares line ``logit(OOD mAP) = a logit(IID mAP)
  + b`` over the models (:func:`~shiftbench.analysis.trend.fit_trend` on the arrays: the same
  scale as the accuracy trends, since mAP lies in (0, 1) too), its r², Pearson's r of the raw
  values, and the mean drop ``IID - OOD`` in points. The paper's finding, "OOD mAP mostly tracks
  IID mAP", reads as high r with a slope near or above 1.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from shiftbench.errors import DataError

IID = "IID"
OOD_AVERAGE = "OOD average"


def _check(frame: pd.DataFrame, id_split: str, split: str, value: str) -> pd.DataFrame:
    missing = [c for c in ("model", split, value) if c not in frame.columns]
    if missing:
        raise DataError(f"multi-label table: no column {missing[0]!r} (columns: {', '.join(map(str, frame.columns))})")
    if id_split not in set(frame[split]):
        raise DataError(f"multi-label table: no rows for the in-distribution split {id_split!r} "
                        f"(splits: {', '.join(sorted(map(str, set(frame[split]))))})")
    return frame[frame[value].notna()]


def dfr_table(frame: pd.DataFrame, *, id_split: str = "id-test", split: str = "split",
              value: str = "map") -> pd.DataFrame:
    """Models x (``IID``, each OOD split, ``OOD average``), in percent, sorted by IID (best first).

    >>> long = pd.DataFrame({"model": ["a", "a", "a", "b", "b", "b"],
    ...                      "split": ["id-test", "zoom=large", "scale=small"] * 2,
    ...                      "map": [80.0, 60.0, 70.0, 70.0, 50.0, 64.0]})
    >>> dfr_table(long).round(1).to_dict("index")["a"]
    {'IID': 80.0, 'scale=small': 70.0, 'zoom=large': 60.0, 'OOD average': 65.0}
    """
    frame = _check(frame, id_split, split, value)
    wide = frame.pivot_table(index="model", columns=split, values=value, aggfunc="last")
    ood = sorted(c for c in wide.columns if c != id_split)
    table = wide[[id_split, *ood]].rename(columns={id_split: IID})
    table[OOD_AVERAGE] = table[ood].mean(axis=1, skipna=False)
    table.columns.name = None
    return table.sort_values(IID, ascending=False)


def dfr_trends(frame: pd.DataFrame, *, id_split: str = "id-test", split: str = "split",
               value: str = "map", scale: str = "logit") -> pd.DataFrame:
    """Per OOD split (and the OOD average): ``n_models, slope, intercept, r2`` of the fit of OOD
    mAP on IID mAP in ``scale`` space, Pearson ``r`` and ``mean_drop`` (IID - OOD, points).
    Splits with fewer than 3 models are reported with NaN fit values."""
    from shiftbench.analysis.trend import fit_trend  # deferred: loads scipy

    table = dfr_table(frame, id_split=id_split, split=split, value=value)
    rows = []
    for col in [c for c in table.columns if c != IID]:
        both = table[[IID, col]].dropna()
        row = {"split": col, "n_models": len(both), "mean_drop": float((both[IID] - both[col]).mean())
               if len(both) else np.nan}
        if len(both) >= 3 and both[IID].std() > 0:
            fit = fit_trend(x=both[IID].to_numpy(), y=both[col].to_numpy(), scale=scale)
            row.update(slope=fit.slope, intercept=fit.intercept, r2=fit.r2,
                       r=float(np.corrcoef(both[IID], both[col])[0, 1]))
        else:
            row.update(slope=np.nan, intercept=np.nan, r2=np.nan, r=np.nan)
        rows.append(row)
    return pd.DataFrame(rows, columns=["split", "n_models", "slope", "intercept", "r2", "r", "mean_drop"])
