"""Host threads of the timeline: their events, names and order, and a sampled-stack lane each.

Which threads: those with an event of their own in the run (CUDA API calls, framework ops and
Python frames, annotations and NVTX ranges, input waits, sampled stacks); a thread that only has
a name in the ``threads`` table gets no track.

Names, first that applies: the ``threads`` table's name (``MainThread``, ``pt_autograd_0``, a
Kineto trace's ``thread 2352 (python3)``); for a thread of another process than the rank's main
one, the process name (``DataLoader worker 0``); ``main thread`` for the main process's first
thread (tid = pid); else ``thread <tid>``.

Order, per rank, after the GPU streams: the main thread first (named ``MainThread``, or tid = pid
of the main process), then the others by their number of events, most first. Each thread's
sampled-stack track comes right under it.

Stacks (``stacks`` table: one sampled Python stack per row, innermost frame last) become events
of kind ``stack`` named after the innermost frame (``function (file.py:line)``) with the whole
stack in ``s_stack`` (a string id). A sample lasts until the thread's next sample; the last one,
and one followed by a gap over 1.5 sampling periods, last one period (the median interval of the
rank's samples, or :data:`DEFAULT_STACK_PERIOD_NS`). Consecutive samples with the same stack are
one event; ``s_n`` counts them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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
)
from stepscope.schema import ApiKind
from stepscope.store.run import Run

API_KINDS = [a.value for a in ApiKind]
DEFAULT_STACK_PERIOD_NS = 50_000_000  # `stepscope record`'s default: stacks at 20 Hz
THREAD_TYPES = ("thread", "stacks")


@dataclass(frozen=True)
class ThreadNames:
    """Names of host threads and processes, and each rank's main process."""

    threads: dict[tuple[int, int, int], str]  # (rank, pid or -1, tid) -> name
    by_tid: dict[tuple[int, int], str]  # (rank, tid) -> name, where one pid has that tid
    processes: dict[tuple[int, int], str]  # (rank, pid) -> process name
    main_pid: dict[int, int]  # rank -> pid of its main process, where known

    @classmethod
    def of(cls, run: Run) -> ThreadNames:
        threads: dict[tuple[int, int, int], str] = {}
        tids: dict[tuple[int, int], set[str]] = {}
        main: dict[int, int] = {}
        for a in run.table("threads").to_pylist():
            name = str(a["name"] or "")
            if not name:
                continue
            r, pid, tid = int(a["rank"]), int(-1 if a["pid"] is None else a["pid"]), int(a["tid"])
            threads[(r, pid, tid)] = name
            tids.setdefault((r, tid), set()).add(name)
            if name == "MainThread" and pid >= 0:
                main.setdefault(r, pid)
        procs = {(int(a["rank"]), int(a["pid"])): str(a["name"] or "")
                 for a in run.table("processes").to_pylist()}
        for (r, pid), name in procs.items():
            if r not in main and "worker" not in name.lower():
                main[r] = pid
        return cls(threads=threads, by_tid={k: v.pop() for k, v in tids.items() if len(v) == 1},
                   processes=procs, main_pid=main)

    def label(self, r: int, pid: int, tid: int) -> tuple[str, bool]:
        """(name, whether it is the rank's main thread)."""
        name = self.threads.get((r, pid, tid)) or self.by_tid.get((r, tid), "")
        main_pid = self.main_pid.get(r)
        own = main_pid is None or pid < 0 or pid == main_pid
        is_main = name == "MainThread" or (tid == pid and tid >= 0 and own)
        if name:
            return name, is_main
        proc = self.processes.get((r, pid), "")
        if proc and not own:
            return (proc if tid == pid else f"{proc} · thread {tid}"), False
        if is_main:
            return "main thread", True
        return (f"thread {tid}" if tid >= 0 else "thread ?"), False


