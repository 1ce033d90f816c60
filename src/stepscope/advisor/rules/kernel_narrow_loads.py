"""kernel_narrow_loads: a kernel reads global memory a byte or two per thread per instruction.

Evidence (Nsight Compute): the bytes the global load instructions asked for over the
warp-level load instructions x 32 threads (``smsp__sass_data_bytes_mem_global_op_ld.sum`` /
``smsp__sass_inst_executed_op_global_ld.sum``) below 4 bytes per thread. Each instruction then
moves 32-64 bytes per warp: the load/store unit issues many times more instructions for the
same bytes and too few bytes are in flight to cover DRAM latency.

Estimate (``model.kernel_sol.narrow_loads``): with vector loads the same bytes stream at the
attainable DRAM bandwidth: ``t_fixed`` is the kernel's DRAM bytes at ``ATTAINABLE_DRAM`` of the
peak (the DRAM floor); saving ``1 - t_fixed / t`` of the kernel's time.
"""

from __future__ import annotations

from stepscope.advisor.base import Fix
from stepscope.advisor.rules._ncu import KernelRule, Spec
from stepscope.analysis.kernel_profiles import KernelProfile
from stepscope.model import kernel_sol as sol

FIX = Fix(
    cuda="load 16 bytes per thread: reinterpret the pointer as `uchar4`/`int4`/`float4` (aligned "
         "to the width) and have each thread handle 4-16 elements; or let one thread read a word "
         "and unpack the bytes",
    pytorch="a custom kernel reading uint8/bool/fp8 tensors: vectorise its loads (Triton: "
            "larger BLOCK_SIZE per program so the compiler emits 128-bit loads; check alignment)",
    jax="Pallas: load blocks, not scalars; keep the minor dimension a multiple of 128 bytes",
)


class KernelNarrowLoads(KernelRule):
    id = "kernel_narrow_loads"
    title = "Kernels loading global memory a few bytes per thread"

    def judge(self, p: KernelProfile) -> Spec | None:
        est = sol.narrow_loads(p)
        width = sol.load_width(p)
        if est is None or width is None:
            return None
        bw = sol.achieved_dram_bw(p) or 0.0
        peak = sol.peak_dram_bw(p) or 0.0
        return Spec(
            title=f"Narrow global loads ({width:.1f} B per thread)",
            share=est.saving,
            method=(f"speed of light: the kernel's DRAM bytes at {sol.ATTAINABLE_DRAM:.0%} of "
                    f"peak bandwidth ({est.floor}) vs its measured time"),
            evidence=[
                f"{width:.2f} bytes per thread per global load instruction (vector loads: 16)",
                f"DRAM: {sol.dram_bytes(p) / 1e6:.1f} MB at {bw / 1e9:.0f} GB/s, "
                f"{bw / peak:.0%} of the {peak / 1e9:.0f} GB/s peak" if peak else
                f"DRAM: {sol.dram_bytes(p) / 1e6:.1f} MB",
                f"fixed: ~{est.t_fixed_ns / 1e3:.1f} us instead of {p.dur_ns / 1e3:.1f} us",
            ],
            fix=FIX)


RULE = KernelNarrowLoads()
