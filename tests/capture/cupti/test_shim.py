"""The C buffer shim: callbacks, bounded memory, the record walk and its check (CPU only)."""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import numpy as np
import pytest
from tests.capture.cupti.records import api, kernel, replay_iterator

from stepscope.capture.cupti import layouts as L
from stepscope.capture.cupti.decode import walk_py
from stepscope.capture.cupti.native import Unavailable, build_shim, load_shim

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="no C compiler")


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    # a private copy: the shim keeps process-wide state
    path = build_shim(tmp_path_factory.mktemp("shim"))
    return load_shim(path)


def request(shim: ctypes.CDLL) -> tuple[int, int]:
    buf, size, maxrec = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_size_t()
    shim.ss_buffer_requested(ctypes.byref(buf), ctypes.byref(size), ctypes.byref(maxrec))
    return int(buf.value or 0), int(size.value)


def stats(shim: ctypes.CDLL) -> list[int]:
    out = (ctypes.c_uint64 * 8)()
    shim.ss_stats(out)
    return list(out)


def test_buffers_flow_and_memory_is_capped(shim: ctypes.CDLL) -> None:
    assert shim.ss_configure(8192, 16384) == 0
    b1, s1 = request(shim)
    b2, _ = request(shim)
    b3, s3 = request(shim)
    assert b1 and b2 and s1 == 8192
    assert b3 == 0 and s3 == 0  # the cap: CUPTI will drop records rather than grow memory
    assert stats(shim)[2] == 1  # refused
    payload = kernel(1, 2, name=1, corr=3)
    ctypes.memmove(b1, payload, len(payload))
    shim.ss_buffer_completed(None, 0, b1, 8192, len(payload))
    shim.ss_buffer_completed(None, 0, b2, 8192, 0)  # empty: straight back to the free list
    bufs, valid = (ctypes.c_void_p * 4)(), (ctypes.c_size_t * 4)()
    assert shim.ss_take(bufs, valid, 4) == 1
    assert bufs[0] == b1 and valid[0] == len(payload)
    assert ctypes.string_at(bufs[0], valid[0]) == payload
    assert shim.ss_take(bufs, valid, 4) == 0
    shim.ss_release(bufs[0], valid[0])
    again, _ = request(shim)
    assert again in (b1, b2)  # reused, not allocated
    shim.ss_release(again, 0)
    shim.ss_trim()
    assert stats(shim)[4] == 0  # every buffer freed


