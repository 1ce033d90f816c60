"""The per-rank results the rules ask for that depend on one rank alone (its step graph and
its ``RankAnalysis``): computed with each rank's analysis, in the worker that analyses the rank
when the analysis runs rank-parallel (``analysis.results``), and memoised per rank, so that the
rules, run once over all ranks in the parent, find them done.

What is listed here must not read any other rank nor a run-wide figure (the host-timing trust,
the cross-rank collectives): a worker sees one rank. The kernel-based savings (tensor cores,
grid, occupancy, alignment) scale by the run-wide host-timing trust and are left to the parent;
what they read of the rank's tables (the launching ops' names, when each steady step's launches
and their GPU work ended) is here. So are the parts of the other rules' per-rank work that read
the rank's tables (the communication kernels' SM share and top collectives, the sync and copy
calls, the memory peaks, the host ops during idle time): the parent of a rank-parallel
analysis then reads no rank's large tables (kernels, API calls, CPU ops, copies), only the small
ones the cross-rank model and the NUMA check need (collectives, processes, devices).
"""

from __future__ import annotations

from stepscope.advisor.remedies import rank_remedies
from stepscope.advisor.rules.memory_underused import rank_result
from stepscope.analysis import Analysis, RankAnalysis
from stepscope.model.churn import churn
from stepscope.model.communication import comm_facts
from stepscope.model.copy_overlap import copy_overlap
from stepscope.model.host_ops import IDLE_KINDS, idle_ops
from stepscope.model.idle import split_idle
from stepscope.model.kernels import steady_kernels, steady_op_names
from stepscope.model.memory import has_memory_data, peaks
from stepscope.model.overhead import host_cost
from stepscope.model.pageable import pageable_copies
from stepscope.model.profiler_cost import costs_for
from stepscope.model.round_trips import excess_transfers
from stepscope.model.scaling import step_done


def rank_facts(analysis: Analysis, ra: RankAnalysis) -> None:
    """Compute (and memoise) rank ``ra``'s per-rank facts: its host events' profiler cost per
    steady step (``model.overhead.host_cost``), the split of its idle time
    (``model.idle``, memoised on the analysis), its host-device transfers, copy overlap and
    pageable copies, its step model's fit and remedies (``advisor.remedies``), and what the other rules read of
    its tables (module docstring; memoised
    on its graph)."""
    g = analysis.graph.rank(ra.rank)
    costs = costs_for(analysis.graph)
    if costs is not None:
        host_cost(g, ra, costs)  # the host-timing trust's per-rank part
    split = split_idle(analysis, ra)
    excess_transfers(g, ra)
    copy_overlap(g, ra)
    pageable_copies(g, ra)
    comm_facts(g, ra)
    peaks(g, ra)
    churn(g, ra)
    if has_memory_data(g):
        rank_result(g, ra)  # memory_underused's
    for kind in IDLE_KINDS:
        idle_ops(g, "host", split.host, kind)
        idle_ops(g, "gaps", split.gaps, kind)
    rank_remedies(analysis, ra)  # the step model's fit, remedies and plan (advisor.remedies)
    sk = steady_kernels(g, ra)
    if sk is not None:
        steady_op_names(g, sk)
        step_done(g, sk)


__all__ = ["rank_facts"]
