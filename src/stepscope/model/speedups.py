"""What a kernel-level change would save: measured speed-ups of GEMMs and convolutions per
GPU model. Shared by the occupancy and precision rules.

The speed-up table
------------------
``MEASURED`` holds GEMM / convolution throughput ratios measured by
``benchmarks/gemm_speedups.py`` (PyTorch, CUDA events, median over shapes; the script's
docstring defines each ratio), one entry per GPU model with its provenance. Each ratio is a
time ratio, larger is better for the change:

* ``gemm_tf32`` / ``gemm_bf16`` / ``gemm_fp16``: time of an fp32 GEMM with TF32 off over the
  time of the same GEMM with TF32 on / in bf16 / in fp16 (``conv_*``: the same for a 2-D
  convolution, forward + both backward passes, NCHW, ``cudnn.benchmark`` off);
* ``half_misaligned``: time per FLOP of a 16-bit GEMM with a dimension that is not a multiple
  of 8 over that of its aligned neighbour (K 4095 vs 4096, vocabulary 50257 vs 50304, ...).

``speedups_for(device_row)`` resolves every ratio for one GPU: the entry measured on that GPU
model (matched by name), else one measured on another model of the same compute capability
where such models share their tensor-core/FP32 throughput ratio (``SAME_CC_OK``), else the
conservative ``DATASHEET`` default of the compute capability ("estimated from datasheet peaks,
not measured"). Each resolved ``Ratio`` says which, so findings can say how much to trust it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

PLACEHOLDER = None
"""A ratio not measured yet: run ``benchmarks/gemm_speedups.py`` on that GPU and paste its
``python_entry`` over the entry."""

RATIOS: tuple[str, ...] = (
    "gemm_tf32", "gemm_bf16", "gemm_fp16", "conv_tf32", "conv_bf16", "conv_fp16",
    "half_misaligned",
)


@dataclass(frozen=True)
class Measured:
    """One GPU model's measured ratios (``None``: not measured) and where they came from."""

    device: str  # torch.cuda.get_device_name()
    compute: tuple[int, int]
    gemm_tf32: float | None
    gemm_bf16: float | None
    gemm_fp16: float | None
    conv_tf32: float | None
    conv_bf16: float | None
    conv_fp16: float | None
    half_misaligned: float | None
    provenance: str  # device, driver, torch / CUDA / cuDNN, date, command


MEASURED: tuple[Measured, ...] = (
    Measured(device="NVIDIA H100 80GB HBM3", compute=(9, 0), gemm_tf32=6.178, gemm_bf16=12.959,
             gemm_fp16=13.018, conv_tf32=2.317, conv_bf16=3.896, conv_fp16=3.925,
             half_misaligned=4.963,
             provenance="NVIDIA H100 80GB HBM3, driver 580.159.04, torch 2.11.0+cu130 (CUDA 13.0, "
                        "cuDNN 91900), 2026-11-22: python3 benchmarks/gemm_speedups.py --out "
                        "gemm.json"),
    Measured(device="NVIDIA H200", compute=(9, 0), gemm_tf32=6.325, gemm_bf16=13.166,
             gemm_fp16=12.762, conv_tf32=2.39, conv_bf16=4.261, conv_fp16=4.491,
             half_misaligned=5.245,
             provenance="NVIDIA H200, driver 580.159.04, torch 2.11.0+cu130 (CUDA 13.0, cuDNN "
                        "91900), 2026-11-22: python3 benchmarks/gemm_speedups.py --out gemm.json; raw output in docs/data/accuracy-2026-11-22/"),
)

# bf16 convolutions on channels_last (NHWC) tensors, forward + both backward passes: fp32 NCHW
# time / bf16 NHWC time, median over gemm_speedups.CONVS (benchmarks/conv_layouts.py; the NCHW
# bf16 ratio of the same run: 4.26). Device name -> (compute capability, ratio, provenance).
NHWC_BF16: dict[str, tuple[tuple[int, int], float, str]] = {
    "NVIDIA H100 80GB HBM3": ((9, 0), 7.402,
                              "NVIDIA H100 80GB HBM3, driver 580.159.04, torch 2.11.0+cu130 (cuDNN "
                              "91900), 2026-11-27: python3 benchmarks/conv_layouts.py --out "
                              "conv_layouts.json; output in docs/data/remedies-2026-11-27d/"),
}


# Compute capabilities whose GPU models share their tensor-core / FP32 throughput ratios (data
# centre parts only: GeForce parts of 8.6/8.9/12.x halve some tensor rates), so a measurement
# on one model stands for the others.
SAME_CC_OK = frozenset({(8, 0), (9, 0), (10, 0), (10, 3)})

# Conservative defaults per compute capability, "estimated from datasheet peaks, not measured".
# Dense datasheet peaks (TFLOPS) fp32 / TF32 / bf16: A100 19.5 / 156 / 312 (8x, 16x),
# H100 SXM 67 / 495 / 989 (7.4x, 14.8x); A6000, L4, L40S: TF32 = 2x fp32, bf16 = 4x;
# RTX 3090 / 4090: TF32 = 1x, fp16 with fp32 accumulation = 2x; V100 fp32 15.7 / fp16 125 (8x,
# no TF32 or bf16 tensor cores); T4 8.1 / 65. Measured GEMMs reach a smaller share of the
# tensor peak than of the FP32 peak (H200, 2026-11-22: 6.3x TF32, 13x bf16 on GEMMs; 2.4x / 4.3x
# on convolutions), so the defaults take about half of the measured data-centre ratios and
# much less of the consumer parts' peaks. ``None``: the GPU has no such tensor cores.
_DATACENTER: dict[str, float | None] = {
    "gemm_tf32": 3.0, "gemm_bf16": 6.0, "gemm_fp16": 6.0, "conv_tf32": 1.5, "conv_bf16": 2.5,
    "conv_fp16": 2.5, "half_misaligned": 2.0}
