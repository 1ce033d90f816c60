"""CUPTI record decoding on buffers laid out byte for byte as libcupti writes them."""

from __future__ import annotations

import numpy as np
import pytest
from tests.capture.cupti.records import api, kernel, record

from stepscope.capture.cupti import layouts as L
from stepscope.capture.cupti.decode import DecodeContext, Decoder, drop_nested, walk_py

STRINGS = {0x1000: "_Z6matmulPfS_i", 0x2000: "forward", 0x3000: "plain_kernel"}
API_NAMES = {(2, 211): "cudaLaunchKernel_v7000", (2, 131): "cudaMemcpyAsync_v3020",
             (1, 307): "cuLaunchKernel", (2, 165): "cudaDeviceSynchronize_v3020"}


def ctx() -> DecodeContext:
    demangled = {"_Z6matmulPfS_i": "matmul(float*, float*, int)"}
    return DecodeContext(strings=STRINGS.get, api_name=lambda d, c: API_NAMES.get((d, c)),
                         demangle=lambda s: demangled.get(s, s), pid=99)


def decode(*recs: bytes, decoder: Decoder | None = None) -> tuple[Decoder, dict[str, dict]]:
    buf = np.frombuffer(b"".join(recs), dtype=np.uint8)
    kinds, offs, stop = walk_py(buf, L.size_table(L.LAYOUTS_13))
    assert stop == len(buf)
    dec = decoder or Decoder(L.LAYOUTS_13, ctx())
    dec.add(buf, kinds, offs)
    return dec, dec.tables()


def test_kernel_fields_names_and_sizes() -> None:
    _, t = decode(kernel(1_000, 1_500, name=0x1000, corr=5, grid=(132, 2, 1), block=(256, 1, 1),
                         regs=64, smem=(4096, 8192)),
                  kernel(2_000, 2_100, name=0x3000, corr=6, queued=1_900, graph_id=3))
    k = t["kernels"]
    assert list(k["ts_ns"]) == [1_000, 2_000]
    assert list(k["dur_ns"]) == [500, 100]
    assert k["name"] == ["matmul(float*, float*, int)", "plain_kernel"]
    assert list(k["grid_x"]) == [132, 4] and list(k["grid_y"]) == [2, 1]
    assert list(k["block_x"]) == [256, 128]
    assert list(k["registers"]) == [64, 32]
    assert list(k["shared_memory"]) == [12288, 3072]
    assert list(k["correlation"]) == [5, 6]
    assert k["queued_ns"] == [None, 100]
    assert k["graph_id"] == [None, 3]


def test_incomplete_kernels_are_dropped() -> None:
    _, t = decode(kernel(1_000, 0, name=0x3000, corr=1), kernel(0, 0, name=0x3000, corr=2),
                  kernel(5, 9, name=0x3000, corr=3))
    assert list(t["kernels"]["correlation"]) == [3]


def test_copies_memsets_and_sync() -> None:
    _, t = decode(
        record(L.MEMCPY, start=10, end=30, copy_kind=1, src_kind=1, dst_kind=3, bytes=4096,
               device=0, stream=7, correlation=8),
        record(L.MEMCPY, start=40, end=45, copy_kind=2, src_kind=3, dst_kind=2, bytes=64,
               device=0, stream=7, correlation=9),
        record(L.MEMCPY2, start=50, end=60, copy_kind=10, src_kind=3, dst_kind=3, bytes=1 << 20,
               device=0, stream=7, correlation=10, dst_device=1),
        record(L.MEMSET, start=70, end=71, bytes=256, memory_kind=3, device=0, stream=7, correlation=11),
        kernel(80, 90, name=0x3000, corr=12, ctx=4, device=2),
        record(L.SYNCHRONIZATION, start=100, end=200, type=3, context=4, stream=7, event=0xFFFFFFFF,
               correlation=13),
        record(L.SYNCHRONIZATION, start=300, end=310, type=1, context=4, stream=0xFFFFFFFF,
               event=5, correlation=14),
    )
    m = t["memcpy"]
    assert m["kind"] == ["HtoD", "DtoH", "PtoP"]
    assert m["src_kind"] == ["pageable", "device", "device"]
    assert m["dst_kind"] == ["device", "pinned", "device"]
    assert m["bytes"] == [4096, 64, 1 << 20]
    assert m["dst_device"] == [None, None, 1]
    assert t["memset"]["dst_kind"] == ["device"] and list(t["memset"]["bytes"]) == [256]
    s = t["sync"]
    assert s["kind"] == ["stream", "event"]
    assert s["stream"] == [7, None] and s["event_id"] == [None, 5]
    assert s["device"] == [2, 2]  # from the kernel seen on the same context


