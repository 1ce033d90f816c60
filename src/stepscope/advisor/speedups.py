"""What a kernel-level change would save per step: measured speed-ups, and how kernel time
turns into step time. Shared by the occupancy and precision rules.

The speed-up table
------------------
``MEASURED`` holds GEMM / convolution throughput ratios measured by
``benchmarks/gemm_speedups.py`` (PyTorch, CUDA events, median over shapes; the script's
docstring defines each ratio), one entry per GPU model with its provenance. Each ratio is a
time ratio, larger is better for the change:

* ``gemm_tf32`` / ``gemm_bf16`` / ``gemm_fp16``: time of an fp32 GEMM with TF32 off over the
  time of the same GEMM with TF32 on / in bf16 / in fp16 (``conv_*``: the same for a 2-D
  convolution, forward + both backward passes, NCHW, ``cudnn.benchmark`` off);
* ``half_misaligned``: time per FLOP of a 16-bit GEMM with a dimension that is not a multiple
  of 8 over that of its aligned neighbour (K 4095 vs 4096, vocabulary 50257 vs 50304, ...).

``speedups_for(device_row)`` resolves every ratio for one GPU: the entry measured on that GPU
model (matched by name), else one measured on another model of the same compute capability
where such models share their tensor-core/FP32 throughput ratio (``SAME_CC_OK``), else the
conservative ``DATASHEET`` default of the compute capability ("estimated from datasheet peaks,
not measured"). Each resolved ``Ratio`` says which, so findings can say how much to trust it.

From kernel time to step time
-----------------------------
A kernel's saving only shortens the step when the GPU is the bottleneck. Per steady step,
``backlog`` = end of the last GPU work issued by the step's kernel launches (``api_calls`` of
kind launch / graph_launch, paired with kernels by correlation) minus the end of the step's
last launch call: how long the GPU still had queued work after the host had finished issuing
the step. Shortening the step's kernels by ``s`` shortens the step by at most that backlog
(after it the step waits on the host); so per step ``counted = min(raw kernel saving,
backlog)``. A GPU-bound step (the host runs ahead, or waits in a sync) has a backlog of about
its GPU time and keeps its savings; a host-bound step (the GPU drains each launch at once)
keeps almost none. Profiler overhead on the host is added back (``scaling_for``). Without
launch records (``Scaling.backlog_ns`` is None) the saving is scaled by the steady steps'
GPU-busy share instead (union of GPU activity / wall time).

Why not always the busy share: in ``benchmarks/rule_scenarios.py`` (H200, 2026-11-22) a
kernel-heavy step synchronised every step and traced with CPU activity showed 66% GPU busy;
scaling by that gave half the measured saving (2.30 of 4.09 ms), the backlog cap 3.49 ms.
No kernel gets shorter than ``MIN_KERNEL_NS``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.advisor.base import Context, Where
from stepscope.advisor.overhead import host_trust
from stepscope.analysis import RankAnalysis
from stepscope.analysis.intervals import assign_to_windows
from stepscope.analysis.kernels import kernel_frame
from stepscope.store.run import Run

PLACEHOLDER = None
"""A ratio not measured yet: run ``benchmarks/gemm_speedups.py`` on that GPU and paste its
``python_entry`` over the entry."""

RATIOS: tuple[str, ...] = (
    "gemm_tf32", "gemm_bf16", "gemm_fp16", "conv_tf32", "conv_bf16", "conv_fp16",
    "half_misaligned",
)


@dataclass(frozen=True)
class Measured:
    """One GPU model's measured ratios (``None``: not measured) and where they came from."""

    device: str  # torch.cuda.get_device_name()
    compute: tuple[int, int]
    gemm_tf32: float | None
    gemm_bf16: float | None
    gemm_fp16: float | None
    conv_tf32: float | None
    conv_bf16: float | None
    conv_fp16: float | None
    half_misaligned: float | None
    provenance: str  # device, driver, torch / CUDA / cuDNN, date, command


