"""The host side of the modelled step (``build``): which host events belong to it.

A step's markers bound its host events: the hook's or the profiler's step marks, taken on the
host. A step recovered from the kernel stream's periodicity (``analysis.periodicity``) has GPU
times for markers, the starts of two periods' first kernels, and the host runs ahead of the GPU
by a varying amount: in those markers a recorded ``torch_manual_sgd`` (H100, 2026-11-27, s7)
issued from 40 to 198 ops of a 129-op period, and the step the model picked held 172
(replayed 32% over the measured step). Where the markers issued more or fewer GPU records than
ran in them, the host window runs instead from one launch of the process's main thread
(``pid == tid``: the training loop's) to the same launch a period later (:func:`host_window`):
one period's launches, each once. Where they issued as many (a host held in step with the GPU
by its blocking copies: CuPy's pageable ``set``), the markers stay: a launch whose kernel the
capture lacks (CuPy's ``cuLaunchKernel``, ``unseen.with_unseen``) is found from the op it
delays, which a window ending at that launch would leave out.

Such a window may end while the main thread waits for another (autograd's backward thread,
when the period starts at the update after ``loss.backward()``): its time from its last event
to the window's end would read as its own work. The window then closes with a hand-back
(:data:`HAND_BACK`, :func:`hands_back`): a ``MARK`` on the main thread after the other thread's
last event, so that the main thread's remaining work follows that thread, as a hand-over
inside the window does.
"""

from __future__ import annotations

import numpy as np

from stepscope.analysis import RankAnalysis
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.launches import column_i64
from stepscope.model.stepmodel.steps import I64
from stepscope.schema_enums import StepSource

HAND_BACK = -2  # the api row of the closing hand-back event (-1: an input wait)


def host_window(g: StepGraph, ra: RankAnalysis, idx: int) -> tuple[int, int]:
    """The host window of step ``idx``: its markers, or for a step recovered from the kernel
    stream's periodicity whose markers issued more or fewer GPU records than ran in them, one
    launch of the main thread to the same launch a period later (module docstring); the
    markers where those launches are not found."""
    steps = ra.steps.steps
    t0, t1 = steps[idx].start_ns, steps[idx].end_ns
    if ra.steps.source != StepSource.PERIODICITY.value or idx + 1 >= len(steps):
        return t0, t1
    gp, paired = g.gpu, g.gpu_api_row >= 0
    ran = int((paired & (gp.start >= t0) & (gp.start < t1)).sum())
    if ran == int((paired & (g.issued_ns >= t0) & (g.issued_ns < t1)).sum()):
        return t0, t1  # the markers hold one period's launches as they are
    a = _first_main_launch(g, t0, t1)
    b = _first_main_launch(g, steps[idx + 1].start_ns, steps[idx + 1].end_ns)
    return (a, b) if a is not None and b is not None and b > a else (t0, t1)


def _first_main_launch(g: StepGraph, t0: int, t1: int) -> int | None:
    """When the launch call of the first GPU record starting in ``[t0, t1)`` that the main
    thread launched began (else of the first launched by any thread); None without one."""
    gp, row = g.gpu, g.gpu_api_row
    j = np.flatnonzero((gp.start >= t0) & (gp.start < t1) & (row >= 0))
    if j.size == 0:
        return None
    j = j[np.argsort(gp.start[j], kind="stable")]
    api = g.table("api_calls")
    main = j[column_i64(api, "pid")[row[j]] == column_i64(api, "tid")[row[j]]]
    return int(g.issued_ns[main[0] if main.size else j[0]])


def hands_back(source: str, thread: I64, main: int, run: int) -> bool:
    """Whether a window of steps found by ``source`` (a ``StepSource`` value) ends with another
    thread's run of ``run`` or more events after the main thread's last (``thread``: each host
    event's thread, in order, the step's start mark first): a periodicity window where the main
    thread issued calls of its own."""
    if source != StepSource.PERIODICITY.value or thread.size == 0:
        return False
    mine = np.flatnonzero(thread == main)
    if mine.size <= 1:  # only the step's start mark: the main thread issued nothing (a JAX
        return False    # executor's thread launches everything), there is nothing to hand back
    tail = thread[int(mine[-1]) + 1:]
    return tail.size >= run and bool((tail == tail[-1]).all())


__all__ = ["HAND_BACK", "hands_back", "host_window"]
