"""The testbed: a models x settings table of accuracies, with sizes and model metadata.

A :class:`Testbed` is what every analysis reads (Taori et al. 2020 call the collection of
evaluated models a *testbed*). It holds three aligned tables:

* ``accuracies`` - top-1 accuracy in percent (0-100), one row per model, one column per
  evaluation setting; ``NaN`` means "not evaluated" and is skipped (and counted) by analyses;
* ``sizes`` - the number of test examples behind each cell (for Clopper-Pearson intervals);
  ``NaN`` when unknown;
* ``metadata`` - per model: ``model_type`` (``STANDARD``, ``ROBUST_INTV``, ``LP_ADV``,
  ``MORE_DATA``, ...), ``arch`` and free-form ``tags``, plus any extra columns.

File format (CSV or Parquet, chosen by the extension). *Wide*: a ``model`` column, optional
metadata columns ``model_type``, ``arch``, ``tags`` (``;``-separated) and ``meta:<name>``,
optional size columns ``<setting>_dataset_size``, and every other column is a setting with
accuracies in percent. *Long*: columns ``model, setting, accuracy`` and optionally
``n_examples``, ``model_type``, ``arch``, ``tags``. :meth:`Testbed.save` writes the wide form.

Accuracies are percentages. A table whose accuracies all lie in [0, 1] (at least
:data:`FRACTION_MIN_VALUES` of them, not all zero) was almost surely written as fractions
(``0.76`` for 76%), so reading it is refused (:func:`check_percent`): ``fractions=True``
(``--fractions``) multiplies it by 100, ``fractions=False`` (``--percent``) accepts it as
percentages (a chance-level model at 0.1%). A table with percentages elsewhere but one column
entirely in [0, 1] is read as it is, with a note (ImageNet-A's ResNets genuinely score below 1%).

This module needs only numpy and pandas (no torch).

Example
-------
>>> import pandas as pd
>>> tb = Testbed.from_frame(pd.DataFrame({
...     "model": ["a", "b", "c"], "model_type": ["STANDARD"] * 3,
...     "val": [70.0, 75.0, 80.0], "v2": [58.0, 63.5, 69.0]}))
>>> tb.settings
['val', 'v2']
>>> tb.select(models=["a", "b"]).models
['a', 'b']
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from shiftbench.errors import ConfigError, DataError, did_you_mean
from shiftbench.model_types import MODEL_TYPES, UNKNOWN_TYPE  # noqa: F401  (MODEL_TYPES: part of this API)

METADATA_COLUMNS = ("model_type", "arch", "tags")
META_PREFIX = "meta:"
SIZE_SUFFIX = "_dataset_size"
ALL = "all"
#: what a testbed built from a results store can hold in its cells (all in percent)
STORE_METRICS = {"accuracy": "top-1 accuracy (%)", "top5": "top-5 accuracy (%)",
                 "map": "mAP (%) (mean average precision over classes with positives)",
                 "worst_group_accuracy": "worst-group accuracy (%) (the lowest accuracy over non-empty groups)"}
#: the stored count behind each metric's cells (``None``: no Clopper-Pearson size applies)
_METRIC_SIZES = {"accuracy": "n_examples", "top5": "n_examples", "map": None, "worst_group_accuracy": "worst_group_n"}
_METRIC_HINTS = {"map": "evaluate a multi-label manifest (a 'labels' column) first",
                 "worst_group_accuracy": "evaluate a manifest with groups, e.g. manifest:<file>?groups=<columns>, "
                                         "first"}
_DEFAULT_NA = ("", "NA", "N/A", "NaN", "nan", "null", "NULL", "None", "-nan", "#N/A")


def written_decimals(values: np.ndarray) -> np.ndarray:
    """Decimals each value is written with: those of its shortest round-trip representation
    (``76.13`` -> 2, ``76.1300048828125`` -> 13, ``76.0`` -> 0); ``NaN`` -> 0."""
    flat = np.asarray(values, dtype=float).ravel()
    out = np.zeros(flat.shape, dtype=int)
    for i, v in enumerate(flat):
        if np.isfinite(v):
            text = np.format_float_positional(v, trim="-")
            out[i] = len(text.partition(".")[2])
    return out.reshape(np.shape(values))


def agree_to_written_precision(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise: ``a`` and ``b`` are equal to the precision of the less precisely written.

    With ``d`` the fewer decimals of the two (:func:`written_decimals`), they agree when
    ``|a - b| <= 0.5 * 10**-d`` (so a table's 76.13 equals a float32 76.1300048828125, and
    76.13 differs from 76.16). ``NaN`` never agrees.

    >>> agree_to_written_precision(np.array([76.13, 76.13, 63.2]), np.array([76.1300048828125, 76.16, 63.21]))
    array([ True, False,  True])
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    d = np.minimum(written_decimals(a), written_decimals(b))
    with np.errstate(invalid="ignore"):
        return np.abs(a - b) <= 0.5 * 10.0 ** (-d.astype(float)) * (1 + 1e-9)


#: the fewest accuracies that, all in [0, 1], make a table (or arrays) read as fractions by mistake
FRACTION_MIN_VALUES = 2
#: how the refusal tells a user to go on (``{}``: the command-line switch, for tables read by the CLI)
FRACTIONS_FIX = "multiply them by 100, or pass fractions=True{} to convert them; if they really are percentages " \
                "below 1%, pass fractions=False{}"


def looks_like_fractions(values: object) -> bool:
    """Whether accuracies meant as percentages look like fractions: at least
    :data:`FRACTION_MIN_VALUES` finite values, all in [0, 1], not all zero (zeros read the same
    either way).

    >>> looks_like_fractions([0.76, 0.25]), looks_like_fractions([76.1, 0.25]), looks_like_fractions([0.5])
    (True, False, False)
    """
    v = np.asarray(values, dtype=float).ravel()
    v = v[np.isfinite(v)]
    return v.size >= FRACTION_MIN_VALUES and bool((v >= 0).all() and (v <= 1).all() and (v > 0).any())


def check_percent(values: np.ndarray, fractions: bool | None, what: str, *, switches: bool = True) -> np.ndarray:
    """``values`` (accuracies) in percent, checked at the boundary where a user hands them in.

    ``fractions=None`` (default): a DataError naming ``what`` when they look like fractions
    (:func:`looks_like_fractions`); ``True``: they are fractions, multiplied by 100 (a value
    outside [0, 1] is a DataError); ``False``: they are percentages, as given. ``switches``: the
    messages name the command-line switches too (``--fractions``, ``--percent``; not for arrays).

    >>> check_percent(np.array([0.76, 0.25]), True, "x").tolist()
    [76.0, 25.0]
    """
    values = np.asarray(values, dtype=float)
    if fractions is None:
        if looks_like_fractions(values):
            raise DataError(fraction_message(what, values, switches=switches))
        return values
    if fractions:
        finite = values[np.isfinite(values)]
        bad = finite[(finite < 0) | (finite > 1)]
        if bad.size:
            flag = " (--fractions)" if switches else ""
            raise DataError(f"{what}: fractions=True{flag} but {bad[0]:g} is outside [0, 1]; "
                            f"drop fractions=True{flag} if the accuracies are percentages")
        return values * 100.0
    return values


def fraction_message(what: str, values: np.ndarray, *, switches: bool = True) -> str:
    """The one-line refusal of accuracies that look like fractions (``what`` names where they are)."""
    finite = np.asarray(values, dtype=float)
    finite = finite[np.isfinite(finite)]
    top = float(finite.max())
    return (f"{what}: all {finite.size} accuracies lie between 0 and 1, so they look like fractions, but shiftbench "
            f"reads accuracies in percent (0-100): {top:g} would be {top:g}%, not {top * 100:g}%; "
            + FRACTIONS_FIX.format(*((" (--fractions)", " (--percent)") if switches else ("", ""))))


def _holds_booleans(column: pd.Series) -> bool:
    """Whether ``column`` is boolean, or holds a ``True``/``False`` among its values (pandas would
    take them as 1 and 0)."""
    if pd.api.types.is_bool_dtype(column.dtype):
        return True
    return column.dtype == object and any(isinstance(v, bool | np.bool_) for v in column)


def _checked_sizes(sizes: pd.DataFrame, source: str, column: str = "{}" + SIZE_SUFFIX) -> pd.DataFrame:
    """``sizes`` (example counts per model and setting, as read from a table) as floats, or a
    DataError naming ``source``, the column (``column.format(setting)``) and the model for the
    first cell that is not a positive whole number (empty cells stay ``NaN``: unknown)."""
    out = {}
    for setting in sizes.columns:
        raw = sizes[setting]
        name = column.format(setting)
        if _holds_booleans(raw):
            raise DataError(f"{source}: column {name!r} holds true/false values; give the number of test "
                            "examples behind each accuracy (a positive integer), or leave the cell empty")
        values = pd.to_numeric(raw, errors="coerce").astype(float)
        text = raw.astype(str).str.strip()
        bad_text = values.isna() & raw.notna() & (text != "") & ~text.isin(_DEFAULT_NA)
        bad_value = values.notna() & ~((values > 0) & np.isfinite(values) & (values == np.floor(values)))
        bad = bad_text | bad_value
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            value = raw.iloc[row].item() if isinstance(raw.iloc[row], np.generic) else raw.iloc[row]
            raise DataError(f"{source}: column {name!r} has {value!r} for model {raw.index[row]!r}; give "
                            "the number of test examples (a positive integer), or leave the cell empty if unknown")
        out[setting] = values.to_numpy()
    return pd.DataFrame(out, index=sizes.index, columns=sizes.columns, dtype=float)


def _as_tags(value: object) -> tuple[str, ...]:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ()
    if isinstance(value, str):
        return tuple(t.strip() for t in value.split(";") if t.strip())
    return tuple(str(t) for t in value)  # type: ignore[union-attr]


class Testbed:
    """A models x settings table of accuracies (percent) with example counts and metadata.

    Parameters
    ----------
    accuracies:
        DataFrame indexed by model name, one column per setting, accuracy in percent.
    sizes:
        Same shape (missing rows/columns are filled with ``NaN``): examples per cell.
    metadata:
        DataFrame indexed by model name with ``model_type``, ``arch``, ``tags`` and any extra
        columns. Missing models get type ``UNKNOWN``.
    name:
        A short name used in messages, figures and reports.
    source:
        Where the table came from (a file path or a reference name), used in error messages.
    notes:
        Sentences about what was done to the data on the way in (kept by ``merge``).
    added:
        Models added to a reference testbed by the user (kept by ``merge`` and ``select``).
    """

    #: the number in each cell: ``accuracy`` (top-1), or another of :data:`STORE_METRICS` when
    #: built by :meth:`from_store` with ``metric=`` (``mixed`` for a per-setting mapping)
    metric: str = "accuracy"

    def __init__(
        self,
        accuracies: pd.DataFrame,
        sizes: pd.DataFrame | None = None,
        metadata: pd.DataFrame | None = None,
        *,
        name: str = "testbed",
        source: str | None = None,
        notes: Iterable[str] = (),
        added: Iterable[str] = (),
    ) -> None:
        self.name = name
        self.source = source or name
        #: what was done to the data on the way in (e.g. example counts taken from a reference
        #: testbed, a setting renamed from an alias), one sentence each; the CLI prints them
        self.notes: list[str] = list(dict.fromkeys(notes))
        acc = accuracies.copy()
        acc.index = acc.index.astype(str)
        acc.index.name = "model"
        acc.columns = [str(c) for c in acc.columns]
        if acc.index.has_duplicates:
            dup = acc.index[acc.index.duplicated()][0]
            raise DataError(f"{self.source}: model {dup!r} appears in two rows; give each row a unique model name")
        if len(set(acc.columns)) != len(acc.columns):
            dup = next(c for c in acc.columns if list(acc.columns).count(c) > 1)
            raise DataError(f"{self.source}: setting {dup!r} appears twice; give each column a unique name")
        self.accuracies = self._validated(acc)
        if sizes is None:
            sizes = pd.DataFrame(index=acc.index, columns=acc.columns, dtype=float)
        self.sizes = sizes.reindex(index=acc.index, columns=acc.columns).astype(float)
        self.metadata = self._complete_metadata(metadata, acc.index)
        #: models that came from a user's table or results store rather than a shipped reference
        #: testbed (set by ``load_testbed``); figures and the report highlight them
        self.added: list[str] = [m for m in dict.fromkeys(added) if m in self.accuracies.index]

    def __content__(self) -> tuple:
        """What the testbed holds, for :func:`~shiftbench.report.cache.content_hash` (the report's
        cache keys): its name, metric, tables and added models."""
        return (self.name, self.metric, self.accuracies, self.sizes, self.metadata, self.added)

    # ------------------------------------------------------------------ validation
    def _validated(self, acc: pd.DataFrame) -> pd.DataFrame:
        for setting in acc.columns:
            if _holds_booleans(acc[setting]):
                raise DataError(
                    f"{self.source}: column {setting!r} holds true/false values, not accuracies; give accuracies "
                    f"in percent (0-100) (if {setting!r} is not a setting, name its column 'meta:{setting}')"
                )
        numeric = acc.apply(pd.to_numeric, errors="coerce").astype(float)
        bad = numeric.isna() & acc.notna() & (acc.astype(str).apply(lambda s: s.str.strip()) != "")
        if bad.to_numpy().any():
            model, setting = bad.stack()[lambda s: s].index[0]
            raise DataError(
                f"{self.source}: non-numeric accuracy {acc.at[model, setting]!r} for model {model!r} "
                f"on setting {setting!r}; give accuracies in percent (0-100) and leave "
                f"unevaluated cells empty"
            )
        out_of_range = (numeric < 0) | (numeric > 100)
        if out_of_range.to_numpy().any():
            model, setting = out_of_range.stack()[lambda s: s].index[0]
            raise DataError(
                f"{self.source}: accuracy {numeric.at[model, setting]:g} for model {model!r} on "
                f"setting {setting!r} is outside [0, 100]; accuracies are percentages (if "
                f"{setting!r} is not a setting, name its column 'meta:{setting}')"
            )
        return numeric

    @staticmethod
    def _complete_metadata(metadata: pd.DataFrame | None, index: pd.Index) -> pd.DataFrame:
        meta = pd.DataFrame(index=index) if metadata is None else metadata.copy()
        meta.index = meta.index.astype(str)
        meta = meta[~meta.index.duplicated()].reindex(index)
        meta.index.name = "model"
        types = meta["model_type"] if "model_type" in meta else pd.Series(np.nan, index=index)
        meta["model_type"] = types.where(types.notna() & (types.astype(str) != ""), UNKNOWN_TYPE).astype(str)
        if "arch" not in meta:
            meta["arch"] = pd.Series(pd.NA, index=index, dtype="string")
        tags = meta["tags"] if "tags" in meta else pd.Series([None] * len(index), index=index)
        meta["tags"] = [_as_tags(t) for t in tags]
        rest = [c for c in meta.columns if c not in METADATA_COLUMNS]
        return meta[list(METADATA_COLUMNS) + rest]

    # ------------------------------------------------------------------ construction / IO
    def _in_percent(self, fractions: bool | None) -> Testbed:
        """This table (just read from a user's file or frame) in percent: refused when every
        accuracy lies in [0, 1] (:func:`check_percent`) unless ``fractions`` says which unit it is
        (``True``: multiplied by 100); a column wholly in [0, 1] among percentages gets a note."""
        acc = self.accuracies
        cols = [c for c in acc.columns if acc[c].notna().any()]
        listed = ", ".join(repr(c) for c in cols[:5]) + (f" and {len(cols) - 5} more" if len(cols) > 5 else "")
        what = f"{self.source} (column{'s' if len(cols) != 1 else ''} {listed})"
        values = check_percent(acc.to_numpy(), fractions, what)
        if fractions:
            note = f"{self.source}: accuracies read as fractions and multiplied by 100 (fractions=True, --fractions)"
            return Testbed(pd.DataFrame(values, index=acc.index, columns=acc.columns), self.sizes, self.metadata,
                           name=self.name, source=self.source, notes=[*self.notes, note], added=self.added)
        if fractions is None:
            small = [c for c in cols if looks_like_fractions(acc[c])]
            if small:
                self.notes.append(
                    f"{self.source}: every accuracy in column{'s' if len(small) > 1 else ''} "
                    f"{', '.join(map(repr, small))} lies between 0 and 1 while the others are percentages; if "
                    "those are fractions, multiply them by 100 (read as percentages; --percent, or fractions=False, "
                    "says they are and drops this note)")
        return self

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, *, name: str = "testbed", source: str | None = None,
                   fractions: bool | None = None) -> Testbed:
        """Build a testbed from a wide or long DataFrame (see the module docstring).

        ``fractions``: ``None`` (default) refuses a table whose accuracies all lie in [0, 1] (they
        look like fractions; :func:`check_percent`); ``True`` reads them as fractions and
        multiplies them by 100; ``False`` reads them as percentages whatever their size."""
        source = source or name
        if "model" not in frame.columns:
            raise DataError(f"{source}: no 'model' column; the first column must name each model")
        frame = frame.copy()
        blank = frame["model"].isna() | (frame["model"].astype(str).str.strip() == "")
        if blank.any():
            row = int(np.flatnonzero(blank.to_numpy())[0])
            raise DataError(f"{source}: row {row + 1} has no model name; name every model")
        frame["model"] = frame["model"].astype(str).str.strip()
        if {"setting", "accuracy"} <= set(frame.columns):
            return cls._from_long(frame, name=name, source=source)._in_percent(fractions)
        meta_cols = [c for c in frame.columns if c in METADATA_COLUMNS or str(c).startswith(META_PREFIX)]
        size_cols = [c for c in frame.columns if str(c).endswith(SIZE_SUFFIX)]
        setting_cols = [c for c in frame.columns if c not in meta_cols and c not in size_cols and c != "model"]
        frame = frame.set_index("model")
        meta = frame[meta_cols].rename(columns=lambda c: c[len(META_PREFIX):] if c.startswith(META_PREFIX) else c)
        sizes = _checked_sizes(frame[size_cols].rename(columns=lambda c: c[: -len(SIZE_SUFFIX)]), source)
        return cls(frame[setting_cols], sizes, meta, name=name, source=source)._in_percent(fractions)

    @classmethod
    def _from_long(cls, frame: pd.DataFrame, *, name: str, source: str) -> Testbed:
        dup = frame.duplicated(["model", "setting"])
        if dup.any():
            row = frame[dup].iloc[0]
            raise DataError(f"{source}: model {row['model']!r} has two rows for setting {row['setting']!r}")
        acc = frame.pivot(index="model", columns="setting", values="accuracy")
        if _holds_booleans(frame["accuracy"]):
            raise DataError(f"{source}: column 'accuracy' holds true/false values, not accuracies; give "
                            "accuracies in percent (0-100)")
        sizes = None
        if "n_examples" in frame:
            counts = _checked_sizes(frame.set_index("model")[["n_examples"]], source, column="n_examples")
            sizes = frame.assign(n_examples=counts["n_examples"].to_numpy()).pivot(
                index="model", columns="setting", values="n_examples")
        meta_cols = [c for c in frame.columns if c in METADATA_COLUMNS or str(c).startswith(META_PREFIX)]
        meta = frame.groupby("model", sort=False)[meta_cols].first() if meta_cols else None
        if meta is not None:
            meta = meta.rename(columns=lambda c: c[len(META_PREFIX):] if c.startswith(META_PREFIX) else c)
        order = list(dict.fromkeys(frame["model"]))
        acc = acc.reindex(order)[list(dict.fromkeys(frame["setting"].astype(str)))]
        return cls(acc, sizes, meta, name=name, source=source)

    @classmethod
    def read(cls, path: str | Path, *, name: str | None = None, fractions: bool | None = None) -> Testbed:
        """Read a testbed from a ``.csv`` or ``.parquet`` file (wide or long form); ``fractions``
        as in :meth:`from_frame` (a table of fractions is refused unless told)."""
        path = Path(path)
        if not path.exists():
            raise DataError(f"{path}: no such testbed file; give a CSV/Parquet table or a reference name")
        suffix = path.suffix.lower()
        try:
            if suffix == ".csv":
                # model names such as "NA" or "None" stay names; only accuracy cells can be missing
                header = pd.read_csv(path, nrows=0).columns
                na = {c: ([] if c == "model" else list(_DEFAULT_NA)) for c in header}
                frame = pd.read_csv(path, dtype={"model": str}, keep_default_na=False, na_values=na)
            elif suffix in (".parquet", ".pq"):
                frame = pd.read_parquet(path)
            else:
                raise DataError(f"{path}: unknown table format {suffix!r}; use .csv or .parquet")
        except (pd.errors.ParserError, UnicodeDecodeError, OSError, ValueError) as exc:
            if isinstance(exc, DataError):
                raise
            raise DataError(f"{path}: cannot read the table ({exc}); is it a valid {suffix[1:]} file?") from exc
        return cls.from_frame(frame, name=name or path.stem, source=str(path), fractions=fractions)

    @classmethod
    def from_store(cls, store: str | Path = "shiftbench-results", *, convention: str = "restricted",
                   name: str = "store", metric: str | Mapping[str, str] = "accuracy") -> Testbed:
        """The testbed of finished evaluations in a results store (``shiftbench eval``).

        One cell per (model, setting): where a setting was scored under both subset
        conventions, ``convention`` picks one; where several example lists exist (``--limit``
        runs), the one with the most examples wins. Sizes are the example counts.

        ``metric`` picks the number in each cell (all in percent): ``accuracy`` (top-1, the
        default), ``top5``, ``map`` (mean average precision of multi-label settings,
        :func:`shiftbench.mean_average_precision`; only the settings that have it) or
        ``worst_group_accuracy`` (the lowest accuracy over the non-empty groups of a setting
        with groups, :func:`shiftbench.views.groups.group_accuracy`; its size is the worst
        group's count, so Clopper-Pearson bars are those of that group). Trend fits and
        effective robustness then work on that metric (for mAP: logit(OOD mAP) on logit(ID mAP),
        the scale of the DeepFashion Remixed comparison). Sizes are left empty for ``map``:
        Clopper-Pearson bars apply to proportions only (mAP's interval is the stored bootstrap one).

        A mapping ``{setting: metric}`` picks the metric per setting, ``accuracy`` for the
        settings it does not name: ``metric={ood: "worst_group_accuracy"}`` puts average
        accuracy on the ID x axis and worst-group accuracy on the OOD y axis of
        :func:`shiftbench.effective_robustness`. ``metric`` (the attribute) is then ``mixed``.
        """
        from shiftbench.store import Store  # deferred: loads pyarrow

        chosen = dict(metric) if isinstance(metric, Mapping) else {}
        for m in chosen.values() if chosen else [metric]:
            if m not in STORE_METRICS:
                raise ConfigError(did_you_mean("metric", str(m), STORE_METRICS,
                                               f"use one of {', '.join(STORE_METRICS)}"))
        res = Store(store).results()
        if res.empty:
            raise DataError(f"{store}: no finished results; run `shiftbench eval` first")
        res = res[res["convention"].isin([convention, "full"])]
        have = sorted(set(res["setting"]))
        for s in chosen:
            if s not in have:
                raise DataError(f"{store}: " + did_you_mean("setting", str(s), have, "metric= names settings of "
                                                            "the store's finished results"))
        per_row = res["setting"].map(chosen).fillna("accuracy") if chosen else pd.Series(metric, index=res.index)
        value = pd.Series(np.nan, index=res.index)
        size = pd.Series(np.nan, index=res.index)
        for m in per_row.unique():
            rows = per_row == m
            present = m in res and res.loc[rows, m].notna().any()
            if not present:
                where = f"{store}: " if not chosen else f"{store}: setting {min(res.loc[rows, 'setting'])!r}: "
                raise DataError(f"{where}no finished result has {STORE_METRICS[m]}; "
                                + _METRIC_HINTS.get(m, "evaluate first"))
            value[rows] = pd.to_numeric(res.loc[rows, m], errors="coerce")
            if _METRIC_SIZES[m] is not None:
                size[rows] = pd.to_numeric(res.loc[rows, _METRIC_SIZES[m]], errors="coerce")
        res = res.assign(_value=value, _size=size)[value.notna()]
        res = res.sort_values(["n_examples", "finished"]).drop_duplicates(["model", "setting"], keep="last")
        acc = res.pivot(index="model", columns="setting", values="_value").astype(float)
        sizes = res.pivot(index="model", columns="setting", values="_size").astype(float)
        meta_cols = [c for c in ("model_type", "arch", "tags", "spec") if c in res]
        meta = res.drop_duplicates("model", keep="last").set_index("model")[meta_cols]
        if chosen:
            notes = [f"{s}: values are {STORE_METRICS[m]}, not top-1 accuracy" for s, m in chosen.items()
                     if m != "accuracy"]
        else:
            notes = [] if metric == "accuracy" else [f"values are {STORE_METRICS[metric]}, not top-1 accuracy"]
        tb = cls(acc, sizes, meta, name=name, source=str(store), notes=notes)
        tb.metric = "mixed" if chosen else metric
        return tb

    def to_frame(self) -> pd.DataFrame:
        """The wide form: ``model``, metadata, settings, then ``<setting>_dataset_size``."""
        meta = self.metadata.copy()
        meta["tags"] = [";".join(t) for t in meta["tags"]]
        meta = meta.rename(columns=lambda c: c if c in METADATA_COLUMNS else META_PREFIX + c)
        sizes = self.sizes.dropna(axis=1, how="all").add_suffix(SIZE_SUFFIX)
        out = pd.concat([meta, self.accuracies, sizes], axis=1)
        return out.reset_index()

    def to_long(self) -> pd.DataFrame:
        """The long form: one row per evaluated (model, setting) with accuracy and size."""
        acc = self.accuracies.stack().dropna().rename("accuracy")
        n = self.sizes.stack(future_stack=True).rename("n_examples")
        out = pd.concat([acc, n.reindex(acc.index)], axis=1).reset_index()
        out.columns = ["model", "setting", "accuracy", "n_examples"]
        return out.merge(self.metadata[["model_type"]], left_on="model", right_index=True)

    def save(self, path: str | Path) -> Path:
        """Write the wide form to ``.csv`` or ``.parquet`` (by extension); returns the path."""
        path = Path(path)
        frame = self.to_frame()
        suffix = path.suffix.lower()
        path.parent.mkdir(parents=True, exist_ok=True)
        if suffix == ".csv":
            frame.to_csv(path, index=False)
        elif suffix in (".parquet", ".pq"):
            frame.to_parquet(path, index=False)
        else:
            raise ConfigError(f"{path}: unknown table format {suffix!r}; use .csv or .parquet")
        return path

    # ------------------------------------------------------------------ queries
    @property
    def models(self) -> list[str]:
        """Model names, in table order."""
        return list(self.accuracies.index)

    @property
    def settings(self) -> list[str]:
        """Setting names, in table order."""
        return list(self.accuracies.columns)

    @property
    def model_types(self) -> pd.Series:
        """``model_type`` of every model (a Series indexed by model)."""
        return self.metadata["model_type"]

    @property
    def tags(self) -> set[str]:
        """Every tag used by some model."""
        return {t for ts in self.metadata["tags"] for t in ts}

    def __len__(self) -> int:
        return len(self.accuracies)

    def __repr__(self) -> str:
        types = self.model_types.value_counts().to_dict()
        return f"Testbed({self.name!r}: {len(self)} models x {len(self.settings)} settings, types={types})"

    def check_setting(self, setting: str) -> str:
        """Return ``setting`` if the testbed has it, else raise with the closest names."""
        if setting not in self.accuracies.columns:
            raise ConfigError(did_you_mean("setting", setting, self.settings, f"testbed {self.name!r}"))
        return setting

    def check_model(self, model: str) -> str:
        """Return ``model`` if the testbed has it, else raise with the closest names."""
        if model not in self.accuracies.index:
            raise ConfigError(did_you_mean("model", model, self.models, f"testbed {self.name!r}"))
        return model

    def resolve(self, selectors: str | Iterable[str] | None) -> list[str]:
        """Models matched by any of ``selectors`` (a union), in table order.

        Each selector is ``"all"``, a model type (``STANDARD``), a tag, or a model name; the
        prefixes ``type:``, ``tag:`` and ``model:`` force one reading. ``None`` means all.
        """
        if selectors is None:
            return self.models
        if isinstance(selectors, str):
            selectors = [selectors]
        types = set(self.model_types)
        chosen = pd.Series(False, index=self.accuracies.index)
        for sel in selectors:
            kind, _, value = sel.partition(":") if ":" in sel else ("", "", sel)
            if kind not in ("", "type", "tag", "model"):
                kind, value = "", sel
            if value == ALL and kind == "":
                chosen[:] = True
                continue
            if kind == "type" or (kind == "" and value in types):
                if value not in types:
                    raise ConfigError(did_you_mean("model type", value, sorted(types), f"testbed {self.name!r}"))
                chosen |= self.model_types == value
                continue
            tags = self.tags  # only when the selector is not a type (a set over every model's tags)
            if kind == "tag" or (kind == "" and value in tags):
                if value not in tags:
                    raise ConfigError(did_you_mean("tag", value, sorted(tags), f"testbed {self.name!r}"))
                chosen |= self.metadata["tags"].map(lambda ts, v=value: v in ts)
            elif kind == "model" or value in chosen.index:
                chosen[self.check_model(value)] = True
            else:
                raise ConfigError(did_you_mean(
                    "model type, tag or model", value, sorted(types) + sorted(tags) + self.models,
                    f"testbed {self.name!r} has types {', '.join(sorted(types))}"))
        return list(chosen.index[chosen])

    def paired(self, x: str, y: str, models: Sequence[str] | None = None) -> tuple[pd.DataFrame, int]:
        """Models evaluated on both ``x`` and ``y``.

        Returns a DataFrame indexed by model with ``x_acc, y_acc, x_n, y_n, model_type`` and the
        number of requested models skipped because a cell was empty.
        """
        self.check_setting(x)
        self.check_setting(y)
        if models is None:
            idx, pos = self.accuracies.index, slice(None)
        else:  # checked in bulk: one model at a time cost ~15 ms per call on the 1,556-model testbed
            idx = pd.Index([str(m) for m in models])
            pos = self.accuracies.index.get_indexer(idx)
            if (pos < 0).any():
                self.check_model(idx[int(np.flatnonzero(pos < 0)[0])])
        # positional numpy takes: 3-4x faster than .loc by label (paired is called per fit and figure)
        xa, ya = self.accuracies[x].to_numpy()[pos], self.accuracies[y].to_numpy()[pos]
        keep = ~(np.isnan(xa) | np.isnan(ya))
        frame = pd.DataFrame({
            "x_acc": xa[keep], "y_acc": ya[keep],
            "x_n": self.sizes[x].to_numpy()[pos][keep], "y_n": self.sizes[y].to_numpy()[pos][keep],
            "model_type": self.model_types.array[pos][keep],
        }, index=self.accuracies.index[pos][keep])
        return frame, int((~keep).sum())

    # ------------------------------------------------------------------ transformations
    def select(
        self,
        models: Iterable[str] | None = None,
        settings: Iterable[str] | None = None,
        *,
        model_types: Iterable[str] | None = None,
        tags: Iterable[str] | None = None,
        name: str | None = None,
    ) -> Testbed:
        """A sub-testbed: the given models and settings, optionally only some types or tags."""
        rows = self.models if models is None else [self.check_model(m) for m in models]
        if model_types is not None:
            wanted = set(model_types)
            rows = [m for m in rows if self.model_types[m] in wanted]
        if tags is not None:
            wanted_tags = set(tags)
            rows = [m for m in rows if wanted_tags & set(self.metadata.at[m, "tags"])]
        cols = self.settings if settings is None else [self.check_setting(s) for s in settings]
        return Testbed(self.accuracies.loc[rows, cols], self.sizes.loc[rows, cols],
                       self.metadata.loc[rows], name=name or self.name, source=self.source,
                       notes=self.notes, added=self.added)

    def merge(self, other: Testbed, *, on_conflict: str = "error", name: str | None = None,
              aliases: Mapping[str, str] | None = None) -> Testbed:
        """Union of two testbeds (models and settings).

        A model in both keeps the union of its cells. Two values of the same cell are equal
        when they agree to the precision written (:func:`agree_to_written_precision`: 76.13
        and 76.1300048828125 agree, 76.13 and 76.16 do not); otherwise ``on_conflict``
        decides: ``"error"`` (default: the error prints both numbers at full precision),
        ``"left"`` (keep ``self``) or ``"right"`` (keep ``other``).

        ``other``'s missing example counts are filled from ``self`` where ``self`` has one
        count for the setting (a reference testbed's dataset size), so Clopper-Pearson
        intervals of an added table without ``<setting>_dataset_size`` columns are not
        silently too narrow. ``aliases`` maps other spellings of a setting to ``self``'s
        name (``{"imagenetv2": "imagenetv2-matched-frequency-format-val"}``); a column of
        ``other`` named by an alias that ``self`` does not have is renamed. Both are said in
        :attr:`notes`.
        """
        if on_conflict not in ("error", "left", "right"):
            raise ConfigError(f"on_conflict={on_conflict!r}; use 'error', 'left' or 'right'")
        notes = list(self.notes) + list(other.notes)
        other, renamed = other._renamed_aliases(aliases or {}, self.settings)
        notes += renamed
        other, filled = other._sizes_from(self)
        notes += filled
        a, b = self.accuracies, other.accuracies
        common_rows = a.index.intersection(b.index)
        common_cols = a.columns.intersection(b.columns)
        if len(common_rows) and len(common_cols):
            da, db = a.loc[common_rows, common_cols], b.loc[common_rows, common_cols]
            same = pd.DataFrame(agree_to_written_precision(da.to_numpy(), db.to_numpy()),
                                index=da.index, columns=da.columns)
            clash = da.notna() & db.notna() & ~same
            if on_conflict == "error" and clash.to_numpy().any():
                model, setting = clash.stack()[lambda s: s].index[0]
                raise DataError(
                    f"model {model!r} has {da.at[model, setting]!r} on {setting!r} in {self.name!r} but "
                    f"{db.at[model, setting]!r} in {other.name!r} ({int(clash.to_numpy().sum())} such "
                    f"cells); fix one table or pass on_conflict='left' or 'right' to keep one side")
        first, second = (self, other) if on_conflict != "right" else (other, self)
        acc = first.accuracies.combine_first(second.accuracies)
        sizes = first.sizes.combine_first(second.sizes)
        meta = first.metadata.copy()
        meta["model_type"] = meta["model_type"].replace(UNKNOWN_TYPE, np.nan)
        other_meta = second.metadata.copy()
        other_meta["model_type"] = other_meta["model_type"].replace(UNKNOWN_TYPE, np.nan)
        meta = meta.combine_first(other_meta)
        order_rows = list(dict.fromkeys(self.models + other.models))
        order_cols = list(dict.fromkeys(self.settings + other.settings))
        return Testbed(acc.loc[order_rows, order_cols], sizes, meta,
                       name=name or f"{self.name}+{other.name}", source=f"{self.source}+{other.source}",
                       notes=notes, added=self.added + other.added)

    def _renamed_aliases(self, aliases: Mapping[str, str], known: Sequence[str]) -> tuple[Testbed, list[str]]:
        known_set = set(known)
        rename = {c: aliases[c] for c in self.settings
                  if c in aliases and c not in known_set and aliases[c] not in self.settings}
        if not rename:
            return self, []
        notes = [f"{self.source}: setting {old!r} read as {new!r} (a known alias)" for old, new in rename.items()]
        return Testbed(self.accuracies.rename(columns=rename), self.sizes.rename(columns=rename),
                       self.metadata, name=self.name, source=self.source,
                       notes=self.notes, added=self.added), notes

    def _sizes_from(self, reference: Testbed) -> tuple[Testbed, list[str]]:
        missing = self.accuracies.notna() & self.sizes.isna()
        taken: dict[str, int] = {}
        sizes = self.sizes.copy()
        for setting in self.settings:
            if setting not in reference.sizes.columns or not missing[setting].any():
                continue
            counts = reference.sizes[setting].dropna().unique()
            if len(counts) == 1:
                sizes.loc[missing[setting], setting] = float(counts[0])
                taken[setting] = int(counts[0])
        if not taken:
            return self, []
        listed = ", ".join(f"{s} {n:,}" for s, n in taken.items())
        note = (f"{self.source}: no example counts for {len(taken)} setting(s); took {reference.name}'s "
                f"({listed}) for the Clopper-Pearson intervals (add <setting>_dataset_size columns to override)")
        return Testbed(self.accuracies, sizes, self.metadata, name=self.name, source=self.source,
                       notes=self.notes, added=self.added), [note]

    def with_metadata(self, **columns: Mapping[str, object] | pd.Series) -> Testbed:
        """A copy with metadata columns set or replaced (e.g. ``model_type={...}``)."""
        meta = self.metadata.copy()
        for col, values in columns.items():
            series = values if isinstance(values, pd.Series) else pd.Series(dict(values))
            unknown = set(series.index) - set(self.models)
            if unknown:
                self.check_model(sorted(unknown)[0])
            meta.loc[series.index, col] = series if col != "tags" else pd.Series(
                [_as_tags(t) for t in series], index=series.index, dtype=object)
        return Testbed(self.accuracies, self.sizes, meta, name=self.name, source=self.source,
                       notes=self.notes, added=self.added)
