"""Theoretical occupancy of CUDA kernels, as NVIDIA's occupancy calculator computes it.

The arithmetic follows the public ``cuda_occupancy.h`` shipped with the CUDA toolkit
(checked against the CUDA 13.0 copy, which covers compute capabilities up to 12.x), for a
kernel launched with the default shared-memory carveout preference and the per-function
opt-in shared-memory limit (what ``cudaOccFuncAttributes`` gets from ``cudaFuncAttributes``):

* warps: ``max_warps_per_sm // ceil(threads / warp_size)``;
* registers: allocated per warp, ``regs * warp_size`` rounded up to 256; an SM has four
  sub-partitions of ``regs_per_sm / 4`` registers and a warp lives in one of them, so the
  limit is ``floor(regs_per_sm / 4 / regs_per_warp) * 4 // warps_per_block``. A block whose
  registers exceed ``regs_per_block`` (with warps rounded up to a multiple of 4, the hardware
  check) or more than 255 registers per thread cannot launch;
* shared memory: ``round_up(smem + reserved, unit)`` per block (1 KB reserved from 8.0 on,
  unit 256 B on 7.x and 128 B after); with the default carveout the calculator assumes the
  whole ``smem_per_sm`` (aligned up to a carveout configuration) is available: the driver
  picks a carveout that does not lower occupancy. A block over ``optin + reserved`` cannot
  launch;
* blocks: the per-CC resident-block limit.

The barrier limit that ``cuda_occupancy.h`` applies on 9.0+ never binds with one barrier per
block (it allows ``2 * max_blocks`` or ``max_blocks`` blocks), so it is left out.

Sources of the per-CC facts: ``cuda_occupancy.h`` (CUDA 13.0: allocation units, resident
blocks, carveout configurations), the CUDA Programming Guide "Compute Capabilities" tables
and CCCL's ``cuda/__device/arch_traits.h`` (warps, shared memory per SM, opt-in, reserved).
Where they disagree the occupancy header wins, because it is what the CUDA runtime's
occupancy API and Kineto compute with: CCCL says 32 resident blocks on 12.x and 11.0, the
header 24.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

KB = 1024
LIMITERS: tuple[str, ...] = ("warps", "registers", "shared_memory", "blocks", "invalid")
"""Closed set of ``Occupancy.limiter`` values; ties are broken in this order."""

_CFG_VOLTA = (0, 8, 16, 32, 64, 96)
_CFG_TURING = (32, 64)
_CFG_GA100 = (0, 8, 16, 32, 64, 100, 132, 164)
_CFG_100K = (0, 8, 16, 32, 64, 100)
_CFG_228K = (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)

# (major, minor): max warps/SM, max blocks/SM, smem/SM KB, opt-in smem/block KB, carveouts KB
_CC: dict[tuple[int, int], tuple[int, int, int, int, tuple[int, ...]]] = {
    (7, 0): (64, 32, 96, 96, _CFG_VOLTA),
    (7, 2): (64, 32, 96, 96, _CFG_VOLTA),
    (7, 5): (32, 16, 64, 64, _CFG_TURING),
    (8, 0): (64, 32, 164, 163, _CFG_GA100),
    (8, 6): (48, 16, 100, 99, _CFG_100K),
    (8, 7): (48, 16, 164, 163, _CFG_GA100),
    (8, 9): (48, 24, 100, 99, _CFG_100K),
    (9, 0): (64, 32, 228, 227, _CFG_228K),
    (10, 0): (64, 32, 228, 227, _CFG_228K),
    (10, 1): (64, 24, 228, 227, _CFG_228K),  # Thor before CUDA 13 renamed it 11.0
    (10, 3): (64, 32, 228, 227, _CFG_228K),
    (11, 0): (64, 24, 228, 227, _CFG_228K),
    (12, 0): (48, 24, 100, 99, _CFG_100K),
    (12, 1): (48, 24, 100, 99, _CFG_100K),
}
KNOWN_COMPUTE: tuple[tuple[int, int], ...] = tuple(_CC)

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class DeviceLimits:
    """Per-SM resource limits of one GPU model (NVIDIA)."""

    compute: tuple[int, int]
    sm_count: int
    max_warps_per_sm: int
    max_blocks_per_sm: int
    regs_per_sm: int
    max_regs_per_block: int
    max_regs_per_thread: int
    reg_alloc_unit: int
    warp_size: int
    max_threads_per_block: int
    smem_per_sm: int
    smem_per_block_optin: int
    smem_reserved_per_block: int
    smem_alloc_unit: int
    smem_configs: tuple[int, ...]
    smem_per_block: int = 48 * KB
    """Default (non-opt-in) shared memory per block; only Kineto's estimate uses it."""
    sub_partitions: int = 4

    @staticmethod
    def for_compute(major: int, minor: int, sm_count: int) -> DeviceLimits:
        """Limits of compute capability ``major.minor`` from the tables.

        ``ValueError`` for a compute capability the tables do not know.
        """
        try:
            warps, blocks, smem_kb, optin_kb, cfg = _CC[(int(major), int(minor))]
        except KeyError:
            known = ", ".join(f"{a}.{b}" for a, b in _CC)
            raise ValueError(
                f"unknown compute capability {major}.{minor}; known: {known}") from None
        return DeviceLimits(
            compute=(int(major), int(minor)),
            sm_count=int(sm_count),
            max_warps_per_sm=warps,
            max_blocks_per_sm=blocks,
            regs_per_sm=64 * KB,
            max_regs_per_block=64 * KB,
            max_regs_per_thread=255,
            reg_alloc_unit=256,
            warp_size=32,
            max_threads_per_block=1024,
            smem_per_sm=smem_kb * KB,
            smem_per_block_optin=optin_kb * KB,
            smem_reserved_per_block=KB if major >= 8 else 0,
            smem_alloc_unit=128 if major >= 8 else 256,
            smem_configs=tuple(c * KB for c in cfg),
        )

    @staticmethod
    def from_device_row(row: Mapping[str, Any]) -> DeviceLimits | None:
        """Limits for a ``devices`` table row; the row's own values override the CC table.

        ``None`` for AMD (or any non-NVIDIA vendor), a missing or unknown compute capability.
        """
        vendor = row.get("vendor")
        if vendor is not None and str(vendor).lower() not in ("nvidia", "unknown", ""):
            return None
        major = _pos(row.get("compute_major"), zero_ok=True)
        minor = _pos(row.get("compute_minor"), zero_ok=True)
        if major is None or minor is None or (major, minor) not in _CC:
            return None
        base = DeviceLimits.for_compute(major, minor, _pos(row.get("sm_count")) or 0)
        warp = _pos(row.get("warp_size")) or base.warp_size
        threads_sm = _pos(row.get("max_threads_per_sm"))
        return replace(
            base,
            warp_size=warp,
            max_warps_per_sm=threads_sm // warp if threads_sm else base.max_warps_per_sm,
            max_blocks_per_sm=_pos(row.get("max_blocks_per_sm")) or base.max_blocks_per_sm,
            max_threads_per_block=(_pos(row.get("max_threads_per_block"))
                                   or base.max_threads_per_block),
            regs_per_sm=_pos(row.get("regs_per_sm")) or base.regs_per_sm,
            max_regs_per_block=_pos(row.get("regs_per_block")) or base.max_regs_per_block,
            smem_per_sm=_pos(row.get("smem_per_sm")) or base.smem_per_sm,
            smem_per_block=_pos(row.get("smem_per_block")) or base.smem_per_block,
            smem_per_block_optin=_pos(row.get("smem_per_block_optin")) or base.smem_per_block_optin,
        )


