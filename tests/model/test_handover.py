"""A hand-over's host work at most its typical length (``stepmodel.handover``): the main
thread going on after autograd's backward thread. Hand-built gaps and a synthetic two-thread
run with hand-computed answers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stepscope.analysis import analyze
from stepscope.model.stepmodel import build_step_model
from stepscope.model.stepmodel.handover import handover_gaps, typical_handovers


def test_handover_gaps_after_a_run_of_the_other_thread() -> None:
    # thread 0: four events, thread 1: four, thread 0 again 70 after thread 1's last ended;
    # then one event of thread 1 (thread 0 ran only one: not a hand-over)
    s = np.array([0, 10, 20, 30, 50, 60, 70, 80, 160, 200], dtype=np.int64)
    e = s + 5
    t = np.array([0, 0, 0, 0, 1, 1, 1, 1, 0, 1], dtype=np.int64)
    assert handover_gaps(s, e, t, 4) == [50 - 35, 160 - 85]
    # the thread's own last event ending later than the other's counts instead
    e2 = e.copy()
    e2[3] = 120
    assert handover_gaps(s, e2, t, 4) == [0, 160 - 120]


def test_typical_handovers_cap_at_the_median_of_the_same_handover() -> None:
    others = [[25, 300], [25, 20], [30, 22], [20, 18], [25]]  # the last hands over once
    assert typical_handovers([25, 300], others) == [25, 21]  # medians 25 and 21 (of 4)
    assert typical_handovers([10, 15], others) == [10, 15]  # never longer than measured
    assert typical_handovers([25, 300], others[:2]) == [25, 300]  # fewer than 3 steps
    assert typical_handovers([], others) == []


def test_a_pause_in_the_modelled_steps_handover_is_not_kept(tmp_path: Path) -> None:
    from builder import TraceBuilder

    # six 1000 us steps: the main thread (tid 100) launches four 10 us kernels, the backward
    # thread (tid 200) four more, then the main thread one more, G us after the backward
    # thread's last launch ended: 20 us in every step but the modelled one (step 1), 300 us
    b = TraceBuilder()
    for i in range(6):
        t = 1000.0 * i
        b.step(t, 1000, step=i)
        for j in range(4):
            b.kernel("fwd", t + 15 + 20 * j, 10, launch=(t + 10 + 20 * j, 5), tid=100)
            b.kernel("bwd", t + 105 + 20 * j, 10, launch=(t + 100 + 20 * j, 5), tid=200)
        g = 300 if i == 1 else 20
        b.kernel("opt", t + 170 + g, 10, launch=(t + 165 + g, 5), tid=100)
    run = b.build(tmp_path / "run")
    a = analyze(run, workers=1)
    m = build_step_model(a.graph.rank(0), a.ranks[0])
    assert m is not None and m.step_index == 1
    h = m.host
    hand = np.flatnonzero(h.after >= 0)
    assert hand.size == 2
    # main -> backward: 100 - 75 = 25 us in every step; backward -> main: 300 us measured,
    # the steady steps' median 20 us
    assert h.pre[hand].tolist() == [25_000, 20_000]
    assert int(h.pre[hand[1]]) == pytest.approx(20_000)
