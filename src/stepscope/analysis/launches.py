"""Kernel-launch analysis: launch API cost, queue delay, and GPU idle waiting for launches.

Pairing
-------
A *launch* is an ``api_calls`` row of kind ``launch`` or ``graph_launch``. It is
paired, by ``correlation`` (same rank), with the GPU work it issued: kernels, and
memcpy/memset records (graph nodes). A graph launch may pair with many records.
Per paired launch::

    api_ns    = launch call duration
    gpu_ns    = sum of the durations of its GPU records (one kernel for a plain launch)
    queue_ns  = max(0, first record start - launch call end)

Negative raw queue delays (the kernel started before the call returned, or clocks
disagree) are clipped to 0 and counted in ``negative_queue``. A launch is a
*kernel shorter than its launch cost* when ``gpu_ns < api_ns``.

Launch-bound idle
-----------------
Per device (streams merged): ``busy`` = union of its kernel, memcpy and memset
intervals. Every gap ``[end_i, start_{i+1})`` between consecutive busy intervals is
*launch-bound* when the API call that issued the work starting the next busy
interval (any launch, memcpy or memset call, matched by correlation; the earliest
ending one if several records start at that instant) ended after ``end_i``: the GPU
had finished everything it had been given and was waiting for the host to issue
more. Gaps whose next work has no known API call are not counted. A gap is *long*
when it lasts more than ``long_gap_ns`` (default 100 µs): long waits for the
host are host work between launches (Python, data, logging), short ones are the
classic launch-overhead signature (back-to-back tiny kernels).

Steps
-----
Events (launch calls) belong to the step window containing their start; counts and
per-event sums per step use that. Idle time is clipped to the windows (a gap that
straddles a boundary is split), and a gap is counted in the step of its start. On a
rank with several devices, idle time is the union of their launch-bound gaps (time
during which at least one device waited for the host), so it never exceeds wall time.
Scope figures (medians, counts, shares) are over the launches inside the windows;
with no windows they are over the whole rank and per-step tuples are empty.
Means per step are over the windows (0.0 with none).

Launch time on the host (:func:`launch_intervals`, for the step-time breakdown)
-------------------------------------------------------------------------------
Union of the launch call intervals and of the innermost framework op enclosing each
launch call on the same ``(pid, tid)`` (the dispatch cost that precedes a launch). An
op that contains a launch but runs long on the CPU for other reasons (cuDNN autotuning,
lazy module loading) is counted whole: it shows up in warm-up steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

import stepscope.analysis.intervals as iv
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.intervals import I64
from stepscope.schema_enums import ApiKind, CpuOpKind

LONG_GAP_NS = 100_000
_NONE = np.iinfo(np.int64).max
LAUNCH_KINDS = (ApiKind.LAUNCH.value, ApiKind.GRAPH_LAUNCH.value)


# -- column helpers shared by launches / syncs / copies / input --------------------------------


def column_i64(t: pa.Table, name: str, fill: int = -1) -> I64:
    """Column as int64 numpy, nulls replaced by ``fill``."""
    if t.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    col = t.column(name)
    if col.null_count:  # fill_null copies the column: only when there is something to fill
        col = pc.fill_null(col, fill)
    return np.asarray(col.to_numpy(), dtype=np.int64)


def column_str(t: pa.Table, name: str) -> pa.ChunkedArray:
    """A (possibly dictionary-encoded) string column as plain strings."""
    return t.column(name).cast(pa.string())


def distinct_names(t: pa.Table, name: str) -> list[str]:
    """Distinct non-null values of a string column (evaluate per-name rules on these)."""
    if t.num_rows == 0:
        return []
    return [v for v in pc.unique(column_str(t, name)).to_pylist() if v is not None]


def str_in(t: pa.Table, name: str, values: tuple[str, ...]) -> npt.NDArray[np.bool_]:
    """Mask of rows whose string column ``name`` is one of ``values`` (nulls: False)."""
    if t.num_rows == 0:
        return np.zeros(0, dtype=bool)
    value_set = pa.array(list(values), type=pa.string())
    col = t.column(name)
    if not pa.types.is_dictionary(col.type):
        m = pc.is_in(column_str(t, name), value_set=value_set)
        return np.asarray(pc.fill_null(m, False).to_numpy(zero_copy_only=False), dtype=bool)
    # a dictionary column (as the run's Parquet tables are read): test each chunk's distinct
    # values once and index the answer by the row codes, rather than decoding every row
    out = np.zeros(t.num_rows, dtype=bool)
    at = 0
    for chunk in col.chunks:
        n = len(chunk)
        words = chunk.dictionary
        if n and len(words):
            hit = pc.fill_null(pc.is_in(words.cast(pa.string()), value_set=value_set), False)
            flags = np.asarray(hit.to_numpy(zero_copy_only=False), dtype=bool)
            codes = chunk.indices
            if codes.null_count:  # a null row is in no set
                valid = np.asarray(codes.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
                out[at:at + n] = flags[codes.fill_null(0).to_numpy()] & valid
            else:
                out[at:at + n] = flags[codes.to_numpy()]
        at += n
    return out


def bounds(t: pa.Table) -> tuple[I64, I64]:
    s = column_i64(t, "ts_ns", 0)
    return s, s + column_i64(t, "dur_ns", 0)


def per_window(values: object, idx: I64, n: int) -> I64:
    """Integer sum of ``values`` per window index (``idx`` -1 = outside)."""
    v = np.asarray(values, dtype=np.int64)
    m = idx >= 0
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, idx[m], v[m])
    return out


def count_window(idx: I64, n: int) -> I64:
    return np.bincount(idx[idx >= 0], minlength=n)[:n].astype(np.int64)


def mean_of(x: I64 | npt.NDArray[np.float64]) -> float:
    return float(np.mean(x)) if x.size else 0.0


def median_of(x: I64 | npt.NDArray[np.float64]) -> float:
    return float(np.median(x)) if x.size else 0.0


def ints(x: I64) -> tuple[int, ...]:
    return tuple(int(v) for v in x)


def gpu_records(g: StepGraph) -> tuple[I64, I64, I64, I64]:
    """All GPU work of a rank (kernels, memcpy, memset): start, end, device, correlation.

    Null devices read as 0 (as in ``busy``), null correlations as -1.
    """
    r = g.gpu
    return r.start, r.end, r.device, r.correlation


# -- results ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LaunchAnalysis:
    """Launch figures of one rank (module docstring has the formulas)."""

    rank: int
    n_steps: int
    long_gap_ns: int
    # per step, aligned with the windows
    launches_per_step: tuple[int, ...]
    launch_api_ns_per_step: tuple[int, ...]  # sum of launch call durations
    short_kernels_per_step: tuple[int, ...]
    launch_idle_ns_per_step: tuple[int, ...]
    launch_idle_short_ns_per_step: tuple[int, ...]
    launch_idle_long_ns_per_step: tuple[int, ...]
    launch_idle_gaps_per_step: tuple[int, ...]
    # means per step over the windows
    mean_launches_per_step: float
    mean_launch_api_ns_per_step: float
    mean_launch_idle_ns_per_step: float
    mean_launch_idle_short_ns_per_step: float
    mean_launch_idle_long_ns_per_step: float
    # over the scope (launches inside the windows)
    launches: int
    graph_launches: int
    paired: int  # launches matched to GPU work
    mean_api_ns: float
    median_api_ns: float
    mean_queue_ns: float
    median_queue_ns: float
    negative_queue: int  # raw queue delays < 0, clipped to 0
    short_kernels: int  # paired launches with gpu_ns < api_ns
    short_kernel_share: float  # short_kernels / paired
    short_kernel_gpu_ns: int
    launch_idle_ns: int
    launch_idle_short_ns: int
    launch_idle_long_ns: int
    launch_idle_gaps: int


def launch_bound_gaps(g: StepGraph) -> tuple[I64, I64]:
    """Launch-bound idle gaps of every device of the rank (module docstring), concatenated
    over devices (disjoint within a device, sorted by device then time). Computed once per
    graph (the launch statistics, the idle model and the breakdown all read them), read-only."""
    return g.memo(("launch_bound_gaps",), lambda: _read_only(*_launch_bound_gaps(g)))


def _read_only(s: I64, e: I64) -> tuple[I64, I64]:
    s.setflags(write=False)
    e.setflags(write=False)
    return s, e


def _launch_bound_gaps(g: StepGraph) -> tuple[I64, I64]:
    s, e, d, _ = gpu_records(g)
    api = g.table("api_calls")
    if not (g.keys("api_calls") >= 0).any():  # no API call carries a correlation:
        z = np.zeros(0, dtype=np.int64)  # no gap can be attributed
        return z, z.copy()
    _, a_e = bounds(api)
    row = g.gpu_api_row
    api_end = np.where(row >= 0, a_e[np.maximum(row, 0)], _NONE)
    gs: list[I64] = []
    ge: list[I64] = []
    for dev in np.unique(d):
        md = d == dev
        ds, de, dapi = s[md], e[md], api_end[md]
        bs, be = iv.union(ds, de)
        if bs.size < 2:
            continue
        order = np.argsort(ds, kind="stable")
        ts_sorted, api_sorted = ds[order], dapi[order]
        uts, ufirst = np.unique(ts_sorted, return_index=True)
        min_api = np.minimum.reduceat(api_sorted, ufirst)
        prev_end, next_start = be[:-1], bs[1:]
        nxt_api = min_api[np.searchsorted(uts, next_start)]
        bound = (nxt_api != _NONE) & (nxt_api > prev_end)
        gs.append(prev_end[bound])
        ge.append(next_start[bound])
    if not gs:
        z = np.zeros(0, dtype=np.int64)
        return z, z.copy()
    return np.concatenate(gs), np.concatenate(ge)


def analyze_launches(
    g: StepGraph, win_start: I64, win_end: I64, *, long_gap_ns: int = LONG_GAP_NS
) -> LaunchAnalysis:
    """Launch cost, queue delay, short kernels and launch-bound idle of the graph's rank."""
    ws, we = iv.as_i64(win_start), iv.as_i64(win_end)
    n = ws.size
    api = g.table("api_calls")
    is_launch = str_in(api, "kind", LAUNCH_KINDS)
    is_graph = str_in(api, "kind", (ApiKind.GRAPH_LAUNCH.value,))
    lt = api.filter(pa.array(is_launch, type=pa.bool_())) if api.num_rows else api
    graph = is_graph[is_launch]
    l_s, l_e = bounds(lt)
    l_key = g.keys("api_calls")[is_launch]
    step = iv.assign_to_windows(l_s, ws, we)
    scope = step >= 0 if n else np.ones(l_s.size, dtype=bool)

    by_corr = g.gpu_by_correlation
    corr, first_start, gpu_sum = by_corr.keys, by_corr.first_start, by_corr.total_ns
    pos = np.where(l_key >= 0, by_corr.lookup(l_key), -1)
    paired = pos >= 0
    api_ns = l_e - l_s
    raw_q = first_start[np.maximum(pos, 0)] - l_e if corr.size else np.zeros_like(l_s)
    gpu_ns = gpu_sum[np.maximum(pos, 0)] if corr.size else np.zeros_like(l_s)
    short = paired & (gpu_ns < api_ns)

    sp = scope & paired
    queue = np.maximum(raw_q[sp], 0)
    n_paired = int(sp.sum())
    n_short = int((short & scope).sum())

    g_s, g_e = launch_bound_gaps(g)
    long = (g_e - g_s) > long_gap_ns
    g_step = iv.assign_to_windows(g_s, ws, we)
    g_scope = g_step >= 0 if n else np.ones(g_s.size, dtype=bool)

    def clipped(mask: npt.NDArray[np.bool_]) -> I64:
        # gaps of several devices are merged: time during which some device waited
        return iv.overlap_with_windows(*iv.union(g_s[mask], g_e[mask]), ws, we) \
            if mask.any() and n else np.zeros(n, dtype=np.int64)

    idle = clipped(np.ones(g_s.size, dtype=bool))
    idle_short = clipped(~long)
    idle_long = clipped(long)
    launches_ps = count_window(step, n)
    api_ps = per_window(api_ns, step, n)
    short_ps = count_window(np.where(short, step, -1), n)
    if n:
        idle_ns, idle_short_ns, idle_long_ns = (int(x.sum()) for x in (idle, idle_short,
                                                                        idle_long))
    else:
        idle_ns, idle_short_ns, idle_long_ns = (iv.total(g_s, g_e), iv.total(g_s[~long],
                                                g_e[~long]), iv.total(g_s[long], g_e[long]))
    return LaunchAnalysis(
        rank=g.rank_id,
        n_steps=n,
        long_gap_ns=long_gap_ns,
        launches_per_step=ints(launches_ps),
        launch_api_ns_per_step=ints(api_ps),
        short_kernels_per_step=ints(short_ps),
        launch_idle_ns_per_step=ints(idle),
        launch_idle_short_ns_per_step=ints(idle_short),
        launch_idle_long_ns_per_step=ints(idle_long),
        launch_idle_gaps_per_step=ints(count_window(g_step, n)),
        mean_launches_per_step=mean_of(launches_ps),
        mean_launch_api_ns_per_step=mean_of(api_ps),
        mean_launch_idle_ns_per_step=mean_of(idle),
        mean_launch_idle_short_ns_per_step=mean_of(idle_short),
        mean_launch_idle_long_ns_per_step=mean_of(idle_long),
        launches=int(scope.sum()),
        graph_launches=int((scope & graph).sum()),
        paired=n_paired,
        mean_api_ns=mean_of(api_ns[scope]),
        median_api_ns=median_of(api_ns[scope]),
        mean_queue_ns=mean_of(queue),
        median_queue_ns=median_of(queue),
        negative_queue=int((raw_q[sp] < 0).sum()),
        short_kernels=n_short,
        short_kernel_share=n_short / n_paired if n_paired else 0.0,
        short_kernel_gpu_ns=int(gpu_ns[short & scope].sum()),
        launch_idle_ns=idle_ns,
        launch_idle_short_ns=idle_short_ns,
        launch_idle_long_ns=idle_long_ns,
        launch_idle_gaps=int(g_scope.sum()),
    )


