"""Step detection and steady-state selection.

Where steps come from, first match wins (per rank):

1. the ``steps`` table (Kineto ``ProfilerStep#N``, capture hooks, ``stepscope.step()``);
2. host annotations (NVTX / record_function / TraceMe) whose name looks like a
   step (:data:`STEP_NAME`) and that repeat at least twice at one nesting level;
3. periodicity of the kernel stream (:func:`periodic_steps`): the kernel-name
   sequence of a training loop repeats with the step; the period is the lag
   ``p`` maximising the match rate ``mean(seq[i] == seq[i+p])`` (smallest
   such lag within 2% of the best, and at least 90% matching); boundaries are
   placed before the kernel phase preceded by the longest median GPU gap
   (the period is found in the first :data:`MAX_PERIODIC_KERNELS` kernels and
   continued over the rest); a period shorter than :data:`MIN_PERIODIC_STEP_NS`
   (2 ms: one op of an eager loop, whose step no marker shows) is grouped into
   steps of whole periods at least that long, and the detail says so;
4. otherwise the whole trace is one step.

Steady state: the first step is dropped as warm-up when it is more than 25%
longer than the median of the others (and at least 3 steps exist); a step is an
outlier when ``|wall - median| > max(0.25 * median, min(5 * 1.4826 * MAD, 0.5 * median))``
(the MAD term alone breaks down when a few steps hold two bad ones, e.g. a kernel
the profiler dropped at the window's start). Slow steps are outliers only while rare: when
at least 3 of them make more than a quarter of the steps, the slowness recurs (12 of 28
steps waiting 140-640 ms for the DataLoader) and is what the loop costs, so they stay
steady (fast outliers are still left out). Both are reported, never silently hidden.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.analysis.graph import StepGraph
from stepscope.analysis.intervals import I64
from stepscope.schema import AnnotationSource, StepSource

STEP_NAME = re.compile(
    r"^(profilerstep#\d+|(train(ing)?[_ ]?)?step([#_ :-]*\d+)?|train|iteration([#_ :-]*\d+)?|"
    r"iter([#_ :-]*\d+)?|batch([#_ :-]*\d+)?)$",
    re.IGNORECASE,
)
MIN_PERIOD_MATCH = 0.90
LAG_SHARE = 0.10
MAX_PERIODIC_KERNELS = 200_000
# slow steps are outliers only while rare: at least this many, more than this share of the
# steps (after a warm-up), recur (a DataLoader stall every other step) and stay in
RECURRING_MIN = 3
RECURRING_SHARE = 0.25
# a kernel-stream period shorter than this is one op of an eager loop, not a training step: the
# periods are grouped into steps at least this long (percentages are unchanged; per-step
# figures then mean per group)
MIN_PERIODIC_STEP_NS = 2_000_000


@dataclass(frozen=True)
class Step:
    """One step. ``start_ns/end_ns`` are the source's markers (host side for ProfilerStep,
    NVTX, hooks); ``window_start_ns/window_end_ns`` are the step on the GPU timeline
    (:func:`anchor_to_gpu`), which the breakdown slices and the step time measures."""

    index: int  # 0-based position in this rank's step list
    number: int  # step number as the source numbers it
    start_ns: int
    end_ns: int
    steady: bool
    note: str = ""  # why a step is not steady
    window_start_ns: int = -1  # -1: same as the markers
    window_end_ns: int = -1

    @property
    def wall_ns(self) -> int:
        """The marker's duration."""
        return self.end_ns - self.start_ns

    @property
    def window(self) -> tuple[int, int]:
        if self.window_start_ns < 0:
            return self.start_ns, self.end_ns
        return self.window_start_ns, self.window_end_ns

    @property
    def span_ns(self) -> int:
        """The step's length on the timeline window: what the breakdown adds up to."""
        a, b = self.window
        return b - a


