"""The CUDA driver through its function table: whether the program has a GPU in use (never
initialising CUDA), the devices' properties, and why there is no usable GPU."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import stat
from pathlib import Path

import pytest
from tests.capture.fake_cuda import H100_MEMORY, FakeCuda

from stepscope.capture import cuda_driver as cd
from stepscope.capture.cuda_driver import CudaDriver, gpu_in_use, no_gpu_reason


def libcuda_loadable() -> bool:
    try:
        ctypes.CDLL(cd.LIBCUDA)
    except OSError:
        return False
    return True


def test_no_gpu_in_use_before_the_program_initialises_cuda_and_none_is_initialised_here() -> None:
    fake = FakeCuda(devices=2, initialized=False)
    assert not gpu_in_use(fake.driver())
    assert "cuInit" not in fake.log
    fake.initialized = True  # the program called cuInit (torch.cuda.is_available() does)
    assert not gpu_in_use(fake.driver())  # ... but made no context yet
    fake.active = {1}
    assert gpu_in_use(fake.driver())
    assert "cuInit" not in fake.log


def test_gpu_in_use_never_raises() -> None:
    class Broken(FakeCuda):
        def device_count(self) -> tuple[int, int]:
            raise OSError("driver gone")

    assert gpu_in_use(Broken().driver()) is False


def test_properties_are_the_drivers_attributes() -> None:
    p = FakeCuda(devices=2).driver().properties(1)
    assert p == cd.DeviceProperties(
        device=1, name="NVIDIA H100 80GB HBM3", compute_major=9, compute_minor=0, sm_count=132,
        warp_size=32, max_threads_per_block=1024, max_threads_per_sm=2048, max_blocks_per_sm=32,
        regs_per_block=65536, regs_per_sm=65536, smem_per_block=49152,
        smem_per_block_optin=232448, smem_per_sm=233472, total_memory=H100_MEMORY,
        clock_khz=1_980_000, memory_clock_khz=2_619_000, bus_width_bits=5120,
        l2_bytes=52_428_800, uuid="GPU-8f3a1102-abcd-1234-5678-9abcdef00001",
        pci_bus_id="0000:19:00.0")
    # 2 transfers a clock x 2.619e9 clocks/s x 5120/8 bytes = 3352.32e9 B/s (H100 SXM: 3.35 TB/s)
    assert p.memory_bandwidth_gbs == pytest.approx(3352.32)
    assert FakeCuda(devices=2).driver().properties(2) is None  # no such ordinal


def test_an_attribute_the_driver_does_not_report_is_null() -> None:
    fake = FakeCuda(missing={36})  # CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE
    fake.attributes[106] = 0  # a 0 limit is "not reported", never a limit of 0
    p = fake.driver().properties(0)
    assert p is not None
    assert p.memory_clock_khz is None and p.memory_bandwidth_gbs is None
    assert p.max_blocks_per_sm is None and p.compute_minor == 0 and p.bus_width_bits == 5120


def test_the_active_devices_and_this_threads_context() -> None:
    fake = FakeCuda(devices=4, active={0, 2})
    d = fake.driver()
    assert d.active_devices() == (0, 2) and d.current_device() is None
    fake.current = 3
    assert d.current_device() == 3
    fake.initialized = False
    assert d.active_devices() == ()


@pytest.mark.skipif(libcuda_loadable(), reason="this machine has a CUDA driver")
def test_on_a_machine_without_a_driver() -> None:
    """This machine (and CI): no libcuda. Nothing is in use; the reason says so."""
    assert CudaDriver.attach() is None and CudaDriver.attach(load=True) is None
    assert gpu_in_use() is False
    assert no_gpu_reason() == "no NVIDIA GPU or driver found (libcuda.so.1 could not be loaded)"
    assert cd.child_probe() is None  # the child cannot load it either


def test_attach_never_loads_a_library() -> None:
    """``RTLD_NOLOAD``: a library that is not in the process stays out of it."""
    name = next((n for n in ("bz2", "lzma", "ffi", "uuid", "sqlite3")
                 if (found := ctypes.util.find_library(n)) and not _mapped(found)), None)
    if name is None:
        pytest.skip("no unloaded system library to try")
    path = ctypes.util.find_library(name)
    assert path is not None
    assert CudaDriver.attach(path=path) is None  # not loaded: not attached (and not loaded)
    assert not _mapped(path)


def _mapped(soname: str) -> bool:
    return soname in Path("/proc/self/maps").read_text()


def test_no_gpu_reasons() -> None:
    assert no_gpu_reason(FakeCuda(devices=1).driver()) is None  # a GPU: no reason
    assert no_gpu_reason(FakeCuda(devices=0).driver()) == (
        "the NVIDIA driver found no GPU (cuDeviceGetCount: 0 devices)")
    stub = FakeCuda(initialized=False, init_result=34)
    assert no_gpu_reason(stub.driver(), init_here=True) == (
        "no NVIDIA driver found: libcuda.so.1 is the CUDA toolkit's stub library "
        "(cuInit: CUDA_ERROR_STUB_LIBRARY)")
    assert "cuInit" in stub.log
    assert no_gpu_reason(FakeCuda(initialized=False, init_result=999).driver(), init_here=True) \
        == "the NVIDIA driver could not start (cuInit: CUresult 999)"


def test_without_cuda_initialised_cuinit_runs_in_a_child_not_here() -> None:
    fake = FakeCuda(initialized=False)
    asked: list[int] = []

    def probe() -> tuple[int, int]:
        asked.append(1)
        return 100, 0  # CUDA_ERROR_NO_DEVICE

    assert no_gpu_reason(fake.driver(), probe=probe) == (
        "the NVIDIA driver found no GPU (cuInit: CUDA_ERROR_NO_DEVICE)")
    assert asked == [1] and "cuInit" not in fake.log
    assert no_gpu_reason(fake.driver(), probe=lambda: (0, 2)) is None
    assert no_gpu_reason(fake.driver(), probe=None) is None  # cannot tell without cuInit


def test_the_child_probe_is_a_clean_interpreter(tmp_path: Path) -> None:
    """The probe runs ``python -I -S`` without stepscope's variables (so it is not captured), and
    reads its one line."""
    fake_python = tmp_path / "python"
    fake_python.write_text('#!/bin/sh\n[ "$1 $2" = "-I -S" ] || exit 1\n'
                           'echo "100 ${STEPSCOPE_CAPTURE:-0}"\n')
    fake_python.chmod(fake_python.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "STEPSCOPE_CAPTURE": "{}", "CUDA_VISIBLE_DEVICES": ""}
    assert cd.child_probe(str(fake_python), env) == (100, 0)
    fake_python.write_text("#!/bin/sh\necho garbage\n")
    assert cd.child_probe(str(fake_python), env) is None
    assert cd.child_probe("", env) is None


def test_format_uuid() -> None:
    assert cd.format_uuid(bytes(range(16))) == "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"
    assert cd.format_uuid(bytes(16)) is None and cd.format_uuid(b"short") is None
