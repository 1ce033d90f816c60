"""kernel_stalls: where a kernel's warps wait, when one stall reason dominates and no other
kernel rule names a cause.

Evidence (Nsight Compute): the warp stall reasons
(``smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio``, else the PC-sampling
``smsp__pcsamp_warps_issue_stalled_<reason>``) as shares of the stalled cycles; flagged when the
largest is at least ``DOMINANT`` (40%) and no other kernel rule speaks about the kernel (their
findings list the stall reasons among their evidence).

Estimate: none. A stall reason says where warps wait, not what a fix would save, so the finding
carries no saving (``est_kernel_saving_pct`` null) and is ranked last.
"""

from __future__ import annotations

from collections.abc import Sequence

from stepscope.advisor.base import Context, Finding, Fix, Severity, Where
from stepscope.advisor.rules._kernels import short
from stepscope.advisor.rules._ncu import CATEGORY, REQUIRES, describe, explained, profiles
from stepscope.model.confidence import Confidence

DOMINANT = 0.40
ADVICE = {
    "long_scoreboard": "waiting on global/local memory loads: more independent loads in flight, "
                       "vector loads, data reuse through shared memory",
    "short_scoreboard": "waiting on shared memory or special-function results: fewer bank "
                        "conflicts, fewer MUFU operations",
    "mio_throttle": "the memory input/output queue is full: fewer, wider shared/special "
                    "instructions",
    "lg_throttle": "the local/global queue is full: wider (vector) loads, fewer instructions",
    "barrier": "warps wait at __syncthreads: balance the work between barriers",
    "math_pipe_throttle": "an arithmetic pipe is saturated: the kernel is compute-bound",
    "wait": "fixed-latency dependencies: more independent instructions (ILP)",
    "not_selected": "enough eligible warps: not a problem by itself",
    "membar": "memory fences: fewer __threadfence calls",
    "tex_throttle": "the texture pipe is full",
    "drain": "waiting for memory stores at exit",
    "imc_miss": "constant-cache misses",
    "no_instruction": "instruction-cache misses or branch targets",
    "branch_resolving": "branch resolution: fewer divergent branches",
    "dispatch_stall": "dispatch stalls",
    "sleeping": "warps asleep (nanosleep, cooperative groups)",
}


class KernelStalls:
    id = "kernel_stalls"
    title = "Dominant warp stall reasons"
    category = CATEGORY
    requires: tuple[str, ...] = REQUIRES
    needs_steps = False
    opt_in = True

    def check(self, ctx: Context) -> Sequence[Finding]:
        out = []
        for p in profiles(ctx):
            if not p.stalls or p.stalls[0][1] < DOMINANT or explained(p, roofline=True):
                continue
            reason, share = p.stalls[0]
            what = ADVICE.get(reason, "see Nsight Compute's Warp State section")
            evidence = [describe(p),
                        "warp stall reasons (share of stalled cycles): " + ", ".join(
                            f"{r.replace('_', ' ')} {s:.0%}" for r, s in p.stalls[:4])]
            out.append(Finding(
                id=self.id, category=CATEGORY, severity=Severity.INFO,
                title=(f"{short(p.name, 48)}: warps stall on {reason.replace('_', ' ')} "
                       f"({share:.0%} of stalled cycles)"),
                est_saving_ms=0.0, est_saving_pct=0.0,
                method="not estimated: a stall reason says where warps wait, not what a fix saves",
                evidence=tuple(evidence), fix=Fix(cuda=what),
                where=Where(rank=p.rank, kernels=(p.name,)), confidence=Confidence.LOW))
        return out


RULE = KernelStalls()
