"""``slow_collectives``: large collectives moving data far below what the GPUs' link carries.

For each collective matched across the ranks of one machine (``model.collectives``) whose
message is large enough to be bandwidth-bound (>= 8 MiB), the transfer (the shortest kernel
over its ranks: the waiting is the straggler's) gives a bus bandwidth (nccl-tests' factors).
At what the link can reach (``model.links``: 0.7 of its per-direction bandwidth) the
transfer would take ``bytes x factor / reachable``::

    saving per step = sum over those calls of max(0, transfer - bytes x factor / reachable)
                      / steps

It fires when those calls reach less than half the reachable bandwidth together (more
usually means a transport problem: traffic through host memory or PCIe instead of NVLink,
a bad topology or placement, a misconfigured NCCL) and the saving is worth reporting.
Ranks on several hosts talk over the network, whose speed the run does not know: the rule
stays silent there. See docs/rules/slow_collectives.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stepscope.advisor.base import Context, Finding, Fix, Where
from stepscope.advisor.rules import _transfers as tr
from stepscope.model.collectives import Instance, bus_factor, run_cross_rank
from stepscope.model.confidence import Confidence
from stepscope.model.links import link_of

ID = "slow_collectives"
CATEGORY = "communication"
MIN_BYTES = 8 << 20
SLOW = 0.5  # of the reachable bandwidth

FIX = Fix(
    pytorch=("Check the transport NCCL chose: NCCL_DEBUG=INFO prints it per peer ('via P2P/"
             "CUMEM' or 'P2P/IPC' over NVLink is right; 'SHM' or 'NET' inside one machine is "
             "not); remove NCCL_P2P_DISABLE / NCCL_SHM_DISABLE / NCCL_P2P_LEVEL overrides; "
             "`nvidia-smi topo -m` shows whether the ranks' GPUs share NVLink (NV#) or only "
             "PCIe (PIX/PHB/SYS) - give a job GPUs of one NVLink domain; on PCIe machines "
             "disable ACS/IOMMU redirection for peer-to-peer. Bandwidth also drops when "
             "another job shares the GPUs or links."),
    tensorflow=("NCCL_DEBUG=INFO shows the transport per peer (P2P over NVLink expected); "
                "check `nvidia-smi topo -m` and remove NCCL_P2P_DISABLE / NCCL_SHM_DISABLE "
                "overrides; use the NCCL implementation of the collectives "
                "(CommunicationImplementation.NCCL)."),
    jax=("NCCL_DEBUG=INFO shows the transport XLA's collectives use; check `nvidia-smi topo "
         "-m` and remove NCCL_P2P_DISABLE / NCCL_SHM_DISABLE overrides."),
    cuda=("NCCL_DEBUG=INFO shows the transport per peer; `nvidia-smi topo -m` the topology; "
          "run nccl-tests (all_reduce_perf -b 8M -e 1G) to see what the machine reaches."),
)


def _ms(ns: float) -> str:
    return tr.fmt_ms(ns / 1e6)


def check(ctx: Context) -> Sequence[Finding]:
    x = run_cross_rank(ctx.analysis)
    if x is None or x.n_steps == 0 or x.hosts > 1:
        return []
    devices = [d for ra in ctx.ranks for d in ra.devices]
    link = link_of(devices)
    big = [i for i in x.instances if i.bytes and i.bytes >= MIN_BYTES and i.transfer_ns > 0]
    if link is None or not big:
        return []
    reach = link.reachable_gbs  # GB/s == bytes/ns
    moved = sum(_bus_bytes(i) for i in big)
    took = sum(i.transfer_ns for i in big)
    busbw = moved / took
    if busbw >= SLOW * reach:
        return []
    saving_ns = sum(max(0.0, i.transfer_ns - _bus_bytes(i) / reach) for i in big)
    saving_ms = saving_ns / x.n_steps / 1e6
    if not ctx.worth_reporting(saving_ms):
        return []
    worst = min(big, key=lambda i: (i.busbw_gbs or 0.0))
    ev = [
        (f"{len(big)} collectives of >= {MIN_BYTES >> 20} MiB over {x.n_steps} steps: "
         f"{tr.fmt_ms(took / x.n_steps / 1e6)} ms of transfer per step at {busbw:.0f} GB/s "
         f"bus bandwidth"),
        (f"the link: {link.describe()}; NCCL reaches about {reach:.0f} GB/s "
         f"({100 * link.reachable_gbs / link.gbs:.0f}% of it)"),
        (f"slowest: {worst.op} of {(worst.bytes or 0) / 2**20:.0f} MiB over {len(worst.ranks)} ranks, "
         f"transfer {_ms(worst.transfer_ns)} ms, {worst.busbw_gbs or 0:.0f} GB/s"),
    ]
    title = (f"Collectives reach {busbw:.0f} GB/s bus bandwidth, {100 * busbw / link.gbs:.0f}% "
             f"of the {link.kind} link: at the {reach:.0f} GB/s it carries they would take "
             f"~{tr.fmt_ms(saving_ms)} ms less per step")
    method = (f"per collective of >= {MIN_BYTES >> 20} MiB matched across {len(x.ranks)} ranks: "
              f"transfer (shortest kernel over the ranks) minus bytes x bus factor (nccl-tests: "
              f"2(n-1)/n all-reduce, (n-1)/n all-gather/reduce-scatter/all-to-all, 1 others) / "
              f"{reach:.0f} GB/s, summed, per step over {x.n_steps} common steady steps")
    return [ctx.finding(
        id=ID, category=CATEGORY, title=title, saving_ms=saving_ms, method=method, evidence=ev,
        fix=FIX, where=Where(rank=worst.ranks[0], kernels=(worst.name,)),
        confidence=Confidence.MEDIUM if link.measured else Confidence.LOW,
        note=("what NCCL reaches depends on the message size, the algorithm and the number of "
              "GPUs; 0.7 of the link was measured with 1 GiB all-reduces on 2 and 4 H100s"),
    )]


def _bus_bytes(i: Instance) -> float:
    return float(i.bytes or 0) * bus_factor(i.op, len(i.ranks))


@dataclass(frozen=True)
class _Rule:
    id: str = ID
    title: str = "Collectives far below the link's bandwidth"
    category: str = CATEGORY
    requires: tuple[str, ...] = ("collectives",)

    def check(self, ctx: Context) -> Sequence[Finding]:
        return check(ctx)


RULE = _Rule()

__all__ = ["RULE"]
