"""Collectives from Kineto traces: record_param_comms and NCCL kernel args, else kernel names.

The numbers were read off the JSON by hand (``External id``, ``In msg nelems``, ``dtype``,
``ts``/``dur`` plus ``baseTimeNanoseconds``)."""

from __future__ import annotations

import collections
from pathlib import Path

import pyarrow as pa
import pytest

from stepscope.importers import import_traces
from stepscope.importers.kineto import native as kineto_native
from stepscope.importers.kineto import parse_kineto
from stepscope.store.produce.collectives import complete
from stepscope.store.run import Run

DATA = Path(__file__).parents[2] / "data"  # copies of ../shared/fixtures (PROVENANCE.md)

HTA = DATA
EXT = DATA / "external"
NCCL = HTA / "nccl_parser_config_nccl_data.json.gz"
B200 = DATA / "collectives" / "tracelens_b200_eager_trace.json.gz"
MI300 = EXT / "tracelens_mi300_resnet_act_checkpoint.json.gz"
SAMPLED = [HTA / f"trace_filter_sampled_rank-{r}.json.gz" for r in (0, 1)]
QUEUE = EXT / "hta_negative_queue_length_values_check_rank0.json.gz"
LARGE_INT = DATA / "collectives" / "hta_large_integer_trace_rank-70.pt.trace.json.gz"
DIFF = EXT / "hta_trace_diff_control_control.json.gz"


def _rows(path: Path) -> list[dict[str, object]]:
    """The rank's collectives as they are written (completed from its kernels)."""
    b = parse_kineto(path, default_rank=0)
    t = complete(b.tables.get("collectives"), b.tables["kernels"], b.rank.rank)
    assert t is not None
    return t.to_pylist()


def _count(rows: list[dict[str, object]]) -> dict[tuple[object, ...], int]:
    return dict(collections.Counter((r["source"], r["op"]) for r in rows))


def test_kernel_args_with_their_param_comms_op() -> None:
    rows = _rows(NCCL)  # 21 NCCL kernels, each with args; 27 record_param_comms (6: 'wait')
    assert _count(rows) == {("kernel_args", "all_reduce"): 15, ("kernel_args", "broadcast"): 6}
    r = next(r for r in rows if r["external_id"] == 12945)
    base = 1711964646000000000
    assert (r["name"], r["pg"], r["pg_desc"], r["pg_ranks"], r["group_size"], r["dtype"]) == (
        "allreduce", "0", "default_pg", [0, 1], 2, "Float")
    assert (r["in_elems"], r["out_elems"], r["bytes"]) == (6637568, 6637568, 6637568 * 4)
    assert r["ts_ns"] == base + 4458677009853422 and r["dur_ns"] == 2636669  # the kernel
    assert r["host_ts_ns"] == base + 4458677009788685  # its record_param_comms op
    assert (r["stream"], r["correlation"], r["kernels"]) == (40, 60047, 1)
    assert (r["algorithm"], r["protocol"]) == ("RING", "LL")
    # a broadcast kernel is a byte kernel (int8_t): the type is the args' (Long here)
    b = next(r for r in rows if r["external_id"] == 172)
    assert (b["op"], b["dtype"], b["in_elems"], b["bytes"]) == ("broadcast", "Long", 53, 424)


def test_allgather_args_and_symmetric_memory_all_reduces() -> None:
    rows = _rows(B200)
    assert _count(rows) == {("kernel_args", "all_gather"): 1, ("kernel_name", "all_reduce"): 73}
    r = next(r for r in rows if r["source"] == "kernel_args")
    base = 1767189312000000000
    assert (r["name"], r["pg"], r["group_size"], r["pg_ranks"]) == (
        "_allgather_base", "3", 8, list(range(8)))
    assert (r["dtype"], r["in_elems"], r["out_elems"]) == ("BFloat16", 25136, 201088)
    assert r["bytes"] == 201088 * 2  # all-gather: the output
    assert (r["external_id"], r["correlation"], r["stream"]) == (4802, 15270, 7)
    assert r["ts_ns"] == base + 1365627949863953 and r["dur_ns"] == 21953
    assert (r["host_ts_ns"], r["host_dur_ns"]) == (base + 1365627949735404, 190881)


