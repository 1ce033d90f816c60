"""The CUDA driver (``libcuda.so.1``) through ctypes, asked without changing what the program does.

- ``gpu_in_use()``: has the program started using a GPU? True when libcuda is already in this
  process (opened with ``RTLD_NOLOAD``: never loaded here), the program has initialised it (``cuInit``
  is never called here: ``cuDeviceGetCount`` answering ``CUDA_ERROR_NOT_INITIALIZED`` means "not
  yet") and some device's primary context is active (``cuDevicePrimaryCtxGetState``: the context
  the runtime API makes on first use, which PyTorch, JAX, CuPy, Triton and Numba all use). A few
  driver calls per device, nothing on the GPU: cheap enough to poll several times a second. Keep
  the ``CudaDriver`` that ``attach()`` returns and pass it in; without one, each call attaches.
- ``CudaDriver.properties(ordinal)``: the limits, sizes and clocks of a device
  (``cuDeviceGetAttribute`` and friends), for the ``devices`` table (``capture.devices``).
- ``no_gpu_reason()``: why there is no usable GPU, in one line for the user; None when there is
  one. It may load libcuda (where CUDA is not initialised yet it asks ``cuInit`` in a child
  process, so that the profiled process is never initialised by stepscope).

The numbers (attributes, error codes) are those of the CUDA driver API header ``cuda.h``
(``CUdevice_attribute``, ``cudaError_enum``; checked against CUDA 13.0's). The driver functions
go through ``DriverCalls``, a small table that tests replace with a fake.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import Protocol

from stepscope.store.produce.devices import DeviceProperties

LIBCUDA = "libcuda.so.1"

# cudaError_enum (cuda.h)
CUDA_SUCCESS = 0
CUDA_ERROR_NOT_INITIALIZED = 3
CUDA_ERROR_DEINITIALIZED = 4
CUDA_ERROR_STUB_LIBRARY = 34
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803
CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 804

# CUdevice_attribute (cuda.h): (DeviceProperties field, attribute)
ATTRIBUTES: tuple[tuple[str, int], ...] = (
    ("max_threads_per_block", 1),  # CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK
    ("smem_per_block", 8),  # CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK (bytes)
    ("warp_size", 10),  # CU_DEVICE_ATTRIBUTE_WARP_SIZE
    ("regs_per_block", 12),  # CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK
    ("clock_khz", 13),  # CU_DEVICE_ATTRIBUTE_CLOCK_RATE (kHz)
    ("sm_count", 16),  # CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
    ("memory_clock_khz", 36),  # CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE (peak, kHz)
    ("bus_width_bits", 37),  # CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH
    ("l2_bytes", 38),  # CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE
    ("max_threads_per_sm", 39),  # CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR
    ("compute_major", 75),  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
    ("compute_minor", 76),  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
    ("smem_per_sm", 81),  # CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
    ("regs_per_sm", 82),  # CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR
    ("smem_per_block_optin", 97),  # CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
    ("max_blocks_per_sm", 106),  # CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR
)
# a value of 0 means "not reported" for these (a compute capability of 0 is never real either,
# but its minor can be 0)
_ZERO_IS_UNKNOWN = frozenset(f for f, _ in ATTRIBUTES if f not in ("compute_minor",))

NO_DRIVER = f"no NVIDIA GPU or driver found ({LIBCUDA} could not be loaded)"


class DriverCalls(Protocol):
    """The driver functions used here, each returning its ``CUresult`` first (``LibCuda`` is the
    ctypes table; tests pass a fake)."""

    def init(self) -> int: ...  # cuInit(0)
    def device_count(self) -> tuple[int, int]: ...  # cuDeviceGetCount
    def device_get(self, ordinal: int) -> tuple[int, int]: ...  # cuDeviceGet
    def attribute(self, attr: int, dev: int) -> tuple[int, int]: ...  # cuDeviceGetAttribute
    def name(self, dev: int) -> tuple[int, str]: ...  # cuDeviceGetName
    def total_mem(self, dev: int) -> tuple[int, int]: ...  # cuDeviceTotalMem_v2
    def uuid(self, dev: int) -> tuple[int, bytes]: ...  # cuDeviceGetUuid(_v2): 16 bytes
    def pci_bus_id(self, dev: int) -> tuple[int, str]: ...  # cuDeviceGetPCIBusId
    def primary_ctx_active(self, dev: int) -> tuple[int, bool]: ...  # cuDevicePrimaryCtxGetState
    def ctx_device(self) -> tuple[int, int]: ...  # cuCtxGetDevice (this thread's context)
    def error_name(self, rc: int) -> str | None: ...  # cuGetErrorName


class LibCuda:
    """``DriverCalls`` through ctypes on a loaded libcuda."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        i, u, ip, vp = ctypes.c_int, ctypes.c_uint, ctypes.POINTER(ctypes.c_int), ctypes.c_void_p
        sigs: dict[str, list[object]] = {
            "cuInit": [u], "cuDeviceGetCount": [ip], "cuDeviceGet": [ip, i],
            "cuDeviceGetAttribute": [ip, i, i], "cuDeviceGetName": [ctypes.c_char_p, i, i],
            "cuDeviceTotalMem_v2": [ctypes.POINTER(ctypes.c_size_t), i],
            "cuDeviceGetPCIBusId": [ctypes.c_char_p, i, i],
            "cuDevicePrimaryCtxGetState": [i, ctypes.POINTER(u), ip],
            "cuCtxGetDevice": [ip], "cuGetErrorName": [i, ctypes.POINTER(ctypes.c_char_p)],
        }
        uuid = getattr(lib, "cuDeviceGetUuid_v2", None) or getattr(lib, "cuDeviceGetUuid", None)
        for name, args in sigs.items():
            fn = getattr(lib, name)  # AttributeError: a driver older than CUDA 7
            fn.argtypes, fn.restype = args, i
        if uuid is not None:
            uuid.argtypes, uuid.restype = [vp, i], i
        self._lib, self._uuid = lib, uuid

    def init(self) -> int:
        return int(self._lib.cuInit(0))

    def device_count(self) -> tuple[int, int]:
        n = ctypes.c_int(0)
        return int(self._lib.cuDeviceGetCount(ctypes.byref(n))), int(n.value)

    def device_get(self, ordinal: int) -> tuple[int, int]:
        d = ctypes.c_int(0)
        return int(self._lib.cuDeviceGet(ctypes.byref(d), ordinal)), int(d.value)

    def attribute(self, attr: int, dev: int) -> tuple[int, int]:
        v = ctypes.c_int(0)
        return int(self._lib.cuDeviceGetAttribute(ctypes.byref(v), attr, dev)), int(v.value)

    def name(self, dev: int) -> tuple[int, str]:
        buf = ctypes.create_string_buffer(256)
        rc = int(self._lib.cuDeviceGetName(buf, len(buf), dev))
        return rc, buf.value.decode("utf-8", "replace")

    def total_mem(self, dev: int) -> tuple[int, int]:
        v = ctypes.c_size_t(0)
        return int(self._lib.cuDeviceTotalMem_v2(ctypes.byref(v), dev)), int(v.value)

    def uuid(self, dev: int) -> tuple[int, bytes]:
        if self._uuid is None:
            return -1, b""
        buf = ctypes.create_string_buffer(16)  # CUuuid: char bytes[16]
        return int(self._uuid(buf, dev)), buf.raw

    def pci_bus_id(self, dev: int) -> tuple[int, str]:
        buf = ctypes.create_string_buffer(64)  # "dddd:bb:dd.f" needs 13
        rc = int(self._lib.cuDeviceGetPCIBusId(buf, len(buf), dev))
        return rc, buf.value.decode("ascii", "replace")

    def primary_ctx_active(self, dev: int) -> tuple[int, bool]:
        flags, active = ctypes.c_uint(0), ctypes.c_int(0)
        rc = int(self._lib.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active)))
        return rc, bool(active.value)

    def ctx_device(self) -> tuple[int, int]:
        d = ctypes.c_int(0)
        return int(self._lib.cuCtxGetDevice(ctypes.byref(d))), int(d.value)

    def error_name(self, rc: int) -> str | None:
        s = ctypes.c_char_p()
        if self._lib.cuGetErrorName(rc, ctypes.byref(s)) != 0 or not s.value:
            return None
        return s.value.decode("ascii", "replace")


