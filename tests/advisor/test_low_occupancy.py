"""low_occupancy: kernels whose registers / shared memory / block size cap resident warps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stepscope.advisor.base import Finding, Severity
from stepscope.advisor.engine import advise
from stepscope.advisor.rules.low_occupancy import RULE
from stepscope.analysis import analyze
from stepscope.model.confidence import Confidence
from stepscope.store.run import Run

STREAM = "stream_affine_smem"  # a user kernel
NVJET = "nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_NNT"
ATEN = "void at::native::(anonymous namespace)::row_kernel<float>(float*, float const*, long)"
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
       "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)")


def _findings(run: Run) -> tuple[Finding, ...]:
    return advise(analyze(run), [RULE]).findings


def _steps(b: Any, name: str = STREAM, dur: float = 600, other: float = 200, *,
           grid: int = 132 * 8, threads: int = 256, regs: int = 32, smem: int = 200 * 1024) -> None:
    for i in range(3):
        t0 = i * 1000
        b.step(t0, 1000)
        b.kernel(name, t0 + 10, dur, grid=(grid, 1, 1), block=(threads, 1, 1), regs=regs,
                 smem=smem, launch=(t0 + 1, 5))
        if other:
            b.kernel(ADD, t0 + 20 + dur, other, launch=(t0 + 7, 2))


def test_fires_on_shared_memory_limited_kernel(builder: Any, tmp_path: Path) -> None:
    # 200 KB + 1 KB reserved per block: 1 block of 8 warps per SM = 12.5 %; the grid (1056
    # blocks) could fill every warp slot: w0 = 0.125, w1 = 0.5 -> time x 0.25 if fully
    # latency-bound: (600 - 150) = 450 us per step (45 %, capped at warning)
    _steps(builder)
    (f,) = _findings(builder.build(tmp_path / "run"))
    assert f.id == "low_occupancy" and f.category == "occupancy"
    assert f.est_saving_ms == pytest.approx(0.45, abs=1e-4)
    assert f.severity is Severity.WARNING and f.confidence is Confidence.LOW
    assert "12.5%" in f.title and "shared memory" in f.title
    assert any(e.startswith("stream_affine_smem: 12.5% theoretical occupancy (8 of 64 warps per "
                            "SM), limited by shared memory (200.0 KB shared memory per block); "
                            "1 launch(es) and 0.600 ms per step")
               for e in f.evidence)
    assert "shared memory" in f.fix.cuda and f.where.kernels == (STREAM,)
    assert "Nsight Compute" in f.note


def test_severity_is_capped_at_warning(builder: Any, tmp_path: Path) -> None:
    _steps(builder, dur=900, other=0)
    (f,) = _findings(builder.build(tmp_path / "run"))
    # 900 - 225 = 675 us: 68 % of the step, still a warning
    assert f.est_saving_ms == pytest.approx(0.675, abs=1e-4)
    assert f.severity is Severity.WARNING


def test_register_limited_kernel_gets_register_fixes(builder: Any, tmp_path: Path) -> None:
    # 255 registers x 256 threads: 8 warps per SM (2 per sub-partition) = 12.5 %
    _steps(builder, regs=255, smem=0)
    (f,) = _findings(builder.build(tmp_path / "run"))
    assert "registers" in f.title and "__launch_bounds__" in f.fix.cuda
    assert f.est_saving_ms == pytest.approx(0.45, abs=1e-4)


def test_tensor_core_gemms_are_never_flagged(builder: Any, tmp_path: Path) -> None:
    # cuBLAS's nvjet: 168 registers x 384 threads, 216 KB shared memory -> 18.75 % by design
    _steps(builder, name=NVJET, dur=900, other=0, grid=132, threads=384, regs=168, smem=221420)
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_silent_when_the_grid_cannot_fill_more_warps(builder: Any, tmp_path: Path) -> None:
    # 16 blocks: the grid itself, not occupancy, limits resident warps (small_grid's case)
    _steps(builder, grid=16)
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_silent_at_high_occupancy(builder: Any, tmp_path: Path) -> None:
    _steps(builder, smem=0)
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_milder_occupancy_is_info(builder: Any, tmp_path: Path) -> None:
    # 64 KB + 1 KB per block: 3 blocks of 4 warps = 12 warps per SM (18.75 %): more than 8
    # resident warps, so at most info
    _steps(builder, threads=128, smem=64 * 1024, grid=132 * 16)
    (f,) = _findings(builder.build(tmp_path / "run"))
    assert "18.8%" in f.title and f.severity is Severity.INFO
    # w_grid = 2112 * 4 / (132 * 64) = 1; w0 = 0.1875, w1 = 0.5: 600 - 225 = 375 us
    assert f.est_saving_ms == pytest.approx(0.375, abs=1e-4)


def test_framework_kernel_is_info(builder: Any, tmp_path: Path) -> None:
    _steps(builder, name=ATEN)
    (f,) = _findings(builder.build(tmp_path / "run"))
    assert f.severity is Severity.INFO and "framework" in f.title
    assert "torch.compile" in f.fix.pytorch