def test_rccl_generic_kernels() -> None:
    rows = _rows(MI300)  # 17 ncclDevKernel_Generic: 12 with args, 5 without
    assert _count(rows) == {("kernel_args", "all_reduce"): 6, ("kernel_args", "broadcast"): 6,
                            ("kernel_name", "other"): 5}
    r = next(r for r in rows if r["external_id"] == 1290)
    assert (r["dtype"], r["group_size"], r["in_elems"], r["bytes"]) == (
        "BFloat16", 8, 2873320, 2873320 * 2)
    assert r["kernels"] == 1 and r["algorithm"] is None  # Generic: the name says nothing


@pytest.mark.parametrize("path, kernels", [(SAMPLED[0], 10), (SAMPLED[1], 10), (QUEUE, 80)])
def test_record_param_comms_without_args_falls_back_to_kernel_names(path: Path,
                                                                   kernels: int) -> None:
    b = parse_kineto(path, default_rank=0)
    assert "collectives" not in b.tables  # its record_param_comms carry no arguments
    rows = _rows(path)
    assert _count(rows) == {("kernel_name", "send_recv"): kernels}
    assert {(r["algorithm"], r["protocol"]) for r in rows} == {("RING", "SIMPLE")}


def test_a_64_bit_comms_id_does_not_break_the_import() -> None:
    rows = _rows(LARGE_INT)  # record_param_comms with only "Comms Id": 10159970886766084423
    assert [(r["op"], r["source"], r["ts_ns"], r["dur_ns"]) for r in rows] == [
        ("all_reduce", "kernel_name", 100_000, 50_000)]


def test_both_readers_give_the_same_collectives() -> None:
    if kineto_native.EXTENSION is None:
        pytest.skip("the compiled scanner is not built")
    for path in (NCCL, B200, MI300, DIFF):
        # small chunks: the compiled scanner reads all but the first (a whole decode)
        fast = parse_kineto(path, default_rank=0, chunk_bytes=50_000, native=True)
        slow = parse_kineto(path, default_rank=0, chunk_bytes=50_000, native=False)
        a, b = fast.tables.get("collectives"), slow.tables.get("collectives")
        assert (a is None) == (b is None), path.name
        if a is not None and b is not None:
            assert _plain(a).equals(_plain(b)), path.name


def test_the_scanner_reads_the_chunks_with_collectives(monkeypatch: pytest.MonkeyPatch) -> None:
    if kineto_native.EXTENSION is None:
        pytest.skip("the compiled scanner is not built")
    scanned: list[int] = []
    real = kineto_native.scan

    def counting(*args: object, **kw: object) -> kineto_native.Scanned | None:
        got = real(*args, **kw)  # type: ignore[arg-type]
        if got is not None:
            scanned.append(len(got.comm))
        return got

    monkeypatch.setattr(kineto_native, "scan", counting)
    t = parse_kineto(NCCL, default_rank=0, chunk_bytes=50_000, native=True).tables["collectives"]
    assert t.num_rows == 21
    assert sum(scanned) >= 21  # the calls came through the scanner, not a fallback


def _plain(t: pa.Table) -> pa.Table:
    return pa.table({n: c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c
                     for n, c in zip(t.column_names, t.columns)})


def test_two_ranks_imported_each_get_their_collectives(tmp_path: Path) -> None:
    run = Run(import_traces(SAMPLED, tmp_path / "run"))
    t = run.table("collectives")
    assert dict(collections.Counter(t.column("rank").to_pylist())) == {0: 10, 1: 10}
    assert set(t.column("op").to_pylist()) == {"send_recv"}
    assert not [d for d in run.manifest.diagnostics if "collectives" in d.message]


def _synthetic(tmp_path: Path, n: int) -> Path:
    """``n`` all-reduces: a record_param_comms op (every third with an escaped name, every
    fifth without arguments) and its kernel (every other one with the args of torch 2.4+)."""
    events = []
    for i in range(n):
        name = "record\\u005fparam_comms" if i % 3 == 0 else "record_param_comms"
        args = ('"External id": %d' % (100 + i)) + ("" if i % 5 == 0 else (
            ', "Collective name": "allreduce", "In msg nelems": %d, "Out msg nelems": %d, '
            '"Group size": 4, "dtype": "BFloat16", "Process Group Name": "0", '
            '"Process Group Ranks": "[0, 1, 2, 3]"' % (1000 + i, 1000 + i)))
        events.append('{"ph": "X", "cat": "cpu_op", "name": "%s", "pid": 1, "tid": 1, '
                      '"ts": %d.5, "dur": 3, "args": {%s}}' % (name, 10 * i, args))
        kargs = ('"External id": %d, "device": 0, "stream": 20, "correlation": %d'
                 % (100 + i, 500 + i))
        if i % 2:
            kargs += (', "Collective name": "allreduce", "In msg nelems": %d, "Out msg nelems":'
                      ' %d, "dtype": "BFloat16", "Seq": %d' % (1000 + i, 1000 + i, i))
        events.append('{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_'
                      'RING_LL(ncclDevKernelArgsStorage<4096ul>)", "pid": 0, "tid": 20, '
                      '"ts": %d, "dur": 4, "args": {%s}}' % (10 * i + 5, kargs))
    path = tmp_path / "t.json"
    path.write_text('{"schemaVersion": 1, "traceEvents": [\n' + ",\n".join(events) + "\n]}")
    return path


