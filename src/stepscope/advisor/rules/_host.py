"""Host time of ranks without GPU records, for the rules that judge it.

On a rank with no kernel, copy or memset (``analysis.gpu_use``) there is no GPU idle time to
split (``model.idle``): the step's time is host time. Per steady step window ``w``::

    input_ns[w] = |input waits ∩ w|           (the thread waited for the next batch)
    host_ns[w]  = |w| - input_ns[w]           (everything else the step did on the host)

Whether that is the whole story depends on what is known of the GPU (``GpuPresence.use``):
``none`` (a GPU was there, the program did no GPU work) and ``no_gpu`` make host time the
step's critical path: judged with high confidence; ``unknown`` (GPU activity not recorded) may
hide GPU work that ran during the host time, so findings on it are low confidence.

Evidence from samples and stacks inside the steps (outside input waits for the stacks):
``process.cpu_pct`` (the training process, % of one core), NVML ``gpu.util_pct`` (from
``GpuPresence``), and the innermost user frame of each sampled Python stack of the thread
sampled most (frames outside site-packages, dist-packages and the standard library),
counted by ``file:line function``.
"""

from __future__ import annotations

from stepscope.analysis import RankAnalysis
from stepscope.analysis.gpu_use import GpuUse
from stepscope.model.confidence import Confidence

PROCESS_CPU = "process.cpu_pct"  # the training process, % of one core


def host_ranks(ranks: tuple[RankAnalysis, ...]) -> list[RankAnalysis]:
    """Ranks with steady steps and no GPU records (their steps are judged as host time)."""
    return [ra for ra in ranks if ra.steps.steady and not ra.devices_used]


def confidence(ra: RankAnalysis) -> Confidence:
    """High where the GPU is known to have done nothing, low where it is not known."""
    return Confidence.HIGH if ra.gpu.host_only else Confidence.LOW


def gpu_line(ra: RankAnalysis) -> str:
    """What is known of the GPU, one evidence line."""
    g = ra.gpu
    if g.use is GpuUse.NO_GPU:
        return f"no GPU work: {g.reason}; the step's time is host time"
    if g.use is GpuUse.NONE:
        util = (f"; NVML: GPU(s) {g.util_pct:.0f}% busy over {g.util_samples} samples"
                if g.util_pct is not None and "NVML" not in g.reason else "")
        return f"no GPU work: {g.reason}{util}; the step's time is host time"
    return (f"no GPU work recorded, and whether a GPU worked is not known: {g.reason}; GPU "
            f"work that ran unseen during the host time would make this smaller")
