"""GPU capture through CUPTI's Activity API: libcupti via ctypes, buffers via the C shim.

``CuptiCapture.start()`` registers the shim's buffer callbacks and enables the activity kinds
(``settings.GpuSettings``: which kinds, which runtime/driver calls); ``flush()`` takes the
completed buffers (no GIL was needed to fill them) and either keeps them raw in the staging
folder (``spill_dir`` given: ``spill``, decoded at merge by ``raw``; what a recording session
does) or walks and decodes them here (``decode``); then hands the buffers back. ``stop()``
disables, force-flushes and takes the rest. A driver call nested in a runtime call on the same
thread (the runtime's own cuLaunchKernel) is not written by the shim when calls come through
callbacks, and is dropped at decode otherwise, keeping the runtime call.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from pathlib import Path
from typing import Any

from stepscope.capture.cupti import detach
from stepscope.capture.cupti import layouts as L
from stepscope.capture.cupti.activity_buffers import ActivityBuffers
from stepscope.capture.cupti.api_callbacks import ApiCallbacks
from stepscope.capture.cupti.api_calls import CallPlan
from stepscope.capture.cupti.decode import DecodeContext, Decoder
from stepscope.capture.cupti.dump import BufferDump
from stepscope.capture.cupti.native import (
    THREAD_ID_TYPE_SYSTEM,
    Unavailable,
    demangler,
    find_libcupti,
    gil_held,
    load_libcupti,
    load_shim,
    set_thread_id_type,
    set_zeroed_buffers,
)
from stepscope.capture.cupti.settings import GpuSettings, detach_with_graphs
from stepscope.store.manifest import Diagnostic

FLUSH_FORCED = 1
# another CUPTI client holds the process (``ApiCallbacks.shared``): what the run may lack.
# Measured on an H100 (2026-11-27, docs/accuracy.md, "Convolutions run as GEMMs; the host,
# held"): a stepscope.record() after torch.profiler had run in the same process kept 1,686
# launch calls and 1,566 kernels of a 30-step window that a fresh process recorded at 3,450 and
# 3,330, with 0 to 113 launches in steps that each made 115
SHARED_NOTE = (
    "another CUPTI client holds this process (torch.profiler keeps CUPTI once it has run): a "
    "recording made so on an H100 lost about half of its steps' launch calls and kernels and "
    "put others in the wrong steps, so this run's GPU figures may be wrong; record the program "
    "in a fresh process, or set TEARDOWN_CUPTI=1 before torch is imported so that torch.profiler "
    "lets CUPTI go after its captures")


def torch_profiler_active() -> bool:
    torch = sys.modules.get("torch")
    fn = getattr(getattr(torch, "autograd", None), "_profiler_enabled", None)
    try:
        return bool(fn()) if callable(fn) else False
    except Exception:
        return False


class CuptiCapture:
    """One process's CUPTI activity capture. Not re-entrant: the bootstrap serialises calls."""

    backend = "cupti"

    def __init__(self, settings: GpuSettings | None = None, *, libcupti: str | None = None,
                 spill_dir: Path | None = None) -> None:
        self.settings = settings or GpuSettings()
        self.spill_dir = spill_dir
        path = libcupti or find_libcupti()
        if not path:
            raise Unavailable("libcupti not found (install the nvidia-cuda-cupti wheel, or set "
                              "STEPSCOPE_CUPTI_LIB)")
        self.path = path
        self.lib = load_libcupti(path)
        self.shim = load_shim()
        v = ctypes.c_uint32(0)
        self._check(self.lib.cuptiGetVersion(ctypes.byref(v)), "cuptiGetVersion")
        self.version = int(v.value)
        chosen = L.layouts_for(self.version)
        if chosen is None:
            raise Unavailable(f"CUPTI API version {self.version} has no known record layout "
                              "(supported: CUDA 12.x, 13.x)")
        self._layout = chosen
        # STEPSCOPE_CUPTI_DUMP=DIR: keep the raw buffers and the strings they point to (used to
        # record the CI fixtures of the decoder; see tests/capture/cupti)
        self._dump = BufferDump.from_env()
        self.decoder = Decoder(chosen.table, DecodeContext(
            strings=self._string, api_name=self._callback_name, demangle=demangler(),
            pid=os.getpid()))
        self._enabled: list[int] = []
        self.calls = CallPlan(self.settings, self._callback_name)
        self._requested_at_start = 0
        self._diags: list[Diagnostic] = []
        self._dropped = 0
        self.buf = ActivityBuffers(self.lib, self.shim, self.version, chosen, self.decoder,
                                   self._diag, self._dump, self._api_names)
        self._detacher = detach.Detacher(self.lib, self.shim, self.version, self.settings.detach)
        self._callbacks: ApiCallbacks | None = None
        self._zeroed = False  # CUPTI told the buffers come zero-filled (settings.zeroed_buffers)
        self._tid_type: int | None = None  # the thread id type CUPTI had before the capture
        self.api_via = "none" if self.settings.api == "none" else (
            "activity" if self.settings.api == "all" else self.settings.api_via)
        self.running = False
        # look the call names up now, off the training thread (the spill's meta needs them too)
        for domain in (L.DOMAIN_RUNTIME_API, L.DOMAIN_DRIVER_API):
            if self.settings.api == "filtered" or spill_dir is not None:
                self.calls.plan(domain)

    # -- ctypes helpers -----------------------------------------------------------------------
    def _error(self, rc: int) -> str:
        s = ctypes.c_char_p()
        if self.lib.cuptiGetResultString(rc, ctypes.byref(s)) == 0 and s.value:
            return s.value.decode(errors="replace")
        return f"CUPTI error {rc}"

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise Unavailable(f"{what} failed: {self._error(rc)}")

    def _string(self, ptr: int) -> str | None:
        try:
            text = ctypes.string_at(ptr).decode("utf-8", "replace")
        except (OSError, ValueError):
            return None
        if self._dump:
            self._dump.strings[ptr] = text
        return text

    def _api_names(self) -> dict[str, dict[str, str]]:
        return {str(d): {str(c): n for c, n in m.items()} for d, m in self.calls.names.items()}

    def _callback_name(self, domain: int, cbid: int) -> str | None:
        s = ctypes.c_char_p()
        if self.lib.cuptiGetCallbackName(domain, cbid, ctypes.byref(s)) != 0 or not s.value:
            return None
        text = s.value.decode(errors="replace")
        if self._dump:
            self._dump.api_names[f"{domain}:{cbid}"] = text
        return text

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        if torch_profiler_active():
            raise Unavailable("torch.profiler is running in this process and owns CUPTI "
                              "(one CUPTI client per process): use --backend torch")
        s = self.settings
        self._detacher.before_start()  # an earlier capture's detach that has not run yet
        self.shim.ss_configure(s.buffer_mb << 20, s.max_mb << 20)
        req = ctypes.cast(self.shim.ss_buffer_requested, ctypes.c_void_p)
        done = ctypes.cast(self.shim.ss_buffer_completed, ctypes.c_void_p)
        self._requested_at_start = self.stats()["buffers_requested"]
        self._check(self.lib.cuptiActivityRegisterCallbacks(req, done),
                    "cuptiActivityRegisterCallbacks")
        self.shim.ss_prepare(s.prepared_buffers)
        self._zeroed = s.zeroed_buffers and set_zeroed_buffers(self.lib, True)  # before a record
        self._tid_type = set_thread_id_type(self.lib, THREAD_ID_TYPE_SYSTEM)
        activity_enable = gil_held(self.lib.cuptiActivityEnable)
        for kind in s.kinds():
            rc = activity_enable(kind)
            if rc == 0:
                self._enabled.append(kind)
            elif kind == L.CONCURRENT_KERNEL:
                self._unzero()
                self.stop()
                raise Unavailable(f"cannot enable CUPTI kernel records: {self._error(rc)}")
            else:
                self._diag("cupti_kind_unavailable",
                           f"CUPTI {L.KIND_NAMES.get(kind, kind)} records unavailable: {self._error(rc)}")
        if s.api == "filtered":
            domains = [L.DOMAIN_RUNTIME_API] + ([L.DOMAIN_DRIVER_API] if s.use_driver() else [])
            if self.api_via == "callbacks":
                self._callbacks = ApiCallbacks(self.lib, self.shim, s.nested_driver)
                why = self._callbacks.start(self.calls, domains)
                if self._callbacks.shared:
                    self._diag("cupti_shared", SHARED_NOTE)
                if why is not None:
                    self._callbacks = None
                    self.api_via = "activity"
                    self._diag("cupti_api_callbacks_unavailable", f"runtime/driver calls are "
                               f"recorded through CUPTI's activity kinds instead of its callbacks "
                               f"({why}): the capture costs more", level="info")
                else:
                    self.calls.kept += self._callbacks.kept
            if self.api_via == "activity":
                for domain in domains:
                    self._enable_api(domain)
        ts = ctypes.c_uint64(0)
        before = time.time_ns()
        if self.lib.cuptiGetTimestamp(ctypes.byref(ts)) == 0:
            after = time.time_ns()
            off = int(ts.value) - (before + after) // 2
            self.buf.clock_offset_ns = off if abs(off) > 1_000_000 else 0
        if self.spill_dir is not None and self.buf.spill is None:
            self.buf.start_spill(self.spill_dir, self._string)
        self.running = True

    def _enable_api(self, domain: int) -> None:
        kind, diags = self.calls.enable(self.lib, domain, self._error)
        for code, message in diags:
            self._diag(code, message)
        if kind is not None:
            self._enabled.append(kind)

    def _disable(self) -> None:
        for kind in self._enabled:
            self.lib.cuptiActivityDisable(kind)
        self._enabled.clear()
        # The per-call switches stay off: switching a call back on with the domain's kind disabled
        # would ask CUPTI to record that call on its own, after the window. Whoever enables the
        # domain's kind next (this capture again, or another client) overrides them all.

    def flush(self, forced: bool = False) -> dict[str, dict[str, Any]]:
        """Decode what CUPTI has completed (all of it when ``forced``)."""
        if forced and self._callbacks is not None:
            self._callbacks.complete()
        self.lib.cuptiActivityFlushAll(FLUSH_FORCED if forced else 0)
        self._read_dropped()
        return self.buf.drain()

    def stop(self) -> dict[str, dict[str, Any]]:
        if not self.running and not self._enabled:
            return {}
        self.running = False
        self._disable()
        if self._callbacks is not None:
            self._callbacks.stop()
        self._final_flush()
        if self._callbacks is not None:
            self._callbacks.end()
        self._read_dropped()  # before the detach is armed: CUPTI is not to be asked after it
        self._unzero()
        out = self.buf.drain()
        if self.buf.spill is not None:
            if self.buf.spill.error:
                self._diag("cupti_spill_failed", self.buf.spill.error, level="error")
            self.buf.write_raw_meta()
        for code, message in self._callbacks.diagnostics() if self._callbacks else []:
            self._diag(code, message)
        if self.records == 0 and self.stats()["buffers_requested"] == self._requested_at_start:
            self._diag("cupti_nothing_recorded", "CUPTI recorded nothing while it ran: the program "
                       "did no GPU work then, or CUPTI was still starting (over a second on a "
                       "machine's first run): use a longer window")
        self.shim.ss_trim()
        if self._dump:
            self._dump.write_meta({"cupti_api_version": self.version, "layout": self._layout.name,
                                   "settings": self.settings.as_dict()})
        why = self._detacher.after_stop(self._callbacks.subscriber if self._callbacks else None,
                                        with_graphs=detach_with_graphs())
        if self._callbacks is not None:
            self._callbacks.subscriber = None  # the detach's now (or let go)
        if why is not None:
            self._diag("cupti_stays_attached", why, level="info")
        return out

    def _unzero(self) -> None:
        """CUPTI to zero its buffers again: torch.profiler's, say, are not zero-filled."""
        if self._zeroed:
            set_zeroed_buffers(self.lib, False)
        if self._tid_type is not None:  # another client of CUPTI (torch.profiler) expects its own
            set_thread_id_type(self.lib, self._tid_type)
            self._tid_type = None

    def _final_flush(self, wait_s: float = 1.0) -> None:
        """Forced flushes until every buffer CUPTI asked for has come back (CUPTI may hand a
        buffer back on its own thread after the flush returns), or ``wait_s`` has passed."""
        deadline = time.monotonic() + wait_s
        while True:
            rc = self.lib.cuptiActivityFlushAll(FLUSH_FORCED)
            if rc != 0:
                self._diag("cupti_flush_failed", f"cuptiActivityFlushAll failed: {self._error(rc)}")
            st = self.stats()
            out = (st["buffers_requested"] - st["buffers_refused"] - st["buffers_completed"]
                   - st["buffers_empty"])
            if out <= 0 or time.monotonic() >= deadline:
                if out > 0:
                    self._diag("cupti_buffers_outstanding", f"{out} CUPTI buffer(s) were not handed "
                               "back at the end of the capture: their records are missing")
                return
            time.sleep(0.01)

    # -- buffers ------------------------------------------------------------------------------
    @property
    def records(self) -> int:
        """Records taken so far (decoded here, or kept raw)."""
        return self.buf.records

    @property
    def raw_records(self) -> int:
        """Records kept raw in the spill folder (decoded when the run is merged)."""
        return self.buf.raw_records

    # -- reporting ----------------------------------------------------------------------------
    def _diag(self, code: str, message: str, level: str = "warning") -> None:
        if not any(d.code == code for d in self._diags):
            self._diags.append(Diagnostic(level, code, message))

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        out = list(self._diags)
        dropped = self.dropped_records()
        stats = self.stats()
        if dropped or stats["buffers_refused"]:
            out.append(Diagnostic("warning", "cupti_records_dropped",
                                  f"CUPTI dropped {dropped} records: buffer memory reached its "
                                  f"{self.settings.max_mb} MB cap ({stats['buffers_refused']} "
                                  "buffer requests refused); shorten the window"))
        if self.decoder.unknown_kinds:
            out.append(Diagnostic("info", "cupti_unknown_kinds",
                                  f"CUPTI record kinds not decoded: {sorted(self.decoder.unknown_kinds)}"))
        return tuple(out)

    def dropped_records(self) -> int:
        """Records CUPTI dropped, as read at the last flush or stop. Read only while CUPTI is
        attached: once the detach has run (cuptiFinalize, on whichever thread makes the next CUDA
        call), CUPTI 13.4 and 13.5 crash in cuptiActivityGetNumDroppedRecords (seen on an H100,
        driver 580.159.04)."""
        return self._dropped

    def _read_dropped(self) -> None:
        n = ctypes.c_size_t(0)
        if self.lib.cuptiActivityGetNumDroppedRecords(None, 0, ctypes.byref(n)) == 0:
            self._dropped += int(n.value)  # the count since the last read

    def stats(self) -> dict[str, int]:
        out = (ctypes.c_uint64 * 8)()
        self.shim.ss_stats(out)
        keys = ("buffers_requested", "buffers_completed", "buffers_refused", "buffers_empty",
                "allocated_bytes", "pending_bytes", "peak_pending_bytes", "buffer_bytes")
        return dict(zip(keys, (int(x) for x in out)))

    def settings_for_manifest(self) -> dict[str, Any]:
        return {"backend": self.backend, "libcupti": self.path, "cupti_api_version": self.version,
                "settings": self.settings.as_dict(),
                "api_calls_kept": self.calls.kept, "api_calls_off": self.calls.off,
                "api_records_via": self.api_via,
                "buffers_zeroed_by": "stepscope" if self._zeroed else "cupti",
                **(self._callbacks.stats() if self._callbacks is not None else {}),
                "driver_api": self.settings.use_driver(),
                "cupti_detach": self._detacher.note, **self.buf.manifest(), **self.stats()}