DISPATCH_GAP_NS = 100_000  # longer host time between two launches of a thread is not dispatch


def dispatch_gaps(pid: I64, tid: I64, s: I64, e: I64,
                  limit_ns: int = DISPATCH_GAP_NS) -> tuple[I64, I64]:
    """The host time between consecutive launch calls of one thread, where it is at most
    ``limit_ns``: ``[end of launch i, start of launch i+1]``. With no framework op recorded
    around the launches (a live capture records the CUDA calls, not the framework's ops), this
    is the per-op dispatch cost of an eager framework (PyTorch ~5-20 us, JAX ~15-40 us of
    Python and C++ per op around a ~4 us launch call); a longer gap is other host work."""
    if s.size < 2:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    order = np.lexsort((s, tid, pid))
    ps, ts, ss, es = pid[order], tid[order], s[order], e[order]
    same = (ps[1:] == ps[:-1]) & (ts[1:] == ts[:-1])
    gap_s, gap_e = es[:-1], ss[1:]  # a call nested in the one before: a negative gap, dropped
    keep = same & (gap_e > gap_s) & (gap_e - gap_s <= limit_ns)
    return gap_s[keep], gap_e[keep]


def launch_intervals(g: StepGraph) -> tuple[I64, I64]:
    """Host time spent launching: the union of launch call intervals and of the innermost
    framework op (``cpu_ops.kind == "framework"``) enclosing each launch call on the same
    ``(pid, tid)`` (the per-op dispatch cost that precedes a launch); where the rank has no
    framework op at all, the short gaps between a thread's launch calls instead
    (:func:`dispatch_gaps`). Sorted, disjoint; computed once per graph (the breakdown and the
    idle split both need it), read-only.
    """
    def compute() -> tuple[I64, I64]:
        s, e = _launch_intervals(g)
        s.setflags(write=False)
        e.setflags(write=False)
        return s, e

    return g.memo("launch_intervals", compute)