@pytest.fixture
def own_shim(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    return load_shim(build_shim(tmp_path_factory.mktemp("own-shim")))  # fresh state


def test_buffers_reach_cupti_zero_filled_also_when_reused(own_shim: ctypes.CDLL) -> None:
    # CUPTI is told the buffers come zero-filled (it does not zero them itself, in the program's
    # thread): a buffer handed back, written or not, must come out again all zero
    shim = own_shim
    size = 3 * 4096
    assert shim.ss_configure(size, 2 * size) == 0
    assert shim.ss_prepare(1) == 1 and stats(shim)[4] == size  # one made ahead, within the cap
    b1, _ = request(shim)
    b2, _ = request(shim)  # a fresh one
    assert ctypes.string_at(b1, size) == ctypes.string_at(b2, size) == bytes(size)
    payload = kernel(1, 2, name=1, corr=3) * 30  # past the first page
    ctypes.memmove(b1, payload, len(payload))
    ctypes.memset(b1 + size - 8, 0xAB, 8)  # a byte past the records: cleared too
    shim.ss_buffer_completed(None, 0, b1, size, len(payload))
    ctypes.memset(b2, 0xCD, 16)  # written, then handed back empty
    shim.ss_buffer_completed(None, 0, b2, size, 0)
    bufs, valid = (ctypes.c_void_p * 4)(), (ctypes.c_size_t * 4)()
    assert shim.ss_take(bufs, valid, 4) == 1
    shim.ss_release(bufs[0], valid[0])
    got = {request(shim)[0] for _ in range(2)}
    assert got == {b1, b2}
    for b in got:
        assert ctypes.string_at(b, size) == bytes(size)
    assert shim.ss_prepare(4) == 0  # the cap: nothing more made
    for b in got:
        shim.ss_buffer_completed(None, 0, b, size, 0)
    shim.ss_trim()
    assert stats(shim)[4] == 0


def test_walk_matches_the_python_walk(shim: ctypes.CDLL) -> None:
    data = b"".join([kernel(1, 2, name=1, corr=1), api(L.RUNTIME, 1, 2, cbid=211, corr=1)] * 50)
    data += (54).to_bytes(4, "little") + bytes(12)  # an unknown kind ends the walk
    raw = ctypes.create_string_buffer(data, len(data))
    sizes = (ctypes.c_uint32 * 64)(*L.size_table(L.LAYOUTS_13))
    kinds = np.empty(200, dtype=np.uint32)
    offs = np.empty(200, dtype=np.uint64)
    stop = ctypes.c_size_t()
    n = shim.ss_walk(ctypes.addressof(raw), len(data), sizes,
                     kinds.ctypes.data_as(ctypes.POINTER(ctypes.c_uint32)),
                     offs.ctypes.data_as(ctypes.POINTER(ctypes.c_uint64)), 200, ctypes.byref(stop))
    pk, po, pstop = walk_py(np.frombuffer(data, dtype=np.uint8), L.size_table(L.LAYOUTS_13))
    assert n == 100 and list(kinds[:n]) == list(pk) and list(offs[:n]) == list(po)
    assert stop.value == pstop == len(data) - 16


def test_check_walk_finds_a_wrong_size(shim: ctypes.CDLL) -> None:
    k, a = kernel(1, 2, name=1, corr=1), api(L.RUNTIME, 1, 2, cbid=211, corr=1)
    data = k + a + k
    raw = ctypes.create_string_buffer(data, len(data))
    base = ctypes.addressof(raw)
    starts = [0, len(k), len(k) + len(a)]

    replay = replay_iterator(base, starts)
    fn = ctypes.cast(replay, ctypes.c_void_p)
    good = (ctypes.c_uint32 * 64)(*L.size_table(L.LAYOUTS_13))
    kind, stride, learnt = ctypes.c_uint32(), ctypes.c_uint64(), ctypes.c_uint32()
    args = (ctypes.byref(kind), ctypes.byref(stride), ctypes.byref(learnt))
    assert shim.ss_check_walk(fn, base, len(data), good, *args) == -1 and learnt.value == 0
    wrong = (ctypes.c_uint32 * 64)(*L.size_table(L.LAYOUTS_12))  # 208-byte kernels
    assert shim.ss_check_walk(fn, base, len(data), wrong, *args) == 0
    assert kind.value == L.CONCURRENT_KERNEL and stride.value == 216
    no_runtime = (ctypes.c_uint32 * 64)(*L.size_table(L.LAYOUTS_13))
    no_runtime[L.RUNTIME] = no_runtime[L.CONCURRENT_KERNEL] = 0  # kinds it does not know: learnt
    assert shim.ss_check_walk(fn, base, len(data), no_runtime, *args) == -1
    assert learnt.value == 2 and no_runtime[L.RUNTIME] == len(a) and no_runtime[L.CONCURRENT_KERNEL] == len(k)


def test_build_without_a_compiler_says_so(tmp_path: Path) -> None:
    with pytest.raises(Unavailable, match="could not build"):
        build_shim(tmp_path, compiler=str(tmp_path / "no-such-cc"))


def test_a_prebuilt_library_of_another_abi_is_not_used(tmp_path: Path) -> None:
    from stepscope.capture.cupti import native

    built = build_shim(tmp_path / "ok")
    assert native._abi(built) == native.SHIM_ABI
    old = tmp_path / "old.c"  # a library without ss_abi_version, as shims before it were
    old.write_text("int ss_take(void) { return 0; }\n")
    lib = tmp_path / "old.so"
    import subprocess
    subprocess.run([shutil.which("cc") or "gcc", "-shared", "-fPIC", "-o", str(lib), str(old)], check=True)
    assert native._abi(lib) is None


def scan(shim: ctypes.CDLL, data: bytes, start: int = 0, cap: int = 64,
         sizes: list[int] | None = None) -> tuple[int, list[int], list[int], int]:
    """ss_scan over ``data``: (records, counts per kind, new pointers, stop)."""
    from stepscope.capture.cupti.spill import string_fields

    raw = ctypes.create_string_buffer(data, len(data))
    a, b = string_fields(L.LAYOUTS_13)
    counts = (ctypes.c_uint64 * 64)()
    new = (ctypes.c_uint64 * cap)()
    n_new, stop = ctypes.c_size_t(), ctypes.c_size_t()
    n = shim.ss_scan(ctypes.addressof(raw), len(data), start,
                     (ctypes.c_uint32 * 64)(*(sizes or L.size_table(L.LAYOUTS_13))),
                     (ctypes.c_uint32 * 64)(*a), (ctypes.c_uint32 * 64)(*b), counts, new, cap,
                     ctypes.byref(n_new), ctypes.byref(stop))
    return int(n), list(counts), list(new[: n_new.value]), int(stop.value)


def test_scan_counts_records_and_reports_each_name_pointer_once(shim: ctypes.CDLL) -> None:
    from tests.capture.cupti.records import record

    shim.ss_seen_reset()
    marker = record(L.MARKER, name=0x7000, flags=L.MARKER_START, id=1)
    data = (kernel(1, 2, name=0x5000, corr=1) + api(L.RUNTIME, 1, 2, cbid=211, corr=1)
            + kernel(3, 4, name=0x6000, corr=2) + kernel(5, 6, name=0x5000, corr=3) + marker
            + record(L.MARKER, name=0, flags=L.MARKER_END, id=1))
    n, counts, new, stop = scan(shim, data)
    assert n == 6 and stop == len(data)
    assert counts[L.CONCURRENT_KERNEL] == 3 and counts[L.RUNTIME] == 1 and counts[L.MARKER] == 2
    assert new == [0x5000, 0x6000, 0x7000]  # in order of first sight; null pointers never
    assert scan(shim, data)[2] == []  # seen: not reported again
    shim.ss_seen_reset()
    assert scan(shim, data)[2] == [0x5000, 0x6000, 0x7000]


def test_scan_stops_before_a_record_whose_names_would_not_fit_and_resumes(shim: ctypes.CDLL) -> None:
    shim.ss_seen_reset()
    data = b"".join(kernel(i, i + 1, name=0x1000 + 8 * i, corr=i) for i in range(5))
    n, counts, new, stop = scan(shim, data, cap=4)  # a kernel needs room for 2 (two fields)
    assert n == 3 and new == [0x1000, 0x1008, 0x1010] and stop == 3 * len(kernel(0, 1, name=1, corr=1))
    n2, counts2, new2, stop2 = scan(shim, data, start=stop, cap=4)
    assert n2 == 2 and new2 == [0x1018, 0x1020] and stop2 == len(data)
    assert counts[L.CONCURRENT_KERNEL] + counts2[L.CONCURRENT_KERNEL] == 5


def test_scan_stops_at_an_unknown_kind(shim: ctypes.CDLL) -> None:
    shim.ss_seen_reset()
    k = kernel(1, 2, name=0x10, corr=1)
    data = k + (54).to_bytes(4, "little") + bytes(12)
    n, counts, _, stop = scan(shim, data)
    assert n == 1 and stop == len(k) and counts[L.CONCURRENT_KERNEL] == 1


def test_frames_are_written_whole(shim: ctypes.CDLL, tmp_path: Path) -> None:
    import os

    path = tmp_path / "f.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    payloads = [b"abc" * 1000, b"", bytes(range(256)) * 40]
    for p in payloads:
        raw = ctypes.create_string_buffer(p, len(p))
        assert shim.ss_write_frame(fd, ctypes.addressof(raw), len(p)) == 0
    os.close(fd)
    blob = path.read_bytes()
    off, got = 0, []
    while off < len(blob):
        assert blob[off:off + 8] == b"SSCUPTI1"
        n = int.from_bytes(blob[off + 8:off + 16], "little")
        got.append(blob[off + 16:off + 16 + n])
        off += 16 + n
    assert got == payloads
    assert shim.ss_write_frame(-1, ctypes.addressof(raw), 3) < 0  # a bad file: -errno, no crash


def test_gil_held_calls_the_same_function_without_releasing_the_gil() -> None:
    """The switches of CUPTI are called through a PYFUNCTYPE of the same address (the GIL
    stays held); a stand-in object is returned as it is."""
    import ctypes

    from stepscope.capture.cupti.native import gil_held

    libc = ctypes.CDLL("libc.so.6")
    fn = libc.abs
    fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
    held = gil_held(fn)
    assert held is not fn and held(-7) == 7
    assert type(held)._flags_ & ctypes._FUNCFLAG_PYTHONAPI  # type: ignore[attr-defined]
    stand_in = object()
    assert gil_held(stand_in) is stand_in
