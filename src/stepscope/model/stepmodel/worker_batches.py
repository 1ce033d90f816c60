"""What the training process pays to take each batch from its DataLoader workers.

A worker process makes a batch in shared memory; the training process maps it and, with
``pin_memory=True``, a thread of its own copies it into page-locked memory before the step's
``.to(device, non_blocking=True)`` can use it. That thread takes one batch at a time, so however
many workers make batches, the loader delivers no faster than it hands them over: a floor on
the loader's period that grows with the batch's bytes.

Measured (``benchmarks/scenarios/loader_probe.py --workers 8,14 --batch-sizes 8,32,64,128
--sample-ms 0.02``: a ``DataLoader`` with 8 and 14 workers and ``pin_memory=True`` that makes
batches far faster than they are taken, iterated with no model): on a 16-core Intel Xeon host of
an NVIDIA H100 (torch 2.11, Python 3.12, Linux), batches of 2, 8, 16 and 32 MiB came every 1.53-1.59,
4.35-4.57, 6.13-7.01 and 13.6-15.4 ms. The least-squares line through the eight is
:data:`PIN_FIXED_NS` + bytes / :data:`PIN_GBS` (1.48, 4.01, 7.40 and 14.2 ms). Workers that
are busy themselves slow it further (8 MiB with 6-12 workers of a 0.25 ms/sample transform:
4.8-5.4 ms). Below :data:`MEASURED_MIN_BYTES` nothing was measured: the floor goes to zero in
proportion to the bytes (a lower bound: a batch's fixed costs do not shrink with it). Without
``pin_memory`` the training process's own thread maps the batch (8 MiB every 2.1-2.2 ms in the
same measurement), on the step's path; the remedy always pins, so that case is not modelled.
"""

from __future__ import annotations

import numpy as np

from stepscope.model.stepmodel.steps import HostKind, OpKind, StepModel

MIB = 1 << 20
PIN_FIXED_NS = 629_000.0  # per batch (see the module docstring)
PIN_GBS = 2.48  # bytes per ns, i.e. GB/s: pin_memory's thread, per batch byte
MEASURED_MIN_BYTES = 2 * MIB
MEASURED_MAX_BYTES = 32 * MIB


def pinned_handover_ns(nbytes: int) -> float:
    """The least time between two pinned batches of ``nbytes`` that the training process
    takes from its workers."""
    if nbytes <= 0:
        return 0.0
    if nbytes < MEASURED_MIN_BYTES:
        return pinned_handover_ns(MEASURED_MIN_BYTES) * nbytes / MEASURED_MIN_BYTES
    return PIN_FIXED_NS + nbytes / PIN_GBS


def batch_bytes(m: StepModel, copies: np.ndarray) -> list[int]:
    """Per input wait of the step that ``copies`` follow (a host-event mask: the batch's
    host-to-device copies, :func:`catalog.batch_copies`): the bytes those copies move, in the
    waits' order. A copy belongs to the last input wait of its thread before it."""
    h, o = m.host, m.ops
    per_event = np.zeros(h.size, dtype=np.int64)
    moved = (o.kind == OpKind.MEMCPY) & np.isin(o.trigger, np.flatnonzero(copies))
    np.add.at(per_event, o.trigger[moved], o.nbytes[moved])
    last: dict[int, int] = {}
    total: dict[int, int] = {}
    for e in range(h.size):
        t = int(h.thread[e])
        if h.kind[e] == HostKind.INPUT:
            last[t] = e
        elif copies[e] and t in last:
            total[last[t]] = total.get(last[t], 0) + int(per_event[e])
    return [b for _, b in sorted(total.items()) if b > 0]


def describe(sizes: list[int]) -> str:
    """One line for the remedy's assumptions: the floor these batches set and where it comes
    from."""
    floor = sum(pinned_handover_ns(b) for b in sizes)
    mib = sum(sizes) / MIB / len(sizes)
    each = "a batch" if len(sizes) == 1 else f"each of the step's {len(sizes)} batches"
    scope = ("" if MEASURED_MIN_BYTES <= min(sizes) and max(sizes) <= MEASURED_MAX_BYTES else
             f"; {mib:.2f} MiB is outside the 2-32 MiB measured, so the figure is "
             + ("a lower bound" if min(sizes) < MEASURED_MIN_BYTES else "extrapolated"))
    return (f"pin_memory's thread takes {each} ({mib:.1f} MiB) from the workers one at a time, "
            f"in {PIN_FIXED_NS / 1e6:.2f} ms a batch plus its bytes at {PIN_GBS:g} GB/s (as "
            f"measured on an H100 host's 16-core Xeon): the loader delivers a step's batches "
            f"no faster than every {floor / 1e6:.2f} ms "
            f"however many workers it has{scope}")


__all__ = ["batch_bytes", "describe", "pinned_handover_ns"]
