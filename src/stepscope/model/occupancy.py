"""What a higher occupancy would save per step: kernels held to few resident warps by
registers, shared memory or block limits (the method: the ``low_occupancy`` rule's docs page
and module docstring)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.analysis import Analysis, RankAnalysis
from stepscope.analysis.kernel_names import MATMUL
from stepscope.analysis.occupancy import DeviceLimits
from stepscope.model.kernels import (
    CUSTOM,
    LIBRARY,
    KernelSaving,
    SteadyKernels,
    by_name,
    device_rows,
    kernel_owner,
    per_name,
    per_step_ms,
    steady_kernels,
)
from stepscope.model.overhead import host_trust
from stepscope.model.scaling import Scaling, scaling_for
from stepscope.model.speedups import MIN_KERNEL_NS, shorter

MAX_OCCUPANCY = 0.25
TARGET = 0.5
LATENCY_BOUND_SHARE = 1.0  # calibrated on the planted suite (module doc)
LIMITERS = ("registers", "shared_memory", "blocks")
EXCLUDED_CATEGORIES = MATMUL | {"communication"}


@dataclass(frozen=True)
class OccupancyGroup:
    rank: int
    saving_ms: float
    raw_ms: float
    scaling: Scaling
    time_ms: float
    items: list[KernelSaving]
    sk: SteadyKernels
    ra: RankAnalysis
    max_warps: dict[int, int]


def occupancy_groups(analysis: Analysis, ra: RankAnalysis) -> dict[bool, OccupancyGroup]:
    sk = steady_kernels(analysis.graph.rank(ra.rank), ra)
    if sk is None:
        return {}
    dur, occ = sk.col("dur_ns"), sk.col("occupancy")
    limiter, category = sk.col("occupancy_limiter"), sk.col("category")
    cand = ((occ < MAX_OCCUPANCY) & ~np.isnan(occ) & np.isin(limiter, LIMITERS)
            & ~np.isin(category, list(EXCLUDED_CATEGORIES)) & (dur > MIN_KERNEL_NS))
    if not cand.any():
        return {}
    who = per_name(sk, lambda n, i: kernel_owner(n))
    cand &= who != LIBRARY
    if not cand.any():
        return {}
    # occupancy the grid alone could reach, per launch
    sms = np.full(dur.size, np.nan)
    max_warps = np.full(dur.size, np.nan)
    warps_by_dev: dict[int, int] = {}
    dev = np.nan_to_num(sk.col("device")).astype(np.int64)
    for d, row in device_rows(ra).items():
        limits = DeviceLimits.from_device_row(row)
        if limits is None or not limits.sm_count:
            continue
        m = dev == d
        sms[m], max_warps[m] = limits.sm_count, limits.max_warps_per_sm
        warps_by_dev[d] = limits.max_warps_per_sm
    warps_per_block = np.ceil(sk.col("threads") / 32.0)
    w_grid = sk.col("blocks") * warps_per_block / (sms * max_warps)
    w0 = np.minimum(occ, w_grid)
    w1 = np.minimum(TARGET, w_grid)
    gain = cand & (w1 > w0) & ~np.isnan(w_grid)
    factor = np.where(gain, w0 / np.where(gain, w1, 1.0), 1.0)
    saving = np.where(gain, shorter(dur, factor) * LATENCY_BOUND_SHARE, 0.0)
    scaling = scaling_for(analysis.graph.rank(ra.rank), ra, sk,
                          host_trust(analysis).est_inflation_ms)
    out: dict[bool, OccupancyGroup] = {}
    for is_custom in (True, False):
        mask = gain & ((who == CUSTOM) if is_custom else (who != CUSTOM))
        items = by_name(sk, mask, saving)
        if not items:
            continue
        raw, kept = scaling.counted(sk, np.where(mask, saving, 0.0))
        out[is_custom] = OccupancyGroup(rank=ra.rank, saving_ms=kept, raw_ms=raw, scaling=scaling,
                                time_ms=per_step_ms(float(dur[mask].sum()), sk),
                                items=items, sk=sk, ra=ra, max_warps=warps_by_dev)
    return out
