"""The advisor: rules over an analysis -> findings ranked by estimated saving per step."""

from stepscope.advisor.base import Context, Finding, Fix, Rule, Severity, Skipped, Where
from stepscope.advisor.engine import Advice, SkipRule, advise, rank_findings
from stepscope.model.confidence import Confidence

__all__ = ["Advice", "Confidence", "Context", "Finding", "Fix", "Rule", "Severity", "SkipRule",
           "Skipped", "Where", "advise", "rank_findings"]
