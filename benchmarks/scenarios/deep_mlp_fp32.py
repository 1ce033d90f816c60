"""A deep fp32 MLP with TF32 off: its fixes leave the step on the host, where bf16 autocast's
casts cost more than its kernels save.

Twelve Linear(1024, 1024) layers on a batch of 4096: in fp32 without tensor cores the GPU sets
the step; with TF32 or bf16 the GEMMs shrink below the host's dispatch of the step, and bf16
autocast adds a cast per weight, bias and fp32 input of each layer (and the backward of each
parameter's cast) to that dispatch (issue 22: a second net for the autocast host model).
"""

from __future__ import annotations

import variants
from common import Step, pick, precision_mlp, tf32_flags

EXPECTED = "no_tensor_cores"
DESCRIPTION = ("fp32 MLP, 12 x Linear(1024, 1024) with GELU on a batch of 4096, fused AdamW, "
               "TF32 off -> fixed: TF32 on; variant bf16_amp: bf16 autocast instead (TF32 "
               "flags left off)")
# fix variants and the report's remedy ids they apply (variants.py); the first is --fixed
VARIANTS = {"tf32": ("tf32",), "bf16_amp": ("bf16_amp",)}


def build(fixed: bool | str, device: str, bias: bool = True) -> Step:
    """``bias`` False: the same net without biases (``mlp_nobias_fp32``)."""
    return precision_mlp(variants.pick(fixed, VARIANTS), device,
                         pick(device, (4096, 1024, 12), (64, 64, 12)), seed=21,
                         flags=tf32_flags, bias=bias)