MEASURED: tuple[Measured, ...] = (
    Measured(device="NVIDIA H100 80GB HBM3", compute=(9, 0), gemm_tf32=6.178, gemm_bf16=12.959,
             gemm_fp16=13.018, conv_tf32=2.317, conv_bf16=3.896, conv_fp16=3.925,
             half_misaligned=4.963,
             provenance="NVIDIA H100 80GB HBM3, driver 580.159.04, torch 2.11.0+cu130 (CUDA 13.0, "
                        "cuDNN 91900), 2026-11-22: python3 benchmarks/gemm_speedups.py --out "
                        "gemm.json"),
    Measured(device="NVIDIA H200", compute=(9, 0), gemm_tf32=6.325, gemm_bf16=13.166,
             gemm_fp16=12.762, conv_tf32=2.39, conv_bf16=4.261, conv_fp16=4.491,
             half_misaligned=5.245,
             provenance="NVIDIA H200, driver 580.159.04, torch 2.11.0+cu130 (CUDA 13.0, cuDNN "
                        "91900), 2026-11-22: python3 benchmarks/gemm_speedups.py --out gemm.json; raw output in docs/data/accuracy-2026-11-22/"),
)

# Compute capabilities whose GPU models share their tensor-core / FP32 throughput ratios (data
# centre parts only: GeForce parts of 8.6/8.9/12.x halve some tensor rates), so a measurement
# on one model stands for the others.
SAME_CC_OK = frozenset({(8, 0), (9, 0), (10, 0), (10, 3)})

# Conservative defaults per compute capability, "estimated from datasheet peaks, not measured".
# Dense datasheet peaks (TFLOPS) fp32 / TF32 / bf16: A100 19.5 / 156 / 312 (8x, 16x),
# H100 SXM 67 / 495 / 989 (7.4x, 14.8x); A6000, L4, L40S: TF32 = 2x fp32, bf16 = 4x;
# RTX 3090 / 4090: TF32 = 1x, fp16 with fp32 accumulation = 2x; V100 fp32 15.7 / fp16 125 (8x,
# no TF32 or bf16 tensor cores); T4 8.1 / 65. Measured GEMMs reach a smaller share of the
# tensor peak than of the FP32 peak (H200, 2026-11-22: 6.3x TF32, 13x bf16 on GEMMs; 2.4x / 4.3x
# on convolutions), so the defaults take about half of the measured data-centre ratios and
# much less of the consumer parts' peaks. ``None``: the GPU has no such tensor cores.
_DATACENTER: dict[str, float | None] = {
    "gemm_tf32": 3.0, "gemm_bf16": 6.0, "gemm_fp16": 6.0, "conv_tf32": 1.5, "conv_bf16": 2.5,
    "conv_fp16": 2.5, "half_misaligned": 2.0}
_WORKSTATION: dict[str, float | None] = {
    "gemm_tf32": 1.3, "gemm_bf16": 2.0, "gemm_fp16": 2.0, "conv_tf32": 1.2, "conv_bf16": 1.5,
    "conv_fp16": 1.5, "half_misaligned": 1.5}
_VOLTA: dict[str, float | None] = {
    "gemm_tf32": None, "gemm_bf16": None, "gemm_fp16": 3.0, "conv_tf32": None, "conv_bf16": None,
    "conv_fp16": 2.0, "half_misaligned": 2.0}
DATASHEET: dict[tuple[int, int], dict[str, float | None]] = {
    (7, 0): _VOLTA, (7, 2): _VOLTA, (7, 5): _VOLTA,
    (8, 0): _DATACENTER, (8, 6): _WORKSTATION, (8, 7): _WORKSTATION, (8, 9): _WORKSTATION,
    (9, 0): _DATACENTER, (10, 0): _DATACENTER, (10, 3): _DATACENTER,
    (12, 0): _WORKSTATION, (12, 1): _WORKSTATION,
}
DATASHEET_SOURCE = "estimated from datasheet peaks, not measured"

HOST_WAITS = ("input_wait", "launch", "host", "idle")
"""Breakdown categories in which the GPU is idle waiting for the host (not for a sync)."""

MIN_KERNEL_NS = 2_000
"""No kernel gets shorter than this: the shortest kernels in the H100 fixtures take ~1 µs, and
one that reads memory across all SMs rarely finishes under ~2 µs."""


@dataclass(frozen=True)
class Ratio:
    value: float
    measured: bool
    """Measured on this GPU model (not another model, not the datasheet default)."""
    source: str

    def describe(self) -> str:
        return f"{self.value:.1f}x ({self.source})"


@dataclass(frozen=True)
class Speedups:
    device: str
    compute: tuple[int, int]
    ratios: Mapping[str, Ratio | None]  # RATIOS -> ratio, None when the GPU cannot do it

    def get(self, name: str) -> Ratio | None:
        return self.ratios.get(name)


