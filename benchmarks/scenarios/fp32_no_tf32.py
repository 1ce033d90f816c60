"""No tensor cores: an fp32 GEMM-heavy MLP with TF32 disabled."""

from __future__ import annotations

import torch
import variants
from common import Step, pick, precision_mlp

EXPECTED = "no_tensor_cores"
DESCRIPTION = ("fp32 MLP, 3 x Linear(4096, 4096) on a batch of 2048, with "
               "torch.backends.cuda.matmul.allow_tf32 = False (and cudnn) -> fixed: TF32 on "
               "(set_float32_matmul_precision('high')); variant bf16_amp: bf16 autocast instead "
               "(TF32 flags left off)")
# fix variants and the report's remedy ids they apply (variants.py); the first is --fixed
VARIANTS = {"tf32": ("tf32",), "bf16_amp": ("bf16_amp",)}


def _precision(tf32: bool) -> None:
    # Flags are process-global: each variant sets its own at the start of every step.
    # Legacy API only (mixing it with fp32_precision raises in recent torch).
    if tf32:
        torch.set_float32_matmul_precision("high")
    else:
        torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = tf32


def build(fixed: bool | str, device: str) -> Step:
    return precision_mlp(variants.pick(fixed, VARIANTS), device, pick(device, (2048, 4096, 3), (64, 64, 3)),
                         seed=9, flags=_precision)
