"""pageable_memcpy: copies from/to pageable host memory (builder times in µs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stepscope.advisor.base import Finding, Severity
from stepscope.advisor.engine import advise
from stepscope.advisor.rules.pageable_memcpy import RULE
from stepscope.analysis import analyze
from stepscope.importers import import_traces
from stepscope.model.confidence import Confidence
from stepscope.store.run import Run

DATA = Path(__file__).resolve().parents[1] / "data"


def _findings(run: Run) -> tuple[Finding, ...]:
    return advise(analyze(run), [RULE]).findings


def _trace(tmp_path: Path, name: str) -> Run:
    return Run(import_traces([DATA / name], tmp_path / "run"))


def _blocking_batch_copy(b: Any, *, steps: int = 3, gemm_at: float = 370,
                         copy_steps: tuple[int, ...] | None = None, nbytes: int = 4_000_000,
                         pinned_ref: bool = False) -> None:
    """Per 1000 µs step: ``x.to("cuda")`` of a pageable tensor: aten::to (4-326) >
    aten::copy_ (5-325) > cudaMemcpyAsync 10-310 (the driver stages the data: the host is
    blocked) + cudaStreamSynchronize 312-320; the copy runs 100-300 on the GPU (4 MB in
    200 µs = 20 GB/s). The GPU then waits for the host to launch the gemm (launch
    ``gemm_at - 10``), which runs ``gemm_at`` to ``gemm_at + 500``."""
    for i in range(steps):
        t0 = i * 1000
        b.step(t0, 1000)
        if copy_steps is None or i in copy_steps:
            b.cpu_op("aten::to", t0 + 4, 322).cpu_op("aten::copy_", t0 + 5, 320)
            b.memcpy("HtoD", t0 + 100, 200, nbytes, src="pageable",
                     api=("cudaMemcpyAsync", t0 + 10, 300))
            b.sync("cudaStreamSynchronize", t0 + 312, 8)
        b.kernel("gemm", t0 + gemm_at, 500, launch=(t0 + gemm_at - 10, 5))
        if pinned_ref:
            # a pinned 2.4 MB copy in 60 µs (40 GB/s), its call 6 µs: the run's pinned basis
            b.memcpy("HtoD", t0 + 900, 60, 2_400_000, src="pinned",
                     api=("cudaMemcpyAsync", t0 + 890, 6))


def test_fires_with_blocked_host_and_nominal_bandwidth(builder: Any, tmp_path: Path) -> None:
    _blocking_batch_copy(builder)
    (f,) = _findings(builder.build(tmp_path / "run"))
    # exposed: call 10-320 (with its sync) | copy 100-300, no kernel: 310 µs; pinned at the
    # nominal 50 GB/s (H100, CC 9.0: PCIe Gen5): 4e6 / 50 = 80 µs; call cost 10 µs; refill
    # 320 -> 370 = 50 µs hides 50 of the 80: saving 310 - 10 - (80 - 50) = 270 µs = 27%
    assert (f.id, f.category) == ("pageable_memcpy", "memcpy")
    assert f.est_saving_ms == pytest.approx(0.27) and f.est_saving_pct == pytest.approx(27.0)
    assert f.severity is Severity.CRITICAL and f.confidence is Confidence.MEDIUM
    assert f.title == ("1 copy per step from/to pageable host memory (4 MB at 20.0 GB/s): "
                       "pinning saves ~0.270 ms per step")
    assert f.evidence[0] == ("1 pageable HtoD copy of >= 64 KiB per step, 4 MB per step, "
                             "achieved 20.0 GB/s (0.200 ms of GPU copy time per step)")
    assert f.evidence[1] == ("the host was blocked 0.310 ms per step in these copy calls; no "
                             "kernel ran for 0.310 ms per step of the calls and copies")
    assert f.evidence[2].startswith("pinned, the same bytes would take ~0.080 ms per step at "
                                    "50.0 GB/s (nominal PCIe Gen5 x16 for compute capability 9.0")
    assert f.evidence[3] == "called from: aten::to > aten::copy_"
    assert "pcie_gen5" in f.method and "10 us" in f.method and "3 steady steps" in f.method
    assert f.where.rank == 0 and f.where.steps == (0, 1, 2)
    assert (f.where.start_ns, f.where.end_ns) == (10_000, 320_000)
    assert f.where.call_sites == ("aten::to > aten::copy_",)
    assert "pin_memory=True" in f.fix.pytorch and "non_blocking=True" in f.fix.pytorch
    assert "prefetch_to_device" in f.fix.tensorflow
    assert "device_put" in f.fix.jax and "cudaHostAlloc" in f.fix.cuda


def test_measured_pinned_bandwidth_and_call_cost(builder: Any, tmp_path: Path) -> None:
    _blocking_batch_copy(builder, pinned_ref=True)
    (f,) = _findings(builder.build(tmp_path / "run"))
    # basis: this run's pinned copies, 2.4e6 B / 60 µs = 40 GB/s -> 4e6 B in 100 µs; call cost
    # = their median call, 6 µs: 310 - 6 - (100 - 50) = 254 µs per step
    assert f.est_saving_ms == pytest.approx(0.254)
    assert f.severity is Severity.CRITICAL and f.confidence is Confidence.HIGH
    assert f.evidence[2] == ("pinned, the same bytes would take ~0.100 ms per step at 40.0 GB/s "
                             "(median of this run's 3 pinned copies of >= 64 KiB)")
    assert "measured_pinned" in f.method and "(6 us)" in f.method


def test_refill_longer_than_the_pinned_copy_is_fully_credited(builder: Any,
                                                               tmp_path: Path) -> None:
    # the host needs 320 -> 420 = 100 µs to launch the gemm: a pinned async copy (80 µs)
    # would run under that: saving = 310 - 10 = 300 µs
    _blocking_batch_copy(builder, gemm_at=420)
    (f,) = _findings(builder.build(tmp_path / "run"))
    assert f.est_saving_ms == pytest.approx(0.30) and f.severity is Severity.CRITICAL


def test_silent_for_pinned_copies_under_compute(builder: Any, tmp_path: Path) -> None:
    for i in range(3):
        t0 = i * 1000
        builder.step(t0, 1000)
        builder.kernel("gemm", t0 + 5, 990, launch=(t0 + 1, 3))
        builder.memcpy("HtoD", t0 + 100, 200, 4_000_000, src="pinned", stream=9,
                       api=("cudaMemcpyAsync", t0 + 10, 5))
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_silent_for_a_prefetch_thread_hidden_under_compute(builder: Any, tmp_path: Path) -> None:
    # pageable copies made by a loader thread (tid 7, no launches) while kernels run: the
    # blocked thread holds up no launch and the copy overlaps compute: nothing exposed
    for i in range(3):
        t0 = i * 1000
        builder.step(t0, 1000)
        builder.kernel("gemm", t0 + 5, 990, launch=(t0 + 1, 3))
        builder.memcpy("HtoD", t0 + 100, 200, 4_000_000, src="pageable", stream=9, tid=7,
                       api=("cudaMemcpyAsync", t0 + 10, 300))
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_silent_for_tiny_and_one_off_copies(builder: Any, tmp_path: Path) -> None:
    # 60 kB copies are latency-bound (pinning does not speed them up)
    _blocking_batch_copy(builder, nbytes=60_000)
    assert _findings(builder.build(tmp_path / "tiny")) == ()
    # a pageable copy in one step of three (a checkpoint load, the model's .to()): not per step
    from builder import TraceBuilder

    b = TraceBuilder()
    _blocking_batch_copy(b, copy_steps=(1,))
    assert _findings(b.build(tmp_path / "once")) == ()


def test_cnn_fixture_fires_at_info(tmp_path: Path) -> None:
    # 3 steps of ~12.66 ms, one 3.15 MB pageable HtoD per step at 10.5 GB/s (plus a 512 B one,
    # not counted): the host is blocked ~0.46 ms per step in cudaMemcpyAsync + sync with the
    # GPU idle; at the nominal 50 GB/s the copy would take 0.063 ms, under the ~0.1 ms the
    # host then spends before the GPU gets work: saving = 0.461 - 0.010 = 0.451 ms (3.6%)
    (f,) = _findings(_trace(tmp_path, "cnn_fp32_sync.pt.trace.json.gz"))
    assert f.severity is Severity.INFO and f.confidence is Confidence.MEDIUM
    assert f.est_saving_ms == pytest.approx(0.451, abs=0.002)
    assert f.est_saving_pct == pytest.approx(3.56, abs=0.02)
    assert f.evidence[0] == ("1 pageable HtoD copy of >= 64 KiB per step, 3.15 MB per step, "
                             "achieved 10.5 GB/s (0.299 ms of GPU copy time per step)")
    assert f.evidence[1].startswith("the host was blocked 0.461 ms per step")
    assert "~0.063 ms per step at 50.0 GB/s" in f.evidence[2]
    assert f.where.steps == (0, 1, 2) and f.where.call_sites == ("aten::to > aten::copy_",)


def test_pinned_gpt_and_setup_only_alexnet_fixtures_stay_silent(tmp_path: Path) -> None:
    # gpt: the batch comes from a pin_memory DataLoader; alexnet: its 16 pageable copies are
    # the model's weights, copied before the (periodic) step the trace shows: not per step
    assert _findings(_trace(tmp_path / "gpt", "gpt_bf16_adamw.pt.trace.json.gz")) == ()
    alexnet = "critical_path_alexnet_benchmark_result_2869224_1695835535_trace.json.gz"
    assert _findings(_trace(tmp_path / "alexnet", alexnet)) == ()


def test_h200_pageable_batch_matches_the_measured_saving(tmp_path: Path) -> None:
    # measured on the H200 that made the trace: pinned + non_blocking saved 1.01 ms per step
    (f,) = _findings(_trace(tmp_path, "h200_pageable_batch.pt.trace.json.gz"))
    assert f.est_saving_ms == pytest.approx(1.01, rel=0.30)
    assert f.est_saving_ms == pytest.approx(1.004, abs=0.002)
    assert f.severity is Severity.WARNING
