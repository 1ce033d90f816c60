"""DDP with exposed communication: a comm-heavy model (4 x Linear(8192, 8192) + a small head,
268M parameters = 1.07 GB of fp32 gradients, TF32 matmuls on a batch of 1024 per rank: a few
ms of compute) whose gradients are all-reduced in fp32 as ONE bucket after the whole backward
(``bucket_cap_mb`` larger than all gradients: with an explicit cap DDP's first bucket has that
cap too; with older torch's 1 MB first bucket the small head alone fills it). Nothing runs
under that all-reduce.

``--fix`` (``--fix-mode both``, default): DDP's default buckets (1 MB first, then 25 MB), so the all-reduces start
during the backward, plus ``bf16_compress_hook`` (half the bytes). ``--fix-mode buckets`` or
``bf16``: one of the two. Expected top finding: ``exposed_communication``.

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
    ap.add_argument("--fix-mode", choices=("both", "buckets", "bf16"), default="both",
                    help="what --fix changes: 25 MB buckets and the bf16 hook (both), or one")
    ap.add_argument("--batch", type=int, default=None, help="rows per rank (CUDA: 1024)")
    ap.add_argument("--width", type=int, default=None, help="layer width (CUDA: 8192)")
    ap.add_argument("--layers", type=int, default=None, help="big layers (CUDA: 4)")


def build(fixed: bool, ctx: Ctx, args: argparse.Namespace) -> Step:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    batch, width, layers = ctx.pick((1024, 8192, 4), (32, 128, 2))
    batch, width, layers = args.batch or batch, args.width or width, args.layers or layers
    if ctx.cuda:  # TF32 in both variants: the step is about communication, not tensor cores
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
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

    def step() -> None:
        train_step(model, opt, x, device=ctx.device, amp=None)

    return Step(step, info={"batch": batch, "width": width, "layers": layers,
                            "grad_mb": round(grad_mb, 1), "bucket_cap_mb": cap,
                            "comm_hook": comp.__name__ if hook else None,
                            "fix_mode": args.fix_mode if fixed else None})


if __name__ == "__main__":
    sys.exit(harness.main(NAME, build, add_args, doc=__doc__))
