"""CPU/NUMA topology from sysfs: which CPUs a NUMA node has, which node a PCI device is on.

``sys_root`` is ``/`` except in tests, which give a folder with a fake ``sys/`` tree.
"""

from __future__ import annotations

import os


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


def pci_numa_node(bus_id: str, sys_root: str = "/") -> int | None:
    """The NUMA node of a PCI device, from its bus id as NVML gives it (``"00000000:1A:00.0"``)."""
    bus = bus_id.lower()[-12:]  # "00000000:1A:00.0" -> "0000:1a:00.0" as sysfs names it
    path = os.path.join(sys_root, "sys", "bus", "pci", "devices", bus, "numa_node")
    try:
        with open(path) as f:
            node = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None
