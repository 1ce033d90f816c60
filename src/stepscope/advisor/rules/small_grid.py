"""small_grid: significant kernel time with fewer blocks than the GPU has SMs.

A block runs on one SM; a grid of 16 blocks on a 132-SM H100 leaves 116 SMs idle for the
whole kernel (the seeds' 16 blocks x 128 threads kernel that uses under a tenth of the GPU).

Estimate, per launch with ``blocks < SMs`` (communication kernels excepted)::

    exposed = duration - time overlapped by other kernels on the same device
    saving  = exposed - max(2 us, exposed * blocks / SMs)

summed per steady step and capped by the GPU work still queued after the step's last launch
(``speedups.Scaling``: only GPU-bound time shortens the step), averaged over the steady
steps. It is an upper bound: it assumes the work spreads evenly
over all SMs and that the kernel stays bound by how much of the GPU it occupies (a kernel that
becomes memory-bound once spread gains less).

User kernels (CUDA, Triton, CuPy, Numba) and library/framework kernels (cuBLAS, cuDNN,
PyTorch ATen, XLA) are reported apart: a small grid in a library kernel mostly means small
tensors (or a split-K / persistent choice of the library), so that finding is capped at
``info`` with low confidence.
"""

from __future__ import annotations

from collections.abc import Sequence

from stepscope.advisor.base import Context, Finding, Fix, Severity, Where
from stepscope.advisor.rules._kernels import largest_per_key, short, where_for
from stepscope.model.confidence import Confidence
from stepscope.model.kernels import (
    KernelSaving,
    per_step_ms,
)
from stepscope.model.small_grid import GridGroup, grid_groups
from stepscope.model.speedups import MIN_KERNEL_NS

FIX_CUSTOM = Fix(
    cuda="Launch at least as many blocks as the GPU has SMs, better several per SM: size the grid "
         "from the device (`cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)`; "
         "grid = sms * k with k >= 2..4 and a grid-stride loop over the data), or give each "
         "block less work (smaller tiles, split the reduction dimension). Triton: a smaller "
         "BLOCK_SIZE so that `grid = (triton.cdiv(n, BLOCK_SIZE),)` has more programs.",
    pytorch="For your own CUDA extension or Triton kernel, size the grid as under CUDA. Otherwise "
            "give the kernel more work per launch (larger batch) or let `torch.compile` "
            "regenerate and fuse it.",
    tensorflow="Larger batch per step; compile with XLA (`tf.function(jit_compile=True)`) so "
               "small ops fuse into larger kernels; custom ops: size the grid as under CUDA.",
    jax="Larger batch per device; Pallas kernels: a larger grid (smaller blocks); custom calls: "
        "size the grid as under CUDA.",
)
FIX_LIBRARY = Fix(
    cuda="Library kernels size their grid from the problem: give them larger problems (batch "
         "several small GEMMs into one batched GEMM, larger batch).",
    pytorch="Larger batch (or sequence) per step so each op has more work; `torch.compile` "
            "fuses small ops into larger kernels; several small matmuls can become one "
            "`torch.bmm` or a grouped GEMM.",
    tensorflow="Larger batch; XLA (`jit_compile=True`) fuses small ops.",
    jax="Larger batch per device; `jax.vmap` several small ops into one batched op.",
)


def _kernel_line(g: GridGroup, k: KernelSaving) -> str:
    sk = g.sk
    blocks = int(sk.col("blocks")[k.row])
    threads = int(sk.col("threads")[k.row])
    cov = float(sk.col("sm_coverage")[k.row])
    return (f"{short(k.name)}: {blocks} blocks x {threads} threads on {g.sms} SMs "
            f"({cov:.0%} of the SMs), {k.calls / sk.n_steps:g} launch(es) and "
            f"{per_step_ms(k.time_ns, sk):.3f} ms per step, saving up to "
            f"{per_step_ms(k.saving_ns, sk):.3f} ms of kernel time")


def _finding(ctx: Context, g: GridGroup, is_custom: bool, n_ranks: int) -> Finding:
    top = g.items[0]
    blocks = int(g.sk.col("blocks")[top.row])
    who = "" if is_custom else "library/framework "
    title = (f"{g.n_items} {who}kernel(s) launch fewer blocks than the {g.sms} SMs "
             f"({short(top.name, 48)}: {blocks} blocks); up to {g.saving_ms:.2f} ms per step")
    evidence = [
        (f"{g.time_ms:.3f} ms per step ({g.time_ms / ctx.step_ms:.0%} of the {ctx.step_ms:.2f} ms "
         f"step) in kernels whose grid leaves SMs idle"),
        *(_kernel_line(g, k) for k in g.items[:5]),
        g.scaling.evidence(g.raw_ms, g.saving_ms),
    ]
    if g.n_items > 5:
        evidence.append(f"... and {g.n_items - 5} more kernel name(s)")
    if n_ranks > 1:
        evidence.append(f"rank {g.rank} shown (largest saving of {n_ranks} ranks)")
    note = "" if is_custom else (
        "library and framework kernels size their grids from the problem: a small grid there "
        "usually means small tensors, or a split-K / persistent-kernel choice that is right")
    return ctx.finding(
        id=RULE.id, category=RULE.category, title=title, saving_ms=g.saving_ms,
        method=(f"sum over launches with blocks < SMs of exposed time x (1 - blocks/SMs), never "
                f"below {MIN_KERNEL_NS / 1000:g} us per launch, per steady step, "
                f"{g.scaling.method}; an upper bound: assumes the work spreads evenly over all "
                f"SMs"),
        evidence=evidence, fix=FIX_CUSTOM if is_custom else FIX_LIBRARY,
        where=where_for(g.ra, g.sk, g.items) if g.items else Where(rank=g.rank),
        confidence=Confidence.MEDIUM if is_custom else Confidence.LOW, note=note,
        max_severity=Severity.CRITICAL if is_custom else Severity.INFO)


class SmallGrid:
    id = "small_grid"
    title = "Kernels with fewer blocks than SMs"
    category = "occupancy"
    requires: tuple[str, ...] = ("kernels", "devices")

    def check(self, ctx: Context) -> Sequence[Finding]:
        best = largest_per_key(grid_groups(ctx.analysis, ra) for ra in ctx.ranks)
        return [_finding(ctx, g, is_custom, len(ctx.ranks))
                for is_custom, g in sorted(best.items(), reverse=True)
                if ctx.worth_reporting(g.saving_ms)]


RULE = SmallGrid()
