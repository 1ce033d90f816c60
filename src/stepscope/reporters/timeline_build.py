"""The one reader of a run for the HTML page: its events, counters and tables, into a ``Page``.

Everything the HTML report shows beyond the ``Report`` is read from the run here, when the
report is built (``build_report(run, page=True)``), so the render modules take data only:

* the timeline's events (:func:`build_timeline`): the rank's steps (from the analysis), GPU
  kernels, copies, memsets and syncs per stream, host events per thread
  (:mod:`stepscope.reporters.timeline_host` names and orders them) and sampled stacks, gathered
  into the accumulators of :mod:`stepscope.reporters.timeline_columns` and laid out by
  :func:`stepscope.reporters.timeline_data.layout`;
* the counter series (allocator memory, samples), shaped by
  :mod:`stepscope.reporters.timeline_counters`;
* the full kernel table per rank, the longest copies, the devices and the API-call counts.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.analysis import Analysis
from stepscope.analysis.graph import rank_graph
from stepscope.analysis.kernels import KernelStats, kernel_frame, kernel_table
from stepscope.model.clocks import ClockAlignment, clock_alignment
from stepscope.model.collectives import run_cross_rank
from stepscope.reporters.timeline_columns import (
    I64,
    K,
    Parts,
    Strings,
    Tracks,
    dict_codes,
    enum_codes,
    i64,
    key_ids,
    row_groups,
)
from stepscope.reporters.timeline_counters import CounterData, MemorySeries, Series
from stepscope.reporters.timeline_data import (
    CFG_ALL,
    CFG_INT,
    COPY_KINDS,
    MEM_KINDS,
    Page,
    Timeline,
    add_steps,
    layout,
    rel_us,
)
from stepscope.reporters.timeline_host import (
    API_KINDS,
    DEFAULT_STACK_PERIOD_NS,
    ThreadNames,
    leaf_label,
    thread_info,
)
from stepscope.store.run import Run

KERNEL_ROWS = 1000  # per rank, by total time
FULL_TABLE_MAX_LAUNCHES = 50_000  # above this, the kernels section shows the analysis' top rows
COPY_ROWS = 500  # longest copies listed in the copies section
DEFAULT_MAX_EVENTS = 3_000_000


def build_page(run: Run, analysis: Analysis, *,
               max_events: int | None = DEFAULT_MAX_EVENTS) -> Page:
    """What the HTML page shows beyond the report (module docstring)."""
    timeline = build_timeline(run, analysis, max_events=max_events)
    kernels, top_only = _kernels(run, analysis)
    api = rank_graph(run, None).table("api_calls")
    return Page(
        timeline=timeline, kernels=kernels, kernels_top_only=top_only,
        copies=_copies(run, int(timeline.meta["t0_ns"]), rank_clocks(analysis)),
        devices=tuple(rank_graph(run, None).table("devices").to_pylist()),
        api_calls=api.num_rows,
        launch_apis=int(pc.sum(pc.is_in(api.column("kind").cast(pa.string()),
                                        pa.array(["launch", "graph_launch"]))).as_py() or 0)
        if api.num_rows else 0)


def build_timeline(run: Run, analysis: Analysis, *, max_events: int | None = None,
                   level: int = 1) -> Timeline:
    """Every event of ``run`` as the compact payload of :mod:`.timeline_data`, each rank one
    group of tracks on a shared time axis: shifted by its clock offset where the ranks' clocks
    differ (``model.clocks``; the payload's ``clock`` says which shift went to which rank)."""
    strings, tracks, parts = Strings(), Tracks(), Parts()
    strings.id("")
    stream_names = {(int(a["rank"]), int(a["device"]), int(a["stream"])): str(a["name"] or "")
                    for a in rank_graph(run, None).table("streams").to_pylist()}
    names = thread_names(run)
    add_steps(analysis, strings, tracks, parts)
    for r in run.ranks:
        _gpu(run, r, strings, tracks, parts, stream_names)
        add_host(run, r, strings, tracks, parts, names)
    clock = rank_clocks(analysis)
    counters = CounterData(
        memory=tuple(replace(m, ts=m.ts + clock.shift(m.rank)) for m in memory_series(run)),
        samples=tuple(replace(x, ts=x.ts + clock.shift(x.rank)) for x in sample_series(run)))
    return layout(strings, tracks, parts, counters, max_events=max_events, level=level,
                  clock=clock)


def rank_clocks(analysis: Analysis) -> ClockAlignment:
    """The shift of each rank onto the shared axis (none for one rank)."""
    if len(analysis.ranks) < 2:
        return ClockAlignment()
    return clock_alignment(run_cross_rank(analysis))


def _kernels(run: Run, analysis: Analysis
             ) -> tuple[tuple[tuple[int, tuple[KernelStats, ...]], ...], bool]:
    """Kernel table of every rank, and whether some rank's table is only its top rows.

    Ranks with more than :data:`FULL_TABLE_MAX_LAUNCHES` launches use the analysis' own top
    kernels (:data:`stepscope.analysis.TOP_KERNELS`) instead of recomputing the full table.
    """
    out, partial = [], False
    for ra in analysis.ranks:
        if ra.kernel_count > FULL_TABLE_MAX_LAUNCHES:
            table, partial = ra.kernels, partial or ra.kernel_count > len(ra.kernels)
        else:
            table = kernel_table(analysis.graph.rank(ra.rank), window=ra.steady_window,
                                 limit=KERNEL_ROWS)
        out.append((ra.rank, tuple(table)))
    return tuple(out), partial


def _copies(run: Run, t0: int, clock: ClockAlignment) -> dict[str, Any]:
    m = rank_graph(run, None).table("memcpy")
    total = m.num_rows
    if total > COPY_ROWS:
        dur = m.column("dur_ns").to_numpy()
        m = m.take(pa.array(np.argsort(-dur, kind="stable")[:COPY_ROWS]))
    rows = []
    for r in m.to_pylist():
        rows.append({"rank": r["rank"],
                     "start_us": rel_us(r["ts_ns"] + clock.shift(int(r["rank"])), t0),
                     "dur_us": r["dur_ns"] / 1e3, "kind": r["kind"], "bytes": r["bytes"],
                     "src": r["src_kind"], "dst": r["dst_kind"], "device": r["device"],
                     "stream": r["stream"],
                     "gbs": (r["bytes"] / r["dur_ns"]) if r["bytes"] and r["dur_ns"] else None})
    rows.sort(key=lambda r: -float(r["dur_us"]))
    return {"total": total, "rows": rows}


def _gpu(run: Run, r: int, strings: Strings, tracks: Tracks, parts: Parts,
         stream_names: dict[tuple[int, int, int], str]) -> None:
    def make(key: tuple[int, ...]) -> dict[str, Any]:
        _, dev, stream = key
        label = stream_names.get((r, dev, stream)) or f"stream {stream}"
        return {"type": "stream", "rank": r, "device": dev, "stream": stream,
                "label": f"GPU {dev} · {label}" if dev >= 0 else label, "order": (r, 1, dev, stream)}

    def ids(t: pa.Table) -> I64:
        return key_ids(tracks, [np.full(t.num_rows, r), i64(t, "device"), i64(t, "stream")],
                       make)

    k = kernel_frame(rank_graph(run, r))
    if k.num_rows:
        cfg_cols = [i64(k, c) for c in CFG_INT] + [i64(k, "device"), np.full(k.num_rows, r)]
        inv, first = row_groups(cfg_cols)
        rows = k.take(pa.array(first)).select(list(CFG_ALL)).to_pylist()
        base = len(parts.configs)
        parts.configs.extend([row[c] for c in CFG_ALL] for row in rows)
        names = strings.column(k.column("name"))
        _, firsts = np.unique(names, return_index=True)
        cls = k.take(pa.array(firsts)).select(["category", "precision", "tensor_cores"]).to_pylist()
        parts.classes.extend((int(names[i]), c) for i, c in zip(firsts, cls))
        parts.add(K["kernel"], i64(k, "ts_ns", 0), i64(k, "dur_ns", 0), ids(k), names,
                  k_corr=i64(k, "correlation", 0), k_cfg=inv + base)
    m = rank_graph(run, r).table("memcpy")
    if m.num_rows:
        labels = np.array([strings.id(f"Memcpy {v}") for v in COPY_KINDS], dtype=np.uint32)
        kind = enum_codes(m, "kind", COPY_KINDS)
        parts.add(K["memcpy"], i64(m, "ts_ns", 0), i64(m, "dur_ns", 0), ids(m), labels[kind],
                  c_corr=i64(m, "correlation", 0), c_bytes=i64(m, "bytes", 0), c_kind=kind,
                  c_src=enum_codes(m, "src_kind", MEM_KINDS), c_dst=enum_codes(m, "dst_kind", MEM_KINDS))
    s = rank_graph(run, r).table("memset")
    if s.num_rows:
        parts.add(K["memset"], i64(s, "ts_ns", 0), i64(s, "dur_ns", 0), ids(s),
                  np.full(s.num_rows, strings.id("Memset"), dtype=np.uint32),
                  m_corr=i64(s, "correlation", 0), m_bytes=i64(s, "bytes", 0))
    y = rank_graph(run, r).table("sync")
    if y.num_rows:
        kinds = pc.fill_null(y.column("kind").cast(pa.string()), "unknown").to_pylist()
        parts.add(K["gpu_sync"], i64(y, "ts_ns", 0), i64(y, "dur_ns", 0), ids(y),
                  np.array([strings.id(f"sync ({v})") for v in kinds], dtype=np.uint32))


def thread_names(run: Run) -> ThreadNames:
    """Names of the run's host threads and processes, and each rank's main process."""
    threads: dict[tuple[int, int, int], str] = {}
    tids: dict[tuple[int, int], set[str]] = {}
    main: dict[int, int] = {}
    for a in rank_graph(run, None).table("threads").to_pylist():
        name = str(a["name"] or "")
        if not name:
            continue
        r, pid, tid = int(a["rank"]), int(-1 if a["pid"] is None else a["pid"]), int(a["tid"])
        threads[(r, pid, tid)] = name
        tids.setdefault((r, tid), set()).add(name)
        if name == "MainThread" and pid >= 0:
            main.setdefault(r, pid)
    procs = {(int(a["rank"]), int(a["pid"])): str(a["name"] or "")
             for a in rank_graph(run, None).table("processes").to_pylist()}
    for (r, pid), name in procs.items():
        if r not in main and "worker" not in name.lower():
            main[r] = pid
    return ThreadNames(threads=threads, by_tid={k: v.pop() for k, v in tids.items() if len(v) == 1},
               processes=procs, main_pid=main)


def add_host(run: Run, r: int, strings: Strings, tracks: Tracks, parts: Parts,
             names: ThreadNames) -> None:
    """Rank ``r``'s host events, one track per (pid, tid), and its sampled stacks."""
    def make(key: tuple[int, ...]) -> dict[str, Any]:
        return thread_info(names, r, key[1], key[2], "thread")

    def ids(t: pa.Table) -> I64:
        return key_ids(tracks, [np.full(t.num_rows, r), i64(t, "pid"), i64(t, "tid")], make)

    waits = rank_graph(run, r).table("input_waits")
    wait_keys = set(zip(i64(waits, "tid").tolist(), i64(waits, "ts_ns").tolist(),
                        i64(waits, "dur_ns").tolist()))
    ops = rank_graph(run, r).table("cpu_ops")
    if ops.num_rows:
        py = np.asarray(pc.equal(pc.fill_null(ops.column("kind").cast(pa.string()), ""), "python")
                        .to_numpy(zero_copy_only=False), dtype=bool)
        kinds = np.where(py, K["python"], K["op"]).astype(np.uint8)
        for kind in (K["op"], K["python"]):
            sub = ops.filter(pa.array(kinds == kind))
            if sub.num_rows:
                parts.add(kind, i64(sub, "ts_ns", 0), i64(sub, "dur_ns", 0), ids(sub),
                          strings.column(sub.column("name")))
    api = rank_graph(run, r).table("api_calls")
    if api.num_rows:
        parts.add(K["api"], i64(api, "ts_ns", 0), i64(api, "dur_ns", 0), ids(api),
                  strings.column(api.column("name")), a_corr=i64(api, "correlation", 0),
                  a_kind=enum_codes(api, "kind", API_KINDS))
    ann = rank_graph(run, r).table("annotations")
    if ann.num_rows:
        src = pc.fill_null(ann.column("source").cast(pa.string()), "user").to_pylist()
        tid, ts, dur = i64(ann, "tid"), i64(ann, "ts_ns", 0), i64(ann, "dur_ns", 0)
        keep = np.array([(t, a, b) not in wait_keys for t, a, b in zip(tid.tolist(), ts.tolist(),
                                                                       dur.tolist())], dtype=bool)
        kind_of = {"user": K["annotation"], "nvtx": K["nvtx"], "gpu_user": K["gpu_annotation"],
                   "profiler_step": K["profiler_step"]}
        kinds = np.array([kind_of.get(s, K["annotation"]) for s in src], dtype=np.uint8)
        names_col = strings.column(ann.column("name"))
        gpu = kinds == K["gpu_annotation"]
        host = ~gpu & keep
        for kind in np.unique(kinds[host]).tolist():
            sel = host & (kinds == kind)
            parts.add(kind, ts[sel], dur[sel], ids(ann.filter(pa.array(sel))), names_col[sel])
        if gpu.any():
            dev = i64(ann, "device")[gpu]
            t_ids = key_ids(tracks, [np.full(dev.size, r), dev], lambda key: {
                "type": "gpu_annotations", "rank": r, "device": key[1],
                "label": f"GPU {key[1]} · annotations", "order": (r, 1, key[1], -1)})
            parts.add(K["gpu_annotation"], ts[gpu], dur[gpu], t_ids, names_col[gpu])
    if waits.num_rows:
        parts.add(K["input_wait"], i64(waits, "ts_ns", 0), i64(waits, "dur_ns", 0), ids(waits),
                  strings.column(waits.column("name")))
    _stacks(run, r, strings, tracks, parts, names)


def _stacks(run: Run, r: int, strings: Strings, tracks: Tracks, parts: Parts,
            names: ThreadNames) -> None:
    st = rank_graph(run, r).table("stacks")
    if not st.num_rows:
        return
    codes, values = dict_codes(st.column("frames"))
    values = [*values, ""]
    pid, tid, ts = i64(st, "pid"), i64(st, "tid"), i64(st, "ts_ns", 0)
    order = np.lexsort((ts, tid, pid))
    pid, tid, ts, codes = pid[order], tid[order], ts[order], codes[order]
    first = np.r_[True, (pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1])]
    last = np.r_[first[1:], True]
    gap = np.r_[np.diff(ts), 0]
    period = int(np.median(gap[~last])) if (~last).any() else DEFAULT_STACK_PERIOD_NS
    period = max(period, 1)
    cut = last | (gap > 1.5 * period)  # the sample's lane segment ends after it
    end = np.where(cut, ts + period, ts + gap)
    start_run = first | (codes != np.r_[-1, codes[:-1]]) | np.r_[True, cut[:-1]]
    starts = np.flatnonzero(start_run)
    ends = np.r_[starts[1:], ts.size] - 1
    leaf = np.array([strings.id(leaf_label(v)) for v in values], dtype=np.uint32)
    full = np.array([strings.id(v) for v in values], dtype=np.uint32)
    c = codes[starts]

    def make(key: tuple[Any, ...]) -> dict[str, Any]:
        return thread_info(names, r, key[2], key[3], "stacks")

    t_ids = key_ids(tracks, [np.full(starts.size, r), pid[starts], tid[starts]], make,
                    prefix=("stacks",))
    parts.add(K["stack"], ts[starts], end[ends] - ts[starts], t_ids, leaf[c],
              s_stack=full[c], s_n=(ends - starts + 1).astype(np.int64))


