"""step_gaps: the GPU idles between steps while the host logs, checkpoints, evaluates...

The gap at a step boundary is the GPU-idle interval that contains (or touches) the
boundary: from the last GPU activity before it to the first after it (``model.idle``,
clipped to the steady windows, so each step holds its leading and trailing part). Parts
already claimed by input waits (``input_bound``) and syncs and their drain
(``sync_calls``) are left out, the rest is scaled by the profiler correction.

Saving per step = mean over the steady steps of ``max(0, gap - floor)``, where the floor
is the unavoidable cost of starting the next step's GPU work: the next kernel's launch
call plus a launch latency of about the same size, ``2 x`` the median launch call.

Cause hints: the innermost host ops, user Python frames and user annotations running in
the gaps, and their names matched against :data:`HINTS`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from stepscope.advisor.base import Context, Finding, Fix
from stepscope.advisor.rules._evidence import (
    max_severity,
    ms,
    op_list,
    pct,
    profiler_line,
    where_worst,
)
from stepscope.analysis import RankAnalysis
from stepscope.model.host_ops import OpTime, idle_ops
from stepscope.model.idle import IdleSplit, split_idle
from stepscope.schema_enums import CpuOpKind

FLOOR_LAUNCHES = 2
HINTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("logging / printing", re.compile(r"\blog(ging|ger)?\b|log_(metric|scalar|dict|stat|"
                                      r"value|image|step)|print|tensorboard|wandb|mlflow|"
                                      r"summary|writer", re.IGNORECASE)),
    ("metrics / evaluation", re.compile(r"metric|accura|eval|valid", re.IGNORECASE)),
    ("checkpointing", re.compile(r"checkpoint|save|state_dict|serializ|pickle", re.IGNORECASE)),
    ("callbacks / hooks", re.compile(r"callback|hook", re.IGNORECASE)),
    ("optimizer.zero_grad", re.compile(r"zero_grad", re.IGNORECASE)),
    ("garbage collection", re.compile(r"\bgc\b|gc\.collect", re.IGNORECASE)),
)

FIX = Fix(
    pytorch=("log and compute metrics every N steps, from values kept on the device "
             "(running sums, torch.no_grad); save checkpoints every N steps and without "
             "blocking the loop (torch.distributed.checkpoint.async_save, or copy the state "
             "and write it from a thread); run evaluation less often; gc.freeze() after "
             "start-up if the collector runs in the gaps"),
    tensorflow=("Keras: callbacks with update_freq=N / save_freq=N, "
                "model.compile(steps_per_execution=N); tf.summary writes every N steps; "
                "tf.train.CheckpointManager with async checkpointing "
                "(tf.train.CheckpointOptions(experimental_enable_async_checkpoint=True))"),
    jax=("fetch metrics every N steps (jax.device_get of an accumulated pytree); "
         "orbax AsyncCheckpointer for checkpoints; keep the loop free of host work"),
    cuda="keep the next step's work queued before doing host work between steps",
)


def _per_step(split: IdleSplit, floor_ns: float) -> tuple[np.ndarray, np.ndarray]:
    gap = split.per_step(split.gaps).astype(np.float64) * split.host_factor
    return np.maximum(gap - floor_ns, 0.0), gap


def hints(groups: Sequence[Sequence[OpTime]]) -> list[str]:
    """Causes named by user annotations and Python frames in the gaps, most time first.

    Framework ops are not matched: their names are math (``aten::log_softmax``)."""
    found: dict[str, tuple[int, str]] = {}
    for ops in groups:
        for o in ops:
            for label, rx in HINTS:
                if rx.search(o.name) and o.ns > found.get(label, (0, ""))[0]:
                    found[label] = (o.ns, o.name)
    return [label for label, _ in sorted(found.items(), key=lambda kv: -kv[1][0])]


class StepGaps:
    id = "step_gaps"
    title = "GPU idle between steps"
    category = "host"
    requires: tuple[str, ...] = ("kernels",)

    def check(self, ctx: Context) -> Sequence[Finding]:
        best: tuple[float, RankAnalysis, IdleSplit, float] | None = None
        for ra in ctx.ranks:
            if not ra.steps.steady or not ra.devices_used:  # no GPU records: no GPU gaps
                continue
            split = split_idle(ctx.analysis, ra)
            floor = FLOOR_LAUNCHES * ra.launches.median_api_ns
            saving = float(_per_step(split, floor)[0].mean()) / 1e6
            if best is None or saving > best[0]:
                best = (saving, ra, split, floor)
        if best is None or not ctx.worth_reporting(best[0]):
            return []
        return [self._finding(ctx, *best)]

    def _finding(self, ctx: Context, saving: float, ra: RankAnalysis, split: IdleSplit,
                 floor: float) -> Finding:
        n = split.n
        per, gap = _per_step(split, floor)
        raw = split.per_step(split.gaps)
        claimed = split.per_step(split.input | split.sync_blocked | split.sync_drain)
        worst = int(np.argmax(per))
        evidence = [
            (f"GPU idle at step boundaries (last GPU work of a step to the first of the "
            f"next): {ms(raw.mean())} per step, not counting {ms(claimed.mean())} per step "
            f"of input waits and syncs (other findings)"),
            (f"worst: step {split.steps[worst].index}, {ms(gap[worst])}; floor "
            f"{ms(floor)} per step ({FLOOR_LAUNCHES} x the median launch call) is "
            f"unavoidable"),
        ]
        groups = [idle_ops(ctx.graph_of(ra.rank), "gaps", split.gaps, k)
                  for k in ("annotation", CpuOpKind.PYTHON.value, CpuOpKind.FRAMEWORK.value)]
        for label, ops in zip(("annotations", "user Python", "framework ops"), groups):
            if ops:
                evidence.append(f"host in the gaps, {label}: {op_list(ops[:3], n)} per step")
        causes = hints(groups[:2])
        if causes:
            evidence.append("looks like: " + ", ".join(causes))
        elif not any(groups):
            evidence.append("no host events in the gaps: the trace has no host ops there "
                            "(unrecorded Python work, I/O or sleeps)")
        line = profiler_line(split)
        if line:
            evidence.append(line)
        if len(ctx.ranks) > 1:
            evidence.append(f"rank {ra.rank} is the worst of {len(ctx.ranks)} ranks")
        method = (f"mean over {n} steady steps of the GPU-idle interval around each step "
                  f"boundary (last GPU work of a step to the first of the next), minus input "
                  f"waits and sync-caused idle, minus a floor of {FLOOR_LAUNCHES} x the median "
                  f"launch call per step")
        title = (f"GPU idle {ms(saving * 1e6)} per step ({pct(ctx.share(saving))}) between "
                 f"steps" + (f": {causes[0]}" if causes else ""))
        sites = [o.name for ops in groups for o in ops[:2]]
        where = where_worst(split, per.astype(np.int64), call_sites=sites)
        return ctx.finding(id=self.id, category=self.category, title=title, saving_ms=saving,
                           method=method, evidence=evidence, fix=FIX, where=where,
                           confidence=ctx.host_confidence, note=ctx.host_note,
                           max_severity=max_severity(ctx, ra, host_side=True))


RULE = StepGaps()