def test_api_calls_names_kinds_and_nested_driver_calls() -> None:
    _, t = decode(
        api(L.RUNTIME, 100, 200, cbid=211, corr=1),
        api(L.DRIVER, 120, 180, cbid=307, corr=2),  # the runtime's own cuLaunchKernel: dropped
        api(L.DRIVER, 300, 350, cbid=307, corr=3),  # a direct driver launch (JAX, CuPy): kept
        api(L.DRIVER, 400, 450, cbid=307, corr=4, tid=12),  # other thread: kept
        api(L.RUNTIME, 500, 900, cbid=165, corr=5),
        kernel(210, 260, name=0x3000, corr=2),  # linked to the dropped driver call
    )
    a = t["api_calls"]
    assert a["name"] == ["cudaLaunchKernel", "cudaDeviceSynchronize", "cuLaunchKernel", "cuLaunchKernel"]
    assert a["kind"] == ["launch", "sync", "launch", "launch"]
    assert a["domain"] == ["runtime", "runtime", "driver", "driver"]
    assert a["correlation"] == [1, 5, 3, 4]
    assert list(t["kernels"]["correlation"]) == [1]  # remapped to the runtime call


def test_drop_nested_keeps_everything_without_overlap() -> None:
    rt = {"tid": [1], "ts_ns": [0], "dur_ns": [10], "correlation": [1]}
    dr = {"tid": [1, 2], "ts_ns": [20, 0], "dur_ns": [5, 5], "correlation": [2, 3], "name": ["a", "b"]}
    kept, remap = drop_nested(rt, dr)
    assert kept == dr and remap == {}


def test_nvtx_ranges_pair_across_flushes_and_nest() -> None:
    def mark(flags: int, ts: int, mid: int, name: int = 0, tid: int = 11) -> bytes:
        return record(L.MARKER, flags=flags, timestamp=ts, id=mid, object_kind=L.OBJECT_THREAD,
                      pid=99, tid=tid, name=name)

    dec, t = decode(mark(L.MARKER_START, 100, 1, 0x2000), mark(L.MARKER_START, 120, 2, 0x3000),
                    mark(L.MARKER_END, 150, 2), mark(L.MARKER_INSTANTANEOUS, 160, 3, 0x3000))
    a = t["annotations"]
    assert a["name"] == ["plain_kernel", "plain_kernel"]
    assert list(a["dur_ns"]) == [30, 0]
    _, t2 = decode(mark(L.MARKER_END, 400, 1), decoder=dec)  # the outer range ends a flush later
    b = t2["annotations"]
    assert b["name"] == ["forward"] and list(b["ts_ns"]) == [100] and list(b["dur_ns"]) == [300]
    assert list(b["id"]) == [2]  # ids keep counting across flushes
    assert b["source"] == ["nvtx"] and b["tid"] == [11]


def test_overhead_records_are_summed() -> None:
    dec, t = decode(record(L.OVERHEAD, overhead_kind=2 << 16, start=10, end=30),
                    record(L.OVERHEAD, overhead_kind=2 << 16, start=40, end=45),
                    record(L.OVERHEAD, overhead_kind=7 << 16, start=0, end=100))
    assert t == {}
    assert dec.cupti_overhead_ns == {"instrumentation": 25, "activity_buffer_request": 100}


