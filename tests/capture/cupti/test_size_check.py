"""``check_sizes``: a buffer's record sizes against CUPTI's iterator (replayed), through the shim."""

from __future__ import annotations

import ctypes
import shutil

import pytest
from tests.capture.cupti.records import api, kernel, replay_iterator

from stepscope.capture.cupti import layouts as L
from stepscope.capture.cupti.native import build_shim, load_shim
from stepscope.capture.cupti.size_check import SizeCheck, check_sizes

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="no C compiler")


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    return load_shim(build_shim(tmp_path_factory.mktemp("shim")))


def check(shim: ctypes.CDLL, records: list[bytes], version: int) -> tuple[SizeCheck, list[int]]:
    data = b"".join(records)
    raw = ctypes.create_string_buffer(data, len(data))
    base = ctypes.addressof(raw)
    starts = [sum(len(r) for r in records[:i]) for i in range(len(records))]
    replay = replay_iterator(base, starts)
    choice = L.layouts_for(version)
    assert choice is not None
    sizes = (ctypes.c_uint32 * 64)(*L.size_table(choice.table))
    got = check_sizes(shim, ctypes.cast(replay, ctypes.c_void_p).value or 0, base, len(data),
                      sizes, choice)
    return got, list(sizes)


def grown(size: int) -> dict[int, L.Layout]:
    return {**L.LAYOUTS_13, L.CONCURRENT_KERNEL: L.Layout(size, L.LAYOUTS_13[10].fields)}


def records(kernel_size: int) -> list[bytes]:
    return [kernel(1, 2, name=1, corr=1, table=grown(kernel_size)),
            api(L.RUNTIME, 1, 2, cbid=211, corr=1),
            kernel(3, 4, name=1, corr=2, table=grown(kernel_size))]


def test_sizes_as_the_table_says_pass(shim: ctypes.CDLL) -> None:
    got, sizes = check(shim, records(248), 130500)
    assert got == SizeCheck(True)
    assert sizes[L.CONCURRENT_KERNEL] == 248


def test_a_release_whose_header_was_read_is_held_to_it(shim: ctypes.CDLL) -> None:
    got, _ = check(shim, records(264), 130500)
    assert not got.ok and got.bad == (L.CONCURRENT_KERNEL, 264, 248)


def test_a_newer_release_has_grown_records_learnt_but_not_shrunk_ones(shim: ctypes.CDLL) -> None:
    got, sizes = check(shim, records(264), 130600)
    assert got.ok and got.grown == ((L.CONCURRENT_KERNEL, 264, 248),)
    assert sizes[L.CONCURRENT_KERNEL] == 264
    got, _ = check(shim, records(240), 130600)
    assert not got.ok and got.bad == (L.CONCURRENT_KERNEL, 240, 248)


def test_a_record_of_a_kind_past_the_table_is_a_mismatch_not_an_error(shim: ctypes.CDLL) -> None:
    bogus = bytearray(kernel(1, 2, name=1, corr=1))
    bogus[0:4] = (200).to_bytes(4, "little")  # no such kind: CUPTI's iterator still steps over it
    got, _ = check(shim, [bytes(bogus), api(L.RUNTIME, 1, 2, cbid=211, corr=1)], 130001)
    assert not got.ok and got.bad == (200, len(bogus), 0)
