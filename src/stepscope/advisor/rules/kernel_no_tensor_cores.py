"""kernel_no_tensor_cores: a compute-bound kernel does its floating-point work on the FMA
pipes with the tensor cores idle.

Evidence (Nsight Compute): SM throughput at least ``COMPUTE_BOUND_PCT`` (60%) of peak and above
the memory throughput, FP32/FP16 add/mul/fma instructions, the tensor pipe active under 5% of
cycles.

Estimate (``model.kernel_sol.no_tensor_cores``): the SM-busy share of the kernel runs
``TENSOR_SPEEDUP`` (4x, a conservative TF32/BF16 vs FP32 ratio) faster; not calibrated on a
planted kernel, confidence low.
"""

from __future__ import annotations

from stepscope.advisor.base import Fix
from stepscope.advisor.rules._ncu import KernelRule, Spec
from stepscope.analysis.kernel_profiles import KernelProfile
from stepscope.model import kernel_sol as sol
from stepscope.model.confidence import Confidence

FIX = Fix(
    cuda="express the inner loop as matrix multiply-accumulate: cuBLAS/cuBLASLt, CUTLASS, or "
         "WMMA/MMA with TF32, BF16 or FP16 inputs",
    pytorch="`torch.backends.cuda.matmul.allow_tf32 = True` / autocast to bf16; Triton: "
            "`tl.dot` on tiles instead of element-wise multiply-adds",
    tensorflow="mixed precision (`mixed_float16`) and matmul/conv ops instead of element-wise",
    jax="`jax.default_matmul_precision('tensorfloat32')`, bf16 inputs, `jnp.dot`",
)


class KernelNoTensorCores(KernelRule):
    id = "kernel_no_tensor_cores"
    title = "Compute-bound kernels without tensor cores"

    def judge(self, p: KernelProfile) -> Spec | None:
        est = sol.no_tensor_cores(p)
        if est is None:
            return None
        return Spec(
            title="Compute-bound on FMA pipes, tensor cores idle",
            share=est.saving,
            method=(f"the SM-busy share ({p.get('sm_throughput_pct') or 0:.0f}%) "
                    f"{sol.TENSOR_SPEEDUP:g}x faster on tensor cores (not calibrated)"),
            evidence=[
                f"SM {p.get('sm_throughput_pct') or 0:.0f}% of peak, memory "
                f"{p.get('memory_throughput_pct') or 0:.0f}%; tensor pipe "
                f"{p.get('tensor_active_pct') or 0:.1f}% active",
                f"{sol.fp_flops(p) / 1e9:.2f} GFLOP on the FMA pipes",
            ],
            fix=FIX, confidence=Confidence.LOW)


RULE = KernelNoTensorCores()
