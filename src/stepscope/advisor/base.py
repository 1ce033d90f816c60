"""The advisor's vocabulary: Severity, Finding, Rule, and what a rule gets to look at.

A rule is a small object with an ``id`` (== its module name == its docs page),
a ``category``, the tables it ``requires``, and ``check(ctx)`` returning zero or
more findings. Every finding carries its estimated saving per step and the
method of the estimate, so findings can be ranked by what they cost.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol, TypeVar, cast, runtime_checkable

from stepscope.analysis import Analysis, RankAnalysis
from stepscope.analysis.graph import RunGraph, StepGraph
from stepscope.analysis.summary import RunSummary
from stepscope.model.confidence import Confidence

T = TypeVar("T")


class Severity(str, Enum):
    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"


# Severity from the estimated saving as a share of the step (rules may lower it, never raise it)
CRITICAL_SHARE = 0.20
WARNING_SHARE = 0.05
# Below both of these a rule stays silent: precision over recall
MIN_SAVING_SHARE = 0.01
MIN_SAVING_MS = 0.05


def severity_for(saving_share: float) -> Severity:
    if saving_share >= CRITICAL_SHARE:
        return Severity.CRITICAL
    if saving_share >= WARNING_SHARE:
        return Severity.WARNING
    return Severity.INFO


@dataclass(frozen=True)
class Fix:
    """What to change, per framework. Empty strings where a framework has no equivalent."""

    pytorch: str = ""
    tensorflow: str = ""
    jax: str = ""
    cuda: str = ""  # generic CUDA / any framework


@dataclass(frozen=True)
class Where:
    """Where to look: a time range in the run's clock, steps, kernels, call sites."""

    rank: int | None = None
    steps: tuple[int, ...] = ()  # step indexes
    start_ns: int | None = None
    end_ns: int | None = None
    kernels: tuple[str, ...] = ()
    call_sites: tuple[str, ...] = ()


@dataclass(frozen=True)
class Finding:
    id: str
    category: str
    severity: Severity
    title: str  # one line with the numbers
    est_saving_ms: float  # per step
    est_saving_pct: float  # of the mean step time
    method: str  # how the saving was estimated
    evidence: tuple[str, ...]  # facts with numbers, one per line
    fix: Fix
    where: Where = field(default_factory=Where)
    confidence: Confidence = Confidence.HIGH
    note: str = ""  # caveats, e.g. profiler overhead
    # kernel findings (Nsight Compute counters): the saving as a share of that kernel's time
    est_kernel_saving_pct: float | None = None


@dataclass(frozen=True)
class Skipped:
    id: str
    reason: str


@dataclass(frozen=True)
class Context:
    """Everything a rule may read. Rules never touch the disk or print."""

    analysis: Analysis
    summary: RunSummary
    host_confidence: Confidence  # how far host-side timings can be trusted (profiler overhead)
    host_note: str  # why, when not high
    host_inflation_ms: float = 0.0  # per step: the profiler's estimated cost on the host
    # results shared by several rules, computed once per advise() call (see ``memo``)
    _memo: dict[Hashable, Any] = field(default_factory=dict, compare=False, repr=False)

    def memo(self, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()`` once per context and key; later calls return the same object."""
        if key not in self._memo:
            self._memo[key] = compute()
        return cast(T, self._memo[key])

    @property
    def ranks(self) -> tuple[RankAnalysis, ...]:
        return self.analysis.ranks

    @property
    def graph(self) -> RunGraph:
        """The run's step graph (what the analysis was computed from)."""
        return self.analysis.graph

    def graph_of(self, rank: int) -> StepGraph:
        return self.analysis.graph.rank(rank)

    @property
    def step_ms(self) -> float:
        """Mean steady-state step time (ms), over ranks; 0 when there are no steps."""
        st = self.summary.step_time
        return st.mean_ms if st is not None else 0.0

    def share(self, saving_ms: float) -> float:
        return saving_ms / self.step_ms if self.step_ms > 0 else 0.0

    def worth_reporting(self, saving_ms: float) -> bool:
        return saving_ms >= MIN_SAVING_MS and self.share(saving_ms) >= MIN_SAVING_SHARE

    def finding(
        self,
        *,
        id: str,
        category: str,
        title: str,
        saving_ms: float,
        method: str,
        evidence: Sequence[str],
        fix: Fix,
        where: Where | None = None,
        confidence: Confidence = Confidence.HIGH,
        note: str = "",
        max_severity: Severity = Severity.CRITICAL,
    ) -> Finding:
        """A finding with severity and percentage derived from the saving."""
        share = self.share(saving_ms)
        sev = severity_for(share)
        order = [Severity.INFO, Severity.WARNING, Severity.CRITICAL]
        if order.index(sev) > order.index(max_severity):
            sev = max_severity
        return Finding(id=id, category=category, severity=sev, title=title,
                       est_saving_ms=round(saving_ms, 4), est_saving_pct=round(100 * share, 2),
                       method=method, evidence=tuple(evidence), fix=fix, where=where or Where(),
                       confidence=confidence, note=note)


@runtime_checkable
class Rule(Protocol):
    id: str
    title: str
    category: str
    requires: tuple[str, ...]  # tables that must have rows for the rule to run

    def check(self, ctx: Context) -> Sequence[Finding]: ...
