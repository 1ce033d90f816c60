"""kernel_tail: a kernel of few waves whose last wave is mostly empty.

Evidence (Nsight Compute): ``launch__waves_per_multiprocessor`` W between 1 and
``MAX_TAIL_WAVES`` (4) with ``W / ceil(W)`` at most 0.9: the last wave keeps few SMs busy
while the rest idle.

Estimate (``model.kernel_sol.tail``): the same work spread over whole waves takes
``t x W / ceil(W)`` (blocks of equal cost), floored by the DRAM traffic at the attainable
bandwidth.
"""

from __future__ import annotations

import math

from stepscope.advisor.base import Fix
from stepscope.advisor.rules._ncu import KernelRule, Spec
from stepscope.analysis.kernel_profiles import KernelProfile
from stepscope.model import kernel_sol as sol

FIX = Fix(
    cuda="size the grid to whole waves (a multiple of SMs x resident blocks per SM: "
         "cudaOccupancyMaxActiveBlocksPerMultiprocessor), with a grid-stride loop so each block "
         "takes an equal share of the work; or split the work finer so the tail is short",
    pytorch="custom kernels: choose the grid from the SM count (torch.cuda.get_device_properties"
            "(0).multi_processor_count); Triton: a persistent kernel with grid = SMs x blocks "
            "per SM",
    jax="Pallas: choose the grid from the core count",
)


class KernelTail(KernelRule):
    id = "kernel_tail"
    title = "Kernels with a partial last wave"

    def judge(self, p: KernelProfile) -> Spec | None:
        t = sol.tail(p)
        if t is None:
            return None
        w, est = t
        full = math.ceil(w)
        return Spec(
            title=f"Partial last wave ({w:.2f} waves: {full} run, the last {w - full + 1:.0%} full)",
            share=est.saving,
            method=(f"waves rounding: t x {w:.2f} / {full}, floored by the DRAM traffic at "
                    f"{sol.ATTAINABLE_DRAM:.0%} of peak ({est.floor})"),
            evidence=[
                f"{w:.2f} waves per SM (launch__waves_per_multiprocessor) on "
                f"{p.get('sm_count') or 0:.0f} SMs",
                f"fixed: ~{est.t_fixed_ns / 1e3:.1f} us instead of {p.dur_ns / 1e3:.1f} us",
            ],
            fix=FIX)


RULE = KernelTail()
