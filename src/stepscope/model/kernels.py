"""The kernels of the steady steps as numpy columns, who wrote each kernel, and a kernel
rule's saving grouped by kernel name: what the kernel rules measure their savings over."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.analysis import RankAnalysis
from stepscope.analysis import intervals as iv
from stepscope.analysis.busy import is_communication
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.intervals import I64, assign_to_windows
from stepscope.analysis.kernels import kernel_frame
from stepscope.analysis.launches import LAUNCH_KINDS, bounds, column_i64, column_str, str_in
from stepscope.analysis.results import FACT

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
    """One rank's kernel launches that start inside a steady step's window on the GPU
    timeline (``Step.window``), as numpy columns."""

    rank: int
    n_steps: int
    step: npt.NDArray[np.int64]  # index into ra.steps.steps
    slot: npt.NDArray[np.int64]  # position among the steady steps (sorted by start)
    starts: npt.NDArray[np.int64]  # steady steps' markers (host side: launches), sorted
    ends: npt.NDArray[np.int64]
    cols: Mapping[str, npt.NDArray[Any]]
    all_frame: pa.Table  # every launch of the rank (for overlap with other kernels)
    name_codes: npt.NDArray[np.int64]  # per launch, index into name_values
    name_values: npt.NDArray[np.object_]

    def col(self, name: str) -> npt.NDArray[Any]:
        """``ts_ns`` as int64, other numeric columns as float64 (NaN for nulls), the rest as
        object arrays (None for nulls); ``row``: each launch's row of the ``kernels`` table."""
        return self.cols[name]


def steady_kernels(g: StepGraph, ra: RankAnalysis) -> SteadyKernels | None:
    """The enriched kernel frame (``analysis.kernels.kernel_frame``) of rank ``ra`` restricted to
    launches that start in a steady step's window (GPU-anchored where the host ran ahead);
    ``None`` without steady steps or kernels. Once per rank graph (four rules read it)."""
    return g.memo(("steady_kernels",), lambda: _steady_kernels(g, ra))