@dataclass(frozen=True)
class StepInfo:
    rank: int
    source: str  # StepSource value
    steps: tuple[Step, ...]
    detail: str = ""  # how they were found, one line starting with the count ("48 from ...")

    anchored: bool = False  # windows moved onto the GPU timeline

    @property
    def starts(self) -> I64:
        """Marker starts (host side): assign host events to steps with these."""
        return np.array([s.start_ns for s in self.steps], dtype=np.int64)

    @property
    def ends(self) -> I64:
        return np.array([s.end_ns for s in self.steps], dtype=np.int64)

    @property
    def window_starts(self) -> I64:
        """Timeline windows (GPU-anchored when possible): slice the timeline with these."""
        return np.array([s.window[0] for s in self.steps], dtype=np.int64)

    @property
    def window_ends(self) -> I64:
        return np.array([s.window[1] for s in self.steps], dtype=np.int64)

    @property
    def steady(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.steady)

    @property
    def walls_ns(self) -> I64:
        return np.array([s.wall_ns for s in self.steps], dtype=np.int64)

    @property
    def spans_ns(self) -> I64:
        return np.array([s.span_ns for s in self.steps], dtype=np.int64)


def _disjoint(starts: I64, ends: I64, numbers: I64) -> tuple[I64, I64, I64]:
    """Sort by start and clip each step's end to the next step's start."""
    order = np.argsort(starts, kind="stable")
    s, e, n = starts[order], ends[order], numbers[order]
    if s.size > 1:
        e = np.minimum(e, np.append(s[1:], np.iinfo(np.int64).max))
    keep = e > s
    return s[keep], e[keep], n[keep]


def select_steady(walls: I64) -> tuple[tuple[bool, ...], tuple[str, ...]]:
    """Which steps are steady state, and a note for each that is not (module doc)."""
    n = walls.size
    steady = np.ones(n, dtype=bool)
    notes = [""] * n
    if n >= 3:
        rest = np.median(walls[1:])
        if walls[0] > 1.25 * rest:
            steady[0] = False
            notes[0] = f"warm-up: {walls[0] / rest:.2f}x the median of the other steps"
    if n >= 4:
        cand = walls[steady]
        med = float(np.median(cand))
        mad = float(np.median(np.abs(cand - med)))
        # the MAD is robust only while most steps are normal: with few steps and two bad
        # ones it grows huge, so a step off the median by more than half is always out
        limit = max(0.25 * med, min(5 * 1.4826 * mad, 0.5 * med))
        out = steady & (np.abs(walls - med) > limit)
        slow = out & (walls > med)
        if slow.sum() >= RECURRING_MIN and slow.sum() > RECURRING_SHARE * cand.size:
            out &= ~slow  # slow steps that recur are the workload's steady state, not outliers
        for i in np.flatnonzero(out).tolist():
            steady[i] = False
            notes[i] = f"outlier: {walls[i] / med:.2f}x the median step"
    if not steady.any():
        steady[:] = True
        notes = [""] * n
    return tuple(bool(x) for x in steady), tuple(notes)


def _make(rank: int, source: StepSource, s: I64, e: I64, n: I64, detail: str) -> StepInfo:
    steady, notes = select_steady(e - s)
    steps = tuple(
        Step(index=i, number=int(n[i]), start_ns=int(s[i]), end_ns=int(e[i]),
             steady=steady[i], note=notes[i])
        for i in range(s.size)
    )
    return StepInfo(rank=rank, source=source.value, steps=steps, detail=detail)


def _from_steps_table(g: StepGraph) -> StepInfo | None:
    t = g.table("steps")
    if t.num_rows == 0:
        return None
    s = t.column("ts_ns").to_numpy()
    e = s + t.column("dur_ns").to_numpy()
    n = t.column("step").to_numpy()
    srcs = t.column("source").cast(pa.string()).to_pylist()
    src = StepSource(srcs[0]) if srcs and srcs[0] else StepSource.PROFILER_STEP
    s, e, n = _disjoint(s, e, n)
    names = [x for x in t.column("name").cast(pa.string()).to_pylist() if x]
    return _make(g.rank_id, src, s, e, n, f"{s.size} {_marker_phrase(g, src, names)}")


