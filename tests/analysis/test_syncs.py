"""Sync analysis on hand-built runs (times in the builder are µs; results are ns)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from builder import imported, marker_windows
from stepscope.analysis.graph import rank_graph
from stepscope.analysis.syncs import analyze_syncs, is_user_frame, sync_intervals
from stepscope.store.run import Run

US = 1000


def W(*pairs: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([int(a * US) for a, _ in pairs], dtype=np.int64),
            np.array([int(b * US) for _, b in pairs], dtype=np.int64))


def test_explicit_sync(builder: Any, tmp_path: Path) -> None:
    # cudaDeviceSynchronize 10-30 in the step, no op around it: one explicit sync of 20 µs,
    # its call site named after the API
    b = builder.step(0, 100).sync("cudaDeviceSynchronize", 10, 20)
    a = analyze_syncs(rank_graph(b.build(tmp_path / "r"), 0), *W((0, 100)))
    assert a.count_per_step == (1,) and a.blocked_ns_per_step == (20_000,)
    (ev,) = a.events
    assert (ev.kind, ev.ts_ns, ev.end_ns, ev.blocked_ns, ev.step) == ("explicit_sync", 10_000,
                                                                      30_000, 20_000, 0)
    assert (ev.op, ev.outer_op, ev.frame, ev.api) == ("", "", "", "cudaDeviceSynchronize")
    assert a.call_sites[0].name == "cudaDeviceSynchronize" and a.call_sites[0].count == 1
    assert [k.count for k in a.by_kind] == [1, 0, 0]


def test_item_is_a_scalar_read_with_its_user_frame(builder: Any, tmp_path: Path) -> None:
    # aten::item 30-60 > aten::_local_scalar_dense 31-59: cudaMemcpyAsync 32-34 (DtoH into
    # pinned memory: does not block) then cudaStreamSynchronize 35-55 (blocks 20 µs).
    # One scalar read starting at the copy call (32 µs), ending at the sync's end (55 µs).
    # Python frames: train.py(42): train_step 0-90 (user) > torch/_tensor.py(100): item 29-61
    # (library): the call site is the user frame.
    b = builder.step(0, 100)
    b.cpu_op("aten::item", 30, 30).cpu_op("aten::_local_scalar_dense", 31, 28)
    b.cpu_op("train.py(42): train_step", 0, 90, kind="python")
    b.cpu_op("torch/_tensor.py(100): item", 29, 32, kind="python")
    b.memcpy("DtoH", 40, 1, 4, dst="pinned", api=("cudaMemcpyAsync", 32, 2))
    b.sync("cudaStreamSynchronize", 35, 20)
    a = analyze_syncs(rank_graph(b.build(tmp_path / "r"), 0), *W((0, 100)))
    (ev,) = a.events
    assert ev.kind == "scalar_read"
    assert (ev.ts_ns, ev.end_ns, ev.blocked_ns, ev.sync_ns, ev.copy_ns) == (32_000, 55_000,
                                                                           20_000, 20_000, 0)
    assert ev.api == "cudaMemcpyAsync + cudaStreamSynchronize"
    assert (ev.op, ev.outer_op) == ("aten::_local_scalar_dense", "aten::item")
    assert ev.frame == "train.py(42): train_step"
    site = a.call_sites[0]
    assert (site.name, site.kind, site.count, site.blocked_ns) == (
        "train.py(42): train_step", "scalar_read", 1, 20_000)
    assert [(k.kind, k.count) for k in a.by_kind] == [
        ("explicit_sync", 0), ("blocking_copy", 0), ("scalar_read", 1)]


def test_pageable_copy_then_sync_is_one_blocking_copy(builder: Any, tmp_path: Path) -> None:
    # aten::to 0-30 > aten::copy_ 1-29: cudaMemcpyAsync 2-12 from pageable memory (blocks:
    # 10 µs) then cudaStreamSynchronize 14-19 (5 µs) -> one blocking copy of 15 µs
    b = builder.step(0, 100)
    b.cpu_op("aten::to", 0, 30).cpu_op("aten::copy_", 1, 28)
    b.memcpy("HtoD", 5, 6, 1 << 20, src="pageable", api=("cudaMemcpyAsync", 2, 10))
    b.sync("cudaStreamSynchronize", 14, 5)
    a = analyze_syncs(rank_graph(b.build(tmp_path / "r"), 0), *W((0, 100)))
    (ev,) = a.events
    assert (ev.kind, ev.blocked_ns, ev.copy_ns, ev.sync_ns) == ("blocking_copy", 15_000, 10_000,
                                                               5000)
    assert a.call_sites[0].name == "aten::to > aten::copy_"
    s, e = sync_intervals(rank_graph(Run(tmp_path / "r"), 0))  # the two calls, not the 2 µs between them
    assert s.tolist() == [2000, 14_000] and e.tolist() == [12_000, 19_000]


def test_copies_that_block_on_their_own(builder: Any, tmp_path: Path) -> None:
    # synchronous cudaMemcpy DtoH 10-20 (pinned): blocking by name -> 10 µs
    # cudaMemcpyAsync DtoH into pageable memory 30-34: blocking by memory kind -> 4 µs
    # cudaMemcpyAsync HtoD from pinned memory 40-41: async, not a sync at all
    b = builder.step(0, 100)
    b.memcpy("DtoH", 12, 5, 1024, dst="pinned", api=("cudaMemcpy", 10, 10))
    b.memcpy("DtoH", 31, 2, 1024, dst="pageable", api=("cudaMemcpyAsync", 30, 4))
    b.memcpy("HtoD", 45, 2, 1024, src="pinned", api=("cudaMemcpyAsync", 40, 1))
    a = analyze_syncs(rank_graph(b.build(tmp_path / "r"), 0), *W((0, 100)))
    assert [(e.kind, e.blocked_ns, e.copy_ns) for e in a.events] == [
        ("blocking_copy", 10_000, 10_000), ("blocking_copy", 4000, 4000)]
    assert a.blocked_ns == 14_000


def test_sync_outside_any_op_is_not_merged(builder: Any, tmp_path: Path) -> None:
    # a DtoH copy call then a sync on the same thread but with no enclosing framework op:
    # without an op instance to tie them together, the sync stays an explicit sync
    b = builder.step(0, 100)
    b.memcpy("DtoH", 12, 1, 4, dst="pinned", api=("cudaMemcpyAsync", 10, 1))
    b.sync("cudaStreamSynchronize", 13, 7)
    a = analyze_syncs(rank_graph(b.build(tmp_path / "r"), 0), *W((0, 100)))
    assert [(e.kind, e.ts_ns, e.blocked_ns) for e in a.events] == [("explicit_sync", 13_000, 7000)]


def test_two_syncs_after_one_copy(builder: Any, tmp_path: Path) -> None:
    # in one op: DtoH copy call 2-3, syncs 4-6 and 7-9: both are scalar reads; the first owns
    # the copy (starts at 2), the second starts at its own call (7)
    b = builder.step(0, 100).cpu_op("aten::_local_scalar_dense", 1, 10)
    b.memcpy("DtoH", 3, 1, 4, dst="pinned", api=("cudaMemcpyAsync", 2, 1))
    b.sync("cudaStreamSynchronize", 4, 2).sync("cudaStreamSynchronize", 7, 2)
    a = analyze_syncs(rank_graph(b.build(tmp_path / "r"), 0), *W((0, 100)))
    assert [(e.kind, e.ts_ns, e.api) for e in a.events] == [
        ("scalar_read", 2000, "cudaMemcpyAsync + cudaStreamSynchronize"),
        ("scalar_read", 7000, "cudaStreamSynchronize")]
    assert a.call_sites[0].count + a.call_sites[1].count == 2


def test_steps_by_start_and_events_outside(builder: Any, tmp_path: Path) -> None:
    # windows [0,100) and [100,200): a sync 90-120 straddles the boundary and belongs to step 0
    # with all its 30 µs; 150-160 is step 1; 250-251 is outside: listed, step -1, not counted
    b = builder.step(0, 100).step(100, 100)
    b.sync("cudaStreamSynchronize", 90, 30).sync("hipDeviceSynchronize", 150, 10)
    b.sync("cudaEventSynchronize", 250, 1)
    a = analyze_syncs(rank_graph(b.build(tmp_path / "r"), 0), *W((0, 100), (100, 200)))
    assert a.count_per_step == (1, 1) and a.blocked_ns_per_step == (30_000, 10_000)
    assert a.mean_blocked_ns_per_step == 20_000.0 and a.mean_count_per_step == 1.0
    assert (a.count, a.blocked_ns) == (2, 40_000)
    assert [e.step for e in a.events] == [0, 1, -1]
    # with no windows everything is in scope
    n = analyze_syncs(rank_graph(Run(tmp_path / "r"), 0), *W())
    assert (n.count, n.blocked_ns, n.count_per_step) == (3, 41_000, ())


def test_sync_intervals_union(builder: Any, tmp_path: Path) -> None:
    # sync [10,30) and a blocking cudaMemcpy [25,40) on another thread merge into [10,40);
    # an async pinned copy call [50,52) does not block
    b = builder.sync("cudaStreamSynchronize", 10, 20)
    b.memcpy("HtoD", 30, 5, 64, api=("cudaMemcpy", 25, 15), tid=7)
    b.memcpy("HtoD", 55, 5, 64, api=("cudaMemcpyAsync", 50, 2))
    s, e = sync_intervals(rank_graph(b.build(tmp_path / "r"), 0))
    assert s.tolist() == [10_000] and e.tolist() == [40_000]


def test_empty_run(builder: Any, tmp_path: Path) -> None:
    run = builder.build(tmp_path / "r")
    a = analyze_syncs(rank_graph(run, 0), *W((0, 100), (100, 200)))
    assert a.count_per_step == (0, 0) and a.blocked_ns_per_step == (0, 0)
    assert a.events == () and a.call_sites == () and a.count == 0
    s, _ = sync_intervals(rank_graph(run, 0))
    assert s.size == 0


@pytest.mark.parametrize(("name", "user"), [
    ("train.py(42): train_step", True),
    ("/home/me/project/model.py(7): forward", True),
    ("torch/nn/modules/module.py(1783): _call_impl", False),
    ("threading.py(1030): _bootstrap", False),
    ("multiprocessing/connection.py(135): _check_closed", False),
    ("/usr/lib/python3.12/site-packages/foo/bar.py(1): f", False),
    ("<built-in method item of Tensor object at 0x7f>", False),
    ("nn.Module: Linear_0", False),
])
def test_user_frames(name: str, user: bool) -> None:
    assert is_user_frame(name) is user


# -- real traces --------------------------------------------------------------------------






def test_cnn_fixture(tmp_path_factory: pytest.TempPathFactory) -> None:
    # fixtures/README: cudaStreamSynchronize 22.0 ms in total over the 3 steps; each step
    # copies its inputs from pageable memory (2 copies + sync in aten::copy_) and calls
    # loss.item() (DtoH into pinned memory + sync in aten::_local_scalar_dense)
    run = imported("h100/cnn_fp32_sync.pt.trace.json.gz", tmp_path_factory)
    ws, we = marker_windows(run)
    a = analyze_syncs(rank_graph(run, 0), ws, we)
    assert a.count_per_step == (3, 3, 3)
    kinds = {k.kind: k.count for k in a.by_kind}
    assert kinds == {"explicit_sync": 0, "blocking_copy": 6, "scalar_read": 3}
    in_steps = [e for e in a.events if e.step >= 0]
    assert sum(e.sync_ns for e in in_steps) == pytest.approx(22.0e6, abs=0.05e6)
    top = a.call_sites[0]
    assert (top.op, top.outer_op, top.kind, top.count) == (
        "aten::_local_scalar_dense", "aten::item", "scalar_read", 3)
    # the final cudaDeviceSynchronize is after the last step
    assert [e.api for e in a.events if e.step < 0] == ["cudaDeviceSynchronize"]


def test_gpt_fixture_has_no_sync_in_its_steps(tmp_path_factory: pytest.TempPathFactory) -> None:
    run = imported("h100/gpt_bf16_adamw.pt.trace.json.gz", tmp_path_factory)
    a = analyze_syncs(rank_graph(run, 0), *marker_windows(run))
    assert a.count_per_step == (0, 0, 0)
