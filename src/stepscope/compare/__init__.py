"""Two runs compared: ``compare(BASE, NEW)`` -> :class:`Diff` (verdict, step-time shift with
its interval, breakdown categories, kernels, ops and findings that changed)."""

from stepscope.compare.diff import (
           DIFF_SCHEMA,
           CategoryChange,
           Diff,
           RankDiff,
           RunRef,
           Side,
           compare,
)
from stepscope.compare.findings import FindingChange
from stepscope.compare.matching import Change, normalise
from stepscope.compare.stats import ShiftTest, Verdict, shift_test

__all__ = ["DIFF_SCHEMA", "CategoryChange", "Change", "Diff", "FindingChange", "RankDiff", "RunRef",
           "ShiftTest", "Side", "Verdict", "compare", "normalise", "shift_test"]
