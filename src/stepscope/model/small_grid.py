"""What wider grids would save per step: kernels whose grid leaves SMs idle (the method: the
``small_grid`` rule's docs page and module docstring)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow.compute as pc

from stepscope.analysis import Analysis, RankAnalysis
from stepscope.analysis.intervals import overlap_with_windows, union
from stepscope.model.kernels import (
    CUSTOM,
    KernelSaving,
    SteadyKernels,
    by_name,
    column_objects,
    device_rows,
    kernel_owner,
    per_name,
    per_step_ms,
    steady_kernels,
)
from stepscope.model.overhead import host_trust
from stepscope.model.scaling import Scaling, scaling_for
from stepscope.model.speedups import MIN_KERNEL_NS, shorter

F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class GridGroup:
    rank: int
    saving_ms: float  # per step, scaled by the GPU-bound share
    raw_ms: float
    scaling: Scaling
    time_ms: float
    sms: int
    items: list[KernelSaving]
    sk: SteadyKernels
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
    sk = steady_kernels(analysis.graph.rank(ra.rank), ra)
    if sk is None:
        return {}
    dur, cov, blocks = sk.col("dur_ns"), sk.col("sm_coverage"), sk.col("blocks")
    cand = _candidates(cov, sk.col("category"), dur)
    if not cand.any():
        return {}
    exposed = _exposed(sk, cand)
    saving = np.where(cand, shorter(exposed, np.nan_to_num(cov)), 0.0)
    custom = per_name(sk, lambda n, i: kernel_owner(n) == CUSTOM).astype(bool)
    scaling = scaling_for(analysis.graph.rank(ra.rank), ra, sk,
                          host_trust(analysis).est_inflation_ms)
    devs = device_rows(ra)
    out: dict[bool, GridGroup] = {}
    for is_custom in (True, False):
        mask = cand & (custom if is_custom else ~custom)
        items = by_name(sk, mask, saving)
        if not items:
            continue
        raw, kept = scaling.counted(sk, np.where(mask, saving, 0.0))
        top = items[0].row
        sm_row = devs.get(int(np.nan_to_num(sk.col("device")[top])), {}).get("sm_count")
        sms = int(sm_row) if sm_row else round(blocks[top] / max(cov[top], 1e-9))
        out[is_custom] = GridGroup(
            rank=ra.rank, saving_ms=kept, raw_ms=raw, scaling=scaling,
            time_ms=per_step_ms(float(dur[mask].sum()), sk), sms=sms,
            items=items, sk=sk, ra=ra)
    return out