def test_walk_stops_at_an_unknown_kind() -> None:
    good = kernel(1, 2, name=0x3000, corr=1)
    bad = (54).to_bytes(4, "little") + bytes(60)
    buf = np.frombuffer(good + bad + good, dtype=np.uint8)
    kinds, offs, stop = walk_py(buf, L.size_table(L.LAYOUTS_13))
    assert list(kinds) == [L.CONCURRENT_KERNEL] and list(offs) == [0] and stop == len(good)


def test_cupti_12_layout_differs_only_in_size() -> None:
    rec = kernel(1, 5, name=0x3000, corr=9, table=L.LAYOUTS_12)
    assert len(rec) == 208
    buf = np.frombuffer(rec * 2, dtype=np.uint8)
    kinds, offs, stop = walk_py(buf, L.size_table(L.LAYOUTS_12))
    assert list(offs) == [0, 208] and stop == 416
    dec = Decoder(L.LAYOUTS_12, ctx())
    dec.add(buf, kinds, offs)
    assert list(dec.tables()["kernels"]["correlation"]) == [9, 9]


# (API version, table name, kernel/memcpy/memset record sizes, sizes read from that release's
# header): the sizes as offsetof/sizeof gave them for nvidia-cuda-cupti 13.0.85 … 13.5.25
@pytest.mark.parametrize(("version", "name", "sizes", "checked"), [
    (130000, "13", (216, 96, 88), True), (130001, "13", (216, 96, 88), True),
    (130101, "13.1", (224, 96, 88), True), (130202, "13.1", (224, 96, 88), True),
    (130301, "13.3", (232, 96, 88), True), (130401, "13.4", (248, 112, 104), True),
    (130500, "13.4", (248, 112, 104), True), (130600, "13.4", (248, 112, 104), False),
    (28, "12", (208, 96, 88), True), (19, "12", (208, 96, 88), True),
    (18, None, None, None), (100, None, None, None)])
def test_layout_choice_by_cupti_version(version: int, name: str | None,
                                        sizes: tuple[int, int, int] | None,
                                        checked: bool | None) -> None:
    got = L.layouts_for(version)
    assert (got.name if got else None) == name
    if got is not None:
        t = got.table
        assert (t[L.CONCURRENT_KERNEL].size, t[L.MEMCPY].size, t[L.MEMSET].size) == sizes
        assert got.checked == checked


def test_every_cupti_13_release_reads_its_fields_at_the_same_offsets() -> None:
    tables = [L.layouts_for(v) for v in (130000, 130100, 130300, 130400)]
    for kind, lay in L.LAYOUTS_13.items():
        for choice in tables:
            assert choice is not None and choice.table[kind].fields == lay.fields
            assert choice.table[kind].size >= lay.size  # records only grew


def test_unknown_kinds_are_counted_not_decoded() -> None:
    dec = Decoder({L.CONCURRENT_KERNEL: L.LAYOUTS_13[L.CONCURRENT_KERNEL]}, ctx())
    buf = np.frombuffer(kernel(1, 2, name=0x3000, corr=1) + api(L.RUNTIME, 1, 2, cbid=211, corr=1),
                        dtype=np.uint8)
    kinds, offs, _ = walk_py(buf, L.size_table(L.LAYOUTS_13))
    dec.add(buf, kinds, offs)
    assert set(dec.tables()) == {"kernels"} and dec.unknown_kinds == {L.RUNTIME: 1}


@pytest.mark.parametrize(("raw", "base", "kept"), [
    ("cudaLaunchKernel_v7000", "cudaLaunchKernel", True), ("cuLaunchKernel", "cuLaunchKernel", True),
    ("cudaDeviceSynchronize_v3020", "cudaDeviceSynchronize", True),
    ("cudaMemcpyAsync_v3020", "cudaMemcpyAsync", True), ("cudaMalloc_v3020", "cudaMalloc", True),
    ("cudaGetDevice_v3020", "cudaGetDevice", False), ("cudaGetLastError_v3020", "cudaGetLastError", False),
    ("cuKernelGetName", "cuKernelGetName", False)])
def test_which_api_calls_are_kept(raw: str, base: str, kept: bool) -> None:
    from stepscope.capture.cupti.decode import api_base_name, wanted_call

    assert api_base_name(raw) == base and wanted_call(raw) is kept
