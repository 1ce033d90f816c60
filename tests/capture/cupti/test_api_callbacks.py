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


class Site:
    """One CUDA call passing the shim's callback, site by site (``enter()``, ``exit()``), the
    call's correlation slot shared between them as CUPTI does."""

    def __init__(self, shim: ctypes.CDLL, domain: int, cbid: int, corr: int, result: int = 0) -> None:
        self.fn = CALLBACK(ctypes.cast(shim.ss_callback, ctypes.c_void_p).value)
        self.domain, self.cbid, self.corr = domain, cbid, corr
        self.slot, self.ret = ctypes.c_uint64(0), ctypes.c_int(result)

    def site(self, site: int) -> None:
        data = CallbackData(site=site, return_value=ctypes.addressof(self.ret),
                            correlation_data=ctypes.pointer(self.slot), correlation_id=self.corr)
        self.fn(None, self.domain, self.cbid, ctypes.addressof(data))

    def enter(self) -> None:
        self.site(0)

    def exit(self) -> None:
        self.site(1)


def call(shim: ctypes.CDLL, domain: int, cbid: int, corr: int, result: int = 0) -> None:
    """One CUDA call passing the shim's callback: entry, then exit, sharing the call's slot."""
    c = Site(shim, domain, cbid, corr, result)
    c.enter()
    c.exit()


def nested_launch(shim: ctypes.CDLL, corr: int, driver_corr: int) -> None:
    """cudaLaunchKernel running the driver's cuLaunchKernel inside it, as the runtime does."""
    rt = Site(shim, L.DOMAIN_RUNTIME_API, 211, corr)
    rt.enter()
    call(shim, L.DOMAIN_DRIVER_API, 307, corr=driver_corr)
    rt.exit()


def api_stats(shim: ctypes.CDLL) -> list[int]:
    out = (ctypes.c_uint64 * 4)()
    shim.ss_api_stats(out)
    return [int(x) for x in out]


def taken(shim: ctypes.CDLL) -> list[np.ndarray]:
    bufs, valid = (ctypes.c_void_p * 8)(), (ctypes.c_size_t * 8)()
    out = []
    for i in range(shim.ss_take(bufs, valid, 8)):
        out.append(np.frombuffer(ctypes.string_at(bufs[i], valid[i]), dtype=API))
        shim.ss_release(bufs[i], valid[i])
    return out


def test_a_call_becomes_one_record_in_cuptis_api_layout(shim: ctypes.CDLL) -> None:
    clock = Clock()
    shim.ss_api_begin(ctypes.cast(clock.fn, ctypes.c_void_p), 4321, 0)
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
    assert set(recs["tid"].tolist()) == {threading.get_native_id()}  # the system id (gettid)
    assert recs.itemsize == L.LAYOUTS_13[L.RUNTIME].size
    call(shim, L.DOMAIN_RUNTIME_API, 211, corr=10)  # after the end: nothing
    shim.ss_api_end()
    assert taken(shim) == []


def test_calls_fill_buffers_of_the_pool_and_past_the_cap_are_counted_lost(shim: ctypes.CDLL) -> None:
    assert shim.ss_configure(4096, 8192) == 0  # two buffers of 102 records at most
    clock = Clock()
    shim.ss_api_begin(ctypes.cast(clock.fn, ctypes.c_void_p), os.getpid(), 0)
    for i in range(250):
        call(shim, L.DOMAIN_RUNTIME_API, 211, corr=i + 1)
    full = taken(shim)  # each buffer completed when the next record did not fit
    assert [len(r) for r in full] == [102, 102]
    assert api_stats(shim)[:2] == [204, 46]
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
    shim.ss_api_begin(ctypes.cast(clock.fn, ctypes.c_void_p), 1, 0)
    shim.ss_api_end()
    shim.ss_detach_arm(ctypes.cast(finalize, ctypes.c_void_p), None)
    call(shim, L.DOMAIN_DRIVER_API, 17, corr=1)
    assert ran == [1]
    rc = ctypes.c_int(0)
    assert shim.ss_detach_state_get(ctypes.byref(rc)) == 3  # detached


def test_a_driver_call_inside_a_recorded_runtime_call_is_not_written(shim: ctypes.CDLL) -> None:
    clock = Clock()
    shim.ss_api_begin(ctypes.cast(clock.fn, ctypes.c_void_p), 1, 0)
    nested_launch(shim, corr=5, driver_corr=5)  # cudaLaunchKernel -> its own cuLaunchKernel
    nested_launch(shim, corr=6, driver_corr=7)  # (CUPTI's ids, whether shared or not)
    call(shim, L.DOMAIN_DRIVER_API, 307, corr=8)  # cuBLASLt, Triton, CuPy: the driver directly
    shim.ss_api_end()
    (recs,) = taken(shim)
    assert recs["kind"].tolist() == [L.RUNTIME, L.RUNTIME, L.DRIVER]
    assert recs["corr"].tolist() == [5, 6, 8]
    # the runtime call is timed as before: entry before its driver call, exit after it
    assert recs["start"].tolist()[:2] == [1000, 1200] and recs["end"].tolist()[:2] == [1100, 1300]
    assert api_stats(shim) == [3, 0, 2, 1]  # written, lost, nested not written, other id


def test_keep_nested_writes_every_driver_call(shim: ctypes.CDLL) -> None:
    clock = Clock()
    shim.ss_api_begin(ctypes.cast(clock.fn, ctypes.c_void_p), 1, 1)
    nested_launch(shim, corr=5, driver_corr=6)
    shim.ss_api_end()
    (recs,) = taken(shim)
    assert recs["kind"].tolist() == [L.DRIVER, L.RUNTIME] and recs["corr"].tolist() == [6, 5]
    assert api_stats(shim)[2:] == [0, 0]


def test_a_runtime_call_cut_by_the_end_of_recording_does_not_hide_later_driver_calls(
        shim: ctypes.CDLL) -> None:
    clock = Clock()
    shim.ss_api_begin(ctypes.cast(clock.fn, ctypes.c_void_p), 1, 0)
    rt = Site(shim, L.DOMAIN_RUNTIME_API, 211, 5)
    rt.enter()
    shim.ss_api_end()  # recording stopped inside the call: its exit is never seen
    rt.exit()
    taken(shim)
    shim.ss_api_begin(ctypes.cast(clock.fn, ctypes.c_void_p), 1, 0)  # the next capture
    call(shim, L.DOMAIN_DRIVER_API, 307, corr=9)
    shim.ss_api_end()
    assert [r["corr"].tolist() for r in taken(shim)] == [[9]]


def test_a_runtime_call_on_one_thread_does_not_hide_another_threads_driver_calls(
        shim: ctypes.CDLL) -> None:
    clock = Clock()
    shim.ss_api_begin(ctypes.cast(clock.fn, ctypes.c_void_p), 1, 0)
    rt = Site(shim, L.DOMAIN_RUNTIME_API, 211, 5)
    rt.enter()
    other = threading.Thread(target=call, args=(shim, L.DOMAIN_DRIVER_API, 307, 6))
    other.start()
    other.join()
    rt.exit()
    call(shim, L.DOMAIN_DRIVER_API, 307, corr=7)  # after the runtime call: written
    shim.ss_api_end()
    (recs,) = taken(shim)
    assert sorted(recs["corr"].tolist()) == [5, 6, 7]
    assert api_stats(shim)[2] == 0
