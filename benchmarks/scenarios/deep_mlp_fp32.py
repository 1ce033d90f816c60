"""A deep fp32 MLP with TF32 off: its fixes leave the step on the host, where bf16 autocast's
casts cost more than its kernels save.

Twelve Linear(1024, 1024) layers on a batch of 4096: in fp32 without tensor cores the GPU sets
the step; with TF32 or bf16 the GEMMs shrink below the host's dispatch of the step, and bf16
autocast adds a cast per weight, bias and fp32 input of each layer (and the backward of each
parameter's cast) to that dispatch (issue 22: a second net for the autocast host model).
"""

from __future__ import annotations

import torch
import variants
from common import Step, adamw, mlp, pick, randn, tf32_flags, train_step

EXPECTED = "no_tensor_cores"
DESCRIPTION = ("fp32 MLP, 12 x Linear(1024, 1024) with GELU on a batch of 4096, fused AdamW, "
               "TF32 off -> fixed: TF32 on; variant bf16_amp: bf16 autocast instead (TF32 "
               "flags left off)")
# fix variants and the report's remedy ids they apply (variants.py); the first is --fixed
VARIANTS = {"tf32": ("tf32",), "bf16_amp": ("bf16_amp",)}


def build(fixed: bool | str, device: str) -> Step:
    variant = variants.pick(fixed, VARIANTS)
    tf32 = variant == "tf32"
    amp = torch.bfloat16 if variant == "bf16_amp" else None
    batch, width, layers = pick(device, (4096, 1024, 12), (64, 64, 12))
    model = mlp([width] * (layers + 1), device)
    opt = adamw(model, device)
    x = randn(batch, width, device=device, seed=21)

    def step() -> None:
        tf32_flags(tf32)
        train_step(model, opt, x, device=device, amp=amp)

    return Step(step, info={"batch": batch, "width": width, "layers": layers, "tf32": tf32,
                            "amp": str(amp) if amp else None})