def speedups_for(device: Mapping[str, Any],
                 measured: tuple[Measured, ...] = MEASURED) -> Speedups | None:
    """The ratios for one ``devices`` row; ``None`` for a GPU without tensor cores (compute
    capability below 7.0), an unknown compute capability, or a non-NVIDIA device."""
    vendor = str(device.get("vendor") or "nvidia").lower()
    major, minor = device.get("compute_major"), device.get("compute_minor")
    if vendor not in ("nvidia", "unknown") or major is None or minor is None:
        return None
    cc = (int(major), int(minor))
    if cc not in DATASHEET:
        return None
    name = str(device.get("name") or "")
    exact = [m for m in measured if m.device == name]
    same_cc = [m for m in measured if m.compute == cc and m.device != name] \
        if cc in SAME_CC_OK else []
    out: dict[str, Ratio | None] = {}
    for r in RATIOS:
        default = DATASHEET[cc].get(r)
        if default is None:
            out[r] = None
            continue
        ratio = Ratio(float(default), False, DATASHEET_SOURCE)
        for m in exact + same_cc:
            v = getattr(m, r)
            if v is not None:
                where = "" if m in exact else f", same compute capability {cc[0]}.{cc[1]}"
                ratio = Ratio(float(v), m in exact, f"measured on {m.device}{where}")
                break
        out[r] = ratio
    return Speedups(device=name, compute=cc, ratios=out)


def shorter(dur_ns: npt.NDArray[np.float64], factor: npt.NDArray[np.float64] | float
            ) -> npt.NDArray[np.float64]:
    """Time saved when kernels of ``dur_ns`` take ``dur * factor`` instead, never going below
    ``MIN_KERNEL_NS`` (nor saving anything on kernels already shorter)."""
    new = np.maximum(dur_ns * factor, MIN_KERNEL_NS)
    return np.asarray(np.maximum(dur_ns - new, 0.0), dtype=np.float64)


def gpu_bound_share(ra: RankAnalysis) -> float:
    """Share of the steady steps' wall time the GPU was busy (union over streams, mean over
    the devices the rank used: those with GPU records, not every device it listed), 0..1."""
    steady = ra.steps.steady
    wall = sum(s.wall_ns for s in steady)
    if wall <= 0:
        return 0.0
    busy = sum(ra.step_busy_ns[s.index] for s in steady if s.index < len(ra.step_busy_ns))
    n_dev = max(1, len(ra.devices_used))
    return float(min(1.0, busy / (wall * n_dev)))


@dataclass(frozen=True)
class Scaling:
    """How kernel savings become step savings for one rank (module doc)."""

    backlog_ns: npt.NDArray[np.float64] | None  # per steady step (slot order)
    busy_share: float

    def counted(self, sk: SteadyKernels, saving_ns: npt.NDArray[np.float64]
                ) -> tuple[float, float]:
        """(raw, counted) saving in ms per steady step for per-launch savings ``saving_ns``."""
        raw = np.bincount(sk.slot, weights=saving_ns, minlength=sk.n_steps)
        if self.backlog_ns is not None:
            kept = np.minimum(raw, self.backlog_ns)
        else:
            kept = raw * self.busy_share
        return float(raw.sum()) / sk.n_steps / 1e6, float(kept.sum()) / sk.n_steps / 1e6

    def evidence(self, raw_ms: float, counted_ms: float) -> str:
        if self.backlog_ns is not None:
            return (f"GPU-bound check: when the host had issued a step's last launch, the GPU "
                    f"still had {float(np.mean(self.backlog_ns)) / 1e6:.2f} ms of its work queued "
                    f"(mean over steady steps); savings count up to that per step "
                    f"({raw_ms:.3f} -> {counted_ms:.3f} ms)")
        return (f"GPU busy {self.busy_share:.0%} of the steady steps (no launch records to tell "
                f"queued work): the kernel saving ({raw_ms:.3f} ms) is scaled by it")

    @property
    def method(self) -> str:
        if self.backlog_ns is not None:
            return "capped per step by the GPU work still queued after the step's last launch"
        return f"x GPU-busy share {self.busy_share:.2f}"


