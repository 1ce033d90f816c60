"""A stand-in for the CUDA driver's function table (``cuda_driver.DriverCalls``): devices with the
properties an H100 SXM 80GB reports (driver 580, CUDA 13), an initialisation state and primary
contexts the test sets, and a log of the calls made (to check that ``cuInit`` never is)."""

from __future__ import annotations

from dataclasses import dataclass, field

from stepscope.capture.cuda_driver import CUDA_ERROR_NOT_INITIALIZED, CUDA_SUCCESS, CudaDriver

INVALID_VALUE, INVALID_DEVICE, INVALID_CONTEXT = 1, 101, 201

H100_ATTRIBUTES = {
    1: 1024, 8: 49152, 10: 32, 12: 65536, 13: 1_980_000, 16: 132, 36: 2_619_000, 37: 5120,
    38: 52_428_800, 39: 2048, 75: 9, 76: 0, 81: 233_472, 82: 65536, 97: 232_448, 106: 32,
}
H100_NAME = "NVIDIA H100 80GB HBM3"
H100_MEMORY = 85_017_493_504
ERROR_NAMES = {0: "CUDA_SUCCESS", 3: "CUDA_ERROR_NOT_INITIALIZED", 34: "CUDA_ERROR_STUB_LIBRARY",
               100: "CUDA_ERROR_NO_DEVICE", 803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"}


@dataclass
class FakeCuda:
    devices: int = 1
    initialized: bool = True
    init_result: int = CUDA_SUCCESS  # what cuInit answers
    active: set[int] = field(default_factory=set)  # ordinals with an active primary context
    current: int | None = None  # the device of this thread's current context
    attributes: dict[int, int] = field(default_factory=lambda: dict(H100_ATTRIBUTES))
    missing: set[int] = field(default_factory=set)  # attributes this driver does not report
    log: list[str] = field(default_factory=list)

    def driver(self) -> CudaDriver:
        return CudaDriver(self)

    def init(self) -> int:
        self.log.append("cuInit")
        if self.init_result == CUDA_SUCCESS:
            self.initialized = True
        return self.init_result

    def device_count(self) -> tuple[int, int]:
        self.log.append("cuDeviceGetCount")
        return (CUDA_SUCCESS, self.devices) if self.initialized else (CUDA_ERROR_NOT_INITIALIZED, 0)

    def device_get(self, ordinal: int) -> tuple[int, int]:
        if not self.initialized:
            return CUDA_ERROR_NOT_INITIALIZED, 0
        return (CUDA_SUCCESS, ordinal) if 0 <= ordinal < self.devices else (INVALID_DEVICE, 0)

    def attribute(self, attr: int, dev: int) -> tuple[int, int]:
        if attr in self.missing or attr not in self.attributes:
            return INVALID_VALUE, 0
        return CUDA_SUCCESS, self.attributes[attr]

    def name(self, dev: int) -> tuple[int, str]:
        return CUDA_SUCCESS, H100_NAME

    def total_mem(self, dev: int) -> tuple[int, int]:
        return CUDA_SUCCESS, H100_MEMORY

    def uuid(self, dev: int) -> tuple[int, bytes]:
        return CUDA_SUCCESS, bytes([0x8F, 0x3A, 0x11, 0x02, 0xAB, 0xCD, 0x12, 0x34,
                                    0x56, 0x78, 0x9A, 0xBC, 0xDE, 0xF0, 0x00, dev])

    def pci_bus_id(self, dev: int) -> tuple[int, str]:
        return CUDA_SUCCESS, f"0000:{0x18 + dev:02X}:00.0"

    def primary_ctx_active(self, dev: int) -> tuple[int, bool]:
        self.log.append("cuDevicePrimaryCtxGetState")
        return CUDA_SUCCESS, dev in self.active

    def ctx_device(self) -> tuple[int, int]:
        return (CUDA_SUCCESS, self.current) if self.current is not None else (INVALID_CONTEXT, 0)

    def error_name(self, rc: int) -> str | None:
        return ERROR_NAMES.get(rc)
