"""fp32 conv net with TF32 off, trained with torch.optim: three precision fixes to choose from.

The issue's conv net (issue 22): the finding ranks by TF32, bf16 autocast goes further, and
bf16 with channels_last further still. Each fix is a variant (variants.py); the last applies
two remedies at once, so it also checks the report's plan.
"""

from __future__ import annotations

import torch
import variants
from common import Step, pick, randn, tf32_flags
from torch_manual_sgd import _net

EXPECTED = "no_tensor_cores"
DESCRIPTION = ("fp32 conv net (3x3 convs 64@56x56, 128@28x28, 256@14x14, batch 64), SGD with "
               "momentum, TF32 off for matmul and cuDNN -> fixed: TF32 on; variants: bf16 "
               "autocast; bf16 autocast + channels_last (model and input)")
# fix variants and the report's remedy ids they apply (variants.py); the first is --fixed
VARIANTS = {"tf32": ("tf32",), "bf16_amp": ("bf16_amp",),
            "bf16_amp_channels_last": ("bf16_amp", "channels_last")}
# bf16 + channels_last is the best of the options: it measures the plan of all three
PLAN_COVERS = {"bf16_amp_channels_last": ("tf32", "bf16_amp", "channels_last")}


def build(fixed: bool | str, device: str) -> Step:
    variant = variants.pick(fixed, VARIANTS)
    tf32 = variant == "tf32"
    amp = variant in ("bf16_amp", "bf16_amp_channels_last")
    channels_last = variant == "bf16_amp_channels_last"
    batch, ch, hw = pick(device, (64, 64, 56), (4, 8, 16))
    classes = 10
    torch.manual_seed(0)
    model = _net(ch, classes).to(device)
    x = randn(batch, ch, hw, hw, device=device, seed=13)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, classes, (batch,), generator=torch.Generator().manual_seed(14)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    dev_type = "cuda" if str(device).startswith("cuda") else "cpu"

    def step() -> None:
        tf32_flags(tf32)
        with torch.autocast(device_type=dev_type, dtype=torch.bfloat16, enabled=amp):
            logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return Step(step, info={"batch": batch, "channels": [ch, 2 * ch, 4 * ch], "hw": hw,
                            "variant": variant, "tf32": tf32, "bf16_amp": amp,
                            "channels_last": channels_last})
