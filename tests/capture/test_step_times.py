"""Overhead figures from step times (hand-computed)."""

from __future__ import annotations

from typing import Any

import pytest

from stepscope.capture.step_times import (
    RATIO_STEPS_AFTER,
    RATIO_STEPS_BEFORE,
    StepTimes,
    ratio_interval,
)


def test_ratio_uses_medians_of_the_last_steps_before_and_of_the_window() -> None:
    st = StepTimes()
    for d in [500, 400] + [10] * RATIO_STEPS_BEFORE:  # slow start, then steady: ms
        st.add(d * 1_000_000, inside=False)
    for d in (12, 12, 30, 12):  # one outlier in the window
        st.add(d * 1_000_000, inside=True)
    o = st.report(window_wall_s=2.0, sampler_cpu_s=0.05)
    assert o["median_step_ms_before_window"] == 10.0 and o["median_step_ms_in_window"] == 12.0
    assert o["step_time_ratio_in_window_vs_before"] == pytest.approx(1.2)
    assert o["mean_step_ms_before_window"] == pytest.approx((900 + 10 * RATIO_STEPS_BEFORE) / 12)
    assert o["steps_before_window"] == 12 and o["steps_in_window"] == 4
    assert o["sampler_threads_cpu_share"] == pytest.approx(0.025)


def test_short_window_and_no_steps() -> None:
    o = StepTimes().report(window_wall_s=0.5, sampler_cpu_s=0.01)
    assert o["window_wall_s"] == 0.5
    assert "sampler_threads_cpu_s" not in o  # /proc ticks are 10 ms: too coarse under 1 s
    assert "step_time_ratio_in_window_vs_before" not in o
    assert "window_wall_s" not in StepTimes().report(None, None)


def test_after_window_ratio_needs_three_steps_and_keeps_ten() -> None:
    st = StepTimes()
    for _ in range(4):
        st.add(11_000_000, inside=True)
    assert not st.add_after(10_000_000)  # the window is not closed yet: not a step after it
    st.window_closed()
    assert not st.add_after(900_000_000)  # the step that closed the window: left out
    assert not st.add_after(10_000_000) and not st.add_after(10_000_000)
    assert "step_time_ratio_in_window_vs_after" not in st.report(2.0, None)  # two: too few
    last = [st.add_after(d * 1_000_000) for d in (10, 9, 50, 10, 10, 10, 10, 10, 99)]
    assert last == [False] * 7 + [True, False]  # the tenth ends it; later ones are not kept
    o = st.report(2.0, None)
    assert o["steps_after_window"] == RATIO_STEPS_AFTER
    assert o["median_step_ms_after_window"] == 10.0  # the 50 ms step does not move the median
    assert o["step_time_ratio_in_window_vs_after"] == pytest.approx(1.1)


def _run(before_ms: list[float], in_ms: list[float], after_ms: list[float]) -> dict[str, Any]:
    st = StepTimes()
    for d in before_ms:
        st.add(int(d * 1e6), inside=False)
    for d in in_ms:
        st.add(int(d * 1e6), inside=True)
    st.window_closed()
    st.add_after(500_000_000)  # the step that closed the window: left out
    for d in after_ms:
        st.add_after(int(d * 1e6))
    return st.report(2.0, None)


def test_steady_steps_give_an_interval_around_the_ratio_and_no_caveat() -> None:
    o = _run([10.0] * 10, [11.0, 11.2, 10.8] * 20, [10.0, 10.1, 9.9, 10.0, 10.2, 9.8, 10.0, 10.0, 10.1, 9.9])
    lo, hi = o["step_time_ratio_after_ci90"]
    assert lo <= o["step_time_ratio_in_window_vs_after"] <= hi
    assert 1.05 < lo and hi < 1.15  # 11/10, give or take the spread of the after-steps
    assert "step_time_ratio_after_unmeasurable" not in o


def test_identical_steps_give_a_point_interval() -> None:
    assert ratio_interval([12_000_000] * 50, [10_000_000] * 10) == pytest.approx((1.2, 1.2))


def test_steps_faster_in_the_window_than_after_it_are_not_a_capture_cost() -> None:
    """As a GPU run of benchmarks/capture/gpu_train.py read (H100, 2026-11-25): in-window 5.8 ms,
    before 8.3, after 8.2: the program's speed changed, the ratio 0.71 measures nothing."""
    o = _run([8.3] * 10, [5.8, 5.7, 5.9] * 7, [8.2, 8.1, 8.3] * 3 + [8.2])
    assert o["step_time_ratio_in_window_vs_after"] == pytest.approx(5.8 / 8.2)
    assert "ran faster" in str(o["step_time_ratio_after_unmeasurable"])


def test_steps_before_and_after_that_differ_mean_the_program_changed_speed() -> None:
    """Another such run: before 8.45 ms, in 8.06, after 3.57: not a x2.26 capture cost."""
    o = _run([8.45] * 10, [8.06] * 21, [3.57] * 10)
    assert o["step_time_ratio_in_window_vs_after"] == pytest.approx(8.06 / 3.57)
    why = str(o["step_time_ratio_after_unmeasurable"])
    assert "8.45 ms" in why and "3.57 ms" in why and "x2.37" in why
    # fewer than 10 steps before the window (the default window's warm-up): not compared
    assert "step_time_ratio_after_unmeasurable" not in _run([8.45] * 4, [8.06] * 21, [3.57] * 10)
