"""Host capture without torch: samplers, stacks, steps, buffers, fake NVML, degraded modes."""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from stepscope.capture.host import HOST_TABLES, HostCapture, HostSettings
from stepscope.capture.stacks import StackSampler
from stepscope.schema import spec

from .fake_nvml import FakeNvml

QUIET: dict[str, Any] = {"nvml": False, "hooks": False}


def _metrics(data: dict[str, dict[str, list[Any]]]) -> Counter[str]:
    return Counter(data["samples"]["metric"])


def test_drain_has_every_table_with_schema_columns() -> None:
    cap = HostCapture(HostSettings(sample_hz=0, stack_hz=0, **QUIET), rank=3)
    cap.start()
    cap.stop()
    data = cap.drain()
    assert set(data) == set(HOST_TABLES)
    for table, cols in data.items():
        assert tuple(cols) == spec(table).column_names
    assert data["processes"]["pid"] == [os.getpid()] and data["processes"]["rank"] == [3]
    # the main thread (named by Python), then the process's other threads from /proc at stop
    assert data["threads"]["tid"][0] == threading.main_thread().native_id
    assert set(data["threads"]["tid"]) >= {int(t) for t in os.listdir(f"/proc/{os.getpid()}/task")}
    assert cap.drain()["processes"]["pid"] == []  # drain clears
    assert cap.settings_for_manifest()["samplers"]["metrics"] == {"ran": False, "why": "sample_hz = 0"}


def test_processes_carry_their_cpu_affinity() -> None:
    asked: list[int] = []

    def cpus(pid: int) -> str | None:
        asked.append(pid)
        return "0-15,32-47" if pid == 0 else None

    cap = HostCapture(HostSettings(sample_hz=0, stack_hz=0, **QUIET), cpus=cpus)
    cap.start()
    cap._note_process(os.getpid() + 1, "worker")  # a DataLoader worker, as the hooks note it
    cap.stop()
    procs = cap.drain()["processes"]
    assert procs["cpu_affinity"] == ["0-15,32-47", None]  # this process is asked as pid 0
    assert asked == [0, os.getpid() + 1]