def test_synthetic_calls_through_both_readers(tmp_path: Path) -> None:
    path = _synthetic(tmp_path, 60)
    slow = parse_kineto(path, default_rank=0, chunk_bytes=4000, native=False)
    t = complete(slow.tables["collectives"], slow.tables["kernels"], 0)
    assert t is not None
    rows = t.to_pylist()
    # 60 calls: 12 ops without arguments, whose kernels carry none either when i is even
    # (i = 0, 10, ..., 50): those 6 kernels are named only
    assert _count(rows) == {("kernel_args", "all_reduce"): 30,
                            ("param_comms", "all_reduce"): 24, ("kernel_name", "all_reduce"): 6}
    r = next(r for r in rows if r["external_id"] == 107)  # i = 7: both, the kernel's Seq
    assert (r["in_elems"], r["bytes"], r["seq"], r["pg_ranks"], r["group_size"]) == (
        1007, 2014, 7, [0, 1, 2, 3], 4)
    assert (r["ts_ns"], r["dur_ns"], r["host_ts_ns"], r["host_dur_ns"]) == (75_000, 4_000,
                                                                           70_500, 3_000)
    r = next(r for r in rows if r["external_id"] == 106)  # i = 6: escaped name, op args only
    assert (r["source"], r["in_elems"], r["seq"], r["correlation"]) == ("param_comms", 1006,
                                                                      None, 506)
    if kineto_native.EXTENSION is not None:
        fast = parse_kineto(path, default_rank=0, chunk_bytes=4000, native=True)
        assert _plain(fast.tables["collectives"]).equals(_plain(slow.tables["collectives"]))


def test_a_scanner_built_from_older_sources_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """An extension from before the collectives (17 items, no communication spans) would drop
    the kernel args it scanned: its chunks go to msgspec instead."""
    if kineto_native.EXTENSION is None:
        pytest.skip("the compiled scanner is not built")
    real = kineto_native.EXTENSION

    class Old:
        @staticmethod
        def scan(*args: object) -> object:
            got = real.scan(*args)
            return None if got is None else got[:14] + got[15:]  # without the comm spans

    monkeypatch.setattr(kineto_native, "EXTENSION", Old)
    t = parse_kineto(NCCL, default_rank=0, chunk_bytes=50_000, native=True).tables["collectives"]
    assert t.num_rows == 21


def test_odd_argument_values_read_as_unknown(tmp_path: Path) -> None:
    # counts that are text, negative or beyond what bytes can hold, a list for a group size, a
    # dict for a dtype, an unparseable rank list, a 70-bit sequence number on the
    # record_param_comms op (its kernel has no arguments): nulls, no error
    import gzip
    import json

    ev = [{"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0,
           "dur": 1000, "args": {}},
          {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1,
           "ts": 10, "dur": 5, "args": {
               "External id": 7, "Collective name": "allreduce", "In msg nelems": "abc",
               "Out msg nelems": -5, "Group size": [1, 2], "dtype": {"x": 1},
               "Process Group Ranks": "[0, 1, x]", "Seq": 2 ** 70}},
          {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)",
           "pid": 0, "tid": 7, "ts": 20, "dur": 50, "args": {
               "External id": 7, "correlation": 3, "device": 0, "stream": 7}}]
    path = tmp_path / "odd.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": ev}, f)
    (row,) = Run(import_traces([path], tmp_path / "run")).table("collectives").to_pylist()
    assert row["op"] == "all_reduce" and row["kernels"] == 1 and row["source"] == "param_comms"
    assert [row[k] for k in ("in_elems", "out_elems", "bytes", "group_size", "pg_ranks", "seq")] \
        == [None] * 6
