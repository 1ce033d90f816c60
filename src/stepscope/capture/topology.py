"""Where each GPU sits in the machine: its host NUMA node and that node's CPUs, its active NVLink
links and their bandwidth, its PCIe link's bandwidth (the ``devices`` columns ``numa_node``,
``numa_cpus``, ``nvlink_links``, ``nvlink_gbs``, ``pcie_gbs``).

Read in the profiled process when its GPU backend stops, next to the CUDA driver's rows
(``capture.devices``), for the GPUs the process used, matched to NVML by PCI bus id (so that
``CUDA_VISIBLE_DEVICES`` renumbering does not matter). Sources, first that answers:

- NUMA node: sysfs ``/sys/bus/pci/devices/<bus id>/numa_node`` (the node of the PCIe root the
  GPU hangs off), else NVML ``nvmlDeviceGetMemoryAffinity`` at node scope (the node
  ``nvidia-smi topo -m`` prints as "NUMA Affinity") when it names one node; its CPUs:
  ``/sys/devices/system/node/node<N>/cpulist``. Not ``nvmlDeviceGetNumaNodeId``: NVML documents
  it for "platforms where the GPUs are NUMA nodes" (coherent GPU memory, e.g. GH200), where it
  names the GPU memory's own CPU-less node, not the host node near the GPU.
- NVLink: ``nvmlDeviceGetNvLinkState`` for each link up to ``NVML_NVLINK_MAX_LINKS`` (links
  that answer ``NVML_FEATURE_ENABLED`` are active), ``nvmlDeviceGetNvLinkVersion`` of an
  active link for the per-link bandwidth (``NVLINK_GBS``); a GPU whose links all answer
  "not supported" has 0 links and null bandwidth.
- PCIe: ``nvmlDeviceGetMaxPcieLinkGeneration`` and ``nvmlDeviceGetMaxPcieLinkWidth``, else
  sysfs ``max_link_speed`` / ``max_link_width`` of the GPU's PCI device (``PCIE_LANE_GBS``).

Everything that cannot be read is null; nothing here raises. Without nvidia-ml-py or a driver
the NVLink columns are null and the others come from sysfs when it has them.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from types import ModuleType
from typing import Any

from stepscope.capture.samplers.numa import numa_node_cpus, pci_numa_node

# NVLink bandwidth per link and per direction, GB/s, by the code nvmlDeviceGetNvLinkVersion
# returns (nvmlNvlinkVersion_t, as NVIDIA's cuda.bindings.nvml.NvlinkVersion lists it:
# 1 = 1.0, 2 = 2.0, 3 = 2.2, 4 = 3.0, 5 = 3.1, 6 = 4.0, 7 = 5.0). The per-link figures follow
# from NVIDIA's published totals per GPU (bidirectional) over its link count, halved:
# P100 NVLink 1: 160 GB/s over 4 links -> 20; V100 NVLink 2: 300 GB/s over 6 -> 25;
# A100 NVLink 3: 600 GB/s over 12 -> 25; H100/H200 NVLink 4: 900 GB/s over 18 -> 25 (so an
# H100 SXM's 18 links give 450 GB/s per direction); B200/GB200 NVLink 5: 1.8 TB/s over 18 -> 50.
NVLINK_GBS: dict[int, float] = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 25.0, 6: 25.0, 7: 50.0}
# When the version cannot be read: the same figures by the GPU's compute capability major
# (Pascal 6, Volta 7, Ampere 8, Hopper 9, Blackwell 10).
NVLINK_GBS_BY_CC: dict[int, float] = {6: 20.0, 7: 25.0, 8: 25.0, 9: 25.0, 10: 50.0}
NVML_FEATURE_ENABLED = 1
MAX_LINKS_DEFAULT = 18
MASK_WORDS = 4  # 64-bit words of NUMA node mask asked for: nodes 0-255  # pynvml.NVML_NVLINK_MAX_LINKS on Hopper-era bindings

# PCIe bandwidth per lane and per direction after line encoding, GB/s (PCI-SIG rates):
# Gen1 2.5 GT/s and Gen2 5 GT/s with 8b/10b; Gen3 8, Gen4 16, Gen5 32 GT/s with 128b/130b;
# Gen6 64 GT/s with 256-byte FLITs carrying 242 bytes of payload and CRC. Gen5 x16: 63.0 GB/s.
PCIE_LANE_GBS: dict[int, float] = {
    1: 2.5 * 8 / 10 / 8, 2: 5.0 * 8 / 10 / 8, 3: 8.0 * 128 / 130 / 8, 4: 16.0 * 128 / 130 / 8,
    5: 32.0 * 128 / 130 / 8, 6: 64.0 * 242 / 256 / 8,
}
PCIE_GEN_OF_GTS: dict[float, int] = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


@dataclass(frozen=True)
class GpuTopology:
    """One GPU's place in the machine (the ``devices`` columns of the module doc; None:
    unknown)."""

    numa_node: int | None = None
    numa_cpus: str | None = None
    nvlink_links: int | None = None
    nvlink_gbs: float | None = None
    pcie_gbs: float | None = None

    def columns(self) -> dict[str, Any]:
        return asdict(self)


TOPOLOGY_COLUMNS = tuple(GpuTopology.__dataclass_fields__)


def format_cpulist(cpus: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 8, 10, 11]`` -> ``"0-3,8,10-11"`` (the Linux cpulist format)."""
    out: list[str] = []
    run: list[int] = []
    for c in sorted(set(cpus)):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(_span(run))
        run = [c]
    if run:
        out.append(_span(run))
    return ",".join(out)


