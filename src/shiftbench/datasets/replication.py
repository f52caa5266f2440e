"""Dataset replication: sample a new test set from annotated candidates (Recht et al. 2019).

Recht, Roelofs, Schmidt and Shankar, *Do ImageNet Classifiers Generalize to ImageNet?* (ICML
2019), §3 and Appendix D (the ImageNet replication; Appendix C is CIFAR-10's). Each candidate image of a class carries a **selection frequency**
``f = n_selected / n_annotators``, the share of MTurk annotators who said the image contains
the class. Three strategies pick ``k`` images per class (ImageNetV2: ``k = 10``):

- ``matched-frequency``: bin the original test set's frequencies of the class (edges
  ``0, .2, .4, .6, .8, 1``; bin ``i`` is ``[e_i, e_{i+1})``, the last one closed), scale the
  histogram to ``k`` images by largest-remainder rounding, and draw that many candidates
  uniformly without replacement from each bin (:func:`matched_frequency`);
- ``threshold``: draw ``k`` uniformly among the candidates with ``f >= tau`` (ImageNetV2's
  Threshold0.7; :func:`threshold`);
- ``top-images``: the ``k`` candidates with the highest ``f`` (:func:`top_images`).

Reproducible: the draw of a class depends only on ``(seed, class label)`` and on the class's
candidates ordered by path -- never on row order or on the other classes.

This module is data only: the strategies, :func:`sample_replication` and :class:`Replication`
(with its manifest writing). The study that samples, writes the manifest and keeps the
histograms in the results store (``replication``, the report's "Dataset replication" section),
and the one-call :func:`~shiftbench.studies.replication.replicate`, are
:mod:`shiftbench.studies.replication`.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from shiftbench.datasets.manifest import check_table
from shiftbench.errors import ConfigError, DataError, did_you_mean

BINS: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
"""Recht et al.'s five selection-frequency bins of width 0.2 (``standard_bins`` of their code)."""
STRATEGIES: tuple[str, ...] = ("matched-frequency", "threshold", "top-images")
FALLBACKS: tuple[str, ...] = ("error", "upward")
_HINTS = {"matched-frequency": "add candidates, lower images_per_class or use fallback='upward'",
          "threshold": "add candidates, lower images_per_class or the threshold",
          "top-images": "add candidates or lower images_per_class"}


class TooFewCandidates(DataError):
    """A class has fewer candidates than a strategy needs."""


# ----------------------------------------------------------------------------- histograms
def check_bins(bins: Sequence[float]) -> np.ndarray:
    """``bins`` as a float array of edges: at least two, strictly increasing, from 0 to 1."""
    try:
        edges = np.asarray([float(b) for b in bins], dtype=float)
    except (TypeError, ValueError):
        raise ConfigError(f"bins {bins!r}: give numeric edges from 0 to 1, e.g. 0,0.2,0.4,0.6,0.8,1") from None
    if (edges.size < 2 or not np.all(np.isfinite(edges)) or edges[0] != 0.0 or edges[-1] != 1.0
            or np.any(np.diff(edges) <= 0)):
        raise ConfigError(f"bins {list(map(float, bins))}: edges must rise strictly from 0 to 1, "
                          "e.g. 0,0.2,0.4,0.6,0.8,1")
    return edges


def frequency_bin(frequencies: Any, bins: Sequence[float] = BINS) -> np.ndarray:
    """The bin index of each selection frequency: ``i`` with ``e_i <= f < e_{i+1}``, and the
    last bin for ``f = 1`` (Recht et al.'s ``get_histogram_bin``: 0.2 falls in ``[0.2, 0.4)``).
    """
    edges = check_bins(bins)
    return np.searchsorted(edges[1:-1], np.asarray(frequencies, dtype=float), side="right")


def selection_histogram(frequencies: Any, bins: Sequence[float] = BINS) -> np.ndarray:
    """Counts of ``frequencies`` per bin (see :func:`frequency_bin`); length ``len(bins) - 1``."""
    return np.bincount(frequency_bin(frequencies, bins), minlength=len(bins) - 1)


