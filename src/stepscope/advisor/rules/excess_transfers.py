"""``excess_transfers``: host-device traffic beyond the input batch inside the step.

Two patterns, one finding each (see docs/rules/excess_transfers.md):

**Round trips.** A DtoH copy, then host work with no kernel launch on that thread, then an
HtoD copy on the same thread in the same step: data went to the CPU to be computed on
(NumPy, a CPU-placed op) and came back. Conditions, all required: both copies issued in
the same steady step by the same thread (when the trace links their calls); some kernel
ran in the step before the DtoH (the data read back was produced in this step, not the
previous step's result); no kernel launch from that thread between the two copies (else
the GPU was given other work); no data-loader wait in between (that is the next batch,
not a round trip). Several DtoH copies before one HtoD form one round trip.

    span    = [first DtoH start, max(HtoD end, its call end, the sync waiting for it)]
    saving  = time in span with no kernel running
              + GPU idle after the span until the GPU gets work again (the host
                refilling the queue the round trip drained)

**Many tiny host-to-device copies.** At least 8 HtoD copies of < 64 KiB per step (not part
of a round trip): small tensors made from host values one by one. Each costs a call, a
framework op and often a sync, while the GPU may wait.

    host_i  = [start of the framework op issuing copy i (<= 200 us, else the call),
               max(op end, call end, the sync waiting for it)]
    saving  = time with no kernel running in the union of the host_i and of the GPU
              copies of the step - that of one median copy (the batched copy that remains)

Both: summed per step, mean over steady steps, then over ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stepscope.advisor.base import Context, Finding, Fix, Where
from stepscope.advisor.rules import _transfers as tr
from stepscope.model.round_trips import (
    RoundTrips,
    TinyCopies,
    Traffic,
    excess_transfers,
)

ID = "excess_transfers"
CATEGORY = "memcpy"

FIX_ROUND_TRIP = Fix(
    pytorch=("Keep the computation on the GPU: replace the NumPy/CPU code between "
             ".cpu()/.numpy() and the copy back with torch ops on the device tensor "
             "(torch.clamp, torch.where, torch.sort ...); avoid .cpu(), .numpy(), .tolist() "
             "and torch.from_numpy(...).to(device) inside the step."),
    tensorflow=("Find the op that runs on the CPU with "
                "tf.debugging.set_log_device_placement(True); avoid tf.numpy_function / "
                "tf.py_function and ops without a GPU kernel inside the step, or move them "
                "into the tf.data pipeline."),
    jax=("Keep arrays on the device inside the step: use jax.numpy instead of numpy, no "
         "np.asarray()/jax.device_get() of intermediate values; jit the whole step so "
         "nothing leaves the device."),
    cuda=("Do the host-side computation in a kernel (or a library call) so the data "
          "stays in device memory."),
)
FIX_TINY = Fix(
    pytorch=("Batch small host values into one tensor and copy once "
             "(torch.tensor(list_of_values, device=...) instead of one torch.tensor per "
             "value); create constants on the device once, outside the loop; keep "
             "counters and scalars as device tensors."),
    tensorflow=("Build constants once outside the step function (tf.function captures them); "
                "pass small values as one tensor."),
    jax=("Pass small host values as one array argument, or close over constants in the "
         "jitted step, instead of device_put of each scalar."),
    cuda="Pack the small host buffers into one pinned buffer and issue one cudaMemcpyAsync.",
)


def _where(x: RoundTrips | TinyCopies) -> Where:
    return Where(rank=x.rank, steps=x.steps, start_ns=x.start_ns, end_ns=x.end_ns,
                 call_sites=x.sites)


def _traffic_line(t: Traffic) -> str:
    return (f"per step: HtoD {tr.fmt_bytes(t.htod)} ({tr.fmt_bytes(t.htod_input)} of it issued "
            f"before the step's first kernel launch, usually the input batch), DtoH "
            f"{tr.fmt_bytes(t.dtoh)}")


def check(ctx: Context) -> Sequence[Finding]:
    results = [r for r in (excess_transfers(ctx.graph_of(ra.rank), ra) for ra in ctx.ranks) if r is not None]
    n_ranks = max(1, len(ctx.ranks))
    out: list[Finding] = []
    trips = [r for r in results if r.trips is not None]
    if trips:
        saving = sum(r.trips.saving_ms for r in trips if r.trips) / n_ranks
        top = max(trips, key=lambda r: r.trips.saving_ns / r.n_steps if r.trips else 0.0)
        rt = top.trips
        if rt is not None and ctx.worth_reporting(saving):
            n = rt.n_steps
            ops = (f"{tr.fmt_ms(rt.host_ns / n / 1e6)} ms per step, "
                   f"{tr.fmt_ms(rt.op_ns / n / 1e6)} ms of it in framework ops"
                   + (f" ({', '.join(rt.ops)})" if rt.ops else "")
                   + ("; the rest is Python/NumPy code the trace does not break down"
                      if rt.op_ns < 0.5 * rt.host_ns else ""))
            ev = [
                (f"{tr.plural(rt.count / n, 'round trip', 'round trips')} per step: "
                f"{tr.fmt_bytes(rt.dtoh_bytes / n)} DtoH, then "
                f"{tr.fmt_ms(rt.host_ns / n / 1e6)} ms of host work with no kernel launch, then "
                f"{tr.fmt_bytes(rt.htod_bytes / n)} HtoD back"),
                f"host work between the copies: {ops}",
                (f"the copies take {tr.fmt_ms(rt.copy_ns / n / 1e6)} ms of GPU time per step; "
                f"the GPU ran no kernel for {tr.fmt_ms(rt.saving_ns / n / 1e6)} ms per step "
                "from the first copy until it got work again"),
                _traffic_line(top.traffic),
            ]
            if rt.sites:
                ev.append("read back at: " + "; ".join(rt.sites))
            if n_ranks > 1:
                ev.append(f"{len(trips)} of {n_ranks} ranks; the largest is rank {rt.rank}")
            out.append(ctx.finding(
                id=ID, category=CATEGORY,
                title=(f"Data goes to the CPU and back inside the step "
                       f"({tr.plural(rt.count / n, 'round trip', 'round trips')}, "
                       f"{tr.fmt_bytes((rt.dtoh_bytes + rt.htod_bytes) / n)} per step): "
                       f"keeping it on the GPU saves ~{tr.fmt_ms(saving)} ms per step"),
                saving_ms=saving,
                method=("time with no kernel running from the DtoH copy's start to the end of "
                        "the HtoD copy (its call and any sync waiting for it), plus the GPU "
                        "idle gap after it until the GPU got work again; summed per step, mean "
                        f"over {n} steady steps" + (" and over ranks" if n_ranks > 1 else "")
                        + "; the GPU op replacing the CPU work is assumed to cost little"),
                evidence=ev, fix=FIX_ROUND_TRIP, where=_where(rt),
                confidence=ctx.host_confidence, note=ctx.host_note,
            ))
    tinies = [r for r in results if r.tiny is not None]
    if tinies:
        saving = sum(r.tiny.saving_ms for r in tinies if r.tiny) / n_ranks
        top = max(tinies, key=lambda r: r.tiny.saving_ns / r.n_steps if r.tiny else 0.0)
        tc = top.tiny
        if tc is not None and ctx.worth_reporting(saving):
            n = tc.n_steps
            ev = [
                (f"{tr.plural(tc.count / n, 'HtoD copy', 'HtoD copies')} of < 64 KiB per step "
                f"({tr.fmt_bytes(tc.nbytes / n)} in all)"),
                (f"the GPU ran no kernel for {tr.fmt_ms(tc.span_ns / n / 1e6)} ms per step while "
                "the host issued them (framework op, copy call, sync)"),
                _traffic_line(top.traffic),
            ]
            if tc.sites:
                ev.append("issued from: " + "; ".join(tc.sites))
            out.append(ctx.finding(
                id=ID, category=CATEGORY,
                title=(f"{tr.fmt_count(tc.count / n)} tiny host-to-device copies per step: "
                       f"batching them saves ~{tr.fmt_ms(saving)} ms per step"),
                saving_ms=saving,
                method=("time with no kernel running while the host issued the tiny copies "
                        "(the framework op around each copy call, the call, the copy and any "
                        "sync waiting for it), minus one median copy (the batched copy that "
                        f"remains); summed per step, mean over {n} steady steps"
                        + (" and over ranks" if n_ranks > 1 else "")),
                evidence=ev, fix=FIX_TINY, where=_where(tc),
                confidence=ctx.host_confidence, note=ctx.host_note,
            ))
    return out


@dataclass(frozen=True)
class _Rule:
    id: str = ID
    title: str = "Host-device traffic beyond the inputs"
    category: str = CATEGORY
    requires: tuple[str, ...] = ("memcpy",)

    def check(self, ctx: Context) -> Sequence[Finding]:
        return check(ctx)


RULE = _Rule()

__all__ = ["RULE"]
