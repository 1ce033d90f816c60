from __future__ import annotations

import numpy as np

from stepscope.analysis.breakdown import CATEGORIES, attribute, breakdown_from_sets
from stepscope.analysis.busy import DeviceActivity, IntervalSet
from stepscope.analysis.steady import Step, StepInfo


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
