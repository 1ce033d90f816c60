"""What each remedy of exposed communication would save per step: overlapping it with compute,
or removing / shrinking it (the method: docs/rules/exposed_communication.md).

The communication kernels of a rank's steady steps are split into two groups by evidence from
the trace (never by program name):

- **removable**: a collective whose result the host waits for right after it, with nothing
  queued behind it (a synchronising runtime call or copy that returns within
  ``SYNC_AFTER_NS`` of its end, and no kernel starts between: a metric or loss reduction
  read with ``.item()``, a check of the replicas), or one that repeats what other
  collectives of the same operation in the step already carry while those mostly overlap
  compute (as long as they are together, within a factor 2: a check or second reduction of
  the same data).
  Remedy ``remove``: the step loses its exposed time, the SMs it held while compute ran
  beside it (``sm_share`` of its overlapped time) and, for one the host waited on, the round
  trip: the GPU's idle time from its end to the next kernel (the host waited, then had to
  queue the next work; ``MAX_ROUND_TRIP_NS`` at most per call).
- **overlappable**: the rest (a gradient reduction issued after the whole backward). Remedy
  ``overlap``: split it into ``k`` buckets that each start under the compute before it. With a
  latency-bandwidth (Hockney) model ``t(n) = alpha + n / beta`` per call, the group's
  transfer ``T`` over ``m`` calls has a bandwidth part ``T - m alpha``, and in ``k`` buckets::

      T_k      = k alpha + (T - m alpha)           (the split costs (k - m) alpha more)
      tail_k   = alpha + (T - m alpha) / k         (the last bucket: nothing left to hide under)
      hidden_k = min(T_k - tail_k, compute free of communication + what already hides it)
      after_k  = T_k - hidden_k                    (still exposed)
      cost_k   = after_k + c x hidden_k            (c: compute slowdown per hidden ns)
      overlap  = exposed + c x (already overlapped) - min over k of cost_k

  ``c`` (:func:`contention`): the compute the collective would run under loses the SMs the
  communication kernels hold (one SM per NCCL block); a kernel whose grid needed ``w`` waves
  on all ``N`` SMs needs ``w'`` on the ``N - b`` left, so per ns it runs beside the
  collective it loses ``1 - w / w'``; time-weighted over the last compute kernels before the
  group (as much compute as the group lasts), with each kernel's resident blocks per SM. The
  SM share ``b / N`` when grids are unknown. ``k`` is the best bucket count (up to
  ``MAX_BUCKETS``); the evidence gives its bucket size.
- ``overlap_bf16`` (fp32 all-reduce / reduce-scatter in the overlappable group): the same with
  half the bandwidth part, less the casts (fp32 -> bf16 and back: 3 x the fp32 bytes through
  memory at ``CAST_EFFICIENCY`` of the memory bandwidth) where they are kernels of their own
  (PyTorch's comm hooks); an XLA program (kernels named ``*fusion*``) fuses them: no cost.

``ALPHA_NS`` is calibrated, not derived: on 2 x H100 NVLink 4 (NCCL 2.28.9, torch 2.11,
docs/accuracy.md "Several GPUs") one 1.07 GB fp32 all-reduce took 3.23 ms and 16 of 64 MB
4.81 ms: (4.81 - 3.23) / 15 = 0.105 ms per extra call; on 4 x H100 0.11 ms. PCIe was not
measured: the NVLink figure is used there too.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from stepscope.analysis import RankAnalysis
from stepscope.analysis.busy import IntervalSet
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.kernel_names import signature_head
from stepscope.model import transfers as mt
from stepscope.model.comm_inputs import SYNC_AFTER_NS, DeviceComm, comm_inputs
from stepscope.model.links import link_of

ALPHA_NS: dict[str, int] = {"NVLink": 100_000, "PCIe": 100_000}
DEFAULT_ALPHA_NS = 100_000
MAX_BUCKETS = 64
MAX_ROUND_TRIP_NS = 5_000_000  # the GPU idle after a waited-on collective counted as its cost
MOSTLY_HIDDEN = 0.5  # other collectives of the op that overlap at least this much
CAST_EFFICIENCY = 0.8  # of the memory bandwidth a cast kernel reaches
# peak memory bandwidth, GB/s, by device name (first hit wins), where the devices table has none
HBM_GBS: tuple[tuple[str, float], ...] = (
    ("B200", 8000.0), ("H200", 4800.0), ("H100 80GB HBM3", 3350.0), ("H100 SXM", 3350.0),
    ("H100 PCIe", 2000.0), ("H100 NVL", 3900.0), ("A100-SXM4-80GB", 2039.0),
    ("A100-SXM4-40GB", 1555.0), ("A100 80GB PCIe", 1935.0), ("MI300X", 5300.0),
)
_F32 = re.compile(r"(^|_)f32(_|$)|float32|Float\b")


# ops whose second call over the same data is a repeat (point-to-point and gathers of
# pipeline or sharded programs repeat by design, once per micro-batch or layer)
_REDUCTIONS = frozenset({"allreduce", "reduce"})
_SPLITTABLE = frozenset({"allreduce", "reducescatter"})  # split into buckets of any size


@dataclass(frozen=True)
class Remedy:
    kind: str  # "overlap" | "overlap_bf16" | "remove"
    saving_ns: float  # summed over the steady steps
    exposed_ns: int  # of the group it applies to, summed over the steady steps
    detail: str  # how it was reached, for the evidence


@dataclass(frozen=True)
class Split:
    """The best split of an overlappable group into buckets (one step)."""

    buckets: int
    cost_ns: float
    tail_ns: float
    hidden_ns: float


def contention(widths: list[tuple[int, int, int]], sms: int, comm_blocks: float) -> float:
    """Compute slowdown per ns beside the collective: time-weighted ``1 - w / w'`` over
    ``(blocks, resident blocks per SM, duration)`` of compute kernels; the SM share
    ``comm_blocks / sms`` when none has a grid."""
    if sms <= 0:
        return 0.0
    share = min(1.0, comm_blocks / sms)
    left = sms - min(sms - 1, int(round(comm_blocks)))
    num = den = 0.0
    for blocks, per_sm, dur in widths:
        if blocks <= 0 or dur <= 0:
            continue
        a = max(1, per_sm)
        w, w2 = math.ceil(blocks / (a * sms)), math.ceil(blocks / (a * left))
        num += (1.0 - w / w2) * dur
        den += dur
    return num / den if den > 0 else share


def best_split(t_ns: float, calls: int, alpha_ns: float, c: float, free_ns: float,
               bw_scale: float = 1.0, splittable: bool = True) -> Split:
    """The bucket count with the least step cost (module docstring); ``bw_scale`` scales the
    bandwidth part (0.5: half the bytes); not ``splittable`` (point-to-point, all-gather):
    the calls as they are, each overlapped."""
    bw = max(0.0, t_ns - calls * alpha_ns) * bw_scale
    best: Split | None = None
    for k in (range(1, MAX_BUCKETS + 1) if splittable else (max(1, calls),)):
        total = k * alpha_ns + bw
        tail = alpha_ns + bw / k
        hidden = max(0.0, min(total - tail, free_ns))
        cost = total - hidden + c * hidden
        if best is None or cost < best.cost_ns - 1e-9:
            best = Split(k, cost, tail, hidden)
    assert best is not None
    return best


@dataclass(frozen=True)
class _Kernel:
    start: int
    end: int
    exposed: int
    name: str
    step: int  # index into the steady windows
    next_start: int  # the rank's first kernel start at or after ``end``; -1: none


def remedies(g: StepGraph, ra: RankAnalysis, n_steps: int, waits: IntervalSet,
             sm_share: float, comm_blocks: float) -> tuple[Remedy, ...]:
    """Each remedy's saving over the rank's ``n_steps`` steady windows; ``waits``: the
    rank's waits for late ranks inside collectives (not exposed transfer). Per device of the
    rank (its own compute; several devices of one process run side by side), then the mean
    over the devices with communication. Reads the rank's ``model.comm_inputs``."""
    ci = comm_inputs(g, ra)
    if ci is None:
        return ()
    link = link_of(ra.devices)
    alpha = float(ALPHA_NS.get(link.kind, DEFAULT_ALPHA_NS) if link else DEFAULT_ALPHA_NS)
    per_dev: list[list[Remedy]] = []
    for dc in ci.devices:
        ks = _comm_kernels(dc, dc.compute | waits)
        per_dev.append(_device_remedies(g, dc, ra, ks, n_steps, alpha, sm_share, comm_blocks))
    return _mean(per_dev)


