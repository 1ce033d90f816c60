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


def _disjoint_sorted(s: I64, e: I64) -> tuple[I64, I64]:
    """``(s, e)`` as disjoint sorted intervals: as they are when already so (O(n) check)."""
    if s.size and bool(np.all(e > s)) and bool(np.all(s[1:] > e[:-1])):
        return s, e
    return union(s, e)


def intersect(a_s: I64, a_e: I64, b_s: I64, b_e: I64) -> tuple[I64, I64]:
    """Intersection of two sets of intervals, as disjoint sorted intervals.

    Each interval of ``a`` meets a contiguous run of ``b``'s intervals (found by binary
    search); the pieces are the pairwise overlaps, at most ``len(a) + len(b)`` of them.
    """
    a_s, a_e = _disjoint_sorted(as_i64(a_s), as_i64(a_e))
    b_s, b_e = _disjoint_sorted(as_i64(b_s), as_i64(b_e))
    if a_s.size == 0 or b_s.size == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z.copy()
    lo = np.searchsorted(b_e, a_s, side="right")  # first b ending after a starts
    hi = np.searchsorted(b_s, a_e, side="left")  # b starting before a ends: indexes < hi
    cnt = np.maximum(hi - lo, 0)
    total = int(cnt.sum())
    ai = np.repeat(np.arange(a_s.size), cnt)
    offset = np.arange(total) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    bj = lo[ai] + offset
    s = np.maximum(a_s[ai], b_s[bj])
    e = np.minimum(a_e[ai], b_e[bj])
    keep = e > s
    return s[keep], e[keep]


def subtract(
    starts: I64, ends: I64, cut_starts: I64, cut_ends: I64
) -> tuple[I64, I64]:
    """Parts of the intervals not covered by the ``cut`` intervals (disjoint sorted result):
    the intersection with the complement of ``cut``."""
    s, e = _disjoint_sorted(as_i64(starts), as_i64(ends))
    cs, ce = _disjoint_sorted(as_i64(cut_starts), as_i64(cut_ends))
    if s.size == 0 or cs.size == 0:
        return s.copy(), e.copy()
    lo, hi = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    comp_s = np.concatenate(([lo], ce))
    comp_e = np.concatenate((cs, [hi]))
    keep = comp_e > comp_s
    return intersect(s, e, comp_s[keep], comp_e[keep])


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


# -- containment queries (added for launches/syncs: "which op encloses this call") ------------


def _sorted_containers(cs: I64, ce: I64) -> tuple[npt.NDArray[np.intp], I64, I64]:
    """Containers ordered by start ascending, then end descending (outer before inner)."""
    order = np.lexsort((-ce, cs))
    return order, cs[order], ce[order]


def innermost_containing(cs: object, ce: object, qs: object, qe: object) -> I64:
    """For each query ``[qs, qe]``, the index of the innermost container with
    ``cs <= qs`` and ``ce >= qe`` (the one that starts last; ties: the shortest), or -1.

    Containers need not be properly nested. Vectorised: with containers sorted by
    start, the answer is the largest position ``j <= k`` (``k`` = last container
    starting at or before ``qs``) with ``end[j] >= qe``; it is found by binary
    lifting over a sparse table of window maxima of ``end`` (``O((n + q) log n)``).
    """
    c_s, c_e, q_s, q_e = as_i64(cs), as_i64(ce), as_i64(qs), as_i64(qe)
    out = np.full(q_s.size, -1, dtype=np.int64)
    n = c_s.size
    if n == 0 or q_s.size == 0:
        return out
    order, s, e = _sorted_containers(c_s, c_e)
    k = np.searchsorted(s, q_s, side="right").astype(np.int64) - 1
    # most queries (ops properly nested) are held by the last container starting before them:
    # answered at once; the lifting below runs on the others only
    held = np.take(e, k, mode="clip") >= q_e
    held &= k >= 0
    out[held] = order[k[held]]
    # and where no container up to k ends late enough (prefix maximum of the ends), none holds
    # the query: -1 at once (another thread's time, a gap between ops)
    reach = np.take(np.maximum.accumulate(e), k, mode="clip") >= q_e
    rest = np.flatnonzero(~held & (k >= 0) & reach)
    if rest.size == 0:
        return out
    cur, q_e = k[rest], q_e[rest]
    # levels[l][j] = max(e[max(0, j - 2**l + 1) .. j])
    levels = [e]
    width = 1
    while width < n:
        prev = levels[-1]
        nxt = prev.copy()
        nxt[width:] = np.maximum(prev[width:], prev[:-width])
        levels.append(nxt)
        width *= 2
    for lvl in range(len(levels) - 1, -1, -1):
        valid = cur >= 0
        skip = valid & (np.take(levels[lvl], cur, mode="clip") < q_e)  # block ends too early
        cur = np.where(skip, cur - (1 << lvl), cur)
    found = cur >= 0
    out[rest[found]] = order[cur[found]]
    return out


