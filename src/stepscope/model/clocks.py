"""Whether the ranks' clocks differ, and by how much to shift each rank onto one time axis
(the HTML timeline's shared axis): from the per-rank offsets that the cross-rank analysis
computes on the ends of matched collectives (``model.collectives``: the median over the
collectives of rank 0's end minus the rank's end).

The offsets are applied when the ranks' clocks are known or seen to differ:

* the ranks ran on more than one host (their ``processes`` rows name different hosts): each
  host has its own clock, so every offset is applied, however small;
* or, on one host (or hosts unknown), some rank's offset is larger than ``OFFSET_MIN_NS``
  (1 ms). On one clock the ranks of a collective leave it together: its last step reaches every
  rank within a link's latency (microseconds over NVLink or PCIe, tens of microseconds over
  InfiniBand), so an offset of a millisecond, 100 times that, is not the collective's end skew
  but clocks that disagree (traces taken on different machines with the host names lost, or
  with their own time origins). Below it, the offsets are that end skew and are left out:
  shifting would move events of one clock apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from stepscope.model.collectives import CrossRank

OFFSET_MIN_NS = 1_000_000


@dataclass(frozen=True)
class ClockAlignment:
    """``shifts_ns``: rank -> ns added to its times (empty: the ranks share one clock, or no
    matched collectives); ``reason``: why they were applied ("" when not)."""

    shifts_ns: Mapping[int, int] = field(default_factory=dict)
    reason: str = ""

    def shift(self, rank: int) -> int:
        return int(self.shifts_ns.get(rank, 0))


def clock_alignment(cross: CrossRank | None) -> ClockAlignment:
    """The shifts to apply to each rank (module docstring)."""
    if cross is None or not cross.offsets_ns:
        return ClockAlignment()
    offsets = {int(r): int(v) for r, v in cross.offsets_ns.items()}
    largest = max(abs(v) for v in offsets.values())
    if cross.hosts > 1:
        reason = (f"the ranks ran on {cross.hosts} hosts (one clock each): aligned on the ends "
                  f"of {len(cross.instances)} matched collectives")
    elif largest > OFFSET_MIN_NS:
        reason = (f"the ranks' clocks differ by up to {largest / 1e6:.3f} ms (more than "
                  f"{OFFSET_MIN_NS / 1e6:g} ms): aligned on the ends of "
                  f"{len(cross.instances)} matched collectives")
    else:
        return ClockAlignment()
    return ClockAlignment(shifts_ns={r: v for r, v in sorted(offsets.items()) if v}, reason=reason)


__all__ = ["ClockAlignment", "OFFSET_MIN_NS", "clock_alignment"]
