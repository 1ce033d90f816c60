"""kernel_occupancy: measured occupancy is low and what limits it is known (registers, shared
memory, block size), or achieved occupancy falls far short of the theoretical.

Evidence (Nsight Compute): theoretical occupancy (``sm__maximum_warps_per_active_cycle_pct``)
below ``LOW_OCCUPANCY`` (35%) with the limiter the smallest of
``launch__occupancy_limit_{registers,shared_mem,blocks,warps}``; achieved occupancy
(``sm__warps_active.avg.pct_of_peak_sustained_active``).

Estimate (``model.kernel_sol.occupancy``): a latency-bound kernel's time scales with its
resident warps: ``t x achieved / min(50%, what the grid fills)``, floored by the busiest unit
(SM or memory) reaching ``ATTAINABLE_UNIT`` of its peak. Achieved far below theoretical
(imbalance, a partial wave) is reported as evidence, not estimated.
"""

from __future__ import annotations

from stepscope.advisor.base import Fix
from stepscope.advisor.rules._ncu import KernelRule, Spec
from stepscope.analysis.kernel_profiles import KernelProfile
from stepscope.model import kernel_sol as sol

FIXES = {
    "registers": "cap registers per thread (`__launch_bounds__(threads, minBlocksPerSM)` or "
                 "`-maxrregcount`; watch for spills in `-Xptxas -v`), keep fewer values live",
    "shared memory": "use less shared memory per block (smaller tiles, fewer stages)",
    "blocks per SM (block size)": "use larger blocks (at least 128 threads): an SM holds a "
                                  "limited number of blocks",
    "warps per SM": "the block size leaves warp slots unused: pick a block size that divides "
                    "the SM's warps",
}


class KernelOccupancy(KernelRule):
    id = "kernel_occupancy"
    title = "Kernels with low measured occupancy"

    def judge(self, p: KernelProfile) -> Spec | None:
        occ = sol.occupancy(p)
        if occ is None:
            return None
        how = FIXES[occ.limiter]
        ach = (f"achieved {occ.achieved:.0%}" if occ.achieved is not None
               else "achieved not measured")
        regs = p.get("registers")
        smem = p.get("shared_memory")
        return Spec(
            title=f"Low occupancy ({occ.theoretical:.0%} theoretical, limited by {occ.limiter})",
            share=occ.estimate.saving,
            method=(f"latency-bound model: time x resident warps now / at "
                    f"{sol.OCCUPANCY_TARGET:.0%}, floored by the busiest unit at "
                    f"{sol.ATTAINABLE_UNIT:.0%} of peak ({occ.estimate.floor})"),
            evidence=[
                f"theoretical occupancy {occ.theoretical:.0%}, {ach}; limited by {occ.limiter}"
                + (f" ({regs:.0f} registers per thread" if regs is not None else "")
                + (f", {smem / 1024:.1f} KB shared memory per block)" if smem is not None
                   else ")" if regs is not None else ""),
                f"busiest unit {sol.busiest_pct(p):.0f}% of peak (SM "
                f"{p.get('sm_throughput_pct') or 0:.0f}%, memory "
                f"{p.get('memory_throughput_pct') or 0:.0f}%)",
                f"fixed: ~{occ.estimate.t_fixed_ns / 1e3:.1f} us instead of "
                f"{p.dur_ns / 1e3:.1f} us",
            ],
            fix=Fix(cuda=how + ".", pytorch=f"custom kernels: {how}; Triton: fewer elements per "
                    "program or fewer num_stages.", jax=f"Pallas: {how}."))


RULE = KernelOccupancy()
