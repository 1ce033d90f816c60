"""``CuptiCapture`` against a stand-in libcupti (``fake_cupti``) and the real C shim: the switches
it sets, and the raw-records path from the buffers CUPTI hands over to the merged run."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.capture.cupti.fake_cupti import FakeCupti
from tests.capture.cupti.records import api, kernel
from tests.capture.test_bootstrap import FakeClock, FakeHost

from stepscope.capture.bootstrap import CaptureConfig, Session
from stepscope.capture.cupti import capture as capture_mod
from stepscope.capture.cupti import detach
from stepscope.capture.cupti import layouts as L
from stepscope.capture.cupti.capture import CuptiCapture
from stepscope.capture.cupti.native import build_shim, load_shim
from stepscope.capture.cupti.raw import decode_folder, raw_files
from stepscope.capture.cupti.settings import GpuSettings
from stepscope.capture.partitions import merge
from stepscope.capture.schedule import make_schedule
from stepscope.store.run import Run

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="no C compiler")


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    return load_shim(build_shim(tmp_path_factory.mktemp("shim")))  # a private copy: shim state


def use_fake(shim: ctypes.CDLL, monkeypatch: pytest.MonkeyPatch, version: int = 130001) -> FakeCupti:
    """A stand-in libcupti of ``version``, loaded by every ``CuptiCapture`` of the test."""
    f = FakeCupti(shim, version=version)
    monkeypatch.setattr(capture_mod, "load_libcupti", lambda path: f)
    monkeypatch.setattr(capture_mod, "find_libcupti", lambda: "fake-libcupti.so")
    monkeypatch.setattr(capture_mod, "load_shim", lambda: shim)
    return f


@pytest.fixture
def fake(shim: ctypes.CDLL, monkeypatch: pytest.MonkeyPatch) -> FakeCupti:
    return use_fake(shim, monkeypatch)


API_KINDS = {L.RUNTIME, L.DRIVER}


def test_api_domains_are_switched_on_and_their_noise_off(fake: FakeCupti) -> None:
    cap = CuptiCapture(GpuSettings(api_via="activity"))
    cap.start()
    assert API_KINDS <= fake.kinds
    offs = {(e[1], e[2]) for e in fake.log if e[0] == "call" and e[3] == 0}
    assert offs == {(L.DOMAIN_RUNTIME_API, 3), (L.DOMAIN_DRIVER_API, 17)}
    # each domain's per-call switches come after its kind (enabling a kind overrides them)
    kind_of = {L.DOMAIN_RUNTIME_API: L.RUNTIME, L.DOMAIN_DRIVER_API: L.DRIVER}
    for i, e in enumerate(fake.log):
        if e[0] == "call":
            assert ("enable", kind_of[e[1]]) in fake.log[:i]
    cap.stop()
    assert fake.kinds == set()
    assert cap.settings_for_manifest()["api_calls_off"] == 2


def test_kept_calls_are_recorded_through_callbacks_and_no_sync_records_by_default(
        fake: FakeCupti) -> None:
    cap = CuptiCapture(GpuSettings())
    cap.start()
    assert not ({L.RUNTIME, L.DRIVER, L.SYNCHRONIZATION} & fake.kinds)
    assert fake.subscribes == 1 and fake.callbacks_on == {
        (L.DOMAIN_RUNTIME_API, 211), (L.DOMAIN_RUNTIME_API, 165), (L.DOMAIN_DRIVER_API, 307)}
    fake.clock = 1_000_000
    fake.call(L.DOMAIN_RUNTIME_API, 211, correlation=5)  # cudaLaunchKernel: kept
    fake.call(L.DOMAIN_RUNTIME_API, 3, correlation=6)  # cudaGetDevice: CUPTI never calls back
    fake.emit(kernel(1_000_500, 1_000_900, name=fake.name("k"), corr=5))
    out = cap.stop()
    a = out["api_calls"]
    assert a["name"] == ["cudaLaunchKernel"] and a["correlation"] == [5]
    assert a["dur_ns"] == [100] and a["pid"] == [os.getpid()]
    assert a["tid"] == [threading.get_native_id()]  # the host tables' ids (gettid)
    assert out["kernels"]["correlation"] == [5]
    m = cap.settings_for_manifest()
    assert m["api_records_via"] == "callbacks" and m["api_calls_kept"] == 3
    assert m["api_records_written"] == 1 and m["api_records_lost"] == 0
    # the detach takes the same subscription over: switched to whole domains, nothing recorded
    assert fake.subscribes == 1 and fake.callbacks_on == set()
    assert fake.domains == {L.DOMAIN_RUNTIME_API, L.DOMAIN_DRIVER_API}
    fake.call(L.DOMAIN_RUNTIME_API, 211, correlation=7)
    assert fake.finalized == 1 and cap.settings_for_manifest()["api_records_written"] == 1


def test_the_runtimes_own_driver_launch_is_not_written_and_its_kernel_keeps_its_call(
        shim: ctypes.CDLL, monkeypatch: pytest.MonkeyPatch) -> None:
    # STEPSCOPE_CUPTI_NESTED_DRIVER=1 writes it, as before: decode dropped it, the tables are the
    # same both ways; only the records written differ
    for nested, written, skipped in (("0", 2, 1), ("1", 3, 0)):
        monkeypatch.setenv("STEPSCOPE_CUPTI_NESTED_DRIVER", nested)
        fake = use_fake(shim, monkeypatch)
        cap = CuptiCapture(GpuSettings())
        cap.start()
        fake.clock = 1_000_000
        slot = ctypes.c_uint64(0)
        fake.api_call(0, L.DOMAIN_RUNTIME_API, 211, correlation=5, slot=slot)  # cudaLaunchKernel
        fake.call(L.DOMAIN_DRIVER_API, 307, correlation=5)  # ... runs cuLaunchKernel inside
        fake.api_call(1, L.DOMAIN_RUNTIME_API, 211, correlation=5, slot=slot)
        fake.call(L.DOMAIN_DRIVER_API, 307, correlation=6)  # Triton: the driver directly
        fake.emit(kernel(1_000_500, 1_000_900, name=fake.name("a"), corr=5),
                  kernel(1_001_000, 1_001_100, name=fake.name("b"), corr=6))
        out = cap.stop()
        a = out["api_calls"]
        assert a["name"] == ["cudaLaunchKernel", "cuLaunchKernel"] and a["correlation"] == [5, 6]
        # the stand-in clock steps 100 ns per reading: a nested call written reads it twice more
        assert a["dur_ns"] == [100 if nested == "0" else 300, 100]
        assert list(out["kernels"]["correlation"]) == [5, 6]
        m = cap.settings_for_manifest()
        assert m["api_records_written"] == written and m["api_nested_driver_calls"] == skipped
        assert m["settings"]["nested_driver"] is (nested == "1")
        fake.call(L.DOMAIN_RUNTIME_API, 211, correlation=7)  # the detach runs
        assert fake.finalized == 1


def test_cupti_is_told_its_buffers_come_zero_filled_and_they_do_also_when_reused(
        fake: FakeCupti, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cap = CuptiCapture(GpuSettings(prepared_buffers=0), spill_dir=tmp_path / "spill")
    cap.start()
    told = fake.log.index(("attribute", 5, 1))  # after the callbacks, before any kind is on
    assert ("register",) in fake.log[:told]
    assert not any(e[0] == "enable" for e in fake.log[:told])
    before = cap.stats()
    for i in range(3):  # one buffer, reused: the stand-in asserts it arrives zero-filled
        fake.emit(kernel(1_000 + i, 2_000 + i, name=fake.name(f"k{i}"), corr=i))
        cap.flush(forced=True)
    after = cap.stats()
    assert cap.raw_records == 3
    assert after["buffers_requested"] - before["buffers_requested"] == 3
    assert after["allocated_bytes"] - before["allocated_bytes"] <= after["buffer_bytes"]
    cap.stop()
    assert ("attribute", 5, 0) in fake.log[told + 1:]
    assert not fake.zeroed_buffers  # told again, for another client's buffers
    assert cap.settings_for_manifest()["buffers_zeroed_by"] == "stepscope"
    monkeypatch.setenv("STEPSCOPE_CUPTI_ZEROED_BUFFERS", "0")
    fake = use_fake(cap.shim, monkeypatch)
    cap = CuptiCapture(GpuSettings())
    cap.start()
    cap.stop()
    assert not any(e[0] == "attribute" for e in fake.log)
    assert cap.settings_for_manifest()["buffers_zeroed_by"] == "cupti"


def test_a_call_whose_callback_cupti_refuses_is_said_and_the_others_recorded(
        fake: FakeCupti) -> None:
    fake.refused_callbacks = {(L.DOMAIN_RUNTIME_API, 165)}
    cap = CuptiCapture(GpuSettings())
    cap.start()
    assert fake.callbacks_on == {(L.DOMAIN_RUNTIME_API, 211), (L.DOMAIN_DRIVER_API, 307)}
    fake.clock = 1_000_000
    fake.call(L.DOMAIN_RUNTIME_API, 211, correlation=1)
    out = cap.stop()
    assert out["api_calls"]["name"] == ["cudaLaunchKernel"]
    assert cap.settings_for_manifest()["api_calls_kept"] == 2
    assert any(d.code == "cupti_api_callbacks_partial" and d.message.startswith("1 ")
               for d in cap.diagnostics)


def test_the_calls_subscription_is_let_go_where_no_detach_takes_it_over(
        shim: ctypes.CDLL, monkeypatch: pytest.MonkeyPatch) -> None:
    for version, detach_env in ((130001, "0"), (23, "1")):  # detach off; CUPTI older than 12.6
        monkeypatch.setenv("STEPSCOPE_CUPTI_DETACH", detach_env)
        f = use_fake(shim, monkeypatch, version=version)
        detach.reset(f, shim)  # an earlier test's armed detach: called off
        f.unsubscribed.clear()
        cap = CuptiCapture(GpuSettings())
        cap.start()
        assert f.subscribed and f.callbacks_on
        cap.stop()
        assert f.subscribed is None and f.unsubscribed == [0x5EB] and f.finalized == 0
        assert cap.settings_for_manifest()["api_records_via"] == "callbacks"


def test_callbacks_give_way_to_the_activity_kinds_when_cupti_has_another_subscriber(
        fake: FakeCupti) -> None:
    fake.subscribed = 0x1234
    cap = CuptiCapture(GpuSettings())
    cap.start()
    assert {L.RUNTIME, L.DRIVER} <= fake.kinds and fake.callbacks_on == set()
    cap.stop()
    codes = {d.code for d in cap.diagnostics}
    assert {"cupti_api_callbacks_unavailable", "cupti_stays_attached", "cupti_shared"} <= codes
    assert cap.settings_for_manifest()["api_records_via"] == "activity"
    # the run's GPU figures may be wrong: a warning that says how to record cleanly
    shared = next(d for d in cap.diagnostics if d.code == "cupti_shared")
    assert shared.level == "warning" and "fresh process" in shared.message


def test_a_process_of_its_own_gets_no_shared_cupti_warning(fake: FakeCupti) -> None:
    cap = CuptiCapture(GpuSettings())
    cap.start()
    cap.stop()
    assert "cupti_shared" not in {d.code for d in cap.diagnostics}


def test_call_records_from_callbacks_stay_raw_until_the_merge(fake: FakeCupti, tmp_path: Path
                                                               ) -> None:
    folder = tmp_path / "p1"
    cap = CuptiCapture(GpuSettings(), spill_dir=folder)
    cap.start()
    fake.clock = 2_000_000
    fake.call(L.DOMAIN_RUNTIME_API, 165, correlation=3)  # cudaDeviceSynchronize
    assert cap.flush(forced=True) == {} and cap.raw_records == 1
    fake.call(L.DOMAIN_DRIVER_API, 307, correlation=4)
    cap.stop()
    got = collect(folder)
    assert got["api_calls"]["name"] == ["cudaDeviceSynchronize", "cuLaunchKernel"]
    assert got["api_calls"]["kind"] == ["sync", "launch"]


def test_after_a_capture_cupti_detaches_at_the_next_cuda_call_exit(fake: FakeCupti) -> None:
    cap = CuptiCapture(GpuSettings())
    cap.start()
    cap.stop()
    assert detach.state(fake.shim) == "armed: at the next CUDA call"
    assert fake.domains == {L.DOMAIN_RUNTIME_API, L.DOMAIN_DRIVER_API}
    fake.api_call(site=0)  # entering a call: not there
    assert fake.finalized == 0
    fake.api_call(site=1)
    assert fake.finalized == 1 and detach.state(fake.shim) == "detached"
    assert cap.settings_for_manifest()["cupti_detach"] == "armed"
    cap2 = CuptiCapture(GpuSettings())  # CUPTI starts again in the same process
    cap2.start()
    assert detach.state(fake.shim) == "idle"
    cap2.stop()
    fake.api_call()
    assert fake.finalized == 2


def test_a_new_capture_calls_off_a_detach_that_has_not_run(fake: FakeCupti) -> None:
    cap = CuptiCapture(GpuSettings())
    cap.start()
    cap.stop()
    cap2 = CuptiCapture(GpuSettings())
    cap2.start()  # no CUDA call in between
    assert fake.unsubscribed == [0x5EB] and detach.state(fake.shim) == "idle"
    fake.api_call()
    assert fake.finalized == 0  # nothing detaches CUPTI in the middle of cap2
    cap2.stop()
    fake.api_call()
    assert fake.finalized == 1


def test_no_detach_before_cuda_12_6_or_when_switched_off(shim: ctypes.CDLL,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    old = use_fake(shim, monkeypatch, version=23)  # CUDA 12.5
    detach.reset(old, shim)
    cap = CuptiCapture(GpuSettings())
    cap.start()
    cap.stop()
    assert old.subscribed is None and "cupti_stays_attached" in {d.code for d in cap.diagnostics}
    assert cap.settings_for_manifest()["cupti_detach"] == "not armed"
    monkeypatch.setenv("STEPSCOPE_CUPTI_DETACH", "0")
    cap = CuptiCapture(GpuSettings())
    cap.start()
    cap.stop()
    assert old.subscribed is None and cap.settings_for_manifest()["cupti_detach"] == "off"


def test_another_cupti_subscriber_keeps_cupti_attached_with_a_note(fake: FakeCupti) -> None:
    fake.subscribed = 0x1234  # e.g. the framework's own profiler subscribed earlier
    cap = CuptiCapture(GpuSettings())
    cap.start()
    cap.stop()
    assert any(d.code == "cupti_stays_attached" and "another CUPTI client" in d.message
               and "TEARDOWN_CUPTI=1" in d.message for d in cap.diagnostics)
    assert fake.finalized == 0


def test_without_a_spill_folder_records_are_decoded_at_flush(fake: FakeCupti) -> None:
    cap = CuptiCapture(GpuSettings())
    cap.start()
    t = time.time_ns()
    fake.emit(kernel(t, t + 100, name=fake.name("plain"), corr=1))
    out = cap.flush()
    assert out["kernels"]["name"] == ["plain"] and cap.raw_records == 0
    cap.stop()


def collect(folder: Path, lo: int | None = None, hi: int | None = None) -> dict[str, Any]:
    got: dict[str, Any] = {}

    def write(tables: dict[str, Any]) -> int:
        for name, cols in tables.items():
            dest = got.setdefault(name, {})
            for k, v in cols.items():
                dest.setdefault(k, []).extend(np.asarray(v).tolist() if isinstance(v, np.ndarray) else v)
        return 0

    decode_folder(folder, lo, hi, write)
    return got


def test_with_a_spill_folder_records_stay_raw_until_the_merge(fake: FakeCupti, tmp_path: Path) -> None:
    folder = tmp_path / "p1"
    cap = CuptiCapture(GpuSettings(), spill_dir=folder)
    cap.start()
    matmul, plain = fake.name("_Z6matmulPfS_i"), fake.name("plain")
    t = time.time_ns()
    fake.emit(api(L.RUNTIME, t, t + 10, cbid=211, corr=1, tid=7),
              kernel(t + 20, t + 30, name=matmul, corr=1), kernel(t + 40, t + 50, name=plain, corr=2))
    assert cap.flush() == {}  # nothing decoded in the profiled process
    assert cap.raw_records == 3 and len(list(folder.glob("cupti.*.bin"))) == 1
    fake.emit(kernel(t + 60, t + 70, name=matmul, corr=3))
    assert cap.stop() == {}
    assert cap.raw_records == 4 and len(list(folder.glob("cupti.*.bin"))) == 2
    m = cap.settings_for_manifest()
    assert m["records"] == 4 and m["records_kept_raw"] and "spill_s" in m and "decode_s" not in m
    got = collect(folder)
    assert got["kernels"]["name"] == ["matmul(float*, float*, int)", "plain",
                                      "matmul(float*, float*, int)"]
    assert got["kernels"]["correlation"] == [1, 2, 3]
    assert got["api_calls"]["name"] == ["cudaLaunchKernel"] and got["api_calls"]["tid"] == [7]


def test_a_session_keeps_records_raw_and_the_merge_decodes_them_into_the_window(
        fake: FakeCupti, tmp_path: Path) -> None:
    clock = FakeClock()
    cfg = CaptureConfig(staging=str(tmp_path / "staging"), schedule=make_schedule("3-5"))
    s = Session(cfg, clock=clock, environ={}, host_factory=lambda c, r, clk: FakeHost(clk))
    s.begin()
    name = fake.name("_Z4stepv")
    for i in range(9):  # boundaries 0..8: the backend starts at 2, the window is [3, 6]
        s.step()
        fake.emit(kernel(clock.t + 1_000_000, clock.t + 2_000_000, name=name, corr=i + 1))
        clock.t += 10_000_000
    s.finish()
    part = s.partition.path
    assert raw_files(part) and not list(part.glob("kernels.*.parquet"))
    run = Run(merge(tmp_path / "staging", tmp_path / "run", command=["x"], returncode=0))
    assert raw_files(part) == []  # decoded into chunks, then removed
    k = run.table("kernels")
    assert k.column("name").to_pylist() == ["step()"] * 3  # steps 3, 4, 5; not the warm-up step
    gpu = run.manifest.settings["ranks"]["rank0"]["gpu"]
    assert gpu["decoded"] == "at merge" and gpu["records_decoded"] >= 3 and gpu["records_kept_raw"]


def test_a_window_that_never_opens_leaves_no_gpu_records(fake: FakeCupti, tmp_path: Path) -> None:
    clock = FakeClock()
    cfg = CaptureConfig(staging=str(tmp_path / "staging"), schedule=make_schedule("3-5"))
    s = Session(cfg, clock=clock, environ={}, host_factory=lambda c, r, clk: FakeHost(clk))
    s.begin()
    for i in range(3):  # boundary 2 starts the backend for the warm-up step; the program ends
        s.step()
        fake.emit(kernel(clock.t + 1, clock.t + 2, name=fake.name("warm"), corr=i + 1))
        clock.t += 10_000_000
    s.finish()
    assert raw_files(s.partition.path) == []
    run = Run(merge(tmp_path / "staging", tmp_path / "run", command=["x"], returncode=0))
    assert "kernels" not in run.manifest.tables or run.table("kernels").num_rows == 0


def test_a_process_killed_mid_window_keeps_what_its_flushes_kept(fake: FakeCupti,
                                                                  tmp_path: Path) -> None:
    clock = FakeClock()
    cfg = CaptureConfig(staging=str(tmp_path / "staging"), schedule=make_schedule("1-1000"),
                        flush_every_s=3600)  # the test flushes by hand
    s = Session(cfg, clock=clock, environ={}, host_factory=lambda c, r, clk: FakeHost(clk))
    s.begin()
    name = fake.name("_Z4stepv")
    for i in range(6):
        s.step()
        fake.emit(kernel(clock.t + 1_000_000, clock.t + 2_000_000, name=name, corr=i + 1))
        clock.t += 10_000_000
    assert s._flush_window()  # the periodic flush: CUPTI's (partly filled) buffers kept raw
    fake.emit(kernel(clock.t, clock.t + 1, name=name, corr=99))  # never flushed: lost with the kill
    # SIGKILL: no finish(), no final flush; the launcher merges what is on disk
    run = Run(merge(tmp_path / "staging", tmp_path / "run", command=["x"], returncode=-9))
    assert run.table("kernels").num_rows == 5  # steps 1-5 (step 0 was the warm-up)
    codes = {d.code for d in run.manifest.diagnostics}
    assert "gpu_not_captured" not in codes and "partial_run" in codes
    assert run.manifest.partial


def _grown(kernel_size: int) -> dict[int, L.Layout]:
    """The 13.5 table with kernel records of another size (a CUPTI release not seen yet)."""
    t = L.layouts_for(130500)
    assert t is not None
    return {**t.table, L.CONCURRENT_KERNEL: L.Layout(kernel_size, L.LAYOUTS_13[10].fields)}


@pytest.mark.parametrize("version", [130101, 130301, 130500])
def test_later_cupti_13_releases_are_decoded_with_their_record_sizes(
        shim: ctypes.CDLL, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, version: int) -> None:
    f = use_fake(shim, monkeypatch, version=version)
    table = L.layouts_for(version)
    assert table is not None
    cap = CuptiCapture(GpuSettings(), spill_dir=tmp_path / "p")
    cap.start()
    t = time.time_ns()
    name = f.name("step")
    f.emit(*(kernel(t + i, t + i + 5, name=name, corr=i, table=table.table) for i in range(3)))
    cap.stop()
    assert not [d for d in cap.diagnostics if d.level == "error"]
    assert collect(tmp_path / "p")["kernels"]["correlation"] == [0, 1, 2]


def test_a_kind_first_met_in_a_later_buffer_with_another_size_is_never_walked(
        fake: FakeCupti) -> None:
    """Each buffer is checked against CUPTI's own iterator: kernel records of a size the table
    does not know, in a buffer after one that held only API records, are dropped with an error
    instead of being walked out of step (reading name pointers at random: a crash)."""
    cap = CuptiCapture(GpuSettings())
    cap.start()
    t = time.time_ns()
    fake.emit(api(L.RUNTIME, t, t + 10, cbid=211, corr=1))
    assert cap.flush()["api_calls"]["correlation"] == [1]
    big = _grown(248)
    fake.emit(*(kernel(t + 20 + i, t + 30 + i, name=0xDEAD0000 + i, corr=2 + i, table=big)
                for i in range(3)))
    assert "kernels" not in cap.flush()
    assert any(d.code == "cupti_layout_mismatch" and d.level == "error" for d in cap.diagnostics)
    cap.stop()


def test_a_cupti_newer_than_any_header_read_has_its_grown_records_learnt(
        shim: ctypes.CDLL, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    f = use_fake(shim, monkeypatch, version=130700)
    cap = CuptiCapture(GpuSettings(), spill_dir=tmp_path / "p")
    cap.start()
    t = time.time_ns()
    name = f.name("step")
    f.emit(*(kernel(t + i, t + i + 5, name=name, corr=i, table=_grown(264)) for i in range(3)))
    f.emit(api(L.RUNTIME, t, t + 10, cbid=211, corr=9))
    cap.stop()
    notes = [d for d in cap.diagnostics if d.code.startswith("cupti_layout")]
    assert [(d.level, "264 bytes" in d.message) for d in notes] == [("info", True)]
    got = collect(tmp_path / "p")
    assert got["kernels"]["correlation"] == [0, 1, 2] and got["api_calls"]["correlation"] == [9]


def test_records_smaller_than_the_newest_known_are_not_learnt(
        shim: ctypes.CDLL, monkeypatch: pytest.MonkeyPatch) -> None:
    f = use_fake(shim, monkeypatch, version=130700)
    cap = CuptiCapture(GpuSettings())
    cap.start()
    t = time.time_ns()
    f.emit(*(kernel(t + i, t + i + 5, name=f.name("k"), corr=i, table=_grown(232)) for i in range(2)))
    assert "kernels" not in cap.flush()
    assert any(d.code == "cupti_layout_mismatch" for d in cap.diagnostics)
    cap.stop()


def test_cupti_is_not_asked_for_dropped_records_once_it_has_detached(fake: FakeCupti) -> None:
    """CUPTI 13.4/13.5 crash when asked after cuptiFinalize; the detach runs on whichever thread
    makes the next CUDA call, possibly before the session reads the capture's diagnostics."""
    cap = CuptiCapture(GpuSettings())
    cap.start()
    fake.dropped = 5
    cap.flush()
    fake.dropped = 2
    cap.stop()
    fake.api_call()  # another thread's CUDA call: the detach runs
    assert fake.detached
    assert cap.dropped_records() == 7
    dropped = [d for d in cap.diagnostics if d.code == "cupti_records_dropped"]
    assert len(dropped) == 1 and "dropped 7 records" in dropped[0].message