def _steady_kernels(g: StepGraph, ra: RankAnalysis) -> SteadyKernels | None:
    steady = ra.steps.steady
    if not steady:
        return None
    frame = kernel_frame(g)
    if frame.num_rows == 0:
        return None
    starts = np.array([s.start_ns for s in steady], dtype=np.int64)
    ends = np.array([s.end_ns for s in steady], dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    # a kernel belongs to the step whose window on the GPU timeline it starts in: the
    # markers when they hold their GPU work, the anchored windows when the host ran ahead
    # (an async JAX loop's markers cover only the dispatch, and hold none of the kernels)
    w_starts = np.array([s.window[0] for s in steady], dtype=np.int64)[order]
    w_ends = np.array([s.window[1] for s in steady], dtype=np.int64)[order]
    ts = np.asarray(frame.column("ts_ns").to_numpy(), dtype=np.int64)
    slot = assign_to_windows(ts, w_starts, w_ends)
    keep = slot >= 0
    if not keep.any():
        return None
    sub = frame.filter(pa.array(keep))
    codes, values = column_codes(sub.column("name"))
    cols: dict[str, npt.NDArray[Any]] = {"name": np.asarray(values[codes], dtype=object),
                                         "row": np.flatnonzero(keep).astype(np.int64)}
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


def steady_op_names(g: StepGraph, sk: SteadyKernels) -> dict[int, str]:
    """``op_names`` of the external ids of ``sk``'s launches (the rank's steady kernels) only;
    once per rank graph (the kernel rules' per-rank parts count the flagged launches' ops
    from it)."""
    def compute() -> dict[int, str]:
        ext = sk.col("external_id")
        want = {int(e) for e in ext[~np.isnan(ext)]}
        return {i: n for i, n in op_names(g).items() if i in want}

    return g.memo(("steady_op_names",), compute)


def op_names(g: StepGraph) -> dict[int, str]:
    """external_id -> name of the framework op (``cpu_ops``) that launched the GPU work."""
    ops = g.table("cpu_ops")
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


EVIDENCE_ITEMS = 5  # the kernel names a kernel rule's finding shows


@dataclass(frozen=True)
class TopKernels:
    """A kernel rule's evidence on one rank, what is left of its ``SteadyKernels`` once the
    rule has measured its saving: the first ``EVIDENCE_ITEMS`` kernel names by saving, each
    with the columns of its representative launch (their ``KernelSaving.row`` indexes
    ``step`` and ``cols``), and how many names there were. A few hundred bytes, where the
    rank's kernel frame is hundreds of kB: what a worker sends back for the rule."""

    rank: int
    n_steps: int
    items: tuple[KernelSaving, ...]
    n_items: int
    step: npt.NDArray[np.int64]  # per item: index into ra.steps.steps
    cols: Mapping[str, npt.NDArray[Any]]

    def col(self, name: str) -> npt.NDArray[Any]:
        """A column of ``SteadyKernels`` at the items' launches."""
        return self.cols[name]


def top_kernels(sk: SteadyKernels, items: list[KernelSaving],
                n: int = EVIDENCE_ITEMS) -> TopKernels:
    """The first ``n`` of ``items`` (``by_name``'s) with their launches' columns."""
    head = items[:n]
    rows = np.array([k.row for k in head], dtype=np.int64)
    return TopKernels(rank=sk.rank, n_steps=sk.n_steps,
                      items=tuple(replace(k, row=i) for i, k in enumerate(head)),
                      n_items=len(items), step=np.asarray(sk.step[rows], dtype=np.int64),
                      cols={c: v[rows] for c, v in sk.cols.items() if c != "name"})


def per_step_ms(ns: float, sk: SteadyKernels | TopKernels) -> float:
    return ns / sk.n_steps / 1e6


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


def launch_stats(g: StepGraph, ws: I64, we: I64) -> tuple[float, list[tuple[str, int, float]]]:
    """``kernel_launch_stats`` over the rank's steady windows ``[ws, we)`` (the idle split's:
    always those), once per rank graph: a per-rank fact (``advisor.rank_facts``), so that the
    parent of a rank-parallel analysis does not read the rank's kernels and API calls for the
    ``launch_bound`` finding's evidence."""
    return g.memo((FACT, "launch_stats"), lambda: kernel_launch_stats(g, ws, we))


def kernel_launch_stats(g: StepGraph, ws: I64, we: I64, top: int = 3
                        ) -> tuple[float, list[tuple[str, int, float]]]:
    """Median kernel duration (ns) in the windows, and the kernels most often shorter than
    their launch call: ``(name, count, median ns)``, most frequent first."""
    k = g.table("kernels")
    ks, ke = bounds(k)
    m = iv.assign_to_windows(ks, ws, we) >= 0
    if not m.any():
        return 0.0, []
    k = k.filter(pa.array(m, type=pa.bool_()))
    dur = (ke - ks)[m]
    api = g.table("api_calls")
    is_l = str_in(api, "kind", LAUNCH_KINDS)
    a_s, a_e = bounds(api)
    row = g.gpu_api_row[: g.gpu.n_kernels][m]  # each kernel's launch call
    hit = row >= 0
    if hit.any():
        r = np.maximum(row, 0)
        short = hit & is_l[r] & (dur < (a_e - a_s)[r])
    else:
        short = np.zeros(dur.size, dtype=bool)
    names = np.array(column_str(k, "name").to_pylist(), dtype=object)
    out: list[tuple[str, int, float]] = []
    if short.any():
        uniq, inv, counts = np.unique(names[short], return_inverse=True, return_counts=True)
        sd = dur[short]
        for i in np.argsort(-counts, kind="stable")[:top].tolist():
            out.append((str(uniq[i]), int(counts[i]), float(np.median(sd[inv == i]))))
    return float(np.median(dur)), out


@dataclass(frozen=True)
class KernelColumns:
    """Every kernel of the rank (the ``kernels`` table's rows) as columns, with its launch call
    (an ``api_calls`` row, -1 without) and whether it is a communication kernel."""

    start: I64
    end: I64
    device: I64  # null: 0
    stream: I64  # null: -1
    communication: npt.NDArray[np.bool_]
    api_row: I64


def kernel_columns(g: StepGraph) -> KernelColumns:
    k = g.table("kernels")
    nk = g.gpu.n_kernels
    comm = is_communication(k.column("name")) if k.num_rows else np.zeros(0, dtype=bool)
    return KernelColumns(start=g.gpu.start[:nk], end=g.gpu.end[:nk], device=g.gpu.device[:nk],
                         stream=column_i64(k, "stream"), communication=comm,
                         api_row=g.gpu_api_row[:nk])
