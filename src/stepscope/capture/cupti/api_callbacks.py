"""Runtime/driver call records through CUPTI's Callback API, for the calls that matter only.

CUPTI's RUNTIME and DRIVER activity kinds hook every call of their domain, also the calls whose
records are switched off one by one. The Callback API is switched on call by call
(``cuptiEnableCallback``), so only the kept calls (``CallPlan``: launches, syncs, copies,
memsets, allocations) pass through CUPTI's hook. Measured on the H100 (CUPTI 13.0.85,
docs/benchmarks.md, 2026-11-25 fifth session): the records are the same (every kernel linked
to its launch, the same calls, threads and durations), and the GPT step's capture, without
CUPTI's synchronization records too (``GpuSettings.sync``), cost x1.03-1.04 instead of
x1.18-1.19.

The shim's ``ss_callback`` times each call with ``cuptiGetTimestamp`` (the clock of CUPTI's own
records) and writes a record laid out as CUPTI's ``CUpti_ActivityAPI`` into the same buffers as
the activity records, so the rest of the capture (spill, decode, merge) takes them as it takes
CUPTI's. The correlation id is CUPTI's (the callback's ``correlationId``), the one the kernels,
copies and memsets carry. A driver call made inside a recorded runtime call on the same thread
(the runtime's own ``cuLaunchKernel``) is not written (``keep_nested`` False): its GPU records
carry the runtime call's id. The shim counts those calls, and those whose id was not their
runtime call's (``api_nested_driver_calls``, ``api_nested_other_correlation``: a GPU check of
that premise, in the manifest).

CUPTI allows one subscriber per process. The subscription made here is handed to the detach
at the end of the capture (``detach.arm``), whose callback is the same ``ss_callback``.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

from stepscope.call_kinds import classify_api
from stepscope.capture.cupti.api_calls import CallPlan
from stepscope.capture.cupti.native import gil_held
from stepscope.schema_enums import ApiKind

NEEDED = ("cuptiSubscribe", "cuptiUnsubscribe", "cuptiEnableCallback", "cuptiEnableDomain",
          "cuptiGetTimestamp")


class ApiCallbacks:
    """Start and stop the call records of the given domains; ``subscriber`` is the handle
    while subscribed (handed to the detach, or unsubscribed, by the capture)."""

    def __init__(self, lib: Any, shim: ctypes.CDLL, keep_nested: bool = False) -> None:
        self.lib, self.shim, self.keep_nested = lib, shim, keep_nested
        self.subscriber: ctypes.c_void_p | None = None
        self.domains: list[int] = []
        self.kept = 0
        self.failed = 0  # calls whose callback CUPTI would not switch on: no records of them
        self.shared = False  # cuptiSubscribe refused: another CUPTI client holds this process
        self._base = self._raw()

    def start(self, plan: CallPlan, domains: list[int]) -> str | None:
        """Subscribe and switch the kept calls' callbacks on. None when recording, else why not
        (the caller then records through the activity kinds)."""
        missing = [n for n in NEEDED if getattr(self.lib, n, None) is None]
        if missing:
            return f"this libcupti lacks {', '.join(missing)}"
        sub = ctypes.c_void_p()
        subscribe, enable = gil_held(self.lib.cuptiSubscribe), gil_held(self.lib.cuptiEnableCallback)
        rc = subscribe(ctypes.byref(sub), ctypes.cast(self.shim.ss_callback,
                                                                    ctypes.c_void_p), None)
        if rc != 0:
            self.shared = True
            return f"cuptiSubscribe failed with {rc} (another CUPTI client in this process?)"
        self.subscriber = sub
        self.shim.ss_api_begin(ctypes.cast(self.lib.cuptiGetTimestamp, ctypes.c_void_p),
                               os.getpid() & 0xFFFFFFFF, int(self.keep_nested))
        for domain in domains:
            kept, _ = plan.plan(domain)
            names = plan.names.get(domain, {})
            for cbid in kept:
                if classify_api(names.get(cbid, "")) is ApiKind.GRAPH_LAUNCH:
                    self.shim.ss_api_mark_graph(domain, cbid)  # counted: see detach
                if enable(1, sub, domain, cbid) == 0:
                    self.kept += 1
                else:
                    self.failed += 1
            self.domains.append(domain)
        if self.failed and not self.kept:
            self.stop()
            self.unsubscribe()
            return "cuptiEnableCallback failed for every call"
        return None

    def diagnostics(self) -> list[tuple[str, str]]:
        """(code, message) of what went wrong while recording."""
        out = []
        if self.failed:
            out.append(("cupti_api_callbacks_partial", f"{self.failed} runtime/driver calls could "
                        "not have their CUPTI callback switched on: they have no records"))
        lost = self.stats()["api_records_lost"]
        if lost:
            out.append(("cupti_api_records_lost", f"{lost} runtime/driver call records were "
                        "lost: buffer memory reached its cap; shorten the window"))
        return out

    def stop(self) -> None:
        """Switch the callbacks off and complete the buffer being written."""
        if self.subscriber is not None:
            for domain in self.domains:
                self.lib.cuptiEnableDomain(0, self.subscriber, domain)
        self.domains = []
        self.end()

    def end(self) -> None:
        """Stop writing records and complete the buffer being written (again after the final
        flush: a call that was inside the callback at ``stop`` may have written one more)."""
        self.shim.ss_api_end()

    def complete(self) -> None:
        """Complete the buffer being written, recording on (a forced flush)."""
        self.shim.ss_api_complete()

    def unsubscribe(self) -> None:
        if self.subscriber is not None:
            self.lib.cuptiUnsubscribe(self.subscriber)
            self.subscriber = None

    def _raw(self) -> tuple[int, ...]:
        out = (ctypes.c_uint64 * 4)()
        self.shim.ss_api_stats(out)
        return tuple(int(x) for x in out)

    def stats(self) -> dict[str, int]:
        """By this capture: records written, lost for want of buffer memory (the cap), driver
        calls not written because they were made inside a recorded runtime call, and of those
        the ones whose correlation id was not their runtime call's."""
        now = self._raw()
        keys = ("api_records_written", "api_records_lost", "api_nested_driver_calls",
                "api_nested_other_correlation")
        return {k: a - b for k, a, b in zip(keys, now, self._base)}


__all__ = ["ApiCallbacks"]
