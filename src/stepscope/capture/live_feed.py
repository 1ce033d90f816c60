"""What ``stepscope record --live`` shows, read from the staging folder while the program runs.

Only what the capture writes anyway is read: the Parquet chunks each captured process flushes into
its partition (``capture.staging``; every ``flush_every_s``, 5 s by default, while its window is
open) and its ``meta.json``. The reading happens in the recorder's parent process, so the
profiled program does no work for the live view and its overhead is the same with or without it
(``benchmarks/capture/live_overhead.py`` measures that).

Four tables are read, each chunk once (a chunk is written under a temporary name and renamed, so
a chunk seen is complete): ``steps`` (step boundaries from the optimizer hook, ``stepscope.step()``
or NVTX), ``input_waits`` (the training thread blocked on the next batch) and ``samples``
(``gpu.util_pct``: NVML's share of the last sample period in which a kernel ran) and ``devices``
(the GPUs the process uses). The GPU's own
records are kept raw until the merge, so GPU busy here is NVML's figure, not the run's.

The figures, per process, over its last :data:`RECENT_STEPS` steps: the median step time, and the
share of their span that input waits cover; per GPU, the mean ``gpu.util_pct`` over the last
:data:`RECENT_S` seconds of samples, for the GPUs the captured processes use (their ``devices``
rows, written with the GPU backend's flushes) once those are known, else every GPU sampled. :func:`hint` turns them into the top provisional finding.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

RECENT_STEPS = 20  # steps the step time and input-wait share are taken over
RECENT_S = 10.0  # seconds of GPU samples the busy figure is taken over
KEEP_ROWS = 4096  # rows kept per process and table (the recent ones): bounded memory
_PART = re.compile(r"p(\d+)-(\d+)$")
_CHUNK = re.compile(r"(steps|input_waits|samples|devices)\.[^.]*\d+\.parquet$")
BUSY_METRIC = "gpu.util_pct"

# thresholds of the provisional finding (the run's rules judge the whole capture at the end)
INPUT_WAIT_SHARE = 0.10  # input waits over this share of the recent steps' span
GPU_IDLE_BUSY_PCT = 60.0  # GPU busy under this while steps run


@dataclass(frozen=True)
class ProcessLive:
    """One captured process, so far."""

    pid: int
    rank: int | None
    steps: int  # step rows seen
    step_ms: float | None  # median of the last RECENT_STEPS steps
    last_step: int | None  # the step number of the latest step seen
    input_wait_share: float | None  # of the last RECENT_STEPS steps' span, 0..1


@dataclass(frozen=True)
class LiveSnapshot:
    """Everything the panel shows, as of ``chunks`` chunks read."""

    processes: tuple[ProcessLive, ...] = ()
    gpu_busy: tuple[tuple[int, float], ...] = ()  # (device, mean gpu.util_pct over RECENT_S)
    chunks: int = 0

    @property
    def empty(self) -> bool:
        return not self.processes and not self.gpu_busy


@dataclass
class _Rows:
    """The recent rows of one process's table (the feed's own, never shared)."""

    cols: dict[str, np.ndarray] = field(default_factory=dict)

    def add(self, new: dict[str, np.ndarray]) -> None:
        for k, v in new.items():
            old = self.cols.get(k)
            self.cols[k] = v[-KEEP_ROWS:] if old is None else np.concatenate([old, v])[-KEEP_ROWS:]


class LiveFeed:
    """Reads a staging folder incrementally: :meth:`poll` reads the chunks not read yet and returns
    the figures so far. Used by one thread (the live panel's); a chunk that cannot be read (gone:
    the merge has begun) is skipped."""

    def __init__(self, staging: Path) -> None:
        self.staging = staging
        self._seen: set[str] = set()
        self._tables: dict[tuple[str, str], _Rows] = {}
        self._ranks: dict[str, int | None] = {}

    def poll(self) -> LiveSnapshot:
        for part in sorted(self._partitions()):
            self._read_part(part)
        return self.snapshot()

    def _partitions(self) -> list[Path]:
        try:
            return [p for p in self.staging.iterdir() if p.is_dir() and _PART.match(p.name)]
        except OSError:
            return []

    def _read_part(self, part: Path) -> None:
        key = part.name
        if key not in self._ranks:  # read once, when its meta.json is there (a rank or None)
            found, rank = _rank(part)
            if found:
                self._ranks[key] = rank
        try:
            names = sorted(f.name for f in part.iterdir())
        except OSError:
            return
        for name in names:
            m = _CHUNK.match(name)
            path = f"{key}/{name}"
            if m is None or path in self._seen:
                continue
            self._seen.add(path)
            cols = _read(part / name, m.group(1))
            if cols:
                self._tables.setdefault((key, m.group(1)), _Rows()).add(cols)

    def snapshot(self) -> LiveSnapshot:
        procs = []
        for key in sorted({k for k, _ in self._tables}):
            pid = int(_PART.match(key).group(2))  # type: ignore[union-attr]
            steps = self._tables.get((key, "steps"))
            waits = self._tables.get((key, "input_waits"))
            procs.append(process_figures(pid, self._ranks.get(key),
                                         steps.cols if steps else {},
                                         waits.cols if waits else {}))
        samples = [r.cols for (_, t), r in self._tables.items() if t == "samples"]
        used = {int(d) for (_, t), r in self._tables.items() if t == "devices"
                for d in r.cols["device"].tolist()}
        busy = tuple(b for b in gpu_busy(samples) if not used or b[0] in used)
        procs = [p for p in procs if p.steps or p.input_wait_share is not None]
        return LiveSnapshot(processes=tuple(sorted(procs, key=_order)), gpu_busy=busy,
                            chunks=len(self._seen))


def _order(p: ProcessLive) -> tuple[int, int]:
    return (p.rank if p.rank is not None else 1 << 30, p.pid)


def _rank(part: Path) -> tuple[bool, int | None]:
    """(whether its ``meta.json`` was read, the process's ``env_rank`` or None)"""
    try:
        meta = json.loads((part / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False, None
    r = meta.get("env_rank") if isinstance(meta, dict) else None
    return True, r if isinstance(r, int) else None


_COLUMNS = {"steps": ("ts_ns", "dur_ns", "step"), "input_waits": ("ts_ns", "dur_ns"),
            "samples": ("ts_ns", "device", "metric", "value"), "devices": ("device",)}


def _read(path: Path, table: str) -> dict[str, np.ndarray]:
    """The columns the figures need of one chunk (rows without a time or duration dropped)."""
    try:
        # one thread, no read-ahead: a few small files every flush; Arrow's CPU and I/O pools
        # would wake threads in the recorder for them
        t = pq.read_table(path, columns=list(_COLUMNS[table]), use_threads=False,
                          pre_buffer=False)
    except (OSError, ValueError, KeyError, ImportError):
        return {}
    if table == "devices":
        return {"device": _ints(t.column("device").fill_null(-1))} if t.num_rows else {}
    if table == "samples":
        t = t.filter(_metric_is(t.column("metric"), BUSY_METRIC))
        if not t.num_rows:
            return {}
        dev = t.column("device").fill_null(-1)
        return {"ts_ns": _ints(t.column("ts_ns")), "device": _ints(dev),
                "value": np.asarray(t.column("value").to_numpy(zero_copy_only=False), float)}
    ok = np.ones(t.num_rows, dtype=bool)
    for c in ("ts_ns", "dur_ns"):
        ok &= ~np.asarray(t.column(c).is_null().to_numpy(zero_copy_only=False), dtype=bool)
    out = {c: _ints(t.column(c).fill_null(0))[ok] for c in _COLUMNS[table]}
    return out if len(out["ts_ns"]) else {}


def _metric_is(column: Any, value: str) -> Any:
    import pyarrow.compute as pc

    return pc.fill_null(pc.equal(column.cast("string"), value), False)


def _ints(column: Any) -> np.ndarray:
    return np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.int64)


def process_figures(pid: int, rank: int | None, steps: dict[str, np.ndarray],
                    waits: dict[str, np.ndarray]) -> ProcessLive:
    """One process's figures from its recent rows (see the module doc)."""
    ts = steps.get("ts_ns", np.empty(0, np.int64))
    if not len(ts):
        return ProcessLive(pid, rank, 0, None, None, None)
    order = np.argsort(ts, kind="stable")
    ts, dur, num = ts[order], steps["dur_ns"][order], steps["step"][order]
    ts, dur, num = ts[-RECENT_STEPS:], dur[-RECENT_STEPS:], num[-RECENT_STEPS:]
    lo, hi = int(ts[0]), int((ts + dur).max())
    share = None
    if hi > lo:
        share = covered(waits.get("ts_ns", np.empty(0, np.int64)),
                        waits.get("dur_ns", np.empty(0, np.int64)), lo, hi) / (hi - lo)
    return ProcessLive(pid, rank, steps=len(steps["ts_ns"]), step_ms=float(np.median(dur)) / 1e6,
                       last_step=int(num[-1]), input_wait_share=share)


def covered(ts: np.ndarray, dur: np.ndarray, lo: int, hi: int) -> int:
    """Nanoseconds of ``[lo, hi)`` covered by the union of the intervals ``[ts, ts + dur)``."""
    if not len(ts):
        return 0
    a = np.clip(ts, lo, hi)
    b = np.clip(ts + np.maximum(dur, 0), lo, hi)
    keep = b > a
    a, b = a[keep], b[keep]
    if not len(a):
        return 0
    order = np.argsort(a, kind="stable")
    a, b = a[order], np.maximum.accumulate(b[order])
    starts = np.concatenate([a[:1], np.maximum(a[1:], b[:-1])])
    return int(np.maximum(b - starts, 0).sum())


def gpu_busy(samples: list[dict[str, np.ndarray]]) -> tuple[tuple[int, float], ...]:
    """Per device, the mean ``gpu.util_pct`` over the last RECENT_S seconds of its samples
    (the samples of every process: a GPU sampled by two processes counts each sample once)."""
    if not samples:
        return ()
    ts = np.concatenate([s["ts_ns"] for s in samples])
    dev = np.concatenate([s["device"] for s in samples])
    val = np.concatenate([s["value"] for s in samples])
    out = []
    for d in np.unique(dev).tolist():
        mine = dev == d
        t, v = ts[mine], val[mine]
        _, first = np.unique(t, return_index=True)  # the same sample read twice
        t, v = t[first], v[first]
        recent = t >= t.max() - int(RECENT_S * 1e9)
        out.append((int(d), float(v[recent].mean())))
    return tuple(out)


@dataclass(frozen=True)
class Hint:
    """The top provisional finding: its topic (a rule id where one rule judges it at the end)
    and what the live numbers show."""

    topic: str
    text: str


def hint(snap: LiveSnapshot) -> Hint | None:
    """The top provisional finding from the live figures, or None when nothing stands out:
    the larger of the input-wait share and the GPU's idle share, each past its threshold."""
    cands: list[tuple[float, Hint]] = []
    shares = [p.input_wait_share for p in snap.processes if p.input_wait_share is not None]
    if shares and max(shares) >= INPUT_WAIT_SHARE:
        worst = max(shares)
        cands.append((worst, Hint("input_bound", f"the training thread waits for input "
                                                 f"{worst:.0%} of the recent steps' time")))
    busy = [b for _, b in snap.gpu_busy]
    if busy and any(p.steps for p in snap.processes) and min(busy) < GPU_IDLE_BUSY_PCT:
        low = min(busy)
        cands.append((1 - low / 100, Hint("gpu_idle", f"a GPU is busy only {low:.0f}% of the "
                                                      f"time (NVML, last {RECENT_S:g} s)")))
    if not cands:
        return None
    return max(cands, key=lambda c: c[0])[1]


__all__ = ["Hint", "LiveFeed", "LiveSnapshot", "ProcessLive", "covered", "gpu_busy", "hint",
           "process_figures"]
