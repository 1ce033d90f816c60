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

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stepscope.advisor.base import Context, Finding, Fix
from stepscope.advisor.rules._kernels import largest, scaling_for, short, where_for
from stepscope.analysis import RankAnalysis
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
from stepscope.model.speedups import Ratio, shorter, speedups_for

HALF = frozenset({"fp16", "bf16", "fp16/bf16"})
ALIGN = re.compile(r"align[abc]?(\d+)(?!\d)", re.IGNORECASE)
SIMT_HALF = re.compile(r"simt|hgemm|ffma|hfma", re.IGNORECASE)
NOT_A_GEMM = re.compile(r"gemv|gemmsn|gemmk1|splitk|reduce|epilogue|dot_kernel",
                        re.IGNORECASE)
MIN_ALIGN = 8  # elements of a 16-bit type = 16 bytes

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


@dataclass(frozen=True)
class _Result:
    rank: int
    saving_ms: float
    raw_ms: float
    scaling: Scaling
    time_ms: float
    items: list[KernelSaving]
    sk: SteadyKernels
    ra: RankAnalysis
    ratio: Ratio
    ops: dict[str, int]
    aligned_by_name: bool  # every flagged kernel shows an alignment token


def min_alignment(name: str) -> int | None:
    """Smallest operand alignment (elements) stated in a kernel name, if any."""
    found = [int(m.group(1)) for m in ALIGN.finditer(name)]
    return min(found) if found else None


def why(name: str, category: str | None, precision: str | None, tc: bool | None) -> str | None:
    """``align`` (misaligned tensor-core kernel), ``simt`` (16-bit on CUDA cores) or None."""
    if category != "gemm" or precision not in HALF or NOT_A_GEMM.search(name):
        return None
    a = min_alignment(name)
    if a is not None and a < MIN_ALIGN:
        return "align"
    if tc is False and SIMT_HALF.search(name):
        return "simt"
    return None


def _rank_result(ctx: Context, ra: RankAnalysis) -> _Result | None:
    sk = steady_kernels(ctx.graph_of(ra.rank), ra)
    if sk is None:
        return None
    cat, prec, tcs = sk.col("category"), sk.col("precision"), sk.col("tensor_cores")
    reason = per_name(sk, lambda n, i: why(n, cat[i], prec[i], tcs[i]))
    cand = np.array([x is not None for x in reason], dtype=bool)
    if not cand.any():
        return None
    dev = np.nan_to_num(sk.col("device")).astype(np.int64)
    ratio_by_dev: dict[int, Ratio] = {}
    for d, row in device_rows(ra).items():
        sp = speedups_for(row)
        r = sp.get("half_misaligned") if sp is not None else None
        if r is not None:
            ratio_by_dev[d] = r
    cand &= np.isin(dev, list(ratio_by_dev))
    if not cand.any():
        return None
    div = np.array([ratio_by_dev[int(d)].value if int(d) in ratio_by_dev else 1.0 for d in dev])
    dur = sk.col("dur_ns")
    saving = np.where(cand, shorter(dur, 1.0 / div), 0.0)
    scaling = scaling_for(ctx, ra, sk)
    ops = op_names(ctx.graph_of(ra.rank))
    op_count: dict[str, int] = {}
    for e in sk.col("external_id")[cand]:
        if not np.isnan(e) and int(e) in ops:
            op_count[ops[int(e)]] = op_count.get(ops[int(e)], 0) + 1
    raw, kept = scaling.counted(sk, saving)
    top_dev = int(dev[np.flatnonzero(cand)[0]])
    return _Result(rank=ra.rank, saving_ms=kept, raw_ms=raw, scaling=scaling,
                   time_ms=per_step_ms(float(dur[cand].sum()), sk),
                   items=by_name(sk, cand, saving), sk=sk, ra=ra, ratio=ratio_by_dev[top_dev],
                   ops=op_count, aligned_by_name=bool((reason[cand] == "align").all()))


def _kernel_line(r: _Result, k: KernelSaving) -> str:
    a = min_alignment(k.name)
    how = (f"operands aligned to {a} element(s)" if a is not None and a < MIN_ALIGN
           else "16-bit math on CUDA cores")
    prec = r.sk.col("precision")[k.row]
    return (f"{short(k.name)}: {prec}, {how}; {k.calls / r.sk.n_steps:g} launches, "
            f"{per_step_ms(k.time_ns, r.sk):.3f} ms per step")


def _finding(ctx: Context, r: _Result, n_ranks: int) -> Finding:
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
    if len(r.items) > 5:
        evidence.append(f"... and {len(r.items) - 5} more kernel name(s)")
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
        best = largest(_rank_result(ctx, ra) for ra in ctx.ranks)
        if best is None or not ctx.worth_reporting(best.saving_ms):
            return []
        return [_finding(ctx, best, len(ctx.ranks))]


RULE = TcMisaligned()