def _pos(value: Any, *, zero_ok: bool = False) -> int | None:
    """``value`` as an int if it is a usable number (positive, or >= 0 with ``zero_ok``)."""
    if value is None:
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    if math.isnan(f) or f < 0 or (f == 0 and not zero_ok):
        return None
    return int(f)


@dataclass(frozen=True)
class Occupancy:
    active_blocks_per_sm: int
    active_warps_per_sm: int
    occupancy: float
    """Theoretical: active warps / max warps per SM, 0..1."""
    limiter: str
    """One of ``LIMITERS``: what caps the active blocks; ``invalid`` when no block fits."""


def _carveout(limits: DeviceLimits, size: int) -> int:
    """``size`` aligned up to the next shared-memory carveout configuration."""
    for c in limits.smem_configs:
        if c >= size:
            return c
    return size


def _per_sm_limits(
    limits: DeviceLimits, threads: I64, regs: I64, smem: I64, smem_cap: I64 | int
) -> tuple[I64, I64, I64, I64]:
    """Blocks per SM allowed by warps, registers, shared memory, and the block cap.

    ``smem_cap`` is the largest shared memory a block may have (before the reserved part).
    A zero means the block cannot launch on that resource.
    """
    big = np.iinfo(np.int64).max
    ws = limits.warp_size
    ok_threads = (threads > 0) & (threads <= limits.max_threads_per_block)
    warps = np.where(ok_threads, -(-threads // ws), 1)
    by_warps = np.where(ok_threads, limits.max_warps_per_sm // warps, 0)

    unit = limits.reg_alloc_unit
    regs_warp = -(-(regs * ws) // unit) * unit
    sp = limits.sub_partitions
    hw_warps = -(-warps // sp) * sp
    reg_ok = (
        (regs >= 0)
        & (regs <= limits.max_regs_per_thread)
        & (regs_warp * warps <= limits.max_regs_per_block)
        & (regs_warp * hw_warps <= limits.max_regs_per_block)
    )
    per_sub = (limits.regs_per_sm // sp) // np.maximum(regs_warp, 1)
    by_regs = np.where(regs_warp > 0, (per_sub * sp) // warps, big)
    by_regs = np.where(reg_ok, by_regs, 0)

    su = limits.smem_alloc_unit
    alloc = -(-(np.maximum(smem, 0) + limits.smem_reserved_per_block) // su) * su
    fits = alloc <= np.asarray(smem_cap) + limits.smem_reserved_per_block
    # cuda_occupancy.h: the carveout preference (all of smem_per_sm, aligned up) is used when
    # it holds one block, else the carveout that does (reachable only when a devices row
    # reports less shared memory per SM than its opt-in limit)
    pref = _carveout(limits, limits.smem_per_sm)
    cfg = np.asarray(limits.smem_configs, dtype=np.int64)
    idx = np.searchsorted(cfg, alloc, side="left")
    aligned = np.where(idx < cfg.size, cfg[np.minimum(idx, cfg.size - 1)], alloc)
    per_sm = np.where(alloc <= pref, pref, aligned)
    by_smem = np.where(fits, np.where(alloc > 0, per_sm // np.maximum(alloc, 1), big), 0)
    by_blocks = np.full(threads.shape, limits.max_blocks_per_sm, dtype=np.int64)
    return by_warps, by_regs, by_smem, by_blocks


def _as_i64(x: object) -> I64:
    return np.atleast_1d(np.asarray(x, dtype=np.int64))


def occupancy_arrays(
    limits: DeviceLimits, threads: object, regs: object, smem: object
) -> tuple[F64, I64, npt.NDArray[np.object_]]:
    """Theoretical occupancy (0..1), active blocks per SM and limiter, element-wise."""
    t, r, s = _as_i64(threads), _as_i64(regs), _as_i64(smem)
    t, r, s = np.broadcast_arrays(t, r, s)
    cap = max(limits.smem_per_block_optin, limits.smem_per_block)
    lims = _per_sm_limits(limits, t, r, s, cap)
    stacked = np.stack(lims)  # (4, n): warps, registers, shared_memory, blocks
    active = stacked.min(axis=0)
    which = np.argmax(stacked == active, axis=0)  # first in LIMITERS order
    names = np.array(LIMITERS, dtype=object)
    limiter = np.where(active > 0, names[which], "invalid").astype(object)
    warps = -(-np.maximum(t, 0) // limits.warp_size)
    occ = (active * warps) / float(limits.max_warps_per_sm)
    return occ.astype(np.float64), active.astype(np.int64), limiter


def theoretical_occupancy(
    limits: DeviceLimits, threads_per_block: int, registers_per_thread: int, smem_per_block: int
) -> Occupancy:
    """Occupancy of one launch configuration (``smem_per_block`` = static + dynamic bytes)."""
    occ, active, limiter = occupancy_arrays(
        limits, threads_per_block, registers_per_thread, smem_per_block)
    blocks = int(active[0])
    warps = blocks * -(-max(threads_per_block, 0) // limits.warp_size)
    return Occupancy(blocks, warps, float(occ[0]), str(limiter[0]))


def waves(blocks: int, active_blocks_per_sm: int, sm_count: int) -> float:
    """How many times the grid fills every SM at full residency: ``blocks / (active * SMs)``."""
    slots = active_blocks_per_sm * sm_count
    return float(blocks) / slots if slots > 0 else math.inf


def kineto_estimated_occupancy(
    limits: DeviceLimits, threads: object, regs: object, smem: object, blocks: object
) -> F64:
    """Kineto's ``est. achieved occupancy %`` (an integer percent), element-wise.

    Kineto (libkineto ``kernelOccupancy``) runs ``cudaOccMaxActiveBlocksPerMultiprocessor``
    with ``shmemLimitConfig = FUNC_SHMEM_LIMIT_DEFAULT``, caps the result at the float
    ``blocks per SM`` (grid blocks / SMs), and writes
    ``(int)(0.5 + 100 * blocks_per_sm * threads / max_threads_per_sm)`` in float32. Because
    of the default limit, every kernel with more than 48 KB of shared memory per block (an
    opt-in launch) gets 0 blocks and so 0 %: Kineto is wrong there, not the kernel.
    Returns -99 where Kineto's calculator fails (empty block), as Kineto writes it.
    """
    t, r, s, b = np.broadcast_arrays(
        _as_i64(threads), _as_i64(regs), _as_i64(smem), _as_i64(blocks))
    lims = _per_sm_limits(limits, t, r, s, limits.smem_per_block)
    # Kineto passes maxThreadsPerBlock = INT_MAX for the function, so only the device cap applies
    active = np.stack(lims).min(axis=0).astype(np.float32)
    per_sm = b.astype(np.float32) / np.float32(limits.sm_count) if limits.sm_count else np.full(
        b.shape, -1.0, np.float32)
    per_sm = np.where(active < per_sm, active, per_sm).astype(np.float32)
    max_threads = np.float32(limits.max_warps_per_sm * limits.warp_size)
    occ = (per_sm * t.astype(np.float32) / max_threads).astype(np.float32)
    pct = np.trunc(0.5 + occ.astype(np.float64) * 100.0)
    return np.where(t > 0, pct, -99.0)
