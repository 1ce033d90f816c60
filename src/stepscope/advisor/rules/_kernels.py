"""The kernel rules' shared wording and judgement (``small_grid``, ``low_occupancy``,
``no_tensor_cores``, ``tc_misaligned``): names cut for titles, where to look, the largest
saving over ranks.
Not a rule: the registry only loads the modules named in ``RULE_IDS``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, TypeVar

from stepscope.advisor.base import Where
from stepscope.analysis import RankAnalysis
from stepscope.model.kernels import KernelSaving, TopKernels


def short(name: str, width: int = 80) -> str:
    """A kernel name cut to ``width`` characters for titles and evidence."""
    return name if len(name) <= width else name[: width - 1] + "…"


def where_for(ra: RankAnalysis, sk: TopKernels, top: Sequence[KernelSaving],
              n_kernels: int = 5) -> Where:
    """Where to look: the rank, its steady steps, the step holding the top kernel's longest
    flagged launch, and the top kernel names."""
    start = end = None
    if top:
        step = ra.steps.steps[int(sk.step[top[0].row])]
        start, end = step.start_ns, step.end_ns
    return Where(rank=ra.rank, steps=tuple(s.index for s in ra.steps.steady), start_ns=start,
                 end_ns=end, kernels=tuple(k.name for k in top[:n_kernels]))


class _Saving(Protocol):
    @property
    def saving_ms(self) -> float: ...


S = TypeVar("S", bound=_Saving)
K = TypeVar("K")


def largest(results: Iterable[S | None]) -> S | None:
    """The result with the largest saving (one per rank, None where a rank has none)."""
    return max((r for r in results if r is not None), key=lambda r: r.saving_ms, default=None)


def largest_per_key(groups: Iterable[Mapping[K, S]]) -> dict[K, S]:
    """Per key, the group with the largest saving over ranks."""
    best: dict[K, S] = {}
    for per_rank in groups:
        for key, g in per_rank.items():
            if key not in best or g.saving_ms > best[key].saving_ms:
                best[key] = g
    return best
