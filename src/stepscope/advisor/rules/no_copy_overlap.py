"""``no_copy_overlap``: copies serialised with compute instead of running under it.

A HtoD (or DtoH) copy of at least 64 KiB from pinned (or device-registered) host memory that
no kernel overlaps, while GPU work waits for it: the copy sits on the compute stream (or
was issued too late) and the copy engine works while the SMs idle. Pageable copies are
left to ``pageable_memcpy`` (they cannot overlap anything until pinned); copies < 64 KiB
to ``excess_transfers``. See docs/rules/no_copy_overlap.md.

A copy is *on the critical path* when GPU work queued behind it: the next kernel on its
device starts at or after the copy's end and was launched (its API call ended) before the
copy ended; or, with no launch call in the trace, it starts within 10 us of the copy's
end; or a host thread was blocked in a sync / blocking call at the copy's end (waiting
for it). Estimate::

    exposed(step) = sum over critical copies issued in the step of their time with no
                    kernel running
    saving(step)  = min(exposed, compute time issued in the step)

(prefetching the next batch on a copy stream hides a copy under the step's kernels, at
most as much as there is compute to hide it under). Mean over steady steps, then ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stepscope.advisor.base import Context, Finding, Fix, Where
from stepscope.advisor.rules import _transfers as tr
from stepscope.model.copy_overlap import copy_overlap

ID = "no_copy_overlap"
CATEGORY = "memcpy"

FIX = Fix(
    pytorch=("Overlap the copy with compute: keep host tensors pinned, copy with "
             "non_blocking=True on a side stream (s = torch.cuda.Stream(); with "
             "torch.cuda.stream(s): nxt = batch.to(dev, non_blocking=True)), and before using "
             "it call torch.cuda.current_stream().wait_stream(s) and nxt.record_stream("
             "torch.cuda.current_stream()); issue the next batch's copy before running this "
             "step (the data-prefetcher pattern)."),
    tensorflow=("Stage batches ahead of the step: tf.data.experimental.prefetch_to_device("
                "'/gpu:0') (or copy_to_device + prefetch(2)) at the end of the input pipeline."),
    jax=("Double-buffer: jax.device_put the next batch before calling the jitted step on the "
         "current one (device_put is asynchronous), e.g. flax.jax_utils.prefetch_to_device("
         "iterator, 2)."),
    cuda=("Issue cudaMemcpyAsync from pinned memory on a second stream, record an event "
          "and cudaStreamWaitEvent on the compute stream; copy batch i+1 while batch i "
          "computes."),
)


def check(ctx: Context) -> Sequence[Finding]:
    best = tr.mean_over_ranks(ctx, (copy_overlap(ctx.graph_of(ra.rank), ra) for ra in ctx.ranks))
    if best is None:
        return []
    saving_ms, r, results = best
    n_ranks = max(1, len(ctx.ranks))
    n = r.n_steps
    gbs = r.nbytes / r.copy_ns if r.copy_ns else 0.0
    where_stream = (f"on the compute stream ({', '.join(str(s) for s in r.streams)})"
                    if r.same_stream == r.count else
                    f"on stream(s) {', '.join(str(s) for s in r.streams)}; "
                    f"{r.same_stream} of {r.count} on a stream that also runs compute")
    kind = "/".join(r.directions)
    ev = [
        (f"{tr.plural(r.count / n, kind + ' copy', kind + ' copies')} per step "
        f"({tr.fmt_bytes(r.nbytes / n)}, {tr.fmt_ms(r.copy_ns / n / 1e6)} ms at {gbs:.1f} GB/s) "
        f"{where_stream}"),
        (f"{tr.fmt_ms(r.exposed_ns / n / 1e6)} ms per step of them overlap no kernel while GPU "
        "work waited for them (kernels queued behind, or the host blocked on them)"),
        f"{tr.fmt_ms(r.compute_ns / n / 1e6)} ms of compute per step to hide them under",
    ]
    if r.sites:
        ev.append("issued from: " + "; ".join(r.sites))
    if n_ranks > 1:
        ev.append(f"{len(results)} of {n_ranks} ranks; the largest is rank {r.rank}")
    cap, note = tr.host_ahead_cap(saving_ms, ctx.step_ms, r.gpu)
    return [ctx.finding(
        id=ID, category=CATEGORY,
        title=(f"{tr.fmt_bytes(r.nbytes / n)} of copies per step run with no compute under them "
               f"({tr.fmt_ms(r.exposed_ns / n / 1e6)} ms exposed): prefetching on a copy stream "
               f"saves ~{tr.fmt_ms(saving_ms)} ms per step"),
        saving_ms=saving_ms,
        method=("time with no kernel running of the pinned >= 64 KiB HtoD/DtoH copies that GPU "
                "work waited for (the next kernel was launched before the copy ended, or the "
                "host was blocked on it), capped per step at the compute time issued in the "
                f"step; mean over {n} steady steps" + (" and over ranks" if n_ranks > 1 else "")),
        evidence=ev, fix=FIX,
        where=Where(rank=r.rank, steps=r.steps, start_ns=r.start_ns, end_ns=r.end_ns,
                    call_sites=r.sites),
        max_severity=cap, note=note,
    )]


@dataclass(frozen=True)
class _Rule:
    id: str = ID
    title: str = "Copies serialised with compute"
    category: str = CATEGORY
    requires: tuple[str, ...] = ("memcpy", "kernels")

    def check(self, ctx: Context) -> Sequence[Finding]:
        return check(ctx)


RULE = _Rule()

__all__ = ["RULE"]
