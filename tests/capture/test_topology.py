"""Where each GPU sits: NUMA node and CPUs, NVLink, PCIe (NVML faked, sysfs on a fake tree)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from tests.capture.fake_cuda import FakeCuda
from tests.capture.fake_nvml import FakeNvml, NVMLError

from stepscope.capture.devices import devices_table
from stepscope.capture.topology import (
    GpuTopology,
    NvmlTopology,
    add_topology,
    bus_key,
    format_cpulist,
    nvlink_gbs,
    open_nvml,
    pcie_gbs,
    process_cpus,
    single_node,
    with_topology,
)


class TopoNvml(FakeNvml):
    """Two GPUs: GPU 0 (bus 10) has 18 NVLink 4.0 links, 2 of them down, and a Gen5 x16 link;
    GPU 1 (bus 11) has no NVLink (NOT_SUPPORTED) and its PCIe calls fail. Memory affinity:
    GPU 0 node 1, GPU 1 node 0 (nvmlDeviceGetNumaNodeId, the GPU memory's own node where GPUs
    are NUMA nodes, says 1 for GPU 1: it must not be the answer)."""

    NVML_FEATURE_ENABLED = 1
    NVML_NVLINK_MAX_LINKS = 18
    NVML_AFFINITY_SCOPE_NODE = 0

    def nvmlDeviceGetMemoryAffinity(self, h: Any, words: int, scope: int) -> list[int]:
        assert words >= 1 and scope == 0
        return [1 << (1 - h.index)] + [0] * (words - 1)

    def nvmlDeviceGetNvLinkState(self, h: Any, link: int) -> int:
        if h.index == 1:
            raise NVMLError("Not Supported")
        return 0 if link in (3, 7) else 1

    def nvmlDeviceGetNvLinkVersion(self, h: Any, link: int) -> int:
        return 6  # NVML_NVLINK_VERSION_4_0

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: Any) -> int:
        if h.index == 1:
            raise NVMLError("Not Supported")
        return 5

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: Any) -> int:
        return 16


def _sys(tmp_path: Path) -> str:
    """node0: CPUs 0-3,8-11; node1: 4-7,12-15; GPU 0 (bus 10) on node 0 by sysfs, GPU 1
    (bus 11) a Gen4 x8 link in sysfs."""
    for n, cpus in ((0, "0-3,8-11\n"), (1, "4-7,12-15\n")):
        d = tmp_path / "sys" / "devices" / "system" / "node" / f"node{n}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpus)
    for bus, node in (("0000:10:00.0", "0\n"), ("0000:11:00.0", "0\n")):
        d = tmp_path / "sys" / "bus" / "pci" / "devices" / bus
        d.mkdir(parents=True)
        (d / "numa_node").write_text(node)
    d = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:11:00.0"
    (d / "max_link_speed").write_text("16.0 GT/s PCIe\n")
    (d / "max_link_width").write_text("8\n")
    return str(tmp_path)


def test_cpulists_are_formatted_as_linux_writes_them() -> None:
    assert format_cpulist([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert format_cpulist({47, 32, *range(16)} | set(range(33, 47))) == "0-15,32-47"
    assert format_cpulist([5]) == "5" and format_cpulist([]) == ""


def test_bus_ids_of_nvml_and_of_the_driver_meet() -> None:
    assert bus_key("00000000:1A:00.0") == bus_key("0000:1a:00.0") == "0000:1a:00.0"
    assert bus_key(None) is None and bus_key("garbage") is None


def test_link_bandwidths() -> None:
    # PCIe Gen5 x16: 32 GT/s x 128/130 / 8 x 16 lanes = 63.02 GB/s per direction
    assert pcie_gbs(5, 16) == pytest.approx(63.02)
    assert pcie_gbs(4, 8) == pytest.approx(15.75)
    assert pcie_gbs(3, 16) == pytest.approx(15.75)
    assert pcie_gbs(None, 16) is None and pcie_gbs(9, 16) is None
    # H100 SXM: 18 links of NVLink 4.0 (NVML code 6) x 25 GB/s = 450 GB/s per direction
    assert nvlink_gbs(18, 6) == 450.0
    assert nvlink_gbs(18, 7) == 900.0  # NVLink 5.0: 50 GB/s per link
    assert nvlink_gbs(12, None, compute_major=8) == 300.0  # A100, version unreadable
    assert nvlink_gbs(0, 6) is None and nvlink_gbs(4, None) is None


def test_nvml_and_sysfs(tmp_path: Path) -> None:
    nv = TopoNvml()
    nv.nvmlInit()
    root = _sys(tmp_path)
    (tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:11:00.0" / "numa_node").write_text(
        "-1\n")  # sysfs without a node for GPU 1: NVML's memory affinity says node 0
    topo = NvmlTopology(nv, root)
    # GPU 0: sysfs node 0 before NVML's node 1; 16 of 18 links up
    assert topo.gpu("0000:10:00.0") == GpuTopology(
        numa_node=0, numa_cpus="0-3,8-11", nvlink_links=16, nvlink_gbs=400.0, pcie_gbs=63.02)
    # GPU 1: node 0 from NVML's memory affinity; no NVLink (0 links); PCIe from sysfs (Gen4 x8)
    assert topo.gpu("00000000:11:00.0") == GpuTopology(
        numa_node=0, numa_cpus="0-3,8-11", nvlink_links=0, nvlink_gbs=None, pcie_gbs=15.75)
    assert topo.gpu("0000:99:00.0") == GpuTopology()  # not NVML's, not in sysfs
    assert topo.gpu(None) == GpuTopology()


def test_node_masks() -> None:
    assert single_node([0b100]) == 2 and single_node([0, 1]) == 64
    assert single_node([0b11]) is None and single_node([0, 0]) is None


def test_without_nvml_sysfs_only(tmp_path: Path) -> None:
    topo = NvmlTopology(None, _sys(tmp_path))
    assert topo.gpu("0000:11:00.0") == GpuTopology(numa_node=0, numa_cpus="0-3,8-11",
                                                    pcie_gbs=15.75)
    assert NvmlTopology(None, str(tmp_path / "none")).gpu("0000:10:00.0") == GpuTopology()


def test_rows_keep_what_they_have(tmp_path: Path) -> None:
    rows = [{"device": 0, "pci_bus_id": "0000:11:00.0", "numa_node": 3},
            {"device": 1, "pci_bus_id": None}]
    out = add_topology(rows, NvmlTopology(None, _sys(tmp_path)))
    assert out[0]["numa_node"] == 3 and out[0]["numa_cpus"] == "0-3,8-11"
    assert out[1]["numa_node"] is None and "nvlink_gbs" in out[1]


def test_nvml_is_opened_and_shut_down(tmp_path: Path) -> None:
    nv, root = TopoNvml(), _sys(tmp_path)
    rows = with_topology([{"device": 0, "pci_bus_id": "0000:10:00.0", "compute_major": 9}],
                         import_module=lambda name: nv, sys_root=root)  # type: ignore
    assert rows[0]["nvlink_links"] == 16 and not nv.inited
    assert open_nvml(lambda name: FakeNvml(fail_init=True)) is None  # type: ignore
    off = with_topology([{"device": 0, "pci_bus_id": "0000:10:00.0"}], use_nvml=False,
                        import_module=lambda name: nv, sys_root=root)  # type: ignore
    assert off[0]["nvlink_links"] is None and off[0]["numa_node"] == 0


def test_devices_table_gets_the_topology(tmp_path: Path) -> None:
    fake = FakeCuda(devices=2, active={1})  # device 1: bus 0000:19:00.0
    root = _sys(tmp_path)
    d = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:19:00.0"
    d.mkdir(parents=True)
    (d / "numa_node").write_text("1\n")
    cols = devices_table(fake.driver(), {"kernels": {"device": np.array([1])}},
                         lambda rows: with_topology(rows, use_nvml=False, sys_root=root))
    assert cols is not None and cols["device"] == [1]
    assert cols["numa_node"] == [1] and cols["numa_cpus"] == ["4-7,12-15"]
    assert cols["nvlink_links"] == [None] and cols["pcie_gbs"] == [None]
    plain = devices_table(fake.driver(), {"kernels": {"device": np.array([1])}})
    assert plain is not None and "numa_node" not in plain


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux only")
def test_process_affinity_is_a_cpulist() -> None:
    mine = process_cpus()
    assert mine == format_cpulist(os.sched_getaffinity(0))
    assert process_cpus(2**22 + 12345) is None  # no such process


def test_fake_handles_are_namespaces() -> None:  # guards the fake's shape the tests rely on
    assert isinstance(TopoNvml().nvmlDeviceGetHandleByIndex(0), SimpleNamespace)
