"""Step detection: where each rank's steps come from, and their windows on the GPU timeline.

Where steps come from, first match wins (per rank):

1. the ``steps`` table (Kineto ``ProfilerStep#N``, capture hooks, ``stepscope.step()``);
2. host annotations (NVTX / record_function / TraceMe) whose name looks like a
   step (:data:`STEP_NAME`) and that repeat at least twice at one nesting level;
3. periodicity of the kernel stream (``analysis.periodicity``);
4. otherwise the whole trace is one step.

Which steps are steady state (the means use those): ``analysis.steady``.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.analysis.graph import StepGraph
from stepscope.analysis.intervals import I64
from stepscope.analysis.periodicity import no_step_hook, periodic_steps
from stepscope.analysis.steady import Step, StepInfo, make_step_info, select_steady
from stepscope.schema_enums import AnnotationSource, StepSource

STEP_NAME = re.compile(
    r"^(profilerstep#\d+|(train(ing)?[_ ]?)?step([#_ :-]*\d+)?|train|iteration([#_ :-]*\d+)?|"
    r"iter([#_ :-]*\d+)?|batch([#_ :-]*\d+)?)$",
    re.IGNORECASE,
)
LAG_SHARE = 0.10


def work_annotations(g: StepGraph) -> pa.Table:
    """The rank's user and NVTX annotations that are not step markers (``STEP_NAME``): what
    they name is work the host did; a step marker spans the whole step and says nothing."""
    ann = g.table("annotations")
    if ann.num_rows == 0:
        return ann
    src = ann.column("source").cast(pa.string())
    ann = ann.filter(pc.is_in(src, pa.array([AnnotationSource.USER.value,
                                             AnnotationSource.NVTX.value])))
    names = ann.column("name").cast(pa.string()).to_pylist()
    step_like = {n: bool(STEP_NAME.match(n.strip())) for n in set(names)}
    return ann.filter(pa.array([not step_like[n] for n in names], type=pa.bool_()))


def _disjoint(starts: I64, ends: I64, numbers: I64) -> tuple[I64, I64, I64]:
    """Sort by start and clip each step's end to the next step's start."""
    order = np.argsort(starts, kind="stable")
    s, e, n = starts[order], ends[order], numbers[order]
    if s.size > 1:
        e = np.minimum(e, np.append(s[1:], np.iinfo(np.int64).max))
    keep = e > s
    return s[keep], e[keep], n[keep]


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
    return make_step_info(g.rank_id, src, s, e, n, f"{s.size} {_marker_phrase(g, src, names)}")


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
    hook = "; no step hook fired" if no_step_hook(g) else ""
    return make_step_info(g.rank_id, src, s, e, nums, f"{s.size} from {how} named like {label!r}{hook}")


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
              if no_step_hook(g) else
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
                    anchored=True, work=info.work)
