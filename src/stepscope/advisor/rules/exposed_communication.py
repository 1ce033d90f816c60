"""``exposed_communication``: collectives (NCCL/RCCL kernels) that no compute runs under.

Exposed communication is the step time during which a communication kernel runs and no
compute kernel does (the ``communication`` category of the step breakdown). What fixing it
saves depends on the remedy, and each is estimated from the trace's own evidence
(``model.comm_remedies``):

- ``remove``: collectives a host sync waits on right after, repeats of what other (overlapped)
  collectives of the step already carry, latency-bound small ones: their exposed time;
- ``overlap``: the rest (a gradient reduction after the whole backward) split into buckets
  under the compute before it: exposed time, less the extra latency of the split calls and the
  last bucket's transfer (a latency-bandwidth model, its bandwidth the run's own), less the
  compute slowdown beside the collectives (the compute kernels' waves on the SMs NCCL leaves);
- ``overlap_bf16``: the same with half the bytes (fp32 all-reduce), less the casts.

The headline is the best remedy's, mean over the steady steps, then over ranks (a rank
without communication counts 0); every remedy is in the evidence. Confidence medium; when
two thirds of the communication already overlaps compute, severity is info at most.
Evidence: exposed communication per step and share, the total and overlapped share (HTA's
comm/compute overlap), the remedies, the top collectives by exposed time, and per rank figures
when there are several. See docs/rules/exposed_communication.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stepscope.advisor.base import Context, Finding, Fix, Severity, Where
from stepscope.advisor.rules import _transfers as tr
from stepscope.advisor.rules._kernels import short
from stepscope.model.collectives import CrossRank, bus_factor, run_cross_rank
from stepscope.model.communication import CommOverlap, comm_overlap
from stepscope.model.confidence import Confidence
from stepscope.model.links import link_of

ID = "exposed_communication"
CATEGORY = "communication"
MAX_RANKS_LISTED = 8
# When most of the communication already runs under compute, the overlap works and what is
# left is mostly the part that depends on the step's last compute (the final bucket): info at
# most. HTA's public traces: 46% overlap with 21.5% of kernel time exposed (a problem), 69%
# overlap (none); docs/rules/exposed_communication.md.
MOSTLY_OVERLAPPED = 2 / 3

FIX = Fix(
    pytorch=("DDP: let gradient buckets all-reduce during the backward - smaller buckets "
             "start earlier (DistributedDataParallel(bucket_cap_mb=...), try 10-50; the first "
             "bucket is 1 MB), gradient_as_bucket_view=True saves the copy into the buckets, "
             "static_graph=True when the graph does not change; with gradient accumulation "
             "wrap the non-final micro-steps in `with model.no_sync():` so only the last one "
             "communicates; send bf16 gradients with model.register_comm_hook(None, "
             "torch.distributed.algorithms.ddp_comm_hooks.default_hooks.bf16_compress_hook). "
             "FSDP: overlap the all-gathers with forward_prefetch=True and backward_prefetch="
             "BackwardPrefetch.BACKWARD_PRE (FSDP2: reshard_after_forward=False for the last "
             "blocks, or set_modules_to_forward_prefetch / set_modules_to_backward_prefetch). "
             "In general a larger per-GPU batch gives each collective more compute to hide "
             "under."),
    tensorflow=("MirroredStrategy / MultiWorkerMirroredStrategy: pack gradients into fewer, "
                "larger all-reduces (tf.distribute.experimental.CommunicationOptions("
                "bytes_per_pack=..., implementation=NCCL)); mixed precision halves the bytes "
                "of the gradients; a larger per-replica batch gives the collectives more "
                "compute to hide under."),
    jax=("let XLA schedule collectives under compute: XLA_FLAGS=\"--xla_gpu_enable_latency_"
         "hiding_scheduler=true\" (with --xla_gpu_enable_pipelined_all_gather / "
         "_reduce_scatter / _all_reduce=true and --xla_gpu_all_reduce_combine_threshold_bytes "
         "to combine small collectives); shard so that parameters are all-gathered layer by "
         "layer, and a larger per-device batch."),
    cuda=("run NCCL on its own stream and issue each collective as soon as its input is "
          "ready, with events to order the consumer; split large collectives to pipeline "
          "them with the compute that follows; a larger per-GPU batch amortises them."),
)


def _ms(ns: float) -> str:
    return tr.fmt_ms(ns / 1e6)


def check(ctx: Context) -> Sequence[Finding]:
    x = run_cross_rank(ctx.analysis)
    per_rank = [comm_overlap(ctx.graph_of(ra.rank), ra,
                             waits=(rc.wait_intervals if x and (rc := x.rank(ra.rank)) else ()))
                for ra in ctx.ranks]
    best = tr.mean_over_ranks(ctx, per_rank)
    if best is None:
        return []
    saving_ms, r, results = best
    n = r.n_steps
    exposed_ms = r.exposed_ns / n / 1e6
    share = ctx.share(exposed_ms)
    ev = [
        (f"{_ms(r.exposed_ns / n)} ms per step ({100 * share:.1f}% of the step) of "
         f"communication kernels with no compute kernel running"),
        (f"communication {_ms(r.comm_ns / n)} ms per step, {100 * r.overlap_share:.1f}% of it "
         f"overlapped by compute (comm/compute overlap); compute {_ms(r.compute_ns / n)} ms, "
         f"{_ms(r.free_ns / n)} ms of it with no communication under it"),
    ]
    ev.extend(_remedy_lines(results, len(ctx.ranks)))
    for c in r.top[:3]:
        ev.append(f"{short(c.name)}: {tr.fmt_count(c.count / n)} per step, "
                  f"{_ms(c.total_ns / n)} ms, {_ms(c.exposed_ns / n)} ms exposed")
    if len(ctx.ranks) > 1:
        ev.append(_ranks_line(results, len(ctx.ranks)))
    if x is not None:
        ev.extend(_volume_lines(ctx, x))
    waited = sum(x.waiting_ns / x.n_steps for x in results) / max(1, len(results))
    if waited > 0:
        ev.append(f"not counted: {_ms(waited)} ms per step (mean over ranks) spent waiting in "
                  f"collectives for a late rank (see straggler)")
    overlap = sum(x.comm_ns - x.exposed_ns for x in results) / max(
        1, sum(x.comm_ns for x in results))
    cap = Severity.CRITICAL
    if overlap >= MOSTLY_OVERLAPPED:
        cap = Severity.INFO
        ev.append(f"{100 * overlap:.0f}% of the communication already overlaps compute: the "
                  f"rest is likely what waits for the step's last compute (info at most)")
    top = r.top[0].name if r.top else "collectives"
    rem = r.best
    verb = _VERB.get(rem.kind, "fixing it") if rem else "fixing it"
    title = (f"Exposed communication {tr.fmt_ms(exposed_ms)} ms per step "
             f"({100 * share:.0f}%, {short(top, 48)}): {verb} saves "
             f"~{tr.fmt_ms(saving_ms)} ms per step")
    method = (f"per steady step, the time communication (NCCL/RCCL) kernels run with no compute "
              f"kernel running; saving of the best remedy ({rem.kind if rem else 'none'}): "
              f"removing a collective saves its exposed time; overlapping one saves it less "
              f"the split buckets' extra latency and the last bucket (latency-bandwidth model, "
              f"alpha calibrated on H100 NVLink) and less the compute's slowdown on the SMs "
              f"the communication kernels hold ({100 * r.sm_share:.0f}% of them); mean over "
              f"{n} steady steps"
              + (f" and over {len(ctx.ranks)} ranks" if len(ctx.ranks) > 1 else ""))
    return [ctx.finding(
        id=ID, category=CATEGORY, title=title, saving_ms=saving_ms, method=method,
        evidence=ev, fix=FIX,
        where=Where(rank=r.rank, steps=(r.worst,), start_ns=r.start_ns, end_ns=r.end_ns,
                    kernels=tuple(c.name for c in r.top)),
        confidence=Confidence.MEDIUM, max_severity=cap,
        note=("the remedy is told from the trace (host syncs, repeated data, size), not from "
              "the program: check that the collective it calls removable is not needed; on "
              "several ranks, time a rank waits inside a collective for a late rank is left "
              "out (straggler) where the collectives could be matched across ranks"),
    )]


def _volume_lines(ctx: Context, x: CrossRank) -> list[str]:
    """The seed's check: bytes per step through the link, and the least time that takes."""
    sized = [i for i in x.instances if i.bytes]
    if not sized or x.n_steps == 0:
        return []
    n = max(len(i.ranks) for i in sized)
    per_step = sum(i.bytes or 0 for i in sized) / x.n_steps
    bus = sum((i.bytes or 0) * bus_factor(i.op, len(i.ranks)) for i in sized) / x.n_steps
    ops = sorted({i.op for i in sized})
    line = (f"{per_step / 1e6:.1f} MB per step through {', '.join(o.replace('_', '-') for o in ops)} "
            f"over {n} ranks")
    if "all_reduce" in ops:
        line += " (DDP: the gradients, = parameters x bytes per element; bf16 halves fp32)"
    link = link_of([d for ra in ctx.ranks for d in ra.devices])
    if link is not None and x.hosts == 1:
        line += (f"; at the {link.reachable_gbs:.0f} GB/s NCCL reaches on this {link.kind} "
                 f"that is at least {_ms(bus / link.reachable_gbs)} ms of transfer per step")
    return [line]


