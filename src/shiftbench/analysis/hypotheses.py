"""The "seven hypotheses" verdict table: does an intervention give effective robustness?

Hendrycks et al. (2021), *The Many Faces of Robustness*, §5, test hypotheses about what makes
models robust to distribution shift - **larger models**, **self-attention**, **diverse data
augmentation**, **pretraining**, **texture bias**, "only IID accuracy matters" and
"synthetic ⇏ natural" - and sum them up in a table of which interventions help on which shift.
This module computes a table in the spirit of that one, not the paper's own: the paper's table
judges raw error and the IID/OOD gap (and tests self-attention with SE/CBAM, not ViT); this one
judges effective and relative robustness over the testbed's groups. An *intervention group* is a set of models sharing
an intervention, and for every group ``G`` and shift ``(x, y)``

* the **mean effective robustness** ``mean_er = (1/|G|) sum_{f in G} rho(f)`` with
  ``rho(f) = acc_y(f) - beta(acc_x(f))`` (Taori et al. 2020, §2), ``beta`` the trend fitted on
  the standard models exactly as :func:`~shiftbench.analysis.placement.fit_shift` fits it (logit
  scale; on ImageNet-A the authors' two lines split at ResNet-50, recipe ``taori2020``) and ``rho`` from
  :func:`~shiftbench.analysis.effective_robustness`;
* its **95% percentile bootstrap interval over models** ``[low, high]``: ``n_resamples`` resamples of
  the group's ``n`` models with replacement, drawn as ``rng.integers(0, n, size=(n_resamples, n))``
  with ``rng = numpy.random.default_rng(seed)`` afresh for every cell (so each cell is
  reproducible on its own), and the ``2.5`` and ``97.5`` percentiles of the resampled means;
* where the group names each model's baseline ``f0`` (the same network without the
  intervention), the **mean relative robustness** ``mean_rr = mean(acc_y(f) - acc_y(f0))`` and the
  **mean ER difference** ``mean_er_diff = mean(rho(f) - rho(f0))`` over the ``n_pairs`` models
  with a baseline, with the same bootstrap (``rr_low, rr_high``, ``er_diff_low, er_diff_high``);
* a **verdict** from the ER interval: ``helps`` when ``low > 0``, ``hurts`` when ``high < 0``,
  ``no evidence`` when it contains 0, ``too few models`` when fewer than ``min_models`` (3)
  models have both accuracies, and ``no models`` when the selector matched none (the row then
  has ``n_models`` 0 and says why in ``note``). ``rr_verdict`` applies the same rule to the RR
  interval and ``n_pairs``.

Group table (CSV; one row per group)
------------------------------------
``group``
    A unique name.
``hypothesis``
    Which hypothesis it tests: ``larger models``, ``self-attention``, ``diverse data
    augmentation``, ``pretraining``, ``texture bias``, ``adversarial training``, ...
``select``
    Which models: alternatives separated by ``;`` (a union), each a conjunction of terms joined
    by ``&``; a term prefixed with ``!`` is negated. A term is

    * what :meth:`Testbed.resolve` reads: ``all``, a model type (``MORE_DATA``, ``type:LP_ADV``),
      a tag (``tag:timm``) or a model name (``resnet50``, ``model:resnet50``);
    * a glob over model names (``resnet50_with_*_aws``, ``model:vit_*``);
    * a metadata test ``COLUMN~GLOB`` (case-insensitive fnmatch; any tag for ``tags``),
      ``COLUMN=VALUE``, or ``COLUMN>N``, ``>=``, ``<``, ``<=`` (numbers), e.g. ``arch~vit_*``,
      ``pretrain~*in22k``, ``param_count>=80``.
``baseline`` (optional)
    Each model's baseline, for relative robustness; empty means none. Either a model name
    template whose ``{column}`` fields are the model's metadata (``resnet50``, ``{arch}``,
    ``{arch}-autoaug``; alternatives separated by ``|``, the first in the testbed wins), or
    ``same:COLUMN`` optionally followed by ``&``-terms (``same:arch&type:STANDARD``): the models
    with the same value of ``COLUMN`` matching the terms (default ``type:STANDARD``), whose mean
    accuracy and mean effective robustness is the baseline. A model is never its own baseline;
    a model without one is left out of the RR mean (``n_pairs`` counts the rest).

Tables ship for the reference testbeds (``data/hypotheses/<testbed>.csv``); ``groups=None``
picks the one of the testbed's name.

Example
-------
>>> import pandas as pd
>>> from shiftbench.testbed import Testbed
>>> tb = Testbed.from_frame(pd.DataFrame({
...     "model": ["s1", "s2", "s3", "s4", "r1", "r2", "r3"],
...     "model_type": ["STANDARD"] * 4 + ["ROBUST_INTV"] * 3,
...     "val": [60.0, 65.0, 70.0, 75.0, 62.0, 68.0, 72.0], "v2": [50.0, 55.0, 60.0, 65.0, 58.0, 63.0, 67.0]}))
>>> groups = pd.DataFrame({"group": ["robust"], "hypothesis": ["diverse data augmentation"],
...                        "select": ["ROBUST_INTV"], "baseline": ["s2"]})
>>> table = hypotheses_table(tb, groups, shifts=[("val", "v2")], n_resamples=200)
>>> row = table.rows.iloc[0]
>>> row["verdict"], int(row["n_models"]), round(float(row["mean_er"]), 1)
('helps', 3, 5.4)
"""
from __future__ import annotations

