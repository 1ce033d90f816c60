"""Input pipeline: how long each step waited for its next batch, and whether the GPU idled.

Per step window ``w`` (wall ``= end - start``)::

    waits         = union of the rank's ``input_waits`` intervals (all threads)
    wait_ns[w]    = |waits ∩ w|                       (clipped to the window)
    share[w]      = wait_ns[w] / wall[w]
    count[w]      = input waits starting in w
    gpu_busy      = union of kernels, memcpy and memset of every device of the rank
    idle_wait_ns[w] = |(waits − gpu_busy) ∩ w|        (waiting while no GPU work ran)

Aggregates: mean / median / max of ``wait_ns`` over the windows, mean share, and the
first window: ``first_step_wait_ns``, ``mean_wait_ns_excl_first`` and
``first_step_outlier`` = at least 2 windows and the first waited more than twice the
median of the others plus 1 ms (DataLoader worker start-up usually lands there).
Totals are the sums over the windows; with no windows they are over the whole rank and
per-step tuples are empty.

The input-pipeline verdict, in the TensorFlow Profiler's tiers: ``input_bound_pct`` is the
share of the step the device sat idle waiting for input (``idle_wait_ns[w] / wall[w]``, mean
over the windows, the first left out when it is the start-up outlier), and ``verdict`` is
``highly`` above ``HIGHLY_INPUT_BOUND_PCT`` (20%), ``moderately`` from
``MODERATELY_INPUT_BOUND_PCT`` (5%) up to it, ``not`` below, and ``unknown`` when the source
recorded no input waits at all (no data-loader / ``tf.data`` events: nothing was measured).

``dataloader`` is the loader's settings as the capture recorded them
(``settings["ranks"]["rank<N>"]["host"]["dataloader"]``, or a run-wide ``settings["dataloader"]``) when the capture
recorded the loader settings (num_workers, pin_memory, prefetch_factor,
persistent_workers ...), else None. ``in_process`` is whether the batches are made in the
waiting process itself, so the wait is the loading (``num_workers == 0`` in those settings, or
a wait named by PyTorch's ``_SingleProcessDataLoaderIter``); False where workers load, or where
nothing says (``tf.data``, another loader).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import stepscope.analysis.intervals as iv
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.intervals import I64
from stepscope.analysis.launches import (
    bounds,
    count_window,
    distinct_names,
    gpu_records,
    ints,
    mean_of,
    median_of,
)

FIRST_STEP_FACTOR = 2.0
FIRST_STEP_MIN_EXCESS_NS = 1_000_000
# the TensorFlow Profiler's input-pipeline tiers (share of the step waiting for input)
HIGHLY_INPUT_BOUND_PCT = 20.0
MODERATELY_INPUT_BOUND_PCT = 5.0
VERDICT_TEXT = {"highly": "highly input-bound", "moderately": "moderately input-bound",
                "not": "not input-bound", "unknown": "input not measured"}


def input_verdict(pct: float, measured: bool = True) -> str:
    """``highly`` (> 20% of the step waiting for input), ``moderately`` (5 to 20%), ``not``
    (< 5%), or ``unknown`` when nothing was measured."""
    if not measured:
        return "unknown"
    if pct > HIGHLY_INPUT_BOUND_PCT:
        return "highly"
    if pct >= MODERATELY_INPUT_BOUND_PCT:
        return "moderately"
    return "not"


@dataclass(frozen=True)
class InputAnalysis:
    rank: int
    n_steps: int
    # per step, aligned with the windows
    wait_ns_per_step: tuple[int, ...]
    count_per_step: tuple[int, ...]
    share_per_step: tuple[float, ...]
    gpu_idle_wait_ns_per_step: tuple[int, ...]
    # over the windows
    mean_wait_ns_per_step: float
    median_wait_ns_per_step: float
    max_wait_ns_per_step: int
    mean_share: float
    mean_count_per_step: float
    mean_gpu_idle_wait_ns_per_step: float
    first_step_wait_ns: int
    mean_wait_ns_excl_first: float
    first_step_outlier: bool
    # totals (over the windows; the whole rank with no windows)
    count: int
    wait_ns: int
    gpu_idle_wait_ns: int
    dataloader: dict[str, Any] | None
    # the input-pipeline verdict (module docstring)
    input_bound_pct: float = 0.0
    verdict: str = "unknown"
    in_process: bool = False


SINGLE_PROCESS_ITER = "_SingleProcessDataLoaderIter"  # PyTorch's iterator for num_workers=0


def loads_in_process(loader: dict[str, Any] | None, sites: list[str]) -> bool:
    """Whether the waiting process makes the batches itself (module docstring)."""
    workers = loader.get("num_workers") if loader else None
    if isinstance(workers, int) and not isinstance(workers, bool):
        return workers == 0
    return any(SINGLE_PROCESS_ITER in s for s in sites)


def input_wait_intervals(g: StepGraph) -> tuple[I64, I64]:
    """Union of the rank's input-wait intervals (all threads). Sorted, disjoint."""
    return iv.union(*bounds(g.table("input_waits")))