@pytest.mark.parametrize("process", [False, True], ids=["thread", "process"])
def test_psutil_samples_at_roughly_sample_hz(process: bool) -> None:
    pytest.importorskip("psutil")
    cap = HostCapture(HostSettings(sample_hz=20, stack_hz=0, sampler_process=process, **QUIET))
    cap.start()
    cap.start()  # idempotent
    time.sleep(1.0)
    cap.stop()
    cap.stop()
    data = cap.drain()
    m = _metrics(data)
    # the sampler process starts a Python interpreter first (~0.1-0.3 s)
    assert (6 if process else 12) <= m["cpu.util_pct"] <= 22
    assert cap.settings_for_manifest()["samplers"]["metrics"]["where"] == (
        "process" if process else "thread")
    for name in ("process.rss_bytes", "process.cpu_pct", "cpu.core0.util_pct"):
        assert m[name] == m["cpu.util_pct"]
    assert m["disk.read_bytes_per_s"] in (0, m["cpu.util_pct"])  # absent in some containers only
    rows = list(zip(data["samples"]["metric"], data["samples"]["value"], data["samples"]["unit"],
                    data["samples"]["device"]))
    rss = [v for name, v, unit, dev in rows if name == "process.rss_bytes"]
    assert all(v > 10e6 for v in rss)
    assert all(dev is None for *_x, dev in rows)
    assert all(0 <= v <= 100 for name, v, *_ in rows if name == "cpu.util_pct")
    ts = sorted(set(data["samples"]["ts_ns"]))
    gaps = [b - a for a, b in itertools.pairwise(ts)]
    assert sorted(gaps)[len(gaps) // 2] == pytest.approx(50e6, rel=0.2)  # fixed rate
    status = cap.settings_for_manifest()["samplers"]["metrics"]
    assert status["psutil"] == "ok" and status["ticks"] == m["cpu.util_pct"]
    assert data["samples"]["rank"] == [0] * len(data["samples"]["metric"])


def test_stack_samples_name_the_running_function() -> None:
    cap = HostCapture(HostSettings(sample_hz=0, stack_hz=50, **QUIET))
    cap.start()
    end = time.monotonic() + 1.0  # ~50 samples expected; >= 8 leaves room for a loaded machine
    while time.monotonic() < end:
        sum(range(1000))
    cap.stop()
    stacks = cap.drain()["stacks"]
    assert len(stacks["frames"]) >= 8
    assert set(stacks["tid"]) == {threading.main_thread().native_id}
    here = [f for f in stacks["frames"] if "test_stack_samples_name_the_running_function" in f]
    assert len(here) >= len(stacks["frames"]) - 2
    last = here[0].splitlines()[-1]  # innermost last
    assert last.startswith(__file__) and last.endswith("test_stack_samples_name_the_running_function")


def test_stack_format_is_innermost_last_and_skips_files() -> None:
    def inner() -> Any:
        return sys._getframe()

    frame = inner()
    lines = StackSampler().format(frame).splitlines()
    assert lines[-1].endswith(" inner") and lines[-2].endswith(" test_stack_format_is_innermost_last_and_skips_files")
    assert StackSampler(skip_files=(__file__,)).format(frame).count(__file__) == 0


def test_manual_steps_and_listeners() -> None:
    cap = HostCapture(HostSettings(sample_hz=0, stack_hz=0, **QUIET))
    seen: list[int] = []
    cap.add_step_listener(seen.append)
    for ts in (100, 250, 475, 500):
        cap.mark_step(ts)
    steps = cap.drain()["steps"]
    assert seen == [0, 1, 2, 3]
    assert steps["step"] == [0, 1, 2] and steps["ts_ns"] == [100, 250, 475]
    assert steps["dur_ns"] == [150, 225, 25] and steps["source"] == ["manual"] * 3


def test_listener_errors_become_diagnostics() -> None:
    cap = HostCapture(HostSettings(sample_hz=0, stack_hz=0, **QUIET))

    def bad(k: int) -> None:
        raise RuntimeError("boom")

    cap.add_step_listener(bad)
    cap.mark_step(1)
    cap.mark_step(2)
    (d,) = cap.diagnostics
    assert d.code == "step_listener_error" and d.count == 2 and "boom" in d.message


def test_bounded_buffers_drop_the_oldest_with_a_diagnostic() -> None:
    cap = HostCapture(HostSettings(sample_hz=0, stack_hz=0, max_rows=5, **QUIET))
    for ts in range(20):
        cap.mark_step(ts * 10)
    steps = cap.drain()["steps"]
    assert steps["step"] == [14, 15, 16, 17, 18]  # 19 rows made, the newest 5 kept
    (d,) = [d for d in cap.diagnostics if d.code == "host_buffer_full"]
    assert d.count == 14 and "steps" in d.message


def test_without_psutil_or_nvml_it_still_runs() -> None:
    def no_imports(name: str) -> ModuleType:
        raise ImportError(f"No module named {name!r}")

    cap = HostCapture(HostSettings(sample_hz=50, stack_hz=0, hooks=False), import_module=no_imports)
    cap.start()
    time.sleep(0.15)
    cap.stop()
    assert cap.drain()["samples"]["metric"] == []
    codes = {d.code for d in cap.diagnostics}
    assert codes == {"psutil_missing", "nvml_missing"}
    status = cap.settings_for_manifest()["samplers"]["metrics"]
    assert status["psutil"].startswith("missing") and status["nvml"].startswith("missing")


def _sysfs(tmp_path: Path) -> str:
    dev = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:10:00.0"
    dev.mkdir(parents=True)
    (dev / "numa_node").write_text("0\n")
    for node, cpus in ((0, "0-1"), (1, "2-3,8")):
        d = tmp_path / "sys" / "devices" / "system" / "node" / f"node{node}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpus + "\n")
    return str(tmp_path)


def test_fake_nvml_gives_gpu_metrics(tmp_path: Path) -> None:
    pytest.importorskip("psutil")
    fake = FakeNvml()
    cap = HostCapture(HostSettings(sample_hz=8, stack_hz=0, hooks=False), nvml_module=fake,
                      env={}, sys_root=_sysfs(tmp_path))
    cap.start()
    time.sleep(0.6)
    cap.stop()
    data = cap.drain()
    rows = list(zip(data["samples"]["device"], data["samples"]["metric"], data["samples"]["value"]))
    by = {(dev, name): v for dev, name, v in rows if name.startswith("gpu.")}
    assert by[(0, "gpu.util_pct")] == 90 and by[(1, "gpu.util_pct")] == 91
    # the same rows tell the default window when the GPU's work flows (capture.gpu_flow)
    first = min(t for t, m in zip(data["samples"]["ts_ns"], data["samples"]["metric"])
                if m == "gpu.util_pct")
    assert cap.gpu_flow.known and cap.gpu_flow.flow_since(first) == first
    assert by[(0, "gpu.mem_util_pct")] == 40 and by[(0, "gpu.memory_used_bytes")] == 1 << 30
    assert by[(0, "gpu.sm_clock_mhz")] == 1980 and by[(0, "gpu.power_w")] == 350.0
    assert by[(0, "gpu.throttle_reasons")] == 4.0
    # GPU 0 has no GPM: PCIe from nvmlDeviceGetPcieThroughput (KB/s), at most once a second
    assert by[(0, "gpu.pcie_tx_bytes_per_s")] == 1000 * 1024
    assert fake.calls.count("pcie0") == 1
    # GPU 1: GPM metrics (and GPM's PCIe figures, in MiB/s); NVLink is not reported by this GPU
    assert by[(1, "gpu.gpm.sm_active_pct")] == 37.5 and by[(1, "gpu.gpm.sm_occupancy_pct")] == 20
    assert by[(1, "gpu.gpm.tensor_active_pct")] == 12.5 and by[(1, "gpu.gpm.dram_bw_pct")] == 55
    assert by[(1, "gpu.pcie_rx_bytes_per_s")] == 2 * 1024 * 1024
    assert (1, "gpu.nvlink_tx_bytes_per_s") not in by and (0, "gpu.gpm.sm_active_pct") not in by
    assert fake.freed == 2 and not fake.inited  # GPM samples freed, NVML shut down
    settings = cap.settings_for_manifest()
    assert settings["gpu_numa_node"] == {"0": 0, "1": 1}  # GPU 0 from sysfs, GPU 1 from NVML
    aff = sorted(os.sched_getaffinity(0))
    assert settings["cpu_affinity"] == aff
    assert settings["cpu_affinity_within_gpu_numa_node"]["0"] == (set(aff) <= {0, 1})
    metrics = settings["samplers"]["metrics"]
    assert metrics["nvml"] == "ok" and metrics["gpm"] == {"0": False, "1": True}
    assert metrics["gpus"] == {"0": "Fake GPU 0", "1": "Fake GPU 1"}
    assert "gpm_unavailable" in {d.code for d in cap.diagnostics}


def test_nvml_failure_is_a_diagnostic() -> None:
    cap = HostCapture(HostSettings(sample_hz=50, stack_hz=0, hooks=False),
                      nvml_module=FakeNvml(fail_init=True))
    cap.start()
    time.sleep(0.1)
    cap.stop()
    (d,) = [d for d in cap.diagnostics if d.code == "nvml_unavailable"]
    assert "NVML not available" in d.message and "Driver Not Loaded" in d.message
    assert nv_absent(cap.drain())


def nv_absent(data: dict[str, dict[str, list[Any]]]) -> bool:
    return not [m for m in data["samples"]["metric"] if m.startswith("gpu.")]


def test_stacks_overhead_is_small() -> None:
    cap = HostCapture(HostSettings(sample_hz=0, stack_hz=100, **QUIET))
    cap.start()
    time.sleep(0.5)
    cap.stop()
    status = cap.settings_for_manifest()["samplers"]["stacks"]
    assert status["ticks"] >= 30
    assert status["cpu_s"] / status["ticks"] < 0.002  # < 2 ms a tick even on a slow CI box


def test_sampling_falls_back_to_a_thread_when_no_process_can_start(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytest.importorskip("psutil")
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    cap = HostCapture(HostSettings(sample_hz=20, stack_hz=0, **QUIET))
    cap.start()
    time.sleep(0.3)
    cap.stop()
    assert _metrics(cap.drain())["cpu.util_pct"] >= 3
    assert cap.settings_for_manifest()["samplers"]["metrics"]["where"] == "thread"
    (d,) = [d for d in cap.diagnostics if d.code == "sampler_process_failed"]
    assert d.level == "info" and "no-python" in d.message


def test_sampler_process_is_the_default_and_the_environment_can_turn_it_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert HostSettings().sampler_process
    monkeypatch.setenv("STEPSCOPE_SAMPLER_PROCESS", "0")
    assert not HostSettings().sampler_process


def test_threads_python_does_not_know_are_named_from_proc(tmp_path: Path) -> None:
    """C++ threads (torch's pt_autograd_0, ...) make CUDA calls the window records under their
    system id: they get a row in ``threads`` with the kernel's name for them (``comm``)."""
    pid = os.getpid()
    for tid, comm in ((pid, "python3"), (pid + 7, "pt_autograd_0"), (pid + 8, "cuda-EvtHandlr")):
        d = tmp_path / str(pid) / "task" / str(tid)
        d.mkdir(parents=True)
        (d / "comm").write_text(comm + "\n")
    cap = HostCapture(HostSettings(sample_hz=0, stack_hz=0, **QUIET), rank=0)
    cap._seen_threads.add((pid, pid))  # the main thread, named by Python already
    cap._note_native_threads(str(tmp_path))
    rows = cap.drain()["threads"]
    assert sorted(zip(rows["tid"], rows["name"], strict=True)) == [
        (pid + 7, "pt_autograd_0"), (pid + 8, "cuda-EvtHandlr")]
    cap._note_native_threads(str(tmp_path))  # once per thread
    assert cap.drain()["threads"]["tid"] == []
