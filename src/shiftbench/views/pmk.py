"""pm-k: accuracy that survives every neighbouring video frame (Shankar et al. 2021)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from shiftbench.errors import DataError
from shiftbench.views import _ops


def pm_k(correct: Any, groups: Any = None, offsets: Any = None, k: int = 0, *,
         anchors: Any = None, members: Sequence[Any] | None = None,
         member_offsets: Sequence[Any] | None = None, return_anchors: bool = False) -> Any:
    """pm-k accuracy in percent and the number of anchors (``return_anchors=True``: the boolean
    per-anchor correctness instead, anchors in sorted group order or in ``anchors`` order).

    An anchor frame counts as correct only if it is correct **and** every frame of its
    pm-set within ``k`` frames of it (``|offset| <= k``) is correct (Shankar et al. 2021,
    "Do image classifiers generalize across time?", §3); pm-0 is the anchor accuracy.
    ``correct`` is the per-frame top-1 column of a view.

    Two input forms:

    * **per frame** -- ``groups`` (the anchor id of each frame: any hashable ids) and
      ``offsets`` (signed frame distance to that anchor; the anchor has offset 0, exactly one
      per group). Each frame belongs to one group.
    * **explicit sets**, for frames shared between pm-sets -- ``anchors`` (frame index of each
      anchor into ``correct``), ``members`` (per anchor, the frame indices of its neighbours;
      the anchor itself may be included) and ``member_offsets`` (their signed distances).

    Vectorised: one ``bincount`` over all frames, no loop over anchors or frames.

    >>> correct = np.array([True, True, True, False])    # anchor, +-1 right, +3 wrong
    >>> pm_k(correct, groups=[7, 7, 7, 7], offsets=[0, -1, 1, 3], k=2)
    (100.0, 1)
    >>> pm_k(correct, groups=[7, 7, 7, 7], offsets=[0, -1, 1, 3], k=3)
    (0.0, 1)
    """
    c = np.asarray(_ops.to_numpy(correct)).astype(bool).ravel()
    if k < 0:
        raise DataError(f"pm-k needs k >= 0, got {k}")
    if anchors is not None:
        if members is None or member_offsets is None:
            raise DataError("pm_k with anchors= also needs members= and member_offsets=")
        anchor_idx, group, frame, offset = _explicit_sets(c.size, anchors, members, member_offsets)
        n_groups = anchor_idx.size
    else:
        if groups is None or offsets is None:
            raise DataError("pm_k needs groups= and offsets= per frame (or anchors=, members=, member_offsets=)")
        names, group = np.unique(np.asarray(_ops.to_numpy(groups)).ravel(), return_inverse=True)
        offset = np.asarray(_ops.to_numpy(offsets)).ravel()
        if group.size != c.size or offset.size != c.size:
            raise DataError(f"pm_k: {c.size} frames but {group.size} group ids and {offset.size} offsets")
        frame = np.arange(c.size)
        n_groups = names.size
        is_anchor = offset == 0
        per_group = np.bincount(group[is_anchor], minlength=n_groups)
        if (per_group != 1).any():
            g = int(np.flatnonzero(per_group != 1)[0])
            raise DataError(f"pm_k: group {names[g].tolist()!r} has {per_group[g]} frames at offset 0; "
                            f"each group needs exactly one anchor")
        anchor_idx = np.empty(n_groups, dtype=np.int64)
        anchor_idx[group[is_anchor]] = np.flatnonzero(is_anchor)
    if n_groups == 0:
        raise DataError("pm_k: no anchors")
    near_wrong = (np.abs(offset) <= k) & ~c[frame]
    spoiled = np.bincount(group[near_wrong], minlength=n_groups) > 0
    ok = c[anchor_idx] & ~spoiled
    if return_anchors:
        return ok
    return float(100.0 * ok.mean()), int(n_groups)


def pm_k_anchors(correct: Any, groups: Any, offsets: Any, k: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Per-anchor pm-k correctness for the per-frame form of :func:`pm_k`: the sorted group ids
    and, for each, whether its anchor and every frame within ``k`` of it are correct - the
    "examples" of a pm-k setting (used for model similarity on video sets).

    >>> pm_k_anchors([True, True, False, True, True], ["a", "a", "a", "b", "b"], [0, 1, 2, 0, -1], k=1)
    (array(['a', 'b'], dtype='<U1'), array([ True,  True]))
    >>> pm_k_anchors([True, True, False, True, True], ["a", "a", "a", "b", "b"], [0, 1, 2, 0, -1], k=2)[1]
    array([False,  True])
    """
    names = np.unique(np.asarray(_ops.to_numpy(groups)).ravel())
    return names, pm_k(correct, groups, offsets, k, return_anchors=True)


def _explicit_sets(n: int, anchors: Any, members: Sequence[Any], member_offsets: Sequence[Any]
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    anchor_idx = np.asarray(_ops.to_numpy(anchors), dtype=np.int64).ravel()
    if len(members) != anchor_idx.size or len(member_offsets) != anchor_idx.size:
        raise DataError(f"pm_k: {anchor_idx.size} anchors but {len(members)} member lists and "
                        f"{len(member_offsets)} offset lists")
    sizes = np.fromiter((len(m) for m in members), dtype=np.int64, count=anchor_idx.size)
    osizes = np.fromiter((len(o) for o in member_offsets), dtype=np.int64, count=anchor_idx.size)
    if (sizes != osizes).any():
        i = int(np.flatnonzero(sizes != osizes)[0])
        raise DataError(f"pm_k: anchor {i} has {sizes[i]} members but {osizes[i]} offsets")
    frame = np.concatenate([np.asarray(m, dtype=np.int64).ravel() for m in members] + [np.empty(0, np.int64)])
    offset = np.concatenate([np.asarray(o).ravel() for o in member_offsets] + [np.empty(0, np.int64)])
    group = np.repeat(np.arange(anchor_idx.size), sizes)
    every = np.concatenate([anchor_idx, frame])
    if every.size and (every.min() < 0 or every.max() >= n):
        raise DataError(f"pm_k: frame index outside 0..{n - 1} (the length of correct)")
    return anchor_idx, group, frame, offset
