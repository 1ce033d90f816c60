"""Whether a rank used a GPU, and what is known when it recorded no GPU work.

A rank with kernel, memcpy or memset records used the GPU (``RECORDED``). A rank without
any is one of three cases, told apart from what the run says of itself (first that applies):

1. ``NONE``: a GPU was there and the program did no GPU work. Either the GPU capture ran
   through the window (a recorded run whose ``settings["ranks"]["rank<N>"]["gpu"]["state"]``
   is ``stopped`` or ``running``: CUPTI saw every kernel and copy of the process, and there
   was none), or NVML sampled every GPU in the steps as idle: mean ``gpu.util_pct`` under
   :data:`IDLE_UTIL_PCT` over at least :data:`MIN_UTIL_SAMPLES` samples inside the step
   windows (NVML counts the kernels of every process, so an idle GPU ran none of ours).
2. ``NO_GPU``: no GPU is known (no ``devices`` row, no NVML GPU, no ``gpu.*`` sample) and the
   capture says there is none (its reason or a diagnostic matches :data:`NO_GPU_TEXT`, e.g.
   "no NVIDIA GPU or driver found").
3. ``UNKNOWN``: anything else: an imported trace without GPU events (a profile of CPU
   activity only says nothing of the GPU), a capture whose GPU backend did not run on a
   machine with a GPU, or a GPU that NVML saw busy while nothing was recorded.

For ``NONE`` and ``NO_GPU`` ranks the step's time is host time, and rules may judge it as such
(``advisor/rules/_host.py``); for ``UNKNOWN`` ones a GPU may have worked during the steps
unseen, so host-time conclusions are at most low confidence.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

import stepscope.analysis.intervals as iv
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.intervals import I64
from stepscope.analysis.launches import column_i64, column_str

UTIL_METRIC = "gpu.util_pct"
IDLE_UTIL_PCT = 5.0
MIN_UTIL_SAMPLES = 3
NO_GPU_TEXT = re.compile(
    r"\bno (nvidia |cuda[- ]capable |cuda )?(gpu|device)s?( or driver)? (is |was |were )?"
    r"(found|present|detected|available)\b|\bno (nvidia |cuda )?driver (is |was )?(found|present|"
    r"detected|available|installed)\b|cuda_error_no_device|cudaerrornodevice",
    re.IGNORECASE)
CAPTURE_RAN = ("stopped", "running")


class GpuUse(str, Enum):
    RECORDED = "recorded"  # GPU records exist for the rank
    NONE = "none"  # a GPU was there; the program did no GPU work
    NO_GPU = "no_gpu"  # no GPU on the machine
    UNKNOWN = "unknown"  # no GPU records, and whether a GPU worked is not known


@dataclass(frozen=True)
class GpuPresence:
    rank: int
    use: GpuUse
    gpus: tuple[str, ...]  # GPUs known to be there: "name (device i)" (devices table, NVML)
    util_pct: float | None  # highest per-GPU mean NVML utilisation inside the steps
    util_samples: int  # NVML utilisation samples inside the steps (all GPUs)
    reason: str  # one line: why ``use``

    @property
    def host_only(self) -> bool:
        """The step's time is host time: no GPU work, and that is known."""
        return self.use in (GpuUse.NONE, GpuUse.NO_GPU)


def _rank_settings(settings: dict[str, Any], rank: int) -> dict[str, Any]:
    ranks = settings.get("ranks")
    own = ranks.get(f"rank{rank}") if isinstance(ranks, dict) else None
    return own if isinstance(own, dict) else {}


def capture_gpu_status(settings: dict[str, Any], rank: int) -> dict[str, Any]:
    """The GPU backend's status a recorded rank wrote (``{}`` for imported runs)."""
    gpu = _rank_settings(settings, rank).get("gpu")
    return gpu if isinstance(gpu, dict) else {}


