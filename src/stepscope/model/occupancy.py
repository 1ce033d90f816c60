"""What a higher occupancy would save per step: kernels held to few resident warps by
registers, shared memory or block limits (the method: the ``low_occupancy`` rule's docs page
and module docstring)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from stepscope.analysis import Analysis, RankAnalysis
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.kernel_names import MATMUL
from stepscope.analysis.occupancy import DeviceLimits
from stepscope.analysis.results import FACT
from stepscope.model.kernels import (
    CUSTOM,
    LIBRARY,
    KernelSaving,
    TopKernels,
    by_name,
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

MAX_OCCUPANCY = 0.25
TARGET = 0.5
LATENCY_BOUND_SHARE = 1.0  # calibrated on the planted suite (module doc)
LIMITERS = ("registers", "shared_memory", "blocks")
EXCLUDED_CATEGORIES = MATMUL | {"communication"}


@dataclass(frozen=True)
class OccupancyPart:
    """One group's saving on one rank before the run-wide profiler inflation is known: what
    ``occupancy_parts`` keeps (a per-rank fact)."""

    raw_steps: npt.NDArray[np.float64]  # per steady step (slot order), ns, before the scaling
    time_ms: float
    top: TopKernels
    base: ScalingBase  # the rank's (shared by its groups)
    max_warps: dict[int, int]


@dataclass(frozen=True)
class OccupancyGroup:
    rank: int
    saving_ms: float
    raw_ms: float
    scaling: Scaling
    time_ms: float
    items: tuple[KernelSaving, ...]  # the first kernel names by saving (``sk.items``)
    n_items: int  # kernel names flagged
    sk: TopKernels
    ra: RankAnalysis
    max_warps: dict[int, int]


def occupancy_groups(analysis: Analysis, ra: RankAnalysis) -> dict[bool, OccupancyGroup]:
    """Per rank: {True: user kernels, False: framework kernels}."""
    parts = occupancy_parts(analysis.graph.rank(ra.rank), ra)
    inflation = host_trust(analysis).est_inflation_ms if parts else 0.0
    out: dict[bool, OccupancyGroup] = {}
    for is_custom, p in parts.items():
        scaling = p.base.with_inflation(inflation)
        raw, kept = scaling.counted_steps(p.raw_steps)
        out[is_custom] = OccupancyGroup(rank=ra.rank, saving_ms=kept, raw_ms=raw,
                                        scaling=scaling, time_ms=p.time_ms, items=p.top.items,
                                        n_items=p.top.n_items, sk=p.top, ra=ra,
                                        max_warps=p.max_warps)
    return out


def occupancy_parts(g: StepGraph, ra: RankAnalysis) -> dict[bool, OccupancyPart]:
    """The rank's part of ``occupancy_groups``, once per rank graph (a per-rank fact,
    ``advisor.rank_facts``)."""
    return g.memo((FACT, "occupancy_parts"), lambda: _occupancy_parts(g, ra))


def _occupancy_parts(g: StepGraph, ra: RankAnalysis) -> dict[bool, OccupancyPart]:
    sk = steady_kernels(g, ra)
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
    base = scaling_base(g, ra, sk)
    out: dict[bool, OccupancyPart] = {}
    for is_custom in (True, False):
        mask = gain & ((who == CUSTOM) if is_custom else (who != CUSTOM))
        items = by_name(sk, mask, saving)
        if not items:
            continue
        out[is_custom] = OccupancyPart(raw_steps=raw_per_step(sk, np.where(mask, saving, 0.0)),
                                       time_ms=per_step_ms(float(dur[mask].sum()), sk),
                                       top=top_kernels(sk, items), base=base,
                                       max_warps=warps_by_dev)
    return out
