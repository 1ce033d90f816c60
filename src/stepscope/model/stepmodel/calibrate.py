"""Calibrate a step model to the step the program takes without the profiler, where it is
known (the user's training log, or the steps ``record`` timed right after its capture window):
the one number a trace cannot give.

A trace's host side runs slower than the program does untraced, by the profiler's or the
capture's cost per recorded event and by the host's own pace, which moves (an untraced host-bound
step moved 0.8-1.5x within one process on an H100: docs/accuracy.md); ``stepmodel.profiler``
takes out the cost it can count, and what is left is an estimate. The GPU side moves less, but
does move: a GPU-bound step untraced is a few percent off its traced kernels (clocks, the
profiler's own kernels and copies).

Given the untraced step, one side of the model is scaled by one factor until the replayed step
is the given one (and the modelled step's own length with it): the host (:func:`scale_host`:
every host interval, the work before each event, each call's own cost, each input wait and each
thread's tail) or the GPU (:func:`scale_gpu`: every op's duration). Each is a bisection of its
factor in [``MIN_FACTOR``, ``MAX_FACTOR``] (the replayed step never shrinks as a factor grows);
the side taken is the one that reaches the step with the smaller change, ``|log factor|``
weighted by ``SIDE_WEIGHT`` (the GPU's three times the host's): the side that sets the step's
length, since the other can only reach it by becoming the bottleneck (a GPU-bound step 5%
longer than its kernels is slower kernels, not a host five times slower), and where both
share it, the host unless the GPU needs far less. The GPU's pace moves less between a traced
and an untraced run: on 16 H100/H200 data sets the GPU-bound scenarios came out at 0.9-1.22
of their kernels, the host-bound ones at 0.56-2.0 of their host (docs/accuracy.md).
Remedies then edit the calibrated model, so a fix that leaves a GPU-bound step is predicted
from the GPU work, and one that leaves a host-bound step from the host at the pace the given
step implies.

Not reached (``Calibration.reached`` False, the model kept as it was): a given step neither side
can reach within its range (``floor_ns``-``ceiling_ns``: the shortest and longest replayed steps
either side gives at its bounds).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from stepscope.model.stepmodel.replay import replay
from stepscope.model.stepmodel.steps import StepModel

MIN_FACTOR = 0.125
MAX_FACTOR = 8.0
TOLERANCE = 0.002  # relative: the replayed step within 0.2% of the target
MAX_ROUNDS = 40
SIDES = ("host", "gpu")
# the weight of each side's |log factor|: the GPU's pace moves less than the host's between a
# traced and an untraced run (module docstring; docs/accuracy.md, "The side the calibration
# scales")
SIDE_WEIGHT = {"host": 1.0, "gpu": 3.0}


@dataclass(frozen=True)
class Calibration:
    target_ns: float  # the step to reach, in the replay's units
    side: str  # "host" or "gpu": the side scaled ("" when not reached)
    factor: float  # that side's time is multiplied by it (1.0 when not reached)
    replayed_ns: float  # the calibrated model's replayed step
    reached: bool
    floor_ns: float  # the shortest step either side reaches at MIN_FACTOR
    ceiling_ns: float  # the longest step either side reaches at MAX_FACTOR


def _mul(x: npt.NDArray[np.int64], k: float) -> npt.NDArray[np.int64]:
    return np.round(x * k).astype(np.int64)


def scale_host(m: StepModel, k: float) -> StepModel:
    """Every host interval of ``m`` (``pre``, ``own``, ``tail``) multiplied by ``k``."""
    h = m.host
    return m.with_host(pre=_mul(h.pre, k), own=_mul(h.own, k)).with_tail(_mul(m.tail, k))


def scale_gpu(m: StepModel, k: float) -> StepModel:
    """Every GPU op's duration multiplied by ``k`` (launch latency and gaps kept)."""
    return m.with_ops(dur=_mul(m.ops.dur, k))


def _bisect(m: StepModel, scale: Callable[[StepModel, float], StepModel], target_ns: float,
            start_ns: float) -> tuple[float, float]:
    """The factor (and its replayed step) that brings ``scale(m, k)`` to ``target_ns``: a
    geometric bisection in [MIN_FACTOR, MAX_FACTOR] (the caller checked it is in reach)."""
    lo, hi = MIN_FACTOR, MAX_FACTOR
    best, best_ns = 1.0, start_ns
    for _ in range(MAX_ROUNDS):
        if abs(best_ns - target_ns) <= TOLERANCE * target_ns:
            break
        k = math.sqrt(lo * hi)
        ns = replay(scale(m, k)).step_ns
        if abs(ns - target_ns) < abs(best_ns - target_ns):
            best, best_ns = k, ns
        if ns < target_ns:
            lo = k
        else:
            hi = k
    return best, best_ns


def calibrate(m: StepModel, target_ns: float) -> tuple[StepModel, Calibration]:
    """``m`` with one side scaled so that it replays at ``target_ns`` (module docstring); ``m``
    itself when neither side reaches it."""
    scalers = {"host": scale_host, "gpu": scale_gpu}
    start = replay(m).step_ns
    found: list[tuple[float, str, float, float]] = []  # (|log k|, side, k, replayed)
    floors, ceilings = [], []
    for side in SIDES:
        scale = scalers[side]
        floor = replay(scale(m, MIN_FACTOR)).step_ns
        ceiling = replay(scale(m, MAX_FACTOR)).step_ns
        floors.append(floor)
        ceilings.append(ceiling)
        if target_ns > 0 and floor <= target_ns <= ceiling:
            k, ns = _bisect(m, scale, target_ns, start)
            if abs(ns - target_ns) <= TOLERANCE * target_ns:
                found.append((SIDE_WEIGHT[side] * abs(math.log(k)), side, k, ns))
    lo, hi = min(floors), max(ceilings)
    if not found:
        return m, Calibration(target_ns, "", 1.0, start, False, lo, hi)
    _, side, k, ns = min(found)
    # the modelled step's own length moves with it (the loader's period that
    # ``catalog.dataloader`` reads is the step's)
    x = replace(scalers[side](m, k), step_ns=int(round(m.step_ns * ns / start)) if start > 0
                else m.step_ns)
    return x, Calibration(target_ns, side, k, ns, True, lo, hi)


__all__ = ["MAX_FACTOR", "MIN_FACTOR", "Calibration", "calibrate", "scale_gpu", "scale_host"]