def scaling_for(ctx: Context, ra: RankAnalysis, sk: SteadyKernels) -> Scaling:
    """The backlog of every steady step, or the busy share when launches cannot be paired.

    Profiler overhead (``advisor.overhead``: ``X`` ms of host time per step) makes the host
    look slower than it is; without it the host would finish issuing a step earlier, and the
    GPU's waits for the host (breakdown: ``input_wait`` + ``launch`` + ``host`` + ``idle``)
    would shrink by as much as they can. So each step's backlog grows by
    ``max(0, X - GPU time waiting on the host)``: nothing for a host-bound step whose GPU waits
    longer than the overhead, about ``X`` for a GPU-bound one.
    """
    run = ctx.run
    share = gpu_bound_share(ra)
    api = run.table("api_calls", ra.rank)
    k = run.table("kernels", ra.rank)
    if api.num_rows == 0 or k.num_rows == 0:
        return Scaling(None, share)
    kind = api.column("kind")
    if pa.types.is_dictionary(kind.type):
        kind = kind.cast(pa.string())
    api = api.filter(pc.and_(pc.is_in(kind, pa.array(["launch", "graph_launch"])),
                             pc.is_valid(api.column("correlation"))))
    if api.num_rows == 0:
        return Scaling(None, share)
    a_ts = np.asarray(api.column("ts_ns").to_numpy(), dtype=np.int64)
    a_end = a_ts + np.asarray(api.column("dur_ns").to_numpy(), dtype=np.int64)
    a_corr = np.asarray(api.column("correlation").to_numpy(), dtype=np.int64)
    a_slot = assign_to_windows(a_ts, sk.starts, sk.ends)
    m = a_slot >= 0
    if not m.any():  # no launch inside a steady step (a graph replayed from outside them)
        return Scaling(None, share)
    host_done = np.full(sk.n_steps, -1, dtype=np.int64)
    np.maximum.at(host_done, a_slot[m], a_end[m])
    # GPU end of the work each step's launches issued
    order = np.argsort(a_corr[m], kind="stable")
    corr_sorted, slot_sorted = a_corr[m][order], a_slot[m][order]
    k = k.filter(pc.is_valid(k.column("correlation")))
    k_corr = np.asarray(k.column("correlation").to_numpy(), dtype=np.int64)
    k_end = (np.asarray(k.column("ts_ns").to_numpy(), dtype=np.int64)
             + np.asarray(k.column("dur_ns").to_numpy(), dtype=np.int64))
    pos = np.searchsorted(corr_sorted, k_corr)
    hit = (pos < corr_sorted.size) & (corr_sorted[np.minimum(pos, corr_sorted.size - 1)] == k_corr)
    gpu_done = np.full(sk.n_steps, -1, dtype=np.int64)
    np.maximum.at(gpu_done, slot_sorted[pos[hit]], k_end[hit])
    if ((host_done < 0) | (gpu_done < 0)).any():
        return Scaling(None, share)
    backlog = np.maximum(gpu_done - host_done, 0).astype(np.float64)
    inflation = host_trust(run, ctx.analysis).est_inflation_ms * 1e6
    if inflation > 0:
        by_slot = sorted(ra.steps.steady, key=lambda st: st.start_ns)
        waits = np.array([sum(ra.breakdown.per_step[st.index].get(c, 0) for c in HOST_WAITS)
                          for st in by_slot], dtype=np.float64)
        backlog += np.maximum(inflation - waits, 0.0)
    return Scaling(backlog, share)


# -- who wrote a kernel ---------------------------------------------------------------------

LIBRARY = "library"
FRAMEWORK = "framework"
CUSTOM = "custom"

_LIBRARY_RX = re.compile(
    r"nvjet|cutlass|xmma|cublas|cudnn|cask_|\bsm_?\d{2,3}_|ampere_|volta_|turing_|hopper_|"
    r"maxwell_|blackwell_|gemv|gemm|fft|DSE::|nccl|rccl|cub::|thrust::|flash|fmha|sdpa|"
    r"xformers|fbgemm|transformer_engine|\btrt_|tensorrt|magma|cusparse|cusolver|curand|"
    r"cutensor|winograd|cuda_graph|_ZN\d*cutlass|_ZN3cub|_ZN6thrust",
    re.IGNORECASE)
_FRAMEWORK_RX = re.compile(
    r"\bat::|\bc10::|\btorch::|\baten|_ZN2at|_ZN3c10|^triton_(poi|red|per|tem|for|spl)_|"
    r"fusion|^loop_|^input_|^wrapped_|Eigen::|tensorflow::|_ZN5Eigen|_ZN10tensorflow|\bxla::|"
    r"\bjax|\bapex::|multi_tensor_apply",
    re.IGNORECASE)


