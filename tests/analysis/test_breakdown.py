from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from stepscope.analysis import analyze
from stepscope.analysis.breakdown import (
    CATEGORIES,
    GPU_CATEGORIES,
    attribute,
    breakdown_from_sets,
    host_idle,
    host_layers,
    unrecorded_host,
)
from stepscope.analysis.busy import DeviceActivity, IntervalSet, gpu_activity, rank_union
from stepscope.analysis.steady import Step, StepInfo
from stepscope.importers import import_traces
from stepscope.model.idle import split_idle
from stepscope.store.run import Run


def S(*pairs: tuple[int, int]) -> IntervalSet:
    return IntervalSet.of([p[0] for p in pairs], [p[1] for p in pairs])


def steps(*wins: tuple[int, int]) -> StepInfo:
    return StepInfo(rank=0, source="profiler_step", steps=tuple(
        Step(index=i, number=i, start_ns=a, end_ns=b, steady=True) for i, (a, b) in enumerate(wins)))


def test_attribute_priority_and_sum() -> None:
    ws, we = np.array([0, 100]), np.array([100, 200])
    got = attribute(ws, we, [("a", S((10, 30), (150, 160))), ("b", S((20, 50)))])
    # window 0: a covers 20; b covers (30,50)=20 beyond a; idle 60. window 1: a 10, b 0, idle 90
    assert got["a"].tolist() == [20, 10]
    assert got["b"].tolist() == [20, 0]
    assert got["idle"].tolist() == [60, 90]


def test_breakdown_hand_computed() -> None:
    # one 100 ns step:
    #   compute kernel [0,30), NCCL [20,50) -> compute 30, exposed comm 20 ([30,50))
    #   copy [45,60) -> exposed copies 10 ([50,60))
    #   input wait [55,70) -> 10 ([60,70)); sync [70,80) -> 10
    #   launch [78,85) -> 5 ([80,85)); host ops [0,95) -> 10 ([85,95)); idle [95,100) = 5
    gpu = DeviceActivity(device=-1, compute=S((0, 30)), communication=S((20, 50)),
                         copies=S((45, 60)))
    host = [("input_wait", S((55, 70))), ("sync", S((70, 80))), ("launch", S((78, 85))),
            ("host", S((0, 95)))]
    b = breakdown_from_sets(0, steps((0, 100)), gpu, host)
    assert b.per_step[0] == {"compute": 30, "communication": 20, "copies": 10, "input_wait": 10,
                             "sync": 10, "launch": 5, "host": 10, "idle": 5}
    assert sum(b.per_step[0].values()) == 100
    assert set(b.mean_ms) == set(CATEGORIES)


def test_breakdown_mean_over_steady_steps_only() -> None:
    info = StepInfo(rank=0, source="x", steps=(
        Step(0, 0, 0, 1_000_000, steady=False), Step(1, 1, 1_000_000, 1_500_000, steady=True),
        Step(2, 2, 1_500_000, 2_000_000, steady=True)))
    gpu = DeviceActivity(-1, S((1_000_000, 1_250_000)), IntervalSet.empty(), IntervalSet.empty())
    b = breakdown_from_sets(0, info, gpu, [])
    assert b.steady_steps == 2
    assert b.mean_ms["compute"] == 0.125  # (0.25 ms + 0 ms) / 2
    assert b.mean_ms["idle"] == 0.375


def test_breakdown_without_gpu_records_is_host_time() -> None:
    # one 100 ns step, no GPU activity: input wait [0,60) -> 60, host ops [50,80) -> 20 beyond
    # it, the rest (20) has no host event; the breakdown says its GPU side is empty
    e = IntervalSet.empty()
    b = breakdown_from_sets(0, steps((0, 100)), DeviceActivity(-1, e, e, e),
                            [("input_wait", S((0, 60))), ("host", S((50, 80)))])
    assert b.per_step[0] == {"compute": 0, "communication": 0, "copies": 0, "input_wait": 60,
                             "sync": 0, "launch": 0, "host": 20, "idle": 20}
    assert b.gpu_recorded is False
    gpu = DeviceActivity(device=-1, compute=S((0, 10)), communication=e, copies=e)
    assert breakdown_from_sets(0, steps((0, 100)), gpu, []).gpu_recorded is True


def _recorded_style(b: Any, *, op: bool = False) -> None:
    """Three 1000 µs steps from 1000, one host thread, CUDA calls but no op rows (a live
    capture). Per step (µs from its start): kernel A 10-400 launched 0-5, kernel B 460-500
    launched 450-455 (a 60 µs launch-bound wait), kernel C 810-990 launched 800-805 (a 310 µs
    one); the next step's A is launched at 1000-1005, so 990-1010 is a 20 µs launch-bound
    wait across the boundary. ``op``: an ``aten::add`` row at 600-650 of each step."""
    for i in range(3):
        t0 = 1000 + i * 1000
        b.step(t0, 1000)
        b.kernel("kernel_a", t0 + 10, 390, launch=(t0, 5))
        b.kernel("kernel_b", t0 + 460, 40, launch=(t0 + 450, 5))
        b.kernel("kernel_c", t0 + 810, 180, launch=(t0 + 800, 5))
        if op:
            b.cpu_op("aten::add", t0 + 600, 50)


