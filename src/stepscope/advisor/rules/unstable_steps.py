"""unstable_steps: step times vary too much to trust averages.

Over every step of a rank except a warm-up step (outliers included: they are what this
rule is about), with at least :data:`MIN_STEPS` steps:

* varies when the coefficient of variation ``std / mean`` exceeds :data:`CV_INFO` (0.10)
  or the slowest step exceeds :data:`RATIO_INFO` (1.5) x the median; *a lot* when
  ``cv > CV_WARN`` (0.25) or ``max / median > RATIO_WARN`` (2.0);
* fires when it varies and the saving is worth reporting, or when it varies a lot;
* may be a warning (never critical) only when it varies a lot, the saving is at least
  5% of the step and the GPU is busy less than 90% of the steps, and the steps come from a
  marker (hook, profiler step, NVTX), not from the period of the kernel stream; else info.

Saving per step = ``mean - median`` of the per-step GPU idle time (wall minus GPU busy,
from the step-time breakdown): the idle time the slow steps add on average (the median
step is what a run without the periodic work would do). Not the wall-time excess: a
slow step that is slow on the host while the GPU keeps working from its queue (a host
running ahead) costs nothing, and extra GPU work in a slow step (evaluation) is work,
not waiting; both show in the evidence. The worst rank (largest CV) is reported. Steps slower than :data:`SLOW` x the median are
listed; when they are evenly spaced the work is periodic (evaluation, checkpoint,
logging, garbage collection).

A rank without GPU records (``analysis.gpu_use``) has no GPU idle time: its step is host
time, so the per-step figure is the step's wall time and the saving ``mean - median`` of it
(what the slow steps add). The title and evidence say host time; confidence is high where
the run says the GPU did nothing or there is none, low where GPU activity was not recorded.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stepscope.advisor.base import Context, Finding, Fix, Severity, Where
from stepscope.advisor.engine import SkipRule
from stepscope.advisor.rules import _host
from stepscope.advisor.rules._evidence import max_severity, pct
from stepscope.analysis import RankAnalysis
from stepscope.analysis.breakdown import GPU_CATEGORIES
from stepscope.analysis.steady import Step
from stepscope.model.confidence import Confidence
from stepscope.schema_enums import StepSource

MIN_STEPS = 3
CV_INFO = 0.10
CV_WARN = 0.25
RATIO_INFO = 1.5
RATIO_WARN = 2.0
SLOW = 1.25
FEW_STEPS = 10

FIX = Fix(
    pytorch=("measure a longer steady window (stepscope record --steps 20-80, or a longer "
             "--duration) so averages cover the periodic work; make the periodic work "
             "cheaper or asynchronous (evaluation, checkpoints, logging every N steps); "
             "gc.freeze() after start-up if the garbage collector causes the slow steps; with "
             "variable input shapes, bucket or pad them (torch.compile and cuDNN re-tune per "
             "new shape); check GPU clocks and throttling (nvidia-smi -q -d PERFORMANCE)"),
    tensorflow=("profile a longer window (tf.profiler.experimental.start/stop around 50+ "
                "steps); fixed or bucketed shapes (padded_batch, bucket_by_sequence_length) "
                "avoid tf.function retracing; callbacks every N steps"),
    jax=("capture more steps; keep input shapes fixed (jit recompiles for every new shape: "
         "look for compilation in the slow steps); checkpoints with orbax async"),
    cuda="time many iterations and report the median; check clocks / throttling reasons",
)


def _steps(ra: RankAnalysis) -> list[Step]:
    return [s for s in ra.steps.steps if not s.note.startswith("warm-up")]


def _periodic(idx: Sequence[int]) -> int:
    """The spacing of evenly spaced step indexes (0 when not periodic or too few)."""
    if len(idx) < 3:
        return 0
    d = np.diff(np.asarray(idx))
    return int(d[0]) if d[0] > 1 and bool((d == d[0]).all()) else 0


def _idle_ms(ra: RankAnalysis, steps: list[Step]) -> np.ndarray:
    """GPU idle time (ms) of each step: wall minus GPU busy (step-time breakdown); the
    wall itself on a rank without GPU records (host time, module docstring)."""
    per = ra.breakdown.per_step
    return np.array([(s.wall_ns - sum(per[s.index][c] for c in GPU_CATEGORIES)) / 1e6
                     for s in steps], dtype=np.float64)


class UnstableSteps:
    id = "unstable_steps"
    title = "Step times vary too much to trust averages"
    category = "measurement"
    requires: tuple[str, ...] = ()  # GPU idle time of slow steps, or host time without GPU

    def check(self, ctx: Context) -> Sequence[Finding]:
        best: tuple[float, RankAnalysis, list[Step]] | None = None
        for ra in ctx.ranks:
            steps = _steps(ra)
            if len(steps) < MIN_STEPS:
                continue
            walls = np.array([s.wall_ns for s in steps], dtype=np.float64)
            cv = float(walls.std() / walls.mean()) if walls.mean() > 0 else 0.0
            if best is None or cv > best[0]:
                best = (cv, ra, steps)
        if best is None:
            most = max((len(_steps(ra)) for ra in ctx.ranks), default=0)
            raise SkipRule(f"needs at least {MIN_STEPS} steps after warm-up (the run has {most})")
        cv, ra, steps = best
        walls = np.array([s.wall_ns for s in steps], dtype=np.float64) / 1e6
        med = float(np.median(walls))
        ratio = float(walls.max() / med) if med > 0 else 0.0
        idle = _idle_ms(ra, steps)
        saving = max(0.0, float(idle.mean() - np.median(idle)))
        big = cv > CV_WARN or ratio > RATIO_WARN
        if (cv <= CV_INFO and ratio <= RATIO_INFO) or not (big or ctx.worth_reporting(saving)):
            return []
        return [self._finding(ctx, ra, steps, walls, idle, cv, ratio, saving, big)]

    def _finding(self, ctx: Context, ra: RankAnalysis, steps: list[Step], walls: np.ndarray,
                 idle: np.ndarray, cv: float, ratio: float, saving: float, big: bool
                 ) -> Finding:
        n = len(steps)
        mean, med = float(walls.mean()), float(np.median(walls))
        slow = [i for i in np.argsort(-walls, kind="stable").tolist() if walls[i] > SLOW * med]
        evidence = [
            (f"{n} steps (warm-up excluded): min {walls.min():.2f} / median {med:.2f} / p95 "
            f"{float(np.percentile(walls, 95)):.2f} / max {walls.max():.2f} ms; mean "
            f"{mean:.2f} ms"),
            (f"coefficient of variation {cv:.2f} (threshold {CV_INFO:.2f}); slowest step "
            f"{ratio:.2f}x the median (threshold {RATIO_INFO:.1f})"),
        ]
        gpu = bool(ra.devices_used)
        if gpu:
            evidence.append(f"GPU idle per step: median {float(np.median(idle)):.2f} ms, mean "
                            f"{float(idle.mean()):.2f} ms: the slow steps add {saving:.2f} ms of "
                            f"idle GPU per step on average")
        else:
            evidence.append(f"the slow steps add {saving:.2f} ms per step on average (mean "
                            f"minus median step time)")
            evidence.append(_host.gpu_line(ra))
        if gpu and mean - med > 2 * saving:
            evidence.append(f"most of the wall-time excess ({mean - med:.2f} ms per step) is GPU "
                            f"work or host time the GPU did not wait for (a host running ahead)")
        if slow:
            evidence.append(f"{len(slow)} steps slower than {SLOW}x the median: " + ", ".join(
                f"step {steps[i].index} ({walls[i]:.2f} ms)" for i in slow[:5]))
            k = _periodic(sorted(steps[i].index for i in slow))
            if k:
                evidence.append(f"one step in every {k} is slow: periodic work (evaluation, "
                                f"checkpoint, logging, garbage collection)")
        out = [s for s in steps if s.note.startswith("outlier")]
        if out:
            evidence.append(f"{len(out)} outlier steps are left out of the averages of the "
                            f"other findings")
        if n < FEW_STEPS:
            evidence.append(f"only {n} steps: capture more to tell noise from periodic work")
        if len(ctx.ranks) > 1:
            evidence.append(f"rank {ra.rank} varies most of {len(ctx.ranks)} ranks")
        cap = Severity.WARNING if big and max_severity(ctx, ra, host_side=False) != Severity.INFO \
            else Severity.INFO
        if ra.steps.source == StepSource.PERIODICITY.value:
            # no step marker: the "steps" are periods of the kernel stream, whose lengths vary
            # with where the period's boundary falls, not with the program's steps
            cap = Severity.INFO
            evidence.append("the steps are periods of the kernel stream (no step marker): "
                            "mark steps (stepscope.step(), --nvtx) to judge their variation")
        slowest = steps[slow[0]] if slow else steps[int(np.argmax(walls))]
        where = Where(rank=ra.rank, steps=tuple(steps[i].index for i in slow[:5])
                      or (slowest.index,), start_ns=slowest.start_ns, end_ns=slowest.end_ns)
        head = (f"Step time varies {cv:.0%} (CV) over {n} steps, slowest {ratio:.2f}x the "
                f"median: ")
        if gpu:
            title = head + f"slow steps idle the GPU {saving:.2f} ms per step ({pct(ctx.share(saving))})"
            method = (f"mean minus median of the per-step GPU idle time over {n} steps (warm-up "
                      f"excluded): the idle time the steps slower than the typical one add per "
                      f"step on average")
        else:
            title = head + (f"slow steps add {saving:.2f} ms per step ({pct(ctx.share(saving))})"
                            + (" of host time (no GPU work)" if ra.gpu.host_only
                               else " (GPU activity not recorded)"))
            method = (f"mean minus median of the step time over {n} steps (warm-up excluded; no "
                      f"GPU work recorded, so the step's time is host time): what the steps "
                      f"slower than the typical one add per step on average")
        conf = Confidence.HIGH if gpu else _host.confidence(ra)
        if ra.steps.source == StepSource.PERIODICITY.value:
            # periods of the kernel stream: a slow phase in the window (compilation, warm-up)
            # shows, but what its removal would save per step of the program is not known
            title = head + "the window holds slower phases (steps are kernel-stream periods)"
            method = "not estimated: the steps are periods of the kernel stream, not marked steps"
            saving = 0.0
        return ctx.finding(id=self.id, category=self.category, title=title, saving_ms=saving,
                           method=method, evidence=evidence, fix=FIX, where=where,
                           confidence=conf, note="" if conf is Confidence.HIGH else
                           f"GPU activity was not recorded ({ra.gpu.reason})", max_severity=cap)


RULE = UnstableSteps()