def _launch_intervals(g: StepGraph) -> tuple[I64, I64]:
    # the columns masked as numpy arrays, not the tables filtered (every column copied)
    api = g.table("api_calls")
    is_launch = str_in(api, "kind", LAUNCH_KINDS)
    a_s, a_e = bounds(api)
    l_s, l_e = a_s[is_launch], a_e[is_launch]
    ops = g.table("cpu_ops")
    is_fw = str_in(ops, "kind", (CpuOpKind.FRAMEWORK.value,))
    if l_s.size == 0:
        return iv.union(l_s, l_e)
    l_pid, l_tid = column_i64(api, "pid")[is_launch], column_i64(api, "tid")[is_launch]
    if not is_fw.any():
        # no framework ops recorded (a live capture, or a trace without CPU ops): the dispatch
        # cost is the launching thread's time between back-to-back launch calls
        g_s, g_e = dispatch_gaps(l_pid, l_tid, l_s, l_e)
        return iv.union(np.concatenate((l_s, g_s)), np.concatenate((l_e, g_e)))
    b_s, b_e = bounds(ops)
    o_s, o_e = b_s[is_fw], b_e[is_fw]
    og, lg = iv.group_ids((column_i64(ops, "pid")[is_fw], column_i64(ops, "tid")[is_fw]),
                          (l_pid, l_tid))
    idx = iv.containing_by_group(og, o_s, o_e, lg, l_s, l_e, innermost=True)
    used = np.zeros(o_s.size, dtype=bool)
    used[idx[idx >= 0]] = True
    return iv.union(np.concatenate((l_s, o_s[used])), np.concatenate((l_e, o_e[used])))
