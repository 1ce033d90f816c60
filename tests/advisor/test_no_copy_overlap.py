"""no_copy_overlap: copies serialised with compute (builder times in µs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stepscope.advisor.base import Finding, Severity
from stepscope.advisor.engine import advise
from stepscope.advisor.rules.no_copy_overlap import RULE
from stepscope.analysis import analyze
from stepscope.importers import import_traces
from stepscope.model.confidence import Confidence
from stepscope.store.run import Run

DATA = Path(__file__).resolve().parents[1] / "data"


def _findings(run: Run) -> tuple[Finding, ...]:
    return advise(analyze(run), [RULE]).findings


def _serial(b: Any, *, src: str = "pinned", stream: int = 7, copy_at: float = 20,
            gemm_launch: float = 15) -> None:
    """Per 1000 µs step: ``batch.to("cuda", non_blocking=True)``: cudaMemcpyAsync 5-10, the
    6 MB pinned copy runs ``copy_at`` + 150 µs (40 GB/s); the gemm, launched at
    ``gemm_launch`` (5 µs call), runs 170-870 on the same stream."""
    for i in range(3):
        t0 = i * 1000
        b.step(t0, 1000)
        b.cpu_op("aten::to", t0 + 4, 8)
        b.memcpy("HtoD", t0 + copy_at, 150, 6_000_000, src=src, stream=stream,
                 api=("cudaMemcpyAsync", t0 + 5, 5))
        b.kernel("gemm", t0 + 170, 700, stream=7, launch=(t0 + gemm_launch, 5))


def test_fires_when_kernels_queue_behind_the_copy(builder: Any, tmp_path: Path) -> None:
    _serial(builder)
    (f,) = _findings(builder.build(tmp_path / "run"))
    # the gemm's launch ended at 20, before the copy ended (170): it waited. 150 µs with no
    # kernel; 700 µs of compute to hide it under: saving 150 µs = 15%
    assert (f.id, f.category) == ("no_copy_overlap", "memcpy")
    assert f.est_saving_ms == pytest.approx(0.15) and f.est_saving_pct == pytest.approx(15.0)
    assert f.severity is Severity.WARNING and f.confidence is Confidence.HIGH and f.note == ""
    assert f.title == ("6 MB of copies per step run with no compute under them (0.150 ms "
                       "exposed): prefetching on a copy stream saves ~0.150 ms per step")
    assert f.evidence[0] == ("1 HtoD copy per step (6 MB, 0.150 ms at 40.0 GB/s) on the compute "
                             "stream (7)")
    assert f.evidence[1].startswith("0.150 ms per step of them overlap no kernel")
    assert f.evidence[2] == "0.700 ms of compute per step to hide them under"
    assert f.evidence[3] == "issued from: aten::to"
    assert f.where.steps == (0, 1, 2) and (f.where.start_ns, f.where.end_ns) == (20_000, 170_000)
    assert "wait_stream" in f.fix.pytorch and "record_stream" in f.fix.pytorch
    assert "prefetch_to_device" in f.fix.tensorflow and "device_put" in f.fix.jax


def test_saving_is_capped_by_the_compute_to_hide_under(builder: Any, tmp_path: Path) -> None:
    # 150 µs of copy, 60 µs of compute per step: only 60 µs can hide
    for i in range(3):
        t0 = i * 1000
        builder.step(t0, 1000)
        builder.memcpy("HtoD", t0 + 20, 150, 6_000_000, api=("cudaMemcpyAsync", t0 + 5, 5))
        builder.kernel("k", t0 + 170, 60, launch=(t0 + 15, 5))
    (f,) = _findings(builder.build(tmp_path / "run"))
    assert f.est_saving_ms == pytest.approx(0.06)


def test_fires_for_a_readback_the_host_waits_on(builder: Any, tmp_path: Path) -> None:
    # a 2 MB DtoH into pinned memory at the end of the step (100 µs), the host waiting in
    # cudaStreamSynchronize 850-965: on the critical path; 800 µs of compute
    for i in range(3):
        t0 = i * 1000
        builder.step(t0, 1000)
        builder.kernel("k", t0 + 50, 800, launch=(t0 + 40, 5))
        builder.memcpy("DtoH", t0 + 860, 100, 2_000_000, dst="pinned",
                       api=("cudaMemcpyAsync", t0 + 845, 4))
        builder.sync("cudaStreamSynchronize", t0 + 850, 115)
    (f,) = _findings(builder.build(tmp_path / "run"))
    assert f.est_saving_ms == pytest.approx(0.10)
    assert f.evidence[0].startswith("1 DtoH copy per step (2 MB, 0.100 ms at 20.0 GB/s)")


def test_silent_when_the_copy_is_prefetched(builder: Any, tmp_path: Path) -> None:
    # the copy runs on stream 9 under the previous gemm (issued early): nothing exposed
    for i in range(3):
        t0 = i * 1000
        builder.step(t0, 1000)
        builder.kernel("gemm", t0 + 5, 990, launch=(t0 + 1, 3))
        builder.memcpy("HtoD", t0 + 100, 150, 6_000_000, stream=9,
                       api=("cudaMemcpyAsync", t0 + 10, 5))
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_silent_when_nothing_waits_for_the_copy(builder: Any, tmp_path: Path) -> None:
    # the host launches the gemm after the copy has ended (launch 300-305, copy ended at
    # 170): the copy sat in GPU time the host left idle anyway
    _serial(builder, gemm_launch=300)
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_pageable_copies_are_left_to_pageable_memcpy(builder: Any, tmp_path: Path) -> None:
    _serial(builder, src="pageable")
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_h200_serial_copy_matches_the_measured_saving(tmp_path: Path) -> None:
    # 128 MiB pinned copy per step on the compute stream, the host far ahead of the GPU (no
    # sync per step: ProfilerStep windows of ~3.4 ms while the GPU step is ~128 ms). Copies
    # and kernels belong to the step that issued them. Measured: prefetching on a side
    # stream saved 2.52 ms per step
    run = Run(import_traces([DATA / "h200_serial_copy.pt.trace.json.gz"], tmp_path / "run"))
    (f,) = _findings(run)
    assert f.est_saving_ms == pytest.approx(2.52, rel=0.30)
    assert f.est_saving_ms == pytest.approx(2.42, abs=0.01)
    # severity from the device-side step (2.4 / ~128 ms = 1.9%), not the host window: the
    # analysis anchors the step windows to the GPU work (analysis.steps.anchor_to_gpu), so
    # the rule's own host-ahead correction has nothing left to correct
    assert f.severity is Severity.INFO
    assert f.est_saving_pct == pytest.approx(1.9, abs=0.1)
    assert f.note == ""


def test_fixtures_stay_silent(tmp_path: Path) -> None:
    # cnn: its big copies are pageable (pageable_memcpy's); gpt: 65 kB pinned copies, 4 µs each
    for name in ("cnn_fp32_sync.pt.trace.json.gz", "gpt_bf16_adamw.pt.trace.json.gz"):
        run = Run(import_traces([DATA / name], tmp_path / name.split(".")[0]))
        assert _findings(run) == ()
