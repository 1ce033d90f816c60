"""What aligned 16-bit GEMMs would save per step: half-precision matrix math that misses the
tensor-core fast path (the method: the ``tc_misaligned`` rule's docs page and module docstring)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from stepscope.analysis import Analysis, RankAnalysis
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.results import FACT
from stepscope.model.kernels import (
    KernelSaving,
    TopKernels,
    by_name,
    device_rows,
    per_name,
    per_step_ms,
    steady_kernels,
    steady_op_names,
    top_kernels,
)
from stepscope.model.overhead import host_trust
from stepscope.model.scaling import Scaling, ScalingBase, raw_per_step, scaling_base
from stepscope.model.speedups import Ratio, shorter, speedups_for

HALF = frozenset({"fp16", "bf16", "fp16/bf16"})
ALIGN = re.compile(r"align[abc]?(\d+)(?!\d)", re.IGNORECASE)
SIMT_HALF = re.compile(r"simt|hgemm|ffma|hfma", re.IGNORECASE)
NOT_A_GEMM = re.compile(r"gemv|gemmsn|gemmk1|splitk|reduce|epilogue|dot_kernel",
                        re.IGNORECASE)
MIN_ALIGN = 8  # elements of a 16-bit type = 16 bytes


@dataclass(frozen=True)
class MisalignedPart:
    """One rank's saving before the run-wide profiler inflation is known: what
    ``misaligned_part`` keeps (a per-rank fact)."""

    raw_steps: npt.NDArray[np.float64]  # per steady step (slot order), ns, before the scaling
    time_ms: float
    top: TopKernels
    base: ScalingBase
    ratio: Ratio
    ops: dict[str, int]
    aligned_by_name: bool


@dataclass(frozen=True)
class MisalignedSaving:
    rank: int
    saving_ms: float
    raw_ms: float
    scaling: Scaling
    time_ms: float
    items: tuple[KernelSaving, ...]  # the first kernel names by saving (``sk.items``)
    n_items: int  # kernel names flagged
    sk: TopKernels
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
    p = misaligned_part(analysis.graph.rank(ra.rank), ra)
    if p is None:
        return None
    scaling = p.base.with_inflation(host_trust(analysis).est_inflation_ms)
    raw, kept = scaling.counted_steps(p.raw_steps)
    return MisalignedSaving(rank=ra.rank, saving_ms=kept, raw_ms=raw, scaling=scaling,
                            time_ms=p.time_ms, items=p.top.items, n_items=p.top.n_items,
                            sk=p.top, ra=ra, ratio=p.ratio, ops=p.ops,
                            aligned_by_name=p.aligned_by_name)


def misaligned_part(g: StepGraph, ra: RankAnalysis) -> MisalignedPart | None:
    """The rank's part of ``misaligned_saving``, once per rank graph (a per-rank fact,
    ``advisor.rank_facts``)."""
    return g.memo((FACT, "misaligned_part"), lambda: _misaligned_part(g, ra))


def _misaligned_part(g: StepGraph, ra: RankAnalysis) -> MisalignedPart | None:
    sk = steady_kernels(g, ra)
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
    ops = steady_op_names(g, sk)
    op_count: dict[str, int] = {}
    for e in sk.col("external_id")[cand]:
        if not np.isnan(e) and int(e) in ops:
            op_count[ops[int(e)]] = op_count.get(ops[int(e)], 0) + 1
    top_dev = int(dev[np.flatnonzero(cand)[0]])
    return MisalignedPart(raw_steps=raw_per_step(sk, saving),
                          time_ms=per_step_ms(float(dur[cand].sum()), sk),
                          top=top_kernels(sk, by_name(sk, cand, saving)),
                          base=scaling_base(g, ra, sk), ratio=ratio_by_dev[top_dev],
                          ops=op_count, aligned_by_name=bool((reason[cand] == "align").all()))
