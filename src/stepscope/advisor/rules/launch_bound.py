"""launch_bound: kernels are shorter than their launches and the GPU waits for the next one.

Saving per step = mean over the steady steps of the GPU-idle time in *short launch-bound
waits*: the GPU had finished all its work and waited at most 100 µs for work whose launch
call had not returned yet (``analysis.launches``), while the host was in the launch path
(the launch call or the framework op issuing it) or ran nothing recorded (the
interpreter between two launching ops) - the issue's "launch gaps shrunk to the GPU time
of the kernels" (``model.idle``: outside input waits, syncs and step-boundary gaps,
scaled by the profiler correction). It never exceeds the short launch-bound idle of
``analysis.launches``; that figure, the breakdown's ``launch`` category and the whole
launch-bound idle are shown as cross-checks. Longer waits are host work
(``host_bound``). Fires with at least :data:`MIN_LAUNCHES` launches per step (an eager loop
without a step hook qualifies: its kernel-stream periods are grouped into steps of at least
2 ms, ``analysis.periodicity``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stepscope.advisor.base import Context, Finding, Fix
from stepscope.advisor.rules._evidence import (
    max_severity,
    ms,
    pct,
    profiler_line,
    us,
    where_worst,
)
from stepscope.advisor.rules._idle import worst_rank
from stepscope.analysis import RankAnalysis
from stepscope.analysis.kernel_names import signature_head
from stepscope.model.idle import IdleSplit
from stepscope.model.kernels import launch_stats

MIN_LAUNCHES = 10
NAME_CHARS = 60

FIX = Fix(
    pytorch=("torch.compile(model) fuses small ops into fewer kernels; "
             "mode='reduce-overhead' also replays the step as a CUDA graph (one launch); "
             "or capture the step yourself with torch.cuda.graph / "
             "torch.cuda.make_graphed_callables; fused optimizers "
             "(torch.optim.AdamW(..., fused=True) or foreach=True); a larger batch per step "
             "makes each kernel longer for the same launches"),
    tensorflow=("compile the step with XLA: tf.function(jit_compile=True) or "
                "model.compile(jit_compile=True); steps_per_execution=N in Keras; "
                "TF_GPU_THREAD_MODE=gpu_private gives each GPU its own launch threads"),
    jax=("jax.jit larger regions (the whole train step, not op by op); loops as lax.scan / "
         "lax.fori_loop instead of Python loops that dispatch per iteration"),
    cuda="CUDA graphs (cudaStreamBeginCapture / cudaGraphLaunch); fuse small kernels",
)


def _short_name(name: str) -> str:
    head = signature_head(name)
    return head if len(head) <= NAME_CHARS else head[: NAME_CHARS - 1] + "…"


class LaunchBound:
    id = "launch_bound"
    title = "Launch-bound: the GPU waits for kernel launches"
    category = "launch"
    requires: tuple[str, ...] = ("kernels", "api_calls")

    def check(self, ctx: Context) -> Sequence[Finding]:
        best = worst_rank(ctx, lambda split: split.mean_ms(split.launch) * split.host_factor,
                          lambda ra: ra.launches.mean_launches_per_step >= MIN_LAUNCHES)
        return [] if best is None else [self._finding(ctx, *best)]

    def _finding(self, ctx: Context, saving: float, ra: RankAnalysis, split: IdleSplit
                 ) -> Finding:
        la = ra.launches
        n = split.n
        per = split.per_step(split.launch).astype(np.float64) * split.host_factor
        med_k, tiny = launch_stats(ctx.graph_of(ra.rank), split.win_start, split.win_end)
        tiny = [(_short_name(n), c, d) for n, c, d in tiny]
        evidence = [
            (f"{la.mean_launches_per_step:.0f} launches per step; median launch call "
            f"{us(la.median_api_ns)}, median kernel {us(med_k)}"),
            (f"{pct(la.short_kernel_share)} of the kernels run shorter than their launch call "
            f"({la.short_kernels / max(n, 1):.0f} per step)"),
            (f"GPU waiting <= 100 µs for the next launch while the host launches: "
            f"{ms(split.mean_ms(split.launch) * 1e6)} per step (cross-checks: breakdown "
            f"'launch' {ms(ra.breakdown.mean_ms['launch'] * 1e6)}, short launch-bound idle "
            f"{ms(la.mean_launch_idle_short_ns_per_step)}, all launch-bound idle "
            f"{ms(la.mean_launch_idle_ns_per_step)} per step)"),
        ]
        if tiny:
            evidence.append("most frequent kernels shorter than their launch: " + ", ".join(
                f"{nm} x{c / max(n, 1):.0f}/step ({us(d)})" for nm, c, d in tiny))
        if la.graph_launches:
            evidence.append(f"{la.graph_launches} CUDA graph launches in the steady steps")
        line = profiler_line(split)
        if line:
            evidence.append(line)
        if len(ctx.ranks) > 1:
            evidence.append(f"rank {ra.rank} is the worst of {len(ctx.ranks)} ranks")
        method = (f"mean over {n} steady steps of the GPU idle time in launch-bound waits of "
                  f"at most 100 µs (the GPU finished its work, the next kernel's launch had not "
                  f"returned) while the host was in the launch path: the time saved if those "
                  f"gaps shrank to the kernels' own GPU time; input waits, syncs and "
                  f"step-boundary gaps excluded")
        title = (f"Launch-bound: {la.mean_launches_per_step:.0f} launches per step, the GPU "
                 f"waits {ms(saving * 1e6)} per step ({pct(ctx.share(saving))}) for them")
        where = where_worst(split, per.astype(np.int64), kernels=[t[0] for t in tiny])
        return ctx.finding(id=self.id, category=self.category, title=title, saving_ms=saving,
                           method=method, evidence=evidence, fix=FIX, where=where,
                           confidence=ctx.host_confidence, note=ctx.host_note,
                           max_severity=max_severity(ctx, ra, host_side=True))


RULE = LaunchBound()