def _marker_phrase(g: StepGraph, src: StepSource, names: list[str]) -> str:
    """Where a steps table's rows came from, after their count ("48 from ...")."""
    if src is StepSource.PROFILER_STEP:
        return "from the trace's ProfilerStep markers"
    if src is StepSource.HOOK:
        hook = _setting(g, "host", "samplers", "steps", "hook")
        return (f"from the {hook} hook" if hook else
                "from a step hook (optimizer, Lightning, Hugging Face, Keras)")
    if src is StepSource.MANUAL:
        return "from stepscope.step() calls"
    if src is StepSource.NVTX:
        return f"from the NVTX ranges named {names[0]!r}" if names else "from NVTX ranges"
    label = f" ({names[0]!r})" if names else ""
    return f"from the trace's {src.value} markers{label}"


def _setting(g: StepGraph, *keys: str) -> str:
    """A string in the recorded rank's settings (``settings["ranks"]["rank<N>"][...]``)."""
    node: object = (g.manifest.settings or {}).get("ranks")
    for k in (f"rank{g.rank_id}", *keys):
        node = node.get(k) if isinstance(node, dict) else None
    return node if isinstance(node, str) else ""


def _no_hook(g: StepGraph) -> bool:
    """A recorded rank whose steps table is empty: no step hook fired in its window."""
    return g.source_kind == "capture" and g.table("steps").num_rows == 0


def _from_annotations(g: StepGraph) -> StepInfo | None:
    t = g.table("annotations")
    if t.num_rows == 0:
        return None
    t = t.filter(pc.is_in(t.column("source").cast(pa.string()),
                          pa.array([AnnotationSource.USER.value, AnnotationSource.NVTX.value])))
    names = t.column("name").cast(pa.string()).to_pylist()
    uniq = {nm: bool(STEP_NAME.match(nm.strip())) for nm in set(names)}
    mask = np.array([uniq[nm] for nm in names], dtype=bool)
    if mask.sum() < 2:
        return None
    t = t.filter(pa.array(mask))
    depth = t.column("depth").fill_null(0).to_numpy()
    t = t.filter(pa.array(depth == depth.min()))  # outermost matching level
    if t.num_rows < 2:
        return None
    s = t.column("ts_ns").to_numpy()
    e = s + t.column("dur_ns").to_numpy()
    nums = np.arange(t.num_rows, dtype=np.int64)
    sources = set(t.column("source").cast(pa.string()).to_pylist())
    src = StepSource.NVTX if sources == {AnnotationSource.NVTX.value} else StepSource.ANNOTATION
    s, e, nums = _disjoint(s, e, nums)
    label = min(set(t.column("name").cast(pa.string()).to_pylist()))
    how = "NVTX ranges" if src is StepSource.NVTX else "annotations"
    hook = "; no step hook fired" if _no_hook(g) else ""
    return _make(g.rank_id, src, s, e, nums, f"{s.size} from {how} named like {label!r}{hook}")


def find_period(seq: np.ndarray) -> tuple[int, float]:
    """Best repeating lag of an integer sequence: ``(period, match_rate)``; (0, 0) if none."""
    n = seq.size
    if n < 4:
        return 0, 0.0
    max_lag = n // 2
    # lags where a kernel name reappears are the only candidates worth testing
    first_pos: dict[int, int] = {}
    cand: set[int] = set()
    for i, v in enumerate(seq[: min(n, 5000)].tolist()):
        if v in first_pos:
            lag = i - first_pos[v]
            if 0 < lag <= max_lag:
                cand.add(lag)
        else:
            first_pos[v] = i
    # also multiples of small candidates are covered since we test all reappearance lags of
    # every kernel's first occurrence; add lags of second occurrences for robustness
    best_p, best_m = 0, 0.0
    rates: dict[int, float] = {}
    for p in sorted(cand):
        m = float(np.mean(seq[:-p] == seq[p:]))
        rates[p] = m
        if m > best_m:
            best_p, best_m = p, m
    if best_m < MIN_PERIOD_MATCH:
        return 0, best_m
    for p in sorted(rates):  # smallest lag close to the best
        if rates[p] >= best_m - 0.02:
            return p, rates[p]
    return best_p, best_m


