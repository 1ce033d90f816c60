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

The events are read from the run by :mod:`stepscope.reporters.timeline_build`; this module
names and orders the tracks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stepscope.reporters.timeline_columns import I64
from stepscope.schema_enums import ApiKind

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


def thread_info(names: ThreadNames, r: int, pid: int, tid: int, kind: str) -> dict[str, Any]:
    label, main = names.label(r, pid, tid)
    info: dict[str, Any] = {"type": kind, "rank": r, "pid": pid, "tid": tid, "main": main,
                            "thread": label}
    info["label"] = label if kind == "thread" else f"{label} · sampled stacks"
    return info


def leaf_label(frames: str) -> str:
    """``function (file.py:line)`` of a stack's innermost frame (its last line)."""
    lines = [x for x in frames.splitlines() if x.strip()]
    if not lines:
        return "(no Python frame)"
    loc, _, fn = lines[-1].strip().rpartition(" ")
    if not loc:
        return fn
    return f"{fn} ({loc.replace(chr(92), '/').rsplit('/', 1)[-1]})"


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