import fnmatch
import importlib.resources
import math
import re
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from shiftbench.analysis.placement import NATURAL_SHIFTS, ShiftPair, as_shift, fit_shift
from shiftbench.analysis.robustness import effective_robustness
from shiftbench.analysis.trend import DEFAULT_FIT_ON
from shiftbench.errors import ConfigError, DataError, ShiftbenchError, did_you_mean
from shiftbench.testbed import Testbed

REQUIRED_COLUMNS = ("group", "hypothesis", "select")
OPTIONAL_COLUMNS = ("baseline",)
#: the hypotheses of Hendrycks et al. (2021, §5) this project's tables use (free text is allowed)
HYPOTHESES = ("larger models", "self-attention", "diverse data augmentation", "pretraining", "texture bias",
              "only IID accuracy matters", "synthetic ⇏ natural", "adversarial training")
MIN_MODELS = 3
HELPS, HURTS, NO_EVIDENCE, TOO_FEW, NO_MODELS = "helps", "hurts", "no evidence", "too few models", "no models"
VERDICTS = (HELPS, HURTS, NO_EVIDENCE, TOO_FEW, NO_MODELS)
#: the verdict rule, in words (for reports and docs)
VERDICT_RULE = ("helps: the 95% bootstrap interval (over the group's models) of the mean effective robustness lies "
                "above 0; hurts: below 0; no evidence: it contains 0; too few models: fewer than the minimum have "
                "both accuracies")
ROW_COLUMNS = ["group", "hypothesis", "shift", "x", "y", "n_selected", "n_models", "mean_er", "low", "high",
               "verdict", "n_pairs", "mean_rr", "rr_low", "rr_high", "mean_er_diff", "er_diff_low", "er_diff_high",
               "rr_verdict", "note"]
_OPERATOR = re.compile(r"^(?P<col>[A-Za-z_][\w]*)(?P<op>~|>=|<=|=|>|<)(?P<value>.*)$")
_FORCED = ("type:", "tag:", "model:")


# ---------------------------------------------------------------------------- the group table
def shipped_groups_path(name: str) -> Path | None:
    """The group table shipped for testbed ``name`` (or for the first testbed of a merged
    ``a+b`` name), or ``None``."""
    root = importlib.resources.files("shiftbench") / "data" / "hypotheses"
    for candidate in dict.fromkeys([name, name.split("+")[0]]):
        path = root / f"{candidate}.csv"
        if path.is_file():
            return Path(str(path))
    return None


