"""no_tensor_cores: fp32 matrix math (GEMM / convolution / attention) on a GPU with tensor cores.

Flagged: kernels of category gemm/conv/attention that the name classifier
(``analysis.kernel_names``) says run fp32 without tensor cores (``sm80_xmma_gemm_f32f32_*_ffma``,
``cutlass_80_simt_sgemm``, ``ampere_sgemm``, cuDNN's fp32 FFT / Winograd / implicit-GEMM
kernels), on an NVIDIA GPU of compute capability 7.0 or newer (TF32 needs 8.0). Guard against
name-classifier gaps: a name that mentions tf32, tensor ops or warp-group MMA is never flagged,
nor are split-K reduction / epilogue helpers.

Estimate, per launch, with the measured speed-ups of ``model.speedups`` (GEMM ratios for
GEMMs, convolution ratios for kernels of a convolution: category conv, or launched by a
framework op whose name says conv)::

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

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from stepscope.advisor.base import Context, Finding, Fix
from stepscope.advisor.rules._kernels import largest, scaling_for, short, where_for
from stepscope.analysis import RankAnalysis
from stepscope.analysis.kernel_names import MATMUL
from stepscope.model.confidence import Confidence
from stepscope.model.kernels import (
    KernelSaving,
    SteadyKernels,
    by_name,
    device_rows,
    op_names,
    per_name,
    per_step_ms,
    steady_kernels,
)
from stepscope.model.scaling import Scaling
from stepscope.model.speedups import Ratio, Speedups, shorter, speedups_for

TC_HINT = re.compile(r"tf32|tensorop|warpgroup|wgmma|hmma|tensor\d+x\d+x\d+|_mma_|tcgen05",
                     re.IGNORECASE)
HELPER = re.compile(r"splitk|reduce_?split|epilogue|init_device_workspace|computeoffsets",
                    re.IGNORECASE)

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
        "in bf16 (`dtype=jnp.bfloat16` in Flax modules, params kept in fp32).",
    cuda="cuBLAS: `cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH)` or compute type "
         "`CUBLAS_COMPUTE_32F_FAST_TF32`; cuDNN: `CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION`; or "
         "bf16/fp16 inputs with fp32 accumulation.",
)


@dataclass(frozen=True)
class _Result:
    rank: int
    tf32_ms: float | None  # None: the GPU has no TF32
    amp_ms: float
    amp_dtype: str
    raw_ms: float  # headline saving before the GPU-bound cap
    time_ms: float
    by_kind_ms: dict[str, float]
    scaling: Scaling
    items: list[KernelSaving]
    sk: SteadyKernels
    ra: RankAnalysis
    ratios: dict[str, Ratio]  # used ratios by name
    ops: dict[str, int]  # launching framework op -> flagged launches

    @property
    def saving_ms(self) -> float:
        return self.tf32_ms if self.tf32_ms is not None else self.amp_ms


def _kinds(sk: SteadyKernels, ops: dict[int, str], cand: npt.NDArray[np.bool_]
           ) -> npt.NDArray[np.str_]:
    """gemm / conv / attention per launch; a GEMM launched by a convolution op is conv."""
    cat = sk.col("category")
    ext = sk.col("external_id")
    kind = np.where(cat == "attention", "attention", np.where(cat == "conv", "conv", "gemm"))
    if ops:
        for i in np.flatnonzero((kind == "gemm") & cand):
            e = ext[i]
            if not np.isnan(e) and "conv" in ops.get(int(e), "").lower():
                kind[i] = "conv"
    return kind


def _rank_result(ctx: Context, ra: RankAnalysis) -> _Result | None:
    sk = steady_kernels(ctx.graph_of(ra.rank), ra)
    if sk is None:
        return None
    cat, tcs, prec = sk.col("category"), sk.col("tensor_cores"), sk.col("precision")
    cand = per_name(sk, lambda n, i: bool(
        cat[i] in MATMUL and tcs[i] is False and prec[i] == "fp32" and not TC_HINT.search(n)
        and not HELPER.search(n))).astype(bool)
    if not cand.any():
        return None
    speed: dict[int, Speedups | None] = {d: speedups_for(r) for d, r in device_rows(ra).items()}
    dev = np.nan_to_num(sk.col("device")).astype(np.int64)
    cand &= np.array([speed.get(int(d)) is not None for d in dev], dtype=bool)
    if not cand.any():
        return None
    ops = op_names(ctx.graph_of(ra.rank))
    kind = _kinds(sk, ops, cand)
    dur = sk.col("dur_ns")
    tf32_div = np.ones(dur.size)
    amp_div = np.ones(dur.size)
    used: dict[str, Ratio] = {}
    amp_dtype = "bf16"
    for d, sp in speed.items():
        if sp is None:
            continue
        m = cand & (dev == d)
        for k in ("gemm", "conv", "attention"):
            mk = m & (kind == k)
            if not mk.any():
                continue
            base = "conv" if k == "conv" else "gemm"
            tf = sp.get(f"{base}_tf32") if k != "attention" else None
            amp = sp.get(f"{base}_bf16")
            if amp is None:
                amp, amp_dtype = sp.get(f"{base}_fp16"), "fp16"
            if tf is not None:
                tf32_div[mk] = tf.value
                used[f"{base}_tf32"] = tf
            if amp is not None:
                amp_div[mk] = amp.value
                used[f"{base}_{amp_dtype}"] = amp
    has_tf32 = bool((tf32_div > 1.0).any())  # some flagged kernel would run TF32
    tf32_save = np.where(cand, shorter(dur, 1.0 / tf32_div), 0.0)
    amp_save = np.where(cand, shorter(dur, 1.0 / amp_div), 0.0)
    scaling = scaling_for(ctx, ra, sk)
    tf32_raw, tf32_ms = scaling.counted(sk, tf32_save)
    amp_raw, amp_ms = scaling.counted(sk, amp_save)
    items = by_name(sk, cand, tf32_save if has_tf32 else amp_save)
    ext = sk.col("external_id")
    op_count: dict[str, int] = {}
    for e in ext[cand]:
        if not np.isnan(e) and int(e) in ops:
            op_count[ops[int(e)]] = op_count.get(ops[int(e)], 0) + 1
    return _Result(
        rank=ra.rank,
        tf32_ms=tf32_ms if has_tf32 else None, amp_ms=amp_ms, amp_dtype=amp_dtype,
        raw_ms=tf32_raw if has_tf32 else amp_raw,
        time_ms=per_step_ms(float(dur[cand].sum()), sk),
        by_kind_ms={k: per_step_ms(float(dur[cand & (kind == k)].sum()), sk)
                    for k in ("gemm", "conv", "attention") if (cand & (kind == k)).any()},
        scaling=scaling, items=items, sk=sk, ra=ra, ratios=used, ops=op_count)


def _finding(ctx: Context, r: _Result, n_ranks: int) -> Finding:
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
    if len(r.items) > 5:
        evidence.append(f"... and {len(r.items) - 5} more kernel name(s)")
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
        best = largest(_rank_result(ctx, ra) for ra in ctx.ranks)
        if best is None or not ctx.worth_reporting(best.saving_ms):
            return []
        return [_finding(ctx, best, len(ctx.ranks))]


RULE = NoTensorCores()
