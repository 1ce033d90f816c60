"""What the communication model (``model.communication``, ``model.comm_remedies``) reads of one
rank's GPU activity and kernels, cut to what it needs: a per-rank fact
(``advisor.rank_facts``), computed where the rank is analysed.

The model's only cross-rank input is the rank's waits for late ranks inside collectives
(``model.collectives``): intervals inside its communication kernels, taken out of its exposed
communication. Everything else is of the rank alone, so a worker of a rank-parallel analysis
sends back, instead of the rank's kernel frame and activity sets (hundreds of kB):

* per steady window, the communication, compute, free (compute with no communication under
  it) and exposed (communication with no compute) time, and the exposed intervals themselves
  inside the steady windows (the waits are subtracted from them);
* per device with communication kernels in the steady windows (the remedies' unit): those
  kernels (start, end, steady window, name, the next kernel start of the rank after each),
  the device's compute intervals cut to their spans (what hides them, with the waits), the
  free time per window, the compute kernels the contention estimate may walk back over
  before a collective (``_before``), and whether the compute looks like XLA's fusions.

The cross-rank model (``model.collectives``) reads, of each rank, its compute intervals under
its collectives (``collective_compute``: a wait inside a collective is exposed where no compute
ran).

The results are the same as from the whole tables: every interval operation the model does
is inside the spans kept (the tests compare the reports, serial and pooled).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from stepscope.analysis import RankAnalysis
from stepscope.analysis.busy import IntervalSet, gpu_activity, is_communication
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.intervals import I64
from stepscope.analysis.kernels import kernel_frame
from stepscope.analysis.results import FACT
from stepscope.model import transfers as mt

XLA_NAMES = 5000  # compute kernel names looked at to tell an XLA program (its fusions)
SYNC_AFTER_NS = 50_000  # a host wait that returns this soon after a collective waited on it


@dataclass(frozen=True)
class DeviceComm:
    """One device's communication kernels that start in the rank's steady windows (by start),
    and what the remedies read around them (module docstring)."""

    device: int
    free_ns: I64  # per steady window: the device's compute with no communication under it
    start: I64
    end: I64
    step: I64  # index into the steady windows
    names: tuple[str, ...]  # the distinct kernel names
    name_idx: I64  # per kernel, into ``names``
    next_start: I64  # the first kernel start of the rank at or after its end; -1: none
    compute: IntervalSet  # the device's compute kernels, cut to these kernels' spans
    before_ts: I64  # compute kernels the contention estimate may walk over (``_before``)
    before_dur: I64
    before_blocks: npt.NDArray[Any]  # the kernel frame's values (None / NaN: unknown)
    before_per_sm: npt.NDArray[Any]
    xla: bool  # a compute kernel among the first ``XLA_NAMES`` is named *fusion*
    sync_start: I64  # the rank's sync and copy calls that return within ``SYNC_AFTER_NS``
    sync_end: I64  # after one of these kernels ends (and started before): what may wait on it


@dataclass(frozen=True)
class CommInputs:
    """The rank's communication model inputs over its steady windows (module docstring)."""

    comm_ns: I64  # per steady window: time with a communication kernel running
    compute_ns: I64  # with a compute kernel running
    free_ns: I64  # compute with no communication under it
    exposed_ns: I64  # communication with no compute
    exposed: IntervalSet  # those intervals, inside the steady windows
    devices: tuple[DeviceComm, ...]  # by device


def steady_windows(ra: RankAnalysis) -> tuple[I64, I64]:
    """The steady steps' timeline windows, in step order (what the model sums over)."""
    idx = [i for i, s in enumerate(ra.steps.steps) if s.steady]
    return ra.steps.window_starts[idx], ra.steps.window_ends[idx]


def comm_inputs(g: StepGraph, ra: RankAnalysis) -> CommInputs | None:
    """Rank ``ra``'s ``CommInputs``; ``None`` without a steady step or communication in
    them. Once per rank graph (a per-rank fact)."""
    return g.memo((FACT, "comm_inputs"), lambda: _comm_inputs(g, ra))


def _comm_inputs(g: StepGraph, ra: RankAnalysis) -> CommInputs | None:
    ws, we = steady_windows(ra)
    if ws.size == 0:
        return None
    act = mt.activity(g)
    comm = act.communication.within(ws, we)
    if int(comm.sum()) == 0:
        return None
    exposed = act.communication - act.compute
    return CommInputs(comm_ns=comm, compute_ns=act.compute.within(ws, we),
                      free_ns=(act.compute - act.communication).within(ws, we),
                      exposed_ns=exposed.within(ws, we),
                      exposed=exposed & IntervalSet.of(ws, we),
                      devices=_devices(g, ws, we))


