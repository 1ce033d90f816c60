"""``pageable_memcpy``: copies between the GPU and pageable (unpinned) host memory.

The driver stages a pageable copy through a pinned bounce buffer: the copy runs at a
fraction of the PCIe bandwidth, and the calling thread is blocked until the data is
staged, whatever the call's name (``cudaMemcpyAsync`` included), so the GPU runs dry
behind it. See docs/rules/pageable_memcpy.md.

Estimate, per pageable HtoD/DtoH copy of at least 64 KiB issued in a steady step
(smaller copies are latency-bound: pinning does not speed them up)::

    call      = [copy call start, end of the call or of the stream sync that waits for it]
                (nothing when the call is unknown or made by a thread that launches no
                kernels, e.g. a prefetcher: it then holds up no launch)
    exposed   = time in call | [copy start, copy end] with no kernel running (GPU idle or
                only copying)
    pinned    = bytes / pinned bandwidth  (this run's pinned copies, else nominal PCIe)
    cost      = host cost of an async pinned copy call (median of this run's, else 10 us)
    refill    = GPU idle after the call and copy until the GPU gets work again:
                an async pinned copy hides up to ``pinned`` of it
    saving    = max(0, exposed - cost - max(0, pinned - refill))

i.e. after ``pin_memory`` + ``non_blocking=True`` the host pays one short call, the copy
runs at pinned bandwidth while the host goes on launching. Summed per step (capped at the
step's non-kernel time in the calls and copies), mean over steady steps, then ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stepscope.advisor.base import Context, Finding, Fix, Where
from stepscope.advisor.rules import _transfers as tr
from stepscope.model.confidence import Confidence
from stepscope.model.pageable import PageableCopies, pageable_copies

ID = "pageable_memcpy"
CATEGORY = "memcpy"

FIX = Fix(
    pytorch=("Pin the host side: DataLoader(..., pin_memory=True) and "
             "x.to(device, non_blocking=True); for tensors made outside a DataLoader use "
             "tensor.pin_memory() once, or copy into a preallocated pinned buffer "
             "(torch.empty(shape, pin_memory=True)) and .copy_() from it each step; for "
             "results read back, copy into a pinned buffer with non_blocking=True and sync "
             "once."),
    tensorflow=("Let tf.data stage batches on the device: dataset.prefetch(...) with "
                "tf.data.experimental.prefetch_to_device('/gpu:0') (or "
                "experimental.copy_to_device + prefetch) as the last transformation."),
    jax=("Feed jax.device_put from host buffers that stay alive (reuse numpy arrays, no "
         "fresh allocation per step) and prefetch: device_put the next batch before "
         "running the current step (e.g. flax.jax_utils.prefetch_to_device)."),
    cuda=("Allocate host buffers with cudaHostAlloc/cudaMallocHost (or pin existing ones "
          "with cudaHostRegister) and copy with cudaMemcpyAsync on a stream; pageable "
          "copies are staged by the driver and block the calling thread."),
)


def _basis_text(r: PageableCopies) -> str:
    if r.basis == "measured_pinned":
        return f"median of this run's {r.pinned_samples} pinned copies of >= 64 KiB"
    gen = r.basis.removeprefix("pcie_gen")
    cc = f"compute capability {r.compute}" if r.compute else "an unknown GPU"
    return (f"nominal PCIe Gen{gen} x16 for {cc}; the run has no pinned copy to measure, "
            "so the figure is an assumption")


def _evidence(r: PageableCopies, results: Sequence[PageableCopies], n_ranks: int) -> list[str]:
    n = r.n_steps
    gbs = r.nbytes / r.gpu_ns if r.gpu_ns else 0.0
    kind = "pageable " + "/".join(r.directions)
    ev = [
        (f"{tr.plural(r.count / n, kind + ' copy', kind + ' copies')} of >= 64 KiB per step, "
        f"{tr.fmt_bytes(r.nbytes / n)} per step, achieved {gbs:.1f} GB/s "
        f"({tr.fmt_ms(r.gpu_ns / n / 1e6)} ms of GPU copy time per step)"),
        (f"the host was blocked {tr.fmt_ms(r.blocked_ns / n / 1e6)} ms per step in these copy "
        f"calls; no kernel ran for {tr.fmt_ms(r.exposed_ns / n / 1e6)} ms per step of the "
        "calls and copies"),
        (f"pinned, the same bytes would take ~{tr.fmt_ms(r.pinned_ns / n / 1e6)} ms per step at "
        f"{r.bandwidth_gbs:.1f} GB/s ({_basis_text(r)})"),
    ]
    if r.sites:
        ev.append("called from: " + "; ".join(r.sites))
    if n_ranks > 1:
        ev.append(f"{len(results)} of {n_ranks} ranks copy from pageable memory; the largest "
                  f"saving is on rank {r.rank} ({tr.fmt_ms(r.saving_ms)} ms per step)")
    return ev


def check(ctx: Context) -> Sequence[Finding]:
    best = tr.mean_over_ranks(ctx, (pageable_copies(ctx.graph_of(ra.rank), ra) for ra in ctx.ranks))
    if best is None:
        return []
    saving_ms, r, results = best
    n_ranks = max(1, len(ctx.ranks))
    n = r.n_steps
    gbs = r.nbytes / r.gpu_ns if r.gpu_ns else 0.0
    title = (f"{tr.plural(r.count / n, 'copy', 'copies')} per step from/to pageable host memory "
             f"({tr.fmt_bytes(r.nbytes / n)} at {gbs:.1f} GB/s): pinning saves "
             f"~{tr.fmt_ms(saving_ms)} ms per step")
    method = (
        "per copy: time with no kernel running during [copy call start, end of the call, the "
        "copy or the sync waiting for it], minus the bytes at pinned bandwidth "
        f"({r.bandwidth_gbs:.1f} GB/s, {r.basis}) and the host cost of an async pinned copy "
        f"call ({r.call_ns / 1000:.0f} us); host work after the call that an async pinned copy "
        "would overlap is credited up to the copy time; copies < 64 KiB not counted; summed "
        f"per step, mean over {n} steady steps" + (" and over ranks" if n_ranks > 1 else ""))
    return [ctx.finding(
        id=ID, category=CATEGORY, title=title, saving_ms=saving_ms, method=method,
        evidence=_evidence(r, results, n_ranks), fix=FIX,
        where=Where(rank=r.rank, steps=r.steps, start_ns=r.start_ns, end_ns=r.end_ns,
                    call_sites=r.sites),
        confidence=Confidence.HIGH if r.basis == "measured_pinned" else Confidence.MEDIUM,
    )]


@dataclass(frozen=True)
class _Rule:
    id: str = ID
    title: str = "Copies from/to pageable host memory"
    category: str = CATEGORY
    requires: tuple[str, ...] = ("memcpy",)

    def check(self, ctx: Context) -> Sequence[Finding]:
        return check(ctx)


RULE = _Rule()

__all__ = ["RULE"]
