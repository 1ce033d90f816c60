"""GPM metrics on a fake pynvml (through the NVML sampler that opens them)."""

from __future__ import annotations

from stepscope.capture.samplers.nvml import NvmlSampler

from ..fake_nvml import FakeNvml


def test_gpm_needs_samples_100ms_apart() -> None:
    t = [0.0]
    nv = NvmlSampler(FakeNvml(), env={"CUDA_VISIBLE_DEVICES": "1"}, monotonic=lambda: t[0])
    assert nv.open() is None
    t[0] = 0.05
    assert not [r for r in nv.sample(1) if "gpm" in r[2]]
    t[0] = 0.11
    assert [r for r in nv.sample(2) if "gpm" in r[2]]
    t[0] = 0.15
    assert not [r for r in nv.sample(3) if "gpm" in r[2]]
    assert nv.unavailable["gpu0.gpu.nvlink_tx_bytes_per_s"] == "GPM returned 3"  # not on this GPU
    nv.close()


def test_gpm_samples_are_freed_on_close() -> None:
    fake = FakeNvml()
    nv = NvmlSampler(fake, env={}, monotonic=lambda: 0.0)
    assert nv.open() is None
    assert nv.gpm == {0: False, 1: True}
    nv.close()
    assert fake.freed == 2 and not fake.inited


def test_a_failing_gpm_read_switches_gpm_off_for_that_gpu() -> None:
    fake = FakeNvml()
    t = [0.0]
    nv = NvmlSampler(fake, env={"CUDA_VISIBLE_DEVICES": "1"}, monotonic=lambda: t[0])
    assert nv.open() is None

    def broken(req: object) -> None:
        raise RuntimeError("GPM gone")

    fake.nvmlGpmMetricsGet = broken  # type: ignore[method-assign]
    t[0] = 0.2
    assert not [r for r in nv.sample(1) if "gpm" in r[2]]
    assert nv.gpm == {0: False} and "GPM gone" in nv.unavailable["gpu0.gpm"]
    nv.close()
