from __future__ import annotations

import numpy as np

from stepscope.analysis.periodicity import find_period


def test_find_period_prefers_step_over_layer_period() -> None:
    # 6 'layers' of (a, b) inside a step, then an optimizer kernel: the step period is 13
    step = [0] + [1, 2] * 6
    seq = np.array(step * 8, dtype=np.int64)
    p, rate = find_period(seq)
    assert p == 13 and rate == 1.0



def test_period_signature_ignores_the_phase_but_not_the_work() -> None:
    import pyarrow as pa

    from stepscope.analysis.periodicity import _middle_period, _signature

    names = pa.array(["a", "b", "c"] * 10)
    # the same period read from any phase: the same signature
    assert _signature(names, 0, 3) == _signature(names, 1, 3) == _signature(names, 2, 3)
    other = pa.array(["a", "b", "d"] * 10)
    assert _signature(names, 0, 3) != _signature(other, 0, 3)
    # a period from the middle of the kernels, aligned to the phase, never past the end
    assert _middle_period(1, 3, 30) == 1 + 3 * 4
    assert _middle_period(0, 3, 4) <= 1