def test_recorded_run_attributes_unexplained_idle_to_host_and_launch(
        builder: Any, tmp_path: Path) -> None:
    _recorded_style(builder)
    bd = analyze(builder.build(tmp_path / "run")).ranks[0].breakdown
    # compute 390 + 40 + 180 = 610 µs a step. launch: the three calls (5 each) and the short
    # launch-bound waits nothing recorded explains: 400-450 and 455-460 (55), 990-1000 (10, not
    # in the last step: no kernel follows), 1005-1010 of the next step (5, not in the first:
    # no kernel before it). host: the 310 µs wait less C's call (305), plus 5-10 of the first
    # step and 990-1000 of the last (idle outside any launch-bound wait)
    us = 1000
    assert [s["compute"] for s in bd.per_step] == [610 * us] * 3
    assert [s["launch"] for s in bd.per_step] == [80 * us, 85 * us, 75 * us]
    assert [s["host"] for s in bd.per_step] == [310 * us, 305 * us, 315 * us]
    assert [s["idle"] for s in bd.per_step] == [0, 0, 0]
    assert all(sum(s.values()) == 1000 * us for s in bd.per_step)


def test_run_with_ops_keeps_unexplained_idle(builder: Any, tmp_path: Path) -> None:
    # the same steps with an op row each: the host's work was recorded, and the idle time
    # outside the calls and the op stays unattributed (launch 15, host 50, idle 1000-610-65)
    _recorded_style(builder, op=True)
    bd = analyze(builder.build(tmp_path / "run")).ranks[0].breakdown
    us = 1000
    assert [(s["launch"], s["host"], s["idle"]) for s in bd.per_step] == \
        [(15 * us, 50 * us, 325 * us)] * 3


def test_host_idle_split_is_the_idle_models(builder: Any, tmp_path: Path) -> None:
    # the idle model's launch claim on the recorded-style run is host_idle's: the short waits
    # (60 µs a step, 400-460) less what the step-boundary gaps claim first (none of them)
    _recorded_style(builder)
    run = builder.build(tmp_path / "run")
    a = analyze(run)
    ra = a.ranks[0]
    sp = split_idle(a, ra)
    g = a.graph.rank(0)
    idle = IntervalSet.of(sp.win_start, sp.win_end) - rank_union(gpu_activity(g)).busy
    whole = host_idle(g, idle)
    assert (sp.launch - whole.launch).total_ns == 0
    assert sp.per_step(sp.launch).tolist() == [60_000] * sp.n


DATA = Path(__file__).parents[1] / "data"


def _without_split(g: Any, ra: Any) -> Any:
    """The breakdown as it is where host ops were recorded: no split of the unexplained."""
    return breakdown_from_sets(ra.rank, ra.steps, rank_union(gpu_activity(g)), host_layers(g))


def test_recorded_fixture_attributes_the_host_bound_idle() -> None:
    # a real `stepscope record` run of a host-bound step (CPU sort mid-forward, PROVENANCE.md):
    # no op row, so the GPU idle no CUDA call explains goes to host (or launch), none stays idle
    a = analyze(Run(DATA / "recorded" / "h100_cpu_ops_midstep"))
    ra = a.ranks[0]
    g = a.graph.rank(0)
    assert g.table("cpu_ops").num_rows == 0 and unrecorded_host(g) is not None
    old = _without_split(g, ra)
    bd = ra.breakdown
    assert old.mean_ms["idle"] > 0.3 * sum(old.mean_ms.values())  # unattributed before
    for new, was, st in zip(bd.per_step, old.per_step, ra.steps.steps):
        assert new["idle"] == 0 and sum(new.values()) == st.span_ns
        assert new["launch"] >= was["launch"] and new["host"] >= was["host"]
        assert new["launch"] + new["host"] == was["launch"] + was["host"] + was["idle"]
        assert {c: new[c] for c in GPU_CATEGORIES + ("input_wait", "sync")} == \
            {c: was[c] for c in GPU_CATEGORIES + ("input_wait", "sync")}
    # the host_bound finding's GPU idle (before its profiler scaling, none on a live capture)
    # is inside the breakdown's host and launch time
    sp = split_idle(a, ra)
    assert 0 < sp.mean_ms(sp.host) <= bd.mean_ms["host"] + bd.mean_ms["launch"]


def test_trace_with_ops_keeps_its_breakdown(tmp_path: Path) -> None:
    # a torch.profiler trace records the host's ops: its unattributed idle stays idle
    run = Run(import_traces([DATA / "h200_pageable_batch.pt.trace.json.gz"],
                            tmp_path / "run"))
    a = analyze(run)
    ra = a.ranks[0]
    g = a.graph.rank(0)
    assert g.table("cpu_ops").num_rows and unrecorded_host(g) is None
    assert ra.breakdown.per_step == _without_split(g, ra).per_step
    assert ra.breakdown.mean_ms["idle"] > 0
