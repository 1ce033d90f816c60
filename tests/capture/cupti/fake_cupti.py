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
            self.subscribed, self.domains = None, set()
            return 0

        self.cuptiFinalize = finalize

    def api_call(self, site: int = 1) -> None:
        """A CUDA call of the program passing CUPTI's callback (site 0 = enter, 1 = exit)."""
        if self.subscribed and self.domains:
            data = ctypes.c_int(site)
            CALLBACK(self.subscribed)(None, min(self.domains), 307, ctypes.addressof(data))

    def cuptiSubscribe(self, handle: Any, callback: Any, userdata: Any) -> int:
        if self.subscribed:
            return 39  # CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
        self.subscribed = int(callback.value)
        _out(handle).value = SUBSCRIBER
        return 0

    def cuptiUnsubscribe(self, handle: Any) -> int:
        self.unsubscribed.append(int(handle.value))
        self.subscribed, self.domains = None, set()
        return 0

    def cuptiEnableDomain(self, on: int, handle: Any, domain: int) -> int:
        (self.domains.add if on else self.domains.discard)(domain)
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

    def cuptiGetTimestamp(self, ts: Any) -> int:
        _out(ts).value = time.time_ns()
        return 0
