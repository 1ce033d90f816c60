"""DDP straggler: ``ddp_balanced``'s step, but one rank (``--straggler-rank``, default 1) does
``--host-ms`` (25) of extra host work before each step: a pure-Python busy loop (``--kind
busy``, default), a ``time.sleep`` (``sleep``) or half of each (``both``). Every other rank
waits for it inside the gradient all-reduce. ``--fix`` removes the extra work.
Expected top finding: ``straggler`` naming that rank, cause host.

    torchrun --standalone --nproc-per-node=2 benchmarks/multigpu/ddp_straggler.py [--fix]
"""

import os

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
               ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_k, _v)  # NVLink multicast off, before torch is imported

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import harness  # noqa: E402
from ddp_balanced import ddp_mlp  # noqa: E402
from harness import Ctx  # noqa: E402
from timing import Step  # noqa: E402

NAME = "ddp_straggler"


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--straggler-rank", type=int, default=1,
                    help="the late rank (default 1; the last rank when the world is smaller)")
    ap.add_argument("--host-ms", type=float, default=25.0, help="extra host work per step (25)")
    ap.add_argument("--kind", choices=("busy", "sleep", "both"), default="busy",
                    help="busy loop (default), sleep, or half of each")


def late_rank(args: argparse.Namespace, ctx: Ctx) -> int:
    return min(args.straggler_rank, ctx.world - 1)


def build(fixed: bool, ctx: Ctx, args: argparse.Namespace) -> Step:
    batch, width, layers = ctx.pick((8192, 4096, 6), (64, 64, 2))
    late = late_rank(args, ctx)
    s = args.host_ms / 1e3

    def extra_host_work() -> None:
        if args.kind == "busy":
            harness.busy_wait(s)
        elif args.kind == "sleep":
            time.sleep(s)
        else:
            harness.busy_wait(s / 2)
            time.sleep(s / 2)

    planted = not fixed and ctx.rank == late
    step = ddp_mlp(ctx, batch=batch, width=width, layers=layers,
                   pre=extra_host_work if planted else None)
    step.info.update(straggler_rank=late, host_ms=0.0 if fixed else args.host_ms, kind=args.kind)
    return step


if __name__ == "__main__":
    sys.exit(harness.main(NAME, build, add_args, doc=__doc__))