def outermost_containing(cs: object, ce: object, qs: object, qe: object) -> I64:
    """For each query, the index of the outermost container (the one that starts
    first; ties: the longest) with ``cs <= qs`` and ``ce >= qe``, or -1.

    With containers sorted by start, it is the smallest position ``j`` whose prefix
    maximum of ``end`` reaches ``qe``, provided ``j`` starts at or before ``qs``.
    """
    c_s, c_e, q_s, q_e = as_i64(cs), as_i64(ce), as_i64(qs), as_i64(qe)
    out = np.full(q_s.size, -1, dtype=np.int64)
    if c_s.size == 0 or q_s.size == 0:
        return out
    order, s, e = _sorted_containers(c_s, c_e)
    k = np.searchsorted(s, q_s, side="right") - 1
    j = np.searchsorted(np.maximum.accumulate(e), q_e, side="left")
    found = j <= k
    out[found] = order[j[found]]
    return out


def containing_by_group(
    c_group: object, cs: object, ce: object, q_group: object, qs: object, qe: object,
    *, innermost: bool = True,
) -> I64:
    """:func:`innermost_containing` (or :func:`outermost_containing`) where a container
    only counts for queries of the same group (e.g. the same host thread).

    Groups are integer ids (see :func:`group_ids`); the loop is over groups, not events.
    """
    c_g, c_s, c_e = as_i64(c_group), as_i64(cs), as_i64(ce)
    q_g, q_s, q_e = as_i64(q_group), as_i64(qs), as_i64(qe)
    out = np.full(q_s.size, -1, dtype=np.int64)
    if c_s.size == 0 or q_s.size == 0:
        return out
    fn = innermost_containing if innermost else outermost_containing
    if c_g.min() == c_g.max() == q_g.min() == q_g.max():  # one group (one thread): no split
        return fn(c_s, c_e, q_s, q_e)
    oc = np.argsort(c_g, kind="stable")
    oq = np.argsort(q_g, kind="stable")
    cg, qg = c_g[oc], q_g[oq]
    groups = qg[np.flatnonzero(np.diff(qg, prepend=qg[0] - 1))]
    c_lo, c_hi = np.searchsorted(cg, groups, "left"), np.searchsorted(cg, groups, "right")
    q_lo, q_hi = np.searchsorted(qg, groups, "left"), np.searchsorted(qg, groups, "right")
    for a, b, x, y in zip(c_lo.tolist(), c_hi.tolist(), q_lo.tolist(), q_hi.tolist()):
        if a == b:
            continue
        cm, qm = oc[a:b], oq[x:y]
        idx = fn(c_s[cm], c_e[cm], q_s[qm], q_e[qm])
        out[qm] = np.where(idx >= 0, cm[np.maximum(idx, 0)], -1)
    return out


def group_ids(*keys: tuple[object, object]) -> tuple[I64, ...]:
    """Dense ids for ``(a, b)`` key pairs (e.g. ``(pid, tid)``) shared across several arrays.

    ``group_ids((pid1, tid1), (pid2, tid2))`` returns one id array per argument; equal
    pairs get equal ids.
    """
    a = np.concatenate([as_i64(k[0]) for k in keys]) if keys else as_i64([])
    b = np.concatenate([as_i64(k[1]) for k in keys]) if keys else as_i64([])
    sizes = [as_i64(k[0]).size for k in keys]
    if a.size == 0:
        return tuple(np.zeros(0, dtype=np.int64) for _ in keys)
    if a.min() == a.max() and b.min() == b.max():  # one pair (one thread): all zeros
        return tuple(np.zeros(n, dtype=np.int64) for n in sizes)
    # dense codes per component, then one int64 key per pair (no row-wise unique)
    ia, _ = _dense(a)
    ib, nb = _dense(b)
    inv, _ = _dense(ia * nb + ib)
    return tuple(np.split(inv, np.cumsum(sizes)[:-1]))


def _dense(x: I64) -> tuple[I64, int]:
    """``np.unique(x, return_inverse=True)``'s inverse (each value's rank among the distinct
    values) and the number of distinct values, by hashing (``dictionary_encode``, O(n)) and
    sorting the few distinct values only, not the whole array."""
    import pyarrow as pa  # here: the rest of this module is numpy only
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(pa.array(x, type=pa.int64()))
    values = np.asarray(enc.dictionary.to_numpy(), dtype=np.int64)
    rank = np.empty(values.size, dtype=np.int64)
    rank[np.argsort(values, kind="stable")] = np.arange(values.size, dtype=np.int64)
    return rank[np.asarray(enc.indices.to_numpy(), dtype=np.int64)], int(values.size)