def _check_terms(text: str, where: str) -> None:
    """Raise a DataError for a malformed selector or baseline (syntax only, no testbed)."""
    for alt in text.split(";"):
        terms = [t.strip() for t in alt.split("&")]
        if not alt.strip() or any(not t or t == "!" for t in terms):
            raise DataError(f"{where}: empty term in {text!r}; join terms with '&' and alternatives with ';'")
        for term in terms:
            m = _OPERATOR.match(term.lstrip("!"))
            if m and m["op"] in (">", ">=", "<", "<="):
                try:
                    float(m["value"])
                except ValueError:
                    raise DataError(f"{where}: {term!r} compares with {m['value']!r}, not a number") from None


def _check_baseline(text: str, where: str) -> None:
    if text.startswith("same:"):
        col, _, rest = text[5:].partition("&")
        if not col.strip():
            raise DataError(f"{where}: baseline {text!r} names no column; write same:arch or same:arch&type:STANDARD")
        if rest:
            _check_terms(rest, where)
        return
    for alt in text.split("|"):
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(alt) if f is not None]
        except ValueError as exc:
            raise DataError(f"{where}: baseline {text!r} is not a valid name template ({exc})") from None
        if not alt.strip() or any(not f for f in fields):
            raise DataError(f"{where}: baseline {text!r} has an empty name or '{{}}'; write e.g. {{arch}} or resnet50")


def load_groups(source: str | Path | pd.DataFrame) -> pd.DataFrame:
    """Read and validate a group table (module docstring): a CSV path, a testbed name whose
    table ships with shiftbench, or a DataFrame. Returns ``group, hypothesis, select, baseline``
    (empty baseline: ``""``); ``attrs["source"]`` names where it came from. A malformed table
    raises a one-line :class:`DataError` naming the file, the row and the problem."""
    if isinstance(source, pd.DataFrame):
        frame, where = source.copy(), "group table"
    else:
        path = Path(source)
        if not path.is_file():
            shipped = shipped_groups_path(str(source)) if not path.suffix else None
            if shipped is None:
                raise DataError(f"{source}: no such group table; give a CSV with columns group, hypothesis, select "
                                f"(and optionally baseline)")
            path = shipped
        where = f"data/hypotheses/{path.name} (shipped)" if path == shipped_groups_path(path.stem) else str(path)
        try:
            frame = pd.read_csv(path, dtype=str, keep_default_na=False, comment=None)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as exc:
            raise DataError(f"{where}: cannot read the group table ({exc}); is it a CSV file?") from exc
    frame.columns = [str(c).strip() for c in frame.columns]
    known = REQUIRED_COLUMNS + OPTIONAL_COLUMNS
    for col in frame.columns:
        if col not in known:
            raise DataError(f"{where}: unknown column {col!r}; the columns are {', '.join(known)}")
    for col in REQUIRED_COLUMNS:
        if col not in frame.columns:
            raise DataError(f"{where}: no {col!r} column; a group table has columns {', '.join(REQUIRED_COLUMNS)} "
                            f"(and optionally baseline)")
    if "baseline" not in frame.columns:
        frame["baseline"] = ""
    frame = frame[list(known)].fillna("").astype(str).apply(lambda s: s.str.strip())
    seen: set[str] = set()
    for i, row in enumerate(frame.itertuples(index=False), start=1):
        at = f"{where}, row {i}"
        for col in REQUIRED_COLUMNS:
            if not getattr(row, col):
                raise DataError(f"{at}: empty {col!r}; every group needs a name, a hypothesis and a selector")
        if row.group in seen:
            raise DataError(f"{at}: group {row.group!r} appears twice; give each group a unique name")
        seen.add(row.group)
        _check_terms(row.select, f"{at} (group {row.group!r})")
        if row.baseline:
            _check_baseline(row.baseline, f"{at} (group {row.group!r})")
    frame = frame.reset_index(drop=True)
    frame.attrs["source"] = where
    return frame


