"""Host-device synchronisation: every point where a host thread waited for the GPU.

What blocks the host (``api_calls`` of the rank)
------------------------------------------------
* **sync calls**: ``kind == "sync"`` (``cudaDeviceSynchronize``, ``cudaStreamSynchronize``,
  ``cudaEventSynchronize``, ``cuCtxSynchronize``, HIP equivalents);
* **blocking copies**: ``kind == "memcpy"`` calls that are synchronous by name
  (:func:`stepscope.call_kinds.is_blocking_call`: ``cudaMemcpy``, ``cuMemcpyDtoH`` ...) or whose
  memcpy record (same ``correlation``) is HtoD from pageable memory or DtoH into pageable
  memory (the driver stages those through a bounce buffer and returns only when done).

Blocked time of a call = its API duration. :func:`sync_intervals` is the union of
the intervals of those calls over all host threads.

Sync points (rows of :attr:`SyncAnalysis.events`)
-------------------------------------------------
Frameworks often issue a copy and then a sync inside one op (PyTorch ``.item()``:
``aten::_local_scalar_dense`` = ``cudaMemcpyAsync`` DtoH + ``cudaStreamSynchronize``;
a ``non_blocking=False`` ``.to()`` = ``cudaMemcpyAsync`` + ``cudaStreamSynchronize``). A
sync call is merged with the latest HtoD or DtoH copy call that starts before it
inside the same innermost framework op instance (``cpu_ops.kind == "framework"``, same
``(pid, tid)``), and the pair is one sync point:

* ``scalar_read``   the copy is DtoH: a host read of device data (``.item()``, ``.cpu()``,
  ``.tolist()``);
* ``blocking_copy`` the copy is HtoD; also every blocking copy call not merged with a sync;
* ``explicit_sync`` a sync call with no such copy (or with no enclosing framework op).

A merged point starts at the copy call and its blocked time is the sync call's
duration plus the copy call's duration when the copy itself blocks. When several
syncs follow one copy in an op, the first owns the copy.

Call site: the innermost and outermost framework ops enclosing the point's sync (or
copy) call on its thread, and the innermost enclosing ``python``-kind op
(``python_function``) that is a *user* frame: a ``file(line): func`` frame whose file
is not in the standard library, not under ``site-packages``/``dist-packages``, and not
in a framework package (:data:`LIBRARY_ROOTS`).

Steps: a sync point belongs to the step window containing its start. Scope figures
(totals, per kind, call sites) are over the points inside the windows; with no
windows, over the whole rank (per-step tuples then empty). ``events`` lists every
point of the rank with its step index (-1 outside every window).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from enum import Enum

import numpy as np
import numpy.typing as npt
import pyarrow as pa

import stepscope.analysis.intervals as iv
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.intervals import I64
from stepscope.analysis.launches import (
    bounds,
    column_i64,
    column_str,
    count_window,
    distinct_names,
    ints,
    mean_of,
    per_window,
    str_in,
)
from stepscope.call_kinds import is_blocking_call
from stepscope.schema_enums import ApiKind, CopyKind, CpuOpKind, MemoryKind

TOP_CALL_SITES = 20
LIBRARY_ROOTS = frozenset({
    "torch", "torchvision", "torchaudio", "torchtext", "functorch", "triton", "numpy",
    "tensorflow", "keras", "jax", "jaxlib", "flax", "optax", "apex", "lightning",
    "pytorch_lightning", "accelerate", "deepspeed", "transformers", "_pytest", "pluggy",
    "stepscope",
})
_FRAME = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<func>.+)$")


class SyncPointKind(str, Enum):
    EXPLICIT_SYNC = "explicit_sync"
    BLOCKING_COPY = "blocking_copy"
    SCALAR_READ = "scalar_read"


@dataclass(frozen=True)
class SyncEvent:
    ts_ns: int
    end_ns: int  # end of the last call of the point
    blocked_ns: int  # sync_ns + copy_ns
    sync_ns: int  # duration of the sync call (0 for a blocking copy on its own)
    copy_ns: int  # duration of the copy call when it blocks itself (pageable / synchronous)
    kind: str  # SyncPointKind value
    step: int  # window index, -1 outside every window
    api: str  # "cudaMemcpyAsync + cudaStreamSynchronize"
    op: str  # innermost enclosing framework op ("" if none)
    outer_op: str  # outermost enclosing framework op ("" if none)
    frame: str  # innermost enclosing user Python frame ("" if none)
    pid: int
    tid: int


@dataclass(frozen=True)
class CallSite:
    name: str  # best label: frame, else "outer_op > op", else op, else api
    frame: str
    outer_op: str
    op: str
    kind: str
    api: str
    count: int
    blocked_ns: int


@dataclass(frozen=True)
class KindTotal:
    kind: str
    count: int
    blocked_ns: int


@dataclass(frozen=True)
class SyncAnalysis:
    rank: int
    n_steps: int
    count_per_step: tuple[int, ...]
    blocked_ns_per_step: tuple[int, ...]
    mean_count_per_step: float
    mean_blocked_ns_per_step: float
    count: int  # over the scope
    blocked_ns: int
    by_kind: tuple[KindTotal, ...]  # every SyncPointKind, in enum order
    call_sites: tuple[CallSite, ...]  # by blocked time, descending
    events: tuple[SyncEvent, ...]  # every sync point of the rank, by time


def is_user_frame(name: str) -> bool:
    """True for a ``file(line): func`` Python frame outside the stdlib and frameworks."""
    m = _FRAME.match(name)
    if m is None:
        return False
    path = m.group("file").replace("\\", "/")
    if "site-packages/" in path or "dist-packages/" in path or "/lib/python3" in path:
        return False
    root = path.lstrip("/").split("/")[0]
    root = root.removesuffix(".py")
    return root not in LIBRARY_ROOTS and root not in sys.stdlib_module_names


@dataclass(frozen=True)
class _Blocking:
    """The host calls that block, as arrays over the rank's ``api_calls`` rows."""

    api: pa.Table
    s: I64
    e: I64
    is_sync: npt.NDArray[np.bool_]
    is_copy: npt.NDArray[np.bool_]  # memcpy-kind calls
    blocking_copy: npt.NDArray[np.bool_]
    htod: npt.NDArray[np.bool_]
    dtoh: npt.NDArray[np.bool_]