def kernel_owner(name: str) -> str:
    """``library`` (cuBLAS/cuDNN/CUTLASS/NCCL/CUB/FlashAttention...), ``framework`` (PyTorch
    ATen, Inductor-generated Triton, XLA fusions, TensorFlow/Eigen) or ``custom`` (anything
    else: the user's CUDA, Triton, CuPy or Numba kernels)."""
    if _LIBRARY_RX.search(name):
        return LIBRARY
    if _FRAMEWORK_RX.search(name):
        return FRAMEWORK
    return CUSTOM


# -- the kernels of the steady steps ---------------------------------------------------------

_COLUMNS = ("name", "ts_ns", "dur_ns", "device", "external_id", "category", "tensor_cores",
            "precision", "blocks", "threads", "registers", "shared_memory", "occupancy",
            "occupancy_limiter", "sm_coverage")


@dataclass(frozen=True)
class SteadyKernels:
    """One rank's kernel launches that start inside a steady step, as numpy columns."""

    rank: int
    n_steps: int
    step: npt.NDArray[np.int64]  # index into ra.steps.steps
    slot: npt.NDArray[np.int64]  # position among the steady steps (sorted by start)
    starts: npt.NDArray[np.int64]  # steady step windows, sorted
    ends: npt.NDArray[np.int64]
    cols: Mapping[str, npt.NDArray[Any]]
    all_frame: pa.Table  # every launch of the rank (for overlap with other kernels)
    name_codes: npt.NDArray[np.int64]  # per launch, index into name_values
    name_values: npt.NDArray[np.object_]

    def col(self, name: str) -> npt.NDArray[Any]:
        """``ts_ns`` as int64, other numeric columns as float64 (NaN for nulls), the rest as
        object arrays (None for nulls)."""
        return self.cols[name]


def steady_kernels(run: Run, ra: RankAnalysis) -> SteadyKernels | None:
    """The enriched kernel frame (``analysis.kernels.kernel_frame``) of rank ``ra`` restricted to
    launches that start in a steady step; ``None`` without steady steps or kernels."""
    steady = ra.steps.steady
    if not steady:
        return None
    frame = kernel_frame(run, ra.rank)
    if frame.num_rows == 0:
        return None
    starts = np.array([s.start_ns for s in steady], dtype=np.int64)
    ends = np.array([s.end_ns for s in steady], dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    ts = np.asarray(frame.column("ts_ns").to_numpy(), dtype=np.int64)
    slot = assign_to_windows(ts, starts[order], ends[order])
    keep = slot >= 0
    if not keep.any():
        return None
    sub = frame.filter(pa.array(keep))
    codes, values = column_codes(sub.column("name"))
    cols: dict[str, npt.NDArray[Any]] = {"name": np.asarray(values[codes], dtype=object)}
    for c in _COLUMNS[1:]:
        col = sub.column(c)
        if c == "ts_ns":
            cols[c] = np.asarray(col.to_numpy(), dtype=np.int64)
            continue
        if pa.types.is_integer(col.type) or pa.types.is_floating(col.type):
            col = pc.fill_null(pc.cast(col, pa.float64()), np.nan)
            cols[c] = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)
            continue
        cols[c] = column_objects(col)
    idx = np.array([s.index for s in steady], dtype=np.int64)[order][slot[keep]]
    return SteadyKernels(rank=ra.rank, n_steps=len(steady), step=idx,
                         slot=np.asarray(slot[keep], dtype=np.int64), starts=starts[order],
                         ends=ends[order], cols=cols, all_frame=frame, name_codes=codes,
                         name_values=values)


def column_codes(col: pa.ChunkedArray) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.object_]]:
    """A column as integer codes into an object array of its distinct values (the last value
    is None, the code of nulls)."""
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)
    arr = col.unify_dictionaries().combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    values = np.array(arr.dictionary.to_pylist() + [None], dtype=object)
    idx = pc.fill_null(arr.indices, len(values) - 1).to_numpy(zero_copy_only=False)
    return np.asarray(idx, dtype=np.int64), values


def column_objects(col: pa.ChunkedArray) -> npt.NDArray[np.object_]:
    """A column as an object array (None for nulls), converting each distinct value once."""
    codes, values = column_codes(col)
    return np.asarray(values[codes], dtype=object)


