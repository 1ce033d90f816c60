"""memory_underused: device memory mostly unused while the GPU waits on the host (µs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stepscope.advisor.base import Finding, Severity
from stepscope.advisor.engine import advise
from stepscope.advisor.rules import RULES
from stepscope.advisor.rules.memory_underused import RULE
from stepscope.analysis import analyze
from stepscope.importers import import_traces
from stepscope.model.confidence import Confidence
from stepscope.store.run import Run

DATA = Path(__file__).resolve().parents[1] / "data"
GB = 1_000_000_000
COPY_AND_MEMORY = ("pageable_memcpy", "excess_transfers", "no_copy_overlap", "memory_pressure",
                   "memory_underused")


def _findings(run: Run) -> tuple[Finding, ...]:
    return advise(analyze(run), [RULE]).findings


def _host_heavy(b: Any, *, op: str = "aten::mm", launch: bool = True, reserved: int = 10 * GB,
                input_wait: bool = False) -> None:
    """Per 1000 µs step: the host works 0-600 in ``op`` (which launches the kernel at 590
    when ``launch``), the kernel runs 600-1000: GPU busy 40%."""
    for i in range(3):
        t0 = i * 1000
        b.step(t0, 1000)
        if input_wait:
            b.input_wait(t0, 600)
        else:
            b.cpu_op(op, t0, 600)
        if launch:
            b.kernel("k", t0 + 600, 400, launch=(t0 + 590, 5))
        else:
            b.kernel("k", t0 + 600, 400, launch=(t0 + 600, 1), tid=9)
    b.memory(5, 1 << 20, reserved - GB, reserved)


def test_fires_at_info_with_no_saving(builder: Any, tmp_path: Path) -> None:
    _host_heavy(builder)
    (f,) = _findings(builder.build(tmp_path / "run"))
    # 10 GB of 85 GB reserved (12%); device-side steps 600 -> 1600 -> 2600: 400 of 1000 µs
    # busy (40%); the host step: launch 600 µs (aten::mm issues the launch) = 60% GPU idle
    assert (f.id, f.category) == ("memory_underused", "memory")
    assert f.severity is Severity.INFO and f.est_saving_ms == 0.0 and f.est_saving_pct == 0.0
    assert f.confidence is Confidence.MEDIUM
    assert f.title == ("GPU memory 12% used and GPU busy 40%: a larger batch would use the GPU "
                       "better")
    assert f.evidence == (
        "peak device memory 10 GB of 85 GB (12%) on device 0, from memory_events",
        ("GPU busy 40% of the device-side step; GPU idle while the host launches, works or "
        "syncs 60% of the 1.00 ms step (breakdown: launch 0.600 ms)"),
    )
    assert f.method.startswith("not estimated")
    assert "larger batch" in f.fix.pytorch and "reduce-overhead" in f.fix.pytorch


def test_cpu_computation_is_not_amortised(builder: Any, tmp_path: Path) -> None:
    # the host's 600 µs are a CPU op that launches nothing (a torch.sort of a CPU tensor):
    # it grows with the batch, a larger batch does not help
    _host_heavy(builder, op="aten::sort", launch=False)
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_silent_when_memory_is_used_or_input_bound(builder: Any, tmp_path: Path) -> None:
    _host_heavy(builder, reserved=40 * GB)  # 47% of the device: not underused
    assert _findings(builder.build(tmp_path / "used")) == ()
    from builder import TraceBuilder

    b = TraceBuilder()
    _host_heavy(b, input_wait=True)  # waiting for data: a larger batch does not feed it faster
    assert _findings(b.build(tmp_path / "input")) == ()


def test_skipped_without_memory_data(builder: Any, tmp_path: Path) -> None:
    for i in range(3):
        builder.step(i * 1000, 1000)
        builder.kernel("k", i * 1000 + 600, 400, launch=(i * 1000 + 590, 5))
    run = builder.build(tmp_path / "run")
    (s,) = advise(analyze(run), [RULE]).skipped
    assert s.id == "memory_underused" and "profile_memory=True" in s.reason


def test_gpt_fixture_fires_with_the_profiler_caveat(tmp_path: Path) -> None:
    # 3.4 GB of 85 GB reserved (4%); launch 10.4 + host 17.2 ms of a 39.8 ms traced step
    run = Run(import_traces([DATA / "gpt_bf16_adamw.pt.trace.json.gz"], tmp_path / "run"))
    (f,) = _findings(run)
    assert f.severity is Severity.INFO and f.confidence is Confidence.LOW
    assert f.title == ("GPU memory 4% used and GPU busy 33%: a larger batch would use the GPU "
                       "better")
    assert f.note.startswith("traced with torch.profiler")


def _healthy(b: Any) -> None:
    """GPU-resident data, big kernels back to back, launched well ahead; 40 GB of 85 used."""
    for i in range(3):
        t0 = i * 1000
        b.step(t0, 1000)
        b.kernel("gemm_a", t0 + 2, 500, launch=(t0 - 300, 5))
        b.kernel("gemm_b", t0 + 502, 497, launch=(t0 - 290, 5))
    b.memory(5, 1 << 20, 38 * GB, 40 * GB)


def test_healthy_runs_get_no_warning_from_the_copy_and_memory_rules(builder: Any,
                                                                    tmp_path: Path) -> None:
    _healthy(builder)
    run = builder.build(tmp_path / "synthetic")
    mine = [r for r in RULES if r.id in COPY_AND_MEMORY]
    assert advise(analyze(run), mine).findings == ()
    # a real one: an 8-layer 8192-wide bf16 MLP on an H200, no sync per step (the host runs
    # ahead: ProfilerStep windows of ~2.8 ms, the GPU step ~39 ms), 4.2 GB of 150 GB
    real = Run(import_traces([DATA / "h200_healthy_bf16.pt.trace.json.gz"], tmp_path / "real"))
    assert advise(analyze(real), mine).findings == ()
