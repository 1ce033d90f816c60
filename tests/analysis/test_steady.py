from __future__ import annotations

import numpy as np

from stepscope.analysis.steady import select_steady


def test_select_steady_warmup_and_outlier() -> None:
    steady, notes = select_steady(np.array([300, 100, 101, 99, 100, 250], dtype=np.int64))
    assert steady == (False, True, True, True, True, False)
    assert notes[0].startswith("warm-up") and notes[5].startswith("outlier")
    steady, _ = select_steady(np.array([100, 100, 104], dtype=np.int64))
    assert steady == (True, True, True)


def test_select_steady_two_bad_steps_among_four() -> None:
    # a kernel dropped at the trace window's start makes step 0 short and step 1 double:
    # the MAD of [1.06, 11.6, 5.35, 5.34] is 2.14, so 5 MADs would keep both; half the
    # median (2.67) does not
    walls = np.array([1_060, 11_610, 5_350, 5_340], dtype=np.int64)
    steady, notes = select_steady(walls)
    assert steady == (False, False, True, True)
    assert notes[1].startswith("outlier")


def test_select_steady_keeps_recurring_slow_steps() -> None:
    # a DataLoader stall every other step (PARAM's resnet trace: 12 of 28 steps wait
    # 140-640 ms): the slow steps are what the loop costs, not outliers; a fast outlier is
    # still left out
    walls = np.array([160, 155, 480, 158, 770, 150, 470, 160, 750, 340, 60, 158], dtype=np.int64)
    steady, notes = select_steady(walls)
    assert steady == (True,) * 10 + (False, True)
    assert notes[10].startswith("outlier")
    # two slow steps among eight stay outliers (rare)
    steady, _ = select_steady(np.array([100, 101, 99, 300, 100, 98, 320, 100], dtype=np.int64))
    assert steady == (True, True, True, False, True, True, False, True)
