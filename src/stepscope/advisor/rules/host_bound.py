"""host_bound: the GPU idles while the host runs Python / CPU work inside the step.

Saving per step = mean over the steady steps of the GPU-idle time left once input waits,
syncs, step-boundary gaps and short launch waits are claimed by their own rules
(``rules._idle``): time during which a host thread ran framework ops, Python functions or
user annotations (the ``host`` category of the step-time breakdown), launch-path time in
waits longer than 100 µs (a framework op computing on the CPU before it launches), and
idle time with no host event at all (Python the trace did not record: the breakdown's
``idle``), scaled by the profiler correction. If that host work left the step (or ran
ahead of the GPU), the GPU would be fed instead of waiting. When more than half of it has
no host event, confidence is at most medium.

Evidence: the innermost framework ops, user Python frames and user annotations on the
training thread during that time (exclusive time, ``rules._evidence``); framework ops
that issued no GPU work are marked as run on the CPU. Host-side timings of a heavy
profiler are flagged through ``ctx.host_confidence`` / ``ctx.host_note``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stepscope.advisor.base import Confidence, Context, Finding, Fix
from stepscope.advisor.rules._evidence import (
    host_time_by_op,
    max_severity,
    ms,
    op_list,
    pct,
    profiler_line,
    where_worst,
)
from stepscope.advisor.rules._idle import IdleSplit, worst_rank
from stepscope.analysis import RankAnalysis
from stepscope.schema import CpuOpKind

UNSEEN_SHARE = 0.5  # more than this share with no host event: at most medium confidence

FIX = Fix(
    pytorch=("move per-step CPU work out of the step (into DataLoader workers or every N "
             "steps); replace Python loops over tensors and per-element indexing with "
             "vectorised tensor ops; create tensors on the GPU (device=...) instead of "
             "computing on CPU tensors; torch.compile the model / step to cut Python and "
             "dispatch overhead; CUDA graphs (torch.compile(mode='reduce-overhead')) for "
             "static shapes"),
    tensorflow=("wrap the step in tf.function (and jit_compile=True); keep Python and NumPy "
                "out of it; export TF_GPU_THREAD_MODE=gpu_private when the GPU launch "
                "threads compete with other host threads"),
    jax="jax.jit the whole train step; keep Python control flow and NumPy out of the loop",
    cuda="move host computation off the critical path (another thread) or onto the GPU",
)


class HostBound:
    id = "host_bound"
    title = "Host-bound: the GPU waits for Python/CPU work"
    category = "host"
    requires: tuple[str, ...] = ("kernels",)

    def check(self, ctx: Context) -> Sequence[Finding]:
        best = worst_rank(ctx, lambda split: split.mean_ms(split.host) * split.host_factor)
        return [] if best is None else [self._finding(ctx, *best)]

    def _finding(self, ctx: Context, saving: float, ra: RankAnalysis, split: IdleSplit
                 ) -> Finding:
        n = split.n
        per = split.per_step(split.host).astype(np.float64) * split.host_factor
        raw = split.mean_ms(split.host)
        evidence = [
            (f"GPU idle inside the step while the host does other work than launching: "
            f"{ms(raw * 1e6)} per step (breakdown 'host' {ms(ra.breakdown.mean_ms['host'] * 1e6)}"
            f", 'idle' {ms(ra.breakdown.mean_ms['idle'] * 1e6)}; step-boundary gaps, syncs, "
            f"input waits and launch waits are counted by their own findings)"),
        ]
        fw = host_time_by_op(ctx.run, ra.rank, split.host, kind=CpuOpKind.FRAMEWORK.value)
        py = host_time_by_op(ctx.run, ra.rank, split.host, kind=CpuOpKind.PYTHON.value)
        ann = host_time_by_op(ctx.run, ra.rank, split.host, kind="annotation")
        if fw:
            evidence.append(f"framework ops (innermost) while the GPU waits: "
                            f"{op_list(fw, n, mark_cpu=True)} per step")
        cpu_only = [o for o in fw if o.cpu_only_ns * 2 > o.ns]
        if cpu_only:
            evidence.append(f"{len(cpu_only)} of them issued no GPU work: CPU-placed ops "
                            f"inside the step ({', '.join(o.name for o in cpu_only[:3])})")
        if py:
            evidence.append(f"user Python (innermost frames): {op_list(py, n)} per step")
        if ann:
            evidence.append(f"annotated ranges: {op_list(ann, n)} per step")
        other = split.mean_ms(split.other)
        if other > 0:
            evidence.append(f"{ms(other * 1e6)} per step of it has no host event at all: "
                            f"Python work the trace did not record (no with_stack / stack "
                            f"samples), sleeps or I/O")
        line = profiler_line(split)
        if line:
            evidence.append(line)
        if len(ctx.ranks) > 1:
            evidence.append(f"rank {ra.rank} is the worst of {len(ctx.ranks)} ranks")
        method = (f"mean over {n} steady steps of the GPU idle time inside the step while the "
                  f"host ran framework ops, Python or unrecorded work (breakdown 'host' and "
                  f"'idle', plus launch-path time in waits > 100 µs), excluding input waits, "
                  f"syncs, step-boundary gaps and short launch waits")
        if abs(split.host_factor - 1.0) >= 0.01:
            method += (f"; scaled by {split.host_factor:.2f} for the profiler's own host cost "
                       f"(rules/_idle.py)")
        top = (py or fw or ann)
        title = (f"Host-bound: the GPU idles {ms(saving * 1e6)} per step "
                 f"({pct(ctx.share(saving))}) while the host runs Python/CPU work"
                 + (f" ({top[0].name})" if top else ""))
        sites = [o.name for o in (py[:3] + fw[:3])]
        where = where_worst(split, per.astype(np.int64), call_sites=sites)
        confidence, note = ctx.host_confidence, ctx.host_note
        if raw > 0 and other > UNSEEN_SHARE * raw and confidence == Confidence.HIGH:
            confidence = Confidence.MEDIUM
            note = (f"{pct(other / raw)} of this idle time has no host event: the trace does "
                    f"not say what the host was doing (record with Python stacks to see it)")
        return ctx.finding(id=self.id, category=self.category, title=title, saving_ms=saving,
                           method=method, evidence=evidence, fix=FIX, where=where,
                           confidence=confidence, note=note,
                           max_severity=max_severity(ctx, ra, host_side=True))


RULE = HostBound()