def _blocking(g: StepGraph) -> _Blocking:
    api = g.table("api_calls")
    s, e = bounds(api)
    is_sync = str_in(api, "kind", (ApiKind.SYNC.value,))
    is_copy = str_in(api, "kind", (ApiKind.MEMCPY.value,))
    mc = g.table("memcpy")
    m_htod = str_in(mc, "kind", (CopyKind.HTOD.value,))
    m_dtoh = str_in(mc, "kind", (CopyKind.DTOH.value,))
    pageable = (MemoryKind.PAGEABLE.value,)
    m_block = (m_htod & str_in(mc, "src_kind", pageable)) | (m_dtoh & str_in(mc, "dst_kind",
                                                                            pageable))
    rec = np.where(is_copy, g.memcpy_row(g.keys("api_calls")), -1)  # the copy of each call

    def from_rec(flag: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
        return (rec >= 0) & flag[np.maximum(rec, 0)] if flag.size else np.zeros(s.size, bool)

    by_name = is_copy & str_in(api, "name", tuple(n for n in distinct_names(api, "name")
                                                  if is_blocking_call(n)))
    blocking_copy = is_copy & (by_name | from_rec(m_block))
    return _Blocking(api, s, e, is_sync, is_copy, blocking_copy, from_rec(m_htod),
                     from_rec(m_dtoh))


def blocking_calls(g: StepGraph) -> _Blocking:
    """The rank's host calls that block (syncs, blocking copies), as arrays over its
    ``api_calls`` rows (the step model reads them)."""
    return _blocking(g)


def sync_intervals(g: StepGraph) -> tuple[I64, I64]:
    """Union of the intervals in which a host thread was blocked (sync calls and blocking
    copy calls, all threads). Sorted, disjoint."""
    b = _blocking(g)
    m = b.is_sync | b.blocking_copy
    return iv.union(b.s[m], b.e[m])


def names_at(t: pa.Table, column: str, idx: I64) -> list[str]:
    """Values of a string column at row positions ``idx`` ("" where ``idx`` is -1 or null)."""
    if idx.size == 0 or t.num_rows == 0:
        return [""] * idx.size
    vals = column_str(t, column).take(pa.array(np.maximum(idx, 0))).to_pylist()
    return [str(v) if i >= 0 and v is not None else "" for v, i in zip(vals, idx.tolist())]


def ops_of_kind(g: StepGraph, kind: str) -> tuple[pa.Table, I64, I64]:
    """The graph's ``cpu_ops`` rows of one kind (``CpuOpKind``), with their starts and ends."""
    ops = g.table("cpu_ops")
    m = str_in(ops, "kind", (kind,))
    ops = ops.filter(pa.array(m, type=pa.bool_())) if ops.num_rows else ops
    s, e = bounds(ops)
    return ops, s, e


def _partner(op_sync: I64, ts_sync: I64, op_copy: I64, ts_copy: I64) -> I64:
    """For each sync, the latest copy (index) in the same op starting at or before it, or -1."""
    out = np.full(op_sync.size, -1, dtype=np.int64)
    cm = np.flatnonzero(op_copy >= 0)
    if cm.size == 0 or op_sync.size == 0:
        return out
    uniq = np.unique(np.concatenate((ts_copy[cm], ts_sync)))
    width = np.int64(uniq.size + 1)
    key_c = op_copy[cm] * width + np.searchsorted(uniq, ts_copy[cm])
    key_q = op_sync * width + np.searchsorted(uniq, ts_sync)
    order = np.argsort(key_c, kind="stable")
    j = np.searchsorted(key_c[order], key_q, side="right") - 1
    jc = cm[order[np.maximum(j, 0)]]
    ok = (op_sync >= 0) & (j >= 0) & (op_copy[jc] == op_sync)
    out[ok] = jc[ok]
    return out


def analyze_syncs(
    g: StepGraph, win_start: I64, win_end: I64, *, top: int = TOP_CALL_SITES
) -> SyncAnalysis:
    """Every sync point of ``rank``, per step and by call site (module docstring)."""
    ws, we = iv.as_i64(win_start), iv.as_i64(win_end)
    n = ws.size
    b = _blocking(g)
    api = b.api
    pid, tid = column_i64(api, "pid"), column_i64(api, "tid")
    fw, fw_s, fw_e = ops_of_kind(g, CpuOpKind.FRAMEWORK.value)
    py, py_s, py_e = ops_of_kind(g, CpuOpKind.PYTHON.value)
    py_user = str_in(py, "name", tuple(nm for nm in distinct_names(py, "name")
                                       if is_user_frame(nm)))

    # candidate calls: syncs and HtoD/DtoH copies; locate their enclosing ops
    cand = np.flatnonzero(b.is_sync | (b.is_copy & (b.htod | b.dtoh | b.blocking_copy)))
    fg, ag = iv.group_ids((column_i64(fw, "pid"), column_i64(fw, "tid")), (pid[cand], tid[cand]))
    op_in = iv.containing_by_group(fg, fw_s, fw_e, ag, b.s[cand], b.e[cand], innermost=True)
    op_out = iv.containing_by_group(fg, fw_s, fw_e, ag, b.s[cand], b.e[cand], innermost=False)
    pg, qg = iv.group_ids((column_i64(py, "pid")[py_user], column_i64(py, "tid")[py_user]),
                          (pid[cand], tid[cand]))
    frame = iv.containing_by_group(pg, py_s[py_user], py_e[py_user], qg, b.s[cand], b.e[cand])

    c_sync = b.is_sync[cand]
    c_pair = ~c_sync & (b.htod[cand] | b.dtoh[cand])
    syncs = np.flatnonzero(c_sync)
    part = _partner(op_in[syncs], b.s[cand][syncs],
                    np.where(c_pair, op_in, -1), b.s[cand])  # index into cand, or -1
    # the earliest sync using a copy owns it
    owner = np.zeros(syncs.size, dtype=bool)
    has = np.flatnonzero(part >= 0)
    if has.size:
        by_time = has[np.argsort(b.s[cand][syncs[has]], kind="stable")]
        _, first = np.unique(part[by_time], return_index=True)
        owner[by_time[first]] = True
    owned = np.zeros(cand.size, dtype=bool)
    owned[part[owner]] = True

    # rows: every sync, then blocking copies not owned by a sync
    lone = np.flatnonzero(~c_sync & b.blocking_copy[cand] & ~owned)
    main = np.concatenate((syncs, lone))  # index into cand: the call naming the site
    copy = np.concatenate((np.where(owner, part, -1), np.full(lone.size, -1, np.int64)))
    cs, ce = b.s[cand], b.e[cand]
    c_block = b.blocking_copy[cand]
    ts = np.where(copy >= 0, cs[np.maximum(copy, 0)], cs[main])
    end = ce[main]
    is_row_sync = np.arange(main.size) < syncs.size
    sync_ns = np.where(is_row_sync, (ce - cs)[main], 0)
    copy_ns = np.where(is_row_sync, np.where((copy >= 0) & c_block[np.maximum(copy, 0)],
                                             (ce - cs)[np.maximum(copy, 0)], 0), (ce - cs)[main])
    blocked = sync_ns + copy_ns
    p = np.concatenate((part, np.full(lone.size, -1, np.int64)))
    dtoh = (p >= 0) & b.dtoh[cand][np.maximum(p, 0)]
    htod = (p >= 0) & b.htod[cand][np.maximum(p, 0)]
    kind = np.where(~is_row_sync, 1, np.where(dtoh, 2, np.where(htod, 1, 0)))
    kinds = (SyncPointKind.EXPLICIT_SYNC, SyncPointKind.BLOCKING_COPY, SyncPointKind.SCALAR_READ)

    step = iv.assign_to_windows(ts, ws, we)
    scope = step >= 0 if n else np.ones(ts.size, dtype=bool)
    count_ps = count_window(step, n)
    blocked_ps = per_window(blocked, step, n)

    api_name = names_at(api, "name", cand[main])
    copy_name = names_at(api, "name", np.where(copy >= 0, cand[np.maximum(copy, 0)], -1))
    op_name = names_at(fw, "name", op_in[main])
    outer_name = names_at(fw, "name", op_out[main])
    frame_name = names_at(py, "name", np.where(frame[main] >= 0,
                                               np.flatnonzero(py_user)[np.maximum(frame[main], 0)]
                                               if py_user.any() else -1, -1))
    row_pid, row_tid = pid[cand[main]], tid[cand[main]]
    order = np.argsort(ts, kind="stable")
    events = tuple(
        SyncEvent(
            ts_ns=int(ts[i]), end_ns=int(end[i]), blocked_ns=int(blocked[i]),
            sync_ns=int(sync_ns[i]), copy_ns=int(copy_ns[i]),
            kind=kinds[int(kind[i])].value, step=int(step[i]),
            api=f"{copy_name[i]} + {api_name[i]}" if copy_name[i] else api_name[i],
            op=op_name[i], outer_op=outer_name[i], frame=frame_name[i],
            pid=int(row_pid[i]), tid=int(row_tid[i]),
        )
        for i in order.tolist()
    )
    in_scope = [ev for ev, k in zip(events, scope[order].tolist()) if k]

    sites: dict[tuple[str, str, str, str, str], list[int]] = {}
    for ev in in_scope:
        acc = sites.setdefault((ev.frame, ev.outer_op, ev.op, ev.kind, ev.api), [0, 0])
        acc[0] += 1
        acc[1] += ev.blocked_ns
    ranked = sorted(sites.items(), key=lambda kv: (-kv[1][1], -kv[1][0], kv[0]))[:top]
    call_sites = tuple(
        CallSite(name=_label(*k), frame=k[0], outer_op=k[1], op=k[2], kind=k[3], api=k[4],
                 count=v[0], blocked_ns=v[1])
        for k, v in ranked
    )
    by_kind = tuple(
        KindTotal(kind=k.value, count=int((scope & (kind == i)).sum()),
                  blocked_ns=int(blocked[scope & (kind == i)].sum()))
        for i, k in enumerate(kinds)
    )
    return SyncAnalysis(
        rank=g.rank_id,
        n_steps=n,
        count_per_step=ints(count_ps),
        blocked_ns_per_step=ints(blocked_ps),
        mean_count_per_step=mean_of(count_ps),
        mean_blocked_ns_per_step=mean_of(blocked_ps),
        count=int(scope.sum()),
        blocked_ns=int(blocked[scope].sum()),
        by_kind=by_kind,
        call_sites=call_sites,
        events=events,
    )


def _label(frame: str, outer: str, op: str, kind: str, api: str) -> str:
    if frame:
        return frame
    if outer and op and outer != op:
        return f"{outer} > {op}"
    return op or api