_WORKSTATION: dict[str, float | None] = {
    "gemm_tf32": 1.3, "gemm_bf16": 2.0, "gemm_fp16": 2.0, "conv_tf32": 1.2, "conv_bf16": 1.5,
    "conv_fp16": 1.5, "half_misaligned": 1.5}
_VOLTA: dict[str, float | None] = {
    "gemm_tf32": None, "gemm_bf16": None, "gemm_fp16": 3.0, "conv_tf32": None, "conv_bf16": None,
    "conv_fp16": 2.0, "half_misaligned": 2.0}
DATASHEET: dict[tuple[int, int], dict[str, float | None]] = {
    (7, 0): _VOLTA, (7, 2): _VOLTA, (7, 5): _VOLTA,
    (8, 0): _DATACENTER, (8, 6): _WORKSTATION, (8, 7): _WORKSTATION, (8, 9): _WORKSTATION,
    (9, 0): _DATACENTER, (10, 0): _DATACENTER, (10, 3): _DATACENTER,
    (12, 0): _WORKSTATION, (12, 1): _WORKSTATION,
}
DATASHEET_SOURCE = "estimated from datasheet peaks, not measured"

MIN_KERNEL_NS = 2_000
"""No kernel gets shorter than this: the shortest kernels in the H100 fixtures take ~1 µs, and
one that reads memory across all SMs rarely finishes under ~2 µs."""


@dataclass(frozen=True)
class Ratio:
    value: float
    measured: bool
    """Measured on this GPU model (not another model, not the datasheet default)."""
    source: str

    def describe(self) -> str:
        return f"{self.value:.1f}x ({self.source})"


@dataclass(frozen=True)
class Speedups:
    device: str
    compute: tuple[int, int]
    ratios: Mapping[str, Ratio | None]  # RATIOS -> ratio, None when the GPU cannot do it

    def get(self, name: str) -> Ratio | None:
        return self.ratios.get(name)


def speedups_for(device: Mapping[str, Any],
                 measured: tuple[Measured, ...] = MEASURED) -> Speedups | None:
    """The ratios for one ``devices`` row; ``None`` for a GPU without tensor cores (compute
    capability below 7.0), an unknown compute capability, or a non-NVIDIA device."""
    vendor = str(device.get("vendor") or "nvidia").lower()
    major, minor = device.get("compute_major"), device.get("compute_minor")
    if vendor not in ("nvidia", "unknown") or major is None or minor is None:
        return None
    cc = (int(major), int(minor))
    if cc not in DATASHEET:
        return None
    name = str(device.get("name") or "")
    exact = [m for m in measured if m.device == name]
    same_cc = [m for m in measured if m.compute == cc and m.device != name] \
        if cc in SAME_CC_OK else []
    out: dict[str, Ratio | None] = {}
    for r in RATIOS:
        default = DATASHEET[cc].get(r)
        if default is None:
            out[r] = None
            continue
        ratio = Ratio(float(default), False, DATASHEET_SOURCE)
        for m in exact + same_cc:
            v = getattr(m, r)
            if v is not None:
                where = "" if m in exact else f", same compute capability {cc[0]}.{cc[1]}"
                ratio = Ratio(float(v), m in exact, f"measured on {m.device}{where}")
                break
        out[r] = ratio
    return Speedups(device=name, compute=cc, ratios=out)


def conv_bf16_nhwc(device: Mapping[str, Any],
                   table: Mapping[str, tuple[tuple[int, int], float, str]] = NHWC_BF16
                   ) -> Ratio | None:
    """The bf16 channels_last conv ratio for one ``devices`` row: measured on this GPU model,
    else on one of the same compute capability (``SAME_CC_OK``); None where none was."""
    name = str(device.get("name") or "")
    if name in table:
        return Ratio(table[name][1], True, f"measured on {name}, channels_last")
    major, minor = device.get("compute_major"), device.get("compute_minor")
    if major is None or minor is None:
        return None
    cc = (int(major), int(minor))
    for other, (occ, v, _) in table.items():
        if occ == cc and cc in SAME_CC_OK:
            return Ratio(v, False, f"measured on {other}, channels_last, same compute "
                                   f"capability {cc[0]}.{cc[1]}")
    return None


def shorter(dur_ns: npt.NDArray[np.float64], factor: npt.NDArray[np.float64] | float
            ) -> npt.NDArray[np.float64]:
    """Time saved when kernels of ``dur_ns`` take ``dur * factor`` instead, never going below
    ``MIN_KERNEL_NS`` (nor saving anything on kernels already shorter)."""
    new = np.maximum(dur_ns * factor, MIN_KERNEL_NS)
    return np.asarray(np.maximum(dur_ns - new, 0.0), dtype=np.float64)
