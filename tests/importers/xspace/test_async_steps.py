"""An async JAX loop through the XSpace import: each ``StepTraceAnnotation`` covers only the
dispatch of the jitted step, its GPU work runs long after (a GPU-bound ``jax.jit`` loop with no
wait per step, as ``jax.profiler`` traces it). The steps are anchored to the GPU work they
issued and the kernel rules count the kernels of those windows (the jax_jit scenario through
XSpace counted 2.5% of its fp32 GEMMs where 81% was measured)."""

from __future__ import annotations

from pathlib import Path

import pytest

from importers.xspace.make import Plane, write
from stepscope.advisor.engine import advise
from stepscope.advisor.rules.no_tensor_cores import RULE
from stepscope.analysis import analyze
from stepscope.importers import import_traces
from stepscope.store.run import Run

SGEMM = ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_"
         "aligna4_alignc4_execute_kernel__5x_cublas")
US = 1_000_000  # ps


def async_jit_planes(steps: int = 5) -> list[Plane]:
    """Host: step i's marker [i*100, i*100+50) us holds its graph launch; GPU: step i's SGEMM
    (600 us) and a 50 us fusion run from 1000 + i*1000 us. An A100 (no measured speed-ups:
    the datasheet's TF32 3x, hand-computable)."""
    meta = Plane("/host:metadata", {"jax_version": "0.11.2", "process_id": 42})
    host = Plane("/host:CPU")
    t = host.line(42, "python3")
    gpu = Plane("/device:GPU:0", {"gpu_device_name": "NVIDIA A100-SXM4-80GB", "core_count": 108,
                                  "clock_rate": 1_410_000, "memory_size": 80_000_000_000,
                                  "memory_bandwidth": 2_039_000_000_000,
                                  "compute_cap_major": 8, "compute_cap_minor": 0,
                                  "device_vendor": "Nvidia"})
    s = gpu.line(14, "Stream #14(Compute)")
    for i in range(steps):
        t.event("train", i * 100 * US, 50 * US, step_num=i, _r=1)
        t.event("PjitFunction(step)", (i * 100 + 5) * US, 40 * US)
        t.event("cuGraphLaunch (CudaGraph:3)", (i * 100 + 10) * US, 5 * US,
                correlation_id=100 + i)
        s.event(SGEMM, (1000 + i * 1000) * US, 600 * US, correlation_id=100 + i,
                hlo_op="dot.1", hlo_module="jit_step", cuda_graph_id=3)
        s.event("loop_tanh_fusion", (1600 + i * 1000) * US, 50 * US, correlation_id=100 + i,
                hlo_op="fusion", hlo_module="jit_step", cuda_graph_id=3)
    t.event("$api.py:3154 block_until_ready", (steps * 100) * US,
            (1000 + steps * 1000 - steps * 100) * US)
    return [meta, host, gpu, Plane("Task Environment", {"profile_start_time": 10**18})]


def test_kernels_of_an_async_jit_loop_count_in_their_gpu_windows(tmp_path: Path) -> None:
    path = write(tmp_path / "h.xplane.pb", async_jit_planes())
    run = Run(import_traces([path], tmp_path / "run"))
    analysis = analyze(run)
    ra = analysis.ranks[0]
    assert ra.steps.anchored
    steady = ra.steps.steady
    assert len(steady) >= 3
    assert all(s.span_ns == 1_000_000 for s in steady)  # GPU windows: 1 ms apart
    (f,) = advise(analysis, [RULE]).findings
    # per step: 600 - 600 / 3 = 400 us (A100 datasheet TF32 3x); all of it still queued when
    # the host issued the step (the backlog is ~1 ms and more)
    assert f.est_saving_ms == pytest.approx(0.4, abs=1e-6)
    assert f.est_saving_pct == pytest.approx(40.0, abs=0.01)
