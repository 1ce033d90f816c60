"""no_tensor_cores: fp32 GEMM / conv time on a GPU with tensor cores."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from builder import H100, TraceBuilder
from stepscope.advisor.base import Finding, Severity
from stepscope.advisor.engine import advise
from stepscope.advisor.rules.no_tensor_cores import RULE
from stepscope.analysis import analyze
from stepscope.analysis.graph import rank_graph
from stepscope.importers import import_traces
from stepscope.model.confidence import Confidence
from stepscope.model.kernels import steady_kernels
from stepscope.model.overhead import host_trust
from stepscope.model.scaling import gpu_bound_share, scaling_for
from stepscope.model.speedups import speedups_for
from stepscope.store.run import Run

DATA = Path(__file__).resolve().parents[1] / "data"
# A100: not in the measured table -> the datasheet defaults of CC 8.0 (TF32 3x, bf16 6x,
# conv TF32 1.5x, conv bf16 2.5x): hand-computable and independent of measurements
A100 = dict(H100, name="NVIDIA A100-SXM4-80GB", compute_major=8, compute_minor=0, sm_count=108,
            smem_per_block_optin=166912, smem_per_sm=167936)
V100 = dict(H100, name="Tesla V100-SXM2-16GB", compute_major=7, compute_minor=0, sm_count=80,
            smem_per_block_optin=98304, smem_per_sm=98304)
P100 = dict(H100, name="Tesla P100-PCIE-16GB", compute_major=6, compute_minor=0, sm_count=56)

SGEMM = "ampere_sgemm_128x64_nn"
TF32 = ("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x256x32_warpgroupsize2x1x1_execute_"
        "segment_k_off_kernel__5x_cublas")
NVJET = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
WINOGRAD = ("void cudnn::winograd_nonfused::winogradWgradData4x4<float, float>"
            "(cudnn::winograd_nonfused::WinogradDataParams<float, float>)")
CF32 = ("sm80_xmma_gemm_cf32cf32_f32f32_cf32_nt_n_tilesize64x64x8_stage3_warpsize2x2x1_ffma_"
        "aligna8_alignc8_execute_kernel__5x_cublas")


def _findings(run: Run) -> tuple[Finding, ...]:
    return advise(analyze(run), [RULE]).findings


def _run(tmp_path: Path, device: dict[str, Any], name: str = SGEMM, *, op: str = "aten::mm",
         dur: float = 600) -> Run:
    b = TraceBuilder(device=device)
    for i in range(3):
        t0 = i * 1000
        b.step(t0, 1000)
        b.cpu_op(op, t0 + 1, 8, external_id=100 + i)
        b.kernel(name, t0 + 10, dur, launch=(t0 + 2, 5), external_id=100 + i)
    run: Run = b.build(tmp_path / "run")
    return run


def test_fires_on_fp32_sgemm_with_both_estimates(tmp_path: Path) -> None:
    (f,) = _findings(_run(tmp_path, A100))
    # GPU-bound (all 600 us queued after the launch): TF32 600 - 600/3 = 400 us;
    # bf16 600 - 600/6 = 500 us
    assert f.id == "no_tensor_cores" and f.category == "precision"
    assert f.est_saving_ms == pytest.approx(0.4, abs=1e-4)
    assert f.severity is Severity.CRITICAL and f.confidence is Confidence.MEDIUM
    assert f.title == ("fp32 matrix math without tensor cores: 0.60 ms per step (60% of the "
                       "step); TF32: -0.40 ms, bf16 AMP: -0.50 ms per step")
    assert "TF32" in f.method and "ranked by it" in f.method
    assert any("gemm_tf32 3.0x (estimated from datasheet peaks, not measured)" in e
               for e in f.evidence)
    assert any(e == "launched by aten::mm (3)" for e in f.evidence)
    assert "fp32_precision" in f.fix.pytorch and "autocast" in f.fix.pytorch
    assert "mixed_bfloat16" in f.fix.tensorflow and "tensorfloat32" in f.fix.jax
    assert f.where.kernels == (SGEMM,)


def test_conv_kernels_use_the_conv_speedups(tmp_path: Path) -> None:
    (f,) = _findings(_run(tmp_path, A100, WINOGRAD, op="aten::cudnn_convolution"))
    # conv TF32 1.5x: 600 - 400 = 200 us; conv bf16 2.5x: 600 - 240 = 360 us
    assert f.est_saving_ms == pytest.approx(0.2, abs=1e-4)
    assert "bf16 AMP: -0.36 ms" in f.title and f.confidence is Confidence.MEDIUM


def test_gemm_launched_by_a_convolution_counts_as_conv(tmp_path: Path) -> None:
    (f,) = _findings(_run(tmp_path, A100, CF32, op="aten::convolution_backward"))
    assert f.est_saving_ms == pytest.approx(0.2, abs=1e-4)
    assert any("conv 0.60 ms" in e for e in f.evidence)


def test_without_framework_ops_a_gemm_in_a_conv_run_counts_as_conv(tmp_path: Path) -> None:
    """A recorded run has no framework ops: the complex GEMM that an FFT convolution launches
    between its conv kernels is conv by its run of launches (conv TF32 1.5x on the A100's
    defaults); a GEMM after another kernel (a linear layer after the activation) stays GEMM
    (3x). Per step: FFT kernel 200 us, complex GEMM 400 us, FFT kernel 200 us, an activation,
    an SGEMM of 300 us, the loss."""
    b = TraceBuilder(device=A100)
    for i in range(3):
        t0 = i * 2000
        b.step(t0, 2000)
        b.kernel(WINOGRAD, t0 + 10, 200, launch=(t0 + 1, 2))
        b.kernel(CF32, t0 + 210, 400, launch=(t0 + 3, 2))
        b.kernel(WINOGRAD, t0 + 610, 200, launch=(t0 + 5, 2))
        b.kernel("void at::native::vectorized_elementwise_kernel<4, relu>()", t0 + 810, 20,
                 launch=(t0 + 7, 2))
        b.kernel(SGEMM, t0 + 830, 300, launch=(t0 + 9, 2))
        b.kernel("void at::native::softmax_warp_forward<float>()", t0 + 1130, 20,
                 launch=(t0 + 11, 2))
    (f,) = _findings(b.build(tmp_path / "run"))
    # conv: 800 us x (1 - 1/1.5) = 266.7 us; GEMM: 300 us x (1 - 1/3) = 200 us
    assert f.est_saving_ms == pytest.approx(0.4667, abs=1e-3)
    assert any("conv 0.80 ms" in e for e in f.evidence)
    assert any("gemm 0.30 ms" in e for e in f.evidence)


def test_volta_has_no_tf32_the_saving_is_fp16_amp(tmp_path: Path) -> None:
    (f,) = _findings(_run(tmp_path, V100))
    # fp16 3x: 600 - 200 = 400 us
    assert f.est_saving_ms == pytest.approx(0.4, abs=1e-4)
    assert "TF32" not in f.title and "fp16 AMP: -0.40 ms" in f.title


def test_fp32_attention_counts_for_amp_only(tmp_path: Path) -> None:
    (f,) = _findings(_run(tmp_path, A100, "void attention_fp32_simt_kernel<float>(float*)",
                          op="aten::_scaled_dot_product_efficient_attention"))
    # TF32 does not apply: the saving is bf16 AMP's, 600 - 100 = 500 us
    assert f.est_saving_ms == pytest.approx(0.5, abs=1e-4)
    assert "TF32" not in f.title and "bf16 AMP: -0.50 ms" in f.title


@pytest.mark.parametrize("device,name", [
    (H100, TF32),  # TF32 tensor-core kernel (the name classifier says fp32: guarded here)
    (H100, NVJET),  # bf16 tensor cores
    (P100, SGEMM),  # no tensor cores on the GPU
])
def test_silent(tmp_path: Path, device: dict[str, Any], name: str) -> None:
    assert _findings(_run(tmp_path, device, name)) == ()


@pytest.fixture(scope="module")
def cnn(tmp_path_factory: pytest.TempPathFactory) -> Run:
    src = tmp_path_factory.mktemp("cnn")
    shutil.copy(DATA / "cnn_fp32_sync.pt.trace.json.gz", src)
    return Run(import_traces([src / "cnn_fp32_sync.pt.trace.json.gz"], src / "run"))


def test_cnn_fp32_fixture(cnn: Run) -> None:
    """Real H100 trace, small conv net in fp32 with TF32 off: cuDNN FFT / Winograd and fp32
    xmma/cutlass GEMMs, 10.78 ms of the 12.66 ms step."""
    analysis = analyze(cnn)
    (f,) = advise(analysis, [RULE]).findings
    assert f.severity is Severity.CRITICAL
    assert f.title.startswith("fp32 matrix math without tensor cores: 10.78 ms per step (85% of "
                              "the step); TF32: -")
    assert any(e.startswith("10.779 ms per step of fp32 GEMM/conv/attention kernels on CUDA "
                            "cores (gemm 0.02 ms, conv 10.76 ms); 3 steady steps")
               for e in f.evidence)
    assert any(e.startswith("void pointwise_mult_and_sum_complex<float2, 8, 4>") for e in f.evidence)
    assert any("launched by aten::convolution_backward (150), aten::cudnn_convolution (39)" in e
               for e in f.evidence)
    # the saving follows the formula with the table's ratios for this GPU
    ra = analysis.ranks[0]
    sp = speedups_for(ra.devices[0])
    assert sp is not None
    conv, gemm = sp.get("conv_tf32"), sp.get("gemm_tf32")
    assert conv is not None and gemm is not None
    assert gpu_bound_share(ra) == pytest.approx(0.9323, abs=1e-4)
    # loss.item() every step: the host waits for the GPU, whose work is all still queued
    sk = steady_kernels(rank_graph(cnn, ra.rank), ra)
    assert sk is not None and sk.n_steps == 3
    backlog = scaling_for(rank_graph(cnn, ra.rank), ra, sk,
                          host_trust(analysis).est_inflation_ms).backlog_ns
    assert backlog is not None and (backlog > 7e6).all()  # 7.2-7.6 ms: more than the saving
    approx = 10.757 * (1 - 1 / conv.value) + 0.022 * (1 - 1 / gemm.value)
    assert f.est_saving_ms == pytest.approx(approx, rel=0.01)
    assert 4.0 < f.est_saving_ms < 7.5  # about half of the step, whatever the exact table
    bf16 = float(f.title.split("bf16 AMP: -")[1].split(" ms")[0])
    assert bf16 > f.est_saving_ms
    assert np.isclose(sk.col("dur_ns").sum() / 3 / 1e6, 12.198, atol=0.001)  # all kernels


def test_gpt_bf16_fixture_is_silent(tmp_path: Path) -> None:
    shutil.copy(DATA / "gpt_bf16_adamw.pt.trace.json.gz", tmp_path)
    run = Run(import_traces([tmp_path / "gpt_bf16_adamw.pt.trace.json.gz"], tmp_path / "run"))
    found = advise(analyze(run), [RULE]).findings
    assert not [f for f in found if f.severity in (Severity.WARNING, Severity.CRITICAL)]
    assert found == ()


def test_host_running_ahead_counts_the_kernels_of_the_gpu_windows(tmp_path: Path) -> None:
    # an async loop (a jitted JAX step under StepTraceAnnotation): each step's marker covers
    # only the dispatch (50 us), the GPU runs the step's 600 us SGEMM long after it. The steps
    # are anchored to the GPU work they issued; the kernels belong to those windows, not to
    # the markers (which hold none of them).
    b = TraceBuilder(device=A100)
    for i in range(4):
        t0 = i * 100
        b.step(t0, 50)
        b.kernel(SGEMM, 1000 + i * 1000, 600, launch=(t0 + 10, 5))
    run = b.build(tmp_path / "run")
    analysis = analyze(run)
    ra = analysis.ranks[0]
    assert ra.steps.anchored and len(ra.steps.steady) == 3
    sk = steady_kernels(analysis.graph.rank(0), ra)
    assert sk is not None and sk.n_steps == 3 and list(sk.slot) == [0, 1, 2]
    (f,) = advise(analysis, [RULE]).findings
    # per steady step 600 - 600/3 = 400 us (datasheet TF32 3x); queued: all of it
    assert f.est_saving_ms == pytest.approx(0.4, abs=1e-4)
