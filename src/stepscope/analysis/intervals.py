"""Vectorised interval arithmetic on half-open ``[start, end)`` int64 nanosecond intervals.

Everything here takes and returns numpy arrays; no Python loop over events.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]


def as_i64(x: object) -> I64:
    return np.asarray(x, dtype=np.int64)


def union(starts: object, ends: object) -> tuple[I64, I64]:
    """Merge intervals into disjoint sorted ones (touching intervals merge).

    Zero-length and inverted intervals are dropped.
    """
    s = as_i64(starts)
    e = as_i64(ends)
    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    # a new merged interval starts where the start is beyond every earlier end
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    out_s = s[idx]
    last = np.append(idx[1:] - 1, s.size - 1)
    out_e = run_end[last]
    return out_s, out_e


def total(starts: object, ends: object) -> int:
    """Length of the union of the intervals."""
    s, e = union(starts, ends)
    return int((e - s).sum())


def overlap_with_windows(
    starts: I64, ends: I64, win_starts: I64, win_ends: I64
) -> I64:
    """For each window, the length of its intersection with *disjoint sorted* intervals.

    ``starts/ends`` must be the output of :func:`union`. Windows may overlap each
    other and need not be sorted.
    """
    ws = as_i64(win_starts)
    we = as_i64(win_ends)
    if starts.size == 0 or ws.size == 0:
        return np.zeros(ws.size, dtype=np.int64)
    # cumulative covered length up to time t: C(t) = sum over intervals of clip(t - s, 0, e - s)
    lengths = ends - starts
    cum = np.concatenate(([0], np.cumsum(lengths)))

    def covered_until(t: I64) -> I64:
        i = np.searchsorted(starts, t, side="right")  # intervals starting at or before t
        # intervals [0, i) start <= t; the last of them may be partially covered
        full = cum[np.maximum(i - 1, 0)]
        last_s = starts[np.maximum(i - 1, 0)]
        last_e = ends[np.maximum(i - 1, 0)]
        partial = np.clip(t - last_s, 0, last_e - last_s)
        return np.where(i > 0, full + partial, 0)

    return covered_until(we) - covered_until(ws)


def subtract(
    starts: I64, ends: I64, cut_starts: I64, cut_ends: I64
) -> tuple[I64, I64]:
    """Parts of disjoint sorted intervals not covered by disjoint sorted ``cut`` intervals."""
    if starts.size == 0 or cut_starts.size == 0:
        return starts.copy(), ends.copy()
    # boundaries of both sets; coverage counting on the merged event list
    pts = np.concatenate((starts, ends, cut_starts, cut_ends))
    delta_a = np.concatenate((np.ones_like(starts), -np.ones_like(ends),
                              np.zeros_like(cut_starts), np.zeros_like(cut_ends)))
    delta_b = np.concatenate((np.zeros_like(starts), np.zeros_like(ends),
                              np.ones_like(cut_starts), -np.ones_like(cut_ends)))
    order = np.argsort(pts, kind="stable")
    pts, delta_a, delta_b = pts[order], delta_a[order], delta_b[order]
    # collapse equal time points so state is evaluated after all changes at a point
    uniq, first = np.unique(pts, return_index=True)
    ca = np.add.reduceat(delta_a, first).cumsum()
    cb = np.add.reduceat(delta_b, first).cumsum()
    inside = (ca > 0) & (cb == 0)
    seg_s = uniq[:-1][inside[:-1]]
    seg_e = uniq[1:][inside[:-1]]
    return union(seg_s, seg_e)


def gaps(starts: I64, ends: I64, lo: int, hi: int) -> tuple[I64, I64]:
    """Uncovered parts of ``[lo, hi)`` given disjoint sorted intervals."""
    s, e = subtract(np.array([lo], dtype=np.int64), np.array([hi], dtype=np.int64), starts, ends)
    return s, e


def assign_to_windows(ts: I64, win_starts: I64, win_ends: I64) -> npt.NDArray[np.int64]:
    """Index of the window (sorted, disjoint) containing each timestamp, or -1."""
    if win_starts.size == 0:
        return np.full(np.asarray(ts).shape, -1, dtype=np.int64)
    i = np.searchsorted(win_starts, ts, side="right") - 1
    ok = (i >= 0) & (ts < win_ends[np.maximum(i, 0)])
    return np.where(ok, i, -1).astype(np.int64)
