"""What one side of a diff holds: per run and rank, the steady steps' times and what a step
spends on each breakdown category, kernel and op (:class:`RankSample`), from the analysis.

* Steps are the analysis' steady steps (``analysis.steady``), each measured on its window on
  the GPU timeline (``Step.span_ns``, what the breakdown adds up to).
* Categories are the breakdown's mean over the steady steps (``Breakdown.mean_ms``).
* A kernel belongs to the steady step whose window holds its start; its time per step is
  its total there over the number of steady steps, and its launch configuration is the
  (grid, block) with the most time under its name.
* Ops are the host side's named work: framework ops (``cpu_ops``), the user's annotations
  and NVTX ranges (step markers left out) and CUDA/HIP API calls (``api_calls``). One belongs
  to the steady step whose marker holds its start; its time is inclusive (an op's children
  count in it too, as in the trace).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.analysis import Analysis
from stepscope.analysis.breakdown import GPU_CATEGORIES
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.intervals import assign_to_windows
from stepscope.analysis.kernels import kernel_frame
from stepscope.analysis.results import RankAnalysis
from stepscope.analysis.steady import PeriodicWork
from stepscope.analysis.steps import work_annotations
from stepscope.model.idle import split_idle

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Config = tuple[int, int, int, int, int, int]  # grid x, y, z, block x, y, z (0: unknown)


@dataclass(frozen=True)
class Use:
    """A kernel's or an op's use per steady step."""

    calls: float  # per step
    ms: float  # per step
    config: Config | None = None  # kernels: the launch configuration with the most time


@dataclass(frozen=True)
class RankSample:
    rank: int
    step_numbers: tuple[int, ...]  # of the steady steps, in order
    steps_ms: tuple[float, ...]  # their times (window spans)
    categories_ms: dict[str, float]  # mean per steady step
    kernels: dict[str, Use]
    ops: dict[str, Use]
    step_detail: str  # how the analysis found the steps
    work: PeriodicWork | None = None  # steps recovered from periodicity: what a step holds
    causes_ms: dict[str, float] = field(default_factory=dict)  # mean per steady step, CAUSES

    def scaled(self, f: float) -> RankSample:
        """Every per-step figure times ``f`` (steps holding ``f`` times the work)."""
        return replace(
            self, steps_ms=tuple(x * f for x in self.steps_ms),
            categories_ms={c: v * f for c, v in self.categories_ms.items()},
            causes_ms={c: v * f for c, v in self.causes_ms.items()},
            kernels={k: replace(u, calls=u.calls * f, ms=u.ms * f) for k, u in self.kernels.items()},
            ops={k: replace(u, calls=u.calls * f, ms=u.ms * f) for k, u in self.ops.items()})


def rank_sample(analysis: Analysis, ra: RankAnalysis) -> RankSample:
    steady = ra.steps.steady
    g = analysis.graph.rank(ra.rank)
    n = len(steady)
    ws = np.array([s.window[0] for s in steady], dtype=np.int64)
    we = np.array([s.window[1] for s in steady], dtype=np.int64)
    ms = np.array([s.start_ns for s in steady], dtype=np.int64)
    me = np.array([s.end_ns for s in steady], dtype=np.int64)
    kernels = _kernel_uses(kernel_frame(g), ws, we, n) if n else {}
    ops = _op_uses(_host_named(g), ms, me, n) if n else {}
    return RankSample(
        rank=ra.rank, step_numbers=tuple(s.number for s in steady),
        steps_ms=tuple(s.span_ns / 1e6 for s in steady),
        categories_ms=dict(ra.breakdown.mean_ms), kernels=kernels, ops=ops,
        step_detail=ra.steps.detail, work=ra.steps.work,
        causes_ms=causes(analysis, ra) if n else {})


# What the step's time went to, GPU idle time split by what the GPU waited for: the GPU
# categories of the breakdown, then the idle split the advisor uses (``model.idle``: first
# claim wins; ``host`` includes the GPU idle time no recorded event explains, which the
# breakdown leaves ``idle`` on a rank with host ops). Sums to the mean steady step, as the
# categories do.
CAUSES: tuple[str, ...] = ("compute", "communication", "copies", "input_wait", "sync",
                           "step_gaps", "launch", "host")


def causes(analysis: Analysis, ra: RankAnalysis) -> dict[str, float]:
    """Mean ms per steady step of each of :data:`CAUSES` on rank ``ra``."""
    n = len(ra.steps.steady)
    if not n:
        return {}
    sp = split_idle(analysis, ra)
    out = {c: float(ra.breakdown.mean_ms.get(c, 0.0)) for c in GPU_CATEGORIES}
    idle = {"input_wait": sp.input.total_ns, "sync": sp.sync_blocked.total_ns
            + sp.sync_drain.total_ns, "step_gaps": sp.gaps.total_ns,
            "launch": sp.launch.total_ns, "host": sp.host.total_ns}
    out.update({c: v / n / 1e6 for c, v in idle.items()})
    return out


def _in_steps(t: pa.Table, starts: I64, ends: I64) -> pa.Table:
    if t.num_rows == 0:
        return t
    ts = np.asarray(t.column("ts_ns").to_numpy(), dtype=np.int64)
    return t.filter(pa.array(assign_to_windows(ts, starts, ends) >= 0))


def _kernel_uses(frame: pa.Table, starts: I64, ends: I64, n: int) -> dict[str, Use]:
    t = _in_steps(frame.select(["ts_ns", "dur_ns", "name", "grid_x", "grid_y", "grid_z",
                                "block_x", "block_y", "block_z"]), starts, ends)
    if t.num_rows == 0:
        return {}
    geo = ["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]
    t = t.set_column(t.schema.get_field_index("name"), "name", t.column("name").cast(pa.string()))
    for c in geo:
        t = t.set_column(t.schema.get_field_index(c), c, pc.fill_null(t.column(c).cast(pa.int64()), 0))
    by_cfg = t.group_by(["name", *geo]).aggregate([("dur_ns", "sum"), ("dur_ns", "count")])
    out: dict[str, tuple[int, int, Config, int]] = {}  # name -> calls, ns, config, its ns
    cols = {c: by_cfg.column(c).to_pylist() for c in ["name", *geo, "dur_ns_sum", "dur_ns_count"]}
    for i, name in enumerate(cols["name"]):
        ns, calls = int(cols["dur_ns_sum"][i]), int(cols["dur_ns_count"][i])
        cfg: Config = (cols["grid_x"][i], cols["grid_y"][i], cols["grid_z"][i],
                       cols["block_x"][i], cols["block_y"][i], cols["block_z"][i])
        c0, n0, best, best_ns = out.get(name, (0, 0, cfg, -1))
        if ns > best_ns:
            best, best_ns = cfg, ns
        out[name] = (c0 + calls, n0 + ns, best, best_ns)
    return {k: Use(calls=c / n, ms=ns / 1e6 / n, config=cfg) for k, (c, ns, cfg, _) in out.items()}


def _host_named(g: StepGraph) -> pa.Table:
    """Framework ops, user annotations and NVTX ranges (not step markers), API calls."""
    cols = ["ts_ns", "dur_ns", "name"]
    parts = [g.table("cpu_ops").select(cols), g.table("api_calls").select(cols)]
    ann = work_annotations(g)
    if ann.num_rows:
        parts.append(ann.select(cols))
    return pa.concat_tables([pa.table({"ts_ns": p.column("ts_ns").cast(pa.int64()),
                                       "dur_ns": p.column("dur_ns").cast(pa.int64()),
                                       "name": p.column("name").cast(pa.string())})
                             for p in parts])


def _op_uses(ops: pa.Table, starts: I64, ends: I64, n: int) -> dict[str, Use]:
    t = _in_steps(ops.select(["ts_ns", "dur_ns", "name"]), starts, ends)
    if t.num_rows == 0:
        return {}
    agg = t.group_by("name").aggregate([("dur_ns", "sum"), ("dur_ns", "count")])
    names = agg.column("name").to_pylist()
    sums = agg.column("dur_ns_sum").to_pylist()
    counts = agg.column("dur_ns_count").to_pylist()
    return {str(k): Use(calls=c / n, ms=s / 1e6 / n) for k, s, c in zip(names, sums, counts)}


def mean_uses(samples: list[dict[str, Use]]) -> dict[str, Use]:
    """The mean use per step over several samples (ranks or runs); a name a sample lacks
    counts 0 there. The configuration is that of the sample with the most time."""
    out: dict[str, Use] = {}
    if not samples:
        return out
    k = len(samples)
    for name in {n for s in samples for n in s}:
        uses = [s[name] for s in samples if name in s]
        top = max(uses, key=lambda u: u.ms)
        out[name] = Use(calls=sum(u.calls for u in uses) / k, ms=sum(u.ms for u in uses) / k,
                        config=top.config)
    return out
