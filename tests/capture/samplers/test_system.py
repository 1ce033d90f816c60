"""The psutil sampler on its own: metric names, rates, broken readings switched off."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from stepscope.capture.samplers.system import PsutilSampler


def test_real_psutil_rows() -> None:
    psutil = pytest.importorskip("psutil")
    t = [0.0]
    ps = PsutilSampler(psutil, worker_pids=lambda: frozenset(), monotonic=lambda: t[0])
    ps.prime()
    t[0] = 0.1
    names = {r[2] for r in ps.sample(1)}
    assert {"cpu.util_pct", "cpu.core0.util_pct", "process.cpu_pct", "process.rss_bytes"} <= names
    assert "dataloader.workers" not in names  # no workers: no rows


class BrokenDiskPsutil:
    """psutil with one reading that fails and fixed counters for the rates."""

    def __init__(self) -> None:
        self.recv = 0.0

    def Process(self, pid: int) -> Any:  # noqa: N802 - psutil's name
        return SimpleNamespace(cpu_percent=lambda: 50.0,
                               memory_info=lambda: SimpleNamespace(rss=1024))

    def cpu_percent(self, percpu: bool) -> list[float]:
        return [10.0, 30.0]

    def disk_io_counters(self, perdisk: bool) -> Any:
        raise PermissionError("no /proc/diskstats")

    def net_io_counters(self, pernic: bool) -> Any:
        self.recv += 1000.0
        return SimpleNamespace(bytes_recv=self.recv, bytes_sent=0.0)


def test_rates_and_a_broken_reading() -> None:
    t = [0.0]
    ps = PsutilSampler(BrokenDiskPsutil(), worker_pids=lambda: frozenset(), monotonic=lambda: t[0])
    ps.prime()
    t[0] = 0.5
    rows = {r[2]: r[3] for r in ps.sample(7)}
    assert rows["cpu.util_pct"] == 20.0 and rows["cpu.core1.util_pct"] == 30.0
    assert rows["net.recv_bytes_per_s"] == 2000.0  # 1000 B in 0.5 s
    assert "disk.read_bytes_per_s" not in rows
    assert ps.unavailable == {"disk": "PermissionError: no /proc/diskstats"}
