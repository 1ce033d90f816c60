"""Host time of a rank's steps, and what the samples and stacks recorded during it say: what
the host-side rules (``host_bound``, ``input_bound``) measure."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stepscope.analysis import RankAnalysis
from stepscope.analysis import intervals as iv
from stepscope.analysis.busy import IntervalSet
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.input import input_wait_intervals
from stepscope.analysis.intervals import I64
from stepscope.analysis.launches import column_i64, column_str

LIBRARY_PATHS = ("site-packages/", "dist-packages/", "/lib/python3", "<frozen", "<string>")
TOP_FRAMES = 3


@dataclass(frozen=True)
class HostTime:
    """Host time of one rank's steady steps (module docstring)."""

    rank: int
    step_index: tuple[int, ...]  # the steady steps' indexes
    win_start: I64
    win_end: I64
    input_ns: I64  # per steady step
    host_ns: I64  # per steady step: wall - input

    @property
    def n(self) -> int:
        return len(self.step_index)

    @property
    def wall_ns(self) -> I64:
        return self.win_end - self.win_start

    def mean_ms(self, per: I64) -> float:
        return float(per.mean()) / 1e6 if per.size else 0.0


def host_time(g: StepGraph, ra: RankAnalysis) -> HostTime:
    steady = ra.steps.steady
    ws = np.array([s.window[0] for s in steady], dtype=np.int64)
    we = np.array([s.window[1] for s in steady], dtype=np.int64)
    waits = IntervalSet.of(*input_wait_intervals(g))
    inp = waits.within(ws, we)
    return HostTime(rank=ra.rank, step_index=tuple(s.index for s in steady), win_start=ws,
                    win_end=we, input_ns=inp, host_ns=(we - ws) - inp)


def mean_sample(g: StepGraph, metric: str, win_start: I64, win_end: I64
                ) -> tuple[float, int] | None:
    """Mean of a (device-less) metric over its samples inside the windows, and their count."""
    t = g.table("samples")
    if t.num_rows == 0 or win_start.size == 0:
        return None
    names = np.array(column_str(t, "metric").to_pylist(), dtype=object)
    m = names == metric
    if not m.any():
        return None
    ts = column_i64(t, "ts_ns", 0)[m]
    vals = np.asarray(t.column("value").to_numpy(), dtype=np.float64)[m]
    inside = iv.assign_to_windows(ts, win_start, win_end) >= 0
    if not inside.any():
        return None
    return float(vals[inside].mean()), int(inside.sum())


def _user_frame(frames: str) -> str | None:
    """The innermost frame of a stack (innermost-last lines) outside libraries, shortened to
    ``file:line function``."""
    for line in reversed(frames.splitlines()):
        path = line.split(" ", 1)[0].replace("\\", "/")
        if not line.strip() or any(p in path for p in LIBRARY_PATHS):
            continue
        short = line.rsplit("/", 1)[-1]
        return short.strip()
    return None


def stack_frames(g: StepGraph, s: IntervalSet) -> tuple[list[tuple[str, int]], int]:
    """The innermost user frames of the stacks sampled inside ``s`` on the thread sampled
    most there: ``[(frame, samples)]`` largest first (at most :data:`TOP_FRAMES`), and the
    number of samples of that thread inside ``s``."""
    t = g.table("stacks")
    if t.num_rows == 0 or s.starts.size == 0:
        return [], 0
    ts = column_i64(t, "ts_ns", 0)
    inside = iv.assign_to_windows(ts, s.starts, s.ends) >= 0
    if not inside.any():
        return [], 0
    tid = column_i64(t, "tid", -1)
    tids, counts = np.unique(tid[inside], return_counts=True)
    main = int(tids[int(np.argmax(counts))])
    rows = np.flatnonzero(inside & (tid == main))
    frames = column_str(t, "frames").take(rows.tolist()).to_pylist()
    seen = Counter(f for f in (_user_frame(str(x or "")) for x in frames) if f)
    top = sorted(seen.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_FRAMES]
    return top, int(rows.size)


def window_samples(g: StepGraph, sets: Sequence[IntervalSet], metrics: Sequence[str]
                   ) -> dict[str, float]:
    """Mean of each of ``metrics`` over the samples inside the first of ``sets`` that has any."""
    t = g.table("samples")
    if t.num_rows == 0:
        return {}
    ts = column_i64(t, "ts_ns", 0)
    names = np.array(column_str(t, "metric").to_pylist(), dtype=object)
    vals = np.asarray(t.column("value").to_numpy(), dtype=np.float64)
    for s in sets:
        if s.starts.size == 0:
            continue
        m = iv.assign_to_windows(ts, s.starts, s.ends) >= 0
        if not m.any():
            continue
        out = {}
        for metric in metrics:
            mm = m & (names == metric)
            if mm.any():
                out[metric] = float(vals[mm].mean())
        if out:
            return out
    return {}
