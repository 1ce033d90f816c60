"""Overhead figures from step times (hand-computed)."""

from __future__ import annotations

import pytest

from stepscope.capture.step_times import RATIO_STEPS_AFTER, RATIO_STEPS_BEFORE, StepTimes


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
