"""The kernel-counter rules' shared part (``kernel_*``: findings from Nsight Compute's
counters, ``kernel_metrics``): the profiled kernels of each rank joined to the run, and one
finding per kernel with its saving as a share of the kernel's time and, when the run has steps,
in ms per step. Not a rule: the registry only loads the modules named in ``RULE_IDS``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from stepscope.advisor.base import Context, Finding, Fix, Severity, Where, severity_for
from stepscope.advisor.rules._kernels import short
from stepscope.analysis.kernel_profiles import KernelProfile, kernel_profiles
from stepscope.model import kernel_sol as sol
from stepscope.model.confidence import Confidence

CATEGORY = "kernel"
REQUIRES: tuple[str, ...] = ("kernel_metrics",)
MIN_KERNEL_SAVING = 0.10  # below this share of a kernel's time a rule stays silent
# without steps (a run of kernel metrics only) severity follows the share of the kernel
KERNEL_WARNING = 0.25


def profiles(ctx: Context) -> tuple[KernelProfile, ...]:
    """Every rank's profiled launches, one per kernel name and configuration (the longest),
    joined to the run's steady steps; largest time per step first."""
    def compute() -> tuple[KernelProfile, ...]:
        out: list[KernelProfile] = []
        for r in ctx.graph.ranks:
            ra = next((x for x in ctx.ranks if x.rank == r), None)
            steady = tuple((s.start_ns, s.end_ns) for s in ra.steps.steady) if ra else ()
            out += kernel_profiles(ctx.graph_of(r), steady)
        seen: dict[tuple[int, str, object, object], KernelProfile] = {}
        for p in out:
            key = (p.rank, p.name, p.grid, p.block)
            if key not in seen or p.dur_ns > seen[key].dur_ns:
                seen[key] = p
        return tuple(sorted(seen.values(),
                            key=lambda p: (-(p.ms_per_step or 0.0), -p.dur_ns, p.rank, p.id)))
    return ctx.memo(("ncu_profiles",), compute)


def describe(p: KernelProfile) -> str:
    cfg = ""
    if p.grid and p.block:
        cfg = (f" grid {'x'.join(map(str, p.grid))}, block {'x'.join(map(str, p.block))},")
    when = (f" {p.ms_per_step:.3f} ms per step in the run ({p.match})"
            if p.ms_per_step is not None else " not matched to a kernel of the run")
    return (f"{short(p.name)}:{cfg} {p.dur_ns / 1e3:.1f} us under ncu (launch {p.id} of the "
            f"report);{when}")


def stall_line(p: KernelProfile, top: int = 3) -> str | None:
    if not p.stalls:
        return None
    parts = ", ".join(f"{r.replace('_', ' ')} {s:.0%}" for r, s in p.stalls[:top])
    return f"warp stall reasons (share of stalled cycles): {parts}"


@dataclass(frozen=True)
class Spec:
    """What a kernel rule says about one kernel."""

    title: str
    share: float  # saving, share of the kernel's time
    method: str
    evidence: Sequence[str]
    fix: Fix
    confidence: Confidence = Confidence.MEDIUM
    note: str = ""


def finding(ctx: Context, rule_id: str, p: KernelProfile, spec: Spec) -> Finding:
    share = max(0.0, min(1.0, spec.share))
    ms = (p.ms_per_step or 0.0) * share
    step_share = ctx.share(ms)
    if ctx.step_ms > 0 and p.ms_per_step is not None:
        sev = severity_for(step_share)
    else:
        sev = Severity.WARNING if share >= KERNEL_WARNING else Severity.INFO
    evidence = [describe(p), *spec.evidence]
    stalls = stall_line(p)
    if stalls:
        evidence.append(stalls)
    if p.hot_lines:
        h = p.hot_lines[0]
        where = f"{h.file.rsplit('/', 1)[-1]}:{h.line}" if h.file else f"line {h.line}"
        evidence.append(f"hottest source line: {where} ({h.share:.0%} of the warp-stall samples)"
                        + (f": {h.source.strip()[:80]}" if h.source else ""))
    per_step = (f"; about {ms:.3f} ms per step" if p.ms_per_step is not None else "")
    return Finding(
        id=rule_id, category=CATEGORY, severity=sev,
        title=f"{spec.title}: {short(p.name, 48)} could run ~{share:.0%} faster{per_step}",
        est_saving_ms=round(ms, 4), est_saving_pct=round(100 * step_share, 2),
        method=spec.method, evidence=tuple(evidence), fix=spec.fix,
        where=Where(rank=p.rank, kernels=(p.name,)), confidence=spec.confidence,
        note=spec.note, est_kernel_saving_pct=round(100 * share, 1))


def check_each(ctx: Context, rule_id: str,
               judge: Callable[[KernelProfile], Spec | None]) -> list[Finding]:
    """``judge`` every profiled kernel; a finding for each whose saving is worth saying."""
    out = []
    for p in profiles(ctx):
        if p.dur_ns <= 0:
            continue
        spec = judge(p)
        if spec is None or spec.share < MIN_KERNEL_SAVING:
            continue
        out.append(finding(ctx, rule_id, p, spec))
    return out


class KernelRule(ABC):
    """A kernel-counter rule: runs on any run with ``kernel_metrics``, steps or not; a rule
    says what it finds in one profiled launch (``judge``)."""

    id = ""
    title = ""
    category = CATEGORY
    requires: tuple[str, ...] = REQUIRES
    needs_steps = False
    opt_in = True  # not listed as skipped in runs without Nsight Compute data

    @abstractmethod
    def judge(self, p: KernelProfile) -> Spec | None: ...

    def check(self, ctx: Context) -> Sequence[Finding]:
        return check_each(ctx, self.id, self.judge)


def _saving(x: object) -> float:
    est = getattr(x, "estimate", x)
    if isinstance(est, tuple):
        est = est[1]
    return float(getattr(est, "saving", 0.0))


FAR_FROM_ROOFLINE = 0.25  # kernel_memory_bound speaks from this saving up


def explained(p: KernelProfile, *, roofline: bool = False) -> bool:
    """Whether a cause-specific kernel rule speaks about ``p`` (the memory-roofline and stall
    rules then stay silent: the cause is the finding); ``roofline``: or the memory-roofline
    rule does (the stall rule's test: every finding lists the stall reasons already)."""
    checks = (sol.narrow_loads(p), sol.uncoalesced(p), sol.bank_conflicts(p), sol.occupancy(p),
              sol.tail(p), sol.no_tensor_cores(p))
    if any(c is not None and _saving(c) >= MIN_KERNEL_SAVING for c in checks):
        return True
    est = sol.memory_roofline(p) if roofline else None
    return est is not None and est.saving >= FAR_FROM_ROOFLINE
