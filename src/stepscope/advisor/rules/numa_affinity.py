"""``numa_affinity``: a rank's process may run on CPUs away from its GPU's NUMA node.

On a machine with several NUMA nodes (sockets, or sub-NUMA clusters) each GPU hangs off one
node's PCIe root. A process that runs on another node's CPUs reaches its GPU, and the pinned
buffers its copies go through, across the socket interconnect, and its own memory is
allocated where it first ran. Facts from ``analysis.placement``: the GPUs' nodes and CPUs
(``devices.numa_node`` / ``numa_cpus``, from NVML or sysfs at record time) against each
process's CPU affinity (``processes.cpu_affinity``). Two cases:

- *off node*: the training process may run only on CPUs of other nodes (pinned to the wrong
  node): certain misplacement, severity at most warning;
- *unbound*: it may run on its GPU's node and on others (nothing bound it; the scheduler
  decides): severity info.

Nothing is said when every CPU the training process may run on is on its GPUs' nodes (a
one-node machine always is), or when the run does not say (imported Kineto traces: no
affinity; no NUMA information): no finding and no "skipped" line either.

The saving is an honest guess, confidence low. Misplacement costs host-side time only, so::

    saving = SHARE x (the rank's host-side time per steady step)

where host-side time is the GPU idle time the host causes (``model.idle``'s input, sync
drain, step-gap, launch and host claims, with their profiler corrections) plus the time of
its host<->device copies, and ``SHARE`` = 10%: the upper end of the 1-10% overall improvement
PyTorch's NUMA-binding documentation reports as typical, applied only to the part of the step
that CPU placement can change. See docs/rules/numa_affinity.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stepscope.advisor.base import Context, Finding, Fix, Severity, Where
from stepscope.advisor.rules._evidence import ms
from stepscope.analysis import RankAnalysis
from stepscope.analysis.busy import IntervalSet
from stepscope.analysis.placement import RankPlacement, cpulist, rank_placement
from stepscope.model.confidence import Confidence
from stepscope.model.idle import IdleSplit, split_idle
from stepscope.schema_enums import CopyKind

ID = "numa_affinity"
CATEGORY = "host"
# PyTorch, "NUMA Binding" (docs.pytorch.org/docs/main/elastic/numa.html): "In practice, NUMA
# binding typically results in 1-10% overall performance improvements". The upper end, applied
# to the host-side part of the step only (module doc).
SHARE = 0.10
MAX_RANKS_LISTED = 8

FIX = Fix(
    pytorch=("bind each rank to its GPU's NUMA node: torchrun --numa-binding=node (torch >= "
             "2.9) does it for every worker; otherwise start each rank under numactl "
             "--cpunodebind=N --membind=N (or taskset -c <the node's CPUs>), N = the node of "
             "the rank's GPU (nvidia-smi topo -m lists each GPU's CPU and NUMA affinity). "
             "DataLoader workers inherit the rank's affinity; to pin them explicitly pass "
             "DataLoader(worker_init_fn=lambda _: os.sched_setaffinity(0, node_cpus)). Bind "
             "before pinned buffers are allocated so that they live on the GPU's node."),
    tensorflow=("run one process per GPU, each under numactl --cpunodebind=N --membind=N "
                "(N = its GPU's node, nvidia-smi topo -m), and keep the tf.data threads in "
                "that process"),
    jax=("one process per GPU (jax.distributed.initialize(local_device_ids=[i])), each "
         "started under numactl --cpunodebind=N --membind=N for its GPU's node"),
    cuda=("numactl --cpunodebind=N --membind=N or taskset per process, N = the GPU's node "
          "(nvidia-smi topo -m); allocate pinned host buffers (cudaHostAlloc) after binding"),
)


@dataclass(frozen=True)
class _Case:
    place: RankPlacement
    ra: RankAnalysis | None
    host_ns: float  # host-side time per steady step (module doc)
    idle_ns: float  # of it, GPU idle the host causes
    copy_ns: float  # of it, host<->device copies
    n_steps: int

    @property
    def saving_ms(self) -> float:
        return SHARE * self.host_ns / 1e6


def _copies_per_step(ctx: Context, split: IdleSplit) -> np.ndarray:
    g = ctx.graph_of(split.rank)
    if not g.has("memcpy"):
        return np.zeros(split.n, dtype=np.int64)
    t = g.table("memcpy").select(["ts_ns", "dur_ns", "kind"]).to_pydict()
    keep = {CopyKind.HTOD.value, CopyKind.DTOH.value}
    rows = [(s, s + d) for s, d, k in zip(t["ts_ns"], t["dur_ns"], t["kind"]) if k in keep]
    if not rows:
        return np.zeros(split.n, dtype=np.int64)
    starts, ends = (np.array(x, dtype=np.int64) for x in zip(*rows))
    return IntervalSet.of(starts, ends).within(split.win_start, split.win_end)


def _case(ctx: Context, place: RankPlacement) -> _Case:
    ra = next((r for r in ctx.ranks if r.rank == place.rank), None)
    if ra is None or not ra.steps.steady or not ra.devices_used:
        return _Case(place, ra, 0.0, 0.0, 0.0, 0)
    split = split_idle(ctx.analysis, ra)
    idle = (split.per_step(split.input).astype(np.float64) * split.share_keep
            + split.per_step(split.sync_drain | split.gaps | split.launch | split.host)
            .astype(np.float64) * split.host_factor)
    copies = _copies_per_step(ctx, split).astype(np.float64)
    return _Case(place, ra, float((idle + copies).mean()), float(idle.mean()),
                 float(copies.mean()), split.n)


def _nodes_text(place: RankPlacement) -> str:
    nodes = place.nodes
    return ("NUMA node " if len(nodes) == 1 else "NUMA nodes ") + ", ".join(map(str, nodes))


def _gpus_text(place: RankPlacement) -> str:
    return ", ".join(f"cuda:{d}" for d, _ in place.gpu_nodes)


def _other_nodes(outside: frozenset[int], node_cpus: dict[int, frozenset[int]]) -> str:
    """The known nodes the ``outside`` CPUs belong to (" (node 0)"), "" when unknown."""
    hit = sorted(n for n, cpus in node_cpus.items() if cpus & outside)
    if not hit:
        return ""
    return f" ({'node' if len(hit) == 1 else 'nodes'} {', '.join(map(str, hit))})"


def check(ctx: Context) -> Sequence[Finding]:
    places = [p for p in (rank_placement(ctx.graph_of(ra.rank)) for ra in ctx.ranks)
              if p is not None]
    node_cpus: dict[int, frozenset[int]] = {}
    for p in places:
        if len(p.nodes) == 1:
            node_cpus[p.nodes[0]] = p.node_cpus
    bad = [_case(ctx, p) for p in places if not p.main.on_node]
    if not bad:
        return []
    bad.sort(key=lambda c: (-c.saving_ms, c.place.rank))
    c = bad[0]
    p, main = c.place, c.place.main
    off = [x for x in bad if x.place.main.off_node]
    where_txt = _nodes_text(p)
    others = _other_nodes(main.outside, node_cpus)
    if main.off_node:
        title = (f"Rank {p.rank} runs only on CPUs {cpulist(main.cpus)}{others}, away from "
                 f"{where_txt} of its GPU ({_gpus_text(p)}, CPUs {cpulist(p.node_cpus)})")
    else:
        title = (f"Rank {p.rank} is not bound to {where_txt} of its GPU ({_gpus_text(p)}): it "
                 f"may run on CPUs {cpulist(main.cpus)}, {len(main.outside)} of them on other "
                 f"nodes{others}")
    if c.saving_ms > 0:
        title += f"; binding it may save ~{ms(c.saving_ms * 1e6)} per step"
    ev = [
        (f"rank {p.rank}: GPU {_gpus_text(p)} on {where_txt} (CPUs {cpulist(p.node_cpus)}); "
         f"process {main.pid} ({main.name or '?'}) may run on CPUs {cpulist(main.cpus)}, "
         + ("none of them on its GPU's node" if main.off_node else
            f"{len(main.outside)} of {len(main.cpus)} outside its GPU's node "
            f"({cpulist(main.outside)})")),
    ]
    outside_others = [o for o in p.others if not o.on_node]
    if p.others:
        ev.append(f"{len(outside_others)} of the rank's {len(p.others)} other processes "
                  f"(DataLoader workers ...) may also run outside its GPU's node")
    if c.n_steps:
        ev.append(f"host-side time {ms(c.host_ns)} per steady step: {ms(c.idle_ns)} of GPU idle "
                  f"the host causes (input waits, launches, host work, step gaps, refills "
                  f"after syncs) and {ms(c.copy_ns)} of host<->device copies")
    if len(bad) > 1:
        listed = ", ".join(f"rank {x.place.rank} ({'off node' if x.place.main.off_node else 'unbound'})"
                           for x in sorted(bad, key=lambda x: x.place.rank)[:MAX_RANKS_LISTED])
        more = f", ... {len(bad) - MAX_RANKS_LISTED} more" if len(bad) > MAX_RANKS_LISTED else ""
        ev.append(f"{len(bad)} of {len(ctx.ranks)} ranks may run away from their GPU's node: "
                  f"{listed}{more}")
    ev.append("PyTorch's NUMA-binding documentation reports 1-10% overall improvements as "
              "typical for binding each rank to its GPU's node")
    method = (f"{int(SHARE * 100)}% of rank {p.rank}'s host-side time per steady step (GPU idle "
              f"the host causes plus host<->device copy time"
              + (f", mean over {c.n_steps} steady steps" if c.n_steps else "")
              + "): the upper end of the 1-10% overall improvement PyTorch's NUMA-binding "
              "documentation reports, applied only to the part of the step that CPU "
              "placement can change; 0 when the rank has no steady steps with GPU work")
    cap = Severity.WARNING if off else Severity.INFO
    note = ("the process's affinity when it was first seen; which CPUs its threads actually "
            "ran on is not recorded. An unbound process often runs on its GPU's node anyway; "
            "the estimate is a rough upper figure")
    return [ctx.finding(
        id=ID, category=CATEGORY, title=title, saving_ms=c.saving_ms, method=method,
        evidence=ev, fix=FIX, where=Where(rank=p.rank), confidence=Confidence.LOW,
        max_severity=cap, note=note)]


@dataclass(frozen=True)
class _Rule:
    id: str = ID
    title: str = "Process away from its GPU's NUMA node"
    category: str = CATEGORY
    requires: tuple[str, ...] = ()  # unknown placement: no finding (module doc)

    def check(self, ctx: Context) -> Sequence[Finding]:
        return check(ctx)


RULE = _Rule()

__all__ = ["RULE", "SHARE"]