def _device_remedies(g: StepGraph, dc: DeviceComm, ra: RankAnalysis, ks: list[_Kernel],
                     n_steps: int, alpha: float, sm_share: float,
                     comm_blocks: float) -> list[Remedy]:
    """The remedies of one device's communication kernels ``ks``."""
    removable = _removable(dc, ks)
    out: list[Remedy] = []
    rem = [(x, r) for x, r in zip(ks, removable, strict=True) if r is not None]
    exposed = sum(x.exposed for x, _ in rem)
    if rem and exposed > 0:
        freed = sm_share * sum(x.end - x.start - x.exposed for x, _ in rem)
        trips = float(sum(r for _, r in rem))
        waited = sum(1 for _, r in rem if r > 0)
        out.append(Remedy("remove", exposed + freed + trips, exposed,
                          f"{len(rem)} collectives over {n_steps} steps whose exposed time "
                          f"goes with them (the host waits on them before queueing more, or "
                          f"they repeat what the step's overlapped collectives carry)"
                          + (f"; with {waited} of them the host's round trip: "
                             f"{trips / n_steps / 1e6:.3f} ms per step of GPU idle before the "
                             f"next kernel" if waited else "")))
    ov = [x for x, r in zip(ks, removable, strict=True) if r is None]
    if ov and sum(x.exposed for x in ov) > 0:
        out.extend(_overlap(g, dc, ra, ov, alpha, sm_share, comm_blocks))
    return out


