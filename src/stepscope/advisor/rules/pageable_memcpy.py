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

import numpy as np

from stepscope.advisor.base import Context, Finding, Fix, Where
from stepscope.advisor.rules import _transfers as tr
from stepscope.analysis import RankAnalysis
from stepscope.analysis.busy import IntervalSet
from stepscope.analysis.copies import pageable_at_pinned_ns
from stepscope.model import transfers as mt
from stepscope.model.confidence import Confidence

ID = "pageable_memcpy"
CATEGORY = "memcpy"
PINNED_CALL_NS = 10_000  # host cost of an async pinned copy call when the run shows none

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


@dataclass(frozen=True)
class RankResult:
    rank: int
    n_steps: int
    count: int  # pageable copies >= 64 KiB in the steady steps
    nbytes: int
    gpu_ns: int  # their GPU copy time
    blocked_ns: int  # host time in their calls (incl. the syncs waiting for them)
    exposed_ns: int  # no-kernel time in their spans
    pinned_ns: int  # the same bytes at pinned bandwidth
    saving_ns: int  # over the steady steps
    directions: tuple[str, ...]
    bandwidth_gbs: float  # pinned bandwidth used
    basis: str
    pinned_samples: int
    compute: str  # "9.0"
    call_ns: int
    steps: tuple[int, ...]  # StepInfo indexes with offending copies
    start_ns: int
    end_ns: int
    sites: tuple[str, ...]

    @property
    def saving_ms(self) -> float:
        return self.saving_ns / self.n_steps / 1e6


def _basis_text(r: RankResult) -> str:
    if r.basis == "measured_pinned":
        return f"median of this run's {r.pinned_samples} pinned copies of >= 64 KiB"
    gen = r.basis.removeprefix("pcie_gen")
    cc = f"compute capability {r.compute}" if r.compute else "an unknown GPU"
    return (f"nominal PCIe Gen{gen} x16 for {cc}; the run has no pinned copy to measure, "
            "so the figure is an assumption")


def analyze_rank(ctx: Context, ra: RankAnalysis) -> RankResult | None:
    win = mt.steady_windows(ra)
    if win.n == 0:
        return None
    g = ctx.graph_of(ra.rank)
    api = mt.load_api(g)
    c = mt.load_copies(g, win, api)
    sel = (c.step >= 0) & c.pageable & (c.htod | c.dtoh) & ~c.tiny
    if not mt.recurring(c.step[sel], win.n):
        return None
    idx = np.flatnonzero(sel)
    # pinned bandwidth per direction (this run's pinned copies, else nominal PCIe)
    est = np.zeros(c.s.size, dtype=np.int64)
    bw_used, basis, samples = 0.0, "", 0
    call = np.full(c.s.size, PINNED_CALL_NS, dtype=np.int64)
    directions = []
    for d, m in (("HtoD", c.htod), ("DtoH", c.dtoh)):
        dm = sel & m
        if not dm.any():
            continue
        directions.append(d)
        pe = pageable_at_pinned_ns(g, win.starts, win.ends, d)
        est[dm] = np.minimum(c.ns[dm], np.ceil(c.nbytes[dm] / pe.bandwidth_gbs).astype(np.int64))
        if not basis or pe.pageable_ns > 0:
            bw_used, basis, samples = pe.bandwidth_gbs, pe.basis, pe.pinned_samples
        pinned_calls = m & c.pinned & c.has_api & (c.step >= 0)
        if pinned_calls.any():
            call[dm] = int(np.median((c.api_e - c.api_s)[pinned_calls]))
    host = mt.on_launch_thread(c, api)
    end_call = mt.call_end(c, mt.sync_ends(ra))
    # the host call (with the sync waiting for it) and the GPU copy: two intervals
    call_s = np.where(host, c.api_s, c.s)
    call_e = np.where(host, end_call, c.s)
    span_s, span_e = np.minimum(call_s, c.s), np.maximum(call_e, c.e)
    act = mt.activity(g)
    kern, busy = act.kernels, act.busy
    exposed = mt.uncovered_pair(kern, call_s, call_e, c.s, c.e)
    step_end = win.ends[np.maximum(c.step, 0)]
    refill = np.where(host, mt.gap_to_next(busy, span_e, step_end), 0)
    per_call = np.where(host, call, 0)
    saving = np.maximum(0, exposed - per_call - np.maximum(0, est - refill))
    # per step, never more than the non-kernel time of the union of calls and copies
    per_step = np.zeros(win.n, dtype=np.int64)
    np.add.at(per_step, c.step[idx], saving[idx])
    spans = IntervalSet.of(np.concatenate((call_s[idx], c.s[idx])),
                           np.concatenate((call_e[idx], c.e[idx]))) - kern
    per_step = np.minimum(per_step, spans.within(win.starts, win.ends))
    blocked = np.where(host, call_e - call_s, 0)
    hit_steps = sorted({int(win.steps[int(k)]) for k in np.unique(c.step[idx])})
    first = idx[c.step[idx] == c.step[idx].min()]
    sites = mt.call_sites(g, c.pid[idx], c.tid[idx],
                          np.where(c.has_api[idx], c.api_s[idx], c.s[idx]),
                          np.where(c.has_api[idx], c.api_e[idx], c.e[idx]))
    dev = ra.devices[0] if ra.devices else {}
    cc = (f"{dev.get('compute_major')}.{dev.get('compute_minor')}"
          if dev.get("compute_major") is not None else "")
    pinned_call = call[idx]
    return RankResult(
        rank=ra.rank, n_steps=win.n, count=int(idx.size), nbytes=int(c.nbytes[idx].sum()),
        gpu_ns=int(c.ns[idx].sum()), blocked_ns=int(blocked[idx].sum()),
        exposed_ns=int(exposed[idx].sum()), pinned_ns=int(est[idx].sum()),
        saving_ns=int(per_step.sum()), directions=tuple(directions), bandwidth_gbs=bw_used,
        basis=basis, pinned_samples=samples, compute=cc,
        call_ns=int(np.median(pinned_call)) if pinned_call.size else PINNED_CALL_NS,
        steps=tuple(hit_steps), start_ns=int(span_s[first].min()),
        end_ns=int(span_e[first].max()), sites=mt.top_labels(sites.label),
    )


def _evidence(r: RankResult, results: Sequence[RankResult], n_ranks: int) -> list[str]:
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
    best = tr.mean_over_ranks(ctx, (analyze_rank(ctx, ra) for ra in ctx.ranks))
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

__all__ = ["RULE", "RankResult", "analyze_rank"]
