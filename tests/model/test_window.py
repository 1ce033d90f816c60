"""The modelled step's host window (``model.stepmodel.window``): for steps recovered from the
kernel stream's periodicity, one launch of the main thread to the same launch a period later,
closed by a hand-back where autograd's thread runs last; on a synthetic run whose host runs
ahead of the GPU by a varying amount."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tests.builder import TraceBuilder

from stepscope.analysis import analyze
from stepscope.model.stepmodel import build_step_model, replay
from stepscope.model.stepmodel.build import representative_step
from stepscope.model.stepmodel.steps import HostKind
from stepscope.model.stepmodel.window import host_window
from stepscope.schema_enums import StepSource
from stepscope.store import Run

MAIN, AUTOGRAD = 100, 101
# one period: the update (2 kernels) and the forward (3) launched by the main thread, then the
# backward (4) by autograd's; 250 us each on the GPU after a 50 us gap, 2.3 ms a period (over
# the 2 ms under which periodicity groups periods into a step)
PERIOD = [("upd", MAIN)] * 2 + [("fwd", MAIN)] * 3 + [("bwd", AUTOGRAD)] * 4
KERNEL_US, GPU_PERIOD, LAUNCH_GAP = 250.0, 2300.0, 150.0
LEADS = (300.0, 900.0, 1500.0)  # how far the host runs ahead of the GPU, period by period


def _run(tmp: Path, leads: tuple[float, ...] = LEADS) -> tuple[Run, list[float]]:
    b = TraceBuilder(pid=MAIN, tid=MAIN)
    launches = []
    for k in range(24):
        gpu0 = 2000.0 + GPU_PERIOD * k
        host0 = gpu0 - leads[k % len(leads)]
        launches.append(host0)
        for i, (name, tid) in enumerate(PERIOD):
            b.kernel(f"{name}_{i}", gpu0 + 50.0 + KERNEL_US * i, KERNEL_US - 1.0, tid=tid,
                     launch=(host0 + LAUNCH_GAP * i + (40.0 if tid == AUTOGRAD else 0.0), 5.0))
    return b.build(tmp / "run"), launches


def test_a_periodicity_step_holds_one_period_of_launches(tmp_path: Path) -> None:
    run, launches = _run(tmp_path)
    a = analyze(run, workers=1)
    ra = a.ranks[0]
    g = a.graph.rank(ra.rank)
    assert ra.steps.source == StepSource.PERIODICITY.value
    idx = representative_step(ra)
    assert idx is not None
    step = ra.steps.steps[idx]
    # the markers are GPU times: the host issued a varying number of ops inside them
    issued = np.sort(g.issued_ns)
    counts = {int(((issued >= s.start_ns) & (issued < s.end_ns)).sum()) for s in ra.steps.steady}
    assert counts != {len(PERIOD)}
    # the host window: the main thread's first launch of the period to the next period's
    t0, t1 = host_window(g, ra, idx)
    first = [int(round(x * 1000)) for x in launches]
    k = first.index(t0)
    assert t1 == first[k + 1] and (t0, t1) != (step.start_ns, step.end_ns)
    m = build_step_model(g, ra)
    assert m is not None and m.ops.size == len(PERIOD)
    # autograd's thread launches last: the window closes with the main thread's hand-back
    h = m.host
    last = h.size - 1
    assert h.kind[last] == HostKind.MARK and m.names[int(h.name[last])] == "hand back"
    assert h.thread[last] == h.thread[0] and h.after[last] == last - 1
    assert h.thread[last - 1] != h.thread[0] and m.tail.tolist() == [0, 0]
    # the replay keeps the measured period
    assert abs(replay(m).step_ns - m.measured_ns) <= 0.05 * m.measured_ns


def test_markers_that_hold_one_periods_launches_stay(tmp_path: Path) -> None:
    """A host a fixed lead ahead, its launches all before the period's first kernel starts:
    each marker window issues the 9 records that run in it, and the window is the markers."""
    run, _ = _run(tmp_path, leads=(1400.0,))
    a = analyze(run, workers=1)
    ra = a.ranks[0]
    assert ra.steps.source == StepSource.PERIODICITY.value
    idx = representative_step(ra)
    assert idx is not None
    s = ra.steps.steps[idx]
    assert host_window(a.graph.rank(0), ra, idx) == (s.start_ns, s.end_ns)


def test_steps_with_host_markers_keep_them(tmp_path: Path) -> None:
    b = TraceBuilder(pid=MAIN, tid=MAIN)
    for k in range(6):
        b.step(1000.0 * k, 1000.0)
        b.kernel("k", 1000.0 * k + 100.0, 500.0, launch=(1000.0 * k + 10.0, 5.0))
    a = analyze(b.build(tmp_path / "run"), workers=1)
    ra = a.ranks[0]
    idx = representative_step(ra)
    assert idx is not None
    s = ra.steps.steps[idx]
    assert host_window(a.graph.rank(0), ra, idx) == (s.start_ns, s.end_ns)


def test_a_hand_back_only_where_the_main_thread_handed_over() -> None:
    from stepscope.model.stepmodel.window import hands_back

    per, t = StepSource.PERIODICITY.value, np.array
    # the start mark and the main thread's calls, then autograd's run of 4: a hand-back
    assert hands_back(per, t([0, 0, 0, 1, 1, 1, 1]), 0, 4)
    # a run too short, or the main thread last: none
    assert not hands_back(per, t([0, 0, 1, 1, 1]), 0, 4)
    assert not hands_back(per, t([0, 1, 1, 1, 1, 0]), 0, 4)
    # the main thread issued nothing (a JAX executor's thread launches all): none
    assert not hands_back(per, t([0, 1, 1, 1, 1, 1]), 0, 4)
    # two other threads at the end: not one run
    assert not hands_back(per, t([0, 0, 1, 1, 2, 2]), 0, 4)
    # markers on the host: never
    assert not hands_back(StepSource.HOOK.value, t([0, 0, 0, 1, 1, 1, 1]), 0, 4)
