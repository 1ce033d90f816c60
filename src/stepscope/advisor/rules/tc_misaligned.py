"""tc_misaligned: 16-bit GEMMs that miss the fast tensor-core path, typically because a
dimension is not a multiple of 8.

Tensor-core GEMMs on Ampere/Hopper load operands in 16-byte vectors (TMA on Hopper needs
16-byte aligned strides): with fp16/bf16 every dimension (M, N, K) and leading dimension must
be a multiple of 8 elements. When one is not, cuBLAS falls back to kernels that load one or two
elements at a time. Measured on an H200 (torch 2.11, ``benchmarks/gemm_speedups.py``): K 4095,
N 4095, hidden 771 and vocabulary 50257 all ran ``cutlass_75_tensorop_*_s1688gemm_*_align1``
at ~125 TFLOPS instead of ``nvjet`` at ~600-700: 5.2x slower per FLOP.

Flagged: GEMM-category kernels with fp16/bf16 inputs whose name states an operand alignment
below 8 elements (``_align1``, ``_align2``, ``aligna4`` ...), or that run 16-bit math on CUDA
cores (SIMT / ``hgemm`` / ``ffma`` names). Not flagged: GEMV and small-N kernels (a matrix
times a vector is memory-bound whatever the alignment), split-K reductions, convolutions
(a 3-channel first layer is misaligned by nature; left out for now).

Estimate, per launch, with ``half_misaligned`` from ``model.speedups``::

    saving = dur - max(2 us, dur / half_misaligned)

per steady step, capped by the GPU work still queued after the step's last launch
(``speedups.Scaling``). The trace does not store the operand shapes; the
finding names the framework ops that launched the kernels (``cpu_ops`` via ``external_id``)
so the user can check their dimensions.
"""

from __future__ import annotations

from collections.abc import Sequence

from stepscope.advisor.base import Context, Finding, Fix
from stepscope.advisor.rules._kernels import largest, short, where_for
from stepscope.model.alignment import MIN_ALIGN, MisalignedSaving, min_alignment, misaligned_saving
from stepscope.model.confidence import Confidence
from stepscope.model.kernels import (
    KernelSaving,
    per_step_ms,
)

FIX = Fix(
    pytorch="Pad the dimensions of these matmuls to multiples of 8 (64 is best on A100/H100): "
            "vocabulary (e.g. 50257 -> 50304), hidden and MLP sizes, attention head dims, and the "
            "batch x sequence token count (`pad_to_multiple_of=8` in Hugging Face tokenizers and "
            "`DataCollatorWithPadding`); keep matmul inputs contiguous (a sliced view can have a "
            "misaligned leading dimension). Check the shapes with "
            "`torch.profiler.profile(record_shapes=True)`.",
    tensorflow="Same: pad vocabulary, hidden sizes and batch x sequence to multiples of 8 "
               "(tokenizer padding to a multiple of 8, `tf.pad` of odd dimensions).",
    jax="Same: pad vocabulary, hidden sizes and batch x sequence to multiples of 8 "
        "(`jnp.pad`, tokenizer padding to a multiple of 8).",
    cuda="Make M, N, K and the leading dimensions multiples of 8 for fp16/bf16 (16 for fp8) "
         "and the pointers 16-byte aligned, so cuBLAS can use its vectorised tensor-core kernels.",
)


def _kernel_line(r: MisalignedSaving, k: KernelSaving) -> str:
    a = min_alignment(k.name)
    how = (f"operands aligned to {a} element(s)" if a is not None and a < MIN_ALIGN
           else "16-bit math on CUDA cores")
    prec = r.sk.col("precision")[k.row]
    return (f"{short(k.name)}: {prec}, {how}; {k.calls / r.sk.n_steps:g} launches, "
            f"{per_step_ms(k.time_ns, r.sk):.3f} ms per step")


def _finding(ctx: Context, r: MisalignedSaving, n_ranks: int) -> Finding:
    top_ops = sorted(r.ops.items(), key=lambda kv: (-kv[1], kv[0]))[:4]
    check = (f"check the dims of {', '.join(o for o, _ in top_ops)}" if top_ops
             else "check the matmul dimensions")
    title = (f"16-bit GEMMs off the fast tensor-core path (dimensions not multiples of 8?): "
             f"{r.time_ms:.2f} ms per step; padding saves about {r.saving_ms:.2f} ms ({check})")
    evidence = [
        (f"{r.time_ms:.3f} ms per step ({r.time_ms / ctx.step_ms:.0%} of the step) in fp16/bf16 "
         f"GEMM kernels with misaligned operands or on CUDA cores"),
        *(_kernel_line(r, k) for k in r.items[:5]),
        f"misaligned 16-bit GEMMs take {r.ratio.describe()} the time per FLOP of aligned ones",
        r.scaling.evidence(r.raw_ms, r.saving_ms),
    ]
    if top_ops:
        evidence.append("launched by " + ", ".join(f"{o} ({n} launches)" for o, n in top_ops)
                        + "; the trace keeps no shapes: check their input dimensions")
    if r.n_items > 5:
        evidence.append(f"... and {r.n_items - 5} more kernel name(s)")
    if n_ranks > 1:
        evidence.append(f"rank {r.rank} shown (largest saving of {n_ranks} ranks)")
    conf = (Confidence.HIGH if r.ratio.measured and r.aligned_by_name
            else Confidence.MEDIUM if r.aligned_by_name else Confidence.LOW)
    return ctx.finding(
        id=RULE.id, category=RULE.category, title=title, saving_ms=r.saving_ms,
        method=(f"per flagged launch, dur x (1 - 1/{r.ratio.value:.2f}) (the misaligned / "
                f"aligned time per FLOP of 16-bit GEMMs, {r.ratio.source}), never below 2 us, "
                f"per steady step, {r.scaling.method}"),
        evidence=evidence, fix=FIX, where=where_for(r.ra, r.sk, r.items), confidence=conf)


class TcMisaligned:
    id = "tc_misaligned"
    title = "16-bit GEMMs off the tensor-core fast path"
    category = "precision"
    requires: tuple[str, ...] = ("kernels", "devices")

    def check(self, ctx: Context) -> Sequence[Finding]:
        best = largest(misaligned_saving(ctx.analysis, ra) for ra in ctx.ranks)
        if best is None or not ctx.worth_reporting(best.saving_ms):
            return []
        return [_finding(ctx, best, len(ctx.ranks))]


RULE = TcMisaligned()
