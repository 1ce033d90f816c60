"""kernel_uncoalesced: a kernel's global loads touch more 32-byte sectors than the bytes they
ask for need (strided or scattered access).

Evidence (Nsight Compute): sectors moved per load (``l1tex__t_sectors_pipe_lsu_mem_global_op_ld
.sum``) over the sectors the requested bytes fill (``smsp__sass_data_bytes_mem_global_op_ld.sum``
/ 32; without that counter, 4 sectors per request: 4-byte words at unit stride). Flagged above
``UNCOALESCED_RATIO`` (1.5).

Estimate (``model.kernel_sol.uncoalesced``): memory traffic scales with sectors, so the fixed
kernel takes ``t / ratio``, floored by its DRAM bytes / ratio at the attainable bandwidth.
"""

from __future__ import annotations

from stepscope.advisor.base import Fix
from stepscope.advisor.rules._ncu import KernelRule, Spec
from stepscope.analysis.kernel_profiles import KernelProfile
from stepscope.model import kernel_sol as sol

FIX = Fix(
    cuda="make consecutive threads read consecutive addresses: index with threadIdx.x in the "
         "fastest-moving dimension, transpose through shared memory, or store the data "
         "structure-of-arrays instead of array-of-structures",
    pytorch="a strided (non-contiguous) tensor into a custom kernel: `.contiguous()` it first or "
            "index the fastest dimension with the thread index (Triton: make the block's last "
            "axis the tensor's contiguous one)",
    jax="Pallas: put the contiguous axis last in the block shape",
)


class KernelUncoalesced(KernelRule):
    id = "kernel_uncoalesced"
    title = "Kernels with uncoalesced global loads"

    def judge(self, p: KernelProfile) -> Spec | None:
        est = sol.uncoalesced(p)
        r = sol.sectors_ratio(p)
        if est is None or r is None:
            return None
        req = p.get("global_ld_requests") or 0.0
        sectors = p.get("global_ld_sectors") or 0.0
        per_req = f"{sectors / req:.1f} sectors per request; " if req else ""
        return Spec(
            title=f"Uncoalesced global loads ({r:.1f}x the sectors needed)",
            share=est.saving,
            method=(f"speed of light: traffic / {r:.1f} (sectors moved / sectors needed), "
                    f"floored by the DRAM bytes left at {sol.ATTAINABLE_DRAM:.0%} of peak "
                    f"({est.floor})"),
            evidence=[
                f"{per_req}{sectors:,.0f} sectors moved for {sectors / r:,.0f} needed "
                f"({r:.2f}x; ideal 1x)",
                f"fixed: ~{est.t_fixed_ns / 1e3:.1f} us instead of {p.dur_ns / 1e3:.1f} us",
            ],
            fix=FIX)


RULE = KernelUncoalesced()
