"""How long a thread takes to go on after another thread handed the step back to it, typically.

A hand-over (``build``: a thread's first event after another thread ran ``HANDOFF_RUN`` events
alone: the main thread after autograd's backward thread, which ``loss.backward()`` waits for)
is modelled as host work before the thread's event (``pre``), measured from the other thread's
last event. In one step that time can hold a pause that the other steady steps do not have:
the H100 torch.profiler trace of ``benchmarks/scenarios/loader_tf32.py`` (2026-11-26 s6) went
on 216, 222 and 243 us after the backward thread's last launch in three of its five steady
steps, 2.5 and 3.3 ms in the other two; the modelled step was one of those, and the 3.3 ms,
kept by every remedy, set the plan's predicted fixed step at 1.6x the measured one. The
recorded run of the same program: 280-650 us in 42 of 44 steady steps.

:func:`typical_handovers` takes each hand-over of the modelled step at most at the median of
the same hand-over (the k-th of its step) over the steady steps that hand over as often as it
does (at least :data:`MIN_STEPS` of them, the modelled one included): a pause one step had
is not the program's.
"""

from __future__ import annotations

import numpy as np

from stepscope.model.stepmodel.steps import I64

MIN_STEPS = 3  # steady steps with the same hand-overs for their median to be typical


def handover_gaps(start: I64, end: I64, thread: I64, run_len: int) -> list[int]:
    """The hand-over gaps (ns) of one step's host events (sorted by start, nested calls
    dropped): at each event of a thread other than the one before it, after that one ran
    ``run_len`` events in a row, the time from the later of the event before it and the
    thread's own last event to its start."""
    out: list[int] = []
    free: dict[int, int] = {}
    run = 0
    for i in range(start.size):
        t = int(thread[i])
        if i > 0 and int(thread[i - 1]) != t and run >= run_len:
            ready = max(free.get(t, int(end[i - 1])), int(end[i - 1]))
            out.append(max(0, int(start[i]) - ready))
        run = run + 1 if i > 0 and int(thread[i - 1]) == t else 1
        free[t] = max(free.get(t, int(end[i])), int(end[i]))
    return out


def typical_handovers(mine: list[int], others: list[list[int]]) -> list[int]:
    """``mine`` (the modelled step's hand-over gaps, in order), each capped at the median of
    the same hand-over over ``others`` (every steady step's gaps, the modelled one included)
    that have as many hand-overs; unchanged with fewer than ``MIN_STEPS`` such steps."""
    same = [o for o in others if len(o) == len(mine)]
    if not mine or len(same) < MIN_STEPS:
        return list(mine)
    med = np.median(np.asarray(same, dtype=np.float64), axis=0)
    return [min(g, int(round(float(m)))) for g, m in zip(mine, med.tolist())]


def steps_handovers(windows: list[tuple[int, int]], start: I64, end: I64, thread: I64,
                    run_len: int) -> list[list[int]]:
    """Per window (a steady step's ``[start, end)``): the hand-over gaps of the host events
    (``start``, ``end``, ``thread``: every call and input wait of the rank, any order) that
    start in it."""
    o = np.lexsort((end, start))
    s, e, t = start[o], end[o], thread[o]
    out = []
    for a, b in windows:
        i, j = np.searchsorted(s, a, side="left"), np.searchsorted(s, b, side="left")
        keep = drop_nested(s[i:j], e[i:j], t[i:j])
        out.append(handover_gaps(s[i:j][keep], e[i:j][keep], t[i:j][keep], run_len))
    return out


def drop_nested(start: I64, end: I64, thread: I64) -> np.ndarray:
    """Mask of the events (sorted by start, then end) not inside an earlier event of their
    thread, as ``build`` keeps them."""
    keep = np.ones(start.size, dtype=bool)
    last: dict[int, int] = {}
    for i, (t, e) in enumerate(zip(thread.tolist(), end.tolist())):
        if t in last and e <= last[t]:
            keep[i] = False
            continue
        last[t] = e
    return keep


__all__ = ["MIN_STEPS", "drop_nested", "handover_gaps", "steps_handovers", "typical_handovers"]
