"""The speed-up table, its fall-backs, and the helpers the kernel rules share."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from builder import H100, TraceBuilder
from stepscope.analysis import analyze
from stepscope.model import speedups as sp
from stepscope.model.kernels import kernel_owner
from stepscope.model.scaling import gpu_bound_share
from stepscope.model.speedups import (
    DATASHEET,
    DATASHEET_SOURCE,
    MEASURED,
    RATIOS,
    Measured,
    shorter,
    speedups_for,
)

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks" / "gemm_speedups.py"


def _m(device: str, cc: tuple[int, int], tf32: float | None, **kw: Any) -> Measured:
    vals: dict[str, Any] = {r: None for r in RATIOS}
    vals.update(gemm_tf32=tf32, **kw)
    return Measured(device=device, compute=cc, provenance=f"test {device}", **vals)


def test_exact_device_then_same_cc_then_datasheet() -> None:
    table = (_m("GPU A", (9, 0), 6.0, gemm_bf16=12.0), _m("GPU B", (9, 0), 5.0, conv_tf32=2.5))
    s = speedups_for(dict(H100, name="GPU A"), table)
    assert s is not None and s.compute == (9, 0)
    tf32, bf16, conv = s.get("gemm_tf32"), s.get("gemm_bf16"), s.get("conv_tf32")
    assert tf32 is not None and (tf32.value, tf32.measured, tf32.source) == (6.0, True,
                                                                             "measured on GPU A")
    assert bf16 is not None and bf16.measured and bf16.value == 12.0
    # not measured on GPU A: GPU B has the same compute capability (a data-centre CC)
    assert conv is not None and (conv.value, conv.measured) == (2.5, False)
    assert conv.source == "measured on GPU B, same compute capability 9.0"
    fp16 = s.get("gemm_fp16")  # measured nowhere: the datasheet default
    assert fp16 is not None and (fp16.value, fp16.source) == (6.0, DATASHEET_SOURCE)
    assert fp16.describe() == f"6.0x ({DATASHEET_SOURCE})"


def test_no_same_cc_fallback_for_consumer_compute_capabilities() -> None:
    table = (_m("NVIDIA L40S", (8, 9), 2.0),)
    s = speedups_for(dict(H100, name="NVIDIA GeForce RTX 4090", compute_major=8,
                          compute_minor=9), table)
    tf32 = s.get("gemm_tf32") if s else None
    assert tf32 is not None and tf32.value == 1.3 and not tf32.measured


def test_gpus_without_tensor_cores_or_tf32() -> None:
    assert speedups_for(dict(H100, compute_major=6, compute_minor=1)) is None
    assert speedups_for(dict(H100, vendor="amd")) is None
    assert speedups_for(dict(H100, compute_major=None)) is None
    volta = speedups_for(dict(H100, name="Tesla V100", compute_major=7, compute_minor=0))
    assert volta is not None and volta.get("gemm_tf32") is None and volta.get("gemm_bf16") is None
    fp16 = volta.get("gemm_fp16")
    assert fp16 is not None and fp16.value == 3.0


def test_placeholders_are_marked_and_never_used() -> None:
    for m in MEASURED:
        assert m.compute in DATASHEET and m.provenance
        values = [getattr(m, r) for r in RATIOS]
        assert all(v is None or v > 1.0 for v in values)
        if any(v is None for v in values):
            assert m.provenance.startswith("PLACEHOLDER")
    s = speedups_for(H100)  # measured on the project's H100 (benchmarks/gemm_speedups.py)
    r = s.get("gemm_tf32") if s else None
    assert r is not None and r.measured and r.value == 6.178
    h100 = next(m for m in MEASURED if m.device == H100["name"])
    assert h100.gemm_tf32 == 6.178 and "2026-11-22" in h100.provenance


def test_shorter_never_goes_below_the_floor() -> None:
    dur = np.array([1_000.0, 3_000.0, 100_000.0])
    # 1 us: already under the 2 us floor; 3 us -> 2 us; 100 us / 4 = 25 us
    assert shorter(dur, 0.25).tolist() == [0.0, 1_000.0, 75_000.0]


@pytest.mark.parametrize("name,owner", [
    ("nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_NNT", "library"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_nt_align1>(...)", "library"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "library"),
    ("void cub::DeviceRadixSortOnesweepKernel<...>", "library"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >", "framework"),
    ("triton_poi_fused_add_gelu_0", "framework"),
    ("loop_add_fusion", "framework"),
    ("scale_kernel", "custom"),
    ("_attn_fwd_inner_custom", "custom"),
    ("feature_map", "custom"),
])
def test_kernel_owner(name: str, owner: str) -> None:
    assert kernel_owner(name) == owner


def test_gpu_bound_share(tmp_path: Path) -> None:
    b = TraceBuilder()
    for i in range(3):
        b.step(i * 1000, 1000)
        b.kernel("k", i * 1000 + 10, 300, launch=(i * 1000 + 1, 5))
        b.kernel("k", i * 1000 + 200, 300, stream=8)  # overlaps: union 490 us
    run = b.build(tmp_path / "run")
    assert gpu_bound_share(analyze(run).ranks[0]) == pytest.approx(0.49)


# -- the benchmark that fills the table -------------------------------------------------------

def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gemm_speedups", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_benchmark_help_and_no_gpu_exit() -> None:
    out = subprocess.run([sys.executable, str(BENCH), "--help"], check=False, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and "--out" in out.stdout
    try:
        import torch

        if torch.cuda.is_available():
            pytest.skip("a CUDA GPU is present: the no-GPU path cannot be checked here")
    except ImportError:
        pass
    out = subprocess.run([sys.executable, str(BENCH), "--quick"], check=False, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and "gemm_speedups:" in out.stderr and not out.stdout


def test_benchmark_python_entry_pastes_into_the_table() -> None:
    mod = _bench()
    assert mod.parse_args(["--out", "x.json", "--quick"]).quick
    res = {"device": "NVIDIA H100 80GB HBM3", "compute": [9, 0], "driver": "580.159.04",
           "torch": "2.11.0+cu130", "cuda": "13.0", "cudnn": 91900, "date": "2026-11-23",
           "command": "python3 benchmarks/gemm_speedups.py --out gemm.json",
           "ratios": {"gemm_tf32": 6.1, "gemm_bf16": 12.9, "gemm_fp16": 12.5, "conv_tf32": 2.3,
                      "conv_bf16": 4.2, "conv_fp16": 4.4, "half_misaligned": 5.1}}
    entry = eval(mod.python_entry(res).rstrip(","), {"Measured": Measured})
    assert entry.device == "NVIDIA H100 80GB HBM3" and entry.compute == (9, 0)
    assert entry.gemm_tf32 == 6.1 and entry.half_misaligned == 5.1
    assert "torch 2.11.0+cu130" in entry.provenance and "2026-11-23" in entry.provenance
    s = speedups_for(H100, (entry,))
    r = s.get("gemm_tf32") if s else None
    assert r is not None and r.measured and r.value == 6.1
    assert sp.PLACEHOLDER is None


def test_the_channels_last_conv_ratio_exact_then_same_cc_only() -> None:
    table = {"GPU A": ((9, 0), 7.0, "test"), "GPU C": ((8, 9), 3.0, "test")}
    a = sp.conv_bf16_nhwc(dict(H100, name="GPU A"), table)
    assert a is not None and (a.value, a.measured) == (7.0, True)
    # another data-centre part of the same compute capability borrows it, said so
    b = sp.conv_bf16_nhwc(dict(H100, name="GPU B"), table)
    assert b is not None and (b.value, b.measured) == (7.0, False)
    assert "same compute capability 9.0" in b.source
    # a consumer compute capability does not; none measured: None (the NCHW ratio is used)
    assert sp.conv_bf16_nhwc(dict(H100, name="GPU D", compute_major=8, compute_minor=9),
                             table) is None
    assert sp.conv_bf16_nhwc(dict(H100, name="GPU E", compute_major=8, compute_minor=0),
                             table) is None
    assert sp.conv_bf16_nhwc(dict(H100), sp.NHWC_BF16) is not None  # the H100 measurement


def test_conv_layouts_help_and_no_gpu_exit() -> None:
    bench = REPO / "benchmarks" / "conv_layouts.py"
    out = subprocess.run([sys.executable, str(bench), "--help"], check=False,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "channels_last" in out.stdout
    try:
        import torch
    except ImportError:
        pytest.skip("torch not installed")
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the refusal is not what runs")
    out = subprocess.run([sys.executable, str(bench), "--quick"], check=False,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.startswith("conv_layouts: no CUDA GPU")
    assert not out.stdout
