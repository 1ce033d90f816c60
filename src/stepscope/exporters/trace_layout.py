"""Trace processes and tracks of an export: one process per rank and host process, one per GPU
per rank; (rank, pid, tid) and (rank, device, stream) mapped to trace pid/tid, with names and
sort order (the metadata events)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.analysis.graph import rank_graph
from stepscope.exporters.json_columns import group_keys
from stepscope.store.run import Run

LANE_BASE = 1_000_000_000  # synthetic track ids start here (above any Linux tid)


@dataclass
class _Process:
    pid: int
    name: str
    sort: tuple[Any, ...]
    threads: dict[int, tuple[str, tuple[Any, ...]]] = field(default_factory=dict)
    lanes: dict[Any, int] = field(default_factory=dict)

    def thread(self, tid: int | None, name: str, sort: tuple[Any, ...]) -> int:
        """The track of a real thread/stream id (its own id when it fits the format)."""
        if tid is not None and 0 <= tid < LANE_BASE:
            self.threads.setdefault(tid, (name, sort))
            return tid
        return self.lane(("id", tid), name, sort)

    def lane(self, key: Any, name: str, sort: tuple[Any, ...]) -> int:
        """A synthetic track (steps, input waits, GPU annotations, ids that do not fit)."""
        if key not in self.lanes:
            self.lanes[key] = LANE_BASE + len(self.lanes)
            self.threads[self.lanes[key]] = (name, sort)
        return self.lanes[key]


def _main_pids(run: Run) -> dict[int, int | None]:
    """Each rank's training process: the manifest's pid, else the pid with most host rows."""
    counts: Counter[tuple[int, int]] = Counter()
    for name in ("threads", "cpu_ops", "api_calls", "annotations", "input_waits"):
        t = rank_graph(run, None).table(name).select(["rank", "pid"]).filter(pc.is_valid(rank_graph(run, None).table(name)["pid"]))
        for row in t.group_by(["rank", "pid"]).aggregate([([], "count_all")]).to_pylist():
            counts[(row["rank"], row["pid"])] += row["count_all"]
    out: dict[int, int | None] = {}
    for r in run.manifest.ranks:
        mine = [(n, -pid) for (rank, pid), n in counts.items() if rank == r.rank]
        out[r.rank] = r.pid if r.pid is not None else (-max(mine)[1] if mine else None)
    return out


class Layout:
    """Maps (rank, pid, tid) and (rank, device, stream) to trace pid/tid, with names."""

    def __init__(self, run: Run) -> None:
        self.procs: dict[tuple[Any, ...], _Process] = {}
        self.main_pid = _main_pids(run)
        self.host_names = {(r["rank"], r["pid"]): r for r in rank_graph(run, None).table("processes").to_pylist()}
        self.thread_names = {(r["rank"], r["pid"], r["tid"]): r["name"]
                             for r in rank_graph(run, None).table("threads").to_pylist()}
        self.devices = {(r["rank"], r["device"]): r["name"]
                        for r in rank_graph(run, None).table("devices").to_pylist()}
        self.streams = {(r["rank"], r["device"], r["stream"]): r["name"]
                        for r in rank_graph(run, None).table("streams").to_pylist()}
        for rank in run.ranks:
            self.host(rank, None)
        for rank, device in sorted(self.devices):
            self.gpu(rank, device)
        for rank, pid, tid in sorted(self.thread_names,
                                     key=lambda k: tuple(-1 if x is None else x for x in k)):
            self.host_thread(rank, pid, tid)

    def _proc(self, key: tuple[Any, ...], name: str, sort: tuple[Any, ...]) -> _Process:
        if key not in self.procs:
            self.procs[key] = _Process(len(self.procs) + 1, name, sort)
        return self.procs[key]

    def host(self, rank: int, pid: int | None) -> _Process:
        main = self.main_pid.get(rank)
        pid = main if pid is None else pid
        info = self.host_names.get((rank, pid)) or {}
        label = " · ".join(x for x in (info.get("host"), info.get("name")) if x)
        name = f"rank {rank} · {label + ' ' if label else ''}(pid {pid})" if pid is not None \
            else f"rank {rank} · host"
        return self._proc(("host", rank, pid), name, (rank, 0 if pid == main else 1, pid or 0))

    def gpu(self, rank: int, device: int | None) -> _Process:
        dev = "?" if device is None else device
        model = self.devices.get((rank, device))
        name = f"rank {rank} · GPU {dev}" + (f" · {model}" if model else "")
        return self._proc(("gpu", rank, device), name, (rank, 2, -1 if device is None else device))

    def host_thread(self, rank: int, pid: int | None, tid: int | None) -> tuple[int, int]:
        p = self.host(rank, pid)
        pid = self.main_pid.get(rank) if pid is None else pid
        name = self.thread_names.get((rank, pid, tid)) or f"thread {'?' if tid is None else tid}"
        sort = (1, 0 if tid == pid else 1, -1 if tid is None else tid)
        return p.pid, p.thread(tid, name, sort)

    def host_lane(self, rank: int, pid: int | None, lane: str, order: int) -> tuple[int, int]:
        p = self.host(rank, pid)
        return p.pid, p.lane(lane, lane, (0, order))

    def stream(self, rank: int, device: int | None, stream: int | None) -> tuple[int, int]:
        p = self.gpu(rank, device)
        s = "?" if stream is None else stream
        name = self.streams.get((rank, device, stream)) or f"stream {s}"
        return p.pid, p.thread(stream, name, (-1 if stream is None else stream, 1))

    def gpu_lane(self, rank: int, device: int | None, stream: int | None) -> tuple[int, int]:
        p = self.gpu(rank, device)
        s = "?" if stream is None else stream
        return p.pid, p.lane(("annotations", stream), f"stream {s} annotations",
                             (-1 if stream is None else stream, 0))

    def rows(self, cols: Sequence[pa.ChunkedArray | pa.Array],
             fn: Callable[..., tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
        """Per-row trace (pid, tid) for key columns, ``fn`` called once per distinct key."""
        if len(cols[0]) == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        keys, inv = group_keys(cols)
        lut = np.array([fn(*k) for k in keys], dtype=np.int64).reshape(-1, 2)
        return lut[inv, 0], lut[inv, 1]

    def metadata(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for i, p in enumerate(sorted(self.procs.values(), key=lambda p: p.sort)):
            out.append({"ph": "M", "name": "process_name", "pid": p.pid, "tid": 0, "ts": 0,
                        "args": {"name": p.name}})
            out.append({"ph": "M", "name": "process_sort_index", "pid": p.pid, "tid": 0, "ts": 0,
                        "args": {"sort_index": i}})
            for j, (tid, (name, _)) in enumerate(sorted(p.threads.items(), key=lambda x: x[1][1])):
                out.append({"ph": "M", "name": "thread_name", "pid": p.pid, "tid": tid, "ts": 0,
                            "args": {"name": name}})
                out.append({"ph": "M", "name": "thread_sort_index", "pid": p.pid, "tid": tid,
                            "ts": 0, "args": {"sort_index": j}})
        return out
