"""Pure functions of a run's step graph (``analysis.graph``, the only reader of its tables).
``analyze(run)`` builds the graph once and runs every core analysis for every rank."""

from stepscope.analysis.graph import RunGraph, StepGraph, run_graph
from stepscope.analysis.results import (
    Analysis,
    RankAnalysis,
    analyze,
    analyze_graph,
    analyze_rank,
)

__all__ = ["Analysis", "RankAnalysis", "RunGraph", "StepGraph", "analyze", "analyze_graph",
           "analyze_rank", "run_graph"]
