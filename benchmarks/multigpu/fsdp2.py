"""FSDP2 (``torch.distributed.fsdp.fully_shard``) on a transformer-ish model: 12 pre-norm
``TransformerEncoderLayer`` blocks (d_model 1024, 16 heads, FFN 4096; 151M parameters), each
block sharded, then the root; bf16 parameters, fp32 gradient reduction
(``MixedPrecisionPolicy``); batch 32 x 1024 tokens per rank, AdamW. A healthy baseline:
FSDP2's default implicit prefetch overlaps the all-gathers and reduce-scatters with compute.
Expected: no straggler, no warning-level communication finding. (At 8 x 1024 tokens, about
19 ms of GPU work per step, the step was host-bound on FSDP2's per-module hooks (50-72 ms on
H100s, 2026-11-26) and one rank fell behind on the host when traced: not a clean healthy case.
32 x 1024 tokens is about 75 ms of GPU work, above the host's ~40 ms.)

There is no planted bottleneck; ``--fix`` is an alternative setting, not a fix:
``reshard_after_forward=False`` (no second all-gather of the parameters in the backward, at the
cost of memory) plus explicit forward/backward prefetch of the next 2 blocks.

    torchrun --standalone --nproc-per-node=2 benchmarks/multigpu/fsdp2.py [--fix]
"""

import os

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
               ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_k, _v)  # NVLink multicast off, before torch is imported

import argparse  # noqa: E402
import sys  # noqa: E402

import harness  # noqa: E402
import torch  # noqa: E402
from harness import Ctx  # noqa: E402
from timing import SkipScenario, Step  # noqa: E402

NAME = "fsdp2"
PREFETCH = 2


def build(fixed: bool, ctx: Ctx, args: argparse.Namespace) -> Step:
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError as exc:
        raise SkipScenario(f"needs FSDP2 (torch.distributed.fsdp.fully_shard): {exc}") from None
    d, heads, ff, layers, batch, seq = ctx.pick((1024, 16, 4096, 12, 32, 1024),
                                                (64, 4, 128, 2, 2, 16))
    torch.manual_seed(0)
    blocks = torch.nn.ModuleList(
        torch.nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, batch_first=True,
                                         norm_first=True) for _ in range(layers))
    model = torch.nn.Sequential(*blocks, torch.nn.LayerNorm(d)).to(ctx.device)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
        if ctx.cuda else MixedPrecisionPolicy()
    reshard = not fixed
    for b in blocks:
        fully_shard(b, mp_policy=mp, reshard_after_forward=reshard)
    fully_shard(model, mp_policy=mp, reshard_after_forward=reshard)
    if fixed:
        for i, b in enumerate(blocks):
            nxt = list(blocks[i + 1:i + 1 + PREFETCH])
            prv = list(blocks[max(0, i - PREFETCH):i])[::-1]
            if nxt:
                b.set_modules_to_forward_prefetch(nxt)  # type: ignore[operator]
            if prv:
                b.set_modules_to_backward_prefetch(prv)  # type: ignore[operator]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator(device="cpu").manual_seed(1 + ctx.rank)
    x = torch.randn(batch, seq, d, generator=g).to(ctx.device)

    def step() -> None:
        out = model(x)
        loss = out.float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return Step(step, info={"d_model": d, "layers": layers, "batch": batch, "seq": seq,
                            "params": sum(p.numel() for p in model.parameters()) * ctx.world,
                            "reshard_after_forward": reshard,
                            "explicit_prefetch": PREFETCH if fixed else 0})


if __name__ == "__main__":
    sys.exit(harness.main(NAME, build, doc=__doc__))
