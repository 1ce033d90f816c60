"""Periodic metric samplers of the host capture: psutil (system + process) and NVML (GPUs).

Each sampler turns one tick into rows ``(ts_ns, device, metric, value, unit)`` for the ``samples``
table (``rank`` is added when the buffer is drained). Samplers never raise out of ``sample()``:
a metric that fails is switched off (for that GPU) and the reason is kept in ``unavailable``,
which ``HostCapture.settings_for_manifest()`` reports.

Metric names (``device`` is null except for ``gpu.*``, where it is the GPU index as the process
sees it, i.e. after ``CUDA_VISIBLE_DEVICES``):

=============================  =======  =====================================================
``cpu.util_pct``               %        system-wide CPU busy, mean over logical CPUs
``cpu.core<N>.util_pct``       %        logical CPU N busy
``process.cpu_pct``            %        this process, % of one core (can exceed 100)
``process.rss_bytes``          B        this process's resident set
``dataloader.workers_cpu_pct`` %        DataLoader worker processes, summed, % of one core
``dataloader.workers``         count    live DataLoader worker processes
``disk.read_bytes_per_s``      B/s      system-wide (``psutil.disk_io_counters``)
``disk.write_bytes_per_s``     B/s
``net.recv_bytes_per_s``       B/s      system-wide (``psutil.net_io_counters``)
``net.sent_bytes_per_s``       B/s
``gpu.util_pct``               %        NVML: share of time *a* kernel was running (not SM use)
``gpu.mem_util_pct``           %        NVML: share of time device memory was read/written
``gpu.memory_used_bytes``      B
``gpu.sm_clock_mhz``           MHz
``gpu.power_w``                W
``gpu.throttle_reasons``       bitmask  ``nvmlClocksEventReasons`` bits, as a float
``gpu.pcie_tx_bytes_per_s``    B/s      GPM when supported, else ``nvmlDeviceGetPcieThroughput``
``gpu.pcie_rx_bytes_per_s``    B/s      (a 20 ms blocking call: then at most once a second)
``gpu.nvlink_tx_bytes_per_s``  B/s      GPM only
``gpu.nvlink_rx_bytes_per_s``  B/s      GPM only
``gpu.gpm.sm_active_pct``      %        GPM SM_UTIL: share of SMs busy
``gpu.gpm.sm_occupancy_pct``   %        GPM SM_OCCUPANCY: resident warps / max
``gpu.gpm.tensor_active_pct``  %        GPM ANY_TENSOR_UTIL
``gpu.gpm.dram_bw_pct``        %        GPM DRAM_BW_UTIL: DRAM bandwidth / peak
=============================  =======  =====================================================

GPM metrics come from two GPM samples at least 0.1 s apart (NVML's requirement), so they may
appear at a lower rate than ``sample_hz`` when ticks jitter below 0.1 s.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

Row = tuple[int, int | None, str, float, str]  # ts_ns, device, metric, value, unit

GPM_MIN_INTERVAL_S = 0.1
PCIE_FALLBACK_INTERVAL_S = 1.0
MIB = 1024 * 1024
# NVML metric ids (pynvml constant name, fallback id, stepscope metric, unit, scale)
_GPM_METRICS: tuple[tuple[str, int, str, str, float], ...] = (
    ("NVML_GPM_METRIC_SM_UTIL", 2, "gpu.gpm.sm_active_pct", "%", 1.0),
    ("NVML_GPM_METRIC_SM_OCCUPANCY", 3, "gpu.gpm.sm_occupancy_pct", "%", 1.0),
    ("NVML_GPM_METRIC_ANY_TENSOR_UTIL", 5, "gpu.gpm.tensor_active_pct", "%", 1.0),
    ("NVML_GPM_METRIC_DRAM_BW_UTIL", 10, "gpu.gpm.dram_bw_pct", "%", 1.0),
    ("NVML_GPM_METRIC_PCIE_TX_PER_SEC", 20, "gpu.pcie_tx_bytes_per_s", "B/s", MIB),
    ("NVML_GPM_METRIC_PCIE_RX_PER_SEC", 21, "gpu.pcie_rx_bytes_per_s", "B/s", MIB),
    ("NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", 61, "gpu.nvlink_tx_bytes_per_s", "B/s", MIB),
    ("NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", 60, "gpu.nvlink_rx_bytes_per_s", "B/s", MIB),
)


def _rate(new: float, old: float, dt: float) -> float:
    return max(0.0, (new - old) / dt) if dt > 0 else 0.0


class PsutilSampler:
    """System and process metrics through psutil (cheap /proc reads, < 1 ms a tick)."""

    def __init__(
        self,
        psutil_module: Any,
        *,
        worker_pids: Callable[[], frozenset[int] | None],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ps = psutil_module
        self._proc = psutil_module.Process(os.getpid())
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
                self._children = frozenset(c.pid for c in self._proc.children(recursive=False))
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


def parse_visible_devices(value: str | None) -> list[str] | None:
    """``CUDA_VISIBLE_DEVICES`` as CUDA reads it: entries up to the first invalid one.

    None: unset (all GPUs, NVML order). Entries are indices (``"2"``) or UUID prefixes
    (``"GPU-8f..."``); ``MIG-`` entries are kept as they are.
    """
    if value is None:
        return None
    out: list[str] = []
    for raw in value.split(","):
        item = raw.strip()
        if item.isdigit() or item.startswith(("GPU-", "MIG-")):
            out.append(item)
        else:
            break
    return out


def _clock_event_reasons(nv: Any, h: Any) -> Any:
    fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if fn is None:  # nvidia-ml-py < 12.535
        fn = nv.nvmlDeviceGetCurrentClocksThrottleReasons
    return fn(h)


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class NvmlSampler:
    """Per-GPU metrics through ``pynvml`` (nvidia-ml-py). ``open()`` returns why it cannot run."""

    def __init__(self, nvml: Any, *, env: Mapping[str, str], sys_root: str = "/",
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._nvml = nvml
        self._env = env
        self._sys_root = sys_root
        self._mono = monotonic
        self.handles: list[tuple[int, Any]] = []  # (process-visible index, handle)
        self.numa_nodes: dict[int, int | None] = {}
        self.names: dict[int, str] = {}
        self.unavailable: dict[str, str] = {}  # "gpu<i>.<metric>" or "gpm" -> reason
        self.gpm: dict[int, bool] = {}
        self._gpm_state: dict[int, tuple[Any, Any, float]] = {}  # idx -> (prev, spare, t)
        self._off: set[tuple[int, str]] = set()
        self._pcie_t: dict[int, float] = {}
        self._inited = False

    def open(self) -> str | None:
        nv = self._nvml
        try:
            nv.nvmlInit()
            self._inited = True
            count = int(nv.nvmlDeviceGetCount())
            all_handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as e:
            return f"NVML not available: {type(e).__name__}: {e}"
        visible = parse_visible_devices(self._env.get("CUDA_VISIBLE_DEVICES"))
        if visible is None:
            self.handles = list(enumerate(all_handles))
        else:
            for idx, item in enumerate(visible):
                h = self._match(item, all_handles)
                if h is None:
                    self.unavailable[f"gpu{idx}"] = f"CUDA_VISIBLE_DEVICES entry {item!r} not found by NVML"
                else:
                    self.handles.append((idx, h))
        if not self.handles:
            return "NVML sees no GPU visible to this process"
        for idx, h in self.handles:
            self._describe(idx, h)
        return None

    def _describe(self, idx: int, h: Any) -> None:
        self.names[idx] = self._safe(lambda: _text(self._nvml.nvmlDeviceGetName(h))) or ""
        self.numa_nodes[idx] = self._numa_node(h)
        self._open_gpm(idx, h)

    @staticmethod
    def _safe(fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception:
            return None

    def _match(self, item: str, handles: list[Any]) -> Any:
        if item.isdigit():
            i = int(item)
            return handles[i] if i < len(handles) else None
        if item.startswith("GPU-"):
            for h in handles:
                uuid = self._uuid(h)
                if uuid and uuid.startswith(item):
                    return h
        return None  # MIG instances: not mapped to a parent GPU here

    def _uuid(self, h: Any) -> str | None:
        uuid: str | None = self._safe(lambda: _text(self._nvml.nvmlDeviceGetUUID(h)))
        return uuid

    def _numa_node(self, h: Any) -> int | None:
        nv = self._nvml
        if hasattr(nv, "nvmlDeviceGetNumaNodeId"):
            node = self._safe(lambda: int(nv.nvmlDeviceGetNumaNodeId(h)))
            if node is not None and node >= 0:
                return int(node)
        bus = self._safe(lambda: _text(nv.nvmlDeviceGetPciInfo(h).busId))
        if not bus:
            return None
        bus = bus.lower()[-12:]  # "00000000:1A:00.0" -> "0000:1a:00.0" as sysfs names it
        path = os.path.join(self._sys_root, "sys", "bus", "pci", "devices", bus, "numa_node")
        try:
            with open(path) as f:
                node = int(f.read().strip())
        except (OSError, ValueError):
            return None
        return node if node >= 0 else None

    def _open_gpm(self, idx: int, h: Any) -> None:
        nv = self._nvml
        try:
            support = nv.nvmlGpmQueryDeviceSupport(h)
            if not support.isSupportedDevice:
                self.gpm[idx] = False
                self.unavailable[f"gpu{idx}.gpm"] = "GPM not supported by this GPU (Hopper and newer)"
                return
            a, b = nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()
            nv.nvmlGpmSampleGet(h, a)
            self._gpm_state[idx] = (a, b, self._mono())
            self.gpm[idx] = True
        except Exception as e:
            self.gpm[idx] = False
            self.unavailable[f"gpu{idx}.gpm"] = f"GPM not available: {type(e).__name__}: {e}"

    def close(self) -> None:
        nv = self._nvml
        for a, b, _ in self._gpm_state.values():
            for sample in (a, b):
                self._safe(functools.partial(nv.nvmlGpmSampleFree, sample))
        self._gpm_state.clear()
        if self._inited:
            self._safe(nv.nvmlShutdown)
            self._inited = False

    def _get(self, idx: int, metric: str, fn: Callable[[], Any]) -> Any:
        if (idx, metric) in self._off:
            return None
        try:
            return fn()
        except Exception as e:  # NOT_SUPPORTED on this GPU, no permission, ...: stop asking
            self._off.add((idx, metric))
            self.unavailable[f"gpu{idx}.{metric}"] = f"{type(e).__name__}: {e}"
            return None

    def sample(self, ts: int) -> list[Row]:
        rows: list[Row] = []
        for idx, h in self.handles:
            rows.extend(self._sample_gpu(ts, idx, h))
        return rows

    def _sample_gpu(self, ts: int, idx: int, h: Any) -> list[Row]:
        nv = self._nvml
        rows: list[Row] = []
        util = self._get(idx, "gpu.util_pct", lambda: nv.nvmlDeviceGetUtilizationRates(h))
        if util is not None:
            rows.append((ts, idx, "gpu.util_pct", float(util.gpu), "%"))
            rows.append((ts, idx, "gpu.mem_util_pct", float(util.memory), "%"))
        mem = self._get(idx, "gpu.memory_used_bytes", lambda: nv.nvmlDeviceGetMemoryInfo(h))
        if mem is not None:
            rows.append((ts, idx, "gpu.memory_used_bytes", float(mem.used), "B"))
        clk = self._get(idx, "gpu.sm_clock_mhz",
                        lambda: nv.nvmlDeviceGetClockInfo(h, getattr(nv, "NVML_CLOCK_SM", 1)))
        if clk is not None:
            rows.append((ts, idx, "gpu.sm_clock_mhz", float(clk), "MHz"))
        mw = self._get(idx, "gpu.power_w", lambda: nv.nvmlDeviceGetPowerUsage(h))
        if mw is not None:
            rows.append((ts, idx, "gpu.power_w", float(mw) / 1000.0, "W"))
        bits = self._get(idx, "gpu.throttle_reasons", lambda: _clock_event_reasons(nv, h))
        if bits is not None:
            rows.append((ts, idx, "gpu.throttle_reasons", float(bits), "bitmask"))
        if self.gpm.get(idx):
            rows.extend(self._sample_gpm(ts, idx, h))
        else:
            rows.extend(self._sample_pcie(ts, idx, h))
        return rows

    def _sample_pcie(self, ts: int, idx: int, h: Any) -> list[Row]:
        now = self._mono()
        if now - self._pcie_t.get(idx, -1e9) < PCIE_FALLBACK_INTERVAL_S:
            return []
        self._pcie_t[idx] = now
        nv = self._nvml
        rows: list[Row] = []
        tx = getattr(nv, "NVML_PCIE_UTIL_TX_BYTES", 0)
        rx = getattr(nv, "NVML_PCIE_UTIL_RX_BYTES", 1)
        for metric, kb in (
            ("gpu.pcie_tx_bytes_per_s",
             self._get(idx, "gpu.pcie_tx_bytes_per_s", lambda: nv.nvmlDeviceGetPcieThroughput(h, tx))),
            ("gpu.pcie_rx_bytes_per_s",
             self._get(idx, "gpu.pcie_rx_bytes_per_s", lambda: nv.nvmlDeviceGetPcieThroughput(h, rx))),
        ):
            if kb is not None:  # KB/s over a 20 ms window
                rows.append((ts, idx, metric, float(kb) * 1024.0, "B/s"))
        return rows

    def _sample_gpm(self, ts: int, idx: int, h: Any) -> list[Row]:
        nv = self._nvml
        prev, spare, t0 = self._gpm_state[idx]
        now = self._mono()
        if now - t0 < GPM_MIN_INTERVAL_S:
            return []
        try:
            nv.nvmlGpmSampleGet(h, spare)
            req = nv.c_nvmlGpmMetricsGet_t()
            req.version = getattr(nv, "NVML_GPM_METRICS_GET_VERSION", 1)
            req.numMetrics = len(_GPM_METRICS)
            req.sample1 = prev
            req.sample2 = spare
            for i, (const, fallback, *_rest) in enumerate(_GPM_METRICS):
                req.metrics[i].metricId = getattr(nv, const, fallback)
            nv.nvmlGpmMetricsGet(req)
        except Exception as e:
            self.gpm[idx] = False
            self.unavailable[f"gpu{idx}.gpm"] = f"GPM sampling failed: {type(e).__name__}: {e}"
            return []
        self._gpm_state[idx] = (spare, prev, now)  # the new sample is the next interval's start
        ok = getattr(nv, "NVML_SUCCESS", 0)
        rows: list[Row] = []
        for i, (_c, _f, metric, unit, scale) in enumerate(_GPM_METRICS):
            m = req.metrics[i]
            if m.nvmlReturn == ok:
                rows.append((ts, idx, metric, float(m.value) * scale, unit))
            else:
                self.unavailable.setdefault(f"gpu{idx}.{metric}", f"GPM returned {m.nvmlReturn}")
        return rows


def parse_cpulist(text: str) -> list[int]:
    """``"0-3,8,10-11"`` (sysfs cpulist) -> ``[0, 1, 2, 3, 8, 10, 11]``."""
    out: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def numa_node_cpus(node: int, sys_root: str = "/") -> list[int] | None:
    path = os.path.join(sys_root, "sys", "devices", "system", "node", f"node{node}", "cpulist")
    try:
        with open(path) as f:
            return parse_cpulist(f.read())
    except (OSError, ValueError):
        return None
