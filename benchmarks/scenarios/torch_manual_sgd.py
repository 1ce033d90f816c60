"""PyTorch without torch.optim: an fp32 conv net trained with a hand-written SGD update, TF32 off.

No optimizer step hook fires, so ``stepscope record`` has to find the steps itself (its time
window); the issue's conv net got no finding at all through ``record`` (no ``devices`` table).
"""

from __future__ import annotations

import torch
from common import Step, pick, randn, tf32_flags

EXPECTED = "no_tensor_cores"
STEP_HOOK = False
FIX_REMEDIES = ("tf32",)  # the remedies it applies (variants.py)
DESCRIPTION = ("fp32 conv net (3x3 convs 64@56x56, 128@28x28, 256@14x14, batch 64, cuDNN "
               "defaults) trained with a manual SGD loop (p -= lr * p.grad, no torch.optim), "
               "TF32 off for matmul and cuDNN -> fixed: TF32 on")

LR = 1e-3


def _net(ch: int, classes: int) -> torch.nn.Sequential:
    """Conv layers on the shapes benchmarks/gemm_speedups.py measures the conv TF32 ratio on."""
    c1, c2, c3 = ch, 2 * ch, 4 * ch
    relu = torch.nn.ReLU
    return torch.nn.Sequential(
        torch.nn.Conv2d(c1, c1, 3, padding=1), relu(),
        torch.nn.Conv2d(c1, c1, 3, padding=1), relu(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(c1, c2, 3, padding=1), relu(),
        torch.nn.Conv2d(c2, c2, 3, padding=1), relu(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(c2, c3, 3, padding=1), relu(),
        torch.nn.Conv2d(c3, c3, 3, padding=1), relu(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        torch.nn.Linear(c3, classes),
    )


def build(fixed: bool, device: str) -> Step:
    batch, ch, hw = pick(device, (64, 64, 56), (4, 8, 16))
    classes = 10
    torch.manual_seed(0)
    model = _net(ch, classes).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    x = randn(batch, ch, hw, hw, device=device, seed=13)
    y = torch.randint(0, classes, (batch,), generator=torch.Generator().manual_seed(14)).to(device)

    def step() -> None:
        tf32_flags(fixed)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        with torch.no_grad():
            for p in params:  # the hand-written update a user writes instead of torch.optim
                assert p.grad is not None
                p.add_(p.grad, alpha=-LR)
                p.grad = None

    return Step(step, info={"batch": batch, "channels": [ch, 2 * ch, 4 * ch], "hw": hw,
                            "tf32": fixed, "optimizer": "manual SGD"})
