"""store.produce.collectives: kernel names, and every source's collectives completed from the
rank's communication kernels (hand-built kernels and calls, answers worked out by hand)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from stepscope.schema_enums import CollectiveOp, SourceKind
from stepscope.store.manifest import Manifest, RankInfo, SourceInfo
from stepscope.store.produce.assemble import assemble
from stepscope.store.produce.bundle import RankBundle, contract_gaps
from stepscope.store.produce.collectives import (
    KernelName,
    collective_op,
    communication_kernels,
    complete,
    message_bytes,
    parse_kernel_name,
)
from stepscope.store.run import Run
from stepscope.store.writer import conform

Op = CollectiveOp


@pytest.mark.parametrize("name, want", [
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     KernelName(Op.ALL_REDUCE, "BFloat16", "RING", "LL")),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     KernelName(Op.ALL_GATHER, None, "RING", "LL")),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", KernelName(Op.SEND_RECV)),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
     KernelName(Op.ALL_REDUCE, "Float", "RING", "LL")),
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_SIMPLE",
     KernelName(Op.REDUCE_SCATTER, "Float", "RING", "SIMPLE")),
    ("ncclDevKernel_AllReduce_Sum_f16_NVLS_TREE_LL128",
     KernelName(Op.ALL_REDUCE, "Half", "NVLS_TREE", "LL128")),
    ("ncclDevKernel_Reduce_Sum_f64_TREE_LL", KernelName(Op.REDUCE, "Double", "TREE", "LL")),
    # byte kernels: their int8_t is not the data's type
    ("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
     KernelName(Op.BROADCAST, None, "RING", "LL")),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)",
     KernelName(Op.SEND_RECV, None, "RING", "SIMPLE")),
    ("ncclKernel_AllReduce", KernelName(Op.ALL_REDUCE)),
    ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", KernelName(Op.OTHER)),  # RCCL
    ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*)",
     KernelName(Op.ALL_REDUCE)),
    ("volta_sgemm_128x64_nn", None),
    ("void at::native::reduce_kernel<512, 1>(at::native::ReduceOp<float>)", None),
])
def test_kernel_names(name: str, want: KernelName | None) -> None:
    assert parse_kernel_name(name) == want


def test_collective_names_and_message_bytes() -> None:
    assert collective_op("allreduce") is Op.ALL_REDUCE
    assert collective_op("_allgather_base") is Op.ALL_GATHER
    assert collective_op("reduce_scatter_tensor_coalesced") is Op.REDUCE_SCATTER
    assert collective_op("_reduce_scatter_base") is Op.REDUCE_SCATTER
    assert collective_op("all_to_all_single") is Op.ALL_TO_ALL
    assert collective_op("broadcast") is Op.BROADCAST
    assert collective_op("reduce") is Op.REDUCE
    assert collective_op("send") is Op.SEND and collective_op("recv") is Op.RECV
    assert collective_op("barrier") is Op.BARRIER
    assert collective_op("gather") is Op.OTHER
    assert collective_op("wait") is None  # the host waiting: not a call
    # nccl-tests: the input of all-reduce, the output of all-gather
    assert message_bytes(Op.ALL_REDUCE, "Float", 1000, 1000) == 4000
    assert message_bytes(Op.ALL_GATHER, "BFloat16", 25136, 201088) == 402176
    assert message_bytes(Op.REDUCE_SCATTER, "BFloat16", 800, 100) == 1600
    assert message_bytes(Op.RECV, "Long", None, 3) == 24
    assert message_bytes(Op.ALL_REDUCE, "NoSuchType", 10, 10) is None


def _kernels(rows: list[tuple[str, int, int, int, int, int | None]]) -> pa.Table:
    """(name, ts, dur, stream, correlation, external_id) -> a kernels table on device 0."""
    return conform("kernels", {
        "rank": [0] * len(rows), "name": [r[0] for r in rows], "ts_ns": [r[1] for r in rows],
        "dur_ns": [r[2] for r in rows], "device": [0] * len(rows),
        "stream": [r[3] for r in rows], "correlation": [r[4] for r in rows],
        "external_id": [r[5] for r in rows]})


AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
AG = "ncclDevKernel_AllGather_RING_SIMPLE(ncclDevKernelArgsStorage<4096ul>)"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32"


def _calls(rows: list[dict[str, Any]]) -> pa.Table:
    base = {"dur_ns": 0, "kernels": 0, "source": "flight_recorder"}
    return conform("collectives", {k: [{**base, **r}.get(k) for r in rows]
                                   for k in ("rank", "ts_ns", "dur_ns", "op", "name", "pg",
                                             "seq", "host_ts_ns", "kernels", "source",
                                             "external_id", "correlation", "bytes")})


def test_kernel_names_alone_make_one_row_per_communication_kernel() -> None:
    k = _kernels([(GEMM, 0, 50, 7, 1, None), (AR, 100, 30, 20, 2, None),
                  (AG, 200, 10, 20, 3, None)])
    assert communication_kernels(k).num_rows == 2
    t = complete(None, k, rank=3)
    assert t is not None
    assert t.column("op").to_pylist() == ["all_reduce", "all_gather"]
    assert t.column("rank").to_pylist() == [3, 3]
    assert t.column("ts_ns").to_pylist() == [100, 200]
    assert t.column("dur_ns").to_pylist() == [30, 10]
    assert t.column("correlation").to_pylist() == [2, 3]
    assert t.column("algorithm").to_pylist() == ["RING", "RING"]
    assert t.column("protocol").to_pylist() == ["LL", "SIMPLE"]
    assert t.column("dtype").to_pylist() == ["Float", None]
    assert t.column("source").to_pylist() == ["kernel_name", "kernel_name"]
    assert t.column("bytes").null_count == 2 and t.column("pg").null_count == 2
    assert complete(None, _kernels([(GEMM, 0, 50, 7, 1, None)]), rank=0) is None


def test_host_side_calls_are_matched_in_issue_order_per_group_and_stream() -> None:
    # group "0" (all-reduces) runs on stream 20, group "1" (all-gathers) on stream 30;
    # stream 20 has one more kernel than calls, whose op (all-gather) disagrees: skipped
    k = _kernels([(AR, 100, 30, 20, 1, None), (AG, 150, 5, 20, 2, None),
                  (AR, 300, 40, 20, 3, None), (AG, 120, 10, 30, 4, None),
                  (AG, 400, 12, 30, 5, None)])
    calls = _calls([
        {"rank": 0, "ts_ns": 90, "host_ts_ns": 90, "op": "all_reduce", "name": "allreduce",
         "pg": "0", "seq": 1},
        {"rank": 0, "ts_ns": 95, "host_ts_ns": 95, "op": "all_gather",
         "name": "_allgather_base", "pg": "1", "seq": 1},
        {"rank": 0, "ts_ns": 280, "host_ts_ns": 280, "op": "all_reduce", "name": "allreduce",
         "pg": "0", "seq": 2},
        {"rank": 0, "ts_ns": 390, "host_ts_ns": 390, "op": "all_gather",
         "name": "_allgather_base", "pg": "1", "seq": 2},
        {"rank": 0, "ts_ns": 500, "host_ts_ns": 500, "op": "all_reduce", "name": "allreduce",
         "pg": "0", "seq": 3},  # no kernel left for it
    ])
    t = complete(calls, k, rank=0)
    assert t is not None
    rows = {(r["source"], r["pg"], r["seq"]): r for r in t.to_pylist()}
    got = {key: (r["ts_ns"], r["dur_ns"], r["stream"], r["correlation"], r["kernels"])
           for key, r in rows.items()}
    assert got == {
        ("flight_recorder", "0", 1): (100, 30, 20, 1, 1),
        ("flight_recorder", "1", 1): (120, 10, 30, 4, 1),
        ("flight_recorder", "0", 2): (300, 40, 20, 3, 1),
        ("flight_recorder", "1", 2): (400, 12, 30, 5, 1),
        ("flight_recorder", "0", 3): (500, 0, None, None, 0),
        ("kernel_name", None, None): (150, 5, 20, 2, 1),  # the kernel no call claimed
    }
    assert rows[("flight_recorder", "0", 1)]["algorithm"] == "RING"
    assert rows[("flight_recorder", "0", 1)]["host_ts_ns"] == 90


RS = "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
SR = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"


def test_a_groups_calls_on_several_streams() -> None:
    # as torch 2.11 ran fr_check on 2 H100s: DDP's async all-reduces of group 0 on its NCCL
    # stream 19; group 0's blocking all-gather, reduce-scatter and all-to-all, and group 1's
    # barrier (a one-element all-reduce), on the current stream 7; the send on stream 23
    k = _kernels([(AR, 1_000_000, 100, 19, 1, None), (AR, 1_400_000, 100, 19, 2, None),
                  (AG, 1_700_000, 10, 7, 3, None), (RS, 1_800_000, 10, 7, 4, None),
                  (SR, 1_900_000, 10, 7, 5, None), (SR, 2_000_000, 10, 23, 6, None),
                  (AR, 2_100_000, 10, 7, 7, None), (AR, 3_000_000, 100, 19, 8, None)])
    calls = _calls([
        {"rank": 0, "ts_ns": t, "host_ts_ns": t, "op": op, "name": "nccl:" + op, "pg": pg,
         "seq": seq}
        for t, op, pg, seq in [(900_000, "all_reduce", "0", 1), (1_300_000, "all_reduce", "0", 2),
                               (1_500_000, "all_gather", "0", 3),
                               (1_550_000, "reduce_scatter", "0", 4),
                               (1_600_000, "all_to_all", "0", 5), (1_650_000, "send", "0", 1),
                               (1_680_000, "barrier", "1", 1),
                               (2_900_000, "all_reduce", "0", 6)]])
    t = complete(calls, k, rank=0)
    assert t is not None
    got = {(r["pg"], r["op"], r["seq"]): r["correlation"] for r in t.to_pylist()}
    assert got == {("0", "all_reduce", 1): 1, ("0", "all_reduce", 2): 2,
                   ("0", "all_gather", 3): 3, ("0", "reduce_scatter", 4): 4,
                   ("0", "all_to_all", 5): 5, ("0", "send", 1): 6, ("1", "barrier", 1): 7,
                   ("0", "all_reduce", 6): 8}
    assert all(r["source"] == "flight_recorder" for r in t.to_pylist())  # no kernel left over


def test_calls_of_another_backend_never_take_a_kernel() -> None:
    # a gloo all-reduce (CPU) issued before the NCCL one: the kernel is the NCCL call's
    k = _kernels([(AR, 100, 30, 20, 1, None)])
    calls = _calls([
        {"rank": 0, "ts_ns": 80, "host_ts_ns": 80, "op": "all_reduce", "name": "gloo:all_reduce",
         "pg": "1", "seq": 1},
        {"rank": 0, "ts_ns": 90, "host_ts_ns": 90, "op": "all_reduce", "name": "nccl:all_reduce",
         "pg": "0", "seq": 1},
    ])
    t = complete(calls, k, rank=0)
    assert t is not None
    got = {r["name"]: (r["kernels"], r["correlation"]) for r in t.to_pylist()}
    assert got == {"gloo:all_reduce": (0, None), "nccl:all_reduce": (1, 1)}


def test_calls_link_by_external_id_or_correlation_and_timed_rows_stay() -> None:
    k = _kernels([(AR, 100, 30, 20, 11, 7), (AR, 140, 20, 20, 12, 7),  # one call, two kernels
                  (AG, 300, 10, 20, 13, None), (AR, 500, 5, 20, 14, None)])
    calls = _calls([
        {"rank": 0, "ts_ns": 90, "host_ts_ns": 90, "op": "all_reduce", "name": "allreduce",
         "external_id": 7, "source": "param_comms", "bytes": 4096},
        {"rank": 0, "ts_ns": 300, "op": "all_gather", "name": "allgather", "correlation": 13,
         "source": "kernel_args"},
        {"rank": 0, "ts_ns": 500, "dur_ns": 5, "kernels": 1, "op": "all_reduce",
         "name": "allreduce", "correlation": 14, "source": "kernel_args"},
    ])
    t = complete(calls, k, rank=0)
    assert t is not None and t.num_rows == 3  # every kernel claimed: no kernel_name row
    r = t.to_pylist()
    assert (r[0]["ts_ns"], r[0]["dur_ns"], r[0]["kernels"], r[0]["correlation"]) == (100, 60, 2, 11)
    assert r[0]["bytes"] == 4096 and r[0]["source"] == "param_comms"
    assert (r[1]["ts_ns"], r[1]["dur_ns"], r[1]["kernels"], r[1]["protocol"]) == (300, 10, 1,
                                                                                    "SIMPLE")
    assert (r[2]["ts_ns"], r[2]["dur_ns"], r[2]["kernels"]) == (500, 5, 1)


def _run(tmp_path: Path, tables: dict[str, pa.Table], kind: SourceKind) -> Run:
    bundle = RankBundle(kind=kind, rank=RankInfo(rank=0), tables=tables)
    out = assemble(tmp_path / "run", [bundle],
                   lambda facts: Manifest(source=SourceInfo(kind="test"), ranks=()))
    return Run(out)


@pytest.mark.parametrize("kind", [SourceKind.CUPTI, SourceKind.TORCH, SourceKind.KINETO])
def test_every_source_with_nccl_kernels_gets_collectives(tmp_path: Path, kind: SourceKind) -> None:
    k = _kernels([(GEMM, 0, 50, 7, 1, None), (AR, 100, 30, 20, 2, None)])
    run = _run(tmp_path, {"kernels": k}, kind)
    t = run.table("collectives")
    assert t.column("op").to_pylist() == ["all_reduce"]
    assert t.column("source").to_pylist() == ["kernel_name"]
    # (devices and api_calls are missing here; collectives are not)
    assert not [d for d in run.manifest.diagnostics if "collectives" in d.message]


def test_a_rank_without_communication_gets_no_collectives(tmp_path: Path) -> None:
    run = _run(tmp_path, {"kernels": _kernels([(GEMM, 0, 50, 7, 1, None)])}, SourceKind.CUPTI)
    assert run.table("collectives").num_rows == 0


def test_lazy_bundles_give_collectives_whatever_the_table_order(tmp_path: Path) -> None:
    # collectives before kernels (a lazy mapping hands tables in any order): still completed
    k = _kernels([(AR, 100, 30, 20, 2, 7)])
    calls = _calls([{"rank": 0, "ts_ns": 90, "host_ts_ns": 90, "op": "all_reduce",
                     "name": "allreduce", "external_id": 7, "source": "param_comms"}])
    t = _run(tmp_path, {"collectives": calls, "kernels": k}, SourceKind.KINETO).table(
        "collectives")
    assert (t.column("ts_ns").to_pylist(), t.column("kernels").to_pylist()) == ([100], [1])


def test_the_contract_asks_for_collectives_only_with_communication() -> None:
    rows = {"kernels": 5, "devices": 1, "api_calls": 5}
    assert contract_gaps(SourceKind.CUPTI, rows) == ()
    assert contract_gaps(SourceKind.CUPTI, rows, communication=True) == ("collectives",)
    assert contract_gaps(SourceKind.CUPTI, {**rows, "collectives": 1}, communication=True) == ()
    assert contract_gaps(SourceKind.HOST, {}, communication=True) == ()


def test_a_timed_call_of_several_kernels_keeps_them_all() -> None:
    k = _kernels([(AR, 100, 30, 20, 21, 9), (AR, 140, 20, 20, 22, 9)])
    calls = _calls([{"rank": 0, "ts_ns": 100, "dur_ns": 60, "kernels": 2, "op": "all_reduce",
                     "name": "allreduce", "correlation": 21, "external_id": 9,
                     "source": "kernel_args"}])
    t = complete(calls, k, rank=0)
    assert t is not None and t.column("source").to_pylist() == ["kernel_args"]
