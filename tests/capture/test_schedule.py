from __future__ import annotations

import pytest

from stepscope.capture.schedule import Action, Schedule, make_schedule, parse_steps
from stepscope.errors import CaptureError

C, S, D = Action.CAPTURE, Action.SKIP, Action.DONE


def test_step_window_is_inclusive() -> None:
    s = make_schedule("5-8")
    assert [s.action(k) for k in range(11)] == [S] * 5 + [C] * 4 + [D] * 2


def test_default_skips_three_and_stops_after_fifty_steps() -> None:
    s = Schedule()
    acts = [s.action(k, window_elapsed_s=0.01 * max(0, k - 3)) for k in range(60)]
    assert acts[:3] == [S] * 3
    assert acts[3:53] == [C] * 50
    assert set(acts[53:]) == {D}


def test_default_stops_after_about_ten_seconds_of_steps() -> None:
    s = Schedule()
    assert s.action(4, window_elapsed_s=9.9) is C
    assert s.action(5, window_elapsed_s=10.0) is D
    # the first step of the window always opens it, however long warm-up took
    assert s.action(3, window_elapsed_s=0.0) is C


def test_time_window() -> None:
    s = make_schedule(delay_s=2, duration_s=3)
    assert s.timed and s.action(10) is S
    assert [s.time_action(t) for t in (0, 1.9, 2, 4.9, 5, 100)] == [S, S, C, C, D, D]
    assert make_schedule(delay_s=1).duration_s == 10.0


@pytest.mark.parametrize("text,expected", [("5-20", (5, 20)), ("7", (7, 7)), (" 1 .. 3", (1, 3)),
                                           ("0:0", (0, 0))])
def test_parse_steps(text: str, expected: tuple[int, int]) -> None:
    assert parse_steps(text) == expected


@pytest.mark.parametrize("text", ["", "a-b", "5-", "9-3", "-1-2"])
def test_parse_steps_rejects(text: str) -> None:
    with pytest.raises(CaptureError):
        parse_steps(text)


def test_steps_and_time_are_exclusive() -> None:
    with pytest.raises(CaptureError):
        make_schedule("1-2", delay_s=1.0)


def test_round_trip_and_describe() -> None:
    for s in (Schedule(), make_schedule("2-4"), make_schedule(delay_s=1, duration_s=2)):
        assert Schedule.from_dict(s.to_dict()) == s
        assert s.describe()
