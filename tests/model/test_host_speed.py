"""The capture's cost in the step model: CUPTI's per-call cost on a recorded run
(``profiler_cost.step_costs``), and each traced thread's dispatch taken at its typical speed
(``stepmodel.host_speed``, applied by ``profiler.untraced``). Hand-built models and synthetic
runs with hand-computed answers."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from tests.model.test_stepmodel import model

from stepscope.analysis import analyze
from stepscope.analysis.graph import run_graph
from stepscope.model.profiler_cost import (
    API_NS,
    CAPTURE_API_NS,
    LAUNCH_BASE_NS,
    LAUNCH_SPAN_NS,
    MAX_SCALE,
    MIN_SCALE,
    OP_NS,
    PYTHON_NS,
    SHAPES_NS,
    EventCosts,
    costs_for,
    host_scale,
    step_costs,
)
from stepscope.model.stepmodel import build_step_model, replay
from stepscope.model.stepmodel.host_speed import launch_reference, thread_speed
from stepscope.model.stepmodel.profiler import untraced
from stepscope.model.stepmodel.steps import HostKind, ProfilerCost
from stepscope.store.manifest import SourceInfo

L, K = HostKind.LAUNCH, HostKind.BLOCK


def _graph(kind: str, backends: tuple[str, ...] = ()) -> Any:
    ranks = {f"rank{i}": {"gpu": {"backend": b}} for i, b in enumerate(backends)}
    return SimpleNamespace(manifest=SimpleNamespace(
        source=SimpleNamespace(kind=kind, details={}), settings={"ranks": ranks}))


REF_US = (LAUNCH_BASE_NS + LAUNCH_SPAN_NS) / 1000  # the launch call the constants hold at


def test_step_costs_per_source(tmp_path: Path) -> None:
    kineto = run_graph(_launches(tmp_path, "kineto", [REF_US] * 3))
    assert step_costs(kineto, kineto.all) == costs_for(kineto, kineto.all)
    nothing: Any = None  # a recorded run's costs read no table
    assert step_costs(_graph("capture", ("cupti",)), nothing) == EventCosts(0, 0, CAPTURE_API_NS, 0)
    assert step_costs(_graph("capture"), nothing) == EventCosts(0, 0, CAPTURE_API_NS, 0)
    torch_run = _launches(tmp_path / "t", "capture", [REF_US] * 3,
                          backends=("cupti", "torch"))
    tg = run_graph(torch_run)
    torch_backend = step_costs(tg, tg.all)
    assert torch_backend is not None and torch_backend.op_ns == OP_NS + SHAPES_NS
    assert torch_backend.api_ns == API_NS and torch_backend.memory_ns == 0
    assert step_costs(_graph("xspace"), nothing) is None
    assert step_costs(_graph("nsys"), nothing) is None
    assert costs_for(_graph("capture", ("cupti",)), nothing) is None  # findings' costs unchanged


def _launches(tmp_path: Path, kind: str, launch_us: list[float],
              backends: tuple[str, ...] = ()) -> Any:
    """One 1 ms step of launches taking ``launch_us`` each on the host, of a run whose source
    is ``kind``."""
    from builder import TraceBuilder

    b = TraceBuilder()
    b.step(0.0, 1000, step=0)
    for j, d in enumerate(launch_us):
        b.kernel("k", 30 + 40 * j + d, 5, launch=(30 + 40 * j, d))
    ranks = {f"rank{i}": {"gpu": {"backend": x}} for i, x in enumerate(backends)}
    return b.build(tmp_path / "r.stepscope", source=SourceInfo(kind=kind),
                   settings={"ranks": ranks})


def test_torch_profiler_costs_scale_with_the_traces_launch_speed(tmp_path: Path) -> None:
    # ten launches of 3, 4, 5 (seven) and 30 us: the 10th percentile, interpolated between
    # the sorted durations, is 3 + 0.9 x (4 - 3) = 3.9 us, whatever the slow one: the
    # costs are (3.9 - 1.75) / 3.0 = 0.717 of the constants
    durations = [3.0, 4.0] + [5.0] * 7 + [30.0]
    run = run_graph(_launches(tmp_path, "kineto", durations))
    p10 = float(np.percentile(durations, 10)) * 1000
    k = (p10 - LAUNCH_BASE_NS) / LAUNCH_SPAN_NS
    assert p10 == pytest.approx(3_900) and k == pytest.approx(0.7166, abs=1e-3)
    assert host_scale(run.all) == pytest.approx(k)
    c = costs_for(run, run.all)
    assert c is not None and c.scale == pytest.approx(k)
    assert (c.op_ns, c.api_ns, c.python_ns) == (round(k * OP_NS), round(k * API_NS),
                                                round(k * PYTHON_NS))
    # a slower host: its fast launches read 7.75 us, twice the work per event; beyond the
    # bounds the factor stops
    sg = run_graph(_launches(tmp_path / "s", "kineto", [7.75] * 3 + [40]))
    slow = costs_for(sg, sg.all)
    assert slow is not None and slow.scale == pytest.approx(2.0) == MAX_SCALE
    assert (slow.op_ns, slow.api_ns) == (2 * OP_NS, 2 * API_NS)
    assert host_scale(run_graph(_launches(tmp_path / "x", "kineto", [20] * 3)).all) == MAX_SCALE
    assert host_scale(run_graph(_launches(tmp_path / "f", "kineto", [1] * 3)).all) == MIN_SCALE
    # at the reference speed, the constants themselves
    rg = run_graph(_launches(tmp_path / "r", "kineto", [REF_US] * 3))
    ref = costs_for(rg, rg.all)
    assert ref is not None and (ref.op_ns, ref.api_ns, ref.scale) == (OP_NS, API_NS, 1.0)
    # HIP's launch calls are not the clock (it was read on CUDA's): the constants stay
    from builder import TraceBuilder

    b = TraceBuilder()
    b.step(0.0, 1000, step=0)
    for j in range(3):
        b.api("hipLaunchKernel", 30 + 40 * j, 3)
    hip = run_graph(b.build(tmp_path / "h.stepscope", source=SourceInfo(kind="kineto")))
    assert host_scale(hip.all) == 1.0
    # a recorded run's CUPTI cost is its own measurement: not scaled
    rec = run_graph(_launches(tmp_path / "c", "capture", [3, 3, 3], backends=("cupti",)))
    assert step_costs(rec, rec.all) == EventCosts(0, 0, CAPTURE_API_NS, 0)


def test_thread_speed_is_the_typical_launch_over_the_measured_one() -> None:
    # thread 0: five launches of 20 us where the name's median is 10: half speed; thread 1:
    # five of 8 us (faster than typical): 1, never above; thread 2: four launches, too few to
    # tell; a sync and a call without a reference do not count
    thread = np.array([0] * 7 + [1] * 5 + [2] * 4, dtype=np.int64)
    kind = np.array([L] * 5 + [K, L] + [L] * 9, dtype=np.int8)
    names = ["cudaLaunchKernel"] * 5 + ["cudaStreamSynchronize", "cudaOther"] + \
        ["cudaLaunchKernel"] * 9
    own = np.array([20_000] * 5 + [900_000, 70_000] + [8_000] * 5 + [40_000] * 4,
                   dtype=np.int64)
    speed = thread_speed(3, thread, kind, names, own, {"cudaLaunchKernel": 10_000.0})
    assert speed.tolist() == [0.5, 1.0, 1.0]


def test_untraced_scales_dispatch_then_takes_the_cost_out() -> None:
    # launch pre 100 and own 10 at speed 0.5 -> 50 and 5, less the cost (8 and 1); the sync's
    # pre (host work before a wait: the user's CPU code) and the tail are only less their cost
    m = model([(0, L, 100, 10), (0, L, 100, 10), (0, K, 100, 4)],
              [(1, 0, 20, 5), (2, 0, 20, 5)], tail=40, wait={3: -1})
    p = ProfilerCost(pre=np.array([0, 8, 8, 8]), own=np.array([0, 1, 1, 1]),
                     tail=np.array([10]), speed=np.array([0.5]))
    bare = untraced(replace(m, profiler=p))
    assert bare.host.pre.tolist() == [0, 42, 42, 92]
    assert bare.host.own.tolist() == [0, 4, 4, 3]
    assert bare.tail.tolist() == [30]
    # the host is the critical path: 42 + 4 + 42 + 4, the sync (its kernels long done) 92 + 3,
    # the tail 30
    assert replay(bare).step_ns == pytest.approx(42 + 4 + 42 + 4 + 92 + 3 + 30)
    same = untraced(replace(m, profiler=replace(p, speed=None)))
    assert same.host.pre.tolist() == [0, 92, 92, 92]  # without a speed: the cost alone


def test_host_work_over_a_millisecond_before_a_launch_keeps_its_speed() -> None:
    # a sync, then 3 ms of the user's CPU work before the step's first launch, then a second
    # launch after 100 ns of dispatch; the thread ran at half its typical speed: the dispatch
    # (100 -> 50, less 8) and the calls (10 -> 5, less 1) are taken at speed, the 3 ms is not
    # dispatch (``edits.KEEP_HOST_NS``, what a CUDA graph keeps too): only its cost goes
    from stepscope.model.stepmodel.edits import KEEP_HOST_NS

    work = 3 * KEEP_HOST_NS
    m = model([(0, K, 100, 4), (0, L, work, 10), (0, L, 100, 10)],
              [(2, 0, 20, 5), (3, 0, 20, 5)], wait={1: -1})
    p = ProfilerCost(pre=np.array([0, 8, 8, 8]), own=np.array([0, 1, 1, 1]),
                     tail=np.array([0]), speed=np.array([0.5]))
    bare = untraced(replace(m, profiler=p))
    assert bare.host.pre.tolist() == [0, 92, work - 8, 42]
    assert bare.host.own.tolist() == [0, 3, 4, 4]
    # just at the limit it is still dispatch, taken at speed
    edge = model([(0, L, KEEP_HOST_NS, 10)], [(1, 0, 20, 5)])
    p1 = ProfilerCost(pre=np.array([0, 0]), own=np.array([0, 0]), tail=np.array([0]),
                      speed=np.array([0.5]))
    assert untraced(replace(edge, profiler=p1)).host.pre.tolist() == [0, KEEP_HOST_NS // 2]


def _recorded(tmp_path: Path, first_us: float) -> Any:
    """Five 1 ms steps, each six launches of 10 us on the host (the first ``first_us``), 50 us
    apart, each launching a 100 us kernel; recorded by stepscope (CUPTI backend)."""
    from builder import TraceBuilder

    b = TraceBuilder()
    for i in range(5):
        t = i * 1000.0
        b.step(t, 1000, step=i)
        for j in range(6):
            b.kernel("k", t + 20 + 100 * j + 20, 100,
                     launch=(t + 20 + 100 * j, first_us if j == 0 else 10))
    return b.build(tmp_path / "r.stepscope", source=SourceInfo(kind="capture"),
                   settings={"ranks": {"rank0": {"gpu": {"backend": "cupti"}}}})


def test_a_recorded_step_takes_its_cupti_cost_and_typical_speed_out(tmp_path: Path) -> None:
    run = _recorded(tmp_path, 40)
    a = analyze(run, workers=1)
    ra = a.ranks[0]
    g = a.graph.rank(0)
    ref = launch_reference(g, ra)
    assert ref == {"cudaLaunchKernel": pytest.approx(10_000)}  # median of 40, 10 x5 per step
    m = build_step_model(g, ra, step_costs(run_graph(run), g))
    assert m is not None and m.profiler is not None and m.profiler.speed is not None
    # six launches: 60 us typical against 40 + 5 x 10 = 90 measured
    assert m.profiler.speed.tolist() == pytest.approx([60 / 90])
    launches = np.flatnonzero(m.host.kind == L)
    assert m.profiler.own[launches].tolist() == [CAPTURE_API_NS] * 6
    bare = untraced(m)
    own = np.round(m.host.own[launches] * 60 / 90).astype(np.int64) - CAPTURE_API_NS
    assert bare.host.own[launches].tolist() == own.tolist()
    # a step whose launches all took their typical time keeps its speed
    same = _recorded(tmp_path / "b", 10)
    a2 = analyze(same, workers=1)
    g2 = a2.graph.rank(0)
    m2 = build_step_model(g2, a2.ranks[0], step_costs(run_graph(same), g2))
    assert m2 is not None and m2.profiler is not None and m2.profiler.speed is not None
    assert m2.profiler.speed.tolist() == [1.0]
