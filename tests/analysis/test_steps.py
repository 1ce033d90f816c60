from __future__ import annotations

from pathlib import Path

from builder import TraceBuilder
from stepscope.analysis.graph import rank_graph
from stepscope.analysis.steps import detect_steps


def test_steps_from_table_sorted_and_clipped(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(200, 100, step=2).step(0, 120, step=0).step(100, 100, step=1)  # step 0 overlaps step 1
    info = detect_steps(rank_graph(b.build(tmp_path / "r"), 0))
    assert info.source == "profiler_step"
    assert [(s.number, s.start_ns, s.end_ns) for s in info.steps] == [
        (0, 0, 100_000), (1, 100_000, 200_000), (2, 200_000, 300_000)]


def test_steps_from_annotations_named_like_steps(tmp_path: Path) -> None:
    b = TraceBuilder()
    for i in range(3):
        b.nvtx(f"train_step {i}", i * 100, 90)
    b.nvtx("forward", 5, 10)  # not a step name
    info = detect_steps(rank_graph(b.build(tmp_path / "r"), 0))
    assert info.source == "nvtx"
    assert [s.wall_ns for s in info.steps] == [90_000] * 3


def test_periodicity_fallback(tmp_path: Path) -> None:
    b = TraceBuilder()
    # 4 steps of [embed, gemm, gemm, relu, opt] with a 50 µs gap before each step
    t = 0.0
    for _ in range(4):
        t += 50
        for name in ("embed", "gemm", "gemm", "relu", "opt"):
            b.kernel(name, t, 10)
            t += 12
    info = detect_steps(rank_graph(b.build(tmp_path / "r"), 0))
    assert info.source == "periodicity"
    # boundaries at the 'embed' kernels (after the 50 µs gap): 3 full periods of 50+5*12=110 µs
    assert len(info.steps) == 3
    assert all(s.wall_ns == 110_000 for s in info.steps)
    assert info.steps[0].start_ns == 50_000


def test_periodicity_of_one_process_driving_several_gpus(tmp_path: Path) -> None:
    # one process, two GPUs running the same 5 kernels per step; their kernels interleave in
    # another order every step (device 1 a little early, then late), so the merged sequence
    # does not repeat; each device's does
    b = TraceBuilder()
    t = 0.0
    for i in range(8):
        t += 50
        skew = 3.0 if i % 3 == 0 else -3.0 if i % 3 == 1 else 7.0
        for j, name in enumerate(("embed", "gemm", "gemm", "relu", "opt")):
            b.kernel(name, t + 12 * j, 10, device=0)
            b.kernel(name, t + 12 * j + skew + 0.5, 10, device=1, stream=8)
        t += 60
    info = detect_steps(rank_graph(b.build(tmp_path / "r", devices=2), 0))
    assert info.source == "periodicity"
    assert len(info.steps) == 7 and all(s.wall_ns == 110_000 for s in info.steps)


def test_whole_trace_fallback(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.kernel("a", 10, 5).kernel("b", 30, 5)
    info = detect_steps(rank_graph(b.build(tmp_path / "r"), 0))
    assert info.source == "whole_trace"
    assert [(s.start_ns, s.end_ns) for s in info.steps] == [(10_000, 35_000)]


def test_recorded_steps_say_which_hook_made_them(tmp_path: Path) -> None:
    from stepscope.store.manifest import SourceInfo

    b = TraceBuilder()
    for i in range(3):
        b.step(i * 100, 100, source="hook")
    settings = {"ranks": {"rank0": {"host": {"samplers": {"steps": {
        "hook": "torch.optim.Optimizer.step"}}}}}}
    info = detect_steps(rank_graph(b.build(tmp_path / "r", settings=settings,
                                source=SourceInfo(kind="capture")), 0))
    assert info.detail == "3 from the torch.optim.Optimizer.step hook"


def test_recorded_run_without_steps_says_no_hook_fired(tmp_path: Path) -> None:
    from stepscope.store.manifest import SourceInfo

    b = TraceBuilder()
    t = 0.0
    for _ in range(4):  # as in test_periodicity_fallback: 3 steps of 5 kernels
        t += 50
        for name in ("embed", "gemm", "gemm", "relu", "opt"):
            b.kernel(name, t, 10)
            t += 12
    info = detect_steps(rank_graph(b.build(tmp_path / "r", source=SourceInfo(kind="capture")), 0))
    assert info.detail == ("3 recovered from the periodicity of the GPU work (no step hook "
                           "fired; 5 kernels per step, 100% of kernels repeat)")
    imported = detect_steps(rank_graph(b.build(tmp_path / "i"), 0))  # an imported trace: no hooks to fire
    assert imported.detail == ("3 recovered from the periodicity of the GPU work (5 kernels "
                               "per step, 100% of kernels repeat)")


def test_recorded_cpu_run_without_steps_is_one_step(tmp_path: Path) -> None:
    from stepscope.store.manifest import SourceInfo

    b = TraceBuilder()
    b.input_wait(0, 100).cpu_op("aten::mm", 100, 50)
    info = detect_steps(rank_graph(b.build(tmp_path / "r", devices=0, source=SourceInfo(kind="capture")), 0))
    assert info.source == "whole_trace"
    assert info.detail == ("1: no step hook fired and no GPU work to find steps in, so the whole "
                           "window is one step")