def wait_sites(g: StepGraph, top: int = 3) -> list[str]:
    """The first ``top`` distinct names of the rank's input waits (where the loop waited)."""
    return distinct_names(g.table("input_waits"), "name")[:top]


def analyze_input(g: StepGraph, win_start: I64, win_end: I64) -> InputAnalysis:
    """Input waits of ``rank`` per step (module docstring has the formulas)."""
    ws, we = iv.as_i64(win_start), iv.as_i64(win_end)
    n = ws.size
    w_s, w_e = bounds(g.table("input_waits"))
    u_s, u_e = iv.union(w_s, w_e)
    g_s, g_e, _, _ = gpu_records(g)
    b_s, b_e = iv.union(g_s, g_e)
    i_s, i_e = iv.subtract(u_s, u_e, b_s, b_e)

    wait = iv.overlap_with_windows(u_s, u_e, ws, we)
    idle = iv.overlap_with_windows(i_s, i_e, ws, we)
    counts = count_window(iv.assign_to_windows(w_s, ws, we), n)
    wall = (we - ws).astype(np.float64)
    share = np.divide(wait, wall, out=np.zeros(n, dtype=np.float64), where=wall > 0)

    first = int(wait[0]) if n else 0
    rest = wait[1:]
    outlier = bool(n >= 2 and first > FIRST_STEP_FACTOR * float(np.median(rest))
                   + FIRST_STEP_MIN_EXCESS_NS)
    loader = loader_settings(g.manifest.settings, g.rank_id)
    idle_share = np.divide(idle, wall, out=np.zeros(n, dtype=np.float64), where=wall > 0)
    kept = idle_share[1:] if outlier else idle_share
    bound_pct = 100.0 * mean_of(kept)
    return InputAnalysis(
        rank=g.rank_id,
        n_steps=n,
        wait_ns_per_step=ints(wait),
        count_per_step=ints(counts),
        share_per_step=tuple(float(x) for x in share),
        gpu_idle_wait_ns_per_step=ints(idle),
        mean_wait_ns_per_step=mean_of(wait),
        median_wait_ns_per_step=median_of(wait),
        max_wait_ns_per_step=int(wait.max()) if n else 0,
        mean_share=mean_of(share),
        mean_count_per_step=mean_of(counts),
        mean_gpu_idle_wait_ns_per_step=mean_of(idle),
        first_step_wait_ns=first,
        mean_wait_ns_excl_first=mean_of(rest),
        first_step_outlier=outlier,
        count=int(counts.sum()) if n else int(w_s.size),
        wait_ns=int(wait.sum()) if n else int((u_e - u_s).sum()),
        gpu_idle_wait_ns=int(idle.sum()) if n else int((i_e - i_s).sum()),
        dataloader=loader,
        input_bound_pct=bound_pct,
        verdict=input_verdict(bound_pct, measured=w_s.size > 0),
        in_process=loads_in_process(loader, distinct_names(g.table("input_waits"), "name")),
    )


def loader_settings(settings: dict[str, Any], rank: int) -> dict[str, Any] | None:
    """The data loader's settings for ``rank``: live capture records them per rank
    (``ranks.rank<N>.host.dataloader``); a run-wide ``dataloader`` entry is the fallback."""
    ranks = settings.get("ranks")
    per_rank = ranks.get(f"rank{rank}") if isinstance(ranks, dict) else None
    host = per_rank.get("host") if isinstance(per_rank, dict) else None
    raw = host.get("dataloader") if isinstance(host, dict) else None
    if raw is None:
        raw = settings.get("dataloader")
    return dict(raw) if isinstance(raw, dict) else None
