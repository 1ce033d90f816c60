"""no_tensor_cores: fp32 matrix math (GEMM / convolution / attention) on a GPU with tensor cores.

Flagged: kernels of category gemm/conv/attention that the name classifier
(``analysis.kernel_names``) says run fp32 without tensor cores (``sm80_xmma_gemm_f32f32_*_ffma``,
``cutlass_80_simt_sgemm``, ``ampere_sgemm``, cuDNN's fp32 FFT / Winograd / implicit-GEMM
kernels), on an NVIDIA GPU of compute capability 7.0 or newer (TF32 needs 8.0). Guard against
name-classifier gaps: a name that mentions tf32, tensor ops or warp-group MMA is never flagged,
nor are split-K reduction / epilogue helpers.

Estimate, per launch, with the measured speed-ups of ``model.speedups`` (GEMM ratios for
GEMMs, convolution ratios for kernels of a convolution: category conv, or a GEMM launched by a
framework op whose name says conv, or, in a run without framework ops (``stepscope record``),
a GEMM launched in a run of flagged launches of its thread that holds a conv kernel)::

    TF32:     dur - max(2 us, dur / tf32_ratio)
    bf16 AMP: dur - max(2 us, dur / bf16_ratio)     (fp16 where the GPU has no bf16)

per steady step, capped by the GPU work still queued after the step's last launch
(``speedups.Scaling``). The finding's saving is the TF32 one: it is a
one-line change that keeps fp32 storage and needs no loss scaling or dtype audit, so it is what
a user can apply right away; the AMP saving, usually larger, is in the title and evidence.
Attention kernels gain nothing from TF32 (fp32 memory-efficient attention stays on CUDA cores)
and count for AMP only. On a GPU without TF32 (7.x) the saving is the fp16 AMP one.
"""

from __future__ import annotations

from collections.abc import Sequence

from stepscope.advisor.base import Context, Finding, Fix
from stepscope.advisor.rules._kernels import largest, short, where_for
from stepscope.model.confidence import Confidence
from stepscope.model.kernels import (
    per_step_ms,
)
from stepscope.model.tensor_cores import TensorCoreSaving, tensor_core_saving

FIX = Fix(
    pytorch="TF32 (one line, at start-up): `torch.backends.cuda.matmul.fp32_precision = \"tf32\"` "
            "and `torch.backends.cudnn.conv.fp32_precision = \"tf32\"` (torch >= 2.9; before: "
            "`torch.set_float32_matmul_precision(\"high\")` and "
            "`torch.backends.cudnn.allow_tf32 = True`, the latter on by default; do not mix the "
            "two APIs in one process). For convolutions "
            "also `torch.backends.cudnn.benchmark = True` so cuDNN can pick tensor-core "
            "algorithms over FFT/Winograd. Mixed precision, larger gain: wrap forward and loss "
            "in `with torch.autocast(\"cuda\", dtype=torch.bfloat16):` (fp16 needs "
            "`torch.amp.GradScaler`).",
    tensorflow="TF32 is on by default from TF 2.4; check nothing calls "
               "`tf.config.experimental.enable_tensor_float_32_execution(False)`. Mixed precision: "
               "`tf.keras.mixed_precision.set_global_policy(\"mixed_bfloat16\")`.",
    jax="Matmul precision: `jax.config.update(\"jax_default_matmul_precision\", "
        "\"tensorfloat32\")` or `with jax.default_matmul_precision(\"tensorfloat32\"):`, and drop "
        "`precision=jax.lax.Precision.HIGHEST` where it is not needed. Mixed precision: compute "
        "in bf16 (`dtype=jnp.bfloat16` in Flax modules, params kept in fp32: a mixed-precision "
        "policy such as jmp's `params=float32,compute=bfloat16,output=float32`).",
    cuda="cuBLAS: `cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH)` or compute type "
         "`CUBLAS_COMPUTE_32F_FAST_TF32`; cuDNN: `CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION`; or "
         "bf16/fp16 inputs with fp32 accumulation.",
)


def _finding(ctx: Context, r: TensorCoreSaving, n_ranks: int) -> Finding:
    amp = f"{r.amp_dtype} AMP: -{r.amp_ms:.2f} ms"
    gains = f"TF32: -{r.tf32_ms:.2f} ms, {amp}" if r.tf32_ms is not None else amp
    title = (f"fp32 matrix math without tensor cores: {r.time_ms:.2f} ms per step "
             f"({r.time_ms / ctx.step_ms:.0%} of the step); {gains} per step")
    kinds = ", ".join(f"{k} {v:.2f} ms" for k, v in r.by_kind_ms.items())
    evidence = [
        (f"{r.time_ms:.3f} ms per step of fp32 GEMM/conv/attention kernels on CUDA cores "
         f"({kinds}); {r.sk.n_steps} steady steps"),
        *(f"{short(k.name)}: {k.calls / r.sk.n_steps:g} launches, "
          f"{per_step_ms(k.time_ns, r.sk):.3f} ms per step" for k in r.items[:5]),
        "speed-ups used: " + "; ".join(f"{n} {v.describe()}" for n, v in sorted(r.ratios.items())),
        r.scaling.evidence(r.raw_ms, r.saving_ms),
    ]
    if r.ops:
        top_ops = sorted(r.ops.items(), key=lambda kv: (-kv[1], kv[0]))[:4]
        evidence.append("launched by " + ", ".join(f"{o} ({n})" for o, n in top_ops))
    if r.n_items > 5:
        evidence.append(f"... and {r.n_items - 5} more kernel name(s)")
    if n_ranks > 1:
        evidence.append(f"rank {r.rank} shown (largest saving of {n_ranks} ranks)")
    measured = all(v.measured for v in r.ratios.values())
    conv_heavy = r.by_kind_ms.get("conv", 0.0) > 0.5 * r.time_ms
    conf = Confidence.HIGH if measured and not conv_heavy else Confidence.MEDIUM
    headline = "TF32" if r.tf32_ms is not None else f"{r.amp_dtype} AMP"
    return ctx.finding(
        id=RULE.id, category=RULE.category, title=title, saving_ms=r.saving_ms,
        method=(f"saving with {headline} (ranked by it: the one-line change): per fp32 matmul "
                f"launch, dur x (1 - 1/speed-up), never below 2 us, with the GEMM or conv "
                f"speed-up measured by benchmarks/gemm_speedups.py (see evidence), per steady "
                f"step, {r.scaling.method}"),
        evidence=evidence, fix=FIX, where=where_for(r.ra, r.sk, r.items), confidence=conf,
        note=("convolution speed-ups depend on the algorithms cuDNN picks for these shapes; "
              "measured on typical 3x3/5x5 layers" if conv_heavy else ""))


class NoTensorCores:
    id = "no_tensor_cores"
    title = "fp32 matrix math without tensor cores"
    category = "precision"
    requires: tuple[str, ...] = ("kernels", "devices")

    def check(self, ctx: Context) -> Sequence[Finding]:
        best = largest(tensor_core_saving(ctx.analysis, ra) for ra in ctx.ranks)
        if best is None or not ctx.worth_reporting(best.saving_ms):
            return []
        return [_finding(ctx, best, len(ctx.ranks))]


RULE = NoTensorCores()
