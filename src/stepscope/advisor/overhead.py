"""How far can host-side timings be trusted? Profiler-overhead awareness.

A trace taken with a heavy host profiler (torch.profiler with ``with_stack``,
``record_shapes``, ``profile_memory``) inflates every framework op on the host:
the recorded step is longer than the real one and looks host-bound. Measured on
this project's H100 fixture (a 6-layer GPT step, torch 2.11): 25 ms untraced,
39.8 ms traced with all three options, with ~5,500 host events (cpu_op +
python_function) per step, i.e. about 2.7 us of profiler cost per host event.

The estimate: ``inflation = host events per step x per-event cost`` where the
per-event cost is 2.7 us with stacks and 2.0 us without (torch.profiler CPU+CUDA
without stacks made the same 25 ms step 1.26x slower, i.e. ~6.5 ms over ~3,300
cpu_op events per step; both figures from ../shared/guide/DEVICE.md, H100, 2026-11-22).
Host findings are "low" confidence when the inflation is at least 25% of the
step, "medium" at 10%, else "high".
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from stepscope.advisor.base import Confidence
from stepscope.analysis import Analysis
from stepscope.store.run import Run

COST_PER_EVENT_WITH_STACK_NS = 2_700
COST_PER_EVENT_NS = 2_000
LOW_SHARE = 0.25
MEDIUM_SHARE = 0.10


@dataclass(frozen=True)
class HostTrust:
    confidence: Confidence
    note: str
    est_inflation_ms: float  # per step, estimated profiler cost on the host
    host_events_per_step: float
    with_stack: bool


def _flags(run: Run) -> dict[str, bool]:
    files = run.manifest.source.details.get("files", [])
    out = {"with_stack": False, "record_shapes": False, "profile_memory": False}
    for f in files if isinstance(files, list) else []:
        for k in out:
            out[k] = out[k] or bool(f.get(k))
    return out


def host_trust(run: Run, analysis: Analysis) -> HostTrust:
    if run.manifest.source.kind != "kineto":
        return HostTrust(Confidence.HIGH, "", 0.0, 0.0, False)
    flags = _flags(run)
    ops = run.table("cpu_ops")
    with_stack = flags["with_stack"] or (
        ops.num_rows > 0 and pc.any(pc.equal(ops.column("kind").cast(pa.string()), "python")).as_py()
        is True)
    cost = COST_PER_EVENT_WITH_STACK_NS if with_stack else COST_PER_EVENT_NS
    per_step_events: list[float] = []
    per_step_ms: list[float] = []
    for ra in analysis.ranks:
        steady = ra.steps.steady
        if not steady:
            continue
        lo, hi = steady[0].start_ns, steady[-1].end_ns
        t = run.table("cpu_ops", ra.rank)
        ts = t.column("ts_ns")
        n = pc.sum(pc.and_(pc.greater_equal(ts, lo), pc.less(ts, hi))).as_py() or 0
        per_step_events.append(n / len(steady))
        per_step_ms.append(sum(s.wall_ns for s in steady) / len(steady) / 1e6)
    if not per_step_events:
        return HostTrust(Confidence.HIGH, "", 0.0, 0.0, with_stack)
    events = sum(per_step_events) / len(per_step_events)
    step_ms = sum(per_step_ms) / len(per_step_ms)
    inflation = events * cost / 1e6
    share = inflation / step_ms if step_ms else 0.0
    opts = [k for k, v in flags.items() if v] or (["with_stack"] if with_stack else [])
    how = f"torch.profiler{' with ' + ', '.join(opts) if opts else ''}"
    note = (f"traced with {how}: about {events:.0f} host events per step at ~{cost / 1000:.1f} us "
            f"each inflate host time by an estimated {inflation:.1f} ms per step "
            f"({share:.0%} of the traced step); host-side findings overstate the cost")
    if share >= LOW_SHARE:
        conf = Confidence.LOW
    elif share >= MEDIUM_SHARE:
        conf = Confidence.MEDIUM
    else:
        conf, note = Confidence.HIGH, ""
    return HostTrust(conf, note, inflation, events, with_stack)