def _nvml_names(settings: dict[str, Any], rank: int) -> dict[int, str]:
    host = _rank_settings(settings, rank).get("host")
    samplers = host.get("samplers") if isinstance(host, dict) else None
    metrics = samplers.get("metrics") if isinstance(samplers, dict) else None
    gpus = metrics.get("gpus") if isinstance(metrics, dict) else None
    out: dict[int, str] = {}
    if isinstance(gpus, dict):
        for k, v in gpus.items():
            if str(k).isdigit():
                out[int(k)] = str(v)
    return out


def _util(g: StepGraph, win_start: I64, win_end: I64) -> tuple[dict[int, float], int]:
    """Mean NVML utilisation per GPU over the samples inside the windows, and their count."""
    t = g.table("samples")
    if t.num_rows == 0:
        return {}, 0
    names = np.array(column_str(t, "metric").to_pylist(), dtype=object)
    m = names == UTIL_METRIC
    if not m.any():
        return {}, 0
    ts = column_i64(t, "ts_ns", 0)[m]
    dev = column_i64(t, "device", 0)[m]
    val = np.asarray(t.column("value").to_numpy(), dtype=np.float64)[m]
    inside = iv.assign_to_windows(ts, win_start, win_end) >= 0 if win_start.size else \
        np.ones(ts.size, dtype=bool)
    out = {int(d): float(val[inside & (dev == d)].mean())
           for d in np.unique(dev[inside]).tolist()}
    return out, int(inside.sum())


def gpu_presence(g: StepGraph, devices_used: Iterable[int], win_start: I64,
                 win_end: I64) -> GpuPresence:
    """What is known of ``rank``'s GPU use (module docstring); ``devices_used`` are the
    devices with GPU records, ``win_start/win_end`` the steps whose NVML samples count."""
    used = sorted(set(devices_used))
    rank = g.rank_id
    settings = g.manifest.settings or {}
    names: dict[int, str] = {}
    for row in g.table("devices").to_pylist():
        names[int(row["device"])] = str(row.get("name") or "GPU")
    for i, n in _nvml_names(settings, rank).items():
        names.setdefault(i, n)
    util, n_util = _util(g, iv.as_i64(win_start), iv.as_i64(win_end))
    for i in util:
        names.setdefault(i, "GPU")
    gpus = tuple(f"{n} (device {i})" for i, n in sorted(names.items()))
    top = max(util.values()) if util else None
    if used:
        return GpuPresence(rank, GpuUse.RECORDED, gpus, top, n_util,
                           f"GPU work recorded on device(s) {', '.join(map(str, used))}")
    status = capture_gpu_status(settings, rank)
    state = str(status.get("state") or "")
    if state in CAPTURE_RAN:
        backend = str(status.get("backend") or "GPU")
        return GpuPresence(rank, GpuUse.NONE, gpus, top, n_util,
                           f"the GPU capture ({backend}) ran through the window and recorded no "
                           f"GPU work")
    if util and n_util >= MIN_UTIL_SAMPLES and top is not None and top < IDLE_UTIL_PCT:
        return GpuPresence(rank, GpuUse.NONE, gpus, top, n_util,
                           f"NVML saw the GPU(s) {top:.0f}% busy over {n_util} samples in the "
                           f"steps")
    why = str(status.get("reason") or "")
    texts = [why] + [d.message for d in g.manifest.diagnostics]
    if not gpus and any(NO_GPU_TEXT.search(t) for t in texts if t):
        said = next(t for t in texts if t and NO_GPU_TEXT.search(t))
        return GpuPresence(rank, GpuUse.NO_GPU, gpus, None, 0, said)
    if top is not None and top >= IDLE_UTIL_PCT:
        reason = (f"NVML saw a GPU {top:.0f}% busy in the steps but no GPU work was recorded"
                  + (f" ({why})" if why else ""))
    elif why:
        reason = f"GPU activity was not captured: {why}"
    elif state:
        reason = f"GPU activity was not captured (the GPU capture was {state})"
    else:
        reason = "the trace has no GPU events (a profile of CPU activity says nothing of the GPU)"
    return GpuPresence(rank, GpuUse.UNKNOWN, gpus, top, n_util, reason)
