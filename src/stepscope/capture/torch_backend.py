"""``--backend torch``: PyTorch's own profiler (Kineto) as the GPU capture.

Started and stopped with the capture window in the profiled process. At the end of the window its
Chrome trace is exported into the process's staging partition (``kineto.<x>.json``, written under
a temporary name and renamed); the merge reads it there (``capture.materialize``) with the
``TraceReader`` its caller gives: the Kineto importer's ``parse_kineto``, so the tables are the
same as ``stepscope import`` makes of the trace. Capture never imports the importers (the
layering is ``capture -> store <- importers``): the reader is injected where both are known
(``cli/record.py``, ``stepscope.record()``), and turning the trace into tables happens after the
program ended, as the ``cupti`` backend's raw records are decoded, not inside the window's end.

The program must have imported torch before the window opens (it always has, when the window is
opened by the optimizer-step hook). torch.profiler cannot hand over events mid-window: ``flush``
returns nothing and a process killed mid-window loses the window's GPU events (the CUPTI backend
does not). The trace's rows do not count toward the session's row cap (``max_rows``,
``capture.window_writer``): they are not known before the merge reads the trace (before the
trace was read at the merge, a window past the cap lost its GPU tables whole).

The ``devices`` table is made as for the other backends (``capture.devices``, by ``GpuSlot``):
the driver's rows for the GPUs the process used; at the merge, Kineto's ``deviceProperties`` row
of a GPU the trace's records used is added where the driver described none (``trace_tables``);
the other GPUs Kineto lists (every visible one) are dropped.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from stepscope.capture.cupti.native import Unavailable
from stepscope.store.manifest import Diagnostic
from stepscope.store.produce import TraceReader
from stepscope.store.produce.devices import choose, record_devices

TRACE_GLOB = "kineto.*.json"  # the exported traces in a staging partition
DROPPED = ("processes", "steps")  # the host capture's own (steps: the step hooks')


class TorchCapture:
    backend = "torch"

    def __init__(self, spill_dir: Path, cpu_ops: bool = True) -> None:
        """``spill_dir``: the staging partition the trace is exported into."""
        self.spill_dir = spill_dir
        self.cpu_ops = cpu_ops
        self._prof: Any = None
        self.export_s = 0.0

    def start(self) -> None:
        torch = sys.modules.get("torch")
        if torch is None:
            raise Unavailable("--backend torch: the program has not imported torch")
        prof = torch.profiler
        cuda = bool(getattr(torch, "cuda", None) and torch.cuda.is_available())
        acts = [prof.ProfilerActivity.CUDA] if cuda else []
        if self.cpu_ops or not cuda:
            acts.insert(0, prof.ProfilerActivity.CPU)
        with warnings.catch_warnings():  # the program's stderr stays the program's
            warnings.simplefilter("ignore")
            self._prof = prof.profile(activities=acts, record_shapes=False, with_stack=False)
            self._prof.start()

    def flush(self, forced: bool = False) -> dict[str, Any]:
        return {}

    def stop(self) -> dict[str, Any]:
        """Stop the profiler and export its trace into the staging partition; the tables come
        at the merge (module doc), so none are returned."""
        if self._prof is None:
            return {}
        prof, self._prof = self._prof, None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prof.stop()
        t0 = time.perf_counter()
        fd, tmp = tempfile.mkstemp(prefix="kineto.", suffix=".json.tmp", dir=self.spill_dir)
        os.close(fd)
        try:
            prof.export_chrome_trace(tmp)
            os.replace(tmp, tmp.removesuffix(".tmp"))
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        self.export_s = time.perf_counter() - t0
        return {}

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        return ()

    def settings_for_manifest(self) -> dict[str, Any]:
        return {"backend": self.backend, "cpu_ops": self.cpu_ops,
                "export_s": round(self.export_s, 4)}


def trace_tables(read: TraceReader, path: Path, staged_devices: dict[int, dict[str, Any]]
                 ) -> tuple[dict[str, Any], list[Diagnostic], int]:
    """An exported trace's tables for its partition (the host capture's own tables left out, and
    Kineto's ``devices`` rows only for the GPUs its records used that ``staged_devices``, the
    driver's rows, lack), the reader's warnings, and the trace's event count. A trace that
    cannot be read gives no tables and an error diagnostic."""
    try:
        bundle = read(path, default_rank=0)
    except Exception as exc:  # a trace cut short by a kill must not cost the rest of the run
        return {}, [Diagnostic("error", "torch_trace_unreadable", f"the torch backend's trace "
                               f"could not be read ({exc}): its GPU records are missing")], 0
    tables = {k: v for k, v in bundle.tables.items() if k not in (*DROPPED, "devices")}
    used = record_devices(bundle.tables) - set(staged_devices)
    extra = choose({}, bundle.tables.get("devices"), used)
    if extra is not None:
        tables["devices"] = extra
    diags = [d for d in bundle.diagnostics if d.level != "info"]
    return tables, diags, int(bundle.details.get("events") or 0)


__all__ = ["TRACE_GLOB", "TorchCapture", "trace_tables"]
