"""``memory_pressure``: device memory near capacity, and allocator churn inside the step.

Two findings (see docs/rules/memory_pressure.md):

**Allocator churn.** Device allocation API calls (``api_calls.kind`` alloc/free:
``cudaMalloc``, ``cudaFree``, ``cuMemAlloc``, ``cudaHostAlloc``...) issued inside steady
steps. A warmed-up caching allocator (PyTorch, TF's BFC, XLA) makes none; calls every step
mean something empties the cache (``torch.cuda.empty_cache()``), memory is so tight the
allocator frees and retries, or buffers are pinned/allocated per step. ``cudaFree``
synchronises the device: the host waits for all queued work, and the GPU then idles until
the host has launched new work. Estimate per step::

    calls   = time in the union of the alloc/free calls with the GPU idle (no kernel,
              copy or memset running)
    refill  = per burst of calls (calls of one thread and step less than 100 us apart) that contains
              a synchronising free: the GPU idle time after the burst until the GPU gets work
              again, within the step (time in data-loader waits and other host syncs not
              counted), at most the GPU time the burst waited through (the lead the host had
              and lost)
    saving  = calls + refill

**Near capacity.** Peak device memory (``memory_events``: max of total_reserved, else
total_allocated; or a ``gpu.memory_used_bytes`` NVML sample) >= 90% of the device's
``total_memory``: out-of-memory risk, and the allocator has to free cached blocks and retry.
Being full costs no time by itself: INFO with no saving, unless churn is also seen (then
it is evidence of the churn finding).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stepscope.advisor.base import Context, Finding, Fix, Severity, Where
from stepscope.advisor.engine import SkipRule
from stepscope.advisor.rules import _transfers as tr
from stepscope.model.churn import churn
from stepscope.model.memory import Peak, has_memory_data, peaks

ID = "memory_pressure"
CATEGORY = "memory"
NEAR_FULL = 0.90

FIX_CHURN = Fix(
    pytorch=("Do not call torch.cuda.empty_cache() (or gc + empty_cache) inside the training "
             "loop: the caching allocator then has to cudaFree and cudaMalloc every step, and "
             "cudaFree synchronises the device. If memory is fragmented, set "
             "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; if it is simply full, reduce "
             "the batch or use activation checkpointing (torch.utils.checkpoint); pin host "
             "buffers once, not per step."),
    tensorflow=("Let the allocator keep its pool: TF_GPU_ALLOCATOR=cuda_malloc_async, or "
                "tf.config.experimental.set_memory_growth(gpu, True) set once at start-up; "
                "avoid clearing sessions/models inside the loop."),
    jax=("Keep XLA's preallocation (XLA_PYTHON_CLIENT_PREALLOCATE defaults to true) or set "
         "XLA_PYTHON_CLIENT_MEM_FRACTION to what the job needs; avoid "
         "XLA_PYTHON_CLIENT_ALLOCATOR=platform, which allocates and frees on demand."),
    cuda=("Allocate device and pinned buffers once and reuse them, or use the stream-ordered "
          "allocator (cudaMallocAsync/cudaFreeAsync with a memory pool), which does not "
          "synchronise the device."),
)
FIX_FULL = Fix(
    pytorch=("Leave headroom: reduce the batch (gradient accumulation keeps the effective "
             "batch), use activation checkpointing, bf16 autocast, a fused/8-bit optimizer or "
             "FSDP/ZeRO sharding; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True when "
             "reserved memory is far above allocated (fragmentation)."),
    tensorflow=("Reduce the batch, use mixed precision (tf.keras.mixed_precision), "
                "TF_GPU_ALLOCATOR=cuda_malloc_async against fragmentation."),
    jax=("Donate the buffers the step replaces (jax.jit(step, donate_argnums=(0, 1)) for "
         "parameters and optimizer state) so XLA updates them in place instead of holding two "
         "copies; reduce the batch, jax.checkpoint (remat) for activations, shard parameters "
         "and optimizer state; note XLA preallocates 75% by default, so compare with "
         "XLA_PYTHON_CLIENT_PREALLOCATE=false to see the real peak."),
    cuda="Reduce the working set, or reuse buffers instead of holding several generations.",
)


def _peak_line(p: Peak) -> str:
    line = (f"peak device memory {tr.fmt_bytes(p.peak)} of {tr.fmt_bytes(p.capacity)} "
            f"({100 * p.share:.0f}%) on device {p.device}, from {p.source}")
    if p.allocated and p.peak > p.allocated:
        line += (f"; allocated peak {tr.fmt_bytes(p.allocated)}, so "
                 f"{tr.fmt_bytes(p.peak - p.allocated)} is cached but unused (fragmentation "
                 "or freed blocks)")
    return line


def check(ctx: Context) -> Sequence[Finding]:
    has_api = ctx.graph.has("api_calls")
    if not has_api and not any(has_memory_data(ctx.graph_of(ra.rank)) for ra in ctx.ranks):
        raise SkipRule("needs allocator API calls, memory_events (torch.profiler "
                       "profile_memory=True) or GPU memory samples; the run has none")
    n_ranks = max(1, len(ctx.ranks))
    full = [(ra.rank, p) for ra in ctx.ranks for p in peaks(ctx.graph_of(ra.rank), ra)
            if p.share >= NEAR_FULL]
    churns = [c for c in (churn(ctx.graph_of(ra.rank), ra) for ra in ctx.ranks) if c is not None]
    out: list[Finding] = []
    saving = sum(c.saving_ms for c in churns) / n_ranks
    if churns and ctx.worth_reporting(saving):
        c = max(churns, key=lambda x: (x.saving_ns / x.n_steps, -x.rank))
        n = c.n_steps
        names = ", ".join(f"{nm} x{k / n:.3g}" for nm, k in c.names[:4])
        ev = [
            (f"{tr.plural(c.count / n, 'allocator call', 'allocator calls')} per step ({names}), "
            f"{tr.fmt_ms(c.call_ns / n / 1e6)} ms per step in them"),
            (f"the GPU was idle for {tr.fmt_ms(c.calls_idle_ns / n / 1e6)} ms per step of that "
            f"time, and {tr.fmt_ms(c.refill_ns / n / 1e6)} ms per step after synchronising "
            "frees until the host had launched new work"),
        ]
        if c.bare_frees:
            frees = tr.plural(c.bare_frees / n, "synchronising free", "synchronising frees")
            ev.append(f"{frees} per step outside any framework op: an explicit cache release "
                      "such as torch.cuda.empty_cache()")
        ev += [_peak_line(p) for _, p in full]
        if c.sites:
            ev.append("called from: " + "; ".join(c.sites))
        if n_ranks > 1:
            ev.append(f"{len(churns)} of {n_ranks} ranks; the largest is rank {c.rank}")
        out.append(ctx.finding(
            id=ID, category=CATEGORY,
            title=(f"Allocator churn: "
                   f"{tr.plural(c.count / n, 'device alloc/free call', 'device alloc/free calls')}"
                   f" per step cost ~{tr.fmt_ms(saving)} ms per step"),
            saving_ms=saving,
            method=("GPU-idle time inside the alloc/free calls of the step, plus, after each "
                    "burst of calls containing a synchronising free, the GPU-idle time until "
                    "the GPU got work again (data-loader waits and other syncs excluded), at "
                    "most the GPU time the burst waited through; mean over "
                    f"{n} steady steps" + (" and over ranks" if n_ranks > 1 else "")),
            evidence=ev, fix=FIX_CHURN,
            where=Where(rank=c.rank, steps=c.steps, start_ns=c.start_ns, end_ns=c.end_ns,
                        call_sites=c.sites),
            confidence=ctx.host_confidence, note=ctx.host_note,
        ))
    elif full:
        rank, p = max(full, key=lambda x: (x[1].share, -x[0]))
        out.append(ctx.finding(
            id=ID, category=CATEGORY,
            title=(f"Device memory {100 * p.share:.0f}% full ({tr.fmt_bytes(p.peak)} of "
                   f"{tr.fmt_bytes(p.capacity)}): little headroom"),
            saving_ms=0.0,
            method=("not estimated: being near capacity costs no step time by itself (no "
                    "allocator calls were seen inside the steps); it risks out-of-memory "
                    "errors and allocator retries when shapes change"),
            evidence=[_peak_line(x) + (f" (rank {r})" if n_ranks > 1 else "")
                      for r, x in full],
            fix=FIX_FULL, where=Where(rank=rank), max_severity=Severity.INFO,
        ))
    return out


@dataclass(frozen=True)
class _Rule:
    id: str = ID
    title: str = "Device memory pressure and allocator churn"
    category: str = CATEGORY
    requires: tuple[str, ...] = ()

    def check(self, ctx: Context) -> Sequence[Finding]:
        return check(ctx)


RULE = _Rule()

__all__ = ["RULE"]
