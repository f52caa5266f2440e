"""Video robustness sets with pm-sets: ImageNet-Vid-Robust and YouTube-BB-Robust
(Shankar et al. 2021, "Do image classifiers generalize across time?").

Each pm-set is an *anchor* frame plus its neighbouring frames in the same video. pm-k accuracy
is the fraction of anchors whose anchor frame **and** every neighbour within ``|offset| <= k``
frames are classified correctly (pm-0 = anchor accuracy). A frame is correct when the
prediction, projected onto the superclasses, is one of the frame's acceptable labels (its
``targets`` tuple).

Representation (one forward pass per frame file):

- one example per frame file; ``ids`` are paths relative to the dataset root;
- ``targets[i]`` is a tuple of acceptable superclass indices;
- ``groups[i]`` is the id of the anchor of the frame's pm-set and ``offsets[i]`` the signed
  frame-number distance to it (0 for the anchor itself). In the released sets every frame
  belongs to exactly one pm-set. Should a frame belong to several, it is still one example:
  ``groups``/``offsets`` name the first anchor (sorted ids) whose set holds it (an anchor is
  always its own group), and :attr:`VideoDataset.pmsets` keeps every membership, so
  :func:`pm_sets` stays exact.
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from shiftbench.datasets import classmaps as cm
from shiftbench.datasets._scan import LayoutError, require_dir
from shiftbench.datasets.base import FileDataset, ImageDataset, Target
from shiftbench.datasets.registry import register_dataset
from shiftbench.errors import DataError

_YTBB_FRAME = re.compile(r"^frame-(\d+)\.jpe?g$", re.IGNORECASE)
#: pm-k review words that make a (anchor, neighbour) pair unusable (published testbed).
_PMK_PROBLEMS = frozenset({"dissimilar", "problematic", "incorrect", "dont know", "deformation", "background-change",
                           "occlusion-increased", "blur-increase", "bad-anchor"})


@dataclass
class VideoDataset(FileDataset):
    """A :class:`FileDataset` of video frames that also knows its pm-sets:
    ``pmsets[anchor_id] = [(neighbour_id, offset), ...]`` (the anchor excluded)."""

    pmsets: dict[str, list[tuple[str, int]]] = field(default_factory=dict)


class PmSet(NamedTuple):
    """One pm-set by example index: the anchor and its ``(index, offset)`` neighbours."""

    anchor: int
    neighbours: list[tuple[int, int]]


def pm_sets(dataset: ImageDataset, on_incomplete: str = "drop") -> list[PmSet]:
    """The dataset's pm-sets as example indices, sorted by anchor id.

    Uses :attr:`VideoDataset.pmsets` when present, else ``groups``/``offsets`` (anchor =
    the example whose id is the group). After :meth:`~ImageDataset.subset` a pm-set may have
    lost members; pm-k cannot be computed exactly for it, so ``on_incomplete="drop"`` leaves
    it out, ``"raise"`` raises :class:`DataError` naming the first absent frame.
    """
    if on_incomplete not in ("drop", "raise"):
        raise ValueError(f"on_incomplete must be 'drop' or 'raise', not {on_incomplete!r}")
    index = {id_: i for i, id_ in enumerate(dataset.ids)}
    sets = getattr(dataset, "pmsets", None) or _sets_from_groups(dataset)
    out = []
    for anchor in sorted(sets):
        members = [anchor] + [m for m, _ in sets[anchor]]
        absent = next((m for m in members if m not in index), None)
        if absent is not None:
            if on_incomplete == "raise":
                raise DataError(f"{dataset.name}: pm-set of {anchor} is incomplete ({absent} is not in the dataset)")
            continue
        out.append(PmSet(index[anchor], [(index[m], off) for m, off in sets[anchor]]))
    return out


def _sets_from_groups(dataset: ImageDataset) -> dict[str, list[tuple[str, int]]]:
    if dataset.groups is None or dataset.offsets is None:
        raise DataError(f"dataset {dataset.name!r} has no pm-sets (no groups/offsets)")
    sets: dict[str, list[tuple[str, int]]] = {}
    for id_, g, off in zip(dataset.ids, dataset.groups, dataset.offsets):
        sets.setdefault(g, [])
        if id_ != g:
            sets[g].append((id_, int(off)))
    return sets


def pm_k_accuracy(correct: Sequence[bool] | np.ndarray, sets: Sequence[PmSet], k: int) -> float:
    """pm-k accuracy: the fraction of pm-sets whose anchor and every neighbour with
    ``|offset| <= k`` are correct (Shankar et al. 2021, §3). ``correct[i]`` is example i's
    correctness; a reference implementation for the views."""
    if not sets:
        raise DataError("pm-k accuracy of zero pm-sets is undefined")
    c = np.asarray(correct, dtype=bool)
    ok = [c[s.anchor] and all(c[i] for i, off in s.neighbours if abs(off) <= k) for s in sets]
    return float(np.mean(ok))


def _present(folder: Path) -> set[str]:
    try:
        with os.scandir(folder) as it:
            return {e.name for e in it}
    except (FileNotFoundError, NotADirectoryError):
        return set()


def _build(name: str, which: str, root: Path, members: dict[str, list[tuple[str, int]]],
           target_of: dict[str, Target], skipped: list[tuple[str, str]], expected: str) -> VideoDataset:
    if not members:
        raise LayoutError(name, expected, None, f"no complete pm-set under {root}")
    group: dict[str, tuple[str, int]] = {a: (a, 0) for a in members}
    for anchor in sorted(members):
        for frame, off in members[anchor]:
            group.setdefault(frame, (anchor, off))
    ids = sorted(group)
    names = list(cm.video_class_names(which))
    return VideoDataset(
        name=name, ids=ids, targets=[target_of[i] for i in ids], label_space=cm.video_label_space(which),
        num_classes=len(names), class_names=names, groups=[group[i][0] for i in ids],
        offsets=[group[i][1] for i in ids], root=root, skipped_on_scan=skipped,
        paths=[root / i for i in ids], pmsets={a: sorted(m) for a, m in sorted(members.items())},
    )


def _vid(root: Path, name: str, strict: bool) -> VideoDataset:
    if not (root / "val").is_dir():
        if (root / "imagenet-vid-robust" / "val").is_dir():
            root = root / "imagenet-vid-robust"
        elif root.name == "val" and root.is_dir():
            root = root.parent
    pmsets, labels = cm.vid_pmsets(), cm.vid_frame_labels()
    expected = (f"{root}/val/ILSVRC2015_val_<video>/<frame>.JPEG (the {sum(1 + len(v) for v in pmsets.values()):,} "
                f"frames of the {len(pmsets):,} pm-sets)")
    require_dir(root / "val", name, expected)
    listing: dict[str, set[str]] = {}
    members, skipped = {}, []
    for anchor in sorted(pmsets):
        frames = [anchor, *pmsets[anchor]]
        absent = []
        for f in frames:
            d, base = f.rsplit("/", 1)
            if d not in listing:
                listing[d] = _present(root / d)
            if base not in listing[d]:
                absent.append(f)
        if absent:
            if strict:
                raise LayoutError(name, expected, root / absent[0], "strict=False keeps only the complete pm-sets")
            skipped.append((anchor, f"pm-set incomplete: {len(absent)} of {len(frames)} frames absent, e.g. {absent[0]}"))
            continue
        na = _frame_number(anchor)
        members[anchor] = [(f, _frame_number(f) - na) for f in pmsets[anchor]]
    return _build(name, "imagenet-vid-robust", root, members, dict(labels), skipped, expected)


def _frame_number(key: str) -> int:
    return int(re.sub(r"\D", "", key.rsplit("/", 1)[1]))


def _read_pmk_review(path: Path) -> tuple[dict[str, set[str]], set[str]]:
    """Valid neighbour keys per anchor and the anchors reviewers marked bad, from the published
    pm-k review file (``pmk_labels.json``: keys ``<anchor path>,<neighbour path>``)."""
    try:
        raw = json.loads(Path(path).read_text())
        words = raw["labels"]
        latest: dict[str, set[str]] = {}
        for ann in raw["annotations"]:
            anchor, neighbour = (cm.ytbb_frame_key(p) for p in ann["key"].split(","))
            latest[f"{anchor},{neighbour}"] = {words[i] for i in ann["labels"]}
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise DataError(f"pm-k review {path}: expected the published pmk_labels.json "
                        f"('labels' list, 'annotations' with 'key' and 'labels') ({type(exc).__name__}: {exc})") from exc
    valid: dict[str, set[str]] = {}
    bad: set[str] = set()
    for key, said in latest.items():
        a, n = key.split(",")
        if "bad-anchor" in said:
            bad.add(a)
        if "similar" in said and not said & _PMK_PROBLEMS:
            valid.setdefault(a, set()).add(n)
    return valid, bad


def _ytbb(root: Path, name: str, strict: bool, pmk_labels: Path | str | None) -> VideoDataset:
    for sub in ("ytbb_videos", "ytbb-robust/ytbb_videos"):
        if (root / sub).is_dir():
            root = root / sub
            break
    anchors = cm.ytbb_anchor_labels()
    expected = f"{root}/<ytid>_<time_ms>/frame-<n>.jpg (folders of the {len(anchors):,} reviewed anchors)"
    require_dir(root, name, expected)
    valid_pairs, bad = _read_pmk_review(Path(pmk_labels)) if pmk_labels is not None else (None, set())
    with os.scandir(root) as it:
        on_disk = {e.name for e in it if not e.name.startswith(".") and e.is_dir()}
    members, skipped, target_of = {}, [], {}
    for anchor in sorted(anchors):
        if anchor in bad:
            continue
        d, anchor_file = anchor.split("/")
        listing = _present(root / d) if d in on_disk else set()
        if anchor_file not in listing:
            if strict:
                raise LayoutError(name, expected, root / anchor, "strict=False keeps the anchors present")
            skipped.append((anchor, "anchor frame absent"))
            continue
        na = _frame_number(anchor)
        frames = []
        for f in sorted(listing):
            if f.startswith("."):
                continue
            m = _YTBB_FRAME.match(f)
            if m is None:
                skipped.append((f"{d}/{f}", "not a frame-<n>.jpg file"))
                continue
            key = f"{d}/{f}"
            if key == anchor or (valid_pairs is not None and key not in valid_pairs.get(anchor, ())):
                continue
            frames.append((key, int(m.group(1)) - na))
        members[anchor] = frames
        for key in [anchor, *(k for k, _ in frames)]:
            target_of[key] = anchors[anchor]
    # folders of anchors the review rejected are left out by the protocol; others are unexpected
    skipped += [(d, "folder is not a YTBB-Robust anchor") for d in sorted(on_disk - set(cm.ytbb_anchor_dirs()))]
    return _build(name, "ytbb-robust", root, members, target_of, skipped, expected)


def video_robust(root: Path | str, which: str, name: str | None = None, strict: bool = True,
                 pmk_labels: Path | str | None = None) -> VideoDataset:
    """ImageNet-Vid-Robust (``which="imagenet-vid-robust"``) or YouTube-BB-Robust (``"ytbb-robust"``).

    **imagenet-vid-robust**: frames at the paths of the package's labels json relative to
    ``root`` (``root/val/ILSVRC2015_val_00000000/000432.JPEG``); 1,109 pm-sets (anchor + up to
    20 neighbours within +-10 frames), 22,179 frames. Each frame's target is its own tuple of
    acceptable classes from the labels json (``imagenet-vid-robust-30``), as the published
    testbed scores every frame against its own labels.

    **ytbb-robust**: ``root[/ytbb_videos]/<ytid>_<time_ms>/frame-<n>.jpg``, one folder per
    anchor; the anchor frame is the key of the anchor review
    (:func:`~shiftbench.datasets.classmaps.ytbb_anchor_labels`: 2,169 anchors that reviewers
    marked ``good`` and not ``bad``/``unsure``; labels = the original YTBB label plus classes
    reviewers added; the status words ``good/unsure/bad`` are not classes). Every other
    ``frame-<n>.jpg`` in the folder is a neighbour at offset ``n - n_anchor`` and shares the
    anchor's labels (``ytbb-robust-24``). The published testbed further drops neighbours that
    reviewers judged dissimilar, using ``pmk_labels.json``, which is not shipped: pass its path
    as ``pmk_labels`` to apply that review; without it every frame present counts, which makes
    pm-k slightly stricter than published.

    ``strict`` (default) requires every frame (VID) or anchor frame (YTBB) to be present and
    names the first absent one; ``strict=False`` keeps the complete pm-sets and lists the others
    in ``skipped_on_scan``.
    """
    cm._check_video(which)
    root = Path(root)
    name = name or which
    if which == "imagenet-vid-robust":
        return _vid(root, name, strict)
    return _ytbb(root, name, strict, pmk_labels)


@register_dataset("imagenet-vid-robust", default_dir="imagenet-vid-robust", label_space="imagenet-vid-robust-30",
                  alt_dirs=("imagenet_vid_ytbb_robust/imagenet-vid-robust",),
                  layout="val/ILSVRC2015_val_<video>/<frame>.JPEG (frames of the 1,109 pm-sets)")
def _vid_entry(root: Path | str, **kwargs) -> VideoDataset:
    return video_robust(root, "imagenet-vid-robust", **kwargs)


@register_dataset("ytbb-robust", default_dir="ytbb-robust", label_space="ytbb-robust-24",
                  alt_dirs=("imagenet_vid_ytbb_robust/ytbb-robust",),
                  layout="[ytbb_videos/]<ytid>_<time_ms>/frame-<n>.jpg (one folder per anchor)")
def _ytbb_entry(root: Path | str, **kwargs) -> VideoDataset:
    return video_robust(root, "ytbb-robust", **kwargs)
