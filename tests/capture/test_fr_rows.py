"""Flight-recorder entries -> ``collectives`` rows, on synthetic dumps.

The entries follow ``FlightRecorder<EventType>::getCollectiveTrace`` in
``torch/csrc/distributed/c10d/FlightRecorderDetail.hpp`` (pytorch commit 1189309e9a32, the
format torch 2.11-2.13 dump, version "2.10"): one dict per call with record_id, pg_id,
process_group = (name, desc), collective_seq_id, p2p_seq_id, op_id, profiling_name,
time_created_ns, input_sizes/input_dtypes, output_sizes/output_dtypes, state, is_p2p ...;
pg_config = {name: {"name", "desc", "ranks": "[0, 1]"}}. The expected rows are worked out by
hand from the sizes (elements x bytes per element).
"""

from __future__ import annotations

from typing import Any

import pytest

from stepscope.capture.fr_rows import (
    collective_rows,
    config_ranks,
    merge_entries,
    op_of,
    parse_ranks,
)
from stepscope.schema_enums import CollectiveOp
from stepscope.store.writer import conform

T0 = 1_795_000_000_000_000_000  # CLOCK_REALTIME ns, as c10::getTime() gives on Linux


def entry(rid: int, name: str, t: int, ins: list[list[int]], in_types: list[str],
          outs: list[list[int]] | None = None, out_types: list[str] | None = None,
          pg: tuple[str, str] = ("0", "default_pg"), seq: int = 0, p2p_seq: int = 0,
          is_p2p: bool = False) -> dict[str, Any]:
    return {"record_id": rid, "pg_id": int(pg[0]) if pg[0].isdigit() else 9, "process_group": pg,
            "thread_name": "pt_main_thread", "thread_id": "1", "collective_seq_id": seq,
            "p2p_seq_id": p2p_seq, "op_id": rid + 1, "profiling_name": name,
            "time_created_ns": t, "input_sizes": ins, "input_dtypes": in_types,
            "output_sizes": ins if outs is None else outs,
            "output_dtypes": in_types if out_types is None else out_types,
            "state": "completed", "time_discovered_started_ns": None,
            "time_discovered_completed_ns": None, "retired": True, "timeout_ms": 600000,
            "is_p2p": is_p2p}


def test_op_names_of_the_nccl_and_gloo_process_groups() -> None:
    cases = {
        "nccl:all_reduce": CollectiveOp.ALL_REDUCE,
        "nccl:all_reduce_coalesced": CollectiveOp.ALL_REDUCE,
        "nccl:_allgather_base": CollectiveOp.ALL_GATHER,
        "nccl:all_gather_into_tensor_coalesced": CollectiveOp.ALL_GATHER,
        "gloo:all_gather": CollectiveOp.ALL_GATHER,
        "nccl:reduce_scatter_tensor_coalesced": CollectiveOp.REDUCE_SCATTER,
        "nccl:_reduce_scatter_base": CollectiveOp.REDUCE_SCATTER,
        "nccl:all_to_all": CollectiveOp.ALL_TO_ALL,
        "nccl:alltoall_base": CollectiveOp.ALL_TO_ALL,
        "nccl:broadcast": CollectiveOp.BROADCAST,
        "nccl:_broadcast_oop": CollectiveOp.BROADCAST,
        "nccl:reduce": CollectiveOp.REDUCE,
        "nccl:send 0->1": CollectiveOp.SEND,
        "nccl:recv 0<-1": CollectiveOp.RECV,
        "gloo:barrier": CollectiveOp.BARRIER,
        "nccl:all_reduce_barrier": CollectiveOp.BARRIER,
        "nccl:something_new": CollectiveOp.OTHER,
    }
    assert {n: op_of(n) for n in cases} == cases
    assert op_of("nccl:coalesced", is_p2p=True) is CollectiveOp.SEND_RECV  # batch_isend_irecv
    assert op_of("nccl:coalesced", is_p2p=False) is CollectiveOp.OTHER


