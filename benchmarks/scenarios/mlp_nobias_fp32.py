"""The deep fp32 MLP of ``deep_mlp_fp32`` with no bias in its Linear layers: the plant for the
autocast host model's bias-free layers.

bf16 autocast casts each parameter once a step; a layer without a bias casts its weight alone.
Through a torch.profiler trace the model sees it (the GEMMs are launched by ``aten::mm``, not
``aten::addmm``); a recorded run has no framework ops and assumes a bias (docs/remedies.md,
``bf16_amp``). Everything else is ``deep_mlp_fp32``'s: twelve Linear(1024, 1024) layers on a
batch of 4096, host-bound after either fix.
"""

from __future__ import annotations

import deep_mlp_fp32
from common import Step

EXPECTED = deep_mlp_fp32.EXPECTED
DESCRIPTION = ("fp32 MLP without biases, 12 x Linear(1024, 1024, bias=False) with GELU on a "
               "batch of 4096, fused AdamW, TF32 off -> fixed: TF32 on; variant bf16_amp: bf16 "
               "autocast instead (TF32 flags left off)")
# fix variants and the report's remedy ids they apply (variants.py): deep_mlp_fp32's
VARIANTS = deep_mlp_fp32.VARIANTS


def build(fixed: bool | str, device: str) -> Step:
    return deep_mlp_fp32.build(fixed, device, bias=False)
