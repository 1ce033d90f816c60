"""Run every rule, rank what they find by estimated saving, list the rules that could not run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stepscope.advisor.base import Context, Finding, Rule, Severity, Skipped
from stepscope.advisor.folding import fold
from stepscope.advisor.remedies import RemedyAdvice, UntracedSteps, remedy_advice
from stepscope.analysis import Analysis
from stepscope.analysis.summary import summarize
from stepscope.model.overhead import HostTrust, host_trust


class SkipRule(Exception):
    """Raised by a rule whose inputs are missing at run time; the message says what."""


@dataclass(frozen=True)
class Advice:
    findings: tuple[Finding, ...]  # ranked: largest estimated saving first
    skipped: tuple[Skipped, ...]
    host_trust: HostTrust
    # the step model's fit per rank, the remedies replayed on it and their plan (None: not run)
    remedies: RemedyAdvice | None = None


SEVERITY_ORDER = {Severity.CRITICAL: 0, Severity.WARNING: 1, Severity.INFO: 2}


def rank_findings(findings: Sequence[Finding]) -> tuple[Finding, ...]:
    """Largest saving first; ties broken by severity, then id (stable output)."""
    return tuple(sorted(findings, key=lambda f: (-f.est_saving_ms, SEVERITY_ORDER[f.severity],
                                                 -(f.est_kernel_saving_pct or 0.0), f.id)))


def advise(analysis: Analysis, rules: Sequence[Rule] | None = None, *,
           untraced: UntracedSteps | None = None) -> Advice:
    """Every rule over ``analysis`` (and its step graph), findings ranked; the remedies
    calibrated to the ``untraced`` steps where there are some (``advisor.remedies``)."""
    if rules is None:
        from stepscope.advisor.rules import RULES

        rules = RULES
    trust = host_trust(analysis)
    ctx = Context(analysis=analysis, summary=summarize(analysis),
                  host_confidence=trust.confidence, host_note=trust.note,
                  host_inflation_ms=trust.est_inflation_ms)
    found: list[Finding] = []
    skipped: list[Skipped] = []
    for rule in rules:
        missing = [t for t in rule.requires if not analysis.graph.has(t)]
        if missing and getattr(rule, "opt_in", False):
            continue  # data the user adds on purpose (Nsight Compute): its absence is no gap
        if missing:
            skipped.append(Skipped(rule.id, f"needs {', '.join(missing)} (the run has none)"))
            continue
        if ctx.step_ms <= 0 and getattr(rule, "needs_steps", True):
            skipped.append(Skipped(rule.id, "the run has no steps"))
            continue
        try:
            found.extend(rule.check(ctx))
        except SkipRule as exc:
            skipped.append(Skipped(rule.id, str(exc)))
    ranked = rank_findings(fold(found))
    return Advice(findings=ranked, skipped=tuple(skipped), host_trust=trust,
                  remedies=remedy_advice(analysis, ranked, untraced))
