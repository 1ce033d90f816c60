"""``memory_underused``: most device memory unused while the GPU waits on the host.

Fires when, on a rank, both hold (see docs/rules/memory_underused.md):

* peak device memory (``memory_events``: max total_reserved, else total_allocated; or a
  ``gpu.memory_used_bytes`` NVML sample) is below 30% of the device's ``total_memory``;
* the GPU is underused for reasons a larger batch amortises: busy less than 70% of the
  device-side step (the span from the first GPU work issued in a step to the first of the
  next one; when the trace cannot link GPU work to its calls, the breakdown's GPU
  categories over the host step), and at least 30% of the host step is GPU idle while the
  host launches, runs other work, syncs or nothing known (the breakdown's ``launch``,
  ``host``, ``sync`` and ``idle``; ``input_wait`` is excluded: a larger batch does not
  feed a data-bound GPU faster; so is GPU-idle time inside framework ops of >= 50 us that
  launch nothing, i.e. CPU computation such as a ``torch.sort`` of a CPU tensor, which
  grows with the batch instead of being amortised by it).

A larger batch spreads the per-step host cost (launches, Python, syncs) over more samples,
but changes the optimisation (learning rate, convergence), so this is advice, not a
measured saving: always INFO, ``est_saving_ms = 0``. Skipped when the run has no device
memory data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stepscope.advisor.base import Context, Finding, Fix, Severity, Where
from stepscope.advisor.engine import SkipRule
from stepscope.advisor.rules import _transfers as tr
from stepscope.analysis import RankAnalysis
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.results import FACT
from stepscope.model import transfers as mt
from stepscope.model.confidence import Confidence
from stepscope.model.memory import Peak, cpu_compute_ns, has_memory_data, peaks

ID = "memory_underused"
CATEGORY = "memory"
MAX_MEMORY_SHARE = 0.30
MAX_BUSY_SHARE = 0.70
MIN_HOST_IDLE_SHARE = 0.30
HOST_IDLE = ("launch", "host", "sync", "idle")

FIX = Fix(
    pytorch=("Try a larger batch (scale the learning rate, e.g. linearly with warm-up) so the "
             "per-step launch and Python cost is spread over more samples; if the batch is "
             "fixed, cut the per-step host cost instead: CUDA graphs / torch.compile("
             "mode='reduce-overhead'), fewer .item() syncs."),
    tensorflow=("Try a larger batch (and scale the learning rate); wrap the step in "
                "tf.function(jit_compile=True) to cut per-op dispatch."),
    jax=("Try a larger batch (and scale the learning rate); make sure the whole step is one "
         "jitted function and avoid host round trips inside it."),
    cuda="Give each launch more work (larger batches per kernel), or capture the step in a "
         "CUDA graph.",
)


@dataclass(frozen=True)
class RankResult:
    rank: int
    peak: Peak
    busy_share: float  # of the device-side step (or host step)
    busy_basis: str
    idle_share: float  # launch + host + sync + idle of the host step
    parts_ms: dict[str, float]
    cpu_ms: float  # GPU idle in CPU-computing ops, not counted as amortisable
    step_ms: float
    steps: tuple[int, ...]


def analyze_rank(ctx: Context, ra: RankAnalysis) -> RankResult | None:
    return rank_result(ctx.graph_of(ra.rank), ra)


def rank_result(g: StepGraph, ra: RankAnalysis) -> RankResult | None:
    """The rank's figures, once per rank graph: of the rank alone, a per-rank fact
    (``advisor.rank_facts``)."""
    return g.memo((FACT, ID), lambda: _rank_result(g, ra))


def _rank_result(g: StepGraph, ra: RankAnalysis) -> RankResult | None:
    ps = peaks(g, ra)
    if not ps:
        return None
    peak = max(ps, key=lambda p: p.share)
    if peak.share >= MAX_MEMORY_SHARE:
        return None
    bd = ra.breakdown.mean_ms
    step = sum(bd.values())
    if step <= 0:
        return None
    win = mt.steady_windows(ra)
    cpu_ms = cpu_compute_ns(g, win) / 1e6
    idle = max(0.0, sum(bd.get(k, 0.0) for k in HOST_IDLE) - cpu_ms) / step
    gs = mt.gpu_steps(g, ra, mt.load_api(g))
    if gs is not None and gs.mean_ns > 0:
        busy = mt.activity(g).busy.within(gs.starts, gs.ends)
        busy_share = float(np.sum(busy)) / float(np.sum(gs.ends - gs.starts))
        basis = "of the device-side step"
    else:
        busy_share = sum(bd.get(k, 0.0) for k in ("compute", "communication", "copies")) / step
        basis = "of the step (step breakdown)"
    if busy_share >= MAX_BUSY_SHARE or idle < MIN_HOST_IDLE_SHARE:
        return None
    return RankResult(rank=ra.rank, peak=peak, busy_share=busy_share, busy_basis=basis,
                      idle_share=idle, parts_ms={k: bd.get(k, 0.0) for k in HOST_IDLE},
                      cpu_ms=cpu_ms, step_ms=step, steps=win.steps)


def check(ctx: Context) -> Sequence[Finding]:
    if not any(has_memory_data(ctx.graph_of(ra.rank)) for ra in ctx.ranks):
        raise SkipRule("no device memory data: needs memory_events (torch.profiler "
                       "profile_memory=True) or GPU memory samples")
    results = [r for r in (analyze_rank(ctx, ra) for ra in ctx.ranks) if r is not None]
    if not results:
        return []
    r = min(results, key=lambda x: (x.busy_share, x.rank))
    p = r.peak
    parts = ", ".join(f"{k} {tr.fmt_ms(v)}" for k, v in r.parts_ms.items() if v > 0)
    ev = [
        (f"peak device memory {tr.fmt_bytes(p.peak)} of {tr.fmt_bytes(p.capacity)} "
        f"({100 * p.share:.0f}%) on device {p.device}, from {p.source}"),
        (f"GPU busy {100 * r.busy_share:.0f}% {r.busy_basis}; GPU idle while the host "
        f"launches, works or syncs {100 * r.idle_share:.0f}% of the {tr.fmt_ms(r.step_ms)} ms "
        f"step (breakdown: {parts} ms)"),
    ]
    if r.cpu_ms > 0:
        ev.append(f"not counted: {tr.fmt_ms(r.cpu_ms)} ms per step of CPU computation in "
                  "framework ops that launch nothing (it grows with the batch)")
    if len(ctx.ranks) > 1:
        ev.append(f"{len(results)} of {len(ctx.ranks)} ranks; shown: rank {r.rank}")
    conf = Confidence.LOW if ctx.host_confidence is Confidence.LOW else Confidence.MEDIUM
    return [ctx.finding(
        id=ID, category=CATEGORY,
        title=(f"GPU memory {100 * p.share:.0f}% used and GPU busy {100 * r.busy_share:.0f}%: "
               "a larger batch would use the GPU better"),
        saving_ms=0.0,
        method=("not estimated: a larger batch spreads the per-step host cost (launches, "
                "Python, syncs) over more samples, but how much throughput it gains, and "
                "whether the model trains as well, depends on the model"),
        evidence=ev, fix=FIX, where=Where(rank=r.rank, steps=r.steps),
        confidence=conf, note=ctx.host_note, max_severity=Severity.INFO,
    )]


@dataclass(frozen=True)
class _Rule:
    id: str = ID
    title: str = "Device memory mostly unused while the GPU is underused"
    category: str = CATEGORY
    requires: tuple[str, ...] = ()

    def check(self, ctx: Context) -> Sequence[Finding]:
        return check(ctx)


RULE = _Rule()

__all__ = ["RULE", "RankResult", "analyze_rank", "rank_result"]
