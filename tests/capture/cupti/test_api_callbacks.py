"""Runtime/driver call records through CUPTI's Callback API: the shim's ``ss_callback`` writes
CUPTI's own API record layout (CPU only, the real C shim; CUPTI's side played by ctypes)."""

from __future__ import annotations

import ctypes
import os
import shutil
import threading

import numpy as np
import pytest
from tests.capture.cupti.fake_cupti import CALLBACK, TIMESTAMP, CallbackData

from stepscope.capture.cupti import layouts as L
from stepscope.capture.cupti.native import build_shim, load_shim

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="no C compiler")
API = np.dtype([("kind", "<u4"), ("cbid", "<u4"), ("start", "<u8"), ("end", "<u8"),
                ("pid", "<u4"), ("tid", "<u4"), ("corr", "<u4"), ("ret", "<u4")])


@pytest.fixture
def shim(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    # a private copy per test: the shim keeps process-wide state
    return load_shim(build_shim(tmp_path_factory.mktemp("shim")))


class Clock:
    """CUPTI's cuptiGetTimestamp as the shim calls it: 1000, 1100, 1200, ..."""

    def __init__(self) -> None:
        self.t = 900

        @TIMESTAMP
        def read(ts: ctypes.Array[ctypes.c_uint64]) -> int:
            self.t += 100
            ts[0] = self.t
            return 0

        self.fn = read


def call(shim: ctypes.CDLL, domain: int, cbid: int, corr: int, result: int = 0) -> None:
    """One CUDA call passing the shim's callback: entry, then exit, sharing the call's slot."""
    slot, ret = ctypes.c_uint64(0), ctypes.c_int(result)
    fn = CALLBACK(ctypes.cast(shim.ss_callback, ctypes.c_void_p).value)
    for site in (0, 1):
        data = CallbackData(site=site, return_value=ctypes.addressof(ret),
                            correlation_data=ctypes.pointer(slot), correlation_id=corr)
        fn(None, domain, cbid, ctypes.addressof(data))


def taken(shim: ctypes.CDLL) -> list[np.ndarray]:
    bufs, valid = (ctypes.c_void_p * 8)(), (ctypes.c_size_t * 8)()
    out = []
    for i in range(shim.ss_take(bufs, valid, 8)):
        out.append(np.frombuffer(ctypes.string_at(bufs[i], valid[i]), dtype=API))
        shim.ss_release(bufs[i])
    return out


def test_a_call_becomes_one_record_in_cuptis_api_layout(shim: ctypes.CDLL) -> None:
    clock = Clock()
    shim.ss_api_begin(ctypes.cast(clock.fn, ctypes.c_void_p), 4321)
    call(shim, L.DOMAIN_RUNTIME_API, 211, corr=7)
    call(shim, L.DOMAIN_DRIVER_API, 307, corr=8, result=700)
    call(shim, 3, 1, corr=9)  # the resource domain: not a call, no record
    assert taken(shim) == []  # the buffer being written is not complete yet
    shim.ss_api_end()
    (recs,) = taken(shim)
    assert recs["kind"].tolist() == [L.RUNTIME, L.DRIVER]
    assert recs["cbid"].tolist() == [211, 307] and recs["corr"].tolist() == [7, 8]
    assert recs["start"].tolist() == [1000, 1200] and recs["end"].tolist() == [1100, 1300]
    assert recs["pid"].tolist() == [4321, 4321] and recs["ret"].tolist() == [0, 700]
    assert set(recs["tid"].tolist()) == {threading.get_ident() & 0xFFFFFFFF}  # pthread_self
    assert recs.itemsize == L.LAYOUTS_13[L.RUNTIME].size
    call(shim, L.DOMAIN_RUNTIME_API, 211, corr=10)  # after the end: nothing
    shim.ss_api_end()
    assert taken(shim) == []


def test_calls_fill_buffers_of_the_pool_and_past_the_cap_are_counted_lost(shim: ctypes.CDLL) -> None:
    assert shim.ss_configure(4096, 8192) == 0  # two buffers of 102 records at most
    clock = Clock()
    shim.ss_api_begin(ctypes.cast(clock.fn, ctypes.c_void_p), os.getpid())
    for i in range(250):
        call(shim, L.DOMAIN_RUNTIME_API, 211, corr=i + 1)
    full = taken(shim)  # each buffer completed when the next record did not fit
    assert [len(r) for r in full] == [102, 102]
    out = (ctypes.c_uint64 * 2)()
    shim.ss_api_stats(out)
    assert list(out) == [204, 46]
    st = (ctypes.c_uint64 * 8)()
    shim.ss_stats(st)
    assert st[2] == 0  # lost records are not counted as refused CUPTI buffer requests
    assert np.concatenate([r["corr"] for r in full]).tolist() == list(range(1, 205))
    call(shim, L.DOMAIN_RUNTIME_API, 211, corr=300)  # buffers handed back: recording resumes
    shim.ss_api_end()
    assert [r["corr"].tolist() for r in taken(shim)] == [[300]]


def test_the_callback_still_runs_the_armed_detach(shim: ctypes.CDLL) -> None:
    ran = []

    @ctypes.CFUNCTYPE(ctypes.c_int)
    def finalize() -> int:
        ran.append(1)
        return 0

    clock = Clock()
    shim.ss_api_begin(ctypes.cast(clock.fn, ctypes.c_void_p), 1)
    shim.ss_api_end()
    shim.ss_detach_arm(ctypes.cast(finalize, ctypes.c_void_p), None)
    call(shim, L.DOMAIN_DRIVER_API, 17, corr=1)
    assert ran == [1]
    rc = ctypes.c_int(0)
    assert shim.ss_detach_state_get(ctypes.byref(rc)) == 3  # detached
