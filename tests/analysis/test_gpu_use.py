"""What is known of a rank's GPU use when it recorded no GPU work (builder times in µs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builder import TraceBuilder
from stepscope.analysis import analyze
from stepscope.analysis.gpu_use import GpuPresence, GpuUse
from stepscope.store.manifest import Diagnostic, SourceInfo

H100 = "NVIDIA H100 80GB HBM3"


def _cpu_steps(b: TraceBuilder, n: int = 4) -> TraceBuilder:
    for i in range(n):
        b.step(i * 10_000, 10_000, source="hook")
    return b


def _gpu(settings: dict[str, Any], tmp_path: Path, b: TraceBuilder | None = None,
         **kw: Any) -> GpuPresence:
    b = _cpu_steps(b or TraceBuilder())
    kw.setdefault("source", SourceInfo(kind="capture"))
    run = b.build(tmp_path / "r", settings=settings, devices=kw.pop("devices", 0), **kw)
    return analyze(run).ranks[0].gpu


def _rank(gpu: dict[str, Any] | None = None, nvml: dict[str, str] | None = None
          ) -> dict[str, Any]:
    r: dict[str, Any] = {}
    if gpu is not None:
        r["gpu"] = gpu
    if nvml is not None:
        r["host"] = {"samplers": {"metrics": {"gpus": nvml}}}
    return {"ranks": {"rank0": r}}


def test_gpu_records_are_recorded_use(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.kernel("k", 100, 500, device=0)
    g = _gpu({}, tmp_path, b, devices=1)
    assert g.use is GpuUse.RECORDED and not g.host_only
    assert g.gpus == (f"{H100} (device 0)",)


def test_a_gpu_capture_that_ran_and_saw_nothing_means_no_gpu_work(tmp_path: Path) -> None:
    g = _gpu(_rank({"backend": "cupti", "state": "stopped"}, {"0": H100}), tmp_path)
    assert g.use is GpuUse.NONE and g.host_only
    assert g.gpus == (f"{H100} (device 0)",)
    assert g.reason == "the GPU capture (cupti) ran through the window and recorded no GPU work"


def test_nvml_idle_in_the_steps_means_no_gpu_work(tmp_path: Path) -> None:
    # GPU capture unavailable; NVML: 1% and 3% busy inside the 40 ms of steps (mean 2% < 5%),
    # a 90% sample after them does not count
    b = TraceBuilder()
    for ts, v in ((5_000, 1.0), (15_000, 3.0), (25_000, 2.0), (60_000, 90.0)):
        b.sample("gpu.util_pct", ts, v, device=0)
    g = _gpu(_rank({"backend": "cupti", "state": "unavailable", "reason": "CUPTI_ERROR_X"}),
             tmp_path, b)
    assert g.use is GpuUse.NONE
    assert g.util_samples == 3 and g.util_pct == 2.0
    assert g.reason == "NVML saw the GPU(s) 2% busy over 3 samples in the steps"
    assert g.gpus == ("GPU (device 0)",)


def test_nvml_busy_without_records_is_unknown(tmp_path: Path) -> None:
    b = TraceBuilder()
    for ts in (5_000, 15_000, 25_000):
        b.sample("gpu.util_pct", ts, 60.0, device=0)
    g = _gpu(_rank({"backend": "cupti", "state": "unavailable", "reason": "CUPTI_ERROR_X"}),
             tmp_path, b)
    assert g.use is GpuUse.UNKNOWN and not g.host_only
    assert g.reason == ("NVML saw a GPU 60% busy in the steps but no GPU work was recorded "
                        "(CUPTI_ERROR_X)")


def test_no_gpu_on_the_machine(tmp_path: Path) -> None:
    g = _gpu(_rank({"backend": "auto", "state": "unavailable",
                    "reason": "no NVIDIA GPU or driver found"}), tmp_path)
    assert g.use is GpuUse.NO_GPU and g.host_only
    assert g.reason == "no NVIDIA GPU or driver found"


def test_a_diagnostic_can_say_there_is_no_gpu(tmp_path: Path) -> None:
    diag = Diagnostic("warning", "gpu_not_captured", "cuInit failed: CUDA_ERROR_NO_DEVICE")
    g = _gpu(_rank({"backend": "auto", "state": "unavailable", "reason": "x"}), tmp_path,
             diagnostics=(diag,))
    assert g.use is GpuUse.NO_GPU


def test_no_gpu_text_needs_no_gpu_known(tmp_path: Path) -> None:
    # the reason says "no GPU ... found" but NVML lists one: not "no GPU"
    g = _gpu(_rank({"backend": "auto", "state": "unavailable",
                    "reason": "no NVIDIA GPU or driver found"}, {"0": H100}), tmp_path)
    assert g.use is GpuUse.UNKNOWN


def test_capture_failure_without_more_is_unknown(tmp_path: Path) -> None:
    # "no GPU backend ran" is not "no GPU": the merge's own warning must not read as absence
    diag = Diagnostic("warning", "gpu_not_captured", "no process captured GPU activity (no GPU "
                      "backend ran; see the per-rank diagnostics): host-side steps only")
    g = _gpu(_rank({"backend": "auto", "state": "unavailable",
                    "reason": "cannot enable CUPTI kernel records: CUPTI_ERROR_UNKNOWN"}),
             tmp_path, diagnostics=(diag,))
    assert g.use is GpuUse.UNKNOWN
    assert g.reason == ("GPU activity was not captured: cannot enable CUPTI kernel records: "
                        "CUPTI_ERROR_UNKNOWN")


def test_an_imported_trace_without_gpu_events_is_unknown(tmp_path: Path) -> None:
    g = _gpu({}, tmp_path, source=SourceInfo(kind="kineto"))
    assert g.use is GpuUse.UNKNOWN
    assert g.reason.startswith("the trace has no GPU events")


def test_backend_off_is_unknown(tmp_path: Path) -> None:
    g = _gpu(_rank({"backend": "none", "state": "off"}), tmp_path)
    assert g.use is GpuUse.UNKNOWN
    assert g.reason == "GPU activity was not captured (the GPU capture was off)"