def _thread_info(names: ThreadNames, r: int, pid: int, tid: int, kind: str) -> dict[str, Any]:
    label, main = names.label(r, pid, tid)
    info: dict[str, Any] = {"type": kind, "rank": r, "pid": pid, "tid": tid, "main": main,
                            "thread": label}
    info["label"] = label if kind == "thread" else f"{label} · sampled stacks"
    return info


def add_host(run: Run, r: int, strings: Strings, tracks: Tracks, parts: Parts,
             names: ThreadNames) -> None:
    """Rank ``r``'s host events, one track per (pid, tid), and its sampled stacks."""
    def make(key: tuple[int, ...]) -> dict[str, Any]:
        return _thread_info(names, r, key[1], key[2], "thread")

    def ids(t: pa.Table) -> I64:
        return key_ids(tracks, [np.full(t.num_rows, r), i64(t, "pid"), i64(t, "tid")], make)

    waits = run.table("input_waits", r)
    wait_keys = set(zip(i64(waits, "tid").tolist(), i64(waits, "ts_ns").tolist(),
                        i64(waits, "dur_ns").tolist()))
    ops = run.table("cpu_ops", r)
    if ops.num_rows:
        py = np.asarray(pc.equal(pc.fill_null(ops.column("kind").cast(pa.string()), ""), "python")
                        .to_numpy(zero_copy_only=False), dtype=bool)
        kinds = np.where(py, K["python"], K["op"]).astype(np.uint8)
        for kind in (K["op"], K["python"]):
            sub = ops.filter(pa.array(kinds == kind))
            if sub.num_rows:
                parts.add(kind, i64(sub, "ts_ns", 0), i64(sub, "dur_ns", 0), ids(sub),
                          strings.column(sub.column("name")))
    api = run.table("api_calls", r)
    if api.num_rows:
        parts.add(K["api"], i64(api, "ts_ns", 0), i64(api, "dur_ns", 0), ids(api),
                  strings.column(api.column("name")), a_corr=i64(api, "correlation", 0),
                  a_kind=enum_codes(api, "kind", API_KINDS))
    ann = run.table("annotations", r)
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


def leaf_label(frames: str) -> str:
    """``function (file.py:line)`` of a stack's innermost frame (its last line)."""
    lines = [x for x in frames.splitlines() if x.strip()]
    if not lines:
        return "(no Python frame)"
    loc, _, fn = lines[-1].strip().rpartition(" ")
    if not loc:
        return fn
    return f"{fn} ({loc.replace(chr(92), '/').rsplit('/', 1)[-1]})"


def _stacks(run: Run, r: int, strings: Strings, tracks: Tracks, parts: Parts,
            names: ThreadNames) -> None:
    st = run.table("stacks", r)
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
        return _thread_info(names, r, key[2], key[3], "stacks")

    t_ids = key_ids(tracks, [np.full(starts.size, r), pid[starts], tid[starts]], make,
                    prefix=("stacks",))
    parts.add(K["stack"], ts[starts], end[ends] - ts[starts], t_ids, leaf[c],
              s_stack=full[c], s_n=(ends - starts + 1).astype(np.int64))


def order_key(info: dict[str, Any], events: dict[tuple[int, int, int], int]) -> tuple[Any, ...]:
    """Sort key of a track: a thread's (and its stacks') after the GPU tracks of its rank, the
    main thread first, then by the thread's events (both tracks), most first."""
    if info["type"] not in THREAD_TYPES:
        return tuple(info["order"])
    key = (info["rank"], info["pid"], info["tid"])
    return (info["rank"], 2, 0 if info["main"] else 1, -events.get(key, 0), info["pid"],
            info["tid"], THREAD_TYPES.index(info["type"]))


def thread_events(items: list[dict[str, Any]], per_track: I64) -> dict[tuple[int, int, int], int]:
    """Events per host thread (its track and its stacks track together)."""
    out: dict[tuple[int, int, int], int] = {}
    for i, info in enumerate(items):
        if info["type"] in THREAD_TYPES:
            key = (info["rank"], info["pid"], info["tid"])
            out[key] = out.get(key, 0) + int(per_track[i])
    return out
