"""System and process metrics through psutil (cheap /proc reads, < 1 ms a tick).

=============================  =======  =====================================================
``cpu.util_pct``               %        system-wide CPU busy, mean over logical CPUs
``cpu.core<N>.util_pct``       %        logical CPU N busy
``process.cpu_pct``            %        the profiled process, % of one core (can exceed 100)
``process.rss_bytes``          B        the profiled process's resident set
``dataloader.workers_cpu_pct`` %        DataLoader worker processes, summed, % of one core
``dataloader.workers``         count    live DataLoader worker processes
``disk.read_bytes_per_s``      B/s      system-wide (``psutil.disk_io_counters``)
``disk.write_bytes_per_s``     B/s
``net.recv_bytes_per_s``       B/s      system-wide (``psutil.net_io_counters``)
``net.sent_bytes_per_s``       B/s
=============================  =======  =====================================================
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from stepscope.capture.samplers import Row


def _rate(new: float, old: float, dt: float) -> float:
    return max(0.0, (new - old) / dt) if dt > 0 else 0.0


class PsutilSampler:
    """System and process metrics through psutil (cheap /proc reads, < 1 ms a tick)."""

    def __init__(
        self,
        psutil_module: Any,
        *,
        worker_pids: Callable[[], frozenset[int] | None],
        pid: int | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ps = psutil_module
        # the profiled process: this one, or the one a separate sampler process watches
        self._proc = psutil_module.Process(os.getpid() if pid is None else pid)
        self._worker_pids = worker_pids  # None: unknown, use all children (refreshed at 1 Hz)
        self._mono = monotonic
        self._last_t = 0.0
        self._disk: tuple[float, float] | None = None
        self._net: tuple[float, float] | None = None
        self._workers: dict[int, tuple[Any, float]] = {}  # pid -> (Process, cpu seconds)
        self._children: frozenset[int] = frozenset()
        self._children_t = -1e9
        self.unavailable: dict[str, str] = {}

    def prime(self) -> None:
        """First readings: psutil's CPU percentages are 'since the previous call'."""
        self._last_t = self._mono()
        self._guard("cpu.util_pct", lambda: self._ps.cpu_percent(percpu=True))
        self._guard("process.cpu_pct", self._proc.cpu_percent)
        self._disk = self._guard("disk", self._read_disk)
        self._net = self._guard("net", self._read_net)

    def _guard(self, key: str, fn: Callable[[], Any]) -> Any:
        if key in self.unavailable:
            return None
        try:
            return fn()
        except Exception as e:  # one broken reading must not stop the others
            self.unavailable[key] = f"{type(e).__name__}: {e}"
            return None

    def _read_disk(self) -> tuple[float, float] | None:
        c = self._ps.disk_io_counters(perdisk=False)
        return None if c is None else (float(c.read_bytes), float(c.write_bytes))

    def _read_net(self) -> tuple[float, float] | None:
        c = self._ps.net_io_counters(pernic=False)
        return None if c is None else (float(c.bytes_recv), float(c.bytes_sent))

    def sample(self, ts: int) -> list[Row]:
        now = self._mono()
        dt, self._last_t = now - self._last_t, now
        rows: list[Row] = []
        cores = self._guard("cpu.util_pct", lambda: self._ps.cpu_percent(percpu=True))
        if cores:
            rows.append((ts, None, "cpu.util_pct", float(sum(cores)) / len(cores), "%"))
            rows.extend((ts, None, f"cpu.core{i}.util_pct", float(v), "%") for i, v in enumerate(cores))
        pct = self._guard("process.cpu_pct", self._proc.cpu_percent)
        if pct is not None:
            rows.append((ts, None, "process.cpu_pct", float(pct), "%"))
        mem = self._guard("process.rss_bytes", self._proc.memory_info)
        if mem is not None:
            rows.append((ts, None, "process.rss_bytes", float(mem.rss), "B"))
        workers = self._guard("dataloader.workers_cpu_pct", lambda: self._sample_workers(now, dt))
        if workers is not None:
            n, cpu = workers
            rows.append((ts, None, "dataloader.workers_cpu_pct", cpu, "%"))
            rows.append((ts, None, "dataloader.workers", float(n), "count"))
        disk = self._guard("disk", self._read_disk)
        if disk is not None and self._disk is not None:
            rows.append((ts, None, "disk.read_bytes_per_s", _rate(disk[0], self._disk[0], dt), "B/s"))
            rows.append((ts, None, "disk.write_bytes_per_s", _rate(disk[1], self._disk[1], dt), "B/s"))
        self._disk = disk
        net = self._guard("net", self._read_net)
        if net is not None and self._net is not None:
            rows.append((ts, None, "net.recv_bytes_per_s", _rate(net[0], self._net[0], dt), "B/s"))
            rows.append((ts, None, "net.sent_bytes_per_s", _rate(net[1], self._net[1], dt), "B/s"))
        self._net = net
        return rows

    def _sample_workers(self, now: float, dt: float) -> tuple[int, float] | None:
        """(live workers, summed CPU % of one core since the last tick); None when there are none."""
        pids = self._worker_pids()
        if pids is None:  # hooks off: all child processes, listed at most once a second
            if now - self._children_t >= 1.0:
                me = os.getpid()  # a sampler process is a child of the process it watches
                self._children = frozenset(c.pid for c in self._proc.children(recursive=False)
                                           if c.pid != me)
                self._children_t = now
            pids = self._children
        total = 0.0
        live = 0
        for pid in list(self._workers):
            if pid not in pids:
                del self._workers[pid]
        for pid in pids:
            try:
                known = self._workers.get(pid)
                proc = known[0] if known else self._ps.Process(pid)
                t = proc.cpu_times()
                cpu = float(t.user + t.system)
                if known is not None:
                    total += _rate(cpu, known[1], dt) * 100.0
                elif proc.create_time() >= time.time() - dt:  # born since the last tick
                    total += _rate(cpu, 0.0, dt) * 100.0
                self._workers[pid] = (proc, cpu)
                live += 1
            except Exception:  # exited (NoSuchProcess) or not ours to read
                self._workers.pop(pid, None)
        return (live, total) if live else None
