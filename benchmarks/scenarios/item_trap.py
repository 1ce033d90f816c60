"""The trap (issue 22): ``loss.item()`` every micro-step of a host-bound model.

Each step accumulates gradients over a few micro-steps of a deep, narrow bf16 MLP (24 residual
blocks of Linear 256 -> LayerNorm -> GELU on a batch of 32: hundreds of tiny kernels, the host
launch rate is the limit) and reads every micro-step's loss with ``.item()``. The syncs look
like the problem, but the GPU is idle most of the time anyway: when ``.item()`` waits, only the
last few tiny kernels are left to run, so removing the syncs (variant ``remove_syncs``, a TRAP)
does not make the step faster. Capturing the model's forward and backward as CUDA graphs
(``torch.cuda.make_graphed_callables``, variant ``cuda_graphs``) removes the launch cost.
"""

from __future__ import annotations

import torch
import variants
from common import Step, adamw, is_cuda, pick, randn, require_cuda

EXPECTED = "launch_bound"
DESCRIPTION = ("loss.item() after every one of 4 micro-steps (gradient accumulation) of a "
               "host-bound bf16 MLP (24 residual blocks, Linear 256 + LayerNorm + GELU, batch "
               "32), fused AdamW -> fixed: forward and backward as CUDA graphs "
               "(make_graphed_callables); variant remove_syncs (a trap: must not help): the "
               "losses kept on the device, never read")
# fix variants and the report's remedy ids they apply (variants.py); the first is --fixed
# (the trap removes the .item() reads: the report's remove_round_trip; the variant keeps its
# name, the measured suites are keyed by it)
VARIANTS = {"cuda_graphs": ("cuda_graphs",), "remove_syncs": ("remove_round_trip",)}
TRAPS = ("remove_syncs",)


class Block(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(width, width)
        self.norm = torch.nn.LayerNorm(width)
        self.act = torch.nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.act(self.norm(self.fc(x)))


def build(fixed: bool | str, device: str) -> Step:
    variant = variants.pick(fixed, VARIANTS)
    batch, width, depth, micro = pick(device, (32, 256, 24, 4), (8, 32, 4, 2))
    torch.manual_seed(0)
    dtype = torch.bfloat16 if is_cuda(device) else torch.float32
    model: torch.nn.Module = torch.nn.Sequential(*(Block(width) for _ in range(depth)),
                                                 torch.nn.Linear(width, 1)).to(device, dtype)
    opt = adamw(model, device)
    xs = [randn(batch, width, device=device, seed=40 + i, dtype=dtype) for i in range(micro)]
    if variant == "cuda_graphs":
        require_cuda(device, "CUDA graphs")
        # the documented way to graph a module's forward and backward (it warms up itself)
        model = torch.cuda.make_graphed_callables(model, (xs[0],))
    read = variant != "remove_syncs"
    history: list[float] = []
    kept: list[torch.Tensor] = []

    def step() -> None:
        total = None
        for x in xs:
            loss = model(x).float().square().mean() / micro
            loss.backward()
            if read:
                history.append(loss.item())  # the planted sync, once per micro-step
                del history[:-100]
            else:
                total = loss.detach() if total is None else total + loss.detach()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if total is not None:
            kept[:] = [total]  # kept on the device, never read

    return Step(step, info={"batch": batch, "width": width, "depth": depth,
                            "micro_steps": micro, "variant": variant,
                            "syncs_per_step": micro if read else 0})
