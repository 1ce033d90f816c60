"""How far can host-side timings be trusted? Profiler-overhead awareness.

A trace taken with a heavy host profiler (torch.profiler with ``with_stack``,
``record_shapes``, ``profile_memory``) slows every recorded host event down: the
recorded step is longer than the real one and looks host-bound. Measured on this
project's H100 fixture (a 6-layer GPT step, torch 2.11): 25 ms untraced, 39.8 ms
traced with all three options.

The estimate: the profiler's cost of every host event recorded inside the steady
steps (framework ops, Python functions, API calls, memory events), per step, with
the per-event costs of :mod:`stepscope.model.profiler_cost` (fitted on the GPT
fixture and the planted-bottleneck suite; the idle-time rules use the same model).
Host findings are "low" confidence when that inflation is at least 25% of the
step, "medium" at 10%, else "high".

A run recorded by ``stepscope record`` measured its own cost instead: the window's median
step over the median of the steps right after it, with the capture off
(``manifest.overhead["rank<N>"]["step_time_ratio_in_window_vs_after"]``). The share of a
captured step that was the capture's (``1 - 1/ratio`` at the lower end of the ratio's 90%
interval, worst rank) sets the confidence with the same thresholds; a rank whose figure is
marked unmeasurable (the program changed speed by itself, or its host ran ahead of the GPU) is
left out. Most of it is CUPTI's cost in the CUDA calls, but part can be on the GPU, so it is not
subtracted from the speed-up estimates (``est_inflation_ms`` stays 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from stepscope.analysis import Analysis, RankAnalysis
from stepscope.analysis.graph import RunGraph, StepGraph
from stepscope.analysis.results import FACT
from stepscope.model.confidence import Confidence
from stepscope.model.profiler_cost import (
    EventCosts,
    costs_for,
    host_events,
    torch_profiler_trace,
)

LOW_SHARE = 0.25
MEDIUM_SHARE = 0.10


@dataclass(frozen=True)
class HostTrust:
    confidence: Confidence
    note: str
    est_inflation_ms: float  # per step, estimated profiler cost on the host
    host_events_per_step: float
    with_stack: bool


def _confidence(share: float) -> Confidence:
    if share >= LOW_SHARE:
        return Confidence.LOW
    return Confidence.MEDIUM if share >= MEDIUM_SHARE else Confidence.HIGH


def capture_trust(graph: RunGraph) -> HostTrust:
    """A recorded run: what the capture measured of its own cost (module doc)."""
    measured = [o for o in graph.manifest.overhead.values() if isinstance(o, dict)
                and isinstance(o.get("step_time_ratio_in_window_vs_after"), (int, float))
                and o["step_time_ratio_in_window_vs_after"] > 0
                and not o.get("step_time_ratio_after_unmeasurable")]
    if graph.manifest.source.kind != "capture" or not measured:
        return HostTrust(Confidence.HIGH, "", 0.0, 0.0, False)
    # the lower end of each rank's 90% interval where it has one: only a cost the steps show
    # beyond their own spread lowers the confidence
    ratio = max(_low_end(o) for o in measured)
    share = max(0.0, 1.0 - 1.0 / ratio)
    conf = _confidence(share)
    note = "" if conf is Confidence.HIGH else (
        f"the captured steps took at least x{ratio:.2f} the steps right after the window "
        f"(capture off; lower end of a 90% interval): about {share:.0%} of a captured step was "
        "the capture's own cost, mostly CUPTI's in the CUDA calls; host-side timings are "
        "inflated by up to that much")
    return HostTrust(conf, note, 0.0, 0.0, False)


def _low_end(overhead: dict[str, Any]) -> float:
    ratio = float(overhead["step_time_ratio_in_window_vs_after"])
    ci = overhead.get("step_time_ratio_after_ci90")
    if isinstance(ci, list) and len(ci) == 2 and isinstance(ci[0], (int, float)):
        return min(ratio, float(ci[0]))
    return ratio


@dataclass(frozen=True)
class HostCost:
    """One rank's part of the host-timing trust, per steady step (means over its steady
    steps): the profiler's estimated cost of the host events recorded in them (ns), their
    number, and the steps' span (ns)."""

    cost_ns: float
    events: float
    span_ns: float


def host_cost(g: StepGraph, ra: RankAnalysis, costs: EventCosts) -> HostCost | None:
    """Rank ``ra``'s ``HostCost`` (``None`` without steady steps); once per rank graph and
    costs. A per-rank fact (``advisor.rank_facts``): three numbers, where the rank's host
    events and their costs (``profiler_cost.host_events``, one pair per event: tens to
    hundreds of kB a rank) would otherwise be sent to the parent of a rank-parallel
    analysis for the run-wide trust."""
    return g.memo((FACT, "host_cost", costs), lambda: _host_cost(g, ra, costs))


def _host_cost(g: StepGraph, ra: RankAnalysis, costs: EventCosts) -> HostCost | None:
    steady = ra.steps.steady
    if not steady:
        return None
    ts, cost = host_events(g, costs)
    n_ns = n_ev = 0
    for st in steady:
        lo, hi = np.searchsorted(ts, [st.start_ns, st.end_ns])
        n_ns += int(cost[lo:hi].sum())
        n_ev += int(hi - lo)
    return HostCost(n_ns / len(steady), n_ev / len(steady),
                    sum(s.span_ns for s in steady) / len(steady))


def host_trust(analysis: Analysis) -> HostTrust:
    """How far the host-side timings of ``analysis``'s run can be trusted; computed once."""
    return analysis.memo("host_trust", lambda: _host_trust(analysis))


def _host_trust(analysis: Analysis) -> HostTrust:
    graph = analysis.graph
    if not torch_profiler_trace(graph):
        return capture_trust(graph)
    flags = [k for k in ("with_stack", "record_shapes", "profile_memory")
             if any(isinstance(f, dict) and f.get(k)
                    for f in graph.manifest.source.details.get("files", []))]
    per_step_ns: list[float] = []
    per_step_events: list[float] = []
    per_step_wall: list[float] = []
    for ra in analysis.ranks:
        g = graph.rank(ra.rank)
        costs = costs_for(graph, g)  # the rank's scale: a fact its worker sent back
        one = host_cost(g, ra, costs) if costs is not None else None
        if one is None:
            continue
        per_step_ns.append(one.cost_ns)
        per_step_events.append(one.events)
        per_step_wall.append(one.span_ns)
    if not per_step_ns:
        return HostTrust(Confidence.HIGH, "", 0.0, 0.0, "with_stack" in flags)
    inflation_ns = float(np.mean(per_step_ns))
    events = float(np.mean(per_step_events))
    step_ns = float(np.mean(per_step_wall))
    share = inflation_ns / step_ns if step_ns else 0.0
    how = "torch.profiler" + (f" with {', '.join(flags)}" if flags else "")
    note = (f"traced with {how}: the profiler's cost of the {events:.0f} host events recorded "
            f"per step is estimated at {inflation_ns / 1e6:.1f} ms per step ({share:.0%} of the "
            f"traced step); host-side timings are inflated by about that much")
    conf = _confidence(share)
    if conf is Confidence.HIGH:
        note = ""
    return HostTrust(conf, note, inflation_ns / 1e6, events, "with_stack" in flags)