def _devices(g: StepGraph, ws: I64, we: I64) -> tuple[DeviceComm, ...]:
    k = kernel_frame(g)
    if k.num_rows == 0:
        return ()
    comm_m = is_communication(k.column("name"))
    ts = np.asarray(k.column("ts_ns").to_numpy(), dtype=np.int64)
    dur = np.asarray(k.column("dur_ns").to_numpy(), dtype=np.int64)
    starts = np.sort(ts)
    dev = np.asarray(k.column("device").fill_null(0).to_numpy(), dtype=np.int64)
    names = k.column("name").to_numpy(zero_copy_only=False)
    out: list[DeviceComm] = []
    for d, act in sorted(gpu_activity(g).items()):
        m = comm_m & (dev == d)
        if not m.any():
            continue
        s, e = ts[m], ts[m] + dur[m]
        idx = np.searchsorted(ws, s, side="right") - 1
        ok = (idx >= 0) & (s < we[np.maximum(idx, 0)])
        if not ok.any():
            continue
        rows = np.flatnonzero(m)[ok]
        order = np.argsort(ts[rows], kind="stable")
        rows, step = rows[order], idx[ok][order]
        s, e = ts[rows], ts[rows] + dur[rows]
        nxt = np.searchsorted(starts, e, side="left")
        uniq, inv = np.unique(np.array([str(n) for n in names[rows]], dtype=object),
                              return_inverse=True)
        cm = ~comm_m & (dev == d)
        before = _before(ts, dur, cm, s, step, e - s)
        out.append(DeviceComm(
            device=int(d), free_ns=(act.compute - act.communication).within(ws, we),
            start=s, end=e, step=np.asarray(step, dtype=np.int64),
            names=tuple(str(n) for n in uniq), name_idx=np.asarray(inv, dtype=np.int64),
            next_start=np.where(nxt < starts.size, starts[np.minimum(nxt, starts.size - 1)], -1),
            compute=act.compute & IntervalSet.of(s, e),
            before_ts=ts[before], before_dur=dur[before],
            before_blocks=_values(k, "blocks")[before],
            before_per_sm=_values(k, "active_blocks_per_sm")[before],
            xla=any("fusion" in str(n) for n in names[cm][:XLA_NAMES]),
            **_waiting_on(g, e)))
    return tuple(out)


def host_waits(g: StepGraph) -> tuple[I64, I64]:
    """Start and end of the rank's sync and copy calls (what the remedies look for after a
    collective), once per rank graph."""
    return g.memo(("host_waits",), lambda: _host_waits(g))


def _host_waits(g: StepGraph) -> tuple[I64, I64]:
    api = g.table("api_calls")
    if api.num_rows:
        kind = np.asarray(api.column("kind").to_numpy(zero_copy_only=False), dtype=object)
        sel = (kind == "sync") | (kind == "memcpy")
        a_s = np.asarray(api.column("ts_ns").to_numpy()[sel], dtype=np.int64)
        return a_s, a_s + np.asarray(api.column("dur_ns").to_numpy()[sel], dtype=np.int64)
    return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)


def _waiting_on(g: StepGraph, ends: I64) -> dict[str, I64]:
    """The rank's sync and copy calls that started before one of ``ends`` and returned at
    most ``SYNC_AFTER_NS`` after it: the only ones the remedies' test can hit."""
    a_s, a_e = host_waits(g)
    e = np.sort(ends)
    lo = np.searchsorted(e, np.maximum(a_e - SYNC_AFTER_NS, a_s + 1), side="left")
    hi = np.searchsorted(e, a_e, side="right")
    keep = hi > lo
    return {"sync_start": a_s[keep], "sync_end": a_e[keep]}


def _values(k: pa.Table, name: str) -> npt.NDArray[Any]:
    return np.asarray(k.column(name).to_numpy(zero_copy_only=False))


def _before(ts: I64, dur: I64, cm: npt.NDArray[np.bool_], c_start: I64, c_step: I64,
            c_dur: I64) -> I64:
    """Rows of the compute kernels (``cm``) the contention estimate
    (``comm_remedies._contention_before``) can visit: it walks back from a step's first
    overlappable collective over the compute kernels that end before it, latest first, until
    their time reaches the step's overlappable collectives' time. Which collective comes first
    depends on the other ranks' waits, so here: from every collective, until the step's
    communication time (all its collectives'), whole groups of kernels that end together
    at the far end. Sorted rows (the frame's order, which the walk's ties follow)."""
    rows = np.flatnonzero(cm)
    if rows.size == 0 or c_start.size == 0:
        return rows
    ends = ts[rows] + dur[rows]
    order = np.argsort(ends, kind="stable")
    rows, ends = rows[order], ends[order]
    cum = np.concatenate(([0], np.cumsum(dur[rows])))
    need = np.bincount(c_step, weights=c_dur)[c_step]
    hi = np.searchsorted(ends, c_start, side="right")  # kernels ending by the collective
    lo = np.searchsorted(cum, cum[hi] - need, side="right") - 1
    lo = np.clip(lo, 0, None)
    lo = np.searchsorted(ends, ends[np.minimum(lo, ends.size - 1)], side="left")  # whole ties
    mark = np.zeros(rows.size + 1, dtype=np.int64)
    keep = hi > lo
    np.add.at(mark, lo[keep], 1)
    np.add.at(mark, hi[keep], -1)
    return np.sort(rows[np.cumsum(mark[:-1]) > 0])


def collective_compute(g: StepGraph) -> IntervalSet:
    """The rank's compute kernels' intervals cut to its collectives' spans (all a wait inside
    a collective can overlap); once per rank graph (a per-rank fact, ``advisor.rank_facts``:
    the whole set is tens of kB a rank)."""
    return g.memo((FACT, "collective_compute"), lambda: _collective_compute(g))


def _collective_compute(g: StepGraph) -> IntervalSet:
    c = g.table("collectives")
    if c.num_rows == 0:
        return IntervalSet.empty()
    s = np.asarray(c.column("ts_ns").fill_null(0).to_numpy(), dtype=np.int64)
    d = np.asarray(c.column("dur_ns").fill_null(0).to_numpy(), dtype=np.int64)
    return mt.activity(g).compute & IntervalSet.of(s, s + np.maximum(d, 0))


__all__ = ["SYNC_AFTER_NS", "CommInputs", "DeviceComm", "collective_compute", "comm_inputs",
           "host_waits", "steady_windows"]
