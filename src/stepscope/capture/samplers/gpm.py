"""GPU Performance Monitoring (GPM) metrics through NVML (Hopper and newer GPUs).

=============================  =======  =====================================================
``gpu.gpm.sm_active_pct``      %        GPM SM_UTIL: share of SMs busy
``gpu.gpm.sm_occupancy_pct``   %        GPM SM_OCCUPANCY: resident warps / max
``gpu.gpm.tensor_active_pct``  %        GPM ANY_TENSOR_UTIL
``gpu.gpm.dram_bw_pct``        %        GPM DRAM_BW_UTIL: DRAM bandwidth / peak
``gpu.pcie_tx_bytes_per_s``    B/s      GPM PCIE_TX_PER_SEC (``nvml`` falls back to
``gpu.pcie_rx_bytes_per_s``    B/s      ``nvmlDeviceGetPcieThroughput`` without GPM)
``gpu.nvlink_tx_bytes_per_s``  B/s      GPM only
``gpu.nvlink_rx_bytes_per_s``  B/s      GPM only
=============================  =======  =====================================================

A metric is the difference of two GPM samples at least 0.1 s apart (NVML's requirement), so GPM
rows may come at a lower rate than ``sample_hz`` when ticks jitter below 0.1 s. Each GPU has two
sample buffers that swap roles: the newest sample is the start of the next interval.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from stepscope.capture.samplers import Row

GPM_MIN_INTERVAL_S = 0.1
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


class GpmSampler:
    """GPM metrics of the GPUs that have it. Why a GPU or metric has none goes into
    ``unavailable`` (the NVML sampler's, shared), keyed ``gpu<i>.gpm`` / ``gpu<i>.<metric>``."""

    def __init__(self, nvml: Any, *, unavailable: dict[str, str],
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._nvml = nvml
        self._mono = monotonic
        self.unavailable = unavailable
        self.supported: dict[int, bool] = {}  # process-visible GPU index -> GPM works
        self._state: dict[int, tuple[Any, Any, float]] = {}  # idx -> (prev, spare, t)

    def open(self, idx: int, h: Any) -> None:
        """Check support and take the first sample of GPU ``idx``."""
        nv = self._nvml
        try:
            support = nv.nvmlGpmQueryDeviceSupport(h)
            if not support.isSupportedDevice:
                self.supported[idx] = False
                self.unavailable[f"gpu{idx}.gpm"] = "GPM not supported by this GPU (Hopper and newer)"
                return
            a, b = nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()
            nv.nvmlGpmSampleGet(h, a)
            self._state[idx] = (a, b, self._mono())
            self.supported[idx] = True
        except Exception as e:
            self.supported[idx] = False
            self.unavailable[f"gpu{idx}.gpm"] = f"GPM not available: {type(e).__name__}: {e}"

    def close(self) -> None:
        """Free the GPM samples (before ``nvmlShutdown``)."""
        for a, b, _ in self._state.values():
            for sample in (a, b):
                try:
                    self._nvml.nvmlGpmSampleFree(sample)
                except Exception:
                    pass
        self._state.clear()

    def sample(self, ts: int, idx: int, h: Any) -> list[Row]:
        """The metrics over the interval since the last sample; none before 0.1 s have passed."""
        nv = self._nvml
        prev, spare, t0 = self._state[idx]
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
            self.supported[idx] = False
            self.unavailable[f"gpu{idx}.gpm"] = f"GPM sampling failed: {type(e).__name__}: {e}"
            return []
        self._state[idx] = (spare, prev, now)  # the new sample is the next interval's start
        ok = getattr(nv, "NVML_SUCCESS", 0)
        rows: list[Row] = []
        for i, (_c, _f, metric, unit, scale) in enumerate(_GPM_METRICS):
            m = req.metrics[i]
            if m.nvmlReturn == ok:
                rows.append((ts, idx, metric, float(m.value) * scale, unit))
            else:
                self.unavailable.setdefault(f"gpu{idx}.{metric}", f"GPM returned {m.nvmlReturn}")
        return rows
