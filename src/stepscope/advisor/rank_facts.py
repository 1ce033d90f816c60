"""The per-rank results the rules ask for that depend on one rank alone (its step graph and
its ``RankAnalysis``): computed with each rank's analysis, in the worker that analyses the rank
when the analysis runs rank-parallel (``analysis.results``), and memoised per rank, so that the
rules, run once over all ranks in the parent, find them done.

What is listed here must not read any other rank nor a run-wide figure (the host-timing trust,
the cross-rank collectives): a worker sees one rank. The kernel rules (tensor cores, grid,
occupancy, alignment) are split where their run-wide input comes in: the worker computes each
rule's saving per steady step before the run-wide profiler inflation scales it, with what that
scaling needs of the rank (``model.scaling.ScalingBase``) and the rule's top kernels
(``model.kernels.TopKernels``); the parent finishes them once the inflation is known. The
communication model gets the rank's activity and kernels cut to what it reads
(``model.comm_inputs``), the cross-rank model the compute under the rank's collectives
(``model.comm_inputs.collective_compute``); so do the other rules' per-rank parts that read the
rank's tables (the sync and copy calls, the memory peaks, the host ops during idle time). The
parent of a rank-parallel analysis then reads none of the rank's large tables (kernels, API
calls, CPU ops, copies) nor their intermediate results (the kernel frame, the GPU activity
sets), only the small tables the cross-rank model and the NUMA check need (collectives,
processes, devices) and what the workers send: a few to tens of kB a rank.
"""

from __future__ import annotations

from dataclasses import dataclass

from stepscope.advisor.base import MIN_SAVING_MS
from stepscope.advisor.remedies import UntracedSteps, rank_remedies
from stepscope.advisor.rules.launch_bound import MIN_LAUNCHES
from stepscope.advisor.rules.memory_underused import rank_result
from stepscope.analysis import Analysis, RankAnalysis
from stepscope.model.alignment import misaligned_part
from stepscope.model.churn import churn
from stepscope.model.comm_inputs import collective_compute
from stepscope.model.communication import comm_facts
from stepscope.model.copy_overlap import copy_overlap
from stepscope.model.host_ops import IDLE_KINDS, idle_ops
from stepscope.model.idle import split_idle
from stepscope.model.kernels import launch_stats
from stepscope.model.memory import has_memory_data, peaks
from stepscope.model.occupancy import occupancy_parts
from stepscope.model.overhead import host_cost
from stepscope.model.pageable import pageable_copies
from stepscope.model.profiler_cost import costs_for
from stepscope.model.round_trips import excess_transfers
from stepscope.model.small_grid import grid_parts
from stepscope.model.tensor_cores import tensor_core_part


def rank_facts(analysis: Analysis, ra: RankAnalysis,
               untraced: UntracedSteps | None = None) -> None:
    """Compute (and memoise) rank ``ra``'s per-rank facts: its host events' profiler cost per
    steady step (``model.overhead.host_cost``), the split of its idle time
    (``model.idle``, memoised on the analysis), its host-device transfers, copy overlap and
    pageable copies, its step model's fit and remedies (``advisor.remedies``; calibrated to
    the rank's ``untraced`` step when there is one), and what the other rules read of
    its tables (module docstring; memoised
    on its graph)."""
    g = analysis.graph.rank(ra.rank)
    costs = costs_for(analysis.graph, g)
    if costs is not None:
        host_cost(g, ra, costs)  # the host-timing trust's per-rank part
    split = split_idle(analysis, ra)
    excess_transfers(g, ra)
    copy_overlap(g, ra)
    pageable_copies(g, ra)
    comm_facts(g, ra)
    collective_compute(g)
    peaks(g, ra)
    churn(g, ra)
    if has_memory_data(g):
        rank_result(g, ra)  # memory_underused's
    for kind in IDLE_KINDS:
        idle_ops(g, "host", split.host, kind)
        idle_ops(g, "gaps", split.gaps, kind)
    rank_remedies(analysis, ra, untraced)  # the step model's fit, remedies, plan (remedies.py)
    if (ra.devices_used and ra.launches.mean_launches_per_step >= MIN_LAUNCHES
            and split.mean_ms(split.launch) * split.host_factor >= MIN_SAVING_MS):
        # launch_bound's evidence, for a rank whose own saving could be reported
        launch_stats(g, split.win_start, split.win_end)
    # the kernel rules' per-rank parts (their savings per steady step before the run-wide
    # profiler inflation scales them, and their top kernels)
    grid_parts(g, ra)
    occupancy_parts(g, ra)
    tensor_core_part(g, ra)
    misaligned_part(g, ra)


@dataclass(frozen=True)
class CalibratedFacts:
    """:func:`rank_facts` with the remedies calibrated to the untraced steps (a picklable
    callable: the rank pool's workers run it)."""

    untraced: UntracedSteps

    def __call__(self, analysis: Analysis, ra: RankAnalysis) -> None:
        rank_facts(analysis, ra, self.untraced)


__all__ = ["CalibratedFacts", "rank_facts"]
