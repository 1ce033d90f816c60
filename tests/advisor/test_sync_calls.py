"""sync_calls: GPU idle caused by host-device syncs (builder times in µs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stepscope.advisor.base import Finding, Severity
from stepscope.advisor.engine import advise
from stepscope.advisor.rules import RULES
from stepscope.advisor.rules.sync_calls import RULE
from stepscope.analysis import analyze
from stepscope.importers import import_traces
from stepscope.model.confidence import Confidence
from stepscope.store.run import Run

DATA = Path(__file__).resolve().parents[1] / "data"
MINE = ("input_bound", "host_bound", "step_gaps", "launch_bound", "sync_calls")


def _findings(run: Run) -> tuple[Finding, ...]:
    return advise(analyze(run), [RULE]).findings


def _item_each_step(b: Any, steps: int = 3) -> None:
    """Per 1000 µs step: kernel A 10-610; ``loss.item()`` in train.py: DtoH copy call 22-25
    (the 4-byte copy runs 615-620 on the GPU, into pinned memory: the call does not block),
    cudaStreamSynchronize 26-625; the host then works until it launches kernel B (695-700),
    which runs 705-985."""
    for i in range(steps):
        t0 = i * 1000
        b.step(t0, 1000)
        b.cpu_op("train.py(42): train_step", t0, 990, kind="python")
        b.kernel("kernel_a", t0 + 10, 600, launch=(t0 + 2, 5))
        b.cpu_op("aten::item", t0 + 20, 620).cpu_op("aten::_local_scalar_dense", t0 + 21, 618)
        b.memcpy("DtoH", t0 + 615, 5, 4, dst="pinned", api=("cudaMemcpyAsync", t0 + 22, 3))
        b.sync("cudaStreamSynchronize", t0 + 26, 599)
        b.kernel("kernel_b", t0 + 705, 280, launch=(t0 + 695, 5))


def test_fires_with_blocked_idle_plus_what_follows(builder: Any, tmp_path: Path) -> None:
    _item_each_step(builder)
    (f,) = _findings(builder.build(tmp_path / "run"))
    # idle while blocked: 610-615 and 620-625 = 10 µs per step. The GPU worked 593 µs during
    # the point (22-625): that much idle after it is the sync's, up to the next step's sync:
    # 625-705 (80 µs), 985-1010 (25 µs, across the boundary). The first step's 0-10 follows
    # the sync of a step before the trace (same head start assumed). Per step: 10 + 80 + 25
    # = 115 µs = 11.5% of 1 ms
    assert (f.id, f.category) == ("sync_calls", "sync")
    assert f.est_saving_ms == pytest.approx(0.115) and f.est_saving_pct == pytest.approx(11.5)
    assert f.severity is Severity.WARNING and f.confidence is Confidence.HIGH and f.note == ""
    assert f.title == ("1.0 host-device syncs per step (train.py(42): train_step) idle the GPU "
                       f"{0.115:.2f} ms per step (12%)")
    assert f.evidence[0] == ("1.0 sync points per step (scalar read x1.0); the host is blocked "
                             "0.60 ms per step")
    assert f.evidence[1] == ("GPU idle while the host is blocked: 0.010 ms per step; after the "
                             "syncs, until the host is ahead of the GPU again: 0.10 ms per step")
    assert f.evidence[2] == ("call site train.py(42): train_step: scalar read via "
                             "cudaMemcpyAsync + cudaStreamSynchronize, 1.0 per step, blocked "
                             "0.60 ms per step")
    assert "up to the GPU busy time during that sync" in f.method
    assert f.where.call_sites == ("train.py(42): train_step",) and f.where.rank == 0
    assert len(f.where.steps) == 3 and f.where.start_ns is not None
    assert ".item()" in f.fix.pytorch and "set_sync_debug_mode" in f.fix.pytorch
    assert "block_until_ready" in f.fix.jax and ".numpy()" in f.fix.tensorflow


def test_drain_is_capped_by_the_head_start(builder: Any, tmp_path: Path) -> None:
    # the GPU was idle when the host synced (kernel 10-100, sync 200-210): waiting cost 10 µs
    # of idle and gave away no head start, so the 400 µs of host work after it is not the
    # sync's (it belongs to host_bound)
    for i in range(3):
        t0 = i * 1000
        builder.step(t0, 1000)
        builder.kernel("kernel_a", t0 + 10, 90, launch=(t0 + 2, 5))
        builder.sync("cudaDeviceSynchronize", t0 + 200, 10)
        builder.kernel("kernel_b", t0 + 620, 370, launch=(t0 + 610, 5))
    run = builder.build(tmp_path / "run")
    byid = {f.id: f for f in advise(analyze(run), [r for r in RULES if r.id in MINE]).findings}
    assert "sync_calls" not in byid  # 10 µs per step: under 0.05 ms
    # idle 100-620 minus the 10 µs blocked: 510 µs of host time (505 with no host event)
    assert byid["host_bound"].est_saving_ms == pytest.approx(0.51)
    assert byid["host_bound"].confidence is Confidence.MEDIUM


def test_rules_never_claim_the_same_idle_time(builder: Any, tmp_path: Path) -> None:
    _item_each_step(builder)
    run = builder.build(tmp_path / "run")
    a = analyze(run)
    found = advise(a, [r for r in RULES if r.id in MINE]).findings
    bd = a.ranks[0].breakdown.mean_ms
    idle = sum(bd[c] for c in ("input_wait", "sync", "launch", "host", "idle"))
    assert sum(f.est_saving_ms for f in found) <= idle + 1e-9


def test_silent_on_a_cheap_sync(builder: Any, tmp_path: Path) -> None:
    # GPU-bound steps; a stream sync while the GPU works, the next kernel 3 µs after it
    for i in range(3):
        t0 = 1000 + i * 1000
        builder.step(t0, 1000)
        builder.kernel("gemm", t0, 600, launch=(t0 - 500, 5))
        builder.sync("cudaStreamSynchronize", t0 + 100, 500)
        builder.kernel("gemm", t0 + 603, 390, launch=(t0 + 600, 2))
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_silent_on_a_healthy_run(builder: Any, tmp_path: Path) -> None:
    for i in range(3):
        t0 = 1000 + i * 1000
        builder.step(t0, 1000)
        builder.kernel("gemm", t0 + 10, 490, launch=(t0 - 500, 5))
        builder.kernel("gemm", t0 + 500, 490, launch=(t0 - 490, 5))
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_cnn_fixture_item_and_pageable_copies(tmp_path: Path) -> None:
    # loss.item() each step (aten::item > aten::_local_scalar_dense, blocked ~7.3 ms while
    # the GPU finishes the step) and two pageable input copies: 3 sync points per step,
    # 7.79 ms blocked; 0.35 ms of GPU idle while blocked, and all 0.51 ms of idle after them
    # (x 0.74 profiler correction): 0.35 + 0.38 = 0.72 ms; the GPU is 93% busy, so the finding
    # stays info. The profiler's cost of the 418 host events per step (record_shapes) is
    # estimated at 1.8 ms at this trace's host clock, 14% of the traced step: medium confidence
    # in host timings, with the note (advisor.overhead)
    run = Run(import_traces([DATA / "cnn_fp32_sync.pt.trace.json.gz"], tmp_path / "run"))
    (f,) = _findings(run)
    assert f.est_saving_ms == pytest.approx(0.725, abs=0.01)
    assert f.est_saving_pct == pytest.approx(5.73, abs=0.05)
    assert f.severity is Severity.INFO and f.confidence is Confidence.MEDIUM
    assert f.note.startswith("traced with torch.profiler with record_shapes: the profiler's "
                             "cost of the 418 host events recorded per step is estimated at "
                             "1.8 ms per step (14% of the traced step)")
    assert "aten::item > aten::_local_scalar_dense" in f.title
    assert f.where.call_sites == ("aten::item > aten::_local_scalar_dense",
                                  "aten::to > aten::copy_")
    assert f.evidence[0] == ("3.0 sync points per step (scalar read x1.0, blocking copy x2.0); "
                             "the host is blocked 7.79 ms per step")
    assert f.evidence[2].startswith("call site aten::item > aten::_local_scalar_dense: scalar "
                                    "read via cudaMemcpyAsync + cudaStreamSynchronize, 1.0 per "
                                    "step, blocked 7.31 ms per step")
    # fixes in the order of blocked time: the scalar read first, then the pageable copies
    assert f.fix.pytorch.startswith("keep running sums on the device") and "pin_memory" in \
        f.fix.pytorch


def test_gpt_fixture_has_no_sync_in_its_steps(tmp_path: Path) -> None:
    run = Run(import_traces([DATA / "gpt_bf16_adamw.pt.trace.json.gz"], tmp_path / "run"))
    assert _findings(run) == ()


def test_dynamic_loss_scaling_sync_is_named(builder: Any, tmp_path: Path) -> None:
    # fp16 with GradScaler: the scaler's found_inf check reads a device scalar every step
    for i in range(3):
        t0 = i * 1000
        builder.step(t0, 1000)
        builder.kernel("kernel_a", t0 + 10, 600, launch=(t0 + 2, 5))
        builder.cpu_op("aten::_amp_foreach_non_finite_check_and_unscale_", t0 + 20, 620)
        builder.cpu_op("aten::item", t0 + 21, 618).cpu_op("aten::_local_scalar_dense", t0 + 22, 616)
        builder.memcpy("DtoH", t0 + 615, 5, 4, dst="pinned", api=("cudaMemcpyAsync", t0 + 23, 3))
        builder.sync("cudaStreamSynchronize", t0 + 27, 598)
        builder.kernel("kernel_b", t0 + 705, 280, launch=(t0 + 695, 5))
    (f,) = _findings(builder.build(tmp_path / "run"))
    assert any("dynamic loss scaling" in e for e in f.evidence)
    assert f.fix.pytorch.startswith("the sync comes from fp16 dynamic loss scaling")
    assert "mixed_bfloat16" in f.fix.tensorflow


def test_plain_item_sync_does_not_mention_loss_scaling(builder: Any, tmp_path: Path) -> None:
    _item_each_step(builder)
    (f,) = _findings(builder.build(tmp_path / "run"))
    assert not any("loss scaling" in e for e in f.evidence)
    assert "loss scaling" not in f.fix.pytorch
