"""Balanced DDP: bf16-autocast MLP (6 x Linear(4096, 4096), batch 8192 per rank), fused AdamW,
DDP's default 25 MB buckets: the compute dominates and the gradient all-reduce runs under the
backward. Nothing planted (``--fix`` == baseline). Expected: no straggler, no warning-level
communication finding.

    torchrun --standalone --nproc-per-node=2 benchmarks/multigpu/ddp_balanced.py [--compare]
"""

import os

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
               ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_k, _v)  # NVLink multicast off, before torch is imported

import argparse  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402

import harness  # noqa: E402
import torch  # noqa: E402
from common import adamw, mlp, randn, train_step  # noqa: E402
from harness import Ctx  # noqa: E402
from timing import Step  # noqa: E402

NAME = "ddp_balanced"


def ddp_mlp(ctx: Ctx, *, batch: int, width: int, layers: int,
            pre: Callable[[], None] | None = None, **ddp_kw: object) -> Step:
    """A DDP train step of a bf16-autocast MLP; ``pre`` runs on the host before each step."""
    model = harness.ddp(mlp([width] * (layers + 1), ctx.device), ctx, **ddp_kw)
    opt = adamw(model, ctx.device)
    x = randn(batch, width, device=ctx.device, seed=1 + ctx.rank)

    def step() -> None:
        if pre is not None:
            pre()
        train_step(model, opt, x, device=ctx.device, amp=torch.bfloat16)

    return Step(step, info={"batch": batch, "width": width, "layers": layers,
                            "params": sum(p.numel() for p in model.parameters())})


def build(fixed: bool, ctx: Ctx, args: argparse.Namespace) -> Step:
    batch, width, layers = ctx.pick((8192, 4096, 6), (64, 64, 2))
    return ddp_mlp(ctx, batch=batch, width=width, layers=layers)


if __name__ == "__main__":
    sys.exit(harness.main(NAME, build, doc=__doc__))