def periodic_steps(g: StepGraph) -> StepInfo | None:
    full = g.table("kernels")
    if full.num_rows < 8:
        return None
    full = full.sort_by([("ts_ns", "ascending")])
    k = full.slice(0, MAX_PERIODIC_KERNELS) if full.num_rows > MAX_PERIODIC_KERNELS else full
    names = k.column("name")
    if isinstance(names, pa.ChunkedArray):
        names = names.combine_chunks()
    codes = pc.dictionary_encode(names.cast(pa.string())).indices.to_numpy(zero_copy_only=False)
    p, rate = find_period(codes.astype(np.int64))
    if p == 0 or k.num_rows // p < 2:
        return None
    ts = k.column("ts_ns").to_numpy()
    end = ts + k.column("dur_ns").to_numpy()
    gap_before = np.empty_like(ts)
    gap_before[0] = 0
    gap_before[1:] = ts[1:] - np.maximum.accumulate(end)[:-1]
    phases = np.arange(ts.size) % p
    med = np.array([np.median(gap_before[phases == j]) for j in range(p)])
    phase = int(np.argmax(med))
    all_ts = full.column("ts_ns").to_numpy()  # the period found in the first kernels goes on
    idx = np.arange(phase, all_ts.size, p)
    if idx.size < 2:
        return None
    period_ns = float(np.median(np.diff(all_ts[idx])))
    group = 1
    if 0 < period_ns < MIN_PERIODIC_STEP_NS:  # an eager loop of tiny ops: one op is a period
        group = int(np.ceil(MIN_PERIODIC_STEP_NS / period_ns))
        if idx.size // group >= 2:
            idx = idx[::group]
        else:
            group = 1
    s = all_ts[idx[:-1]]
    e = all_ts[idx[1:]]
    nums = np.arange(s.size, dtype=np.int64)
    hook = "no step hook fired; " if _no_hook(g) else ""
    if group > 1:
        detail = (f"{s.size} recovered from the periodicity of the GPU work ({hook}the kernel "
                  f"stream repeats every {p} kernels, {period_ns / 1e3:.3g} µs: {group} periods "
                  f"per step, about {group * period_ns / 1e6:.3g} ms; {rate:.0%} of kernels "
                  "repeat)")
    else:
        detail = (f"{s.size} recovered from the periodicity of the GPU work ({hook}{p} kernels "
                  f"per step, {rate:.0%} of kernels repeat)")
    return _make(g.rank_id, StepSource.PERIODICITY, s, e, nums, detail)


def _whole_trace(g: StepGraph) -> StepInfo:
    lo, hi = None, None
    for name in ("kernels", "memcpy", "memset", "api_calls", "cpu_ops", "annotations"):
        t = g.table(name)
        if t.num_rows == 0:
            continue
        s = t.column("ts_ns").to_numpy()
        e = s + t.column("dur_ns").to_numpy()
        lo = int(s.min()) if lo is None else min(lo, int(s.min()))
        hi = int(e.max()) if hi is None else max(hi, int(e.max()))
    if lo is None or hi is None or hi <= lo:
        return StepInfo(rank=g.rank_id, source=StepSource.WHOLE_TRACE.value, steps=(),
                        detail="none: the run has no timed events")
    step = Step(index=0, number=0, start_ns=lo, end_ns=hi, steady=True)
    gpu = ("the GPU work does not repeat" if g.table("kernels").num_rows
           else "no GPU work to find steps in")
    detail = (f"1: no step hook fired and {gpu}, so the whole window is one step"
              if _no_hook(g) else
              "1: no step markers and no repeating kernel pattern, so the whole trace is one step")
    return StepInfo(rank=g.rank_id, source=StepSource.WHOLE_TRACE.value, steps=(step,), detail=detail)