def format_uuid(raw: bytes) -> str | None:
    """The 16 bytes as NVML and nvidia-smi print a GPU's UUID (``GPU-xxxxxxxx-xxxx-...``)."""
    if len(raw) != 16 or not any(raw):
        return None
    h = raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class CudaDriver:
    """Questions to the driver through one ``DriverCalls`` table (kept: attaching costs a
    ``dlopen``). Never calls ``cuInit`` except through ``init()``, which only ``no_gpu_reason``
    uses where it is told it may."""

    def __init__(self, calls: DriverCalls) -> None:
        self.calls = calls

    @classmethod
    def attach(cls, load: bool = False, path: str = LIBCUDA) -> CudaDriver | None:
        """The driver already in this process (``load=False``: ``RTLD_NOLOAD``, so libcuda is
        never loaded by this call), or loaded now (``load=True``). None when it is not there."""
        mode = os.RTLD_NOW | (0 if load else getattr(os, "RTLD_NOLOAD", 0))
        if not load and not hasattr(os, "RTLD_NOLOAD"):
            return None  # no way to ask without loading it
        try:
            return cls(LibCuda(ctypes.CDLL(path, mode=mode)))
        except (OSError, AttributeError):
            return None

    def error_name(self, rc: int) -> str:
        try:
            name = self.calls.error_name(rc)
        except Exception:  # noqa: BLE001 - only a name for a message
            name = None
        return name or f"CUresult {rc}"

    def initialized(self) -> bool:
        """Whether the program has initialised CUDA (``cuInit`` succeeded)."""
        return self.calls.device_count()[0] == CUDA_SUCCESS

    def active_devices(self) -> tuple[int, ...]:
        """Ordinals whose primary context is active; () before ``cuInit``."""
        rc, n = self.calls.device_count()
        if rc != CUDA_SUCCESS:
            return ()
        out = []
        for ordinal in range(n):
            rc, dev = self.calls.device_get(ordinal)
            if rc == CUDA_SUCCESS:
                rc, active = self.calls.primary_ctx_active(dev)
                if rc == CUDA_SUCCESS and active:
                    out.append(ordinal)
        return tuple(out)

    def current_device(self) -> int | None:
        """The device of the context current on the calling thread (any context, primary or
        not), if there is one."""
        rc, dev = self.calls.ctx_device()
        return dev if rc == CUDA_SUCCESS else None

    def in_use(self) -> bool:
        return bool(self.active_devices())

    def properties(self, ordinal: int) -> DeviceProperties | None:
        """The device's properties; None when the driver does not know the ordinal (or is not
        initialised). An attribute the driver does not report is None."""
        c = self.calls
        rc, dev = c.device_get(ordinal)
        if rc != CUDA_SUCCESS:
            return None
        ints: dict[str, int | None] = {}
        for field, attr in ATTRIBUTES:
            rc, v = c.attribute(attr, dev)
            ok = rc == CUDA_SUCCESS and v >= 0 and (v > 0 or field not in _ZERO_IS_UNKNOWN)
            ints[field] = v if ok else None
        rc, name = c.name(dev)
        rc_mem, mem = c.total_mem(dev)
        rc_uuid, raw = c.uuid(dev)
        rc_bus, bus = c.pci_bus_id(dev)
        g = ints.get
        return DeviceProperties(
            device=ordinal, name=name if rc == CUDA_SUCCESS and name else None,
            compute_major=g("compute_major"), compute_minor=g("compute_minor"),
            sm_count=g("sm_count"), warp_size=g("warp_size"),
            max_threads_per_block=g("max_threads_per_block"),
            max_threads_per_sm=g("max_threads_per_sm"), max_blocks_per_sm=g("max_blocks_per_sm"),
            regs_per_block=g("regs_per_block"), regs_per_sm=g("regs_per_sm"),
            smem_per_block=g("smem_per_block"), smem_per_block_optin=g("smem_per_block_optin"),
            smem_per_sm=g("smem_per_sm"), clock_khz=g("clock_khz"),
            memory_clock_khz=g("memory_clock_khz"), bus_width_bits=g("bus_width_bits"),
            l2_bytes=g("l2_bytes"),
            total_memory=mem if rc_mem == CUDA_SUCCESS and mem > 0 else None,
            uuid=format_uuid(raw) if rc_uuid == CUDA_SUCCESS else None,
            pci_bus_id=bus.lower() if rc_bus == CUDA_SUCCESS and bus else None)


