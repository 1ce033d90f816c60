"""The NVML sampler on a fake pynvml: visible devices, unsupported metrics, the PCIe fallback."""

from __future__ import annotations

from pathlib import Path

from stepscope.capture.samplers.nvml import NvmlSampler, parse_visible_devices

from ..fake_nvml import FakeNvml


def test_nvml_respects_cuda_visible_devices_and_unsupported_metrics() -> None:
    fake = FakeNvml(power_unsupported=True)
    clock = iter(x * 0.2 for x in range(100))
    nv = NvmlSampler(fake, env={"CUDA_VISIBLE_DEVICES": "GPU-00000001"}, monotonic=lambda: next(clock))
    assert nv.open() is None
    assert [i for i, _ in nv.handles] == [0]  # physical GPU 1 is the process's GPU 0
    rows = nv.sample(123)
    names = {name for ts, dev, name, v, unit in rows}
    assert {dev for _, dev, *_r in rows} == {0}
    assert "gpu.power_w" not in names and "gpu.gpm.sm_active_pct" in names
    assert "Not Supported" in nv.unavailable["gpu0.gpu.power_w"]
    nv.sample(124)
    assert len(fake.calls) == 0  # GPM gives PCIe: no blocking PcieThroughput calls
    nv.close()


def test_without_gpm_pcie_comes_from_the_blocking_call_at_most_once_a_second() -> None:
    fake = FakeNvml()
    t = [0.0]
    nv = NvmlSampler(fake, env={"CUDA_VISIBLE_DEVICES": "0"}, monotonic=lambda: t[0])
    assert nv.open() is None
    assert nv.gpm == {0: False} and "Hopper" in nv.unavailable["gpu0.gpm"]
    assert {r[2] for r in nv.sample(1)} >= {"gpu.pcie_tx_bytes_per_s", "gpu.pcie_rx_bytes_per_s"}
    t[0] = 0.5
    assert not [r for r in nv.sample(2) if "pcie" in r[2]]
    t[0] = 1.1
    assert [r for r in nv.sample(3) if "pcie" in r[2]]
    nv.close()
    assert not fake.inited


def test_visible_devices_parsing() -> None:
    assert parse_visible_devices(None) is None
    assert parse_visible_devices("") == []
    assert parse_visible_devices("2, 0,bad,1") == ["2", "0"]
    assert parse_visible_devices("GPU-abc,MIG-x") == ["GPU-abc", "MIG-x"]


def test_gpu_numa_node_is_the_pcie_roots_as_sysfs_has_it(tmp_path: Path) -> None:
    # NVML's nvmlDeviceGetNumaNodeId says the GPU memory's own node on GH200-class machines;
    # the manifest's node must be the one of the CPUs near the GPU, as in the devices table
    fake = FakeNvml()
    nv = NvmlSampler(fake, env={"CUDA_VISIBLE_DEVICES": "0,1"}, sys_root=str(tmp_path))
    assert nv.open() is None
    assert nv.numa_nodes == {0: None, 1: 1}  # no sysfs: NVML's answer where it has one
    nv.close()
    dev = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:11:00.0"  # GPU 1's bus id
    dev.mkdir(parents=True)
    (dev / "numa_node").write_text("0\n")
    nv = NvmlSampler(fake, env={"CUDA_VISIBLE_DEVICES": "0,1"}, sys_root=str(tmp_path))
    assert nv.open() is None
    assert nv.numa_nodes == {0: None, 1: 0}  # sysfs wins over NVML's 1
    nv.close()