def detect_steps(g: StepGraph) -> StepInfo:
    """Steps of one rank (see the module docstring for the order of sources)."""
    for finder in (_from_steps_table, _from_annotations):
        info = finder(g)
        if info is not None and info.steps:
            return anchor_to_gpu(g, info)
    info = periodic_steps(g)  # already on the GPU timeline
    if info is not None and info.steps:
        return info
    return _whole_trace(g)


def anchor_to_gpu(g: StepGraph, info: StepInfo) -> StepInfo:
    """Move host-marked steps onto the GPU timeline.

    The host may run ahead of the GPU (no sync in the loop): its markers then cover
    only the time to *issue* the work, and slicing the timeline with them would miss
    the GPU work of the step. GPU work belongs to the step whose marker range
    ``[start_i, start_{i+1})`` contains its launching call (``busy.issued_ns``).
    Window ``i`` starts at the first GPU activity issued by step ``i`` and ends where
    step ``i+1``'s starts; the last window ends at the later of its last GPU activity
    and its start plus the marker's duration. Steps that issued no GPU work keep their
    markers, and so does the whole rank unless every step issued GPU work (windows
    must stay ordered and disjoint) and the GPU lags: the work of a step typically
    ends more than :data:`LAG_SHARE` of a step after its marker (otherwise the markers
    already contain their GPU work and are kept as they are).
    """
    steps = info.steps
    if not steps:
        return info
    gpu = g.gpu
    if gpu.size == 0:
        return info
    issued = g.issued_ns
    ts, end = gpu.start, gpu.end
    starts = info.starts
    bounds_hi = np.append(starts[1:], info.ends[-1])
    slot = np.searchsorted(starts, issued, side="right") - 1
    ok = (slot >= 0) & (issued < bounds_hi[np.maximum(slot, 0)])
    n = len(steps)
    first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(first, slot[ok], ts[ok])
    np.maximum.at(last, slot[ok], end[ok])
    if (first == np.iinfo(np.int64).max).any():
        return info
    if n > 1 and (np.diff(first) <= 0).any():
        return info
    # Only when the GPU lags: the work a step issued typically ends after its marker by
    # more than a tenth of a step. Otherwise the markers already hold their GPU work.
    lag = last - info.ends
    if float(np.median(lag)) <= LAG_SHARE * float(np.median(info.walls_ns)):
        return info
    tail = int(first[-1]) + steps[-1].wall_ns
    w_end = np.append(first[1:], max(int(last[-1]), tail))
    spans = w_end - first
    # When the GPU finished the last step's work before the host could have issued the
    # next step, the last window's end is the marker-based guess: what fills its tail
    # (the next step's host prologue) was not traced. Keep such a step out of the means.
    guessed = n >= 3 and tail > int(last[-1])
    steady, notes = select_steady(spans[:-1] if guessed else spans)
    if guessed:
        steady += (False,)
        notes += ("last step: the end of its window was not observed",)
    new = tuple(Step(index=s.index, number=s.number, start_ns=s.start_ns, end_ns=s.end_ns,
                     steady=steady[i], note=notes[i], window_start_ns=int(first[i]),
                     window_end_ns=int(w_end[i]))
                for i, s in enumerate(steps))
    return StepInfo(rank=info.rank, source=info.source, steps=new,
                    detail=info.detail + "; windows anchored to the GPU work each step issued",
                    anchored=True)