# ---------------------------------------------------------------------------- selectors
def _column(testbed: Testbed, col: str) -> pd.Series:
    if col == "model":
        return pd.Series(testbed.models, index=testbed.accuracies.index)
    if col == "type":
        col = "model_type"
    if col not in testbed.metadata.columns:
        raise ConfigError(did_you_mean("metadata column", col, ["model", *testbed.metadata.columns],
                                       f"testbed {testbed.name!r}"))
    return testbed.metadata[col]


def _term(testbed: Testbed, term: str) -> pd.Series:
    """Boolean Series over the testbed's models for one (non-negated) term."""
    index = testbed.accuracies.index
    if term.startswith(_FORCED):
        kind, _, value = term.partition(":")
        if kind == "model" and any(c in value for c in "*?["):
            return pd.Series([fnmatch.fnmatchcase(m, value) for m in index], index=index)
        return index.isin(testbed.resolve([term])) & pd.Series(True, index=index)
    m = _OPERATOR.match(term)
    if m and (m["col"] in testbed.metadata.columns or m["col"] in ("model", "type")):
        values, op, want = _column(testbed, m["col"]), m["op"], m["value"]
        if op == "~":
            pat = want.lower()
            if m["col"] == "tags":
                return values.map(lambda ts: any(fnmatch.fnmatchcase(str(t).lower(), pat) for t in ts))
            return values.map(lambda v: isinstance(v, str) and fnmatch.fnmatchcase(v.lower(), pat)).astype(bool)
        if op == "=":
            if m["col"] == "tags":
                return values.map(lambda ts: want in ts)
            return values.astype(str) == want
        num = pd.to_numeric(values, errors="coerce")
        limit = float(want)
        return {">": num > limit, ">=": num >= limit, "<": num < limit, "<=": num <= limit}[op].fillna(False)
    if any(c in term for c in "*?["):
        return pd.Series([fnmatch.fnmatchcase(name, term) for name in index], index=index)
    return pd.Series(index.isin(testbed.resolve([term])), index=index)


def select_models(testbed: Testbed, selector: str) -> tuple[list[str], list[str]]:
    """Models of ``testbed`` matched by a group selector (module docstring), in table order, and
    notes on terms that match nothing (an unknown name, type or column is a note, not an error)."""
    index = testbed.accuracies.index
    chosen = pd.Series(False, index=index)
    notes: list[str] = []
    for alt in selector.split(";"):
        hit = pd.Series(True, index=index)
        for raw in (t.strip() for t in alt.split("&")):
            negate = raw.startswith("!")
            term = raw[1:].strip() if negate else raw
            try:
                match = pd.Series(np.asarray(_term(testbed, term), dtype=bool), index=index)
            except ConfigError as exc:
                notes.append(f"{term!r} matches no model ({exc})")
                match = pd.Series(False, index=index)
            else:
                if not match.any():
                    notes.append(f"{term!r} matches no model of {testbed.name}")
            hit &= ~match if negate else match
        chosen |= hit
    return list(index[chosen]), notes


def match_baselines(testbed: Testbed, models: Sequence[str], baseline: str) -> dict[str, list[str]]:
    """Each model's baseline model(s) by the group's ``baseline`` rule (module docstring);
    models without one are left out."""
    if not baseline:
        return {}
    meta = testbed.metadata
    names = set(testbed.models)
    out: dict[str, list[str]] = {}
    if baseline.startswith("same:"):
        col, _, terms = baseline[5:].partition("&")
        col = col.strip()
        try:
            values = _column(testbed, col)
        except ConfigError:
            return {}
        pool, _ = select_models(testbed, terms or "type:STANDARD")
        pool_values = values.loc[pool]
        for m in models:
            v = values[m]
            if isinstance(v, float) and math.isnan(v) or v is None or v is pd.NA:
                continue
            found = [b for b in pool_values.index[pool_values.astype(str) == str(v)] if b != m]
            if found:
                out[m] = found
        return out
    for m in models:
        row = {k: ("" if (isinstance(v, float) and math.isnan(v)) or v is None or v is pd.NA else v)
               for k, v in meta.loc[m].items()}
        row["model"] = m
        for alt in baseline.split("|"):
            try:
                name = alt.strip().format(**row)
            except (KeyError, IndexError, ValueError, TypeError, AttributeError):
                continue
            if name in names and name != m:
                out[m] = [name]
                break
    return out


