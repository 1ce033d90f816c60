"""input_bound: the step waits for the data loader while the GPU has nothing to do.

Saving per step = mean over the steady steps of the time a thread waited for the next
batch while no GPU work ran (``InputAnalysis.gpu_idle_wait_ns_per_step``). When the
first steady step's wait is an outlier (DataLoader worker start-up, see
``analysis.input``), that step is left out of the mean. A faster pipeline removes this
time and no more: waits overlapped with GPU work cost nothing.

Why the workers are slow, when the run says (live capture): the loader settings
(``manifest.settings["dataloader"]``) and the ``samples`` taken while the step waited
(metric names: :data:`CPU_UTIL`, :data:`WORKERS_CPU`, :data:`DISK_READ`):

* ``num_workers == 0``: too few (batches are made in the training process);
* workers at >= 80% of a core each: CPU-bound; *too few* when the machine's CPUs are
  under 85% busy (room for more workers), *CPU-bound* otherwise;
* workers under 50% of a core each while the disk reads >= 1 MB/s: I/O-bound;
* workers under 50% of a core each, little disk reading: waiting elsewhere (network
  storage, locks, a short prefetch queue).

A trace without samples (Kineto) says what is unknown and what to check.

A rank without GPU records (a CPU-only program, ``analysis.gpu_use``) has no GPU to idle:
its step is host time (``rules._host``), so the whole wait is on the step's critical path
and the saving is the mean wait per steady step (same first-step rule). Where the run says
the GPU did nothing (the GPU capture ran and recorded none, NVML saw it idle) or that there
is no GPU, confidence is high; where GPU activity was simply not recorded, it is low and the
severity at most a warning (GPU work queued before the wait could have run during it). The
title and evidence then speak of the step waiting, never of GPU idle time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from stepscope.advisor.base import Context, Finding, Fix, Severity
from stepscope.advisor.rules import _host
from stepscope.advisor.rules._evidence import max_severity, ms, pct, where_worst
from stepscope.analysis import RankAnalysis
from stepscope.analysis.busy import IntervalSet
from stepscope.analysis.input import input_wait_intervals, wait_sites
from stepscope.model.confidence import Confidence
from stepscope.model.host import window_samples
from stepscope.model.idle import IdleSplit, split_idle

CPU_UTIL = "cpu.util_pct"  # system-wide CPU busy, % of all logical CPUs (0-100)
WORKERS_CPU = "dataloader.workers_cpu_pct"  # summed over the loader's workers, % of one core
DISK_READ = "disk.read_bytes_per_s"  # system-wide disk reads
CPU_BOUND_WORKER_PCT = 80.0
IDLE_WORKER_PCT = 50.0
BUSY_SYSTEM_PCT = 85.0
IO_READ_BYTES_PER_S = 1e6

FIX = Fix(
    pytorch=("DataLoader(num_workers=N) with N > 0 (about the CPU cores per GPU), "
             "pin_memory=True, prefetch_factor=4, persistent_workers=True; move CPU-heavy "
             "transforms to the GPU (torchvision.transforms.v2 on CUDA tensors, NVIDIA DALI); "
             "cache decoded samples when the data set fits in memory"),
    tensorflow=("dataset.map(f, num_parallel_calls=tf.data.AUTOTUNE)"
                ".prefetch(tf.data.AUTOTUNE); .cache() after the expensive map; "
                "interleave(..., num_parallel_calls=tf.data.AUTOTUNE) for many files"),
    jax=("feed batches with grain (several worker processes) or tf.data (.map(f, "
         "num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)), and prefetch to "
         "the device (flax.jax_utils.prefetch_to_device(it, 2)) so the next batch is "
         "already there when the step starts"),
    cuda="overlap loading with compute: a producer thread, pinned buffers, cudaMemcpyAsync",
)


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def diagnose(loader: dict[str, Any] | None, samples: dict[str, float], source: str
             ) -> list[str]:
    """What limits the loader, from its settings and the samples (module docstring)."""
    nw = _num(loader.get("num_workers")) if loader else None
    out: list[str] = []
    if loader:
        keys = ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers")
        out.append("DataLoader settings: " + ", ".join(f"{k}={loader[k]}" for k in keys
                                                         if k in loader))
        if loader.get("pin_memory") is False:
            out.append("pin_memory=False: every batch is copied to the GPU from pageable "
                       "memory (staged, synchronous)")
    if nw == 0:
        out.append("too few workers: num_workers=0 loads and transforms every batch in the "
                   "training process, in series with the step")
        return out
    sys_cpu, w_cpu, disk = (samples.get(k) for k in (CPU_UTIL, WORKERS_CPU, DISK_READ))
    if w_cpu is None and sys_cpu is None and disk is None:
        out.append(f"unknown whether the workers are CPU-bound, I/O-bound or too few: the run "
                   f"({source}) has no CPU or disk samples; check with top/htop whether each "
                   f"worker process sits at 100% of a core (CPU-bound: more workers, cheaper "
                   f"or GPU-side transforms) or in D state / high iowait (I/O-bound: faster "
                   f"or local storage, caching, larger prefetch)")
        return out
    per = w_cpu / nw if (w_cpu is not None and nw) else None
    facts = []
    if per is not None:
        facts.append(f"the {nw:.0f} workers use {per:.0f}% of a core each")
    elif w_cpu is not None:
        facts.append(f"the workers use {w_cpu:.0f}% of a core in total")
    if sys_cpu is not None:
        facts.append(f"the CPUs are {sys_cpu:.0f}% busy")
    if disk is not None:
        facts.append(f"the disk reads {disk / 1e6:.1f} MB/s")
    seen = "while the step waited, " + ", ".join(facts)
    if per is not None and per >= CPU_BOUND_WORKER_PCT:
        if sys_cpu is not None and sys_cpu >= BUSY_SYSTEM_PCT:
            out.append(f"CPU-bound: {seen}: more workers will not help; make the per-sample "
                       f"work cheaper or move it to the GPU")
        else:
            out.append(f"too few workers: {seen}: each worker keeps a core busy and "
                       f"cores are left; raise num_workers")
    elif per is not None and per < IDLE_WORKER_PCT and disk is not None \
            and disk >= IO_READ_BYTES_PER_S:
        out.append(f"I/O-bound: {seen}: the workers wait for reads; use faster or local "
                   f"storage, cache the data set, read larger files (shards), prefetch more")
    elif per is not None and per < IDLE_WORKER_PCT:
        out.append(f"the workers are mostly idle ({seen}): the wait is elsewhere (network "
                   f"storage, a lock, a prefetch queue too short)")
    elif sys_cpu is not None and sys_cpu >= BUSY_SYSTEM_PCT:
        out.append(f"CPU-bound: {seen}")
    else:
        out.append(f"not conclusive: {seen}")
    return out


class InputBound:
    id = "input_bound"
    title = "The step waits for the input pipeline"
    category = "input"
    requires: tuple[str, ...] = ("input_waits",)  # kernels optional: CPU-only runs (module doc)

    def check(self, ctx: Context) -> Sequence[Finding]:
        best: tuple[float, RankAnalysis, IdleSplit, np.ndarray, bool] | None = None
        for ra in ctx.ranks:
            per = np.array(ra.input.gpu_idle_wait_ns_per_step, dtype=np.int64)
            if per.size == 0 or not per.any():
                continue
            skip_first = ra.input.first_step_outlier and per.size >= 2
            used = per[1:] if skip_first else per
            split = split_idle(ctx.analysis, ra)
            keep = split.share_keep if ra.devices_used else 1.0  # no GPU: no profiler scaling
            saving = float(used.mean()) / 1e6 * keep
            if best is None or saving > best[0]:
                best = (saving, ra, split, per, skip_first)
        if best is None or not ctx.worth_reporting(best[0]):
            return []
        return [self._finding(ctx, *best)]

    def _finding(self, ctx: Context, saving: float, ra: RankAnalysis, split: IdleSplit,
                 per: np.ndarray, skip_first: bool) -> Finding:
        ia = ra.input
        n = per.size
        gpu = bool(ra.devices_used)
        used = slice(1, None) if skip_first else slice(None)
        wait = np.array(ia.wait_ns_per_step, dtype=np.int64)[used]
        counts = np.array(ia.count_per_step, dtype=np.int64)[used]
        share = float(np.mean(np.array(ia.share_per_step)[used]))
        if gpu:
            method = (f"mean over {n - (1 if skip_first else 0)} steady steps of the time a "
                      f"thread waited for the next batch while no GPU work ran (input waits "
                      f"minus GPU busy time, per step); a faster pipeline removes that idle time")
            evidence = [
                (f"waited for the next batch {ms(wait.mean())} per step ({pct(share)} of the "
                f"step) in {counts.mean():.1f} waits; the GPU was idle for "
                f"{ms(per[used].mean())} of it"),
            ]
        else:
            method = (f"mean over {n - (1 if skip_first else 0)} steady steps of the time a "
                      f"thread waited for the next batch (no GPU work was recorded: the step's "
                      f"time is host time, and a faster pipeline removes the wait from it)")
            evidence = [
                (f"waited for the next batch {ms(wait.mean())} per step ({pct(share)} of the "
                f"step) in {counts.mean():.1f} waits"),
                _host.gpu_line(ra),
            ]
        if skip_first:
            method += "; the first step (worker start-up) is left out"
            evidence.append(f"first steady step waited {ms(ia.first_step_wait_ns)} (DataLoader "
                            f"worker start-up, left out of the estimate)")
        order = per.copy()
        if skip_first:
            order[0] = -1
        worst = int(np.argmax(order))
        if gpu:
            evidence.append(f"worst: step {ra.steps.steady[worst].index} with the GPU idle "
                            f"{ms(per[worst])} waiting for input")
        else:
            evidence.append(f"worst: step {ra.steps.steady[worst].index}, waiting "
                            f"{ms(per[worst])} for input")
        waits = IntervalSet.of(*input_wait_intervals(ctx.graph_of(ra.rank)))
        window = IntervalSet.of(split.win_start, split.win_end)
        samples = window_samples(ctx.graph_of(ra.rank), (waits & window, window),
                                 (CPU_UTIL, WORKERS_CPU, DISK_READ))
        evidence += diagnose(ia.dataloader, samples, ctx.graph.manifest.source.kind)
        nw = _num(ia.dataloader.get("num_workers")) if ia.dataloader else None
        if not gpu and nw:
            evidence.append("without GPU work the loader's workers share the CPUs with the "
                            "model's own compute: more workers can slow the step's compute")
        if gpu and abs(split.share_keep - 1.0) >= 0.01:
            evidence.append(f"scaled by {split.share_keep:.2f}: the profiler made the traced "
                            f"step about {ms(split.profiler_ns_per_step)} longer, so the share "
                            f"estimates the untraced speed-up")
        if len(ctx.ranks) > 1:
            evidence.append(f"rank {ra.rank} is the worst of {len(ctx.ranks)} ranks")
        sites = wait_sites(ctx.graph_of(ra.rank))
        where = where_worst(split, order.clip(min=0), call_sites=sites)
        if gpu:
            title = (f"Input-bound: the GPU idles {ms(saving * 1e6)} per step "
                     f"({pct(ctx.share(saving))}) waiting for the next batch")
        else:
            why = ("no GPU work: the step is host time" if ra.gpu.host_only
                   else "GPU activity not recorded")
            title = (f"Input-bound: the step waits {ms(saving * 1e6)} ({pct(ctx.share(saving))}) "
                     f"for the next batch ({why})")
        conf = Confidence.HIGH if gpu else _host.confidence(ra)
        cap = max_severity(ctx, ra, host_side=False)
        note = ""
        if conf is Confidence.LOW:
            cap = Severity.WARNING if cap is Severity.CRITICAL else cap
            note = (f"GPU activity was not recorded ({ra.gpu.reason}): if a GPU ran queued "
                    f"work while the thread waited, a faster pipeline saves less")
        return ctx.finding(id=self.id, category=self.category, title=title, saving_ms=saving,
                           method=method, evidence=evidence, fix=FIX, where=where,
                           confidence=conf, note=note, max_severity=cap)


RULE = InputBound()
