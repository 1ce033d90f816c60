"""Host callbacks inside a compiled step: where the device's program calls back into Python.

XLA runs a host callback (``jax.debug.callback``, ``jax.debug.print``, ``jax.pure_callback``,
``io_callback``) as a thunk of the step, inline on the thread that executes it: the thunk copies
its operands to the host, waits for the copy, runs the Python function and only then does the
thread launch the rest of the step, so the GPU has nothing queued meanwhile. The thunk is
annotated after its HLO op: ``debug_callback.1`` (``jax.profiler``'s TraceMe) or
``Thunk:#name=.../debug_callback,hlo_op=debug_callback.1,...#`` (XLA's NVTX ranges in a
recording). The idle split (``model.idle``) gives the GPU idle time inside these ranges to the
host work it is, not to the copy's sync and what follows it, and the thunk's own copies (its
operands to the host, its results back) to the callback too: XLA allocates their host buffers,
so pinning (``pageable_memcpy``) is no fix the user can make, and removing the callback removes
them.
"""

from __future__ import annotations

import re

import numpy as np
import numpy.typing as npt

from stepscope.analysis import intervals as iv
from stepscope.analysis.busy import IntervalSet
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.intervals import I64
from stepscope.analysis.steps import work_annotations

CALLBACK_OP = re.compile(
    r"(?:^|[=/#\s])(?:debug_callback|pure_callback|io_callback|host_callback|"
    r"xla_(?:ffi_)?python_[cg]pu_callback)(?:\.\d+)?(?=$|[,#\s])")


def is_callback(name: str) -> bool:
    """An annotation naming an XLA host-callback thunk (module doc)."""
    return bool(CALLBACK_OP.search(name))


def callback_intervals(g: StepGraph) -> tuple[I64, I64]:
    """Start and end (ns) of the host-callback thunk ranges of the rank."""
    ann = work_annotations(g)
    if ann.num_rows == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    names = ann.column("name").to_pylist()
    hit = {n: is_callback(str(n)) for n in set(names)}
    keep = np.array([hit[n] for n in names], dtype=bool)
    ts = np.asarray(ann.column("ts_ns").to_numpy(zero_copy_only=False), dtype=np.int64)[keep]
    dur = np.asarray(ann.column("dur_ns").to_numpy(zero_copy_only=False), dtype=np.int64)[keep]
    return ts, ts + dur


def callback_set(g: StepGraph) -> IntervalSet:
    """The host-callback thunk ranges of the rank, merged."""
    return IntervalSet.of(*callback_intervals(g))


def inside_callbacks(g: StepGraph, ts: I64) -> npt.NDArray[np.bool_]:
    """Per time: whether it falls inside a host-callback thunk range of the rank."""
    cb = callback_set(g)
    return iv.assign_to_windows(np.asarray(ts, dtype=np.int64), cb.starts, cb.ends) >= 0


__all__ = ["CALLBACK_OP", "callback_intervals", "callback_set", "inside_callbacks",
           "is_callback"]