def _mean(per_dev: list[list[Remedy]]) -> tuple[Remedy, ...]:
    """Per remedy kind, the mean over the devices (a device without it counts 0)."""
    if not per_dev:
        return ()
    n = len(per_dev)
    out: list[Remedy] = []
    kinds = [m.kind for rs in per_dev for m in rs]
    for kind in dict.fromkeys(kinds):
        ms = [m for rs in per_dev for m in rs if m.kind == kind]
        out.append(Remedy(kind, sum(m.saving_ns for m in ms) / n,
                          int(sum(m.exposed_ns for m in ms) / n), ms[0].detail))
    return tuple(out)


def _comm_kernels(dc: DeviceComm, hidden_by: IntervalSet) -> list[_Kernel]:
    exposed = mt.uncovered(hidden_by, dc.start, dc.end)
    return [_Kernel(int(dc.start[i]), int(dc.end[i]), int(exposed[i]),
                    dc.names[int(dc.name_idx[i])], int(dc.step[i]), int(dc.next_start[i]))
            for i in range(dc.start.size)]


def _removable(dc: DeviceComm, ks: list[_Kernel]) -> list[int | None]:
    """Per kernel, None when it is not removable, else the round trip it costs (ns, 0 for
    none): the host waits for it (a sync or copy call returns within ``SYNC_AFTER_NS`` of
    its end, and no kernel starts on the rank between its end and that return: nothing was
    queued behind it; the round trip is the GPU idle from its end to the next kernel, at most
    ``MAX_ROUND_TRIP_NS``), or it repeats the step's overlapped collectives of its operation
    (as long as they are together, within a factor 2, while it is mostly exposed; no round
    trip)."""
    a_s, a_e = dc.sync_start, dc.sync_end
    out: list[int | None] = []
    for x in ks:
        hit = (a_s < x.end) & (a_e >= x.end) & (a_e <= x.end + SYNC_AFTER_NS)
        waited, trip = False, 0
        if hit.any():
            ret = int(a_e[hit].max())
            waited = x.next_start < 0 or x.next_start >= ret
            if waited and x.next_start >= 0:
                trip = min(MAX_ROUND_TRIP_NS, x.next_start - x.end)
        op = _op(x.name)
        others = [y for y in ks if y.step == x.step and y is not x and _op(y.name) == op
                  and (y.end - y.start) > 0
                  and 1 - y.exposed / (y.end - y.start) >= MOSTLY_HIDDEN]
        dur, carried = x.end - x.start, sum(y.end - y.start for y in others)
        repeat = (op in _REDUCTIONS and x.exposed > 0.5 * dur
                  and 0.5 * carried <= dur <= 2 * carried)
        out.append(trip if waited else (0 if repeat else None))
    return out


def _op(name: str) -> str:
    head = signature_head(name).lower()
    for o in ("allreduce", "allgather", "reducescatter", "sendrecv", "broadcast", "alltoall",
              "reduce"):
        if o in head.replace("_", ""):
            return o
    return head


