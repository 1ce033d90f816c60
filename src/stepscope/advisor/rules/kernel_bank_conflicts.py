"""kernel_bank_conflicts: shared-memory accesses of a warp hit the same bank and are split
into several wavefronts.

Evidence (Nsight Compute): shared load/store wavefronts
(``l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{ld,st}.sum``) over the ideal (wavefronts less
the bank conflicts, ``l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{ld,st}.sum``); flagged
above ``BANK_CONFLICT_RATIO`` (1.3).

Estimate (``model.kernel_sol.bank_conflicts``): only the shared-memory-bound part shrinks: the
L1/shared pipe's busy share of the launch (``l1tex__throughput``) divided by the ratio, floored
by the kernel's DRAM traffic at the attainable bandwidth (the global loads and stores a
transpose still does). ncu's own estimate scales the whole kernel and runs about twice the
measured saving.
"""

from __future__ import annotations

from stepscope.advisor.base import Fix
from stepscope.advisor.rules._ncu import KernelRule, Spec
from stepscope.analysis.kernel_profiles import KernelProfile
from stepscope.model import kernel_sol as sol

FIX = Fix(
    cuda="pad shared arrays by one element per row (`__shared__ float tile[32][33]`) or swizzle "
         "the index (XOR the column with the row) so a warp's 32 accesses fall in 32 banks",
    pytorch="custom CUDA/Triton kernels: pad the shared tile's leading dimension; Triton "
            "chooses shared layouts itself (try another BLOCK shape or num_warps)",
    jax="Pallas: pad the VMEM/shared block's minor dimension",
)


class KernelBankConflicts(KernelRule):
    id = "kernel_bank_conflicts"
    title = "Kernels with shared-memory bank conflicts"

    def judge(self, p: KernelProfile) -> Spec | None:
        est = sol.bank_conflicts(p)
        r = sol.bank_conflict_ratio(p)
        if est is None or r is None:
            return None
        l1 = p.get("l1tex_throughput_pct")
        return Spec(
            title=f"Shared-memory bank conflicts ({r:.1f}-way wavefronts)",
            share=est.saving,
            method=(f"speed of light: the shared-memory-bound part (L1 pipe "
                    f"{(l1 or sol.busiest_pct(p)):.0f}% busy) / {r:.1f}, floored by the DRAM "
                    f"traffic at {sol.ATTAINABLE_DRAM:.0%} of peak ({est.floor})"),
            evidence=[
                f"{r:.2f} shared wavefronts per ideal wavefront (1: conflict-free)",
                f"fixed: ~{est.t_fixed_ns / 1e3:.1f} us instead of {p.dur_ns / 1e3:.1f} us",
            ],
            fix=FIX)


RULE = KernelBankConflicts()
