"""memory_pressure: allocator churn inside steps, device memory near capacity (times in µs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stepscope.advisor.base import Finding, Severity
from stepscope.advisor.engine import advise
from stepscope.advisor.rules.memory_pressure import RULE
from stepscope.analysis import analyze
from stepscope.importers import import_traces
from stepscope.model.confidence import Confidence
from stepscope.store.run import Run

DATA = Path(__file__).resolve().parents[1] / "data"
GB = 1_000_000_000


def _advice(run: Run) -> Any:
    return advise(analyze(run), [RULE])


def _findings(run: Run) -> tuple[Finding, ...]:
    return tuple(_advice(run).findings)


def _churn(b: Any, *, churn_steps: tuple[int, ...] | None = None) -> None:
    """Per 1000 µs step: aten::empty (15-45) > cudaMalloc 20-40 (the GPU idle: the previous
    step ended at 900); fwd 50-450 (launch 40), bwd 520-900 (launch 510); then an
    ``empty_cache()``: cudaFree 600-910 waits for bwd, cudaFree 915-945."""
    for i in range(3):
        t0 = i * 1000
        b.step(t0, 1000)
        churn = churn_steps is None or i in churn_steps
        if churn:
            b.cpu_op("aten::empty", t0 + 15, 30)
            b.api("cudaMalloc", t0 + 20, 20)
        b.kernel("fwd", t0 + 50, 400, launch=(t0 + 40, 5))
        b.kernel("bwd", t0 + 520, 380, launch=(t0 + 510, 5))
        if churn:
            b.api("cudaFree", t0 + 600, 310)
            b.api("cudaFree", t0 + 915, 30)


def test_churn_fires(builder: Any, tmp_path: Path) -> None:
    _churn(builder)
    (f,) = _findings(builder.build(tmp_path / "run"))
    # GPU idle inside the calls: cudaMalloc 20-40 (20 µs) + cudaFree 900-910 (10) + the second
    # cudaFree 915-945 (30) = 60 µs; the two frees are one burst (5 µs apart) that waited
    # 300 µs for bwd; after it the GPU idles 945 -> 1000 (step end): refill min(55, 300) = 55.
    # 115 µs per step = 11.5%
    assert (f.id, f.category) == ("memory_pressure", "memory")
    assert f.est_saving_ms == pytest.approx(0.115) and f.est_saving_pct == pytest.approx(11.5)
    assert f.severity is Severity.WARNING and f.confidence is Confidence.HIGH
    assert f.title == ("Allocator churn: 3 device alloc/free calls per step cost ~0.115 ms "
                       "per step")
    assert f.evidence[0] == ("3 allocator calls per step (cudaFree x2, cudaMalloc x1), 0.360 ms "
                             "per step in them")
    assert f.evidence[1] == ("the GPU was idle for 0.060 ms per step of that time, and 0.055 ms "
                             "per step after synchronising frees until the host had launched "
                             "new work")
    assert f.evidence[2] == ("2 synchronising frees per step outside any framework op: an "
                             "explicit cache release such as torch.cuda.empty_cache()")
    assert f.evidence[3] == "called from: aten::empty"
    assert f.where.steps == (0, 1, 2) and (f.where.start_ns, f.where.end_ns) == (20_000, 945_000)
    assert "empty_cache" in f.fix.pytorch and "expandable_segments:True" in f.fix.pytorch
    assert "cuda_malloc_async" in f.fix.tensorflow
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION" in f.fix.jax


def test_warm_up_allocations_are_not_churn(builder: Any, tmp_path: Path) -> None:
    # allocations in one step of three: the allocator warming up, not a per-step cost
    _churn(builder, churn_steps=(0,))
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_near_capacity_without_churn_is_info(builder: Any, tmp_path: Path) -> None:
    _churn(builder, churn_steps=())
    builder.memory(5, 1 << 30, 70 * GB, 75 * GB)
    builder.memory(500, 1 << 30, 78 * GB, 80 * GB)
    (f,) = _findings(builder.build(tmp_path / "run"))
    # 80e9 of 85.0e9 B (the H100's total_memory) = 94%
    assert f.severity is Severity.INFO and f.est_saving_ms == 0.0
    assert f.title == "Device memory 94% full (80 GB of 85 GB): little headroom"
    assert f.evidence == (("peak device memory 80 GB of 85 GB (94%) on device 0, from "
                          "memory_events; allocated peak 78 GB, so 2 GB is cached but unused "
                          "(fragmentation or freed blocks)"),)
    assert f.method.startswith("not estimated")
    assert "activation checkpointing" in f.fix.pytorch


def test_near_capacity_from_samples_adds_to_the_churn_finding(builder: Any,
                                                             tmp_path: Path) -> None:
    _churn(builder)
    builder.sample("gpu.memory_used_bytes", 100, 82 * GB, device=0)
    (f,) = _findings(builder.build(tmp_path / "run"))
    assert f.est_saving_ms == pytest.approx(0.115)
    assert ("peak device memory 82 GB of 85 GB (96%) on device 0, from samples"
            in f.evidence)


def test_silent_when_memory_is_well_used_and_no_churn(builder: Any, tmp_path: Path) -> None:
    _churn(builder, churn_steps=())
    builder.memory(5, 1 << 30, 40 * GB, 50 * GB)
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_skipped_without_any_memory_data(builder: Any, tmp_path: Path) -> None:
    # no API calls, no memory events, no memory samples (host ops only)
    for i in range(3):
        builder.step(i * 1000, 1000)
        builder.cpu_op("aten::add", i * 1000 + 10, 900)
    (s,) = _advice(builder.build(tmp_path / "run")).skipped
    assert s.id == "memory_pressure" and "memory_events" in s.reason


def test_h200_empty_cache_matches_the_measured_saving(tmp_path: Path) -> None:
    # torch.cuda.empty_cache() after every step; measured: removing it saved 1.12 ms per step
    run = Run(import_traces([DATA / "h200_empty_cache.pt.trace.json.gz"], tmp_path / "run"))
    (f,) = _findings(run)
    assert f.est_saving_ms == pytest.approx(1.12, rel=0.30)
    assert f.est_saving_ms == pytest.approx(1.24, abs=0.01)
    assert f.title.startswith("Allocator churn: 26 device alloc/free calls per step")
    assert any("torch.cuda.empty_cache()" in e for e in f.evidence)


def test_fixtures_stay_silent(tmp_path: Path) -> None:
    # gpt: a warm caching allocator (no cudaMalloc in the steps), 3.4 GB of 85 GB reserved;
    # alexnet: its cudaMalloc/cudaFree are the first iteration's (one step only: not churn)
    for name in ("gpt_bf16_adamw.pt.trace.json.gz",
                 "critical_path_alexnet_benchmark_result_2869224_1695835535_trace.json.gz"):
        run = Run(import_traces([DATA / name], tmp_path / name[:12]))
        assert _findings(run) == ()
