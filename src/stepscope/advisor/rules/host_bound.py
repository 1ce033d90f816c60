"""host_bound: the GPU idles while the host runs Python / CPU work inside the step.

Saving per step = mean over the steady steps of the GPU-idle time left once input waits,
syncs, step-boundary gaps and short launch waits are claimed by their own rules
(``model.idle``): time during which a host thread ran framework ops, Python functions or
user annotations (the ``host`` category of the step-time breakdown), launch-path time in
waits longer than 100 µs (a framework op computing on the CPU before it launches), and
idle time with no host event at all (Python the trace did not record: the breakdown's
``idle``, or its ``host`` on a rank without host ops), scaled by the profiler correction. If that host work left the step (or ran
ahead of the GPU), the GPU would be fed instead of waiting. When more than half of it has
no host event, confidence is at most medium.

Host callbacks (``analysis.callbacks``: an XLA thunk that calls back into Python inside the
compiled step): the GPU idle inside them is host work (the split claims it here), and their
own copies (GPU busy copying the operands, no kernel running) are added to the saving
(``IdleSplit.callback_copy``): removing the callback removes them, and pinning cannot, since
XLA allocates their host buffers. When the callbacks are at least half of the saving, the fix
leads with them (``CALLBACK_FIX``).

Evidence: the innermost framework ops, user Python frames and user annotations on the
training thread during that time (exclusive time, ``model.host_ops``); framework ops
that issued no GPU work are marked as run on the CPU. Host-side timings of a heavy
profiler are flagged through ``ctx.host_confidence`` / ``ctx.host_note``.

Runs without GPU records (``analysis.gpu_use``, ``rules._host``): there is no GPU idle time,
so the rule never speaks of it. Only when no rank recorded GPU work, a GPU is known to be
there (a ``devices`` row or an NVML GPU) and the run says the program did no GPU work on it
(``GpuUse.NONE``: the GPU capture ran through the window and recorded nothing, or NVML saw
the GPU idle in the steps) does it fire, saying the model runs on the CPU: saving = mean over
the steady steps of the host time outside input waits (``host_time``), an *upper bound*
(that is the work that would move to the GPU; what it would take there is not known), so
confidence is low and severity at most a warning. Evidence: the step time, the GPU(s) and
their NVML utilisation, the training process's CPU use (``process.cpu_pct``), the
innermost user frames of the Python stacks sampled outside input waits. With no GPU on the
machine, or GPU activity simply not recorded, the rule is skipped with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stepscope.advisor.base import Context, Finding, Fix, Severity, Where
from stepscope.advisor.engine import SkipRule
from stepscope.advisor.rules import _host
from stepscope.advisor.rules._evidence import (
    max_severity,
    ms,
    op_list,
    pct,
    profiler_line,
    where_worst,
)
from stepscope.advisor.rules._idle import worst_rank
from stepscope.analysis import RankAnalysis
from stepscope.analysis.busy import IntervalSet
from stepscope.analysis.gpu_use import GpuUse
from stepscope.analysis.input import input_wait_intervals
from stepscope.model.confidence import Confidence
from stepscope.model.host import HostTime, host_time, mean_sample, stack_frames
from stepscope.model.host_ops import idle_ops
from stepscope.model.idle import IdleSplit
from stepscope.schema_enums import CpuOpKind

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
    jax=("jax.jit the whole train step instead of running it op by op (eager jax.numpy "
         "dispatches every op from Python); keep Python control flow and NumPy out of the loop; "
         "no host callbacks (jax.debug.callback, jax.pure_callback) inside the step"),
    cuda="move host computation off the critical path (another thread) or onto the GPU",
)

# the callbacks' own fix (module docstring); PyTorch and CUDA have no such thunk: the general text
CALLBACK_FIX = Fix(
    pytorch=FIX.pytorch,
    tensorflow=("no tf.py_function / tf.numpy_function inside the tf.function step: compute the "
                "value with TensorFlow ops in the step and return it (log it every N steps)"),
    jax=("take the host callback out of the jitted step: compute the value with jax.numpy "
         "inside the step and return it (read it a few steps later or every N steps) instead "
         "of jax.debug.callback / jax.debug.print / jax.pure_callback / io_callback, which copy "
         "their operands to the host and leave the GPU with nothing queued until the Python "
         "function returns; host code that must run takes the returned values, outside the "
         "step"),
    cuda=FIX.cuda,
)
CALLBACK_LEAD = 0.5  # callbacks' share of the saving from which their fix leads
COPY_TITLE_SHARE = 0.05  # the callbacks' copies' share from which the title names them


def _saving_ms(split: IdleSplit) -> float:
    """The rule's saving on one rank: host idle (profiler-scaled) + the callbacks' copies."""
    return (split.mean_ms(split.host) * split.host_factor
            + split.mean_ms(split.callback_copy) * split.share_keep)


class HostBound:
    id = "host_bound"
    title = "Host-bound: the GPU waits for Python/CPU work"
    category = "host"
    requires: tuple[str, ...] = ()  # GPU records, or a run without any (module docstring)

    def check(self, ctx: Context) -> Sequence[Finding]:
        if any(ra.devices_used for ra in ctx.ranks):
            best = worst_rank(ctx, _saving_ms)
            return [] if best is None else [self._finding(ctx, *best)]
        return self._on_cpu(ctx)

    def _on_cpu(self, ctx: Context) -> list[Finding]:
        """No rank recorded GPU work: fire only where a GPU is there and did nothing."""
        ranks = _host.host_ranks(ctx.ranks)
        eligible = [ra for ra in ranks if ra.gpu.use is GpuUse.NONE and ra.gpu.gpus]
        if not eligible:
            ra0 = ranks[0] if ranks else ctx.ranks[0]
            if ra0.gpu.use is GpuUse.NO_GPU:
                raise SkipRule(f"the steps are host time and no GPU waits for the host "
                               f"({ra0.gpu.reason})")
            if ra0.gpu.use is GpuUse.NONE:
                raise SkipRule(f"no GPU work was recorded ({ra0.gpu.reason}) and no GPU is "
                               f"known to be there (no devices row, no NVML GPU)")
            raise SkipRule(f"no GPU work was recorded and whether the program used a GPU is "
                           f"not known ({ra0.gpu.reason})")
        best: tuple[float, RankAnalysis, HostTime] | None = None
        for ra in eligible:
            ht = host_time(ctx.graph_of(ra.rank), ra)
            saving = ht.mean_ms(ht.host_ns)
            if best is None or saving > best[0]:
                best = (saving, ra, ht)
        if best is None or not ctx.worth_reporting(best[0]):
            return []
        return [self._model_on_cpu(ctx, *best)]

    def _model_on_cpu(self, ctx: Context, saving: float, ra: RankAnalysis, ht: HostTime
                      ) -> Finding:
        g = ra.gpu
        wall = ht.mean_ms(ht.wall_ns)
        names = ", ".join(g.gpus[:2]) + (f" and {len(g.gpus) - 2} more" if len(g.gpus) > 2 else "")
        evidence = [
            (f"{ht.n} steady steps of {wall:.2f} ms: {ms(saving * 1e6)} per step of host work, "
             f"{ms(ht.mean_ms(ht.input_ns) * 1e6)} waiting for input, no GPU work"),
            f"GPU present: {names}" if len(g.gpus) == 1 else f"GPUs present: {names}",
            _host.gpu_line(ra),
        ]
        cpu = mean_sample(ctx.graph_of(ra.rank), _host.PROCESS_CPU, ht.win_start, ht.win_end)
        if cpu is not None:
            evidence.append(f"the training process used {cpu[0]:.0f}% of a core "
                            f"({cpu[0] / 100:.1f} cores) in the steps ({cpu[1]} samples)")
        steps = IntervalSet.of(ht.win_start, ht.win_end)
        work = steps - IntervalSet.of(*input_wait_intervals(ctx.graph_of(ra.rank)))
        frames, n_stacks = stack_frames(ctx.graph_of(ra.rank), work)
        if frames:
            evidence.append(f"sampled Python stacks outside input waits ({n_stacks} samples), "
                            f"innermost user frames: " + ", ".join(
                                f"{f} {c / n_stacks:.0%}" for f, c in frames))
        if len(ctx.ranks) > 1:
            evidence.append(f"rank {ra.rank} has the most host work of {len(ctx.ranks)} ranks")
        method = (f"at most: the mean over {ht.n} steady steps of the host time outside input "
                  f"waits, the work that would move to the GPU; the GPU time it would take "
                  f"instead is not known, so the real saving is smaller")
        title = (f"Host-bound: the model runs on the CPU while a GPU is present: "
                 f"{ms(saving * 1e6)} of host work per step ({pct(ctx.share(saving))}), no GPU "
                 f"work recorded")
        worst = int(np.argmax(ht.host_ns)) if ht.n else 0
        where = Where(rank=ra.rank, steps=(ht.step_index[worst],) if ht.n else (),
                      start_ns=int(ht.win_start[worst]) if ht.n else None,
                      end_ns=int(ht.win_end[worst]) if ht.n else None,
                      call_sites=tuple(f for f, _ in frames))
        note = ("the saving is an upper bound: moving the model to the GPU removes this CPU "
                "work but adds the GPU's own time, which a run on the CPU cannot measure; "
                "check that the model and its inputs are moved to the GPU (.to('cuda'))")
        fix = Fix(pytorch=("move the model and every batch to the GPU: model.to('cuda'), "
                           "x = x.to('cuda', non_blocking=True) with pin_memory=True; check "
                           "torch.cuda.is_available() in the training environment"),
                  tensorflow=("check tf.config.list_physical_devices('GPU') is not empty "
                              "(a CPU-only TensorFlow build or a CUDA mismatch hides the GPU)"),
                  jax=("check jax.devices() lists the GPU (install jax[cuda12]); "
                       "jax.device_put the inputs"),
                  cuda="run the compute on the device: the program launched no GPU work")
        return ctx.finding(id=self.id, category=self.category, title=title, saving_ms=saving,
                           method=method, evidence=evidence, fix=fix, where=where,
                           confidence=Confidence.LOW, note=note, max_severity=Severity.WARNING)

    def _finding(self, ctx: Context, saving: float, ra: RankAnalysis, split: IdleSplit
                 ) -> Finding:
        n = split.n
        per = (split.per_step(split.host).astype(np.float64) * split.host_factor
               + split.per_step(split.callback_copy).astype(np.float64) * split.share_keep)
        raw = split.mean_ms(split.host)
        cb_idle, cb_copy = split.mean_ms(split.callback), split.mean_ms(split.callback_copy)
        evidence = [
            (f"GPU idle inside the step while the host does other work than launching: "
            f"{ms(raw * 1e6)} per step (breakdown 'host' {ms(ra.breakdown.mean_ms['host'] * 1e6)}"
            f", 'idle' {ms(ra.breakdown.mean_ms['idle'] * 1e6)}; step-boundary gaps, syncs, "
            f"input waits and launch waits are counted by their own findings)"),
        ]
        if cb_idle > 0 or cb_copy > 0:
            evidence.append(
                f"host callbacks inside the compiled step: {ms(cb_idle * 1e6)} per step of this "
                f"idle time is inside their thunks, and {ms(cb_copy * 1e6)} per step of the "
                f"thunks' own copies (operands to the host, no kernel running) adds to the saving")
        fw = idle_ops(ctx.graph_of(ra.rank), "host", split.host, CpuOpKind.FRAMEWORK.value)
        py = idle_ops(ctx.graph_of(ra.rank), "host", split.host, CpuOpKind.PYTHON.value)
        ann = idle_ops(ctx.graph_of(ra.rank), "host", split.host, "annotation")
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
        if cb_copy > 0:
            method += ("; plus the copy-only GPU time inside host-callback thunks (their "
                       "operands' copies, which go with the callback)")
        if abs(split.host_factor - 1.0) >= 0.01:
            method += (f"; scaled by {split.host_factor:.2f} for the profiler's own host cost "
                       f"(model/idle.py)")
        top = (py or fw or ann)
        copies = cb_copy * split.share_keep >= COPY_TITLE_SHARE * saving
        idles = "idles or copies for host callbacks" if copies else "idles"
        title = (f"Host-bound: the GPU {idles} {ms(saving * 1e6)} per step "
                 f"({pct(ctx.share(saving))}) while the host runs Python/CPU work"
                 + (f" ({top[0].name})" if top else ""))
        sites = [o.name for o in (py[:3] + fw[:3])]
        where = where_worst(split, per.astype(np.int64), call_sites=sites)
        callbacks_ms = cb_idle * split.host_factor + cb_copy * split.share_keep
        fix = CALLBACK_FIX if saving > 0 and callbacks_ms >= CALLBACK_LEAD * saving else FIX
        confidence, note = ctx.host_confidence, ctx.host_note
        if raw > 0 and other > UNSEEN_SHARE * raw and confidence == Confidence.HIGH:
            confidence = Confidence.MEDIUM
            note = (f"{pct(other / raw)} of this idle time has no host event: the trace does "
                    f"not say what the host was doing (record with Python stacks to see it)")
        return ctx.finding(id=self.id, category=self.category, title=title, saving_ms=saving,
                           method=method, evidence=evidence, fix=fix, where=where,
                           confidence=confidence, note=note,
                           max_severity=max_severity(ctx, ra, host_side=True))


RULE = HostBound()
