"""What tensor cores (TF32, bf16/fp16) would save per step on fp32 matrix math (the method: the
``no_tensor_cores`` rule's docs page and module docstring)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from stepscope.analysis import Analysis, RankAnalysis
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.kernel_names import MATMUL
from stepscope.analysis.launches import bounds, column_i64
from stepscope.analysis.results import FACT
from stepscope.model.kernels import (
    KernelSaving,
    SteadyKernels,
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
from stepscope.model.speedups import Ratio, Speedups, shorter, speedups_for

TC_HINT = re.compile(r"tf32|tensorop|warpgroup|wgmma|hmma|tensor\d+x\d+x\d+|_mma_|tcgen05",
                     re.IGNORECASE)
HELPER = re.compile(r"splitk|reduce_?split|epilogue|init_device_workspace|computeoffsets",
                    re.IGNORECASE)


@dataclass(frozen=True)
class TensorCorePart:
    """One rank's saving before the run-wide profiler inflation is known: what
    ``tensor_core_part`` keeps (a per-rank fact)."""

    tf32_steps: npt.NDArray[np.float64] | None  # per steady step, ns; None: no TF32
    amp_steps: npt.NDArray[np.float64]
    amp_dtype: str
    time_ms: float
    by_kind_ms: dict[str, float]
    top: TopKernels
    base: ScalingBase
    ratios: dict[str, Ratio]
    ops: dict[str, int]


@dataclass(frozen=True)
class TensorCoreSaving:
    rank: int
    tf32_ms: float | None  # None: the GPU has no TF32
    amp_ms: float
    amp_dtype: str
    raw_ms: float  # headline saving before the GPU-bound cap
    time_ms: float
    by_kind_ms: dict[str, float]
    scaling: Scaling
    items: tuple[KernelSaving, ...]  # the first kernel names by saving (``sk.items``)
    n_items: int  # kernel names flagged
    sk: TopKernels
    ra: RankAnalysis
    ratios: dict[str, Ratio]  # used ratios by name
    ops: dict[str, int]  # launching framework op -> flagged launches

    @property
    def saving_ms(self) -> float:
        return self.tf32_ms if self.tf32_ms is not None else self.amp_ms


def _kinds(g: StepGraph, sk: SteadyKernels, ops: dict[int, str],
           cand: npt.NDArray[np.bool_]) -> npt.NDArray[np.str_]:
    """gemm / conv / attention per launch; a GEMM that is part of a convolution is conv (cuDNN
    runs some as an implicit GEMM or an FFT's complex GEMMs, and with tensor cores the whole
    call changes algorithm: ``stepmodel.kernel_remedies.conv_members``): launched by a
    convolution op, or, without framework ops (a recorded run), launched in a run of candidate
    launches of its thread that holds a conv kernel (:func:`_conv_runs`)."""
    cat = sk.col("category")
    ext = sk.col("external_id")
    kind = np.where(cat == "attention", "attention", np.where(cat == "conv", "conv", "gemm"))
    if ops:
        for i in np.flatnonzero((kind == "gemm") & cand):
            e = ext[i]
            if not np.isnan(e) and "conv" in ops.get(int(e), "").lower():
                kind[i] = "conv"
    else:
        kind[(kind == "gemm") & cand & _conv_runs(g, sk, cand, kind == "conv")] = "conv"
    return kind


def _conv_runs(g: StepGraph, sk: SteadyKernels, cand: npt.NDArray[np.bool_],
               conv: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
    """Per steady launch: a candidate (``cand``) in a run of candidate launches (consecutive on
    its launching thread, in launch order, no other steady kernel between) that holds a conv
    kernel (``conv``)."""
    out = np.zeros(cand.size, dtype=bool)
    api = g.table("api_calls")
    if api.num_rows == 0 or cand.size == 0:
        return out
    arow = g.api_row(g.keys("kernels")[sk.col("row")])
    j = np.flatnonzero(arow >= 0)
    if j.size == 0:
        return out
    r = arow[j]
    key = column_i64(api, "pid")[r] * np.int64(1 << 32) + column_i64(api, "tid")[r]
    order = np.lexsort((bounds(api)[0][r], key))  # by thread, then by launch
    j, key = j[order], key[order]
    c = cand[j]
    brk = np.ones(j.size, dtype=bool)
    brk[1:] = (key[1:] != key[:-1]) | (c[1:] != c[:-1])
    run = np.cumsum(brk) - 1
    has = np.zeros(int(run[-1]) + 1, dtype=bool)
    has[run[c & conv[j]]] = True
    out[j] = c & has[run]
    return out


def tensor_core_saving(analysis: Analysis, ra: RankAnalysis) -> TensorCoreSaving | None:
    p = tensor_core_part(analysis.graph.rank(ra.rank), ra)
    if p is None:
        return None
    scaling = p.base.with_inflation(host_trust(analysis).est_inflation_ms)
    amp_raw, amp_ms = scaling.counted_steps(p.amp_steps)
    tf32_raw, tf32_ms = (scaling.counted_steps(p.tf32_steps) if p.tf32_steps is not None
                         else (amp_raw, None))
    return TensorCoreSaving(
        rank=ra.rank, tf32_ms=tf32_ms, amp_ms=amp_ms, amp_dtype=p.amp_dtype, raw_ms=tf32_raw,
        time_ms=p.time_ms, by_kind_ms=p.by_kind_ms, scaling=scaling, items=p.top.items,
        n_items=p.top.n_items, sk=p.top, ra=ra, ratios=p.ratios, ops=p.ops)


def tensor_core_part(g: StepGraph, ra: RankAnalysis) -> TensorCorePart | None:
    """The rank's part of ``tensor_core_saving``, once per rank graph (a per-rank fact,
    ``advisor.rank_facts``)."""
    return g.memo((FACT, "tensor_core_part"), lambda: _tensor_core_part(g, ra))


def _tensor_core_part(g: StepGraph, ra: RankAnalysis) -> TensorCorePart | None:
    sk = steady_kernels(g, ra)
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
    ops = steady_op_names(g, sk)
    kind = _kinds(g, sk, ops, cand)
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
    items = by_name(sk, cand, tf32_save if has_tf32 else amp_save)
    ext = sk.col("external_id")
    op_count: dict[str, int] = {}
    for e in ext[cand]:
        if not np.isnan(e) and int(e) in ops:
            op_count[ops[int(e)]] = op_count.get(ops[int(e)], 0) + 1
    return TensorCorePart(
        tf32_steps=raw_per_step(sk, tf32_save) if has_tf32 else None,
        amp_steps=raw_per_step(sk, amp_save), amp_dtype=amp_dtype,
        time_ms=per_step_ms(float(dur[cand].sum()), sk),
        by_kind_ms={k: per_step_ms(float(dur[cand & (kind == k)].sum()), sk)
                    for k in ("gemm", "conv", "attention") if (cand & (kind == k)).any()},
        top=top_kernels(sk, items), base=scaling_base(g, ra, sk), ratios=used, ops=op_count)
