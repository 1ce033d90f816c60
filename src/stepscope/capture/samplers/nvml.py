"""Per-GPU metrics through NVML (``pynvml``, from nvidia-ml-py).

=============================  =======  =====================================================
``gpu.util_pct``               %        share of time *a* kernel was running (not SM use)
``gpu.mem_util_pct``           %        share of time device memory was read/written
``gpu.memory_used_bytes``      B
``gpu.sm_clock_mhz``           MHz
``gpu.power_w``                W
``gpu.throttle_reasons``       bitmask  ``nvmlClocksEventReasons`` bits, as a float
``gpu.pcie_tx_bytes_per_s``    B/s      GPM when supported (``gpm``), else
``gpu.pcie_rx_bytes_per_s``    B/s      ``nvmlDeviceGetPcieThroughput`` (a 20 ms blocking call:
                                        then at most once a second)
``gpu.gpm.*``, ``gpu.nvlink*`` …        GPM only: see ``capture.samplers.gpm``
=============================  =======  =====================================================

The GPUs are the ones the process sees, numbered as it sees them: ``CUDA_VISIBLE_DEVICES``
(indices or UUID prefixes) is applied to NVML's list.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from stepscope.capture.samplers import Row
from stepscope.capture.samplers.gpm import GpmSampler
from stepscope.capture.samplers.numa import pci_numa_node

PCIE_FALLBACK_INTERVAL_S = 1.0


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


def _safe(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:
        return None


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
        self.unavailable: dict[str, str] = {}  # "gpu<i>.<metric>" or "gpu<i>.gpm" -> reason
        self._gpm = GpmSampler(nvml, unavailable=self.unavailable, monotonic=monotonic)
        self._off: set[tuple[int, str]] = set()
        self._pcie_t: dict[int, float] = {}
        self._inited = False

    @property
    def gpm(self) -> dict[int, bool]:
        """GPU index -> whether GPM metrics are sampled."""
        return self._gpm.supported

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
            self.names[idx] = _safe(lambda: _text(self._nvml.nvmlDeviceGetName(h))) or ""
            self.numa_nodes[idx] = self._numa_node(h)
            self._gpm.open(idx, h)
        return None

    def _match(self, item: str, handles: list[Any]) -> Any:
        if item.isdigit():
            i = int(item)
            return handles[i] if i < len(handles) else None
        if item.startswith("GPU-"):
            for h in handles:
                uuid = _safe(lambda: _text(self._nvml.nvmlDeviceGetUUID(h)))
                if uuid and uuid.startswith(item):
                    return h
        return None  # MIG instances: not mapped to a parent GPU here

    def _numa_node(self, h: Any) -> int | None:
        """The NUMA node of the GPU's PCIe root (sysfs), as the devices table has it
        (capture.topology); NVML's nvmlDeviceGetNumaNodeId only when sysfs has none: where GPU
        memory is a NUMA node of its own (GH200-class machines) that call names the GPU
        memory's node, not the CPUs near the GPU."""
        nv = self._nvml
        bus = _safe(lambda: _text(nv.nvmlDeviceGetPciInfo(h).busId))
        node = pci_numa_node(bus, self._sys_root) if bus else None
        if node is None and hasattr(nv, "nvmlDeviceGetNumaNodeId"):
            got = _safe(lambda: int(nv.nvmlDeviceGetNumaNodeId(h)))
            node = got if got is not None and got >= 0 else None
        return node

    def close(self) -> None:
        self._gpm.close()
        if self._inited:
            _safe(self._nvml.nvmlShutdown)
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
            rows.extend(self._gpm.sample(ts, idx, h))
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