def _span(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"


def process_cpus(pid: int = 0) -> str | None:
    """The CPUs process ``pid`` (0: this one) may run on, as a cpulist; None where the platform
    cannot say (no ``sched_getaffinity``, the process is gone)."""
    get = getattr(os, "sched_getaffinity", None)
    if get is None:
        return None
    try:
        return format_cpulist(get(pid)) or None
    except OSError:
        return None


def pcie_gbs(generation: int | None, width: int | None) -> float | None:
    """Per-direction PCIe bandwidth of a link, GB/s (``PCIE_LANE_GBS`` x lanes)."""
    if not generation or not width or generation not in PCIE_LANE_GBS:
        return None
    return round(PCIE_LANE_GBS[generation] * width, 2)


def nvlink_gbs(links: int | None, version: int | None, compute_major: int | None = None
               ) -> float | None:
    """Per-direction NVLink bandwidth of ``links`` active links, GB/s (``NVLINK_GBS``, else
    ``NVLINK_GBS_BY_CC``); None without links or a known per-link figure."""
    if not links:
        return None
    per = NVLINK_GBS.get(version) if version is not None else None
    if per is None and compute_major is not None:
        per = NVLINK_GBS_BY_CC.get(compute_major)
    return None if per is None else per * links


def bus_key(bus_id: str | None) -> str | None:
    """A PCI bus id as sysfs names it: ``"00000000:1A:00.0"`` / ``"0000:1a:00.0"`` ->
    ``"0000:1a:00.0"``."""
    if not bus_id:
        return None
    b = bus_id.strip().lower()
    dom, _, rest = b.partition(":")
    if not rest:
        return None
    return f"{int(dom, 16):04x}:{rest}" if all(c in "0123456789abcdef" for c in dom) else None


def _safe(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:  # noqa: BLE001 - NOT_SUPPORTED, no permission, old bindings: unknown
        return None


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def single_node(words: Sequence[int]) -> int | None:
    """The node of a NUMA node mask (64-bit words, bit ``i`` of word ``w`` = node ``64 w + i``,
    as ``nvmlDeviceGetMemoryAffinity`` returns it) when it names exactly one, else None."""
    nodes = [64 * w + i for w, word in enumerate(words) for i in range(64)
             if (int(word) >> i) & 1]
    return nodes[0] if len(nodes) == 1 else None


def _bus_id(nv: Any, h: Any) -> str:
    return _text(nv.nvmlDeviceGetPciInfo(h).busId)


def _sysfs_pcie(bus: str, sys_root: str) -> float | None:
    base = os.path.join(sys_root, "sys", "bus", "pci", "devices", bus)
    try:
        with open(os.path.join(base, "max_link_speed")) as f:
            speed = f.read().split()[0]  # "32.0 GT/s PCIe"
        with open(os.path.join(base, "max_link_width")) as f:
            width = int(f.read().strip())
        gen = PCIE_GEN_OF_GTS.get(float(speed))
    except (OSError, ValueError, IndexError):
        return None
    return pcie_gbs(gen, width)


class NvmlTopology:
    """The topology of GPUs from ``nvml`` (an initialised ``pynvml`` module, or None) and
    sysfs under ``sys_root``."""

    def __init__(self, nvml: Any, sys_root: str = "/") -> None:
        self._nv: Any = nvml
        self._root = sys_root
        self._handles: dict[str, Any] | None = None

    def _handle(self, bus: str) -> Any:
        nv = self._nv
        if nv is None:
            return None
        if self._handles is None:
            self._handles = {}
            count = _safe(lambda: int(nv.nvmlDeviceGetCount())) or 0
            for i in range(count):
                h = _safe(partial(nv.nvmlDeviceGetHandleByIndex, i))
                key = bus_key(_safe(partial(_bus_id, nv, h)))
                if h is not None and key is not None:
                    self._handles[key] = h
        return self._handles.get(bus)

    def gpu(self, bus_id: str | None, compute_major: int | None = None) -> GpuTopology:
        bus = bus_key(bus_id)
        if bus is None:
            return GpuTopology()
        h = self._handle(bus)
        node = self._numa_node(h, bus)
        cpus = numa_node_cpus(node, self._root) if node is not None else None
        links, version = self._nvlinks(h)
        pcie = self._pcie(h) if h is not None else None
        return GpuTopology(
            numa_node=node, numa_cpus=format_cpulist(cpus) if cpus else None,
            nvlink_links=links, nvlink_gbs=nvlink_gbs(links, version, compute_major),
            pcie_gbs=pcie if pcie is not None else _sysfs_pcie(bus, self._root))

    def _numa_node(self, h: Any, bus: str) -> int | None:
        node = pci_numa_node(bus, self._root)
        nv = self._nv
        if node is not None or h is None or not hasattr(nv, "nvmlDeviceGetMemoryAffinity"):
            return node
        scope = getattr(nv, "NVML_AFFINITY_SCOPE_NODE", 0)
        words = _safe(lambda: list(nv.nvmlDeviceGetMemoryAffinity(h, MASK_WORDS, scope)))
        return single_node(words) if words else None

    def _nvlinks(self, h: Any) -> tuple[int | None, int | None]:
        """(active links, the version code of the first), (None, None) when NVML is absent."""
        nv = self._nv
        if h is None or not hasattr(nv, "nvmlDeviceGetNvLinkState"):
            return None, None
        enabled = getattr(nv, "NVML_FEATURE_ENABLED", NVML_FEATURE_ENABLED)
        active: list[int] = []
        for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", MAX_LINKS_DEFAULT))):
            state = _safe(partial(nv.nvmlDeviceGetNvLinkState, h, link))
            if state is not None and int(state) == enabled:
                active.append(link)
        version = None
        if active and hasattr(nv, "nvmlDeviceGetNvLinkVersion"):
            version = _safe(lambda: int(nv.nvmlDeviceGetNvLinkVersion(h, active[0])))
        return len(active), version

    def _pcie(self, h: Any) -> float | None:
        nv = self._nv
        gen = _safe(lambda: int(nv.nvmlDeviceGetMaxPcieLinkGeneration(h)))
        width = _safe(lambda: int(nv.nvmlDeviceGetMaxPcieLinkWidth(h)))
        return pcie_gbs(gen, width)


def add_topology(rows: Sequence[Mapping[str, Any]], topo: NvmlTopology) -> list[dict[str, Any]]:
    """``devices`` rows with the topology columns filled from their ``pci_bus_id`` (the
    columns a row already has a value in are kept)."""
    out = []
    for r in rows:
        row = dict(r)
        major = row.get("compute_major")
        found = topo.gpu(row.get("pci_bus_id"), int(major) if major is not None else None)
        for k, v in found.columns().items():
            if row.get(k) is None:
                row[k] = v
        out.append(row)
    return out


def open_nvml(import_module: Callable[[str], ModuleType] = importlib.import_module) -> Any:
    """``pynvml``, initialised; None when it is not installed or NVML does not start. The
    caller shuts it down (``close_nvml``)."""
    try:
        nv = import_module("pynvml")
        nv.nvmlInit()
    except Exception:  # noqa: BLE001 - no nvidia-ml-py, no driver: sysfs only
        return None
    return nv


def close_nvml(nv: Any) -> None:
    if nv is not None:
        _safe(nv.nvmlShutdown)


def with_topology(rows: Sequence[Mapping[str, Any]], *, use_nvml: bool = True,
                  import_module: Callable[[str], ModuleType] = importlib.import_module,
                  sys_root: str = "/") -> list[dict[str, Any]]:
    """``add_topology`` with NVML opened for the call (``use_nvml``) and sysfs at
    ``sys_root``."""
    if not rows:
        return []
    nv = open_nvml(import_module) if use_nvml else None
    try:
        return add_topology(rows, NvmlTopology(nv, sys_root))
    finally:
        close_nvml(nv)


__all__ = ["NVLINK_GBS", "PCIE_LANE_GBS", "TOPOLOGY_COLUMNS", "GpuTopology", "NvmlTopology",
           "add_topology", "bus_key", "close_nvml", "format_cpulist", "nvlink_gbs", "open_nvml",
           "pcie_gbs", "process_cpus", "single_node", "with_topology"]
