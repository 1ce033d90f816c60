"""A stand-in for ``pynvml`` (nvidia-ml-py) with two GPUs, GPM on GPU 1 only."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


class NVMLError(Exception):
    pass


class FakeNvml:
    NVML_CLOCK_SM = 1
    NVML_PCIE_UTIL_TX_BYTES = 0
    NVML_PCIE_UTIL_RX_BYTES = 1
    NVML_SUCCESS = 0
    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_GPM_METRIC_SM_UTIL = 2
    NVML_GPM_METRIC_SM_OCCUPANCY = 3
    NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
    NVML_GPM_METRIC_DRAM_BW_UTIL = 10
    NVML_GPM_METRIC_PCIE_TX_PER_SEC = 20
    NVML_GPM_METRIC_PCIE_RX_PER_SEC = 21
    NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC = 60
    NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC = 61

    def __init__(self, *, fail_init: bool = False, power_unsupported: bool = False) -> None:
        self.fail_init = fail_init
        self.power_unsupported = power_unsupported
        self.calls: list[str] = []
        self.inited = False
        self.freed = 0

    # -- lifecycle
    def nvmlInit(self) -> None:
        if self.fail_init:
            raise NVMLError("Driver Not Loaded")
        self.inited = True

    def nvmlShutdown(self) -> None:
        self.inited = False

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> Any:
        return SimpleNamespace(index=i)

    def nvmlDeviceGetName(self, h: Any) -> bytes:
        return f"Fake GPU {h.index}".encode()

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        return f"GPU-0000000{h.index}-aaaa"

    def nvmlDeviceGetNumaNodeId(self, h: Any) -> int:
        if h.index == 0:
            raise NVMLError("Not Supported")  # GPU 0: sysfs fallback
        return 1

    def nvmlDeviceGetPciInfo(self, h: Any) -> Any:
        return SimpleNamespace(busId=f"00000000:1{h.index}:00.0".encode())

    # -- metrics
    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:
        return SimpleNamespace(gpu=90 + h.index, memory=40)

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:
        return SimpleNamespace(used=1 << 30, total=80 << 30, free=79 << 30)

    def nvmlDeviceGetClockInfo(self, h: Any, kind: int) -> int:
        assert kind == self.NVML_CLOCK_SM
        return 1980

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:
        if self.power_unsupported:
            raise NVMLError("Not Supported")
        return 350_000  # mW

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Any) -> int:
        return 0x4

    def nvmlDeviceGetPcieThroughput(self, h: Any, counter: int) -> int:
        self.calls.append(f"pcie{counter}")
        return 1000 if counter == 0 else 2000  # KB/s

    # -- GPM
    def nvmlGpmQueryDeviceSupport(self, h: Any) -> Any:
        return SimpleNamespace(isSupportedDevice=int(h.index == 1))

    def nvmlGpmSampleAlloc(self) -> Any:
        return SimpleNamespace(taken=0)

    def nvmlGpmSampleFree(self, s: Any) -> None:
        self.freed += 1

    def nvmlGpmSampleGet(self, h: Any, s: Any) -> Any:
        s.taken += 1
        return s

    class c_nvmlGpmMetricsGet_t:  # pynvml's name
        def __init__(self) -> None:
            self.version = 0
            self.numMetrics = 0
            self.sample1: Any = None
            self.sample2: Any = None
            self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(477)]

    def nvmlGpmMetricsGet(self, req: Any) -> Any:
        assert req.version == 1 and req.sample1 is not req.sample2
        values = {2: 37.5, 3: 20.0, 5: 12.5, 10: 55.0, 20: 1.0, 21: 2.0}  # no NVLink: error 3
        for m in req.metrics[: req.numMetrics]:
            if m.metricId in values:
                m.value, m.nvmlReturn = values[m.metricId], 0
            else:
                m.nvmlReturn = 3
        return req
