"""DDP with exposed communication: 16 x Linear(4096, 4096) + a small head (268M fp32
parameters = 1.07 GB of gradients), bf16 autocast on a batch of 4096 per rank (~11 ms of
forward and backward, each layer's backward longer than its gradients' all-reduce on NVLink),
whose gradients are all-reduced as ONE bucket after the whole backward (``bucket_cap_mb``
larger than all gradients: with an explicit cap DDP's first bucket has that cap too; with
older torch's 1 MB first bucket the small head alone fills it). Nothing runs under that
all-reduce.

``--fix`` (``--fix-mode buckets``, default): DDP's default buckets (1 MB first, then 25 MB;
one per 64 MB weight here), so each layer's all-reduce runs under the backward of the layers
before it. ``--fix-mode bf16``: ``bf16_compress_hook`` (half the bytes, one bucket);
``both``. Expected top finding: ``exposed_communication``.

    torchrun --standalone --nproc-per-node=2 benchmarks/multigpu/ddp_exposed_comm.py [--fix]
"""

import os

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
               ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_k, _v)  # NVLink multicast off, before torch is imported

import argparse  # noqa: E402
import sys  # noqa: E402

import harness  # noqa: E402
import torch  # noqa: E402
from common import adamw, mlp, randn, train_step  # noqa: E402
from harness import Ctx  # noqa: E402
from timing import Step  # noqa: E402

NAME = "ddp_exposed_comm"
HEAD = 16  # outputs of the small head (its gradients fit DDP's 1 MB first bucket)


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--fix-mode", choices=("both", "buckets", "bf16"), default="buckets",
                    help="what --fix changes: DDP's default buckets, the bf16 hook, or both")
    ap.add_argument("--batch", type=int, default=None, help="rows per rank (CUDA: 4096)")
    ap.add_argument("--width", type=int, default=None, help="layer width (CUDA: 4096)")
    ap.add_argument("--layers", type=int, default=None, help="big layers (CUDA: 16)")


def build(fixed: bool, ctx: Ctx, args: argparse.Namespace) -> Step:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    batch, width, layers = ctx.pick((4096, 4096, 16), (32, 128, 2))
    batch, width, layers = args.batch or batch, args.width or width, args.layers or layers
    net = mlp([width] * (layers + 1) + [HEAD], ctx.device)
    grad_mb = sum(p.numel() for p in net.parameters()) * 4 / 2**20
    small = fixed and args.fix_mode in ("both", "buckets")
    hook = fixed and args.fix_mode in ("both", "bf16")
    cap = None if small else float(2 ** int(grad_mb * 2).bit_length())  # > all gradients
    model = harness.ddp(net, ctx, bucket_cap_mb=cap)  # None: DDP's default
    comp = default_hooks.bf16_compress_hook
    if hook:
        if ctx.backend == "gloo":  # gloo has no bf16 all-reduce everywhere: fp16 on the CPU
            comp = default_hooks.fp16_compress_hook
        model.register_comm_hook(None, comp)
    opt = adamw(model, ctx.device)
    x = randn(batch, width, device=ctx.device, seed=1 + ctx.rank)
    amp = torch.bfloat16 if ctx.cuda else None  # fp32 parameters and gradients either way

    def step() -> None:
        train_step(model, opt, x, device=ctx.device, amp=amp)

    return Step(step, info={"batch": batch, "width": width, "layers": layers,
                            "grad_mb": round(grad_mb, 1), "bucket_cap_mb": cap,
                            "comm_hook": comp.__name__ if hook else None,
                            "fix_mode": args.fix_mode if fixed else None})


if __name__ == "__main__":
    sys.exit(harness.main(NAME, build, add_args, doc=__doc__))
