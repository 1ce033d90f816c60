"""sync_calls: host-device syncs inside the step (explicit syncs, ``.item()``, blocking copies).

A sync costs the GPU idle time it causes (``model.idle``):

* the GPU idle time while a host thread is blocked in a sync call or a blocking copy
  (outside input waits) - the ``sync`` category of the step-time breakdown;
* plus the idle time after it: once the sync returns the host must refill an empty queue,
  and every host delay until it is ahead of the GPU again leaves the GPU idle (launch gaps,
  Python between ops, the step boundary). Claimed: the first ``head`` of GPU idle time after
  the sync (before the next sync that waits on a busy GPU), where ``head`` = the GPU busy time
  during the sync: the head start the host gave away by waiting, i.e. how much host delay it
  could have hidden without the sync. With a torch.profiler trace, ``head`` also counts the
  profiler's cost of the host events that ran while the host was ahead (the untraced host
  reaches the sync that much earlier), and the idle time is scaled by the profiler
  correction of ``model.idle``.

Saving per step = the mean over the steady steps of that idle time. Evidence: sync points
per step, host blocked time, GPU idle split, kinds, top call sites (framework op and user
Python frame from ``analysis.syncs``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from stepscope.advisor.base import Context, Finding, Fix
from stepscope.advisor.rules._evidence import max_severity, ms, pct, profiler_line, where_worst
from stepscope.advisor.rules._idle import worst_rank
from stepscope.analysis import RankAnalysis
from stepscope.analysis.syncs import SyncPointKind
from stepscope.model.idle import IdleSplit

_FIX_BY_KIND = {
    SyncPointKind.SCALAR_READ.value: (
        "keep running sums on the device (total += loss.detach()) and call .item() / "
        ".cpu() / .tolist() every N steps; avoid print(tensor) and Python `if tensor:` in "
        "the loop"),
    SyncPointKind.BLOCKING_COPY.value: (
        "copy inputs with tensor.to(device, non_blocking=True) from pinned memory "
        "(DataLoader(pin_memory=True) or tensor.pin_memory()); never copy to pageable memory "
        "in the step"),
    SyncPointKind.EXPLICIT_SYNC.value: (
        "drop torch.cuda.synchronize() / stream.synchronize() from the training loop (time "
        "with CUDA events instead)"),
}
FIX_TAIL = ("torch.cuda.set_sync_debug_mode('warn') names every syncing call; "
            "torch.compile / CUDA graphs need a sync-free step anyway")


# Mixed precision with dynamic loss scaling checks the gradients for inf/NaN every step and
# reads the result on the host (GradScaler's found_inf): a sync in every fp16 step.
LOSS_SCALING = re.compile(r"_amp_foreach_non_finite|_amp_update_scale|unscale|GradScaler|"
                          r"LossScale|loss_scale|found_inf", re.IGNORECASE)
LOSS_SCALING_FIX = ("the sync comes from fp16 dynamic loss scaling (GradScaler reads found_inf "
                    "every step): train in bf16 autocast, which needs no loss scaling, or keep "
                    "fp16 and let torch.compile / CUDA graphs capture the scaler update")


def _fix(kinds: Sequence[str], loss_scaling: bool = False) -> Fix:
    pt = "; ".join(_FIX_BY_KIND[k] for k in kinds if k in _FIX_BY_KIND)
    if loss_scaling:
        pt = f"{LOSS_SCALING_FIX}; {pt}" if pt else LOSS_SCALING_FIX
    return Fix(
        pytorch=f"{pt}; {FIX_TAIL}" if pt else FIX_TAIL,
        tensorflow=("no .numpy() / float(tensor) inside the step; wrap the step in "
                    "tf.function and read metrics every N steps (Keras: steps_per_execution)"
                    + ("; with mixed_float16, LossScaleOptimizer's dynamic loss scale checks "
                       "every step: prefer mixed_bfloat16 (no loss scaling) and jit_compile="
                       "True so the check stays on the device" if loss_scaling else "")),
        jax=("no jax.block_until_ready(), float(x), np.asarray(x) or x.item() in the loop "
             "(block only around a timing measurement, once); keep metrics as device arrays "
             "and fetch them every N steps; host callbacks inside the jitted step "
             "(jax.debug.callback, jax.debug.print, jax.pure_callback, io_callback) stop the "
             "device for the host at every call: take them out of the step or run them every "
             "N steps"),
        cuda=("replace cudaDeviceSynchronize/cudaStreamSynchronize in the loop with events "
              "(cudaStreamWaitEvent) and cudaMemcpyAsync from pinned memory"),
    )


def _per_step(split: IdleSplit) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    blocked = split.per_step(split.sync_blocked).astype(np.float64) * split.share_keep
    drain = split.per_step(split.sync_drain).astype(np.float64) * split.host_factor
    return blocked + drain, blocked, drain


class SyncCalls:
    id = "sync_calls"
    title = "Host-device syncs inside the step"
    category = "sync"
    requires: tuple[str, ...] = ("kernels", "api_calls")

    def check(self, ctx: Context) -> Sequence[Finding]:
        best = worst_rank(ctx, lambda split: float(_per_step(split)[0].mean()) / 1e6,
                          lambda ra: ra.syncs.count > 0)
        return [] if best is None else [self._finding(ctx, *best)]

    def _finding(self, ctx: Context, saving: float, ra: RankAnalysis, split: IdleSplit
                 ) -> Finding:
        sa = ra.syncs
        total, blocked, drain = _per_step(split)
        n = split.n
        kinds = [k for k in sa.by_kind if k.count]
        kinds_txt = ", ".join(f"{k.kind.replace('_', ' ')} x{k.count / n:.1f}"
                              for k in sorted(kinds, key=lambda k: -k.blocked_ns))
        evidence = [
            (f"{sa.mean_count_per_step:.1f} sync points per step ({kinds_txt}); the host is "
            f"blocked {ms(sa.mean_blocked_ns_per_step)} per step"),
            (f"GPU idle while the host is blocked: {ms(blocked.mean())} per step; after the "
            f"syncs, until the host is ahead of the GPU again: {ms(drain.mean())} per step"),
        ]
        sites = sa.call_sites[:3]
        loss_scaling = any(LOSS_SCALING.search(" ".join(filter(None, (c.name, c.frame))))
                           for c in sa.call_sites)
        if loss_scaling:
            evidence.append("a call site belongs to dynamic loss scaling (mixed precision with "
                            "a gradient scaler): it syncs every step")
        for c in sites:
            where_txt = f" in {c.frame}" if c.frame and c.frame != c.name else ""
            evidence.append(f"call site {c.name}{where_txt}: {c.kind.replace('_', ' ')} via "
                            f"{c.api}, {c.count / n:.1f} per step, blocked {ms(c.blocked_ns / n)} "
                            f"per step")
        line = profiler_line(split)
        if line:
            evidence.append(line)
        if len(ctx.ranks) > 1:
            evidence.append(f"rank {ra.rank} is the worst of {len(ctx.ranks)} ranks")
        method = (f"mean over {n} steady steps of the GPU idle time the syncs cause: idle while "
                  f"a host thread is blocked in a sync or blocking copy, plus the first idle "
                  f"time after each sync up to the GPU busy time during that sync (the head "
                  f"start the host lost by waiting); input waits excluded")
        top = sites[0].name if sites else "syncs"
        title = (f"{sa.mean_count_per_step:.1f} host-device syncs per step ({top}) idle the GPU "
                 f"{ms(saving * 1e6)} per step ({pct(ctx.share(saving))})")
        where = where_worst(split, total.astype(np.int64),
                            call_sites=[c.name for c in sites])
        return ctx.finding(id=self.id, category=self.category, title=title, saving_ms=saving,
                           method=method, evidence=evidence,
                           fix=_fix([k.kind for k in sorted(kinds, key=lambda k: -k.blocked_ns)],
                                    loss_scaling),
                           where=where, confidence=ctx.host_confidence, note=ctx.host_note,
                           max_severity=max_severity(ctx, ra, host_side=True))


RULE = SyncCalls()
