"""The ``cupti-python`` backend: the same CUPTI records through NVIDIA's package.

An optional extra (``pip install stepscope[cupti]``; NVIDIA's proprietary licence, so never a
default dependency). Its buffer callbacks are Python functions: CUPTI calls the completed one
from its own thread, which must then take the GIL, and the package turns every record into a
Python object. It is kept as a backend to measure the C shim against (docs/benchmarks.md); the
callback here only appends the record list, and conversion to tables happens at flush.

After the capture CUPTI is detached as the default backend does it (``detach.py``: the C shim's
callback runs ``cuptiFinalize`` at the exit of the program's next CUDA call), through the
libcupti that cupti-python loaded (the first libcupti in the process's memory map: the same
library, unless two different copies were loaded):
cupti-python itself has no safe place to call ``finalize`` from. Where that library or the C
shim cannot be loaded, CUPTI stays attached and the ``cupti_stays_attached`` diagnostic says so.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

from stepscope.call_kinds import classify_api
from stepscope.capture.cupti import detach
from stepscope.capture.cupti import layouts as L
from stepscope.capture.cupti.api_calls import MAX_CBID
from stepscope.capture.cupti.capture import torch_profiler_active
from stepscope.capture.cupti.decode import api_base_name
from stepscope.capture.cupti.native import (
    Unavailable,
    demangler,
    load_libcupti,
    load_shim,
    mapped_libcupti,
)
from stepscope.capture.cupti.settings import GpuSettings
from stepscope.schema_enums import ApiDomain
from stepscope.store.manifest import Diagnostic


def _a(rec: Any, *names: str) -> Any:
    for n in names:
        v = getattr(rec, n, None)
        if v is not None:
            return v
    return None


class PyCuptiCapture:
    backend = "cupti-python"

    def __init__(self, settings: GpuSettings | None = None) -> None:
        try:
            from cupti import cupti  # type: ignore[import-not-found]
        except ImportError as exc:
            raise Unavailable(f"cupti-python is not installed ({exc}): pip install "
                              "'stepscope[cupti]'") from None
        self.c: Any = cupti
        self.settings = settings or GpuSettings()
        self._records: list[Any] = []
        self._lock = threading.Lock()
        self._enabled: list[int] = []
        self._api: list[tuple[int, int]] = []
        self._demangle = demangler()
        self._names: dict[tuple[int, int], str] = {}
        self.records = 0
        self._diags: list[Diagnostic] = []
        self._detacher: detach.Detacher | None = None
        if self.settings.detach:
            why = self._load_detacher()
            if why:
                self._stays_attached(why)

    def _load_detacher(self) -> str | None:
        """The detach through the libcupti cupti-python uses (ctypes) and the C shim; None when
        loaded, else why not."""
        try:
            self.c.get_timestamp()  # makes cupti-python load its libcupti (it loads it lazily)
            path = mapped_libcupti()
            if not path:
                return "the libcupti cupti-python loaded was not found in the process's memory map"
            lib = load_libcupti(path)
            version = ctypes.c_uint32(0)
            if lib.cuptiGetVersion(ctypes.byref(version)) != 0:
                return f"cuptiGetVersion failed in {path}"
            self._detacher = detach.Detacher(lib, load_shim(), int(version.value), enabled=True)
        except Exception as exc:  # never break the capture for the detach
            return f"libcupti or stepscope's C shim could not be loaded ({exc})"
        return None

    def _stays_attached(self, why: str) -> None:
        self._note(f"CUPTI stays attached after the window: {why}; the program's CUDA calls "
                   "after it keep CUPTI's hooks (slower)")

    def _note(self, message: str) -> None:
        """The ``cupti_stays_attached`` diagnostic, once however many captures say it."""
        if not any(d.code == "cupti_stays_attached" for d in self._diags):
            self._diags.append(Diagnostic("info", "cupti_stays_attached", message))

    def _requested(self) -> tuple[int, int]:
        return self.settings.buffer_mb << 20, 0

    def _completed(self, activities: list[Any]) -> None:
        with self._lock:
            self._records.extend(activities)

    def start(self) -> None:
        if torch_profiler_active():
            raise Unavailable("torch.profiler is running in this process and owns CUPTI")
        c = self.c
        if self._detacher is not None:  # an earlier capture's detach that has not run yet
            self._detacher.before_start()
        c.activity_register_callbacks(self._requested, self._completed)
        for kind in self.settings.kinds():
            try:
                c.activity_enable(kind)
                self._enabled.append(kind)
            except Exception:
                if kind == L.CONCURRENT_KERNEL:
                    raise
        if self.settings.api == "filtered":
            for domain, kind, fn in ((L.DOMAIN_RUNTIME_API, L.RUNTIME, "activity_enable_runtime_api"),
                                     (L.DOMAIN_DRIVER_API, L.DRIVER, "activity_enable_driver_api")):
                if domain == L.DOMAIN_DRIVER_API and not self.settings.use_driver():
                    continue
                c.activity_enable(kind)
                self._enabled.append(kind)
                for cbid in range(1, MAX_CBID):
                    name = self._name(domain, cbid)
                    if name and not self.settings.keep_call(domain, name):
                        try:
                            getattr(c, fn)(cbid, 0)
                            self._api.append((domain, cbid))
                        except Exception:
                            pass

    def _name(self, domain: int, cbid: int) -> str | None:
        key = (domain, cbid)
        if key not in self._names:
            try:
                raw = self.c.get_callback_name(domain, cbid)
            except Exception:
                raw = None
            self._names[key] = api_base_name(str(raw)) if raw else ""
        return self._names[key] or None

    def flush(self, forced: bool = False) -> dict[str, Any]:
        self.c.activity_flush_all(1 if forced else 0)
        return self._tables()

    def stop(self) -> dict[str, Any]:
        for kind in self._enabled:
            self.c.activity_disable(kind)
        self._enabled.clear()
        self.c.activity_flush_all(1)
        out = self._tables()
        why = self._detacher.after_stop() if self._detacher is not None else None
        if why is not None:
            self._note(why)
        return out

    def _tables(self) -> dict[str, Any]:
        with self._lock:
            recs, self._records = self._records, []
        self.records += len(recs)
        out: dict[str, dict[str, list[Any]]] = {}

        def add(table: str, **row: Any) -> None:
            cols = out.setdefault(table, {k: [] for k in row})
            for k, v in row.items():
                cols[k].append(v)

        pid = os.getpid()
        for r in recs:
            kind = int(r.kind)
            start, end = _a(r, "start"), _a(r, "end")
            if kind in (L.CONCURRENT_KERNEL, L.MEMCPY, L.MEMSET, L.RUNTIME, L.DRIVER):
                if not start or end is None or end < start:
                    continue
            if kind == L.CONCURRENT_KERNEL:
                st, dy = int(_a(r, "static_shared_memory") or 0), int(_a(r, "dynamic_shared_memory") or 0)
                add("kernels", ts_ns=start, dur_ns=end - start, device=_a(r, "device_id"),
                    stream=_a(r, "stream_id"), correlation=_a(r, "correlation_id"),
                    name=self._demangle(str(_a(r, "name") or "<unknown>")),
                    grid_x=_a(r, "grid_x"), grid_y=_a(r, "grid_y"), grid_z=_a(r, "grid_z"),
                    block_x=_a(r, "block_x"), block_y=_a(r, "block_y"), block_z=_a(r, "block_z"),
                    registers=_a(r, "registers_per_thread"), shared_memory=st + dy,
                    static_smem=st, dynamic_smem=dy)
            elif kind in (L.MEMCPY, L.MEMCPY2):
                add("memcpy", ts_ns=start, dur_ns=end - start, device=_a(r, "device_id"),
                    stream=_a(r, "stream_id"), correlation=_a(r, "correlation_id"),
                    kind=L.COPY_KINDS.get(int(_a(r, "copy_kind") or 0), L.COPY_KINDS[0]).value,
                    bytes=_a(r, "bytes"),
                    src_kind=L.MEMORY_KINDS.get(int(_a(r, "src_kind") or 0), L.MEMORY_KINDS[0]).value,
                    dst_kind=L.MEMORY_KINDS.get(int(_a(r, "dst_kind") or 0), L.MEMORY_KINDS[0]).value)
            elif kind == L.MEMSET:
                add("memset", ts_ns=start, dur_ns=end - start, device=_a(r, "device_id"),
                    stream=_a(r, "stream_id"), correlation=_a(r, "correlation_id"),
                    bytes=_a(r, "bytes"))
            elif kind in (L.RUNTIME, L.DRIVER):
                domain = L.DOMAIN_RUNTIME_API if kind == L.RUNTIME else L.DOMAIN_DRIVER_API
                name = self._name(domain, int(r.cbid)) or f"cbid_{r.cbid}"
                add("api_calls", ts_ns=start, dur_ns=end - start, pid=_a(r, "process_id") or pid,
                    tid=_a(r, "thread_id"), correlation=_a(r, "correlation_id"), name=name,
                    domain=(ApiDomain.RUNTIME if kind == L.RUNTIME else ApiDomain.DRIVER).value,
                    kind=classify_api(name).value, cbid=int(r.cbid))
            elif kind == L.SYNCHRONIZATION:
                if not start or end is None or end < start:
                    continue
                add("sync", ts_ns=start, dur_ns=end - start, stream=_a(r, "stream_id"),
                    correlation=_a(r, "correlation_id"),
                    kind=L.SYNC_KINDS.get(int(_a(r, "type") or 0), L.SYNC_KINDS[0]).value)
        return out

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        return tuple(self._diags)

    def settings_for_manifest(self) -> dict[str, Any]:
        return {"backend": self.backend, "records": self.records,
                "api_calls_off": len(self._api), "cupti_detach": self._detach_state()}

    def _detach_state(self) -> str:
        if self._detacher is not None:
            return self._detacher.note
        return "not armed" if self.settings.detach else "off"  # switched on: could not load