def round_histogram(counts: Any, total: int) -> np.ndarray:
    """Scale ``counts`` to integers summing to ``total`` by largest remainder.

    ``q_b = total * c_b / sum(c)``; each bin gets ``floor(q_b)``, and the ``total - sum(floor)``
    leftover images go to the bins with the largest ``q_b - floor(q_b)``; equal remainders go
    to the higher bin first (Recht et al.'s ``round_histogram``). E.g. counts ``(1, 1, 1)``
    and total 2 give ``(0, 1, 1)``.
    """
    counts = np.asarray(counts, dtype=float)
    if counts.sum() <= 0:
        raise DataError("round_histogram: the histogram is empty (no reference images)")
    exact = total * counts / counts.sum()
    result = np.floor(exact).astype(np.int64)
    remainder = exact - result
    order = sorted(range(len(counts)), key=lambda b: (remainder[b], b), reverse=True)
    for b in order[: total - int(result.sum())]:
        result[b] += 1
    return result


def _bin_name(edges: np.ndarray, b: int) -> str:
    close = "]" if b == len(edges) - 2 else ")"
    return f"[{edges[b]:g}, {edges[b + 1]:g}{close}"


# ----------------------------------------------------------------------------- strategies
def matched_frequency(frequencies: Any, reference_frequencies: Any, images_per_class: int = 10, *,
                      bins: Sequence[float] = BINS, rng: np.random.Generator | int = 0,
                      fallback: str | None = None) -> np.ndarray:
    """MatchedFrequency for one class (Recht et al. 2019, §3 and Appendix D): indices into
    ``frequencies`` of the chosen candidates, ascending.

    The target per bin is ``round_histogram(selection_histogram(reference_frequencies), k)``;
    bin by bin, ascending, ``target_b`` candidates of that bin are drawn uniformly without
    replacement (``rng.choice`` over the bin's candidates in index order). A bin with fewer
    candidates than its target is a :class:`TooFewCandidates` error naming every short bin
    (the paper's procedure), unless ``fallback="upward"``: the bin takes all it has, and each
    missing image is then drawn uniformly from the nearest *higher* bin with candidates left,
    short bins handled in ascending order (the ``allow_upward_sampling`` rule of the authors'
    code; higher-frequency images are the cleaner substitute).
    """
    edges = check_bins(bins)
    rng = np.random.default_rng(rng)
    freqs = np.asarray(frequencies, dtype=float)
    target = round_histogram(selection_histogram(reference_frequencies, edges), images_per_class)
    where = frequency_bin(freqs, edges)
    pools = [np.flatnonzero(where == b) for b in range(len(target))]
    short = {b: int(target[b] - len(pools[b])) for b in range(len(target)) if target[b] > len(pools[b])}
    if short and fallback in (None, "error"):
        raise TooFewCandidates("; ".join(f"bin {_bin_name(edges, b)} needs {target[b]}, has {len(pools[b])}"
                                         for b in short))
    chosen: list[int] = []
    for b, pool in enumerate(pools):
        take = min(int(target[b]), len(pool))
        picked = rng.choice(len(pool), size=take, replace=False)
        chosen.extend(pool[picked].tolist())
        pools[b] = np.delete(pool, picked)
    for b, missing in short.items():
        for _ in range(missing):
            higher = next((h for h in range(b + 1, len(pools)) if len(pools[h])), None)
            if higher is None:
                raise TooFewCandidates(f"bin {_bin_name(edges, b)} needs {target[b]}, and no higher bin has "
                                       "candidates left for the upward fallback")
            i = int(rng.integers(len(pools[higher])))
            chosen.append(int(pools[higher][i]))
            pools[higher] = np.delete(pools[higher], i)
    return np.sort(np.asarray(chosen, dtype=np.int64))


def threshold(frequencies: Any, images_per_class: int = 10, tau: float = 0.7, *,
              rng: np.random.Generator | int = 0) -> np.ndarray:
    """Threshold-tau for one class (Recht et al. 2019, §3; ImageNetV2 used tau = 0.7): ``k``
    indices drawn uniformly without replacement among the candidates with ``f >= tau``
    (in index order), returned ascending. Fewer than ``k`` such candidates is
    :class:`TooFewCandidates`."""
    eligible = np.flatnonzero(np.asarray(frequencies, dtype=float) >= tau)
    if len(eligible) < images_per_class:
        raise TooFewCandidates(f"{len(eligible)} candidates have selection frequency >= {tau:g}, "
                               f"need {images_per_class}")
    rng = np.random.default_rng(rng)
    return np.sort(rng.choice(eligible, size=images_per_class, replace=False))


