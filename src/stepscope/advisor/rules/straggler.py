"""``straggler``: one rank arrives late at the collectives and every other rank waits for it.

From the collectives matched across ranks (``model.collectives``): at each call the rank
with the shortest kernel arrived last; the call would have ended earlier by the gap to the
next-latest rank (its ``cost``), of which the waiting ranks lose the part no compute of
theirs ran under (its ``stall``). Per rank, summed over the common steady steps::

    saving per step = sum(stall of the calls where the rank arrived last) / steps

which is the waiting time the other ranks' steps would lose if that rank kept up with the
next-latest one (waits hidden under their own compute, as with FSDP's prefetched
all-gathers, cost nothing). The rule names the rank with the largest cost and fires when it is the late rank in
most steps (at least max(60%, 1.5/N) of them, N ranks: on a balanced run the late rank
changes from step to step) and the saving is at least 5% of the step. The cause is read from
the late rank's own step breakdown against the median of the others (the category where it
spends the most extra time: input wait, host work, GPU compute, copies, syncs).
See docs/rules/straggler.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stepscope.advisor.base import WARNING_SHARE, Context, Finding, Fix, Severity, Where
from stepscope.advisor.rules import _transfers as tr
from stepscope.analysis import RankAnalysis
from stepscope.model.collectives import CrossRank, run_cross_rank
from stepscope.model.confidence import Confidence

ID = "straggler"
HOST_CAUSES = frozenset({"host", "launch", "idle", "sync", "input_wait"})
CATEGORY = "communication"
MIN_CONCENTRATION = 0.6
MAX_RANKS_LISTED = 8

# the breakdown categories a late rank can spend its extra time in, and what they mean
CAUSES: dict[str, str] = {
    "input_wait": "waiting for its input pipeline (the data loader)",
    "host": "host-side work (Python, CPU ops) while its GPU idles",
    "launch": "launching kernels (host-side dispatch) while its GPU idles",
    "idle": "host time no recorded event explains, while its GPU idles",
    "sync": "blocking on device syncs",
    "compute": "more GPU compute than the others (a slower GPU or more work)",
    "copies": "exposed memory copies",
}
CAUSE_FIX: dict[str, str] = {
    "input_wait": ("give that rank's DataLoader more workers (num_workers, pin_memory=True, "
                   "persistent_workers=True) and check its storage: the ranks' input must "
                   "keep pace"),
    "host": ("find the extra host work on that rank (its host timeline and stack samples: "
             "logging, metrics, checkpointing, evaluation on one rank) and move it out of the "
             "step, onto a background thread, or do it every N steps"),
    "launch": ("cut that rank's launch overhead (CUDA graphs, torch.compile): its host "
               "cannot keep its GPU fed"),
    "idle": ("look at that rank's host timeline and stack samples for the work the capture "
             "did not name (Python busy loops, blocking I/O)"),
    "sync": "remove the syncs only that rank makes (.item(), .cpu(), printing tensors)",
    "compute": ("check that rank's GPU (nvidia-smi -q -d CLOCK,PERFORMANCE,TEMPERATURE: "
                "clocks throttled?) and its share of the work (uneven batches or sequence "
                "lengths: bucket by length, drop_last=True)"),
    "copies": "overlap that rank's copies (pinned memory, non_blocking=True)",
}

FIX_BASE = Fix(
    pytorch=("The other ranks wait inside the collective for the late one: make the ranks "
             "do the same work per step. "),
    tensorflow=("Every replica waits for the slowest at each all-reduce: make the replicas "
                "do the same work per step. "),
    jax=("Every device waits for the slowest at each collective: make the processes do the "
         "same work per step. "),
    cuda="Every rank waits for the slowest at each collective. ",
)


def _ms(ns: float) -> str:
    return tr.fmt_ms(ns / 1e6)


def _cause(late: RankAnalysis, others: Sequence[RankAnalysis]) -> tuple[str, float, float]:
    """The breakdown category where ``late`` spends the most time over the others' median:
    (category, its ms, the others' median ms); ("", 0, 0) when none exceeds."""
    best = ("", 0.0, 0.0)
    for cat in CAUSES:
        mine = late.breakdown.mean_ms.get(cat, 0.0)
        theirs = float(np.median([o.breakdown.mean_ms.get(cat, 0.0) for o in others]))
        if mine - theirs > best[1] - best[2]:
            best = (cat, mine, theirs)
    return best


def check(ctx: Context) -> Sequence[Finding]:
    x = run_cross_rank(ctx.analysis)
    if x is None or not x.instances or x.n_steps == 0:
        return []
    worst = max(x.ranks, key=lambda r: (r.late_stall_ns, -r.rank))
    if worst.late_stall_ns <= 0:
        return []
    saving_ms = worst.late_stall_ns / x.n_steps / 1e6
    n = len(x.ranks)
    conc, conc_line = _concentration(x, worst.rank)
    if conc < max(MIN_CONCENTRATION, 1.5 / n) or ctx.share(saving_ms) < WARNING_SHARE:
        return []
    late = ctx.analysis.rank(worst.rank)
    others = [ra for ra in ctx.ranks if ra.rank != worst.rank and x.rank(ra.rank) is not None]
    cause, mine, theirs = _cause(late, others) if others else ("", 0.0, 0.0)
    others_rc = [r for r in x.ranks if r.rank != worst.rank]
    median_wait = float(np.median([r.wait_ns for r in others_rc])) / x.n_steps
    median_exposed = float(np.median([r.exposed_wait_ns for r in others_rc])) / x.n_steps
    ev = [
        (f"rank {worst.rank} arrived last at {worst.late} of {len(x.instances)} matched "
         f"collectives ({conc_line}); the others waited {_ms(median_wait)} ms per step in them "
         f"(median rank), {_ms(median_exposed)} ms of it with no compute of theirs running"),
        _waits_line(x),
    ]
    what = ""
    if cause:
        what = CAUSES[cause]
        ev.append(f"rank {worst.rank}'s step: {tr.fmt_ms(mine)} ms {cause.replace('_', ' ')} "
                  f"against {tr.fmt_ms(theirs)} ms on the other ranks (median): {what}")
    if x.hosts > 1:
        ev.append(f"ranks on {x.hosts} hosts: clocks aligned on collective ends (offsets "
                  + ", ".join(f"rank {r} {_ms(o)} ms" for r, o in list(x.offsets_ns.items())[:4])
                  + "); waits are from durations and need no alignment")
    title = (f"Rank {worst.rank} is the straggler"
             + (f" ({what.split(' (')[0]})" if what else "")
             + f": the other ranks wait ~{tr.fmt_ms(saving_ms)} ms per step for it in the "
             f"collectives")
    method = (f"at each collective matched across {n} ranks (by {x.matched_by}), the rank with "
              f"the shortest kernel arrived last; the gap to the next-shortest is how much "
              f"earlier the call would end had it kept up, counted where the waiting ranks ran "
              f"no compute meanwhile. Sum over the calls rank {worst.rank} was last at, per "
              f"step over {x.n_steps} common steady steps")
    extra = CAUSE_FIX.get(cause, "")
    fix = Fix(pytorch=FIX_BASE.pytorch + extra, tensorflow=FIX_BASE.tensorflow + extra,
              jax=FIX_BASE.jax + extra, cuda=FIX_BASE.cuda + extra)
    steps, start, end = _worst_step(x, late, worst.rank)
    confidence = Confidence.HIGH if cause else Confidence.MEDIUM
    cap = Severity.CRITICAL
    note = ("the waiting ranks' time inside the collectives also shows as exposed "
            "communication; the exposed_communication finding counts only the transfer")
    if cause in HOST_CAUSES and ctx.host_inflation_ms >= 0.5 * saving_ms:
        # a profiler that slows every host event can make one host-bound rank late by itself
        confidence, cap = Confidence.LOW, Severity.INFO
        note = (f"the late rank is late on the host, and the profiler's own host cost is "
                f"estimated at {tr.fmt_ms(ctx.host_inflation_ms)} ms per step: the lateness "
                f"may be the profiler's; record with a lighter profiler before acting. " + note)
    return [ctx.finding(
        id=ID, category=CATEGORY, title=title, saving_ms=saving_ms, method=method,
        evidence=ev, fix=fix, where=Where(rank=worst.rank, steps=steps, start_ns=start,
                                          end_ns=end),
        confidence=confidence, max_severity=cap, note=note,
    )]


def _concentration(x: CrossRank, rank: int) -> tuple[float, str]:
    if x.per_step_late:
        k = sum(1 for r in x.per_step_late.values() if r == rank)
        return k / len(x.per_step_late), f"late in {k} of {len(x.per_step_late)} steps"
    costly = [i for i in x.instances if i.cost_ns > 0]
    k = sum(1 for i in costly if i.late_rank == rank)
    return (k / len(costly) if costly else 0.0), f"{k} of {len(costly)} calls with a wait"


def _waits_line(x: CrossRank) -> str:
    rows = x.ranks[:MAX_RANKS_LISTED]
    more = f", ... {len(x.ranks) - MAX_RANKS_LISTED} more" if len(x.ranks) > MAX_RANKS_LISTED else ""
    return ("wait inside collectives per step: "
            + ", ".join(f"rank {r.rank} {_ms(r.wait_ns / x.n_steps)} ms" for r in rows) + more)


def _worst_step(x: CrossRank, late: RankAnalysis,
                rank: int) -> tuple[tuple[int, ...], int | None, int | None]:
    """The step where the others waited most for ``rank`` (its index and window on it)."""
    best: tuple[int, int] | None = None
    for number, waits in x.per_step_wait_ns.items():
        if x.per_step_late.get(number) != rank:
            continue
        w = sum(v for r, v in waits.items() if r != rank)
        if best is None or w > best[1]:
            best = (number, w)
    if best is None:
        return (), None, None
    for s in late.steps.steps:
        if s.number == best[0]:
            a, b = s.window
            return (s.index,), a, b
    return (), None, None


@dataclass(frozen=True)
class _Rule:
    id: str = ID
    title: str = "One rank makes the others wait at the collectives"
    category: str = CATEGORY
    requires: tuple[str, ...] = ("collectives",)

    def check(self, ctx: Context) -> Sequence[Finding]:
        return check(ctx)


RULE = _Rule()

__all__ = ["CAUSES", "RULE"]
