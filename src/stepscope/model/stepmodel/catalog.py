"""Remedies: a fix a user applies, as edits of a rank's step model, with the evidence that it
applies; each is replayed alone, and the plan replays all of them together.

A remedy has an ``id`` (stable: the JSON report's), a title, the finding ids it answers, the
evidence (facts from the model, with numbers), its options where the user chooses (TF32 or
bf16 AMP; each replayed; the plan takes the best), its assumptions, and an ``apply`` that
edits a model. The catalogue (:func:`candidates`), in order: ``cuda_graphs``, ``tf32``,
``bf16_amp`` (option ``channels_last``), ``pinned_copies``, ``remove_syncs``,
``remove_round_trip``, ``ops_to_gpu``, ``remove_callback`` (``callback_remedy``),
``dataloader_workers``, ``larger_batch``, ``comm_overlap``.
The kernel remedies (``tf32``, ``bf16_amp``, ``larger_batch``, ``comm_overlap``) are in
``kernel_remedies``; the candidate and option types in ``candidate``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from stepscope.analysis import Analysis, RankAnalysis
from stepscope.analysis.kernels import kernel_frame
from stepscope.model.kernels import device_rows
from stepscope.model.pageable import PINNED_CALL_NS, pageable_copies
from stepscope.model.speedups import MIN_KERNEL_NS
from stepscope.model.stepmodel import edits, worker_batches
from stepscope.model.stepmodel.callback_remedy import remove_callback
from stepscope.model.stepmodel.candidate import Candidate, Edit, Option, ms
from stepscope.model.stepmodel.kernel_remedies import comm_overlap_remedy, larger_batch, precision
from stepscope.model.stepmodel.steps import CopyDir, HostKind, OpKind, StepModel, SyncRole

MIN_COPY_BYTES = 64 * 1024
DEFAULT_PINNED_GBS = 20.0  # PCIe gen4 x16 pinned, when the run measured none
LOADER_FACTORS = (2.0, 4.0, 8.0)  # more DataLoader workers: the loader's throughput times these


def _launch_keys(analysis: Analysis, ra: RankAnalysis, m: StepModel) -> list[str]:
    """Per host event, what it launches: the name of its first kernel, else its call's name."""
    o = m.ops
    keys = [m.names[int(n)] for n in m.host.name.tolist()]
    kj = np.flatnonzero(o.kind == OpKind.KERNEL)
    frame = kernel_frame(analysis.graph.rank(ra.rank))
    if kj.size and frame.num_rows:
        names = frame.column("name").take(pa.array(o.row[kj])).to_pylist()
        for j, n in zip(kj[::-1].tolist(), names[::-1]):  # the first op of an event wins
            keys[int(o.trigger[j])] = str(n)
    return keys


def fixed_sequences(regions: list[list[int]], thread: np.ndarray, keys: list[str]
                    ) -> list[list[int]]:
    """The part of each region that a graph captured once replays. A region of a thread that
    starts as a shorter region of that thread does and holds, in order, every launch of it
    (by what they launch) repeats it (a micro-step) with launches of its own: a graph replays one fixed launch
    sequence, the shortest repetition's, so those extra launches stay eager (gradient
    accumulation's adds after the first micro-step, which ``make_graphed_callables`` leaves
    to autograd)."""
    out = [list(r) for r in regions]
    seqs = [[keys[e] for e in r] for r in regions]
    for i, r in enumerate(regions):
        shorter = sorted((k for k in range(len(regions)) if len(regions[k]) < len(r)
                          and thread[regions[k][0]] == thread[r[0]]
                          and seqs[k][0] == seqs[i][0]),
                         key=lambda k: len(regions[k]))
        for k in shorter:
            ref, kept, j = seqs[k], [], 0
            for e, key in zip(r, seqs[i]):
                if j < len(ref) and key == ref[j]:
                    kept.append(e)
                    j += 1
            if j == len(ref):
                out[i] = kept
                break
    return out


