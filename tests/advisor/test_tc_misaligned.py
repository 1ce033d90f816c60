"""tc_misaligned: 16-bit GEMMs off the fast tensor-core path (dimensions not multiples of 8)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from builder import H100, TraceBuilder
from stepscope.advisor.base import Finding, Severity
from stepscope.advisor.engine import advise
from stepscope.advisor.rules.tc_misaligned import RULE
from stepscope.analysis import analyze
from stepscope.model.alignment import min_alignment, why
from stepscope.model.confidence import Confidence
from stepscope.store.run import Run

A100 = dict(H100, name="NVIDIA A100-SXM4-80GB", compute_major=8, compute_minor=0, sm_count=108,
            smem_per_block_optin=166912, smem_per_sm=167936)
# what cuBLAS ran for bf16 K=4095 / vocab 50257 on an H200 (benchmarks/gemm_speedups.py)
ALIGN1 = ("void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_256x128_nn_align1>"
          "(cutlass_75_tensorop_bf16_s1688gemm_bf16_256x128_nn_align1::Params)")
ALIGN8 = ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x128_32x3_tn_"
          "align8>(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x128_32x3_tn_align8::Params)")
NVJET = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
GEMV = ("void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, float, 128, 16, 4, 4, "
        "false, false, cublasGemvParamsEx<int, __nv_bfloat16 const*, __nv_bfloat16 const*, "
        "__nv_bfloat16, float> >(cublasGemvParamsEx<int, __nv_bfloat16 const*, __nv_bfloat16 "
        "const*, __nv_bfloat16, float>, float, float)")
SPLITK = ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, "
          "__nv_bfloat16, false, false>(cublasLt::cublasSplitKParams<float>, float const*, "
          "__nv_bfloat16 const*, __nv_bfloat16*)")
SGEMM_ALIGN1 = ("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>"
                "(cutlass_80_simt_sgemm_256x128_8x4_nn_align1::Params)")


def _findings(run: Run) -> tuple[Finding, ...]:
    return advise(analyze(run), [RULE]).findings


def _run(tmp_path: Path, device: dict[str, Any], name: str = ALIGN1, dur: float = 500) -> Run:
    b = TraceBuilder(device=device)
    for i in range(3):
        t0 = i * 1000
        b.step(t0, 1000)
        b.cpu_op("aten::addmm", t0 + 1, 8, external_id=100 + i)
        b.kernel(name, t0 + 10, dur, launch=(t0 + 2, 5), external_id=100 + i)
    run: Run = b.build(tmp_path / "run")
    return run


def test_fires_on_align1_bf16_gemm(tmp_path: Path) -> None:
    (f,) = _findings(_run(tmp_path, A100))
    # A100: datasheet default 2x per FLOP; GPU-bound: 500 - 250 = 250 us per step
    assert f.id == "tc_misaligned" and f.category == "precision"
    assert f.est_saving_ms == pytest.approx(0.25, abs=1e-4)
    assert f.severity is Severity.CRITICAL and f.confidence is Confidence.MEDIUM
    assert "check the dims of aten::addmm" in f.title and "0.50 ms per step" in f.title
    assert any("bf16, operands aligned to 1 element(s); 1 launches, 0.500 ms per step" in e
               for e in f.evidence)
    assert any("2.0x (estimated from datasheet peaks, not measured)" in e for e in f.evidence)
    assert "50304" in f.fix.pytorch and "pad_to_multiple_of" in f.fix.pytorch
    assert f.fix.tensorflow and f.fix.jax and f.fix.cuda


def test_h100_uses_the_measured_ratio(tmp_path: Path) -> None:
    (f,) = _findings(_run(tmp_path, H100))
    assert "measured on" in f.method and f.est_saving_ms > 0.25


@pytest.mark.parametrize("name", [NVJET, ALIGN8, GEMV, SPLITK, SGEMM_ALIGN1])
def test_silent(tmp_path: Path, name: str) -> None:
    assert _findings(_run(tmp_path, A100, name)) == ()


def test_alignment_and_reasons() -> None:
    assert min_alignment(ALIGN1) == 1 and min_alignment(ALIGN8) == 8
    assert min_alignment("sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_aligna2_alignc8") == 2
    assert min_alignment(NVJET) is None
    assert why(ALIGN1, "gemm", "bf16", True) == "align"
    assert why("cutlass_80_simt_hgemm_128x128_8x2_nn_align8", "gemm", "fp16", False) == "simt"
    assert why(ALIGN1, "conv", "bf16", True) is None  # convolutions are left out
    assert why(GEMV, "gemm", "bf16", False) is None
    assert why(SGEMM_ALIGN1, "gemm", "fp32", False) is None
