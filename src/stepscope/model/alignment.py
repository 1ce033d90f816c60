"""What aligned 16-bit GEMMs would save per step: half-precision matrix math that misses the
tensor-core fast path (the method: the ``tc_misaligned`` rule's docs page and module docstring)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from stepscope.analysis import Analysis, RankAnalysis
from stepscope.model.kernels import (
    KernelSaving,
    SteadyKernels,
    by_name,
    device_rows,
    per_name,
    per_step_ms,
    steady_kernels,
    steady_op_names,
)
from stepscope.model.overhead import host_trust
from stepscope.model.scaling import Scaling, scaling_for
from stepscope.model.speedups import Ratio, shorter, speedups_for

HALF = frozenset({"fp16", "bf16", "fp16/bf16"})
ALIGN = re.compile(r"align[abc]?(\d+)(?!\d)", re.IGNORECASE)
SIMT_HALF = re.compile(r"simt|hgemm|ffma|hfma", re.IGNORECASE)
NOT_A_GEMM = re.compile(r"gemv|gemmsn|gemmk1|splitk|reduce|epilogue|dot_kernel",
                        re.IGNORECASE)
MIN_ALIGN = 8  # elements of a 16-bit type = 16 bytes


@dataclass(frozen=True)
class MisalignedSaving:
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


def misaligned_saving(analysis: Analysis, ra: RankAnalysis) -> MisalignedSaving | None:
    sk = steady_kernels(analysis.graph.rank(ra.rank), ra)
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
    scaling = scaling_for(analysis.graph.rank(ra.rank), ra, sk,
                          host_trust(analysis).est_inflation_ms)
    ops = steady_op_names(analysis.graph.rank(ra.rank), sk)
    op_count: dict[str, int] = {}
    for e in sk.col("external_id")[cand]:
        if not np.isnan(e) and int(e) in ops:
            op_count[ops[int(e)]] = op_count.get(ops[int(e)], 0) + 1
    raw, kept = scaling.counted(sk, saving)
    top_dev = int(dev[np.flatnonzero(cand)[0]])
    return MisalignedSaving(rank=ra.rank, saving_ms=kept, raw_ms=raw, scaling=scaling,
                   time_ms=per_step_ms(float(dur[cand].sum()), sk),
                   items=by_name(sk, cand, saving), sk=sk, ra=ra, ratio=ratio_by_dev[top_dev],
                   ops=op_count, aligned_by_name=bool((reason[cand] == "align").all()))