def cuda_graphs(analysis: Analysis, ra: RankAnalysis, m: StepModel) -> Candidate | None:
    regions = edits.launch_regions(m)
    if not regions:
        return None
    graphed = fixed_sequences(regions, m.host.thread, _launch_keys(analysis, ra, m))
    n = sum(len(r) for r in regions)
    eager = n - sum(len(r) for r in graphed)
    h = m.host
    idx = np.concatenate([np.asarray(r) for r in regions])
    cost = int(h.pre[idx[1:]].sum() + h.own[idx].sum())
    return Candidate(
        "cuda_graphs", "CUDA graphs for the launch-bound regions (torch.compile "
        "mode='reduce-overhead')", ("launch_bound", "host_bound"),
        (f"{n} launches in {len(regions)} region(s) without a host wait per step"
         + (f"; {eager} of them differ between repetitions of a region and stay eager"
            if eager else ""),
         f"host dispatch and launch cost in them: {ms(cost)} per step"),
        (Option("cuda_graphs", "CUDA graphs", lambda x: edits.graph_regions(x, graphed)),),
        (f"one graph launch costs {edits.GRAPH_LAUNCH_NS / 1e3:.0f} us of host time; its "
         f"kernels follow each other {edits.GRAPH_NODE_GAP_NS / 1e3:.0f} us apart",
         f"host work over {edits.KEEP_HOST_NS / 1e6:.0f} ms between two launches is not "
         "dispatch and stays; so does the host work outside the captured regions",
         "a graph is captured once: a region repeated in the step (micro-steps) replays the "
         "launches of its shortest repetition; the others' extra launches stay eager"))


def _pinned_bandwidth(analysis: Analysis, ra: RankAnalysis) -> tuple[float, str]:
    """The pinned copy bandwidth (GB/s) and where it comes from."""
    pc = pageable_copies(analysis.graph.rank(ra.rank), ra)
    if pc is not None and pc.bandwidth_gbs > 0:
        return pc.bandwidth_gbs, f" ({pc.basis})" if pc.basis else " (assumed)"
    return DEFAULT_PINNED_GBS, " (assumed)"


def _big_copies(m: StepModel) -> tuple[np.ndarray, np.ndarray]:
    """Per host event: it issues a copy of at least ``MIN_COPY_BYTES`` (either direction,
    pageable or pinned); per op: it is a copy of that size."""
    h, o = m.host, m.ops
    copies = np.isin(h.copy, (CopyDir.HTOD, CopyDir.DTOH))
    big_ops = (o.kind == OpKind.MEMCPY) & (o.nbytes >= MIN_COPY_BYTES)
    return np.asarray(copies & np.isin(np.arange(h.size), o.trigger[big_ops]), dtype=bool), \
        np.asarray(big_ops, dtype=bool)