def top_images(frequencies: Any, images_per_class: int = 10, *, n_annotators: Any = None) -> np.ndarray:
    """TopImages for one class (Recht et al. 2019, §3): the ``k`` candidates with the highest
    selection frequency, returned ascending. Ties are broken by more annotators (when
    ``n_annotators`` is given, as in the authors' code), then by lower index (earlier path).
    Deterministic; fewer than ``k`` candidates is :class:`TooFewCandidates`."""
    freqs = np.asarray(frequencies, dtype=float)
    if len(freqs) < images_per_class:
        raise TooFewCandidates(f"{len(freqs)} candidates, need {images_per_class}")
    votes = np.zeros(len(freqs)) if n_annotators is None else np.asarray(n_annotators, dtype=float)
    order = np.lexsort((np.arange(len(freqs)), -votes, -freqs))   # last key is the primary one
    return np.sort(order[:images_per_class])


def class_rng(seed: int, label: Any) -> np.random.Generator:
    """The generator of one class: seeded from ``(seed, sha256(str(label)))``, so a class's draw
    does not depend on which other classes exist or in what order they come."""
    digest = int.from_bytes(hashlib.sha256(str(label).encode()).digest()[:8], "little")
    return np.random.default_rng(np.random.SeedSequence([seed, digest]))


# ----------------------------------------------------------------------------- input
def _read(table: Any, role: str) -> tuple[pd.DataFrame, str, Path | None]:
    """A CSV/Parquet file or a DataFrame -> (frame, 'candidates FILE', folder of the file)."""
    if isinstance(table, pd.DataFrame):
        return table.reset_index(drop=True), f"{role} table", None
    path = Path(table)
    where = f"{role} {path}"
    if not path.is_file():
        raise DataError(f"{where} does not exist (expected a .csv or .parquet file)")
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            frame = pd.read_csv(path, dtype={"path": str, "label": str}, keep_default_na=False, na_values=[""])
        elif suffix in (".parquet", ".pq"):
            frame = pd.read_parquet(path)
        else:
            raise DataError(f"{where}: unknown format {suffix!r}; use .csv or .parquet")
    except DataError:
        raise
    except Exception as exc:  # noqa: BLE001 - any unreadable table is one DataError
        raise DataError(f"{where}: cannot read ({type(exc).__name__}: {exc})") from exc
    return frame, where, path.parent


def _rows(where: str, mask: np.ndarray, csv: bool) -> str:
    r = int(np.flatnonzero(mask)[0])
    return f"line {r + 2}" if csv else f"row {r + 1}"


