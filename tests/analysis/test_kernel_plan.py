from __future__ import annotations

from pathlib import Path
from typing import Any

from stepscope.analysis import analyze
from stepscope.analysis.kernel_plan import plan_kernels

BIG = "void ns::big<4>(float*)"


def test_plan_skips_the_warm_up_and_bounds_the_launches(builder: Any, tmp_path: Path) -> None:
    b = builder
    # a 3 ms warm-up step (not steady: 3x the others), then three 1 ms steady steps
    b.step(0, 3000)
    b.kernel(BIG, 10, 400)
    b.kernel(BIG, 500, 400)
    b.kernel("small_k", 1000, 100)
    for i in range(3):
        t0 = 3000 + i * 1000
        b.step(t0, 1000)
        b.kernel(BIG, t0 + 10, 400)
        b.kernel(BIG, t0 + 420, 400)
        for j in range(3):
            b.kernel("small_k", t0 + 830 + j * 40, 30)
        b.kernel("tiny", t0 + 960, 10)
    a = analyze(b.build(tmp_path / "run"))
    ra = a.ranks[0]
    assert [s.steady for s in ra.steps.steps] == [False, True, True, True]
    plan = plan_kernels(a.graph.rank(0), ra, top=2, max_launches=20)
    assert plan is not None
    assert [(k.base, round(k.ms_per_step, 6), k.launches_per_step) for k in plan.kernels] == [
        ("big", 0.8, 2.0), ("small_k", 0.09, 3.0)]
    assert plan.name_regex == "^(big|small_k)$"
    assert (plan.launch_skip, plan.launch_count, plan.capped) == (3, 5, False)
    capped = plan_kernels(a.graph.rank(0), ra, top=2, max_launches=4)
    assert capped is not None and (capped.launch_count, capped.capped) == (4, True)


def test_a_run_without_steps_is_one_window(builder: Any, tmp_path: Path) -> None:
    b = builder
    for t in (0, 1300, 1900, 4200):  # no step markers, no period to recover steps from
        b.kernel(BIG, t, 400)
    b.kernel("small_k", 700, 100)
    a = analyze(b.build(tmp_path / "run"))
    # one window, the whole trace (the analysis' own step when nothing marks steps)
    assert len(a.ranks[0].steps.steady) <= 1
    plan = plan_kernels(a.graph.rank(0), a.ranks[0], top=1, max_launches=3)
    assert plan is not None and [k.base for k in plan.kernels] == ["big"]
    assert (plan.launch_skip, plan.launch_count, plan.capped) == (0, 3, True)  # 4 launches