def test_a_dump_keeps_the_buffers_their_strings_and_call_names(
        fake: FakeCupti, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """STEPSCOPE_CUPTI_DUMP (how the decoder's fixtures were recorded on the GPU)."""
    monkeypatch.setenv("STEPSCOPE_CUPTI_DUMP", str(tmp_path / "dump"))
    cap = CuptiCapture(GpuSettings())
    cap.start()
    t = time.time_ns()
    fake.emit(api(L.RUNTIME, t, t + 10, cbid=211, corr=1),
              kernel(t + 20, t + 30, name=fake.name("_Z4stepv"), corr=1))
    cap.flush()
    cap.stop()
    files = sorted(p.name for p in (tmp_path / "dump").iterdir())
    assert files == ["buffer-0001.bin", "meta.json"]
    assert (tmp_path / "dump" / "buffer-0001.bin").stat().st_size == 40 + 216
    meta = json.loads((tmp_path / "dump" / "meta.json").read_text())
    assert meta["cupti_api_version"] == 130001 and meta["layout"] == "13"
    assert "_Z4stepv" in meta["strings"].values()
    assert meta["api_names"]["2:211"] == "cudaLaunchKernel_v7000"


def test_records_carry_system_thread_ids_and_cupti_gets_its_type_back(fake: FakeCupti) -> None:
    """The host tables (threads, stacks, input waits) use gettid ids; CUPTI's activity records
    use pthread_self unless told otherwise: told SYSTEM for the capture, set back after it (a
    later torch.profiler capture in the process expects CUPTI's default)."""
    cap = CuptiCapture(GpuSettings())
    cap.start()
    assert fake.thread_id_type == 1
    cap.stop()
    assert fake.thread_id_type == 0
    assert ("thread_id_type", 1) in fake.log and fake.log[-1] != ("thread_id_type", 1)


@pytest.mark.parametrize("env", ["1", "always"])
def test_no_detach_after_the_program_launched_cuda_graphs_under_cupti(
        fake: FakeCupti, monkeypatch: pytest.MonkeyPatch, env: str) -> None:
    """Detaching CUPTI after a graph was launched under it made that graph's next launch fail
    (CUDA_ERROR_LAUNCH_FAILED, JAX on an H100): the capture stays attached and says why;
    STEPSCOPE_CUPTI_DETACH=always detaches anyway (to check the hazard on a GPU)."""
    from tests.capture.cupti import fake_cupti

    monkeypatch.setenv("STEPSCOPE_CUPTI_DETACH", env)
    monkeypatch.setitem(fake_cupti.CALLS, (L.DOMAIN_RUNTIME_API, 311), "cudaGraphLaunch_v10000")
    fake.shim.ss_api_graph_forget()
    try:
        cap = CuptiCapture(GpuSettings())
        cap.start()
        fake.call(L.DOMAIN_RUNTIME_API, 311, correlation=3)  # cudaGraphLaunch: counted
        fake.call(L.DOMAIN_DRIVER_API, 307, correlation=4)
        cap.stop()
        assert int(fake.shim.ss_api_graph_launches()) == 1
        diags = {d.code: d.message for d in cap.diagnostics}
        if env == "always":
            assert detach.state(fake.shim) == "armed: at the next CUDA call"
            assert "cupti_stays_attached" not in diags
        else:
            assert detach.state(fake.shim) == "idle"
            assert "CUDA graphs" in diags["cupti_stays_attached"]
            assert cap.settings_for_manifest()["cupti_detach"] == "not armed: CUDA graphs"
            assert fake.unsubscribed  # the calls' subscription let go
    finally:
        fake.shim.ss_api_graph_forget()
        detach.reset(fake, fake.shim)