_VERB = {"remove": "removing it", "overlap": "overlapping it with compute",
         "overlap_bf16": "overlapping it in bf16"}
_WHAT = {"remove": "remove or defer it", "overlap": "overlap it with compute",
         "overlap_bf16": "overlap it and send bf16"}


def _remedy_lines(results: Sequence[CommOverlap], n_ranks: int) -> list[str]:
    """One line per remedy: its saving per step, mean over ranks, and how it was reached
    (from the rank that gains most)."""
    kinds = sorted({m.kind for x in results for m in x.remedies})
    rows: list[tuple[float, str]] = []
    for kind in kinds:
        per = [(m.saving_ns / x.n_steps, m, x.n_steps) for x in results for m in x.remedies
               if m.kind == kind]
        mean = sum(v for v, _, _ in per) / max(1, n_ranks)
        _, top, n = max(per, key=lambda vm: vm[0])
        rows.append((mean, f"remedy {_WHAT.get(kind, kind)}: saves ~{_ms(mean)} ms per "
                           f"step of {_ms(top.exposed_ns / max(1, n))} ms exposed "
                           f"({top.detail})"))
    rows.sort(key=lambda r: -r[0])
    return [line for _, line in rows]


def _ranks_line(results: Sequence[CommOverlap], n_ranks: int) -> str:
    rows = sorted(results, key=lambda x: x.rank)
    parts = [f"rank {x.rank} {_ms(x.exposed_ns / x.n_steps)} ms ({100 * x.overlap_share:.0f}% "
             f"overlapped)" for x in rows[:MAX_RANKS_LISTED]]
    more = f", ... {len(rows) - MAX_RANKS_LISTED} more" if len(rows) > MAX_RANKS_LISTED else ""
    return (f"exposed communication per step on {len(rows)} of {n_ranks} ranks: "
            + ", ".join(parts) + more)


@dataclass(frozen=True)
class _Rule:
    id: str = ID
    title: str = "Communication not overlapped by compute"
    category: str = CATEGORY
    requires: tuple[str, ...] = ("kernels",)

    def check(self, ctx: Context) -> Sequence[Finding]:
        return check(ctx)


RULE = _Rule()

__all__ = ["RULE"]