def test_rows_have_sizes_bytes_groups_and_sequence_numbers() -> None:
    entries = [
        # DDP bucket: 25 MiB of bf16 = 13,107,200 elements
        entry(0, "nccl:all_reduce", T0 + 100, [[13_107_200]], ["BFloat16"], seq=7),
        # FSDP all-gather of two shards on a 4-rank group: bytes = the output, 2 x 4 x 1000 x 4
        entry(1, "nccl:all_gather_into_tensor_coalesced", T0 + 200, [[1000], [1000]],
              ["Float", "Float"], [[4000], [4000]], ["Float", "Float"],
              pg=("3", "fsdp"), seq=2),
        # reduce-scatter: bytes = the input, 4000 x 2
        entry(2, "nccl:reduce_scatter_tensor_coalesced", T0 + 300, [[4000]], ["BFloat16"],
              [[1000]], ["BFloat16"], pg=("3", "fsdp"), seq=3),
        # p2p: the p2p sequence number; recv counts its output
        entry(3, "nccl:send 0->1", T0 + 400, [[8, 16]], ["Half"], pg=("0", "default_pg"),
              seq=0, p2p_seq=5, is_p2p=True),
        entry(4, "nccl:recv 0<-1", T0 + 500, [[10]], ["Long"], pg=("0", "default_pg"),
              p2p_seq=6, is_p2p=True),
        # gloo barrier: no tensors, no GPU
        entry(5, "gloo:barrier", T0 + 600, [], [], seq=8),
    ]
    pg_ranks = {"0": [0, 1, 2, 3], "3": [0, 2, 4, 6]}
    conv = collective_rows(entries, rank=2, lo=T0, hi=T0 + 1000, pg_ranks=pg_ranks, device=1)
    c = conv.columns
    assert conv.rows == 6 and (conv.before, conv.after, conv.unreadable) == (0, 0, 0)
    assert c["op"] == ["all_reduce", "all_gather", "reduce_scatter", "send", "recv", "barrier"]
    assert c["name"][0] == "nccl:all_reduce" and c["name"][5] == "gloo:barrier"
    assert c["bytes"] == [26_214_400, 32_000, 8_000, 256, 80, 0]
    assert c["in_elems"] == [13_107_200, 2000, 4000, 128, 10, 0]
    assert c["out_elems"] == [13_107_200, 8000, 1000, 128, 10, 0]
    assert c["dtype"] == ["BFloat16", "Float", "BFloat16", "Half", "Long", None]
    assert c["seq"] == [7, 2, 3, 5, 6, 8]
    assert c["pg"] == ["0", "3", "3", "0", "0", "0"]
    assert c["pg_desc"][1] == "fsdp"
    assert c["pg_ranks"][1] == [0, 2, 4, 6] and c["group_size"] == [4] * 6
    assert c["device"] == [1, 1, 1, 1, 1, None]  # the gloo call ran on no GPU
    assert c["ts_ns"] == c["host_ts_ns"] == [T0 + 100 * k for k in range(1, 7)]
    assert c["dur_ns"] == [0] * 6 and c["kernels"] == [0] * 6 and c["host_dur_ns"] == [None] * 6
    assert set(c["source"]) == {"flight_recorder"} and set(c["rank"]) == {2}
    t = conform("collectives", c)  # the schema's types (64-bit sizes, int32 rank lists)
    assert t.num_rows == 6 and t.column("bytes").to_pylist()[0] == 26_214_400


def test_the_window_keeps_calls_created_inside_it_in_creation_order() -> None:
    entries = [entry(0, "nccl:all_reduce", T0 - 1, [[4]], ["Float"], seq=1),
               entry(2, "nccl:all_reduce", T0 + 50, [[4]], ["Float"], seq=3),
               entry(1, "nccl:broadcast", T0 + 10, [[4]], ["Float"], seq=2),
               entry(3, "nccl:all_reduce", T0 + 101, [[4]], ["Float"], seq=4),
               {"record_id": 4, "profiling_name": "nccl:all_reduce"}]  # no time: unreadable
    conv = collective_rows(entries, rank=0, lo=T0, hi=T0 + 100)
    assert conv.columns["seq"] == [2, 3]  # sorted by creation time (threads may interleave ids)
    assert (conv.before, conv.after, conv.unreadable) == (1, 1, 1)
    # on another clock: offset applied before the window test
    shifted = collective_rows(entries, rank=0, lo=T0 + 1000, hi=T0 + 1100, offset_ns=1000)
    assert shifted.columns["seq"] == [2, 3]
    assert shifted.columns["host_ts_ns"] == [T0 + 1010, T0 + 1050]


def test_unknown_sizes_stay_unknown_rather_than_zero() -> None:
    e = entry(0, "nccl:all_reduce", T0, [[3, 5]], ["SomeNewType"])
    old = {k: v for k, v in entry(1, "nccl:all_reduce", T0, [[2]], ["Float"]).items()
           if k not in ("input_dtypes", "output_dtypes", "is_p2p", "collective_seq_id")}
    old["seq_id"] = 4  # torch < 2.4 named it seq_id
    c = collective_rows([e, old], rank=0, lo=T0, hi=T0).columns
    assert c["in_elems"] == [15, 2] and c["bytes"] == [None, None]
    assert c["dtype"] == ["SomeNewType", None] and c["seq"] == [0, 4]
    assert c["pg_ranks"] == [None, None] and c["group_size"] == [None, None]


def test_pg_config_ranks() -> None:
    assert parse_ranks("[0, 1, 2, 3]") == [0, 1, 2, 3]
    assert parse_ranks([4, 6]) == [4, 6]
    assert parse_ranks("[]") is None and parse_ranks(None) is None and parse_ranks("[a]") is None
    cfg = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"},
           "": {"name": "", "desc": "", "ranks": "[]"},  # gloo's empty config
           "5": {"name": "5", "desc": "tp", "ranks": "[1, 3]"}}
    assert config_ranks(cfg) == {"0": [0, 1], "5": [1, 3]}
    assert config_ranks(None) == {}


def test_one_call_seen_in_two_dumps_is_kept_once() -> None:
    a = entry(0, "nccl:all_reduce", T0, [[4]], ["Float"], seq=1)
    b = entry(0, "gloo:all_reduce", T0, [[4]], ["Float"], seq=1)  # other recorder, same ids
    merged = merge_entries([[a, b], [dict(a, process_group=["0", "default_pg"])]])
    assert [e["profiling_name"] for e in merged] == ["nccl:all_reduce", "gloo:all_reduce"]


@pytest.mark.parametrize("shape", [["x"], None, "12"])
def test_a_malformed_shape_leaves_that_side_unknown(shape: Any) -> None:
    e = entry(0, "nccl:all_reduce", T0, [[4]], ["Float"])
    e["input_sizes"] = [shape]
    c = collective_rows([e], rank=0, lo=T0, hi=T0).columns
    assert c["in_elems"] == [None] and c["bytes"] == [None] and c["out_elems"] == [4]
