"""Nesting of time ranges (annotations) within a group such as one thread: shared by the
producers that make the ``annotations`` table (the Kineto importer, CUPTI's NVTX ranges)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]


def nest(group: Sequence[Any], ts: I64, dur: I64) -> tuple[I64, npt.NDArray[np.int16]]:
    """Parent (row index, -1 for none) and depth of each range, by containment
    within its group (e.g. one thread). Ranges sort by start, longest first."""
    n = len(ts)
    parent = np.full(n, -1, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int16)
    if not n:
        return parent, depth
    keys: dict[Any, int] = {}
    gid = np.fromiter((keys.setdefault(g, len(keys)) for g in group), np.int64, n)
    end = ts + dur
    order = np.lexsort((-end, ts, gid)).tolist()
    end_l, gid_l = end.tolist(), gid.tolist()
    stack: list[int] = []
    current = -1
    for i in order:
        if gid_l[i] != current:
            current = gid_l[i]
            stack.clear()
        e = end_l[i]
        while stack and end_l[stack[-1]] < e:
            stack.pop()
        if stack:
            parent[i] = stack[-1]
            depth[i] = min(len(stack), 32767)
        stack.append(i)
    return parent, depth


__all__ = ["nest"]