def op_names(run: Run, rank: int) -> dict[int, str]:
    """external_id -> name of the framework op (``cpu_ops``) that launched the GPU work."""
    ops = run.table("cpu_ops", rank)
    if ops.num_rows == 0:
        return {}
    ops = ops.filter(pc.is_valid(ops.column("external_id")))
    ids = ops.column("external_id").to_pylist()
    names = ops.column("name").cast(pa.string()).to_pylist()
    return {int(i): str(n) for i, n in zip(ids, names)}


def device_rows(ra: RankAnalysis) -> dict[int, dict[str, Any]]:
    return {int(d["device"]): d for d in ra.devices}


@dataclass(frozen=True)
class KernelSaving:
    """One kernel name's share of a rule's saving, over the steady steps of one rank."""

    name: str
    calls: int
    time_ns: float  # kernel time of the flagged launches, all steady steps together
    saving_ns: float  # before scaling by the GPU-bound share
    row: int  # a representative launch: the flagged launch with the most time


def by_name(sk: SteadyKernels, mask: npt.NDArray[np.bool_],
            saving: npt.NDArray[np.float64]) -> list[KernelSaving]:
    """Flagged launches (``mask``) grouped by kernel name, largest saving first."""
    rows = np.flatnonzero(mask)
    if rows.size == 0:
        return []
    codes = sk.name_codes[rows]
    dur = sk.col("dur_ns")[rows]
    n = sk.name_values.size
    calls = np.bincount(codes, minlength=n)
    time_ns = np.bincount(codes, weights=dur, minlength=n)
    save_ns = np.bincount(codes, weights=saving[rows], minlength=n)
    order = np.lexsort((-dur, codes))  # per name, its longest launch first
    first = order[np.unique(codes[order], return_index=True)[1]]
    out = [KernelSaving(name=str(sk.name_values[codes[i]]), calls=int(calls[codes[i]]),
                        time_ns=float(time_ns[codes[i]]), saving_ns=float(save_ns[codes[i]]),
                        row=int(rows[i])) for i in first]
    out.sort(key=lambda k: (-k.saving_ns, k.name))
    return out


def short(name: str, width: int = 80) -> str:
    """A kernel name cut to ``width`` characters for titles and evidence."""
    return name if len(name) <= width else name[: width - 1] + "…"


def per_step_ms(ns: float, sk: SteadyKernels) -> float:
    return ns / sk.n_steps / 1e6


def where_for(ra: RankAnalysis, sk: SteadyKernels, top: list[KernelSaving],
              n_kernels: int = 5) -> Where:
    """Where to look: the rank, its steady steps, the step holding the top kernel's longest
    flagged launch, and the top kernel names."""
    start = end = None
    if top:
        step = ra.steps.steps[int(sk.step[top[0].row])]
        start, end = step.start_ns, step.end_ns
    return Where(rank=ra.rank, steps=tuple(s.index for s in ra.steps.steady), start_ns=start,
                 end_ns=end, kernels=tuple(k.name for k in top[:n_kernels]))


def per_name(sk: SteadyKernels, fn: Callable[[str, int], Any]) -> npt.NDArray[Any]:
    """``fn(name, row)`` evaluated once per distinct kernel name (``row``: one of its launches)
    and spread back over the launches, as an object array."""
    codes = sk.name_codes
    if codes.size == 0:
        return np.zeros(0, dtype=object)
    present, first = np.unique(codes, return_index=True)
    vals = np.full(sk.name_values.size, None, dtype=object)
    for c, i in zip(present, first):
        vals[c] = fn(str(sk.name_values[c]), int(i))
    return np.asarray(vals[codes], dtype=object)


class _Saving(Protocol):
    @property
    def saving_ms(self) -> float: ...


S = TypeVar("S", bound=_Saving)
K = TypeVar("K")


def largest(results: Iterable[S | None]) -> S | None:
    """The result with the largest saving (one per rank, None where a rank has none)."""
    return max((r for r in results if r is not None), key=lambda r: r.saving_ms, default=None)


def largest_per_key(groups: Iterable[Mapping[K, S]]) -> dict[K, S]:
    """Per key, the group with the largest saving over ranks."""
    best: dict[K, S] = {}
    for per_rank in groups:
        for key, g in per_rank.items():
            if key not in best or g.saving_ms > best[key].saving_ms:
                best[key] = g
    return best