def gpu_in_use(driver: CudaDriver | None = None) -> bool:
    """Whether the program has a GPU in use (module doc). Never raises, never loads libcuda,
    never initialises CUDA."""
    try:
        d = driver if driver is not None else CudaDriver.attach()
        return d is not None and d.in_use()
    except Exception:  # noqa: BLE001 - polled from a watcher: never raises
        return False


# cuInit in a child process: `python -I -S` (no site, no PYTHONPATH: stepscope's sitecustomize
# is not run, so the child is not captured); prints "<CUresult> <device count>", or "noload"
_PROBE = (
    "import ctypes\n"
    "try:\n"
    f"    lib = ctypes.CDLL({LIBCUDA!r})\n"
    "except OSError:\n"
    "    print('noload')\n"
    "else:\n"
    "    n = ctypes.c_int(0)\n"
    "    rc = lib.cuInit(0)\n"
    "    if rc == 0:\n"
    "        rc = lib.cuDeviceGetCount(ctypes.byref(n))\n"
    "    print(rc, n.value)\n"
)

Probe = Callable[[], "tuple[int, int] | None"]


def child_probe(python: str = sys.executable, environ: Mapping[str, str] | None = None,
                timeout_s: float = 60.0) -> tuple[int, int] | None:
    """``(cuInit's CUresult, device count)`` as a fresh process with this environment sees it
    (``CUDA_VISIBLE_DEVICES`` included); None when the probe could not run or say."""
    env = {k: v for k, v in (os.environ if environ is None else environ).items()
           if not k.startswith("STEPSCOPE_")}
    if not python:
        return None
    try:
        out = subprocess.run([python, "-I", "-S", "-c", _PROBE], env=env, capture_output=True,
                             text=True, timeout=timeout_s, stdin=subprocess.DEVNULL, check=False)
        parts = out.stdout.split()
        if parts == ["noload"]:
            return None
        return int(parts[0]), int(parts[1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def no_gpu_reason(driver: CudaDriver | None = None, *, init_here: bool = False,
                  probe: Probe | None = child_probe) -> str | None:
    """One line saying why there is no usable GPU; None when there is one, or when it cannot be
    told. Loads libcuda when it is not loaded (``driver`` None). Where CUDA is not initialised
    yet, ``cuInit`` runs here only with ``init_here`` (a process of stepscope's own), else in a
    child process (``probe``; None: do not ask). Never raises."""
    try:
        d = driver if driver is not None else CudaDriver.attach(load=True)
        if d is None:
            return NO_DRIVER
        rc, n = d.calls.device_count()
        where = "cuDeviceGetCount"
        if rc == CUDA_ERROR_NOT_INITIALIZED:
            where = "cuInit"
            if init_here:
                rc = d.calls.init()
                if rc == CUDA_SUCCESS:
                    rc, n = d.calls.device_count()
            else:
                got = probe() if probe is not None else None
                if got is None:
                    return None
                rc, n = got
        return describe(rc, n, d.error_name(rc), where)
    except Exception:  # noqa: BLE001 - a diagnostic: never raises
        return None


def describe(rc: int, count: int, name: str, where: str = "cuInit") -> str | None:
    """The line for a driver's answer (``rc`` of ``where``, devices found); None: a GPU is there."""
    if rc == CUDA_SUCCESS:
        return None if count > 0 else f"the NVIDIA driver found no GPU ({where}: 0 devices)"
    said = f"{where}: {name}"
    if rc == CUDA_ERROR_NO_DEVICE:
        return f"the NVIDIA driver found no GPU ({said})"
    if rc == CUDA_ERROR_STUB_LIBRARY:
        return f"no NVIDIA driver found: {LIBCUDA} is the CUDA toolkit's stub library ({said})"
    if rc == CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
        return (f"the NVIDIA driver's {LIBCUDA} and its kernel module are of different versions "
                f"({said})")
    if rc == CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
        return f"the CUDA forward-compatibility driver in use does not support this GPU ({said})"
    return f"the NVIDIA driver could not start ({said})"


__all__ = ["ATTRIBUTES", "NO_DRIVER", "CudaDriver", "DeviceProperties", "DriverCalls", "LibCuda",
           "child_probe", "describe", "gpu_in_use", "no_gpu_reason"]
