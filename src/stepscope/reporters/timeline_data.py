"""The HTML report's timeline payload: every event of a run as compact binary columns.

Layout (``Timeline.meta`` describes it; ``Timeline.blob`` holds the bytes, zlib-compressed)
------------------------------------------------------------------------------------------
* Times are relative to ``t0_ns`` (the earliest event of the run, all ranks), integer ns.
* Events are grouped into **tracks** (a rank's steps, a GPU stream, a GPU's projected
  annotations, a host thread, a host thread's sampled stacks) and each track into **lanes** (nesting depth on a host
  thread: ``depth = events open at its start``, computed once, vectorised; events that only
  partly overlap an event of their depth go to extra lanes below, so a lane never holds two
  overlapping events). A lane is a
  contiguous slice ``[lane_off, lane_off + lane_n)`` of the event arrays, sorted by start.
* Per event: ``dt`` (uint32, ns since the previous event's start in the same lane, the
  first one since 0), ``dur`` (uint32 ns), ``kind`` (uint8, :data:`KINDS`), ``name`` (uint16 or
  uint32 index into ``strings``). ``0xFFFFFFFF`` in ``dt``/``dur`` means "the next value of
  ``big_dt``/``big_dur``" (float64 ns), for gaps or durations over 4.29 s.
* Per kind, in event order (the i-th kernel event owns row i): kernels ``k_corr``,
  ``k_cfg`` (index into ``kernel_configs``: launch geometry and occupancy); copies
  ``c_corr``, ``c_bytes``, ``c_kind``, ``c_src``, ``c_dst``; memsets ``m_corr``, ``m_bytes``;
  API calls ``a_corr``, ``a_kind``; sampled stacks ``s_stack`` (string index of the whole
  stack) and ``s_n`` (samples merged into the event). ``kernel_classes`` maps a kernel's name
  index to its category, precision and tensor-core use.
* Each rank's times are shifted by its clock offset onto the shared axis where the ranks'
  clocks differ (``meta["clock"]``: why, and ``offsets``: rank, ``offset_ns``, ``offset_us``;
  :mod:`stepscope.model.clocks`); ``t0_ns`` is on that axis (rank 0's clock).
* ``tracks`` is in display order: per rank its steps, GPU streams (by device), host threads
  (main thread first, each followed by its sampled stacks: :mod:`stepscope.reporters.timeline_host`),
  then counters (``role``: ``single``, or a ``summary`` with its folded ``member`` series).

The arrays are little-endian, each starting at a multiple of 8 bytes of the decompressed
blob (``arrays: {name: [dtype, offset, count]}``), so the browser views them in place.
About 10 bytes per event before compression, 3 to 5 after.

Counters (allocator memory, samples) are small JSON series in ``counters``
(:mod:`stepscope.reporters.timeline_counters`). With ``max_events``, the shortest host
``python`` frames are dropped first (then framework ops) and ``dropped`` says how many; GPU
events are always kept.

:mod:`stepscope.reporters.timeline_build` reads the run's events into the accumulators of
:mod:`stepscope.reporters.timeline_columns`; :func:`layout` sorts them into lanes and packs them.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from stepscope.analysis import Analysis
from stepscope.analysis.kernels import KernelStats
from stepscope.model.clocks import ClockAlignment
from stepscope.reporters.timeline_columns import (
    ESC,
    I64,
    KINDS,
    K,
    Parts,
    Strings,
    Tracks,
    lanes,
    pack,
    u32_escaped,
)
from stepscope.reporters.timeline_counters import CounterData, build_counters
from stepscope.reporters.timeline_host import API_KINDS, order_key, thread_events
from stepscope.schema_enums import CopyKind, MemoryKind

__all__ = ["KINDS", "K", "Page", "Timeline", "add_steps", "layout", "rel_us"]
COPY_KINDS = [c.value for c in CopyKind]
MEM_KINDS = [m.value for m in MemoryKind]
CFG_INT = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers",
            "shared_memory", "static_smem", "dynamic_smem")
CFG_ALL = (*CFG_INT, "occupancy", "occupancy_limiter", "active_blocks_per_sm", "sm_coverage",
            "waves", "source_occupancy_pct")
_U32_EXTRA = ("k_cfg", "s_stack", "s_n")  # per-kind columns that are indices or counts


@dataclass(frozen=True)
class Timeline:
    meta: dict[str, Any]
    blob: bytes  # zlib stream of the arrays described in meta["arrays"]
    events: int
    raw_bytes: int


@dataclass(frozen=True)
class Page:
    """What the HTML page shows beyond the report, read from the run when the report is built
    (:func:`stepscope.reporters.timeline_build.build_page`)."""

    timeline: Timeline
    kernels: tuple[tuple[int, tuple[KernelStats, ...]], ...]  # (rank, its kernel table)
    kernels_top_only: bool  # some rank's table is only the analysis' top kernels
    copies: dict[str, Any]  # {"total": memcpy rows, "rows": the longest, µs since t0}
    devices: tuple[dict[str, Any], ...]  # the devices table's rows
    api_calls: int
    launch_apis: int  # kernel and graph launches among the API calls


def rel_us(ns: int | None, t0: int) -> float | None:
    """``ns`` since the epoch as µs since ``t0`` (JavaScript numbers cannot hold the former)."""
    return None if ns is None else round((int(ns) - t0) / 1e3, 3)


def add_steps(analysis: Analysis, strings: Strings, tracks: Tracks, parts: Parts) -> None:
    for ra in analysis.ranks:
        st = ra.steps.steps
        if not st:
            continue
        tid = tracks.id(("steps", ra.rank), type="steps", rank=ra.rank, label="Steps",
                        order=(ra.rank, 0, 0, 0))
        names = [f"Step {s.number}" + ("" if s.steady else " (not steady)") for s in st]
        parts.add(K["step"], np.array([s.start_ns for s in st], dtype=np.int64),
                  np.array([s.wall_ns for s in st], dtype=np.int64), np.full(len(st), tid),
                  np.array([strings.id(n) for n in names], dtype=np.uint32))


def _budget(kind: npt.NDArray[np.uint8], dur: I64, max_events: int | None) -> npt.NDArray[np.bool_]:
    """Keep mask: drop the shortest python frames, then framework ops, beyond ``max_events``."""
    keep = np.ones(kind.size, dtype=bool)
    excess = kind.size - (max_events if max_events is not None else kind.size)
    for k in (K["python"], K["op"]):
        if excess <= 0:
            break
        idx = np.flatnonzero(kind == k)
        drop = idx[np.argsort(dur[idx], kind="stable")[:excess]]
        keep[drop] = False
        excess -= drop.size
    return keep


def layout(strings: Strings, tracks: Tracks, parts: Parts, counter_data: CounterData, *,
           max_events: int | None = None, level: int = 1,
           clock: ClockAlignment | None = None) -> Timeline:
    """The gathered events (:mod:`.timeline_build`) as the payload of the module docstring;
    ``clock``: the shift of each rank's events onto the shared axis (the counters' series come
    shifted already)."""
    clock = clock or ClockAlignment()
    if not parts.ts:
        parts.add(K["step"], np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64),
                  np.zeros(0, np.uint32))
    ts, dur = np.concatenate(parts.ts), np.concatenate(parts.dur)
    track, name = np.concatenate(parts.track), np.concatenate(parts.name)
    if clock.shifts_ns:
        by_track = np.array([clock.shift(int(t["rank"])) for t in tracks.items] or [0],
                            dtype=np.int64)
        ts = ts + by_track[track]
    kind = np.concatenate(parts.kind)
    row = np.concatenate(parts.row)
    keep = _budget(kind, dur, max_events)
    dropped = int((~keep).sum())
    ts, dur, track, name, kind, row = ts[keep], dur[keep], track[keep], name[keep], kind[keep], row[keep]
    t0 = int(ts.min()) if ts.size else 0
    rel = ts - t0

    # nesting depth per track, then lanes = track's first lane + depth
    depth = np.zeros(ts.size, dtype=np.int64)
    order_t = np.argsort(track, kind="stable")
    bounds = np.searchsorted(track[order_t], np.arange(len(tracks.items) + 1))
    for t in range(len(tracks.items)):
        idx = order_t[bounds[t]:bounds[t + 1]]
        depth[idx] = lanes(rel[idx], rel[idx] + dur[idx])
    per_thread = thread_events(tracks.items, np.bincount(track, minlength=len(tracks.items)))
    order_tracks = sorted(range(len(tracks.items)),
                          key=lambda i: order_key(tracks.items[i], per_thread))
    lanes_of = np.zeros(len(tracks.items), dtype=np.int64)
    np.maximum.at(lanes_of, track, depth + 1)
    lane0 = np.zeros(len(tracks.items), dtype=np.int64)
    acc = 0
    for t in order_tracks:
        lane0[t] = acc
        acc += int(lanes_of[t])
    lane = lane0[track] + depth
    order = np.lexsort((rel, lane))
    rel, dur, lane, name, kind, row = rel[order], dur[order], lane[order], name[order], kind[order], row[order]
    lane_off = np.searchsorted(lane, np.arange(acc + 1))
    dt = np.diff(rel, prepend=0)
    dt[lane_off[:-1][lane_off[:-1] < rel.size]] = rel[lane_off[:-1][lane_off[:-1] < rel.size]]
    dt_u, big_dt = u32_escaped(dt)
    dur_u, big_dur = u32_escaped(dur)

    arrays: dict[str, npt.NDArray[Any]] = {
        "dt": dt_u, "dur": dur_u, "big_dt": big_dt, "big_dur": big_dur, "kind": kind,
        "name": name.astype("<u2" if len(strings.items) < 65536 else "<u4"),
        "lane_off": lane_off.astype("<u4"),
    }
    for kname, prefix in (("kernel", "k_"), ("memcpy", "c_"), ("memset", "m_"), ("api", "a_"),
                          ("stack", "s_")):
        rows = row[kind == K[kname]]
        for col, chunks in parts.extra.items():
            if col.startswith(prefix):
                vals = np.concatenate(chunks)[rows]
                if col.endswith("_bytes"):
                    arrays[col] = vals.astype("<f8")
                elif col.endswith("_corr") or col in _U32_EXTRA:
                    arrays[col] = np.where((vals < 0) | (vals >= ESC), 0, vals).astype("<u4")
                else:
                    arrays[col] = vals.astype(np.uint8)
    raw, layout = pack(arrays)
    track_list = []
    for t in order_tracks:
        info = {k: v for k, v in tracks.items[t].items() if k != "order"}
        info.update(lane0=int(lane0[t]), lanes=int(lanes_of[t]))
        track_list.append(info)
    counters = build_counters(counter_data, t0)
    for i, c in enumerate(counters):
        track_list.append({"type": "counter", "rank": c["rank"], "label": c["label"], "counter": i,
                           "role": c["role"], "lane0": 0, "lanes": 0})
    track_list.sort(key=lambda tr: (tr["rank"], _TYPE_ORDER[tr["type"]]))
    class_map = {str(i): {"category": c["category"], "precision": c["precision"],
                          "tensor_cores": c["tensor_cores"]} for i, c in parts.classes}
    meta: dict[str, Any] = {
        "version": 1, "t0_ns": str(t0), "end_us": float(((rel + dur).max() if rel.size else 0) / 1e3),
        "events": int(rel.size), "dropped": dropped, "kinds": list(KINDS), "strings": strings.items,
        "tracks": track_list, "arrays": layout, "encoding": "zlib",
        "kernel_configs": {"columns": list(CFG_ALL), "rows": _clean(parts.configs)},
        "kernel_classes": class_map, "copy_kinds": COPY_KINDS, "memory_kinds": MEM_KINDS,
        "api_kinds": API_KINDS, "counters": counters,
        # the shift of each rank onto the shared axis (model.clocks), said in the page header
        "clock": {"reason": clock.reason,
                  "offsets": [{"rank": r, "offset_ns": str(v), "offset_us": v / 1e3}
                              for r, v in sorted(clock.shifts_ns.items())]},
    }
    return Timeline(meta=meta, blob=zlib.compress(raw, level), events=int(rel.size),
                    raw_bytes=len(raw))


_TYPE_ORDER = {"steps": 0, "gpu_annotations": 1, "stream": 1, "thread": 2, "stacks": 2,
               "counter": 3}


def _clean(rows: list[list[Any]]) -> list[list[Any]]:
    def one(v: Any) -> Any:
        if isinstance(v, float):
            return None if math.isnan(v) else round(v, 4)
        return v
    return [[one(v) for v in r] for r in rows]
