"""GPU check of ``capture.cuda_driver``: ``gpu_in_use`` as torch starts using the GPU, and the
driver's device properties next to torch's (and CuPy's, when importable). Exits 1 on a mismatch.

    python benchmarks/capture/devices_check.py        # on a machine with an NVIDIA GPU

Expected: gpu_in_use False before torch touches CUDA and True once a tensor is on the GPU (after
``torch.cuda.init()`` it may be either: torch initialises CUDA without making a context), the
properties equal, no_gpu_reason None.
"""

from __future__ import annotations

import sys
from typing import Any

from stepscope.capture.cuda_driver import CudaDriver, gpu_in_use, no_gpu_reason

bad: list[str] = []


def same(what: str, ours: Any, theirs: Any) -> None:
    ok = ours == theirs
    print(f"  {what:28s} {ours!s:44s} {theirs!s:44s} {'ok' if ok else 'MISMATCH'}")
    if not ok:
        bad.append(what)


print("gpu_in_use before torch:", gpu_in_use())
if gpu_in_use():
    bad.append("in use before torch")
import torch

print("gpu_in_use after import torch:", gpu_in_use())
torch.cuda.init()
print("gpu_in_use after torch.cuda.init():", gpu_in_use())
x = torch.ones(1, device="cuda")
torch.cuda.synchronize()
print("gpu_in_use after a tensor on the GPU:", gpu_in_use())
if not gpu_in_use():
    bad.append("not in use after a tensor")
drv = CudaDriver.attach()
assert drv is not None, "libcuda is not in the process after torch used the GPU"
print("active devices:", drv.active_devices(), "current:", drv.current_device())
print("no_gpu_reason:", no_gpu_reason())
if no_gpu_reason() is not None:
    bad.append("no_gpu_reason")
p = drv.properties(0)
assert p is not None
print(p)
print(f"peak DRAM bandwidth {p.memory_bandwidth_gbs} GB/s")

t = torch.cuda.get_device_properties(0)
print(f"\n  {'field':28s} {'stepscope (driver)':44s} {'torch':44s}")
for ours, theirs in (("name", "name"), ("compute_major", "major"), ("compute_minor", "minor"),
                     ("sm_count", "multi_processor_count"), ("total_memory", "total_memory"),
                     ("warp_size", "warp_size"), ("max_threads_per_sm", "max_threads_per_multi_processor"),
                     ("l2_bytes", "L2_cache_size"), ("smem_per_block", "shared_memory_per_block"),
                     ("smem_per_sm", "shared_memory_per_multiprocessor"),
                     ("smem_per_block_optin", "shared_memory_per_block_optin"),
                     ("regs_per_sm", "regs_per_multiprocessor"), ("clock_khz", "clock_rate"),
                     ("memory_clock_khz", "memory_clock_rate"), ("bus_width_bits", "memory_bus_width")):
    v = getattr(t, theirs, None)
    if v is None or (v == 0 and theirs.endswith("_rate")):  # not in this torch / CUDA 13 build
        print(f"  {ours:28s} {getattr(p, ours)!s:44s} (torch: {v})")
        continue
    same(ours, getattr(p, ours), v)
uuid = getattr(t, "uuid", None)
if uuid is not None:
    same("uuid", (p.uuid or "").removeprefix("GPU-"), str(uuid).removeprefix("GPU-"))
if getattr(t, "pci_bus_id", None) is not None and p.pci_bus_id:
    same("pci bus", int(p.pci_bus_id.split(":")[1], 16), t.pci_bus_id)

try:
    import cupy  # type: ignore[import-not-found]
except ImportError:
    print("\ncupy not importable: skipped")
else:
    c = cupy.cuda.runtime.getDeviceProperties(0)
    print(f"\n  {'field':28s} {'stepscope (driver)':44s} {'cupy':44s}")
    for ours, theirs in (("sm_count", "multiProcessorCount"), ("warp_size", "warpSize"),
                         ("max_threads_per_block", "maxThreadsPerBlock"),
                         ("max_threads_per_sm", "maxThreadsPerMultiProcessor"),
                         ("max_blocks_per_sm", "maxBlocksPerMultiProcessor"),
                         ("regs_per_block", "regsPerBlock"), ("regs_per_sm", "regsPerMultiprocessor"),
                         ("smem_per_block", "sharedMemPerBlock"),
                         ("smem_per_block_optin", "sharedMemPerBlockOptin"),
                         ("smem_per_sm", "sharedMemPerMultiprocessor"),
                         ("total_memory", "totalGlobalMem"), ("l2_bytes", "l2CacheSize"),
                         ("clock_khz", "clockRate"), ("memory_clock_khz", "memoryClockRate"),
                         ("bus_width_bits", "memoryBusWidth")):
        if c.get(theirs) is not None:
            same(ours, getattr(p, ours), c[theirs])
    if c.get("pciBusID") is not None and p.pci_bus_id:
        same("pci bus", int(p.pci_bus_id.split(":")[1], 16), c["pciBusID"])
del x
print("\nmismatches:", bad or "none")
sys.exit(1 if bad else 0)
