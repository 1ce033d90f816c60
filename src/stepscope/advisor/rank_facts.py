"""The per-rank results the rules ask for that depend on one rank alone (its step graph and
its ``RankAnalysis``): computed with each rank's analysis, in the worker that analyses the rank
when the analysis runs rank-parallel (``analysis.results``), and memoised per rank, so that the
rules, run once over all ranks in the parent, find them done.

What is listed here must not read any other rank nor a run-wide figure (the host-timing trust,
the cross-rank collectives): a worker sees one rank. The kernel-based savings (tensor cores,
grid, occupancy, alignment) scale by the run-wide host-timing trust and are left to the parent.
"""

from __future__ import annotations

from stepscope.analysis import Analysis, RankAnalysis
from stepscope.model.copy_overlap import copy_overlap
from stepscope.model.idle import split_idle
from stepscope.model.pageable import pageable_copies
from stepscope.model.profiler_cost import costs_for, host_events
from stepscope.model.round_trips import excess_transfers


def rank_facts(analysis: Analysis, ra: RankAnalysis) -> None:
    """Compute (and memoise) rank ``ra``'s per-rank facts: its host events' profiler cost
    (``model.profiler_cost``), the split of its idle time
    (``model.idle``, memoised on the analysis), its host-device transfers, copy overlap and
    pageable copies (memoised on its graph)."""
    g = analysis.graph.rank(ra.rank)
    costs = costs_for(analysis.graph)
    if costs is not None:
        host_events(g, costs)  # the host-timing trust's per-rank part
    split_idle(analysis, ra)
    excess_transfers(g, ra)
    copy_overlap(g, ra)
    pageable_copies(g, ra)


__all__ = ["rank_facts"]
