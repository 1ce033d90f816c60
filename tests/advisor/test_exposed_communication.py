"""exposed_communication: collectives no compute runs under (builder times in µs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stepscope.advisor.base import Finding, Severity
from stepscope.advisor.engine import advise
from stepscope.advisor.rules.exposed_communication import RULE
from stepscope.analysis import analyze
from stepscope.importers import import_traces
from stepscope.model.communication import comm_overlap
from stepscope.model.confidence import Confidence
from stepscope.store.run import Run

EXTERNAL = Path(__file__).resolve().parents[1] / "data" / "external"
AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def _findings(run: Run) -> tuple[Finding, ...]:
    return advise(analyze(run), [RULE]).findings


def _steps(b: Any, gemm: tuple[float, float], comm: tuple[float, float], *, rank: int = 0,
           n: int = 3) -> None:
    """``n`` 1000 µs steps: a gemm (stream 7) and an all-reduce (stream 20) at the given
    (start, duration) inside each step."""
    for i in range(n):
        t0 = i * 1000
        b.step(t0, 1000, rank=rank)
        b.kernel("gemm", t0 + gemm[0], gemm[1], rank=rank)
        b.collective("AllReduce", t0 + comm[0], comm[1], rank=rank)


def test_fires_on_communication_after_the_compute(builder: Any, tmp_path: Path) -> None:
    # gemm 0-600, all-reduce 600-900: 300 µs exposed, 600 µs of compute free to hide it
    _steps(builder, (0, 600), (600, 300))
    (f,) = _findings(builder.build(tmp_path / "run"))
    assert (f.id, f.category) == ("exposed_communication", "communication")
    assert f.est_saving_ms == pytest.approx(0.3) and f.est_saving_pct == pytest.approx(30.0)
    assert f.severity is Severity.CRITICAL and f.confidence is Confidence.MEDIUM
    assert f.title == (f"Exposed communication 0.300 ms per step (30%, {AR}): overlapping it "
                       "with compute saves up to ~0.300 ms per step")
    assert f.evidence[0] == ("0.300 ms per step (30.0% of the step) of communication kernels "
                             "with no compute kernel running")
    assert f.evidence[1] == ("communication 0.300 ms per step, 0.0% of it overlapped by compute "
                             "(comm/compute overlap); compute 0.600 ms, 0.600 ms of it with no "
                             "communication under it")
    assert f.evidence[2] == f"{AR}: 1 per step, 0.300 ms, 0.300 ms exposed"
    assert len(f.evidence) == 3
    assert f.where.rank == 0 and f.where.kernels == (AR,)
    assert "bucket_cap_mb" in f.fix.pytorch and "no_sync" in f.fix.pytorch
    assert "bf16_compress_hook" in f.fix.pytorch and "backward_prefetch" in f.fix.pytorch
    assert "latency_hiding_scheduler" in f.fix.jax
    assert "step" in f.method and "capped at the compute time" in f.method


def test_the_sms_the_collectives_occupy_are_not_free(builder: Any, tmp_path: Path) -> None:
    # as the first test, but the all-reduce runs 33 blocks on the H100's 132 SMs: compute
    # beside it would run 25% slower, so hiding its 300 µs saves 225 µs
    for i in range(3):
        t0 = i * 1000
        builder.step(t0, 1000)
        builder.kernel("gemm", t0, 600)
        builder.collective("AllReduce", t0 + 600, 300, grid=(33, 1, 1))
    (f,) = _findings(builder.build(tmp_path / "run"))
    assert f.est_saving_ms == pytest.approx(0.225)
    assert "less the 25% of it the compute would lose" in f.method


def test_saving_is_capped_by_the_compute_to_hide_under(builder: Any, tmp_path: Path) -> None:
    # gemm 0-100, all-reduce 100-400: 300 µs exposed, only 100 µs of compute to hide it under
    _steps(builder, (0, 100), (100, 300))
    (f,) = _findings(builder.build(tmp_path / "run"))
    assert f.est_saving_ms == pytest.approx(0.1) and f.severity is Severity.WARNING
    assert f.title.startswith("Exposed communication 0.300 ms per step (30%")


def test_overlapped_communication_does_not_fire(builder: Any, tmp_path: Path) -> None:
    # the all-reduce runs 100-700 under the gemm 0-800: nothing exposed
    _steps(builder, (0, 800), (100, 600))
    run = builder.build(tmp_path / "run")
    assert _findings(run) == ()
    a = analyze(run)
    r = comm_overlap(a.graph.rank(0), a.ranks[0])
    assert r is not None and (r.comm_ns, r.exposed_ns, r.saving_ns) == (1_800_000, 0, 0)
    assert r.overlap_share == 1.0


def test_mostly_overlapped_communication_is_info_at_most(builder: Any, tmp_path: Path) -> None:
    # gemm 0-600, all-reduce 100-700: 600 µs of communication, 500 µs of it under the gemm
    # (83%); 100 µs exposed, 100 µs of gemm with no communication under it: saving 10%, a
    # warning by share, capped at info
    _steps(builder, (0, 600), (100, 600))
    (f,) = _findings(builder.build(tmp_path / "run"))
    assert f.est_saving_ms == pytest.approx(0.1) and f.severity is Severity.INFO
    assert f.evidence[1].startswith("communication 0.600 ms per step, 83.3% of it overlapped")
    assert f.evidence[-1].startswith("83% of the communication already overlaps compute")


def test_no_communication_no_finding(builder: Any, tmp_path: Path) -> None:
    for i in range(3):
        builder.step(i * 1000, 1000)
        builder.kernel("gemm", i * 1000, 600)
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_small_exposed_time_stays_silent(builder: Any, tmp_path: Path) -> None:
    # 5 µs exposed per 1000 µs step: 0.5% < 1%
    _steps(builder, (0, 600), (600, 5))
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_several_ranks_mean_and_per_rank_evidence(builder: Any, tmp_path: Path) -> None:
    # rank 0: 300 µs exposed; rank 1: 100 µs. Mean saving (300 + 100) / 2 = 200 µs = 20%
    _steps(builder, (0, 600), (600, 300), rank=0)
    _steps(builder, (0, 600), (600, 100), rank=1)
    (f,) = _findings(builder.build(tmp_path / "run"))
    assert f.est_saving_ms == pytest.approx(0.2) and f.severity is Severity.CRITICAL
    assert f.where.rank == 0
    assert f.evidence[-1] == ("exposed communication per step on 2 of 2 ranks: rank 0 0.300 ms "
                              "(0% overlapped), rank 1 0.100 ms (0% overlapped)")
    assert "over 2 ranks" in f.method


def test_real_trace_agrees_with_hta(tmp_path: Path) -> None:
    # HTA 0.5.0 on this rank of a 16-rank job: SendRecv 43% of kernel time, comm-comp
    # overlap 1.4% (../shared/fixtures/external/README.md)
    out = import_traces([EXTERNAL / "hta_negative_queue_length_values_check_rank0.json.gz"],
                        tmp_path / "run")
    a = analyze(Run(out))
    r = comm_overlap(a.graph.rank(a.ranks[0].rank), a.ranks[0])
    assert r is not None and 100 * r.overlap_share == pytest.approx(1.4, abs=0.5)
    assert r.top[0].name == "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t"
    (f,) = advise(a, [RULE]).findings
    assert f.severity is Severity.WARNING and 10 < f.est_saving_pct < 20
