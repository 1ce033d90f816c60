"""sysfs topology: cpulists, NUMA nodes of CPUs and of PCI devices (on a fake ``sys/`` tree)."""

from __future__ import annotations

from pathlib import Path

from stepscope.capture.samplers.numa import numa_node_cpus, parse_cpulist, pci_numa_node


def test_cpulist_parsing() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("") == []


def test_numa_nodes_from_sysfs(tmp_path: Path) -> None:
    node = tmp_path / "sys" / "devices" / "system" / "node" / "node1"
    node.mkdir(parents=True)
    (node / "cpulist").write_text("2-3,8\n")
    for bus, value in (("0000:1a:00.0", "1\n"), ("0000:1b:00.0", "-1\n")):
        dev = tmp_path / "sys" / "bus" / "pci" / "devices" / bus
        dev.mkdir(parents=True)
        (dev / "numa_node").write_text(value)
    root = str(tmp_path)
    assert numa_node_cpus(1, root) == [2, 3, 8]
    assert numa_node_cpus(0, root) is None
    assert pci_numa_node("00000000:1A:00.0", root) == 1  # NVML's bus id, as sysfs names it
    assert pci_numa_node("00000000:1B:00.0", root) is None  # -1: no NUMA affinity
    assert pci_numa_node("00000000:1C:00.0", root) is None
