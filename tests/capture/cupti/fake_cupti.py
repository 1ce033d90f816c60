"""A stand-in for libcupti (the calls ``CuptiCapture`` makes through ctypes), so that the capture's
own logic — switches, buffers through the real C shim, the spill — runs without a GPU.

``emit(*records)`` queues records as CUPTI would write them; ``cuptiActivityFlushAll`` hands them
over through the shim's buffer callbacks, exactly as libcupti calls them. Names are real C
strings of this process (``name()``), since the capture reads them through their pointers.
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

from stepscope.capture.cupti import layouts as L

NEXT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t,
                        ctypes.POINTER(ctypes.c_void_p))
FINALIZE = ctypes.CFUNCTYPE(ctypes.c_int)
CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p)
TIMESTAMP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_uint64))


class CallbackData(ctypes.Structure):
    """CUpti_CallbackData as cupti_callbacks.h lays it out (72 bytes on 64-bit Linux)."""

    _fields_ = [("site", ctypes.c_int), ("function_name", ctypes.c_char_p),
                ("params", ctypes.c_void_p), ("return_value", ctypes.c_void_p),
                ("symbol", ctypes.c_char_p), ("context", ctypes.c_void_p),
                ("context_uid", ctypes.c_uint32), ("correlation_data", ctypes.POINTER(ctypes.c_uint64)),
                ("correlation_id", ctypes.c_uint32)]
SUBSCRIBER = 0x5EB
CALLS = {(L.DOMAIN_RUNTIME_API, 211): "cudaLaunchKernel_v7000",
         (L.DOMAIN_RUNTIME_API, 3): "cudaGetDevice_v3020",
         (L.DOMAIN_RUNTIME_API, 165): "cudaDeviceSynchronize_v3020",
         (L.DOMAIN_DRIVER_API, 307): "cuLaunchKernel",
         (L.DOMAIN_DRIVER_API, 17): "cuCtxGetDevice"}


def _out(arg: Any) -> Any:
    return arg._obj  # the object behind ctypes.byref(...)


class FakeCupti:
    def __init__(self, shim: ctypes.CDLL, version: int = 130001) -> None:
        self.shim = shim
        self.version = version
        self.log: list[tuple[Any, ...]] = []
        self.kinds: set[int] = set()
        self.calls_on: set[tuple[int, int]] = set()  # per-call switches left on
        self._queue: list[bytes] = []
        self._names: list[ctypes.Array[ctypes.c_char]] = []
        self._starts: dict[int, list[int]] = {}  # buffer address -> where its records start

        @NEXT
        def next_record(buf: int, valid: int, rec: Any) -> int:  # libcupti's own walk: it knows
            starts = self._starts.get(buf, [])  # the true size of every record it wrote
            i = 0 if not rec[0] else starts.index(rec[0] - buf) + 1
            if i >= len(starts) or starts[i] + 4 > valid:
                return 3  # CUPTI_ERROR_MAX_LIMIT_REACHED, as libcupti ends a buffer
            rec[0] = buf + starts[i]
            return 0

        self.cuptiActivityGetNextRecord = next_record
        self.finalized = 0
        self.subscribed: int | None = None  # the callback's address while subscribed
        self.domains: set[int] = set()
        self.unsubscribed: list[int] = []

        self.detached = False  # cuptiFinalize ran and nothing started CUPTI again since
        self.dropped = 0  # records "dropped" for cuptiActivityGetNumDroppedRecords to report

        @FINALIZE
        def finalize() -> int:
            self.finalized += 1
            self.detached = True
            self.subscribed, self.domains, self.callbacks_on = None, set(), set()
            return 0

        self.cuptiFinalize = finalize
        self.callbacks_on: set[tuple[int, int]] = set()  # (domain, cbid) callbacks switched on
        self.subscribes = 0
        self.refused_callbacks: set[tuple[int, int]] = set()  # cuptiEnableCallback fails for these
        self.clock = 0  # 0: the real time; else the next timestamp, stepped 100 ns per reading
        self.zeroed_buffers = False  # told the buffers it is given are zero-filled already
        self.thread_id_type = 0  # CUpti_ActivityThreadIdType: 0 default (pthread_self), 1 system

        @TIMESTAMP
        def get_timestamp(ts: Any) -> int:
            if self.clock:
                self.clock += 100
            ts[0] = self.clock or time.time_ns()
            return 0

        self.cuptiGetTimestamp = get_timestamp

    def api_call(self, site: int = 1, domain: int | None = None, cbid: int = 307,
                 correlation: int = 0, result: int = 0,
                 slot: ctypes.c_uint64 | None = None) -> None:
        """One site of a CUDA call of the program passing CUPTI's callback (site 0 = enter,
        1 = exit), if CUPTI would call it: its domain or the call switched on."""
        if domain is None:
            domain = min(self.domains) if self.domains else L.DOMAIN_DRIVER_API
        if not self.subscribed or (domain not in self.domains
                                   and (domain, cbid) not in self.callbacks_on):
            return
        ret = ctypes.c_int(result)
        data = CallbackData(site=site, return_value=ctypes.addressof(ret),
                            correlation_data=ctypes.pointer(slot if slot is not None
                                                            else ctypes.c_uint64(0)),
                            correlation_id=correlation)
        CALLBACK(self.subscribed)(None, domain, cbid, ctypes.addressof(data))

    def call(self, domain: int, cbid: int, correlation: int, result: int = 0) -> None:
        """A whole CUDA call (entry, then exit) on this thread."""
        slot = ctypes.c_uint64(0)
        self.api_call(0, domain, cbid, correlation, result, slot)
        self.api_call(1, domain, cbid, correlation, result, slot)

    def cuptiSubscribe(self, handle: Any, callback: Any, userdata: Any) -> int:
        if self.subscribed:
            return 39  # CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
        self.subscribes += 1
        self.subscribed = int(callback.value)
        _out(handle).value = SUBSCRIBER
        return 0

    def cuptiUnsubscribe(self, handle: Any) -> int:
        self.unsubscribed.append(int(handle.value))
        self.subscribed, self.domains, self.callbacks_on = None, set(), set()
        return 0

    def cuptiEnableDomain(self, on: int, handle: Any, domain: int) -> int:
        (self.domains.add if on else self.domains.discard)(domain)
        if not on:
            self.callbacks_on = {c for c in self.callbacks_on if c[0] != domain}
        return 0

    def cuptiEnableCallback(self, on: int, handle: Any, domain: int, cbid: int) -> int:
        self.log.append(("callback", domain, cbid, on))
        if on and (domain, cbid) in self.refused_callbacks:
            return 1
        (self.callbacks_on.add if on else self.callbacks_on.discard)((domain, cbid))
        return 0

    def name(self, text: str) -> int:
        """A C string that stays alive as long as this fake: its address, for a record field."""
        s = ctypes.create_string_buffer(text.encode())
        self._names.append(s)
        return ctypes.addressof(s)

    def emit(self, *records: bytes) -> None:
        self._queue.extend(records)

    # -- the libcupti calls ----------------------------------------------------------------------
    def cuptiGetVersion(self, v: Any) -> int:
        _out(v).value = self.version
        return 0

    def cuptiActivityRegisterCallbacks(self, req: Any, done: Any) -> int:
        self.log.append(("register",))
        self.detached = False
        return 0

    def cuptiActivitySetAttribute(self, attr: int, size: Any, value: Any) -> int:
        got = int(_out(value).value)
        self.log.append(("attribute", attr, got))
        if attr == 5:  # CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER
            self.zeroed_buffers = bool(got)
        return 0

    def cuptiGetThreadIdType(self, out: Any) -> int:
        _out(out).value = self.thread_id_type
        return 0

    def cuptiSetThreadIdType(self, kind: Any) -> int:
        self.thread_id_type = int(getattr(kind, "value", kind))
        self.log.append(("thread_id_type", self.thread_id_type))
        return 0

    def cuptiActivityEnable(self, kind: int) -> int:
        self.log.append(("enable", kind))
        self.kinds.add(kind)
        return 0

    def cuptiActivityDisable(self, kind: int) -> int:
        self.log.append(("disable", kind))
        self.kinds.discard(kind)
        return 0

    def _switch(self, domain: int, cbid: int, on: int) -> int:
        self.log.append(("call", domain, cbid, on))
        (self.calls_on.add if on else self.calls_on.discard)((domain, cbid))
        return 0

    def cuptiActivityEnableRuntimeApi(self, cbid: int, on: int) -> int:
        return self._switch(L.DOMAIN_RUNTIME_API, cbid, on)

    def cuptiActivityEnableDriverApi(self, cbid: int, on: int) -> int:
        return self._switch(L.DOMAIN_DRIVER_API, cbid, on)

    def cuptiActivityFlushAll(self, flag: int) -> int:
        """Hand the queued records over in one buffer, through the shim's callbacks."""
        if not self._queue:
            return 0
        data = b"".join(self._queue)
        starts = [0]
        for r in self._queue[:-1]:
            starts.append(starts[-1] + len(r))
        self._queue = []
        buf, size, maxrec = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_size_t()
        self.shim.ss_buffer_requested(ctypes.byref(buf), ctypes.byref(size), ctypes.byref(maxrec))
        assert buf.value and size.value >= len(data)
        if self.zeroed_buffers:  # told so: CUPTI does not zero them, and relies on it
            assert ctypes.string_at(buf.value, size.value) == bytes(size.value), "not zero-filled"
        self._starts[buf.value] = starts
        ctypes.memmove(buf.value, data, len(data))
        self.shim.ss_buffer_completed(None, 0, buf.value, size.value, len(data))
        return 0

    def cuptiActivityGetNumDroppedRecords(self, ctx: Any, stream: int, n: Any) -> int:
        # libcupti 13.4/13.5 crash here once cuptiFinalize has run (H100, driver 580.159.04)
        assert not self.detached, "cuptiActivityGetNumDroppedRecords after cuptiFinalize"
        _out(n).value = self.dropped
        self.dropped = 0  # CUPTI counts since the last call
        return 0

    def cuptiGetResultString(self, rc: int, s: Any) -> int:
        return 1

    def cuptiGetCallbackName(self, domain: int, cbid: int, s: Any) -> int:
        name = CALLS.get((domain, cbid))
        if name is None:
            return 1
        _out(s).value = name.encode()
        return 0