# ---------------------------------------------------------------------------- shifts
def hypothesis_shifts(testbed: Testbed, shifts: Iterable[object] | None = None, x: str | None = None
                      ) -> list[ShiftPair]:
    """The shifts to test: by default the natural shifts of Taori et al. (2020) whose two settings
    the testbed has (:data:`~shiftbench.analysis.placement.NATURAL_SHIFTS`, each against its own
    in-distribution setting); or those named - a natural shift's label (``ImageNet-R``), a
    shifted setting (its natural-shift ``x``, else ``x`` or ``val``), ``(x, y)`` or a ShiftPair.
    ``x`` replaces every shift's in-distribution setting."""
    if shifts is None:
        pairs = [s for s in NATURAL_SHIFTS if s.y in testbed.settings and (x or s.x) in testbed.settings]
        if not pairs:
            raise ConfigError(f"testbed {testbed.name!r} has none of the natural shifts "
                              f"({', '.join(s.label for s in NATURAL_SHIFTS)}); name shifts with --y")
    else:
        pairs = []
        labels = {s.label.lower(): s for s in NATURAL_SHIFTS} | {s.slug: s for s in NATURAL_SHIFTS}
        for item in shifts:
            if isinstance(item, str):
                known = labels.get(item.lower()) or next((s for s in NATURAL_SHIFTS if s.y == item
                                                          and s.x in testbed.settings), None)
                if known is None:
                    if item not in testbed.settings:
                        raise ConfigError(did_you_mean("shift", item, [s.label for s in NATURAL_SHIFTS]
                                                       + testbed.settings, f"testbed {testbed.name!r}"))
                    base = x or ("val" if "val" in testbed.settings else None)
                    if base is None:
                        raise ConfigError(f"shift {item!r}: no in-distribution setting; pass --x")
                    known = ShiftPair(item, base, item)
                pairs.append(known)
            else:
                pairs.append(as_shift(item))
    if x is not None:
        testbed.check_setting(x)
        pairs = [ShiftPair(s.label, x, s.y, s.pivot) for s in pairs]
    for s in pairs:
        testbed.check_setting(s.x)
        testbed.check_setting(s.y)
    return pairs


