"""The kernel table, the enriched per-launch frame and the kernel summary."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stepscope.analysis.graph import rank_graph
from stepscope.analysis.kernels import KernelStats, kernel_frame, kernel_summary, kernel_table
from stepscope.store.run import Run

# copies of ../shared/fixtures files (tests/data/PROVENANCE.md), by file name
FIXTURE_DATA = Path(__file__).resolve().parents[1] / "data"
SGEMM = "ampere_sgemm_128x64_nn"
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >"
       "(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)")
NVJET = "nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_NNT"


def _two_kernel_run(builder: Any, tmp_path: Path) -> Run:
    # times in µs; the builder's H100 has 132 SMs
    builder.kernel(SGEMM, 0, 10, grid=(64, 1, 1), block=(128, 1, 1), regs=255, smem=33280)
    builder.kernel(SGEMM, 100, 20)  # default launch: grid 1024, block 256, 32 regs, no smem
    builder.kernel(SGEMM, 200, 60)
    builder.kernel(ADD, 300, 5, grid=(66, 1, 1), block=(128, 1, 1), regs=16)
    builder.kernel(ADD, 400, 5, grid=(66, 1, 1), block=(128, 1, 1), regs=16)
    run: Run = builder.build(tmp_path / "run")
    return run


def test_kernel_table_hand_computed(builder: Any, tmp_path: Path) -> None:
    table = kernel_table(rank_graph(_two_kernel_run(builder, tmp_path), None))
    # SGEMM: 10 + 20 + 60 µs of the 100 µs; its dominant launch (80 µs) is 1024 x 256 threads,
    # 32 regs: 8 warps per block, 64 warps per SM -> 8 blocks (warps limit), 100 %;
    # 1024 blocks over 8 * 132 slots = 0.97 waves
    assert table[0] == KernelStats(
        name=SGEMM, calls=3, total_ns=90_000, mean_ns=30_000.0, median_ns=20_000.0, min_ns=10_000,
        max_ns=60_000, share=0.9, grid=(1024, 1, 1), block=(256, 1, 1), registers=32, shared_memory=0,
        blocks=1024, threads_per_block=256, occupancy=1.0, occupancy_limiter="warps", active_blocks_per_sm=8,
        sm_coverage=1.0, waves=1024 / (8 * 132), category="gemm", tensor_cores=False, precision="fp32",
        source_occupancy_pct=None, devices=(0,))
    # ADD: 4-warp blocks -> 16 per SM (warps); 66 blocks cover half of the 132 SMs
    assert table[1] == KernelStats(
        name=ADD, calls=2, total_ns=10_000, mean_ns=5_000.0, median_ns=5_000.0, min_ns=5_000, max_ns=5_000,
        share=0.1, grid=(66, 1, 1), block=(128, 1, 1), registers=16, shared_memory=0, blocks=66,
        threads_per_block=128, occupancy=1.0, occupancy_limiter="warps", active_blocks_per_sm=16,
        sm_coverage=0.5, waves=66 / (16 * 132), category="elementwise", tensor_cores=False, precision="fp32",
        source_occupancy_pct=None, devices=(0,))


def test_window_and_limit(builder: Any, tmp_path: Path) -> None:
    run = _two_kernel_run(builder, tmp_path)
    # [100 µs, 300 µs): the second and third SGEMM only (the ADD at 300 µs starts at the end)
    (only,) = kernel_table(rank_graph(run, None), window=(100_000, 300_000))
    assert (only.name, only.calls, only.total_ns, only.median_ns, only.share) == (SGEMM, 2, 80_000, 40_000.0, 1.0)
    assert [s.name for s in kernel_table(rank_graph(run, None), limit=1)] == [SGEMM]
    assert kernel_table(rank_graph(run, None), window=(1_000_000, 2_000_000)) == ()


def test_kernel_summary_hand_computed(builder: Any, tmp_path: Path) -> None:
    run = _two_kernel_run(builder, tmp_path)
    s = kernel_summary(rank_graph(run, None))
    assert (s.total_ns, s.tensor_core_ns, s.tensor_core_share) == (100_000, 0, 0.0)
    assert s.by_category_ns == {"gemm": 90_000, "elementwise": 10_000}
    assert s.by_precision_ns == {"fp32": 90_000}  # matmul kernels only
    # coverage: 64/132 for 10 µs, 1 for 80 µs, 0.5 for 10 µs
    assert s.est_sm_efficiency == pytest.approx((10 * 64 / 132 + 80 * 1.0 + 10 * 0.5) / 100)
    # occupancy: the 255-register launch is 12.5 % (2 blocks of 4 warps) for 10 µs, the rest 100 %
    assert s.mean_occupancy == pytest.approx((10 * 0.125 + 90 * 1.0) / 100)
    w = kernel_summary(rank_graph(run, None), window=(300_000, 500_000))
    assert (w.total_ns, w.by_category_ns, w.by_precision_ns) == (10_000, {"elementwise": 10_000}, {})


def test_dominant_configuration_is_by_time_not_by_count(builder: Any, tmp_path: Path) -> None:
    for i in range(3):
        builder.kernel(SGEMM, i * 10, 1, grid=(64, 1, 1))
    builder.kernel(SGEMM, 50, 10, grid=(2048, 1, 1))
    (s,) = kernel_table(rank_graph(builder.build(tmp_path / "run"), None))
    assert (s.grid, s.blocks, s.calls, s.waves) == ((2048, 1, 1), 2048, 4, 2048 / (8 * 132))


def test_tensor_cores_and_precision(builder: Any, tmp_path: Path) -> None:
    # nvjet: 12 warps of 168 registers -> 3 warps per sub-partition, 12 per SM: 1 block = 12/64;
    # shared memory (221420 + 1 KB) also fits once: ties go to registers
    builder.kernel(NVJET, 0, 30, grid=(2, 66, 1), block=(384, 1, 1), regs=168, smem=221420)
    builder.kernel("flash_fwd_kernel", 40, 10, grid=(132, 1, 1), block=(128, 1, 1), regs=255, smem=49152)
    builder.kernel(SGEMM, 60, 60)
    run = builder.build(tmp_path / "run")
    s = kernel_summary(rank_graph(run, None))
    assert (s.total_ns, s.tensor_core_ns, s.tensor_core_share) == (100_000, 40_000, 0.4)
    assert s.by_precision_ns == {"fp32": 60_000, "unknown": 30_000, "fp16/bf16": 10_000}
    assert s.by_category_ns == {"gemm": 90_000, "attention": 10_000}
    nvjet = next(k for k in kernel_table(rank_graph(run, None)) if k.name == NVJET)
    assert (nvjet.tensor_cores, nvjet.precision, nvjet.active_blocks_per_sm, nvjet.occupancy_limiter) == (
        True, None, 1, "registers")
    assert (nvjet.occupancy, nvjet.blocks, nvjet.waves, nvjet.sm_coverage) == (12 / 64, 132, 1.0, 1.0)


def test_missing_device_row_or_registers(builder: Any, tmp_path: Path) -> None:
    builder.kernel(SGEMM, 0, 10, device=1)  # the run has a devices row for device 0 only
    builder.kernel(ADD, 20, 30, regs=None)
    run = builder.build(tmp_path / "run")
    rows = {k.name: k for k in kernel_table(rank_graph(run, None))}
    g = rows[SGEMM]
    assert (g.occupancy, g.active_blocks_per_sm, g.sm_coverage, g.waves, g.devices) == (None, None, None, None, (1,))
    assert (g.category, g.blocks, g.threads_per_block) == ("gemm", 1024, 256)
    a = rows[ADD]
    assert (a.occupancy, a.occupancy_limiter, a.registers, a.sm_coverage, a.waves) == (None, None, None, 1.0, None)
    s = kernel_summary(rank_graph(run, None))
    assert (s.mean_occupancy, s.est_sm_efficiency) == (None, 1.0)


def test_amd_device_has_coverage_but_no_occupancy(tmp_path: Path) -> None:
    from builder import TraceBuilder

    b = TraceBuilder(device={"name": "AMD Instinct MI250X / MI250", "vendor": "amd", "sm_count": 110, "warp_size": 64,
                                 "max_threads_per_block": 1024})
    b.kernel(SGEMM, 0, 10, grid=(55, 1, 1))
    (k,) = kernel_table(rank_graph(b.build(tmp_path / "run"), None))
    assert (k.occupancy, k.occupancy_limiter, k.waves, k.sm_coverage) == (None, None, None, 0.5)


def test_ranks(builder: Any, tmp_path: Path) -> None:
    builder.kernel(SGEMM, 0, 10, rank=0)
    builder.kernel(SGEMM, 0, 30, rank=1)
    run = builder.build(tmp_path / "run")
    (both,) = kernel_table(rank_graph(run, None))
    assert (both.calls, both.total_ns, both.median_ns) == (2, 40_000, 20_000.0)
    (one,) = kernel_table(rank_graph(run, 1))
    assert (one.calls, one.total_ns, one.occupancy) == (1, 30_000, 1.0)


def test_kernel_frame(builder: Any, tmp_path: Path) -> None:
    builder.kernel(SGEMM, 0, 10, grid=(64, 2, 1), block=(128, 1, 1), regs=255, smem=33280)
    builder.kernel(ADD, 20, 5, grid=(66, 1, 1), block=(32, 4, 1), regs=None)
    f = kernel_frame(rank_graph(builder.build(tmp_path / "run"), None)).sort_by("ts_ns")
    assert f.num_rows == 2
    got = {c: f.column(c).to_pylist() for c in ("category", "tensor_cores", "precision", "blocks", "threads",
                                                 "occupancy", "active_blocks_per_sm", "occupancy_limiter",
                                                 "sm_coverage", "waves")}
    assert got == {
        "category": ["gemm", "elementwise"], "tensor_cores": [False, False], "precision": ["fp32", "fp32"],
        "blocks": [128, 66], "threads": [128, 128], "occupancy": [0.125, None], "active_blocks_per_sm": [2, None],
        "occupancy_limiter": ["registers", None], "sm_coverage": [128 / 132, 0.5], "waves": [128 / 264, None],
    }


def test_no_kernels(builder: Any, tmp_path: Path) -> None:
    builder.step(0, 100)
    run = builder.build(tmp_path / "run")
    assert kernel_table(rank_graph(run, None)) == ()
    assert kernel_frame(rank_graph(run, None)).num_rows == 0
    s = kernel_summary(rank_graph(run, None))
    assert (s.total_ns, s.tensor_core_share, s.by_category_ns, s.by_precision_ns) == (0, 0.0, {}, {})
    assert (s.est_sm_efficiency, s.mean_occupancy) == (None, None)


# -- the real GPT trace (H100), through the Kineto importer --------------------------------
def _imported(tmp_path: Path, rel: str) -> Run:
    # skip while the importer does not exist; a broken one fails the test
    importers = pytest.importorskip("stepscope.importers", exc_type=ModuleNotFoundError)
    if not hasattr(importers, "import_traces"):
        pytest.skip("stepscope.importers.import_traces not available")
    path = FIXTURE_DATA / Path(rel).name
    if not path.exists():
        pytest.skip(f"fixture {rel} not present")
    return Run(importers.import_traces([path], tmp_path / "run"))


def _json_kernels(rel: str) -> dict[str, list[float]]:
    with gzip.open(FIXTURE_DATA / Path(rel).name, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    durs: dict[str, list[float]] = defaultdict(list)
    for e in events:
        if e.get("cat") == "kernel":
            durs[e["name"]].append(e["dur"])
    return durs


def test_gpt_fixture(tmp_path: Path) -> None:
    rel = "h100/gpt_bf16_adamw.pt.trace.json.gz"
    run = _imported(tmp_path, rel)
    table = kernel_table(rank_graph(run, None))
    # per-name calls and time agree with a plain pass over the JSON (µs -> ns, ±1 ns a launch)
    durs = _json_kernels(rel)
    assert len(table) == len(durs) == 52
    assert sum(k.calls for k in table) == 1311
    for k in table:
        assert k.calls == len(durs[k.name])
        assert abs(k.total_ns - 1000 * sum(durs[k.name])) <= k.calls
    top = table[0]
    assert (top.name, top.calls, top.category, top.tensor_cores, top.precision) == (NVJET, 57, "gemm", True, None)
    # 384 threads x 168 regs with 221420 B of shared memory: 1 block, 12/64 warps, one full
    # persistent wave over 132 SMs. Kineto wrote 0 (its default 48 KB limit refuses the block)
    assert (top.occupancy, top.active_blocks_per_sm, top.waves, top.source_occupancy_pct) == (0.1875, 1, 1.0, 0.0)

    s = kernel_summary(rank_graph(run, None))
    assert s.total_ns == pytest.approx(35_979_320, abs=1311)
    # tensor-core time = nvjet GEMMs + cuDNN SDPA (fprop, bprop): 36 % of kernel time
    assert s.tensor_core_share == pytest.approx(0.3614, abs=1e-4)
    assert set(s.by_precision_ns) == {"unknown", "fp16/bf16"}
    assert list(s.by_category_ns)[:3] == ["gemm", "memory", "elementwise"]

    # Kineto's estimate equals our occupancy where Kineto is right: <= 48 KB of shared
    # memory, a grid of at least one full wave, whole warps (see test_occupancy.py)
    f = kernel_frame(rank_graph(run, None))
    occ = np.array(f.column("occupancy").to_pylist(), dtype=float)
    act = np.array(f.column("active_blocks_per_sm").to_pylist(), dtype=float)
    src = np.array(f.column("source_occupancy_pct").to_pylist(), dtype=float)
    blocks = np.array(f.column("blocks").to_pylist(), dtype=float)
    threads = np.array(f.column("threads").to_pylist(), dtype=float)
    smem = np.array(f.column("shared_memory").to_pylist(), dtype=float)
    right = (smem <= 48 * 1024) & (blocks / 132 >= act) & (threads % 32 == 0)
    assert right.sum() > 500
    np.testing.assert_array_equal(np.trunc(0.5 + 100 * occ[right]), src[right])
