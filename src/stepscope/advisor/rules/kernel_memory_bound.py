"""kernel_memory_bound: a memory-bound kernel far below the attainable DRAM bandwidth, with no
more specific cause found (narrow loads, uncoalesced access, bank conflicts, low occupancy,
a tail wave: those rules speak instead).

Evidence (Nsight Compute): memory throughput (``gpu__compute_memory_throughput``) above SM
throughput; DRAM bytes (``dram__bytes_{read,write}.sum``) over the duration against the peak
(``dram__bytes.sum.peak_sustained`` x ``dram__cycles_elapsed.avg.per_second``).

Estimate (``model.kernel_sol.memory_roofline``): the DRAM floor, the kernel's bytes at
``ATTAINABLE_DRAM`` of peak, and the busiest unit's floor (L1/shared or L2 near its peak: not
a DRAM problem); saving ``1 - t_floor / t``, reported from ``FAR_FROM_ROOFLINE`` (25%) up: a kernel a
little below the roofline is well written.
"""

from __future__ import annotations

from stepscope.advisor.base import Fix
from stepscope.advisor.rules._ncu import FAR_FROM_ROOFLINE, KernelRule, Spec, explained
from stepscope.analysis.kernel_profiles import KernelProfile
from stepscope.model import kernel_sol as sol
from stepscope.model.confidence import Confidence

FIX = Fix(
    cuda="more bytes in flight per thread (vector loads, several independent loads per thread "
         "before use), enough warps per SM, no dependent load chains; check the stall reasons "
         "(long scoreboard: waiting on memory)",
    pytorch="fuse this kernel with its neighbours (torch.compile) so the data is read once",
)


class KernelMemoryBound(KernelRule):
    id = "kernel_memory_bound"
    title = "Memory-bound kernels far from the memory roofline"

    def judge(self, p: KernelProfile) -> Spec | None:
        est = sol.memory_roofline(p)
        if est is None or est.saving < FAR_FROM_ROOFLINE or explained(p):
            return None
        bw = sol.achieved_dram_bw(p) or 0.0
        peak = sol.peak_dram_bw(p) or 1.0
        return Spec(
            title=f"Memory-bound at {bw / peak:.0%} of peak DRAM bandwidth",
            share=est.saving,
            method=(f"speed of light: DRAM bytes at {sol.ATTAINABLE_DRAM:.0%} of peak "
                    "bandwidth vs the measured time"),
            evidence=[
                f"memory {p.get('memory_throughput_pct') or 0:.0f}% / SM "
                f"{p.get('sm_throughput_pct') or 0:.0f}% of peak",
                f"DRAM {sol.dram_bytes(p) / 1e6:.1f} MB at {bw / 1e9:.0f} GB/s of "
                f"{peak / 1e9:.0f} GB/s",
                f"at the roofline: ~{est.t_fixed_ns / 1e3:.1f} us instead of "
                f"{p.dur_ns / 1e3:.1f} us",
            ],
            fix=FIX, confidence=Confidence.LOW,
            note="the cause is not in the counters stepscope reads; see the stall reasons")


RULE = KernelMemoryBound()