# ---------------------------------------------------------------------------- statistics
def bootstrap_mean_interval(values: np.ndarray, n_resamples: int = 1000, seed: int = 0,
                            confidence: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (resampling them with
    replacement): ``rng = default_rng(seed)``, indices ``rng.integers(0, n, (n_resamples, n))``, and
    the ``(1 - confidence)/2`` and ``(1 + confidence)/2`` quantiles of the ``n_resamples`` means.
    Vectorised: one ``(n_resamples, n)`` gather, no Python loop over resamples."""
    v = np.asarray(values, dtype=float)
    if v.size == 0 or n_resamples < 1:
        return (math.nan, math.nan)
    idx = np.random.default_rng(seed).integers(0, v.size, size=(n_resamples, v.size))
    means = v[idx].mean(axis=1)
    lo, hi = np.percentile(means, [50 * (1 - confidence), 50 * (1 + confidence)])
    return float(lo), float(hi)


def verdict(n: int, low: float, high: float, min_models: int = MIN_MODELS) -> str:
    """``helps`` (low > 0), ``hurts`` (high < 0), ``no evidence``, ``too few models`` (n below
    ``min_models``) or ``no models`` (n = 0), by :data:`VERDICT_RULE`."""
    if n == 0:
        return NO_MODELS
    if n < min_models:
        return TOO_FEW
    if low > 0:
        return HELPS
    if high < 0:
        return HURTS
    return NO_EVIDENCE


# ---------------------------------------------------------------------------- the table
@dataclass(frozen=True)
class HypothesesTable:
    """The verdict table: :attr:`rows` has one row per group x shift with ``group, hypothesis,
    shift, x, y, n_selected, n_models, mean_er, low, high, verdict`` and the relative-robustness
    fields ``n_pairs, mean_rr, rr_low, rr_high, mean_er_diff, er_diff_low, er_diff_high,
    rr_verdict`` (NaN, and ``rr_verdict`` empty, where the group names no baseline), and
    ``note``; all in percentage points."""

    rows: pd.DataFrame
    testbed: str
    groups_source: str
    n_resamples: int
    seed: int
    confidence: float
    min_models: int
    shifts: tuple[ShiftPair, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> list[dict[str, object]]:
        """The rows as JSON-ready dicts (NaN -> ``None``)."""
        out = []
        for rec in self.rows.to_dict("records"):
            out.append({k: (None if isinstance(v, float) and not math.isfinite(v) else
                            int(v) if isinstance(v, (np.integer,)) else
                            float(v) if isinstance(v, np.floating) else v) for k, v in rec.items()})
        return out

    def verdicts(self) -> pd.DataFrame:
        """Groups x shifts matrix of verdicts (groups in table order)."""
        m = self.rows.pivot(index="group", columns="shift", values="verdict")
        return m.reindex(index=list(dict.fromkeys(self.rows["group"])),
                         columns=list(dict.fromkeys(self.rows["shift"])))

    def summary(self) -> str:
        """One line per group: the shifts where it helps, hurts, and the rest."""
        lines = [f"Hypotheses on {self.testbed} ({self.groups_source}): mean effective robustness per group, "
                 f"{self.confidence:.0%} bootstrap over models ({self.n_resamples} resamples, seed {self.seed})"]
        for group, part in self.rows.groupby("group", sort=False):
            by = {v: list(part.loc[part["verdict"] == v, "shift"]) for v in VERDICTS}
            said = [f"{v} on {', '.join(by[v])}" for v in VERDICTS if by[v]]
            lines.append(f"{group} ({part['hypothesis'].iloc[0]}): " + "; ".join(said))
        return "\n".join(lines)


def _finite(values: pd.Series) -> dict[str, float]:
    """``values`` as a plain dict, NaN left out (read in one pass: iterating a pandas string index
    element by element cost more than the statistics it fed)."""
    return {k: v for k, v in zip(values.index.tolist(), values.to_numpy(dtype=float).tolist()) if math.isfinite(v)}


def _pair_stats(er: pd.Series, acc_y: pd.Series, pairs: dict[str, list[str]],
                finite: tuple[dict[str, float], dict[str, float]] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per paired model with finite values: RR ``acc_y(f) - mean acc_y(f0)`` and ER difference
    (``finite``: :func:`_finite` of ``er`` and ``acc_y``, when the caller has them)."""
    # plain dicts: a pandas reindex per model cost ~4 ms each (8 s on the timm testbed's report)
    er_of, acc_of = finite if finite is not None else (_finite(er), _finite(acc_y))
    rr, der = [], []
    for m, bases in pairs.items():
        if m not in er.index:
            continue
        b_acc = [acc_of[b] for b in bases if b in acc_of]
        b_er = [er_of[b] for b in bases if b in er_of]
        if b_acc and b_er:
            rr.append(acc_y[m] - float(np.mean(b_acc)))
            der.append(er[m] - float(np.mean(b_er)))
    return np.asarray(rr, dtype=float), np.asarray(der, dtype=float)


def hypotheses_table(
    testbed: Testbed,
    groups: str | Path | pd.DataFrame | None = None,
    *,
    x: str | None = None,
    shifts: Iterable[object] | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
    min_models: int = MIN_MODELS,
    confidence: float = 0.95,
    scale: str = "logit",
    fit_on: str | Iterable[str] | None = DEFAULT_FIT_ON,
) -> HypothesesTable:
    """The verdict table of Hendrycks et al. (2021, §5) on ``testbed`` (see the module docstring
    for the statistics, the verdict rule and the group table).

    Parameters
    ----------
    testbed:
        Models x settings with metadata (``model_type``, ``arch``, ...).
    groups:
        A group table: CSV path, DataFrame, or ``None`` for the one shipped for the testbed's name.
    x, shifts:
        In-distribution setting replacing every shift's own, and the shifts
        (:func:`hypothesis_shifts`; default the natural shifts the testbed has).
    n_resamples, seed, confidence:
        The percentile bootstrap over models (``n_resamples=0``: no intervals).
    min_models:
        Fewest models with both accuracies for a verdict (else ``too few models``).
    scale, fit_on:
        How the trend is fitted (:func:`~shiftbench.analysis.placement.fit_shift`).
    """
    if groups is None:
        path = shipped_groups_path(testbed.name)
        if path is None:
            raise ConfigError(f"no group table ships for testbed {testbed.name!r}; pass --groups FILE (a CSV with "
                              f"columns group, hypothesis, select, baseline; see docs/hypotheses.md)")
        groups = path
    table = load_groups(groups)
    if min_models < 1:
        raise ConfigError(f"min_models={min_models} must be at least 1")
    if n_resamples < 0:
        raise ConfigError(f"n_resamples={n_resamples} must be 0 or more")
    explicit = shifts is not None
    pairs = hypothesis_shifts(testbed, shifts, x)
    members = {}
    for g in table.itertuples(index=False):
        chosen, notes = select_models(testbed, g.select)
        members[g.group] = (chosen, notes, match_baselines(testbed, chosen, g.baseline))
    rows, notes_out, used = [], [], []
    for shift in pairs:
        try:
            fit = fit_shift(testbed, shift, scale, fit_on=fit_on)
        except ShiftbenchError as exc:
            if explicit:
                raise
            notes_out.append(f"{shift.label}: not analysed ({exc})")
            continue
        used.append(shift)
        er = effective_robustness(testbed, shift.x, shift.y, fit=fit, n_resamples=0)["effective_robustness"]
        acc_y = testbed.accuracies[shift.y]
        finite = _finite(er), _finite(acc_y)          # once per shift, for every group's pairs
        for g in table.itertuples(index=False):
            chosen, notes, bases = members[g.group]
            vals = er.reindex(chosen).dropna().to_numpy()
            n = len(vals)
            low, high = bootstrap_mean_interval(vals, n_resamples, seed, confidence) if n >= min_models else (math.nan,) * 2
            row = {"group": g.group, "hypothesis": g.hypothesis, "shift": shift.label, "x": shift.x, "y": shift.y,
                   "n_selected": len(chosen), "n_models": n, "mean_er": float(vals.mean()) if n else math.nan,
                   "low": low, "high": high, "verdict": verdict(n, low, high, min_models),
                   "n_pairs": 0, "mean_rr": math.nan, "rr_low": math.nan, "rr_high": math.nan,
                   "mean_er_diff": math.nan, "er_diff_low": math.nan, "er_diff_high": math.nan, "rr_verdict": "",
                   "note": "; ".join(notes)}
            if g.baseline:
                rr, der = _pair_stats(er, acc_y, bases, finite)
                k = len(rr)
                row["n_pairs"] = k
                if k:
                    row["mean_rr"], row["mean_er_diff"] = float(rr.mean()), float(der.mean())
                if k >= min_models:
                    row["rr_low"], row["rr_high"] = bootstrap_mean_interval(rr, n_resamples, seed, confidence)
                    row["er_diff_low"], row["er_diff_high"] = bootstrap_mean_interval(der, n_resamples, seed, confidence)
                row["rr_verdict"] = verdict(k, row["rr_low"], row["rr_high"], min_models)
            rows.append(row)
    frame = pd.DataFrame(rows, columns=ROW_COLUMNS).astype({"n_selected": int, "n_models": int, "n_pairs": int})
    return HypothesesTable(frame, testbed.name, str(table.attrs.get("source", "group table")), n_resamples, seed,
                           confidence, min_models, tuple(used), tuple(notes_out))