def memory_series(run: Run) -> tuple[MemorySeries, ...]:
    """Allocator totals per (rank, device type, device), in time order."""
    caps = {(int(d["rank"]), int(d["device"])): d.get("total_memory")
            for d in rank_graph(run, None).table("devices").to_pylist()}
    mem = rank_graph(run, None).table("memory_events")
    if not mem.num_rows:
        return ()
    mem = mem.sort_by([("rank", "ascending"), ("ts_ns", "ascending")])
    dtype = pc.fill_null(mem.column("device_type").cast(pa.string()), "gpu").to_pylist()
    keys = list(zip(i64(mem, "rank").tolist(), dtype, i64(mem, "device").tolist()))
    out = []
    for key in sorted(set(keys)):
        sub = mem.filter(pa.array([k == key for k in keys]))
        r, dev_type, dev = key
        out.append(MemorySeries(
            rank=r, device_type=dev_type, device=dev, ts=i64(sub, "ts_ns", 0),
            allocated=i64(sub, "total_allocated", 0).astype(np.float64),
            reserved=i64(sub, "total_reserved", 0).astype(np.float64),
            capacity=caps.get((r, dev))))
    return tuple(out)


def sample_series(run: Run) -> tuple[Series, ...]:
    """The ``samples`` table as one time-sorted series per (rank, device, metric)."""
    smp = rank_graph(run, None).table("samples")
    if not smp.num_rows:
        return ()
    rank, dev, ts = i64(smp, "rank", 0), i64(smp, "device"), i64(smp, "ts_ns", 0)
    metric = pc.dictionary_encode(smp.column("metric").cast(pa.string())).combine_chunks()
    names = [str(x) for x in metric.dictionary.to_pylist()]
    code = np.asarray(metric.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    unit = pc.fill_null(smp.column("unit").cast(pa.string()), "").to_numpy(zero_copy_only=False)
    value = np.asarray(pc.fill_null(smp.column("value"), np.nan).to_numpy(zero_copy_only=False),
                       dtype=np.float64)
    order = np.lexsort((ts, code, dev, rank))
    rank, dev, code, ts, value, unit = (rank[order], dev[order], code[order], ts[order],
                                        value[order], unit[order])
    cut = np.flatnonzero(np.r_[True, (rank[1:] != rank[:-1]) | (dev[1:] != dev[:-1])
                               | (code[1:] != code[:-1]), True])
    return tuple(Series(rank=int(rank[a]), device=int(dev[a]), metric=names[int(code[a])],
                        unit=str(unit[a] or ""), ts=ts[a:b], values=value[a:b])
                 for a, b in pairwise(cut.tolist()))
