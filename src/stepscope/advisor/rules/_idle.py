"""The idle-time rules' shared judgement: which rank's idle split (``model.idle``) gives the
largest saving, and the busy share at which idle-time findings stay info."""

from __future__ import annotations

from collections.abc import Callable

from stepscope.advisor.base import Context
from stepscope.analysis import RankAnalysis
from stepscope.model.idle import IdleSplit, split_idle

HEALTHY_BUSY_SHARE = 0.90  # at or above this GPU busy share, idle-time findings stay info


def worst_rank(
    ctx: Context,
    saving_ms: Callable[[IdleSplit], float],
    eligible: Callable[[RankAnalysis], bool] = lambda ra: True,
) -> tuple[float, RankAnalysis, IdleSplit] | None:
    """The rank whose idle split gives the largest ``saving_ms`` (ranks with steady steps and
    GPU records that are ``eligible``), or None when no rank has one worth reporting. A rank
    without GPU records has no GPU idle time to judge: all of its step is host time
    (``rules._host``), which the split would misread as one long idle gap."""
    best: tuple[float, RankAnalysis, IdleSplit] | None = None
    for ra in ctx.ranks:
        if not ra.steps.steady or not ra.devices_used or not eligible(ra):
            continue
        split = split_idle(ctx.analysis, ra)
        saving = saving_ms(split)
        if best is None or saving > best[0]:
            best = (saving, ra, split)
    return best if best is not None and ctx.worth_reporting(best[0]) else None
