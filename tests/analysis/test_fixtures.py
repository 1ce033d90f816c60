"""The figures of ../shared/fixtures/README.md, reproduced through import + analyze.

That README computed them with a plain script over the JSON: GPU busy = union of
kernel, memcpy and memset intervals inside ProfilerStep#N ranges; wall = sum of
the ProfilerStep durations. Those are stepscope's *marker* figures. Its step
windows are anchored to the GPU work each step issued (analysis.steps.anchor_to_gpu),
where the GPU lags the host (then the figures legitimately differ: see the H200 test
below); on these traces the GPU keeps up and the windows are the markers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stepscope.analysis import analyze
from stepscope.analysis.summary import rank_summary
from stepscope.importers import import_traces
from stepscope.store import Run

DATA = Path(__file__).parent.parent / "data"


def run_of(tmp_path: Path, *names: str) -> Run:
    return Run(import_traces([DATA / n for n in names], tmp_path / "run"))


# file, steps, wall ms, GPU busy in steps ms, kernels
CASES = [
    ("gpt_bf16_adamw.pt.trace.json.gz", 3, 119.5, 36.3, 1311),
    ("cnn_fp32_sync.pt.trace.json.gz", 3, 38.0, 35.4, 288),
    ("nccl_parser_config_nccl_data.json.gz", 3, 667, 157.5, 2700),
    ("amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz", 2, None, None, 14),
    ("triton_example_triton_example.json.gz", 1, None, None, 1),
]


@pytest.mark.parametrize("name,steps,wall,busy,kernels", CASES)
def test_fixture_figures(tmp_path: Path, name: str, steps: int, wall: float | None,
                         busy: float | None, kernels: int) -> None:
    a = analyze(run_of(tmp_path, name))
    s = rank_summary(a.ranks[0])
    assert s.step_source == "profiler_step"
    assert s.steps == steps
    assert s.kernels == kernels
    if wall is not None:
        assert s.marker_wall_ms == pytest.approx(wall, abs=0.5 if wall > 100 else 0.05)
        assert s.wall_ms == pytest.approx(wall, rel=0.02)  # windows: same steps, shifted
    if busy is not None:
        assert s.gpu_busy_in_markers_ms == pytest.approx(busy, abs=0.05 if busy < 100 else 0.5)
        assert s.gpu_busy_in_steps_ms == pytest.approx(busy, rel=0.02)
    for per_step, st in zip(a.ranks[0].breakdown.per_step, a.ranks[0].steps.steps):
        assert sum(per_step.values()) == st.span_ns


def test_two_ranks(tmp_path: Path) -> None:
    run = run_of(tmp_path, "trace_filter_sampled_rank-0.json.gz", "trace_filter_sampled_rank-1.json.gz")
    a = analyze(run)
    r0, r1 = (rank_summary(ra) for ra in a.ranks)
    # README: rank 0: 2 steps, 1230 ms wall, GPU busy 548 ms, 1154 kernels;
    #         rank 1: 2 steps, 1239 ms, GPU busy 580 ms, 1104 kernels
    assert (r0.rank, r0.steps, r0.kernels) == (0, 2, 1154)
    assert (r1.rank, r1.steps, r1.kernels) == (1, 2, 1104)
    assert r0.marker_wall_ms == pytest.approx(1230, abs=1)
    assert r1.marker_wall_ms == pytest.approx(1239, abs=1)
    assert r0.gpu_busy_in_markers_ms == pytest.approx(548, abs=1)
    assert r1.gpu_busy_in_markers_ms == pytest.approx(580, abs=1)


def test_gpu_bound_run_with_host_far_ahead(tmp_path: Path) -> None:
    """H200 bf16 MLP with no sync in the loop (tests/data/PROVENANCE.md): the host's
    ProfilerStep markers last ~2.8 ms while the GPU needs ~38 ms per step. The
    windows follow the GPU work, so the breakdown shows a GPU-bound step."""
    a = analyze(run_of(tmp_path, "h200_healthy_bf16.pt.trace.json.gz"))
    ra = a.ranks[0]
    assert ra.steps.anchored
    assert max(st.wall_ns for st in ra.steps.steps) < 3_000_000
    assert min(st.span_ns for st in ra.steps.steps) > 37_000_000
    s = rank_summary(ra)
    assert s.gpu_busy_in_markers_ms == 0.0
    assert s.breakdown_ms["compute"] / sum(s.breakdown_ms.values()) > 0.97


def test_no_profiler_steps_falls_back(tmp_path: Path) -> None:
    a = analyze(run_of(tmp_path, "critical_path_alexnet_benchmark_result_2869224_1695835535_trace.json.gz"))
    ra = a.ranks[0]
    # no ProfilerStep ranges: the step source is one of the fallbacks, never profiler_step
    assert ra.steps.source in ("annotation", "periodicity", "whole_trace")
    assert ra.kernel_count == 79
    assert ra.steps.detail


def test_cpu_only(tmp_path: Path) -> None:
    a = analyze(run_of(tmp_path, "cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"))
    s = rank_summary(a.ranks[0])
    assert (s.steps, s.kernels, s.gpu_busy_ms) == (1, 0, 0.0)
    assert a.ranks[0].breakdown.per_step[0]["compute"] == 0


def test_multi_stream_event_sync(tmp_path: Path) -> None:
    run = run_of(tmp_path, "critical_path_cuda_event_sync_multi_stream_event_sync_trace.json.gz")
    assert analyze(run).ranks[0].kernel_count == 3
