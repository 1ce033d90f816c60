"""DDP with a needless extra all-reduce per step: after each optimizer step the program checks
that the replicas agree by copying every parameter into one flat fp32 buffer, all-reducing it
(as many bytes as the whole gradient all-reduce, with nothing to overlap) and reading one
element back with ``.item()`` (a host sync). The model is a bf16-autocast MLP (4 x
Linear(4096, 4096), batch 4096 per rank) whose own gradient all-reduce overlaps the backward.
``--fix`` removes the check. Expected top finding: ``exposed_communication``.

    torchrun --standalone --nproc-per-node=2 benchmarks/multigpu/ddp_extra_allreduce.py [--fix]
"""

import os

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
               ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_k, _v)  # NVLink multicast off, before torch is imported

import argparse  # noqa: E402
import sys  # noqa: E402

import harness  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from common import adamw, mlp, randn, train_step  # noqa: E402
from harness import Ctx  # noqa: E402
from timing import Step  # noqa: E402

NAME = "ddp_extra_allreduce"


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--no-item", action="store_true",
                    help="keep the extra all-reduce but not the .item() read")


def build(fixed: bool, ctx: Ctx, args: argparse.Namespace) -> Step:
    batch, width, layers = ctx.pick((4096, 4096, 4), (64, 64, 2))
    model = harness.ddp(mlp([width] * (layers + 1), ctx.device), ctx)
    opt = adamw(model, ctx.device)
    x = randn(batch, width, device=ctx.device, seed=1 + ctx.rank)
    params = [p for p in model.parameters()]
    flat = torch.empty(sum(p.numel() for p in params), device=ctx.device)
    seen: list[float] = []

    def step() -> None:
        train_step(model, opt, x, device=ctx.device, amp=torch.bfloat16)
        if fixed:
            return
        torch.cat([p.detach().reshape(-1) for p in params], out=flat)  # the planted check
        dist.all_reduce(flat)
        if not args.no_item:
            seen.append(flat[0].item())
            del seen[:-100]

    return Step(step, info={"batch": batch, "width": width, "layers": layers,
                            "params": flat.numel(),
                            "extra_allreduce_bytes": 0 if fixed else flat.numel() * 4,
                            "item": not fixed and not args.no_item})


if __name__ == "__main__":
    sys.exit(harness.main(NAME, build, add_args, doc=__doc__))
