"""What ``capture.topology`` reads on this machine, next to NVML's raw answers and
``nvidia-smi topo -m``: run on a GPU machine to check the NVML calls and the bandwidth mapping.

    PYTHONPATH=src python3 benchmarks/capture/topology_check.py

Prints, per GPU NVML sees: the raw ``nvmlDeviceGetNumaNodeId`` (not used: see
``capture.topology``) and ``nvmlDeviceGetMemoryAffinity`` (node scope), the state of each link up to
``NVML_NVLINK_MAX_LINKS``, ``nvmlDeviceGetNvLinkVersion`` of the first active link,
``nvmlDeviceGetMaxPcieLinkGeneration`` / ``Width``; then the ``devices`` columns stepscope
fills from them (with NVML, and from sysfs alone); then this process's CPU affinity as
``processes.cpu_affinity`` records it. Expected on an H100 SXM: 18 active links, version 6
(NVLink 4.0) or 4, nvlink_gbs 450.0, PCIe Gen5 x16 -> pcie_gbs 63.02.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

from stepscope.capture.topology import NvmlTopology, process_cpus


def _try(name: str, *args: Any) -> Any:
    import pynvml as nv

    try:
        return getattr(nv, name)(*args)
    except Exception as e:  # noqa: BLE001 - show what NVML answered
        return f"{type(e).__name__}: {e}"


def main() -> None:
    import pynvml as nv

    nv.nvmlInit()
    try:
        with_nvml, sysfs_only = NvmlTopology(nv), NvmlTopology(None)
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            bus = nv.nvmlDeviceGetPciInfo(h).busId
            bus = bus.decode() if isinstance(bus, bytes) else str(bus)
            links = [_try("nvmlDeviceGetNvLinkState", h, k)
                     for k in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)))]
            print(f"GPU {i} {_try('nvmlDeviceGetName', h)} bus {bus}")
            print(f"  raw: numa_node_id={_try('nvmlDeviceGetNumaNodeId', h)} memory_affinity="
                  f"{_try('nvmlDeviceGetMemoryAffinity', h, 4, 0)} "
                  f"link_states={links} version(link 0)={_try('nvmlDeviceGetNvLinkVersion', h, 0)} "
                  f"pcie max gen={_try('nvmlDeviceGetMaxPcieLinkGeneration', h)} "
                  f"width={_try('nvmlDeviceGetMaxPcieLinkWidth', h)}")
            print(f"  devices columns (NVML): {with_nvml.gpu(bus).columns()}")
            print(f"  devices columns (sysfs only): {sysfs_only.gpu(bus).columns()}")
    finally:
        nv.nvmlShutdown()
    print(f"processes.cpu_affinity of this process: {process_cpus()}")
    if shutil.which("nvidia-smi"):
        print(subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True,
                             check=False).stdout)


if __name__ == "__main__":
    main()
