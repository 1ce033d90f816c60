"""``--backend torch``: PyTorch's own profiler (Kineto) as the GPU capture.

Started and stopped with the capture window in the profiled process; at the end of the window
its Chrome trace is written to a temporary file and read back through the Kineto importer, so
the tables are the same as ``stepscope import`` would make of it. The program must have imported
torch before the window opens (it always has, when the window is opened by the optimizer-step
hook). torch.profiler cannot hand over events mid-window: ``flush`` returns nothing and a process
killed mid-window loses the window's GPU events (the CUPTI backend does not).

The ``devices`` table is made as for the other backends (``capture.devices``, by ``GpuSlot``):
the driver's rows for the GPUs the process used replace Kineto's ``deviceProperties`` (which
lists every visible GPU and has no clocks, bandwidth or L2); Kineto's row of a used GPU stays
where the driver cannot describe it.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import warnings
from typing import Any

from stepscope.capture.cupti.native import Unavailable
from stepscope.store.manifest import Diagnostic


class TorchCapture:
    backend = "torch"

    def __init__(self, cpu_ops: bool = True) -> None:
        self.cpu_ops = cpu_ops
        self._prof: Any = None
        self._diags: list[Diagnostic] = []
        self.decode_s = 0.0
        self.events = 0

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
        if self._prof is None:
            return {}
        from stepscope.importers.kineto import parse_kineto

        prof, self._prof = self._prof, None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prof.stop()
        t0 = time.perf_counter()
        fd, path = tempfile.mkstemp(prefix="stepscope-kineto-", suffix=".json")
        os.close(fd)
        try:
            prof.export_chrome_trace(path)
            parsed = parse_kineto(path, default_rank=0)
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass
        self._diags.extend(d for d in parsed.diagnostics if d.level != "info")
        self.events = int(parsed.details.get("events") or 0)
        self.decode_s = time.perf_counter() - t0
        return {k: v for k, v in parsed.tables.items() if k not in ("processes", "steps")}

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        return tuple(self._diags)

    def settings_for_manifest(self) -> dict[str, Any]:
        return {"backend": self.backend, "cpu_ops": self.cpu_ops, "events": self.events,
                "export_and_import_s": round(self.decode_s, 4)}
