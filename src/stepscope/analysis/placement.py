"""Where a rank's processes may run relative to its GPUs: the CPUs of the GPUs' host NUMA
nodes (``devices.numa_node`` / ``numa_cpus``) against each process's CPU affinity
(``processes.cpu_affinity``). Both are Linux cpulists (``0-15,32-47``).

A process is *on node* when every CPU it may run on belongs to one of its rank's GPUs' NUMA
nodes; otherwise its ``outside`` CPUs are those that do not, and it is *off node* when none of
its CPUs do (it can only run across the socket interconnect from its GPU). A machine with one
NUMA node has every CPU in that node, so nothing is ever outside there. What a source does not
say (Kineto traces: no affinity; sysfs without NUMA: no node) makes the rank's placement
unknown (None), never a guess.

The training process is the one that issued the most GPU API calls (``api_calls.pid``), else
the first ``processes`` row (a recording notes its own process first); the rank's other
processes (DataLoader workers) are listed apart.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from stepscope.analysis.graph import StepGraph


def parse_cpulist(text: str | None) -> frozenset[int] | None:
    """``"0-3,8,10-11"`` -> ``{0, 1, 2, 3, 8, 10, 11}``; None for null, empty or malformed."""
    if not text or not text.strip():
        return None
    out: set[int] = set()
    try:
        for part in text.strip().split(","):
            lo, _, hi = part.strip().partition("-")
            a, b = int(lo), int(hi or lo)
            if a < 0 or b < a:
                return None
            out.update(range(a, b + 1))
    except ValueError:
        return None
    return frozenset(out)


def cpulist(cpus: frozenset[int] | set[int]) -> str:
    """The cpulist text of a CPU set (``{0, 1, 2, 5}`` -> ``"0-2,5"``)."""
    spans: list[list[int]] = []
    for c in sorted(cpus):
        if spans and spans[-1][1] == c - 1:
            spans[-1][1] = c
        else:
            spans.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


@dataclass(frozen=True)
class ProcessPlacement:
    """One process of a rank against its GPUs' NUMA nodes (module doc)."""

    pid: int
    name: str
    cpus: frozenset[int]  # CPUs it may run on
    outside: frozenset[int]  # of them, those on none of the rank's GPUs' nodes

    @property
    def on_node(self) -> bool:
        return not self.outside

    @property
    def off_node(self) -> bool:
        """It may run only on CPUs of other NUMA nodes."""
        return self.outside == self.cpus


@dataclass(frozen=True)
class RankPlacement:
    """A rank's GPUs' NUMA nodes and where its processes may run."""

    rank: int
    gpu_nodes: tuple[tuple[int, int], ...]  # (device, NUMA node) of each GPU with a known node
    node_cpus: frozenset[int]  # CPUs of those nodes
    main: ProcessPlacement  # the training process (module doc)
    others: tuple[ProcessPlacement, ...]  # the rank's other processes with a known affinity

    @property
    def nodes(self) -> tuple[int, ...]:
        return tuple(sorted({n for _, n in self.gpu_nodes}))


def _main_pid(g: StepGraph, pids: list[int]) -> int:
    if g.has("api_calls"):
        col = g.table("api_calls").column("pid").drop_null().to_pylist()
        counts = Counter(int(p) for p in col if int(p) in pids)
        if counts:
            return counts.most_common(1)[0][0]
    return pids[0]


def rank_placement(g: StepGraph) -> RankPlacement | None:
    """The rank's placement, or None when its GPUs' nodes or its processes' affinity are
    unknown (module doc)."""
    if not g.has("devices") or not g.has("processes"):
        return None
    dev = g.table("devices")
    if "numa_node" not in dev.column_names or "numa_cpus" not in dev.column_names:
        return None
    gpu_nodes: list[tuple[int, int]] = []
    node_cpus: set[int] = set()
    for row in dev.select(["device", "numa_node", "numa_cpus"]).to_pylist():
        cpus = parse_cpulist(row["numa_cpus"])
        if row["numa_node"] is None or cpus is None:
            continue
        gpu_nodes.append((int(row["device"]), int(row["numa_node"])))
        node_cpus |= cpus
    procs = g.table("processes")
    if not gpu_nodes or "cpu_affinity" not in procs.column_names:
        return None
    placed: dict[int, ProcessPlacement] = {}
    for row in procs.select(["pid", "name", "cpu_affinity"]).to_pylist():
        cpus = parse_cpulist(row["cpu_affinity"])
        if cpus is None or row["pid"] is None or int(row["pid"]) in placed:
            continue
        placed[int(row["pid"])] = ProcessPlacement(
            pid=int(row["pid"]), name=str(row["name"] or ""), cpus=cpus,
            outside=frozenset(cpus - node_cpus))
    if not placed:
        return None
    main = _main_pid(g, list(placed))
    return RankPlacement(rank=g.rank_id, gpu_nodes=tuple(sorted(gpu_nodes)),
                         node_cpus=frozenset(node_cpus), main=placed[main],
                         others=tuple(p for pid, p in placed.items() if pid != main))


__all__ = ["ProcessPlacement", "RankPlacement", "cpulist", "parse_cpulist", "rank_placement"]
