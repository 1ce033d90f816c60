"""small_grid: kernels with fewer blocks than SMs (builder's H100: 132 SMs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stepscope.advisor.base import Finding, Severity
from stepscope.advisor.engine import advise
from stepscope.advisor.rules.small_grid import RULE
from stepscope.analysis import analyze
from stepscope.model.confidence import Confidence
from stepscope.store.run import Run

SCALE = "scale_kernel"  # a user kernel (CuPy / CUDA / Triton)
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
       "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)")
REDUCE = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
          "at::native::MeanOps<float, float, float, float>, unsigned int, float, 4> >"
          "(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, "
          "unsigned int, float, 4>)")


def _findings(run: Run) -> tuple[Finding, ...]:
    return advise(analyze(run), [RULE]).findings


def _steps(b: Any, small: str = SCALE, blocks: int = 16, dur: float = 500,
           overlap: bool = False, host_bound: bool = False, launches: bool = True) -> None:
    # three 1000 us steps: the small-grid kernel, then a full-grid kernel (1024 blocks); the
    # host launches both at the start of the step (GPU-bound: the GPU still has ~900 us of
    # queued work when the host is done), or, host_bound, the second one at the step's end
    for i in range(3):
        t0 = i * 1000
        b.step(t0, 1000)
        b.kernel(small, t0 + 10, dur, grid=(blocks, 1, 1), block=(128, 1, 1),
                 launch=(t0 + 1, 5) if launches else None)
        if overlap:  # half of the small kernel shares the GPU with a full-grid kernel
            b.kernel(ADD, t0 + 260, 250, stream=8, launch=(t0 + 7, 2))
        if host_bound:
            b.kernel(ADD, t0 + 960, 30, launch=(t0 + 950, 5))
        else:
            b.kernel(ADD, t0 + 520, 400, launch=(t0 + 7, 2) if launches else None)
        if not launches:  # a launch record that pairs with no kernel
            b.api("cudaLaunchKernel", t0 + 1, 5, correlation=i + 1)  # pairs with nothing


def test_fires_on_the_seeds_16_block_kernel(builder: Any, tmp_path: Path) -> None:
    _steps(builder)
    (f,) = _findings(builder.build(tmp_path / "run"))
    # saving = 500 - 500 * 16/132 = 439.39 us per step; the GPU had 911 us of queued work
    # after the last launch (ends at 9 us, the GPU at 920 us): all of it counts
    assert f.id == "small_grid" and f.category == "occupancy"
    assert f.est_saving_ms == pytest.approx((500 - 500 * 16 / 132) / 1000, abs=1e-4)
    assert f.est_saving_pct == pytest.approx(43.94, abs=0.01)
    assert f.severity is Severity.CRITICAL and f.confidence is Confidence.MEDIUM
    assert "fewer blocks than the 132 SMs" in f.title and "16 blocks" in f.title
    assert any(e.startswith("scale_kernel: 16 blocks x 128 threads on 132 SMs (12% of the SMs)")
               for e in f.evidence)
    assert any(e.startswith("GPU-bound check: when the host had issued a step's last launch, "
                            "the GPU still had 0.91 ms of its work queued") for e in f.evidence)
    assert "upper bound" in f.method and "still queued" in f.method
    assert f.where.kernels == (SCALE,) and f.where.steps == (0, 1, 2) and f.where.rank == 0
    assert f.where.start_ns is not None and f.where.end_ns is not None
    assert "cudaDevAttrMultiProcessorCount" in f.fix.cuda and f.fix.pytorch and f.fix.jax


def test_overlapped_part_does_not_count(builder: Any, tmp_path: Path) -> None:
    _steps(builder, overlap=True)
    (f,) = _findings(builder.build(tmp_path / "run"))
    # 250 of the 500 us run beside a full-grid kernel: exposed 250 us
    assert f.est_saving_ms == pytest.approx((250 - 250 * 16 / 132) / 1000, abs=1e-4)


def test_host_bound_steps_keep_only_the_queued_work(builder: Any, tmp_path: Path) -> None:
    # the host issues the step's last launch at 950-955 us; the GPU is done at 990 us: only
    # 35 us of GPU work were still queued, so at most 35 us of the saving shortens the step
    _steps(builder, host_bound=True)
    assert _findings(builder.build(tmp_path / "run")) == ()  # 35 us < the 50 us threshold


def test_without_launch_records_the_busy_share_scales(builder: Any, tmp_path: Path) -> None:
    _steps(builder, launches=False)
    (f,) = _findings(builder.build(tmp_path / "run"))
    # GPU busy 900 of 1000 us: (500 - 500 * 16/132) * 0.9 = 395.45 us
    assert f.est_saving_ms == pytest.approx((500 - 500 * 16 / 132) * 0.9 / 1000, abs=1e-4)
    assert any(e.startswith("GPU busy 90% of the steady steps (no launch records")
               for e in f.evidence)
    assert "x GPU-busy share 0.90" in f.method


def test_silent_with_a_full_grid(builder: Any, tmp_path: Path) -> None:
    _steps(builder, blocks=1024)
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_silent_when_the_time_is_small(builder: Any, tmp_path: Path) -> None:
    # 5 us kernels: at most 5 - 2 = 3 us per step, below the reporting threshold
    _steps(builder, dur=5)
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_communication_kernels_are_not_flagged(builder: Any, tmp_path: Path) -> None:
    for i in range(3):
        builder.step(i * 1000, 1000)
        builder.collective("AllReduce", i * 1000 + 10, 500, grid=(16, 1, 1), block=(128, 1, 1),
                           launch=(i * 1000 + 1, 5))
        builder.kernel(ADD, i * 1000 + 520, 400)
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_framework_kernels_are_info_with_low_confidence(builder: Any, tmp_path: Path) -> None:
    _steps(builder, small=REDUCE)
    (f,) = _findings(builder.build(tmp_path / "run"))
    assert f.severity is Severity.INFO and f.confidence is Confidence.LOW
    assert "library/framework" in f.title and f.note
    assert f.est_saving_ms == pytest.approx((500 - 500 * 16 / 132) / 1000, abs=1e-4)


def test_a_graph_launched_before_the_steps(builder: Any, tmp_path: Path) -> None:
    # a decode loop replayed as one graph: its only launch call is before the first step, so
    # no launch falls in a steady step; the busy share stands in for the backlog (this raised
    # IndexError in speedups.scaling_for on TraceLens's vLLM full-graph trace)
    corr = builder.next_correlation()
    builder.api("cudaGraphLaunch", 0, 5, correlation=corr)
    for i in range(3):
        t0 = 100 + i * 1000
        builder.step(t0, 1000)
        builder.kernel(SCALE, t0 + 10, 500, grid=(16, 1, 1), block=(128, 1, 1), correlation=corr)
        builder.kernel(ADD, t0 + 510, 480, correlation=corr)
    (f,) = _findings(builder.build(tmp_path / "run"))
    assert "x GPU-busy share" in f.method
