"""What wider grids would save per step: kernels whose grid leaves SMs idle (the method: the
``small_grid`` rule's docs page and module docstring)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow.compute as pc

from stepscope.analysis import Analysis, RankAnalysis
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.intervals import overlap_with_windows, union
from stepscope.analysis.results import FACT
from stepscope.model.kernels import (
    CUSTOM,
    KernelSaving,
    SteadyKernels,
    TopKernels,
    by_name,
    column_objects,
    device_rows,
    kernel_owner,
    per_name,
    per_step_ms,
    steady_kernels,
    top_kernels,
)
from stepscope.model.overhead import host_trust
from stepscope.model.scaling import Scaling, ScalingBase, raw_per_step, scaling_base
from stepscope.model.speedups import MIN_KERNEL_NS, shorter

F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class GridPart:
    """One group's saving on one rank before the run-wide profiler inflation is known: what
    ``grid_parts`` keeps (a per-rank fact)."""

    raw_steps: F64  # per steady step (slot order), ns, before the scaling
    time_ms: float
    sms: int
    top: TopKernels
    base: ScalingBase  # the rank's (shared by its groups)


@dataclass(frozen=True)
class GridGroup:
    rank: int
    saving_ms: float  # per step, scaled by the GPU-bound share
    raw_ms: float
    scaling: Scaling
    time_ms: float
    sms: int
    items: tuple[KernelSaving, ...]  # the first kernel names by saving (``top.items``)
    n_items: int  # kernel names flagged
    sk: TopKernels
    ra: RankAnalysis


def _candidates(cov: F64, category: npt.NDArray[np.object_], dur: F64) -> B:
    return np.asarray((cov < 1.0) & ~np.isnan(cov) & (category != "communication")
                      & (dur > MIN_KERNEL_NS), dtype=bool)


def _exposed(sk: SteadyKernels, cand: B) -> F64:
    """Per steady launch, its time not overlapped by non-candidate kernels on its device."""
    frame = sk.all_frame
    dur_all = np.asarray(frame.column("dur_ns").to_numpy(), dtype=np.float64)
    cov_all = np.asarray(pc.fill_null(frame.column("sm_coverage"), np.nan)
                         .to_numpy(zero_copy_only=False), dtype=np.float64)
    cat_all = column_objects(frame.column("category"))
    other = ~_candidates(cov_all, cat_all, dur_all)
    ts_all = np.asarray(frame.column("ts_ns").to_numpy(), dtype=np.int64)
    dev_all = np.asarray(pc.fill_null(frame.column("device"), 0).to_numpy(), dtype=np.int64)
    ts = sk.col("ts_ns")
    dur = sk.col("dur_ns")
    dev = np.nan_to_num(sk.col("device")).astype(np.int64)
    exposed = dur.copy()
    for d in np.unique(dev[cand]):
        m = other & (dev_all == d)
        us, ue = union(ts_all[m], ts_all[m] + dur_all[m].astype(np.int64))
        rows = np.flatnonzero(cand & (dev == d))
        ov = overlap_with_windows(us, ue, ts[rows], ts[rows] + dur[rows].astype(np.int64))
        exposed[rows] = np.maximum(dur[rows] - ov, 0.0)
    return np.asarray(exposed, dtype=np.float64)


def grid_groups(analysis: Analysis, ra: RankAnalysis) -> dict[bool, GridGroup]:
    """Per rank: {True: user kernels, False: library/framework kernels}."""
    g = analysis.graph.rank(ra.rank)
    parts = grid_parts(g, ra)
    if not parts:
        return {}
    inflation = host_trust(analysis).est_inflation_ms
    out: dict[bool, GridGroup] = {}
    for is_custom, p in parts.items():
        scaling = p.base.with_inflation(inflation)
        raw, kept = scaling.counted_steps(p.raw_steps)
        out[is_custom] = GridGroup(rank=ra.rank, saving_ms=kept, raw_ms=raw, scaling=scaling,
                                   time_ms=p.time_ms, sms=p.sms, items=p.top.items,
                                   n_items=p.top.n_items, sk=p.top, ra=ra)
    return out


def grid_parts(g: StepGraph, ra: RankAnalysis) -> dict[bool, GridPart]:
    """The rank's part of ``grid_groups``, once per rank graph (a per-rank fact,
    ``advisor.rank_facts``)."""
    return g.memo((FACT, "grid_parts"), lambda: _grid_parts(g, ra))


def _grid_parts(g: StepGraph, ra: RankAnalysis) -> dict[bool, GridPart]:
    sk = steady_kernels(g, ra)
    if sk is None:
        return {}
    dur, cov, blocks = sk.col("dur_ns"), sk.col("sm_coverage"), sk.col("blocks")
    cand = _candidates(cov, sk.col("category"), dur)
    if not cand.any():
        return {}
    exposed = _exposed(sk, cand)
    saving = np.where(cand, shorter(exposed, np.nan_to_num(cov)), 0.0)
    custom = per_name(sk, lambda n, i: kernel_owner(n) == CUSTOM).astype(bool)
    base = scaling_base(g, ra, sk)
    devs = device_rows(ra)
    out: dict[bool, GridPart] = {}
    for is_custom in (True, False):
        mask = cand & (custom if is_custom else ~custom)
        items = by_name(sk, mask, saving)
        if not items:
            continue
        top = items[0].row
        sm_row = devs.get(int(np.nan_to_num(sk.col("device")[top])), {}).get("sm_count")
        sms = int(sm_row) if sm_row else round(blocks[top] / max(cov[top], 1e-9))
        out[is_custom] = GridPart(
            raw_steps=raw_per_step(sk, np.where(mask, saving, 0.0)),
            time_ms=per_step_ms(float(dur[mask].sum()), sk), sms=sms,
            top=top_kernels(sk, items), base=base)
    return out