def _big_pageable(m: StepModel) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_big_copies`, the host events restricted to pageable copies."""
    events, big_ops = _big_copies(m)
    return events & m.host.pageable, big_ops


def _pin(m: StepModel, evs: np.ndarray, gbs: float) -> Edit:
    """The edit that makes the pageable copies of events ``evs`` pinned and non-blocking:
    their ops move at ``gbs``; host-to-device ones, and the sync a blocking ``.to()`` added
    right after one, stop blocking the host."""
    h, o = m.host, m.ops
    ops = np.isin(o.trigger, evs) & _big_pageable(m)[1]
    htod = evs[h.copy[evs] == CopyDir.HTOD]
    follow = np.zeros(h.size, dtype=bool)
    for e in htod.tolist():
        nxt = [k for k in range(e + 1, h.size) if h.thread[k] == h.thread[e]]
        if nxt and h.role[nxt[0]] == SyncRole.COPY_SYNC:
            follow[nxt[0]] = True
    free = np.zeros(h.size, dtype=bool)
    free[htod] = True

    def apply(x: StepModel) -> StepModel:
        x = edits.copies_at(x, ops, gbs)
        x = edits.unblock(x, free, PINNED_CALL_NS)
        return edits.unblock(x, follow, 0)

    return apply


def pinned(analysis: Analysis, ra: RankAnalysis, m: StepModel) -> Candidate | None:
    o = m.ops
    evs = np.flatnonzero(_big_pageable(m)[0])
    if evs.size == 0:
        return None
    gbs, basis = _pinned_bandwidth(analysis, ra)
    ops = np.isin(o.trigger, evs) & _big_pageable(m)[1]
    return Candidate(
        "pinned_copies", "Pinned, non-blocking copies (pin_memory=True, "
        "non_blocking=True)", ("pageable_memcpy", "sync_calls", "excess_transfers"),
        (f"{evs.size} pageable copies of {int(o.nbytes[ops].sum()) / 2**20:.1f} MiB per step, "
         f"{ms(float(o.dur[ops].sum()))} on the GPU",),
        (Option("pinned_copies", "pinned + non_blocking", _pin(m, evs, gbs)),),
        (f"pinned copies run at {gbs:.1f} GB/s{basis}",
         "host-to-device copies stop blocking the host; a device-to-host copy's data is read "
         "by the host, which still waits for it"))


def _syncs(m: StepModel, role: SyncRole) -> np.ndarray:
    return np.asarray((m.host.kind == HostKind.BLOCK) & (m.host.role == role), dtype=bool)


def remove_syncs(m: StepModel) -> Candidate | None:
    # an event sync on a step two or more back keeps steps in flight (flow control, not a
    # serialising sync): it stays
    mask = _syncs(m, SyncRole.EXPLICIT) & (m.host.back < 2)
    if not mask.any():
        return None
    return Candidate(
        "remove_syncs", "Remove the explicit syncs (torch.cuda.synchronize())", ("sync_calls",),
        (f"{int(mask.sum())} explicit sync(s) per step",),
        (Option("remove_syncs", "remove", lambda x: edits.unblock(x, mask, 0)),),
        ("nothing in the step needs the syncs' ordering (timing code, debugging)",))


def remove_round_trip(m: StepModel) -> Candidate | None:
    h = m.host
    sync = _syncs(m, SyncRole.READBACK)
    if not sync.any():
        return None
    mask = sync.copy()
    for e in np.flatnonzero(sync).tolist():  # the device-to-host copy just before it
        prev = [k for k in range(e - 1, 0, -1) if h.thread[k] == h.thread[e]]
        if prev and h.copy[prev[0]] == CopyDir.DTOH:
            mask[prev[0]] = True
    return Candidate(
        "remove_round_trip", "Keep values on the GPU (no .item() / .cpu() each step)", ("sync_calls", "excess_transfers"),
        (f"{int(sync.sum())} device-to-host read(s) waited for per step",),
        (Option("remove_round_trip", "keep on device",
                lambda x: edits.unblock(x, mask, PINNED_CALL_NS)),),
        ("the host work around the reads (CPU compute on the values) stays",))


def ops_to_gpu(ra: RankAnalysis, m: StepModel) -> Candidate | None:
    """The host computation of each round trip done on the GPU: the copies, their syncs and
    the host work between them go; a GPU op that reads and writes the trip's bytes once at
    the device's memory bandwidth (at least ``MIN_KERNEL_NS``) takes their place."""
    trips = edits.round_trips(m)
    if not trips:
        return None
    h, o = m.host, m.ops
    bws = [float(d.get("memory_bandwidth_gbs") or 0.0) for d in device_rows(ra).values()]
    bw = max(bws, default=0.0)
    costs, host, nbytes = [], 0, 0
    for trip in trips:
        ops = np.isin(o.trigger, trip) & (o.kind == OpKind.MEMCPY)
        b = int(o.nbytes[ops & (h.copy[o.trigger] == CopyDir.DTOH)].sum())
        nbytes += b
        host += int(h.pre[trip[1:]].sum())
        costs.append(max(MIN_KERNEL_NS, int(2 * b / bw)) if bw > 0 else MIN_KERNEL_NS)
    launches = h.own[h.kind == HostKind.LAUNCH]
    launch_ns = int(np.median(launches)) if launches.size else 0
    return Candidate(
        "ops_to_gpu", "Do the host computation between the copies on the GPU (torch ops on "
        "the device tensor)", ("excess_transfers", "sync_calls", "host_bound"),
        (f"{len(trips)} round trip(s) per step: {nbytes / 2**20:.1f} MiB to the host, "
         f"{ms(host)} of host work before the copy back",),
        (Option("ops_to_gpu", "on the GPU",
                lambda x: edits.ops_to_gpu(x, trips, costs, launch_ns)),),
        ("the GPU op reads and writes the data once at "
         + (f"{bw:.0f} GB/s (the device's peak memory bandwidth)" if bw > 0 else
            "an unknown bandwidth (the shortest kernel assumed)")
         + ": a lower bound for a sort or a search",
         "one kernel launch replaces the copies and their syncs"))


def batch_copies(m: StepModel, only_pageable: bool = True) -> np.ndarray:
    """Host events that copy a batch to the GPU: on an input wait's thread, after the wait and
    before that thread's next kernel launch, the pageable (with ``only_pageable=False`` also
    the pinned) host-to-device copies of at least ``MIN_COPY_BYTES`` (a ``.to(device)`` of
    what the loader returned)."""
    h, o = m.host, m.ops
    big = (_big_pageable(m) if only_pageable else _big_copies(m))[0] & (h.copy == CopyDir.HTOD)
    launches = np.zeros(h.size, dtype=bool)
    launches[o.trigger[o.kind == OpKind.KERNEL]] = True
    out = np.zeros(h.size, dtype=bool)
    for i in np.flatnonzero(h.kind == HostKind.INPUT).tolist():
        for e in range(i + 1, h.size):
            if h.thread[e] != h.thread[i]:
                continue
            if launches[e] or h.kind[e] == HostKind.INPUT:
                break
            out[e] = big[e]
    return out


def dataloader(analysis: Analysis, ra: RankAnalysis, m: StepModel) -> Candidate | None:
    """More workers: the loader delivers a batch ``f`` times as often, and the step replays
    at that period, or as the rest of it where that is slower (:func:`edits.input_at_period`,
    applied after the other remedies: what TF32 takes off the compute, a loader at its pace
    gives back as wait). The loader's period is the step where workers make the batches (the
    loader sets the pace), and the wait itself where the training process makes them
    (``num_workers=0``: it loads while nothing else runs). With ``pin_memory=True`` the
    batch's pageable copies (:func:`batch_copies`) become pinned and non-blocking, as
    ``pinned_copies`` makes them. However many workers, the period is at least the time the
    training process takes to hand the step's batches over from them
    (:func:`worker_batches.pinned_handover_ns`; where workers already make the batches, at most
    the step they deliver at now)."""
    inp = m.host.kind == HostKind.INPUT
    wait = int(m.host.own[inp].sum())
    if wait <= 0:
        return None
    in_process = ra.input.in_process
    period = float(wait if in_process else m.step_ns)
    every = batch_copies(m, only_pageable=False)  # the pageable ones are pinned by the option
    batch = np.flatnonzero(every & m.host.pageable)
    gbs, basis = _pinned_bandwidth(analysis, ra)
    pin = _pin(m, batch, gbs) if batch.size else None
    sizes = worker_batches.batch_bytes(m, every)
    floor = sum(worker_batches.pinned_handover_ns(b) for b in sizes)
    if not in_process:  # workers deliver a batch each step already: no slower than that
        floor = min(floor, period)

    def option(f: float) -> Option:
        def apply(x: StepModel) -> StepModel:
            return edits.input_at_period(pin(x) if pin is not None else x,
                                         max(period / f, floor))

        more = "prefetch" + (", pin_memory" if pin is not None else "")
        title = (f"num_workers={f:g} (batches made in {f:g} worker processes), {more}"
                 if in_process else f"{f:g}x the loader's throughput (num_workers x{f:g}, {more})")
        return Option(f"x{f:g}", title, apply, last=True)

    opts = tuple(option(f) for f in LOADER_FACTORS)
    pinned_note = (f"pin_memory=True: the batch's {batch.size} pageable host-to-device "
                   f"copies become pinned and non-blocking, at {gbs:.1f} GB/s{basis}",) \
        if pin is not None else ()
    source = (f"the training process makes each batch in {ms(wait)} (num_workers=0), with "
              f"nothing else running" if in_process else
              f"the loader delivers a batch every {ms(period)}")
    scaling = ("each worker makes a batch as fast as the training process did"
               if in_process else "the loader scales with its workers")
    return Candidate(
        "dataloader_workers", "More DataLoader workers and prefetching"
        + (", pinned batches" if pin is not None else ""), ("input_bound",),
        (f"the step waits {ms(wait)} for input; {source}",),
        opts, (f"{scaling}; the step is no faster than the loader's period divided by the "
               "option's factor", *pinned_note,
               *((worker_batches.describe(sizes),) if sizes else ())))


def candidates(analysis: Analysis, ra: RankAnalysis, m: StepModel) -> list[Candidate]:
    out: list[Candidate | None] = [cuda_graphs(analysis, ra, m), *precision(analysis, ra, m),
                                   pinned(analysis, ra, m), remove_syncs(m),
                                   remove_round_trip(m), ops_to_gpu(ra, m),
                                   remove_callback(analysis, ra, m),
                                   dataloader(analysis, ra, m),
                                   larger_batch(analysis, ra, m),
                                   comm_overlap_remedy(analysis, ra, m)]
    return [c for c in out if c is not None]


__all__ = ["Candidate", "Option", "batch_copies", "candidates"]
