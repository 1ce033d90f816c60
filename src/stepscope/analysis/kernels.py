"""The kernel table: per-name statistics, launch geometry, occupancy and what each kernel does.

``kernel_frame`` enriches every kernel execution (one row per launch) with its class
(``kernel_names``), its theoretical occupancy (``occupancy``, from the ``devices`` row of the
rank and device it ran on) and how much of the GPU its grid covers. ``kernel_table`` groups
that by kernel name; ``kernel_summary`` reduces it to a few duration-weighted figures.

Geometry of a name is that of its *dominant configuration*: the (grid, block, registers,
shared memory) combination with the most total time under that name. Its occupancy is the
one computed for the first launch of that configuration (launches of one configuration on
devices with different limits are not told apart).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.analysis.graph import StepGraph
from stepscope.analysis.kernel_names import MATMUL, classify_names
from stepscope.analysis.occupancy import DeviceLimits, occupancy_arrays

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
_GEOMETRY = (
    "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers", "shared_memory",
)


@dataclass(frozen=True)
class KernelStats:
    name: str
    calls: int
    total_ns: int
    mean_ns: float
    median_ns: float
    min_ns: int
    max_ns: int
    share: float
    """Of all kernel time in scope (rank, window)."""
    grid: tuple[int, int, int]
    """Dominant configuration (most time); 0 where the source did not record it."""
    block: tuple[int, int, int]
    registers: int | None
    shared_memory: int | None
    blocks: int
    threads_per_block: int
    occupancy: float | None
    """Theoretical, 0..1, of the dominant configuration; None without device limits."""
    occupancy_limiter: str | None
    active_blocks_per_sm: int | None
    sm_coverage: float | None
    """min(1, blocks / SMs): the share of SMs the grid can occupy at all."""
    waves: float | None
    """blocks / (active blocks per SM * SMs)."""
    category: str
    tensor_cores: bool | None
    precision: str | None
    source_occupancy_pct: float | None
    """What the trace reported (Kineto's estimate) for the dominant configuration."""
    devices: tuple[int, ...]


@dataclass(frozen=True)
class KernelSummary:
    total_ns: int
    tensor_core_ns: int
    tensor_core_share: float
    by_precision_ns: dict[str, int]
    """Time of gemm/conv/attention kernels by input precision ("unknown" when unnamed)."""
    by_category_ns: dict[str, int]
    est_sm_efficiency: float | None
    """Duration-weighted mean of min(1, blocks / SMs); None when no kernel has an SM count."""
    mean_occupancy: float | None
    """Duration-weighted mean theoretical occupancy of the kernels that have one."""


def _ints(table: pa.Table, name: str) -> tuple[I64, npt.NDArray[np.bool_]]:
    """Column as int64 with nulls as 0, and its validity mask."""
    col = table.column(name)
    valid = np.asarray(pc.is_valid(col).to_numpy(zero_copy_only=False), dtype=bool)
    vals = np.asarray(pc.fill_null(col, 0).to_numpy(zero_copy_only=False), dtype=np.int64)
    return vals, valid


def _name_codes(table: pa.Table) -> tuple[I64, list[str]]:
    """Kernel names as integer codes into a list of distinct names."""
    col = table.column("name")
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)
    arr = col.unify_dictionaries().combine_chunks()  # one dictionary across ranks' files
    codes = np.asarray(arr.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    return codes, [str(x) for x in arr.dictionary.to_pylist()]


_DeviceInfo = dict[tuple[int, int], tuple[DeviceLimits | None, int | None]]


def _device_info(g: StepGraph) -> _DeviceInfo:
    """(rank, device) -> (occupancy limits or None, SM count or None)."""
    out: _DeviceInfo = {}
    for row in g.table("devices").to_pylist():
        sms = row.get("sm_count")
        out[(int(row["rank"]), int(row["device"]))] = (
            DeviceLimits.from_device_row(row), int(sms) if sms else None)
    return out


def kernel_frame(g: StepGraph) -> pa.Table:
    """The ``kernels`` table with per-launch derived columns (see :func:`_kernel_frame`);
    computed once per graph."""
    return g.memo("kernel_frame", lambda: _kernel_frame(g))


def _kernel_frame(graph: StepGraph) -> pa.Table:
    """The ``kernels`` table with, per launch: ``category``, ``tensor_cores``, ``precision``,
    ``blocks``, ``threads``, ``occupancy``, ``active_blocks_per_sm``, ``occupancy_limiter``,
    ``sm_coverage`` and ``waves`` (nulls where the inputs or the device limits are missing).
    """
    k = graph.table("kernels")
    n = k.num_rows
    codes, names = _name_codes(k)
    classes = classify_names(names, graph.shared(("kernel_classes",), dict))
    cat = np.array([c.category for c in classes] or [""], dtype=object)
    tcs = np.array([c.tensor_cores for c in classes] or [None], dtype=object)
    prec = np.array([c.precision for c in classes] or [None], dtype=object)

    g = {c: _ints(k, c) for c in _GEOMETRY}
    blocks = g["grid_x"][0] * g["grid_y"][0] * g["grid_z"][0]
    threads = g["block_x"][0] * g["block_y"][0] * g["block_z"][0]
    geo_ok = np.logical_and.reduce([g[c][1] for c in _GEOMETRY[:6]]) if n else np.zeros(0, bool)
    occ_ok = geo_ok & g["registers"][1] & g["shared_memory"][1]

    occ = np.full(n, np.nan)
    active = np.full(n, -1, dtype=np.int64)
    limiter = np.full(n, None, dtype=object)
    coverage = np.full(n, np.nan)
    waves = np.full(n, np.nan)
    ranks = np.asarray(k.column("rank").to_numpy(zero_copy_only=False), dtype=np.int64)
    devs, dev_ok = _ints(k, "device")
    for (r, d), (limits, sms) in _device_info(graph).items():
        rows = (ranks == r) & (devs == d) & dev_ok
        if sms:
            sel = rows & geo_ok
            coverage[sel] = np.minimum(1.0, blocks[sel] / sms)
        sel = rows & occ_ok
        if limits is None or not sel.any():
            continue
        o, a, lim = occupancy_arrays(
            limits, threads[sel], g["registers"][0][sel], g["shared_memory"][0][sel])
        occ[sel], active[sel], limiter[sel] = o, a, lim
        slots = a * limits.sm_count
        waves[sel] = np.where(slots > 0, blocks[sel] / np.maximum(slots, 1), np.nan)

    has_occ = active >= 0
    extra: dict[str, pa.Array] = {
        "issued_ns": pa.array(graph.issued_ns[:n], type=pa.int64()),
        "category": pa.array(cat[codes] if n else [], type=pa.string()),
        "tensor_cores": pa.array(list(tcs[codes]) if n else [], type=pa.bool_()),
        "precision": pa.array(list(prec[codes]) if n else [], type=pa.string()),
        "blocks": pa.array(blocks, mask=~geo_ok, type=pa.int64()),
        "threads": pa.array(threads, mask=~geo_ok, type=pa.int64()),
        "occupancy": pa.array(occ, mask=~has_occ, type=pa.float64()),
        "active_blocks_per_sm": pa.array(active, mask=~has_occ, type=pa.int64()),
        "occupancy_limiter": pa.array(list(limiter), type=pa.string()),
        "sm_coverage": pa.array(coverage, mask=np.isnan(coverage), type=pa.float64()),
        "waves": pa.array(waves, mask=np.isnan(waves), type=pa.float64()),
    }
    for name, arr in extra.items():
        k = k.append_column(name, arr)
    return k


def _in_window(frame: pa.Table, window: tuple[int, int] | None) -> pa.Table:
    """Kernels issued in ``[start, end)`` (see ``StepGraph.issued_ns``)."""
    if window is None:
        return frame
    ts = frame.column("issued_ns")
    return frame.filter(pc.and_(pc.greater_equal(ts, window[0]), pc.less(ts, window[1])))


def _col(frame: pa.Table, name: str) -> npt.NDArray[Any]:
    return np.asarray(frame.column(name).to_numpy(zero_copy_only=False))


def _opt_float(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and np.isnan(x)) else float(x)


def _row_groups(cols: list[I64]) -> tuple[I64, I64]:
    """Group rows by the tuple of their values in ``cols`` (equal-length int arrays): the group
    of each row (dense ids) and one row index per group. Columns are folded in one at a time
    and re-densified, so the combined key never overflows (cheaper than unique(axis=0))."""
    key = np.zeros(cols[0].size, dtype=np.int64)
    for c in cols:
        _, code = np.unique(c, return_inverse=True)
        key = key * (int(code.max()) + 1 if code.size else 1) + code.reshape(-1)
        _, key = np.unique(key, return_inverse=True)
        key = key.reshape(-1).astype(np.int64)
    _, first = np.unique(key, return_index=True)
    return key, first.astype(np.int64)


def kernel_table(g: StepGraph, *, window: tuple[int, int] | None = None,
                 limit: int | None = None) -> tuple[KernelStats, ...]:
    """Per kernel name, sorted by total time (descending, then name).

    ``window`` keeps kernels that start in ``[start, end)`` ns; ``limit`` keeps the first rows.
    The whole table is computed once per graph and window.
    """
    out = g.memo(("kernel_table", window), lambda: _kernel_table(g, window))
    return out[:limit] if limit is not None else out


def _kernel_table(g: StepGraph, window: tuple[int, int] | None) -> tuple[KernelStats, ...]:
    frame = _in_window(kernel_frame(g), window)
    if frame.num_rows == 0:
        return ()
    codes, names = _name_codes(frame)
    dur = _col(frame, "dur_ns").astype(np.int64)
    grand = int(dur.sum())

    # per-name duration statistics on durations sorted within each name
    order = np.lexsort((dur, codes))
    sc, sd = codes[order], dur[order]
    uniq, start, count = np.unique(sc, return_index=True, return_counts=True)
    total = np.add.reduceat(sd, start)
    mid = start + count // 2
    median = np.where(count % 2 == 1, sd[mid], (sd[mid - 1] + sd[mid]) / 2.0)

    # dominant configuration per name: the geometry with the most time (nulls kept distinct)
    cols = [codes]
    for c in _GEOMETRY:
        vals, valid = _ints(frame, c)
        cols.append(np.where(valid, vals, -(2**40)))
    inv, first = _row_groups(cols)
    cfg_time = np.bincount(inv, weights=dur, minlength=first.size)
    cfg_name = codes[first]
    pick = np.lexsort((-cfg_time, cfg_name))  # by name, most time first
    _, head = np.unique(cfg_name[pick], return_index=True)
    dominant = first[pick[head]]  # one row of the dominant configuration, per name (sorted by code)

    rows = frame.take(pa.array(dominant)).select(
        [*_GEOMETRY, "category", "tensor_cores", "precision", "occupancy", "occupancy_limiter",
         "active_blocks_per_sm", "sm_coverage", "waves", "source_occupancy_pct"]).to_pylist()
    devs, dev_ok = _ints(frame, "device")
    _, pair_first = _row_groups([codes[dev_ok], devs[dev_ok]])
    dev_sets: dict[int, list[int]] = {}
    for code, dev in sorted(zip(codes[dev_ok][pair_first].tolist(),
                                devs[dev_ok][pair_first].tolist())):
        dev_sets.setdefault(int(code), []).append(int(dev))

    out: list[KernelStats] = []
    for i, code in enumerate(uniq):
        r = rows[i]
        grid = tuple(int(r[c] or 0) for c in ("grid_x", "grid_y", "grid_z"))
        block = tuple(int(r[c] or 0) for c in ("block_x", "block_y", "block_z"))
        active = r["active_blocks_per_sm"]
        out.append(KernelStats(
            name=names[int(code)], calls=int(count[i]), total_ns=int(total[i]),
            mean_ns=float(total[i]) / float(count[i]), median_ns=float(median[i]),
            min_ns=int(sd[start[i]]), max_ns=int(sd[start[i] + count[i] - 1]),
            share=float(total[i]) / grand if grand else 0.0,
            grid=(grid[0], grid[1], grid[2]), block=(block[0], block[1], block[2]),
            registers=r["registers"], shared_memory=r["shared_memory"],
            blocks=grid[0] * grid[1] * grid[2], threads_per_block=block[0] * block[1] * block[2],
            occupancy=_opt_float(r["occupancy"]), occupancy_limiter=r["occupancy_limiter"],
            active_blocks_per_sm=None if active is None else int(active),
            sm_coverage=_opt_float(r["sm_coverage"]), waves=_opt_float(r["waves"]),
            category=r["category"], tensor_cores=r["tensor_cores"], precision=r["precision"],
            source_occupancy_pct=_opt_float(r["source_occupancy_pct"]),
            devices=tuple(dev_sets.get(int(code), ())),
        ))
    out.sort(key=lambda s: (-s.total_ns, s.name))
    return tuple(out)


def _weighted(values: pa.ChunkedArray, weights: F64) -> float | None:
    v = np.asarray(pc.fill_null(values, np.nan).to_numpy(zero_copy_only=False), dtype=np.float64)
    ok = ~np.isnan(v)
    w = weights[ok]
    return float((v[ok] * w).sum() / w.sum()) if w.sum() > 0 else None


def kernel_summary(g: StepGraph, window: tuple[int, int] | None = None) -> KernelSummary:
    """Duration-weighted figures over the kernels in scope (see ``KernelSummary``)."""
    frame = _in_window(kernel_frame(g), window)
    dur = _col(frame, "dur_ns").astype(np.int64)
    total = int(dur.sum())
    tc_ns = int(pc.sum(frame.filter(pc.fill_null(frame.column("tensor_cores"), False))
                       .column("dur_ns")).as_py() or 0)
    matmul = frame.filter(pc.is_in(frame.column("category"), pa.array(sorted(MATMUL))))
    matmul = matmul.set_column(matmul.schema.get_field_index("precision"), "precision",
                               pc.fill_null(matmul.column("precision"), "unknown"))

    def by(t: pa.Table, key: str) -> dict[str, int]:
        agg = t.group_by(key).aggregate([("dur_ns", "sum")])
        agg = agg.sort_by([("dur_ns_sum", "descending"), (key, "ascending")])
        keys, sums = agg.column(key).to_pylist(), agg.column("dur_ns_sum").to_pylist()
        return {str(k): int(v) for k, v in zip(keys, sums)}

    return KernelSummary(
        total_ns=total, tensor_core_ns=tc_ns, tensor_core_share=tc_ns / total if total else 0.0,
        by_precision_ns=by(matmul, "precision"), by_category_ns=by(frame, "category"),
        est_sm_efficiency=_weighted(frame.column("sm_coverage"), dur.astype(np.float64)),
        mean_occupancy=_weighted(frame.column("occupancy"), dur.astype(np.float64)),
    )
