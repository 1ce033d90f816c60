"""Two baselines of the planted suite traced with ``jax.profiler`` on the project's H100
(tests/data/xspace/PROVENANCE.md): 8 steps in ``StepTraceAnnotation``, no wait per step.
Counts from the protobuf (``GPU:0`` stream lines); measured savings from the same run's untraced
timing (baseline and fix interleaved in one process, and program.py's own loop)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stepscope.advisor.base import Finding
from stepscope.advisor.engine import advise
from stepscope.analysis import analyze
from stepscope.importers import import_traces
from stepscope.store.run import Run

X = Path(__file__).parent.parent.parent / "data" / "xspace"


def _advice(tmp_path: Path, name: str) -> tuple[Run, Any, tuple[Finding, ...]]:
    run = Run(import_traces([X / name], tmp_path / "run"))
    analysis = analyze(run)
    return run, analysis.ranks[0], advise(analysis).findings


def test_jit_fp32_highest_reads_no_tensor_cores_with_its_saving(tmp_path: Path) -> None:
    run, ra, findings = _advice(tmp_path, "jax_jit_fp32_highest_h100.xplane.pb.gz")
    # protobuf: one stream line, 160 kernels (8 steps x 20), none of them copies
    assert run.table("kernels").num_rows == 160
    assert len(ra.steps.steps) == 8 and ra.steps.anchored  # the markers hold only dispatch
    serious = [f for f in findings if f.severity.value in ("warning", "critical")]
    assert serious[0].id == "no_tensor_cores"
    # measured untraced: 11.08 -> 2.10 ms with TF32 (81.1%); within the +-30% target
    assert serious[0].est_saving_pct == pytest.approx(81.1, rel=0.30)


def test_host_callback_kernels_on_the_copying_stream_and_the_callback_named(
        tmp_path: Path) -> None:
    run, ra, findings = _advice(tmp_path, "jax_host_callback_h100.xplane.pb.gz")
    # protobuf: "Stream #14(MemcpyD2H,Compute,Memset)" holds 232 events: 200 kernels, 8
    # MemcpyD2H, 24 "Memset 0"; four "Stream #1x(MemcpyD2H)" lines hold 4 copies each
    assert run.table("kernels").num_rows == 200
    assert run.table("memcpy").num_rows == 8 + 16
    assert run.table("memset").num_rows == 24
    top = next(f for f in findings if f.severity.value in ("warning", "critical"))
    assert top.id == "host_bound" and "debug_callback" in top.title
    # measured, program.py's own loop: 6.54 -> 2.61 ms (60.1%)
    assert top.est_saving_pct == pytest.approx(60.1, rel=0.30)