def _overlap(g: StepGraph, dc: DeviceComm, ra: RankAnalysis, ov: list[_Kernel], alpha: float,
             sm_share: float, comm_blocks: float) -> list[Remedy]:
    sms = max((int(d["sm_count"]) for d in ra.devices if d.get("sm_count")), default=0)
    steps = sorted({x.step for x in ov})
    c = _contention_before(dc, ov, sms, comm_blocks, sm_share)
    xla = dc.xla
    free_ns = dc.free_ns
    # reductions split into buckets; the rest (point-to-point, gathers, barriers) overlap as
    # the calls they are, each group on the compute the other leaves free
    splittable = [x for x in ov if _op(x.name) in _SPLITTABLE]
    split = bool(splittable)
    f32 = split and all(_F32.search(x.name) for x in splittable)
    cast_ns = 0.0 if xla else (_cast_ns(g, ra, splittable) if f32 else None)
    plain = bf16 = 0.0
    exposed_total = 0
    splits: list[Split] = []
    for s in steps:
        free_left = float(free_ns[s])
        for group, can_split in (([x for x in splittable if x.step == s], True),
                                 ([x for x in ov if x.step == s and x not in splittable],
                                  False)):
            if not group:
                continue
            t = float(sum(x.end - x.start for x in group))
            e = float(sum(x.exposed for x in group))
            free = free_left + (t - e)  # and the compute it already runs under
            sp = best_split(t, len(group), alpha, c, free, splittable=can_split)
            if can_split or not split:
                splits.append(sp)
            free_left = max(0.0, free_left - max(0.0, sp.hidden_ns - (t - e)))
            plain += max(0.0, e + c * (t - e) - sp.cost_ns)
            if can_split and f32 and cast_ns is not None:
                sb = best_split(t, len(group), alpha, c, free, bw_scale=0.5)
                bf16 += max(0.0, e + c * (t - e) - sb.cost_ns - cast_ns / len(steps))
            exposed_total += int(e)
    kb = int(np.median([sp.buckets for sp in splits]))
    tail = float(np.median([sp.tail_ns for sp in splits]))
    how = "SM share" if c == sm_share else "wave loss"
    unit = "buckets" if split else "calls as they are"
    out = [Remedy("overlap", plain, exposed_total,
                  f"in ~{kb} {unit} (alpha {alpha / 1e6:.2f} ms per call, calibrated on NVLink): "
                  f"the last ({tail / 1e6:.2f} ms) stays exposed and the compute under the "
                  f"rest runs {100 * c:.0f}% slower ({how})")]
    if f32 and cast_ns is not None:
        what = ("casts fused by XLA" if xla else
                f"less {cast_ns / len(steps) / 1e6:.2f} ms of casts per step")
        out.append(Remedy("overlap_bf16", bf16, exposed_total,
                          f"bf16 gradients (half the bytes) in buckets, {what}"))
    return out


def _contention_before(dc: DeviceComm, ov: list[_Kernel], sms: int,
                       comm_blocks: float, sm_share: float) -> float:
    """``contention`` over the compute kernels that end before each step's first overlappable
    collective, latest first, as much compute time as the collectives last (of the device's
    compute kernels, those ``model.comm_inputs`` kept: all the walk can reach)."""
    blocks, per_sm = dc.before_blocks, dc.before_per_sm
    s, d = dc.before_ts, dc.before_dur
    widths: list[tuple[int, int, int]] = []
    unknown = 0
    for step in sorted({x.step for x in ov}):
        xs = [x for x in ov if x.step == step]
        first = min(x.start for x in xs)
        need = sum(x.end - x.start for x in xs)
        idx = np.nonzero(s + d <= first)[0]
        for i in idx[np.argsort(-(s[idx] + d[idx]), kind="stable")]:
            if need <= 0:
                break
            b = blocks[i]
            if b is None or (isinstance(b, float) and math.isnan(b)) or sms <= 0:
                unknown += int(d[i])
            else:
                a = per_sm[i]
                ok = a is not None and not (isinstance(a, float) and math.isnan(a))
                widths.append((int(b), int(a) if ok else 1, int(d[i])))
            need -= int(d[i])
    if not widths or sms <= 0:
        return sm_share
    known = sum(w[2] for w in widths)
    c = contention(widths, sms, comm_blocks)
    return (c * known + sm_share * unknown) / (known + unknown)


def _cast_ns(g: StepGraph, ra: RankAnalysis, ov: list[_Kernel]) -> float | None:
    """Casting the group's fp32 bytes to bf16 and back, summed over the steps; None when the
    bytes or the memory bandwidth are unknown."""
    c = g.table("collectives")
    if c.num_rows == 0:
        return None
    cs = c.column("ts_ns").to_numpy()
    cb = c.column("bytes").to_pylist()
    known: list[int] = []
    for x in ov:
        hit = [b for t, b in zip(cs.tolist(), cb, strict=True)
               if b is not None and x.start <= t < x.end]
        if hit:
            known.append(int(hit[0]))
    if not known:
        return None
    total = sum(known) / len(known) * len(ov)  # a call without sizes: the mean of the others
    gbs = _memory_gbs(ra)
    if gbs is None:
        return None
    return 3.0 * total / (CAST_EFFICIENCY * gbs)


def _memory_gbs(ra: RankAnalysis) -> float | None:
    for d in ra.devices:
        if d.get("memory_bandwidth_gbs"):
            return float(d["memory_bandwidth_gbs"])
        name = str(d.get("name") or "")
        hit = next((v for key, v in HBM_GBS if key in name), None)
        if hit is not None:
            return hit
    return None


__all__ = ["ALPHA_NS", "DEFAULT_ALPHA_NS", "Remedy", "Split", "best_split", "contention",
           "remedies"]