def _frequencies(df: pd.DataFrame, where: str) -> np.ndarray:
    """``selection_frequency``, or ``n_selected / n_annotators``; finite and in [0, 1]."""
    csv = where.endswith(".csv")
    if "selection_frequency" in df.columns:
        col = "selection_frequency"
        f = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
        bad = ~np.isfinite(f)
        if bad.any():
            value = df[col].iloc[int(np.flatnonzero(bad)[0])]
            shown = "empty" if pd.isna(value) else repr(value.item() if hasattr(value, "item") else value)
            raise DataError(f"{where}: column {col!r} at {_rows(where, bad, csv)} is {shown}; "
                            "it must be a number in [0, 1]")
    elif {"n_selected", "n_annotators"} <= set(df.columns):
        col = "n_selected/n_annotators"
        sel = pd.to_numeric(df["n_selected"], errors="coerce").to_numpy(dtype=float)
        ann = pd.to_numeric(df["n_annotators"], errors="coerce").to_numpy(dtype=float)
        for name, v in (("n_selected", sel), ("n_annotators", ann)):
            bad = ~np.isfinite(v) | (v < 0) | (v != np.round(v))
            if bad.any():
                raise DataError(f"{where}: column {name!r} at {_rows(where, bad, csv)} is not a whole number >= 0")
        bad = ann == 0
        if bad.any():
            raise DataError(f"{where}: column 'n_annotators' at {_rows(where, bad, csv)} is 0; "
                            "an image needs at least one annotator")
        f = sel / ann
    else:
        raise DataError(f"{where}: no column 'selection_frequency' (nor n_selected and n_annotators); columns: "
                        f"{', '.join(map(str, df.columns))}")
    bad = (f < 0) | (f > 1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(f"{where}: column {col!r} at {_rows(where, bad, csv)} is {f[i]:g}, outside [0, 1]")
    return f


def _labels(df: pd.DataFrame, where: str) -> tuple[list[Any], str]:
    """Labels as ints (class indices) when every one is a whole number, else stripped names."""
    if "label" not in df.columns:
        raise DataError(f"{where}: no column 'label' (columns: {', '.join(map(str, df.columns))})")
    values = df["label"].tolist()
    csv = where.endswith(".csv")
    empty = np.array([v is None or (isinstance(v, float) and not np.isfinite(v)) or str(v).strip() == ""
                      for v in values])
    if empty.any():
        raise DataError(f"{where}: column 'label' at {_rows(where, empty, csv)} is empty")
    text = [str(v).strip() for v in values]
    if all(t.isdigit() for t in text):
        return [int(t) for t in text], "index"
    if pd.api.types.is_float_dtype(df["label"]):
        raise DataError(f"{where}: column 'label' holds floats; use class indices or class names")
    return text, "name"


def _candidates(table: Any, root: Path | str | None) -> tuple[pd.DataFrame, str, str]:
    df, where, folder = _read(table, "candidates")
    check_table(df, where, "path,label,selection_frequency or path,label,n_selected,n_annotators")
    csv = where.endswith(".csv")
    labels, kind = _labels(df, where)
    freqs = _frequencies(df, where)
    base = Path(root) if root is not None else (folder if folder is not None else Path.cwd())
    raw = df["path"].tolist()
    empty = np.array([not isinstance(p, str) or not p.strip() for p in raw])
    if empty.any():
        raise DataError(f"{where}: column 'path' at {_rows(where, empty, csv)} is empty")
    base = os.path.abspath(base)
    paths = [os.path.normpath(os.path.join(base, p)) for p in raw]     # join keeps an absolute p as is
    dup = pd.Series(paths).duplicated().to_numpy()
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        raise DataError(f"{where}: column 'path' at {_rows(where, dup, csv)} repeats {raw[i]!r}; "
                        "each candidate image may appear once")
    out = pd.DataFrame({"path": paths, "label": labels, "selection_frequency": freqs})
    if "n_annotators" in df.columns:
        out["n_annotators"] = pd.to_numeric(df["n_annotators"], errors="coerce").fillna(0).to_numpy()
    return out, where, kind


def _reference(table: Any) -> tuple[pd.DataFrame, str, str]:
    df, where, _ = _read(table, "reference")
    if df.empty:
        raise DataError(f"{where}: no rows")
    labels, kind = _labels(df, where)
    return pd.DataFrame({"label": labels, "selection_frequency": _frequencies(df, where)}), where, kind


# ----------------------------------------------------------------------------- result
@dataclass(frozen=True)
class Replication:
    """A replicated test set.

    ``manifest``: one row per chosen image (``path`` absolute, ``label``,
    ``selection_frequency``), ordered by class then path. ``summary``: one row per class
    (``n_candidates``, ``n_images``, ``mean_selection_frequency`` and, with a reference,
    ``reference_n_images``, ``reference_mean_selection_frequency``). ``mean_selection_frequency``
    is the mean over all chosen images (the statistic Recht et al. compare across their three
    test sets and the original).
    """

    manifest: pd.DataFrame
    summary: pd.DataFrame
    strategy: str
    params: dict[str, Any] = field(default_factory=dict)
    mean_selection_frequency: float = float("nan")
    reference_mean_selection_frequency: float | None = None
    #: The reference's ``label`` and ``selection_frequency``, one row per image (``None`` without one).
    reference: pd.DataFrame | None = None

    def write(self, path: Path | str, label_space: Any = None) -> Path:
        """Write the manifest (``.csv`` or ``.parquet``: ``path,label,selection_frequency``) with
        paths relative to its folder, which :func:`shiftbench.datasets.manifest` (and the
        ``manifest:<file>`` setting) reads. Every image must lie inside that folder -- the
        engine reads a manifest's images only from there -- else a :class:`DataError`.

        ``label_space`` (``"imagenet-1k"``, ``"cifar10"``, a list of class names or a
        ``.txt``/``.json`` file of them) also writes the sidecar ``<path>.classes.json``, so the
        manifest keeps that space's indices and size: a replication of some ImageNet classes,
        labelled by index, wnid or name, evaluates a 1000-output model. Every label must be a
        class of it (checked before anything is written), else a :class:`DataError` naming the
        label and the closest classes. Labels are written as given. Without ``label_space``, a
        sidecar an earlier write left beside ``path`` is removed (it would relabel this manifest)."""
        from shiftbench.datasets.manifest import (  # deferred: loads Pillow
            SIDECAR_SUFFIXES,
            label_space_of,
            write_label_space,
        )
        from shiftbench.store.files import atomic_write_with  # temp name, fsync, os.replace

        path = Path(path)
        suffix = path.suffix.lower()
        if suffix not in (".csv", ".parquet", ".pq"):
            raise ConfigError(f"manifest {path}: unknown format {suffix!r}; use .csv or .parquet")
        space = label_space_of(label_space) if label_space is not None else None
        for lab in dict.fromkeys(self.manifest["label"].tolist()) if space is not None else ():
            try:
                space.index(lab)
            except DataError as exc:
                raise DataError(f"manifest {path}: {exc}") from None
        folder = os.path.abspath(path.parent)
        rel = []
        for p in self.manifest["path"]:
            r = os.path.relpath(p, folder)
            if r == ".." or r.startswith(".." + os.sep):
                raise DataError(f"manifest {path}: image {p} is outside the manifest's folder {folder}; write the "
                                "manifest into a folder that contains every image (e.g. next to the candidates file)")
            rel.append(Path(r).as_posix())
        frame = self.manifest.assign(path=rel)

        def writer(tmp: Path) -> None:   # the table first, then the sidecar, then the rename onto ``path``
            if suffix == ".csv":
                frame.to_csv(tmp, index=False)
            else:
                frame.to_parquet(tmp, index=False)
            if space is not None:
                write_label_space(path, space)
            else:                    # a sidecar left by an earlier write would relabel this manifest
                for sidecar in SIDECAR_SUFFIXES:
                    path.with_name(path.name + sidecar).unlink(missing_ok=True)

        atomic_write_with(path, writer)
        return path

    @property
    def bins(self) -> np.ndarray:
        """The bin edges of the figure and study: the matched-frequency ``bins``, else :data:`BINS`."""
        return np.asarray(self.params.get("bins", BINS), dtype=float)

    def bin_table(self) -> pd.DataFrame:
        """Per selection-frequency bin (:func:`frequency_bin`): ``bin``, ``lower``, ``upper``,
        ``count`` and ``share`` of the replicated images, and ``reference_count`` and
        ``reference_share`` of the reference's (NaN without a reference) -- the histograms of
        Recht et al. 2019, Figure 3. ``share_b = count_b / sum(count)``."""
        edges = self.bins
        count = selection_histogram(self.manifest["selection_frequency"], edges)
        frame = pd.DataFrame({"bin": np.arange(len(count)), "lower": edges[:-1], "upper": edges[1:],
                              "count": count, "share": count / max(int(count.sum()), 1)})
        if self.reference is not None:
            ref = selection_histogram(self.reference["selection_frequency"], edges)
            frame["reference_count"], frame["reference_share"] = ref, ref / max(int(ref.sum()), 1)
        else:
            frame["reference_count"] = frame["reference_share"] = np.nan
        return frame

    def to_study(self) -> pd.DataFrame:
        """The long-form table a results store keeps (``Store.write_study("replication", ...)``).

        One row per bin (``part == "bin"``: the columns of :meth:`bin_table`) followed by one row
        per class (``part == "class"``: ``label`` as text, ``n_candidates``, ``n_images``,
        ``mean_selection_frequency`` and the reference's ``reference_n_images`` and
        ``reference_mean_selection_frequency``); columns a part does not use are empty."""
        bins = self.bin_table().assign(part="bin")
        classes = self.summary.reset_index().assign(part="class")
        classes["label"] = classes["label"].astype(str)
        for col in ("reference_n_images", "reference_mean_selection_frequency"):
            if col not in classes:
                classes[col] = np.nan
        frame = pd.concat([bins, classes], ignore_index=True)
        front = ["part", "bin", "lower", "upper", "count", "share", "reference_count", "reference_share", "label"]
        frame = frame[front + [c for c in frame.columns if c not in front]]
        for col in ("bin", "count", "reference_count", "n_candidates", "n_images", "reference_n_images"):
            frame[col] = frame[col].astype("Int64")
        return frame

    def study_meta(self) -> dict[str, Any]:
        """The metadata stored with :meth:`to_study`: strategy, parameters (``images_per_class``,
        ``seed``, ``threshold``/``bins``/``fallback`` where they apply), ``bins`` always, counts
        and the two mean selection frequencies."""
        return {"strategy": self.strategy, **self.params, "bins": [float(e) for e in self.bins],
                "n_images": int(len(self.manifest)), "n_classes": int(len(self.summary)),
                "mean_selection_frequency": self.mean_selection_frequency,
                "reference_mean_selection_frequency": self.reference_mean_selection_frequency}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: strategy, parameters, overall means, and the per-class summary rows."""
        return {"strategy": self.strategy, **self.params, "n_images": int(len(self.manifest)),
                "n_classes": int(len(self.summary)), "mean_selection_frequency": self.mean_selection_frequency,
                "reference_mean_selection_frequency": self.reference_mean_selection_frequency,
                "classes": [{k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}
                            for row in self.summary.reset_index().to_dict("records")]}


# ----------------------------------------------------------------------------- entry point
def _check_params(strategy: str, images_per_class: int, tau: float, seed: int, fallback: str | None,
                  has_reference: bool) -> str | None:
    if strategy not in STRATEGIES:
        raise ConfigError(did_you_mean("replication strategy", strategy, STRATEGIES))
    if isinstance(images_per_class, bool) or not isinstance(images_per_class, (int, np.integer)) or images_per_class < 1:
        raise ConfigError(f"images_per_class={images_per_class!r}: give a whole number >= 1 (ImageNetV2: 10)")
    if not (isinstance(tau, (int, float)) and 0.0 <= float(tau) <= 1.0):
        raise ConfigError(f"threshold={tau!r}: the selection-frequency threshold must lie in [0, 1] (ImageNetV2: 0.7)")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"seed={seed!r}: give a whole number >= 0")
    fallback = None if fallback in (None, "error") else fallback
    if fallback is not None and fallback not in FALLBACKS:
        raise ConfigError(did_you_mean("fallback", str(fallback), FALLBACKS, "error (default) or upward"))
    if fallback is not None and strategy != "matched-frequency":
        raise ConfigError(f"fallback={fallback!r} applies to the matched-frequency strategy only")
    if strategy == "matched-frequency" and not has_reference:
        raise ConfigError("matched-frequency needs a reference: the original test set's label,selection_frequency")
    return fallback


def sample_replication(candidates: Any, reference: Any = None, strategy: str = "matched-frequency", *,
                       images_per_class: int = 10, threshold: float = 0.7, bins: Sequence[float] = BINS,
                       seed: int = 0, fallback: str | None = None, root: Path | str | None = None) -> Replication:
    """Sample a new test set per class from annotated candidates (Recht et al. 2019, §3).

    Parameters
    ----------
    candidates:
        CSV/Parquet file or DataFrame with ``path``, ``label`` (class index or name) and
        ``selection_frequency`` in [0, 1] -- or ``n_selected`` and ``n_annotators`` to derive it.
        Relative paths are relative to ``root`` (default: the file's folder; the working
        directory for a DataFrame).
    reference:
        The original test set's ``label`` and ``selection_frequency`` (or the counts), one row
        per image. Required by ``matched-frequency``; optional otherwise (then only the summary
        uses it). With a reference, its classes are the classes sampled.
    strategy:
        ``matched-frequency``, ``threshold`` or ``top-images``.
    images_per_class, threshold, bins:
        ``k`` (10 in ImageNetV2), tau (0.7) and the bin edges (``BINS``).
    seed:
        Each class is drawn with :func:`class_rng` ``(seed, label)``.
    fallback:
        ``None``/``"error"`` (the paper) or ``"upward"`` for a short matched-frequency bin.

    Every class must have enough candidates, else a :class:`TooFewCandidates` error naming the
    file, class and strategy. Example::

        rep = sample_replication("candidates.csv", "val_frequencies.csv", images_per_class=10, seed=0)
        rep.mean_selection_frequency, rep.summary; rep.write("candidates_dir/v2.csv")
    """
    fallback = _check_params(strategy, images_per_class, threshold, seed, fallback, reference is not None)
    edges = check_bins(bins)
    cand, where, kind = _candidates(candidates, root)
    ref = ref_where = None
    if reference is not None:
        ref, ref_where, ref_kind = _reference(reference)
        if ref_kind != kind:
            word = {"index": "indices", "name": "names"}
            raise DataError(f"{where} labels are class {word[kind]} but {ref_where} labels are class {word[ref_kind]}; "
                            "use the same kind in both")
        extra = sorted(set(cand["label"]) - set(ref["label"]), key=str)
        if extra:
            raise DataError(f"{where}: class {extra[0]!r} has candidates but no images in {ref_where} "
                            f"({len(extra)} such classes); a replication samples the reference's classes")
        classes = sorted(set(ref["label"]), key=str if kind == "name" else int)
    else:
        classes = sorted(set(cand["label"]), key=str if kind == "name" else int)

    cand = cand.sort_values("path", kind="stable", ignore_index=True)   # a class's candidates in path order
    by_class = cand.groupby("label", sort=False).indices
    freq_all = cand["selection_frequency"].to_numpy()
    votes_all = cand["n_annotators"].to_numpy() if "n_annotators" in cand else None
    ref_by_class = ({lab: ref["selection_frequency"].to_numpy()[i] for lab, i in ref.groupby("label").indices.items()}
                    if ref is not None else {})
    picked, rows = [], []
    for lab in classes:
        members = by_class.get(lab, np.zeros(0, dtype=np.int64))
        freqs = freq_all[members]
        try:
            if strategy == "matched-frequency":
                idx = matched_frequency(freqs, ref_by_class[lab], images_per_class, bins=edges,
                                        rng=class_rng(seed, lab), fallback=fallback)
            elif strategy == "threshold":
                idx = _threshold(freqs, images_per_class, threshold, rng=class_rng(seed, lab))
            else:
                idx = top_images(freqs, images_per_class, n_annotators=None if votes_all is None else votes_all[members])
        except TooFewCandidates as exc:
            hint = _HINTS["top-images" if fallback else strategy]      # no fallback to suggest once it is on
            raise TooFewCandidates(f"{where}: too few candidates for class {lab!r} under {strategy} "
                                   f"({len(members)} candidates): {exc} ({hint})") from None
        picked.append(members[idx])
        row = {"label": lab, "n_candidates": len(members), "n_images": len(idx),
               "mean_selection_frequency": float(freqs[idx].mean())}
        if ref is not None:
            row |= {"reference_n_images": len(ref_by_class[lab]),
                    "reference_mean_selection_frequency": float(np.mean(ref_by_class[lab]))}
        rows.append(row)
    manifest = cand.iloc[np.concatenate(picked)][["path", "label", "selection_frequency"]].reset_index(drop=True)
    params = {"images_per_class": int(images_per_class), "seed": int(seed)}
    if strategy == "threshold":
        params["threshold"] = float(threshold)
    if strategy == "matched-frequency":
        params |= {"bins": [float(e) for e in edges], "fallback": fallback or "error"}
    return Replication(manifest=manifest, summary=pd.DataFrame(rows).set_index("label"), strategy=strategy,
                       params=params, mean_selection_frequency=float(manifest["selection_frequency"].mean()),
                       reference_mean_selection_frequency=None if ref is None
                       else float(ref["selection_frequency"].mean()), reference=ref)


_threshold = threshold   # ``sample_replication``'s ``threshold`` argument shadows the strategy function
