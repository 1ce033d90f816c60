"""The copy and memory rules' shared judgement and wording (``pageable_memcpy``,
``excess_transfers``, ``no_copy_overlap``, ``memory_pressure``, ``memory_underused``): the
severity cap when the host runs ahead of the GPU, the mean saving over ranks, numbers for
humans. What they measure is ``model.transfers``. Not a rule: the registry only loads the
modules named in ``RULE_IDS``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar

from stepscope.advisor.base import Context, Severity, severity_for
from stepscope.model.transfers import GpuSteps


def host_ahead_cap(saving_ms: float, host_step_ms: float,
                   gpu: GpuSteps | None) -> tuple[Severity, str]:
    """Severity cap and note when the host runs ahead of the GPU: the host's step windows
    are then shorter than the real (device-side) step, so shares of them overstate."""
    if gpu is None or host_step_ms <= 0:
        return Severity.CRITICAL, ""
    gpu_ms = gpu.mean_ns / 1e6
    if gpu_ms <= 1.5 * host_step_ms:
        return Severity.CRITICAL, ""
    note = (f"the host runs ahead of the GPU: the device-side step is {fmt_ms(gpu_ms)} ms "
            f"against {fmt_ms(host_step_ms)} ms of host step; severity uses the device-side "
            f"step ({100 * saving_ms / gpu_ms:.1f}%)")
    return severity_for(saving_ms / gpu_ms), note


# -- numbers for humans --------------------------------------------------------------------


def fmt_ms(ms: float) -> str:
    a = abs(ms)
    if a >= 100:
        return f"{ms:.0f}"
    if a >= 10:
        return f"{ms:.1f}"
    if a >= 1:
        return f"{ms:.2f}"
    return f"{ms:.3f}"


def fmt_bytes(n: float) -> str:
    """Decimal units (1 MB = 1e6 B), like the bandwidths in GB/s."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def fmt_count(x: float) -> str:
    return f"{x:.0f}" if abs(x - round(x)) < 0.05 else f"{x:.1f}"


def plural(x: float, one: str, many: str) -> str:
    """``"1 copy"``, ``"2 copies"``, ``"1.5 copies"`` (counts per step may be fractional)."""
    c = fmt_count(x)
    return f"{c} {one if c == '1' else many}"


class _RankSaving(Protocol):
    @property
    def rank(self) -> int: ...
    @property
    def n_steps(self) -> int: ...
    @property
    def saving_ns(self) -> int: ...
    @property
    def saving_ms(self) -> float: ...


R = TypeVar("R", bound=_RankSaving)


def mean_over_ranks(ctx: Context, per_rank: Iterable[R | None]
                    ) -> tuple[float, R, list[R]] | None:
    """The saving per step averaged over all ranks (a rank without the pattern counts 0), the
    rank with the largest saving per step (lowest rank on ties) and every rank's result; None
    when no rank has one, or the mean is not worth reporting."""
    results = [r for r in per_rank if r is not None]
    if not results:
        return None
    saving_ms = sum(r.saving_ms for r in results) / max(1, len(ctx.ranks))
    if not ctx.worth_reporting(saving_ms):
        return None
    return saving_ms, max(results, key=lambda x: (x.saving_ns / x.n_steps, -x.rank)), results
