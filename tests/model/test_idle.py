"""The idle split's interval helpers (``model.idle``)."""

from __future__ import annotations

import numpy as np

from stepscope.analysis.busy import IntervalSet
from stepscope.model.idle import _first_after


def test_first_idle_after_each_point() -> None:
    # idle 0-10, 20-30, 50-100 (ns); 15 ns from t=5 -> 5-10, 20-30; 100 ns from 25, but
    # not beyond 60 -> 25-30, 50-60
    s = IntervalSet.of(np.array([0, 20, 50]), np.array([10, 30, 100]))
    got = _first_after(s, np.array([5, 25]), np.array([15, 100]),
                       np.array([1000, 60]))
    assert got.starts.tolist() == [5, 20, 50] and got.ends.tolist() == [10, 30, 60]
