"""Theoretical occupancy (NVIDIA's calculator) and Kineto's "est. achieved occupancy %"."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stepscope.analysis.occupancy import (
    KNOWN_COMPUTE,
    DeviceLimits,
    kineto_estimated_occupancy,
    occupancy_arrays,
    theoretical_occupancy,
    waves,
)

# copies of ../shared/fixtures files (tests/data/PROVENANCE.md), by file name
FIXTURE_DATA = Path(__file__).resolve().parents[1] / "data"
H100 = DeviceLimits.for_compute(9, 0, 132)
A100 = DeviceLimits.for_compute(8, 0, 108)


# -- hand-computed ------------------------------------------------------------------------
def test_h100_register_limited() -> None:
    # 255 regs * 32 threads = 8160 -> 8192 per warp; a sub-partition (65536/4 = 16384 regs)
    # holds 2 such warps, so the SM holds 8 warps = 2 blocks of 4 warps: 8/64 = 12.5 %.
    # Shared memory: 33280 + 1 KB reserved = 34304 B -> 233472 // 34304 = 6 blocks.
    occ = theoretical_occupancy(H100, 128, 255, 33280)
    assert (occ.active_blocks_per_sm, occ.active_warps_per_sm, occ.limiter) == (2, 8, "registers")
    assert occ.occupancy == pytest.approx(0.125)
    # Kineto wrote 13 for this launch (cnn_fp32_sync, grid [1, 1024, 1]): 1024/132 = 7.76
    # blocks per SM, capped at 2: 2 * 128 / 2048 = 12.5 % -> (int)(0.5 + 12.5) = 13
    assert kineto_estimated_occupancy(H100, 128, 255, 33280, 1024)[0] == 13


def test_ga10x_warp_limited_1024_thread_block() -> None:
    # CC 8.6 holds 48 warps: one 32-warp block fits, two do not -> 32/48
    occ = theoretical_occupancy(DeviceLimits.for_compute(8, 6, 84), 1024, 32, 0)
    assert (occ.active_blocks_per_sm, occ.limiter) == (1, "warps")
    assert occ.occupancy == pytest.approx(2 / 3)


def test_hopper_large_dynamic_shared_memory() -> None:
    # 200 KB per block is legal through the 227 KB opt-in; (204800 + 1024) B per block,
    # 233472 B per SM -> 1 block of 4 warps = 4/64
    occ = theoretical_occupancy(H100, 128, 32, 200 * 1024)
    assert (occ.active_blocks_per_sm, occ.limiter) == (1, "shared_memory")
    assert occ.occupancy == pytest.approx(0.0625)
    # Kineto asks the calculator with the default (48 KB) per-block limit: 0 blocks, 0 %
    assert kineto_estimated_occupancy(H100, 128, 32, 200 * 1024, 264)[0] == 0


def test_turing_block_limit() -> None:
    # 7.5: 32 warps and 16 blocks per SM; one-warp blocks stop at 16 blocks = 50 %
    t = DeviceLimits.for_compute(7, 5, 40)
    occ = theoretical_occupancy(t, 32, 32, 0)
    assert (occ.active_blocks_per_sm, occ.active_warps_per_sm, occ.limiter) == (16, 16, "blocks")
    assert occ.occupancy == pytest.approx(0.5)


def test_register_sub_partitions() -> None:
    # 80 regs -> 2560 per warp; 16384 // 2560 = 6 warps per sub-partition, 24 per SM.
    # (65536 // 2560 = 25 would be wrong: a warp's registers live in one sub-partition.)
    occ = theoretical_occupancy(H100, 32, 80, 0)
    assert (occ.active_blocks_per_sm, occ.limiter) == (24, "registers")
    assert occ.occupancy == pytest.approx(24 / 64)


def test_shared_memory_allocation_units() -> None:
    # Volta: 256 B units, nothing reserved: 12289 -> 12544; 98304 // 12544 = 7
    assert theoretical_occupancy(DeviceLimits.for_compute(7, 0, 80), 256, 32, 12289).active_blocks_per_sm == 7
    # Ampere: 128 B units after 1 KB reserved: 20000 + 1024 -> 21120; 167936 // 21120 = 7
    occ = theoretical_occupancy(A100, 256, 32, 20000)
    assert (occ.active_blocks_per_sm, occ.limiter, occ.occupancy) == (7, "shared_memory", 56 / 64)


@pytest.mark.parametrize(
    ("threads", "regs", "smem"),
    [
        (1024, 255, 0),  # 32 warps * 8192 registers > 65536 per block
        (2048, 32, 0),  # over 1024 threads per block
        (0, 32, 0),  # empty block
        (128, 256, 0),  # over 255 registers per thread
        (128, 32, 232449),  # over the 227 KB opt-in
    ],
)
def test_invalid_blocks(threads: int, regs: int, smem: int) -> None:
    occ = theoretical_occupancy(H100, threads, regs, smem)
    assert (occ.active_blocks_per_sm, occ.active_warps_per_sm, occ.occupancy, occ.limiter) == (0, 0, 0.0, "invalid")


# Expected values from NVIDIA's own calculator: CUDA 13.0's cuda_occupancy.h compiled on the
# host (g++) with each CC's default properties, FUNC_SHMEM_LIMIT_OPTIN, default carveout; the
# limiter is the first flag set in cudaOccResult.limitingFactors. 70,000 random
# configurations over every CC here agreed when this module was written.
@pytest.mark.parametrize(
    ("cc", "threads", "regs", "smem", "blocks", "limiter"),
    [
        ((7, 0), 256, 32, 12289, 7, "shared_memory"),
        ((7, 0), 1024, 64, 0, 1, "registers"),
        ((7, 0), 96, 40, 48000, 2, "shared_memory"),
        ((7, 5), 32, 32, 0, 16, "blocks"),
        ((7, 5), 256, 72, 16384, 3, "registers"),
        ((7, 5), 1024, 32, 0, 1, "warps"),
        ((8, 0), 256, 32, 20000, 7, "shared_memory"),
        ((8, 0), 128, 255, 33280, 2, "registers"),
        ((8, 0), 384, 168, 100000, 1, "registers"),
        ((8, 0), 64, 80, 0, 12, "registers"),
        ((8, 6), 1024, 32, 0, 1, "warps"),
        ((8, 6), 128, 64, 40000, 2, "shared_memory"),
        ((8, 6), 256, 128, 99000, 1, "shared_memory"),
        ((8, 9), 64, 32, 0, 24, "warps"),
        ((8, 9), 512, 40, 8192, 3, "warps"),
        ((9, 0), 32, 80, 0, 24, "registers"),
        ((9, 0), 384, 168, 221420, 1, "registers"),
        ((9, 0), 128, 32, 204800, 1, "shared_memory"),
        ((9, 0), 128, 255, 33280, 2, "registers"),
        ((9, 0), 384, 168, 232448, 1, "registers"),
        ((10, 0), 256, 64, 65536, 3, "shared_memory"),
        ((10, 0), 32, 16, 0, 32, "blocks"),
        ((10, 3), 512, 96, 1000, 1, "registers"),
        ((11, 0), 64, 24, 0, 24, "blocks"),
        ((12, 0), 64, 32, 0, 24, "warps"),
        ((12, 0), 768, 40, 49152, 2, "warps"),
    ],
)
def test_matches_cuda_occupancy_header(cc: tuple[int, int], threads: int, regs: int, smem: int,
                                       blocks: int, limiter: str) -> None:
    occ = theoretical_occupancy(DeviceLimits.for_compute(*cc, 100), threads, regs, smem)
    assert (occ.active_blocks_per_sm, occ.limiter) == (blocks, limiter)


def test_arrays_match_scalar_calls() -> None:
    t = np.array([128, 1024, 32, 2048])
    r = np.array([255, 32, 80, 32])
    s = np.array([33280, 0, 0, 0])
    occ, active, lim = occupancy_arrays(H100, t, r, s)
    assert active.tolist() == [2, 2, 24, 0]
    assert occ.tolist() == pytest.approx([0.125, 1.0, 0.375, 0.0])
    assert lim.tolist() == ["registers", "warps", "registers", "invalid"]


def test_waves() -> None:
    assert waves(1024, 2, 132) == pytest.approx(1024 / 264)
    assert waves(132, 1, 132) == 1.0
    assert waves(10, 0, 132) == float("inf")


# -- device limits ----------------------------------------------------------------------------
def test_every_compute_capability_has_limits() -> None:
    for major, minor in KNOWN_COMPUTE:
        lim = DeviceLimits.for_compute(major, minor, 1)
        assert lim.smem_per_block_optin + lim.smem_reserved_per_block <= lim.smem_per_sm
        assert lim.smem_per_sm in lim.smem_configs
    assert set(KNOWN_COMPUTE) >= {(7, 0), (7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)}
    with pytest.raises(ValueError, match="unknown compute capability 6.1"):
        DeviceLimits.for_compute(6, 1, 28)


def _h100_row(**over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "rank": 0, "device": 0, "vendor": "nvidia", "compute_major": 9, "compute_minor": 0, "sm_count": 132,
        "warp_size": 32, "max_threads_per_block": 1024, "max_threads_per_sm": 2048, "max_blocks_per_sm": None,
        "regs_per_block": 65536, "regs_per_sm": 65536, "smem_per_block": 49152, "smem_per_block_optin": 232448,
        "smem_per_sm": 233472}
    row.update(over)
    return row


def test_from_device_row() -> None:
    assert DeviceLimits.from_device_row(_h100_row()) == H100
    assert DeviceLimits.from_device_row(_h100_row(vendor="amd")) is None
    assert DeviceLimits.from_device_row(_h100_row(compute_major=None)) is None
    assert DeviceLimits.from_device_row(_h100_row(compute_major=6, compute_minor=1)) is None
    # the row's own values override the table: a part with 1536 threads and 100 KB per SM
    lim = DeviceLimits.from_device_row(_h100_row(max_threads_per_sm=1536, smem_per_sm=102400,
                                                 smem_per_block_optin=101376, sm_count=None))
    assert lim is not None
    assert (lim.max_warps_per_sm, lim.smem_per_sm, lim.smem_per_block_optin, lim.sm_count) == (48, 102400, 101376, 0)
    # missing values fall back to the compute-capability table
    bare = DeviceLimits.from_device_row({"compute_major": 8, "compute_minor": 6, "sm_count": 84})
    assert bare == DeviceLimits.for_compute(8, 6, 84)


# -- Kineto --------------------------------------------------------------------------------
# Kineto (libkineto, CuptiActivity / DeviceProperties.cpp, ``kernelOccupancy``) calls
# cudaOccMaxActiveBlocksPerMultiprocessor with FUNC_SHMEM_LIMIT_DEFAULT and
# maxDynamicSharedSizeBytes = 0, caps the active blocks at the float grid blocks / SMs, and
# writes (int)(0.5 + 100 * blocks_per_sm * threads / max_threads_per_sm). Reproducing that
# agrees with every kernel of these traces. Where it differs from the theoretical occupancy:
# * every kernel with more than 48 KB of shared memory per block (cuBLAS nvjet/xmma, CUTLASS,
#   cuDNN SDPA, NCCL LL: 261 launches in the GPT trace, 414 in the A100 CNN trace) gets 0 %:
#   with the default per-block limit the calculator refuses the block. Kineto is wrong
#   there: the kernels ran, through the per-function opt-in limit;
# * it is an "achieved" estimate: a grid smaller than one full wave lowers it (Kineto is
#   right to, but it is not the theoretical occupancy);
# * it counts threads, not warps (a 48-thread block counts 1.5 warps, not 2).
KINETO_TRACES = [
    ("h100/gpt_bf16_adamw.pt.trace.json.gz", H100, 1311),
    ("h100/cnn_fp32_sync.pt.trace.json.gz", H100, 288),
    ("hta/nccl_parser_config_nccl_data.json.gz", A100, 2700),
    ("hta/trace_filter_sampled_rank-0.json.gz", A100, 1154),  # no deviceProperties: 108 SMs from "blocks per SM"
]


def _kernels(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    ks = [e["args"] for e in events if e.get("cat") == "kernel"]
    return {
        "threads": np.array([np.prod(a["block"]) for a in ks]),
        "blocks": np.array([np.prod(a["grid"]) for a in ks]),
        "regs": np.array([a["registers per thread"] for a in ks]),
        "smem": np.array([a["shared memory"] for a in ks]),
        "kineto": np.array([a["est. achieved occupancy %"] for a in ks]),
        "blocks_per_sm": np.array([a["blocks per SM"] for a in ks]),
    }


@pytest.mark.parametrize(("rel", "limits", "count"), KINETO_TRACES)
def test_reproduces_kineto_estimate(rel: str, limits: DeviceLimits, count: int) -> None:
    path = FIXTURE_DATA / Path(rel).name
    if not path.exists():
        pytest.skip(f"fixture {rel} not present")
    k = _kernels(path)
    assert k["kineto"].size == count
    # Kineto prints "blocks per SM" with 6 decimals (older versions: 6 significant digits)
    np.testing.assert_allclose(k["blocks"] / limits.sm_count, k["blocks_per_sm"], rtol=1e-5, atol=1e-6)
    ours = kineto_estimated_occupancy(limits, k["threads"], k["regs"], k["smem"], k["blocks"])
    assert (ours == k["kineto"]).mean() == 1.0  # agreement rate: 100 %

    occ, active, _ = occupancy_arrays(limits, k["threads"], k["regs"], k["smem"])
    optin = k["smem"] > 48 * 1024
    assert (k["kineto"][optin] == 0).all() and (occ[optin] > 0).all()
    # where Kineto is right (default smem, a full wave, whole warps) it is the theoretical value
    right = ~optin & (k["blocks_per_sm"] >= active) & (k["threads"] % 32 == 0)
    assert right.sum() > 0
    np.testing.assert_array_equal(np.trunc(0.5 + 100 * occ[right]), k["kineto"][right])
