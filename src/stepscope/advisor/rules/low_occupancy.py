"""low_occupancy: significant time in kernels whose theoretical occupancy is low because of
their registers, shared memory or block size.

Theoretical occupancy (``analysis.occupancy``) is the share of an SM's warp slots a kernel can
fill. Few resident warps leave the SM little to switch to while warps wait on memory, so a
latency-bound kernel slows down. Flagged: launches with occupancy below ``MAX_OCCUPANCY``
(25%) whose limiter is ``registers``, ``shared_memory`` or ``blocks`` (too small blocks), and
whose grid is large enough to fill more warps than that.

Never flagged: GEMM / convolution / attention kernels (cuBLAS, cuDNN, CUTLASS, FlashAttention,
Triton templates: tensor-core kernels run at 12-19% occupancy *by design*, with large
shared-memory tiles and many registers per thread), communication kernels and other library
kernels (CUB, thrust, cuFFT ...): their authors traded occupancy for something else.

Estimate (a documented heuristic, confidence low): with ``w_grid`` the occupancy the grid
alone could reach (``blocks * warps per block / (SMs * max warps per SM)``),
``w0 = min(occupancy, w_grid)`` what it reaches now and ``w1 = min(TARGET, w_grid)`` what it
would reach with the limiter lifted to ``TARGET`` (50%, about where a streaming kernel
saturates memory bandwidth on H100/H200), a latency-bound kernel runs ``w0 / w1`` as long::

    saving = (dur - max(2 us, dur * w0 / w1)) * LATENCY_BOUND_SHARE

per launch, per steady step, capped by the GPU work still queued after the step's last
launch (``speedups.Scaling``). ``LATENCY_BOUND_SHARE`` is the share
of that ideal gain counted. It was 0.5 at first ("kernels are rarely purely latency-bound");
the planted-bottleneck suite (``benchmarks/scenarios/low_occupancy.py``: a streaming kernel
at 12.5% occupancy from a 200 KB shared-memory request, H200, 2026-11-22) measured 1.39 ms
(39.8% of the step) saved per step; 0.5 estimated 0.61 ms (19.7% of the traced step: ratio
0.49), 1.0 estimates 1.22 ms (39.4%: ratio 0.99 in percent of the step, 0.88 in ms). It is
now 1.0: an upper bound for compute-bound kernels, hence the severity cap and low confidence.

Occupancy alone does not tell how latency-bound a kernel is. The same streaming kernel with
other launch shapes (``benchmarks/rule_scenarios.py``, H200): 2 blocks of 4 warps per SM
(12.5%, 96 KB shared memory) gained 7% of the step when fixed (estimate 10%); 3 blocks of 4
warps (18.75%, 64 KB) gained nothing measurable (estimate 7%). So a finding can reach
``warning`` only for a user kernel with at most ``STARVED_WARPS`` (8) resident warps per SM,
two per warp scheduler; anything else, and every framework kernel (PyTorch ATen, XLA,
Inductor: the user cannot edit them), stays ``info``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stepscope.advisor.base import Context, Finding, Fix, Severity
from stepscope.advisor.rules._kernels import largest_per_key, short, where_for
from stepscope.model.confidence import Confidence
from stepscope.model.kernels import (
    KernelSaving,
    per_step_ms,
)
from stepscope.model.occupancy import (
    LATENCY_BOUND_SHARE,
    LIMITERS,
    MAX_OCCUPANCY,
    TARGET,
    OccupancyGroup,
    occupancy_groups,
)

STARVED_WARPS = 8

FIXES: dict[str, str] = {
    "registers": "cap registers per thread: `__launch_bounds__(threads_per_block, "
                 "min_blocks_per_sm)` on the kernel or `-maxrregcount=N` for the file (watch for "
                 "spills in `-Xptxas -v`); split the kernel or keep fewer values live",
    "shared_memory": "use less shared memory per block: smaller tiles, fewer pipeline stages, "
                     "dynamic shared memory sized to what the launch needs",
    "blocks": "use larger blocks: a multiple of 32 threads and at least 128 per block (an SM "
              "holds a limited number of blocks, so tiny blocks leave warp slots empty)",
}
TRITON = {
    "registers": "Triton: fewer elements per program (smaller BLOCK_SIZE) or more `num_warps` "
                 "for the same block, so each thread holds fewer values",
    "shared_memory": "Triton: fewer `num_stages` or smaller BLOCK_M/N/K",
    "blocks": "Triton: more `num_warps` per program",
}


def _fix(limiters: list[str], custom: bool) -> Fix:
    how = "; ".join(FIXES[lim] for lim in limiters)
    tri = "; ".join(TRITON[lim] for lim in limiters)
    if not custom:
        return Fix(
            cuda=f"These kernels belong to the framework; for your own kernels: {how}.",
            pytorch="`torch.compile` regenerates most elementwise/reduction kernels (Inductor "
                    "picks launch configurations per device); otherwise report the kernel "
                    "upstream with its launch configuration.",
            tensorflow="XLA (`jit_compile=True`) regenerates fused kernels.",
            jax="XLA picks the launch configuration; try a newer jaxlib or report the fusion.",
        )
    return Fix(cuda=f"{how}.", pytorch=f"CUDA extensions: {how}. {tri}.",
               tensorflow=f"Custom ops: {how}.", jax=f"Pallas / custom calls: {how}. {tri}.")


def _kernel_line(g: OccupancyGroup, k: KernelSaving) -> str:
    sk, r = g.sk, k.row
    occ = float(sk.col("occupancy")[r])
    lim = str(sk.col("occupancy_limiter")[r])
    threads, regs, smem = (int(np.nan_to_num(sk.col(c)[r]))
                           for c in ("threads", "registers", "shared_memory"))
    mw = g.max_warps.get(int(np.nan_to_num(sk.col("device")[r])), 64)
    what = {"registers": f"{regs} registers per thread x {threads} threads",
            "shared_memory": f"{smem / 1024:.1f} KB shared memory per block",
            "blocks": f"{threads}-thread blocks"}[lim]
    return (f"{short(k.name)}: {occ:.1%} theoretical occupancy ({round(occ * mw)} of {mw} warps "
            f"per SM), limited by {lim.replace('_', ' ')} ({what}); "
            f"{k.calls / sk.n_steps:g} launch(es) and {per_step_ms(k.time_ns, sk):.3f} ms per step")


def _starved(g: OccupancyGroup, k: KernelSaving) -> bool:
    """At most ``STARVED_WARPS`` resident warps per SM (two per warp scheduler)."""
    mw = g.max_warps.get(int(np.nan_to_num(g.sk.col("device")[k.row])), 64)
    return round(float(g.sk.col("occupancy")[k.row]) * mw) <= STARVED_WARPS


def _finding(ctx: Context, g: OccupancyGroup, custom: bool, n_ranks: int) -> Finding:
    top = g.items[0]
    lims = sorted({str(g.sk.col("occupancy_limiter")[k.row]) for k in g.items[:5]},
                  key=LIMITERS.index)
    occ = float(g.sk.col("occupancy")[top.row])
    who = "" if custom else "framework "
    title = (f"{g.n_items} {who}kernel(s) run at low occupancy ({short(top.name, 48)}: "
             f"{occ:.1%}, limited by {', '.join(lim.replace('_', ' ') for lim in lims)}); "
             f"about {g.saving_ms:.2f} ms per step")
    evidence = [
        (f"{g.time_ms:.3f} ms per step ({g.time_ms / ctx.step_ms:.0%} of the step) in kernels "
         f"below {MAX_OCCUPANCY:.0%} theoretical occupancy whose grids could fill more warps"),
        *(_kernel_line(g, k) for k in g.items[:5]),
        g.scaling.evidence(g.raw_ms, g.saving_ms),
    ]
    if g.n_items > 5:
        evidence.append(f"... and {g.n_items - 5} more kernel name(s)")
    if n_ranks > 1:
        evidence.append(f"rank {g.rank} shown (largest saving of {n_ranks} ranks)")
    return ctx.finding(
        id=RULE.id, category=RULE.category, title=title, saving_ms=g.saving_ms,
        method=(f"heuristic: a latency-bound kernel's time scales with its resident warps; "
                f"occupancy raised to min({TARGET:.0%}, what the grid can fill), "
                f"{LATENCY_BOUND_SHARE:.0%} of that gain counted (calibrated on a memory-"
                f"streaming kernel; an upper bound for compute-bound ones); per steady step, "
                f"{g.scaling.method}"),
        evidence=evidence, fix=_fix(lims, custom), where=where_for(g.ra, g.sk, g.items),
        confidence=Confidence.LOW,
        note="theoretical occupancy only; confirm with Nsight Compute (achieved occupancy, "
             "stall reasons) before rewriting the kernel",
        max_severity=Severity.WARNING if custom and _starved(g, top) else Severity.INFO)


class LowOccupancy:
    id = "low_occupancy"
    title = "Kernels with low theoretical occupancy"
    category = "occupancy"
    requires: tuple[str, ...] = ("kernels", "devices")

    def check(self, ctx: Context) -> Sequence[Finding]:
        best = largest_per_key(occupancy_groups(ctx.analysis, ra) for ra in ctx.ranks)
        return [_finding(ctx, g, custom, len(ctx.ranks))
                for custom, g in sorted(best.items(), reverse=True)
                if ctx.worth_reporting(g.saving_ms)]


RULE = LowOccupancy()
