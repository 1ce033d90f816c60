from __future__ import annotations

import numpy as np

from stepscope.analysis.periodicity import find_period


def test_find_period_prefers_step_over_layer_period() -> None:
    # 6 'layers' of (a, b) inside a step, then an optimizer kernel: the step period is 13
    step = [0] + [1, 2] * 6
    seq = np.array(step * 8, dtype=np.int64)
    p, rate = find_period(seq)
    assert p == 13 and rate == 1.0

