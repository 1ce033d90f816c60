"""The step model's values: one representative steady step of one rank, as arrays.

A :class:`StepModel` holds, for one rank, the dependencies that set the length of one steady
step (the steady step whose length is closest to the median):

* **host events**, every host thread's calls that matter, in measured start order across the
  threads (:class:`HostKind`): kernel launches, async copies and memsets (``LAUNCH``), syncs and
  blocking copies (``BLOCK``: the thread waits until the awaited stream(s) finish), input waits
  (``INPUT``), and a ``MARK`` at the step's start that triggers GPU work no call issued. Each
  event has the thread's host work before it (``pre``: since its previous event ended, or
  since the step started) and its own cost (``own``: the call's duration; after the wait for a
  ``BLOCK``; the wait itself for ``INPUT``); each thread ends ``tail`` after its last event;
* **GPU ops**, every kernel, copy and memset the step issued, each triggered by a host event
  (its launch), on its stream in queue order, with its measured duration, the latency from its
  launch to its start (``lat``), the gap after its stream predecessor (``gap``) and, where the
  measured timeline shows one, a dependency on an op of another stream (``dep``: an event
  wait). Collectives are NCCL kernels with their measured duration: the wait for the other
  ranks is in it, a measured input.

Edits (``model.stepmodel.edits``) return changed copies; ``replay`` (``model.stepmodel.replay``)
turns a model into a predicted step time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Any

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
I8 = npt.NDArray[np.int8]
F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]

WAIT_ALL = -1  # a BLOCK event waiting for every stream of the rank
WAIT_NONE = -2  # a BLOCK event that no longer waits (its sync removed)


class HostKind(IntEnum):
    MARK = 0
    LAUNCH = 1
    BLOCK = 2
    INPUT = 3


class SyncRole(IntEnum):
    """Why a host event waits for the GPU (``BLOCK`` events; ``NONE`` elsewhere)."""

    NONE = 0
    EXPLICIT = 1  # a sync call after no copy: cudaDeviceSynchronize, torch.cuda.synchronize()
    READBACK = 2  # a sync right after a device-to-host copy: .item(), .cpu(), .tolist()
    COPY_SYNC = 3  # a sync right after a host-to-device copy: .to(device) non_blocking=False
    BLOCKING_COPY = 4  # a copy call that blocks by itself (pageable memory, cudaMemcpy)


class CopyDir(IntEnum):
    NONE = 0
    HTOD = 1
    DTOH = 2
    OTHER = 3


class OpKind(IntEnum):
    KERNEL = 0
    MEMCPY = 1
    MEMSET = 2
    UNSEEN = 3  # GPU work a launch issued whose record the trace lacks (``row`` -1)


@dataclass(frozen=True)
class HostEvents:
    thread: I64  # index into StepModel.threads
    kind: I8  # HostKind
    pre: I64  # ns of host work before the event on its thread
    own: I64  # ns: the call's own cost (after the wait for BLOCK); the wait for INPUT
    wait: I64  # BLOCK: the stream index awaited, WAIT_ALL or WAIT_NONE; else WAIT_NONE
    back: I64  # BLOCK: 0 waits for the stream(s) as they are; k > 0 for the GPU work of the
    # step k steps back (an event sync on a host running ahead)
    after: I64  # the event just before it (measured order) when on another thread, else -1:
    # a thread handing over to another (autograd's backward thread after the main thread)
    role: I8  # SyncRole
    copy: I8  # CopyDir of the copy the event issues (or, for a sync, the copy just before it)
    pageable: B  # the copy it issues is from/to pageable host memory
    name: I64  # index into StepModel.names
    start: I64  # ns: when the event began in the captured step (absolute, as measured;
    # edits keep it): remedies that act on time ranges find their events by it

    @property
    def size(self) -> int:
        return int(self.kind.size)


@dataclass(frozen=True)
class GpuOps:
    trigger: I64  # host event index that issued it (sorted ascending)
    stream: I64  # index into StepModel.streams
    kind: I8  # OpKind
    dur: I64
    lat: I64  # ns from its trigger's start to the earliest it can start
    gap: I64  # ns after its stream predecessor ends
    dep: I64  # op index (same step) it waits for on another stream, -1 none
    row: I64  # row of its kernels / memcpy / memset table
    nbytes: I64  # copies and memsets, else 0
    comm: B  # a communication (NCCL) kernel (kernel names are not kept: ``row`` finds them)

    @property
    def size(self) -> int:
        return int(self.dur.size)


@dataclass(frozen=True)
class ProfilerCost:
    """What the profiler or the capture added to each host event's ``pre`` and ``own``, and
    to each thread's ``tail``, and how fast each traced thread's dispatch ran against its
    typical speed (``speed``, per thread, at most 1; None: as measured)
    (``model.stepmodel.profiler``, ``model.stepmodel.host_speed``)."""

    pre: I64
    own: I64
    tail: I64
    speed: F64 | None = None


@dataclass(frozen=True)
class StepModel:
    """One rank's representative steady step (module docstring)."""

    rank: int
    step_index: int  # the step (StepInfo index) the model was taken from
    measured_ns: int  # median steady step (the report's step time)
    step_ns: int  # the modelled step's own length
    steady_steps: int
    threads: tuple[tuple[int, int], ...]  # (pid, tid)
    streams: tuple[tuple[int, int], ...]  # (device, stream)
    names: tuple[str, ...]
    host: HostEvents
    ops: GpuOps
    tail: I64  # per thread: host work after its last event until the step ends
    launch_latency_ns: int  # the rank's median launch-to-start latency on an idle stream
    # what torch.profiler added to the host events (``profiler.ProfilerCost``); None: nothing
    profiler: ProfilerCost | None = None

    def with_host(self, **cols: Any) -> StepModel:
        return replace(self, host=replace(self.host, **cols))

    def with_ops(self, **cols: Any) -> StepModel:
        return replace(self, ops=replace(self.ops, **cols))

    def with_tail(self, tail: I64) -> StepModel:
        return replace(self, tail=tail)


def i64(values: Any) -> I64:
    return np.asarray(values, dtype=np.int64)


__all__ = ["B", "CopyDir", "F64", "GpuOps", "HostEvents", "HostKind", "I64", "I8", "OpKind",
           "ProfilerCost", "StepModel", "SyncRole", "WAIT_ALL", "WAIT_NONE", "i64"]
