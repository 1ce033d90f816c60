"""Two planted problems in one step: a pageable batch copy, then ~1000 tiny kernels.

Each step copies a 64 MB fp32 batch from pageable host memory (``.to('cuda')``: staged, the
host waits for it) and runs 500 x ``x = x * 1.0001 + 0.1`` on a slice of it: 1000 tiny kernels
launched eagerly, so the host launch rate sets the pace; the result is the gradient of a
parameter that ``torch.optim.SGD`` steps (so ``stepscope record``'s step hook finds the steps:
the kernel stream alone repeats every two kernels). The two fixes are independent remedies
of the report and each saves on its own: pinned, non-blocking copies (``pinned_copies``: the
host stops waiting for the copy; it still launches the tiny kernels) and a CUDA graph of the
tiny ops (``cuda_graphs``: one launch; the host still waits for the pageable copy). Together
(variant ``both``, the default fix) the step is the pinned copy plus the graph's kernels: more
than either alone, less than the sum of their savings (the replay, not a sum, predicts it:
``plan.subsets``).
"""

from __future__ import annotations

import torch
import variants
from common import Step, capture_graph, is_cuda, pick, require_cuda

EXPECTED = "launch_bound"
DESCRIPTION = ("64 MB fp32 batch copied each step from pageable memory with .to('cuda'), then "
               "500 x (x = x * 1.0001 + 0.1) on 4096 of its elements = 1000 tiny kernels "
               "launched eagerly, their result an SGD step's gradient -> fixed (both): "
               "pinned source + non_blocking copy into a static buffer, and the tiny ops "
               "captured once in a CUDA graph; variants: only the pinned copy (pinned), only "
               "the CUDA graph (cuda_graphs)")
# fix variants and the report's remedy ids they apply (variants.py); the first is --fixed
VARIANTS = {"both": ("cuda_graphs", "pinned_copies"), "cuda_graphs": ("cuda_graphs",),
            "pinned": ("pinned_copies",)}


def build(fixed: bool | str, device: str) -> Step:
    variant = variants.pick(fixed, VARIANTS)
    graphed = variant in ("both", "cuda_graphs")
    pinned = variant in ("both", "pinned") and is_cuda(device)
    rows, feat, iters, numel = pick(device, (4096, 4096, 500, 4096), (64, 64, 500, 4096))
    src = torch.randn(rows, feat, generator=torch.Generator().manual_seed(21))
    if pinned:
        src = src.pin_memory()

    param = torch.nn.Parameter(torch.zeros(numel, device=device))
    opt = torch.optim.SGD([param], lr=1e-3)

    def update(grad: torch.Tensor) -> None:
        param.grad = grad
        opt.step()
        opt.zero_grad(set_to_none=True)

    def body(batch: torch.Tensor) -> torch.Tensor:
        x = batch.view(-1)[:numel]
        for _ in range(iters):
            x = x * 1.0001 + 0.1
        return x

    info = {"copy_mb": src.numel() * 4 / 2**20, "pinned": pinned, "cuda_graph": graphed,
            "kernels_per_step": 2 * iters, "numel": numel, "variant": variant}
    if not graphed:
        def step() -> None:
            # pageable: staged, blocks the host; pinned: queued, the host goes on launching
            batch = src.to(device, non_blocking=pinned)
            update(body(batch))

        return Step(step, info=info)

    require_cuda(device, "CUDA graphs")
    static_in = torch.empty(rows, feat, device=device)
    static_in.copy_(src)
    graph, static_out = capture_graph(lambda: body(static_in))

    def replay() -> None:
        # the user's copy into the graph's input buffer: pageable (blocks) or pinned
        static_in.copy_(src, non_blocking=pinned)
        graph.replay()
        update(static_out)

    def close() -> None:
        nonlocal graph, static_out
        del graph, static_out

    return Step(replay, close=close, info=info)
