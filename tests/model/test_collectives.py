"""model.collectives: calls matched across ranks, waits, late ranks, bus bandwidth (µs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stepscope.analysis import analyze
from stepscope.model.collectives import CrossRank, bus_factor, cross_rank
from stepscope.store.run import Run


def _x(run: Run) -> CrossRank:
    a = analyze(run)
    x = cross_rank(a, a.graph)
    assert x is not None
    return x


def straggler(b: Any, n: int = 5, late: float = 400) -> None:
    """``n`` 1000 µs steps on 2 ranks. Rank 0: gemm 0-400, all-reduce from 400 to 900.
    Rank 1: host work 0-``late``, gemm for 400 µs, all-reduce for the last 100 µs."""
    for i in range(n):
        t0 = i * 1000
        for r in (0, 1):
            b.step(t0, 1000, rank=r, step=i)
        b.kernel("gemm", t0, 400, rank=0)
        b.call("all_reduce", t0 + 400, 500, rank=0, nbytes=1 << 20)
        b.cpu_op("python_work", t0, late, rank=1)
        b.kernel("gemm", t0 + late, 400, rank=1)
        b.call("all_reduce", t0 + late + 400, 900 - late - 400 + 0, rank=1, nbytes=1 << 20)


def test_bus_factors_are_nccl_tests() -> None:
    assert bus_factor("all_reduce", 4) == pytest.approx(1.5)
    assert bus_factor("all_gather", 4) == pytest.approx(0.75)
    assert bus_factor("reduce_scatter", 2) == pytest.approx(0.5)
    assert bus_factor("all_to_all", 8) == pytest.approx(7 / 8)
    assert bus_factor("broadcast", 8) == 1.0 and bus_factor("send", 2) == 1.0
    assert bus_factor("all_reduce", 1) == 0.0


def test_late_rank_wait_and_cost(builder: Any, tmp_path: Path) -> None:
    straggler(builder)
    x = _x(builder.build(tmp_path / "run"))
    assert x.matched_by == "step" and x.unmatched == 0 and x.hosts == 1
    n = x.n_steps
    assert n >= 3 and len(x.instances) == n
    i = x.instances[0]
    assert i.ranks == (0, 1) and i.durs_ns == (500_000, 100_000)
    assert i.transfer_ns == 100_000 and i.waits_ns == (400_000, 0)
    assert i.late_rank == 1 and i.cost_ns == 400_000
    assert i.busbw_gbs == pytest.approx((1 << 20) / 100_000 * 1.0)
    r0, r1 = x.ranks
    assert (r0.wait_ns, r0.late, r0.late_cost_ns) == (400_000 * n, 0, 0)
    assert (r1.wait_ns, r1.late, r1.late_cost_ns) == (0, n, 400_000 * n)
    assert r0.wait_intervals[0] == (i.starts_ns[0], i.starts_ns[0] + 400_000)
    assert set(x.per_step_late.values()) == {1}
    assert all(w == {0: 400_000, 1: 0} for w in x.per_step_wait_ns.values())
    assert x.offsets_ns == {0: 0, 1: 0}


def test_matched_by_sequence_number_whatever_the_order(builder: Any, tmp_path: Path) -> None:
    # rank 1 lists its two calls per step in the other order; sequence numbers pair them
    for i in range(4):
        t0 = i * 1000
        for r in (0, 1):
            builder.step(t0, 1000, rank=r, step=i)
        builder.call("all_reduce", t0 + 100, 300, rank=0, seq=2 * i, nbytes=100)
        builder.call("all_gather", t0 + 500, 200, rank=0, seq=2 * i + 1, nbytes=200)
        builder.call("all_gather", t0 + 600, 100, rank=1, seq=2 * i + 1, nbytes=200, stream=21)
        builder.call("all_reduce", t0 + 300, 100, rank=1, seq=2 * i, nbytes=100)
    x = _x(builder.build(tmp_path / "run"))
    assert x.matched_by == "sequence" and x.unmatched == 0
    ar = [i for i in x.instances if i.op == "all_reduce"]
    ag = [i for i in x.instances if i.op == "all_gather"]
    assert ar and ag and all(i.durs_ns == (300_000, 100_000) for i in ar)
    assert all(i.durs_ns == (200_000, 100_000) and i.bytes == 200 for i in ag)


def test_sequence_numbers_match_across_shifted_steps_and_a_call_without_one(
        builder: Any, tmp_path: Path) -> None:
    # 1000 µs steps; rank 1's step boundaries come 300 µs late (its step starts after its own
    # host work), so its all-reduce of step i (at t0 + 850 on rank 0, t0 + 900 on rank 1) lies
    # in ITS step i, but the one at t0 + 150 lies in its step i - 1. Every call has a
    # sequence number but one broadcast per rank (a kernel with no flight-recorder entry,
    # 1 call in 17 per rank: < 10%). Matched by sequence: every all-reduce pairs up, each in
    # the step most of its ranks put it in (the lowest on a tie); the broadcasts stay
    # unmatched. (Before: one call without a number sent everything to step/position
    # matching, and a call whose ranks disagreed on its step was dropped.)
    for i in range(8):
        t0 = i * 1000
        builder.step(t0, 1000, rank=0, step=i)
        builder.step(t0 + 300, 1000, rank=1, step=i)
        builder.call("all_reduce", t0 + 150, 100, rank=0, seq=2 * i, nbytes=64)
        builder.call("all_reduce", t0 + 200, 50, rank=1, seq=2 * i, nbytes=64)
        builder.call("all_reduce", t0 + 850, 100, rank=0, seq=2 * i + 1, nbytes=64)
        builder.call("all_reduce", t0 + 900, 50, rank=1, seq=2 * i + 1, nbytes=64)
    builder.call("broadcast", 50, 10, rank=0, nbytes=8)
    builder.call("broadcast", 60, 10, rank=1, nbytes=8)
    x = _x(builder.build(tmp_path / "run"))
    assert x.matched_by == "sequence"
    ar = [i for i in x.instances if i.op == "all_reduce"]
    steady = set(x.steps)
    assert len(steady) >= 4
    assert all(i.ranks == (0, 1) and i.durs_ns == (100_000, 50_000) for i in ar)
    # the late all-reduce of step i is in step i on both ranks; the early one of step i >= 1
    # in rank 0's step i and rank 1's step i - 1: the lower, i - 1
    late = sorted(i.step for i in ar if (i.starts_ns[0] // 1000) % 1000 == 850)
    early = sorted(i.step for i in ar if (i.starts_ns[0] // 1000) % 1000 == 150)
    assert late == sorted(steady)
    assert early == sorted(s for s in steady if s + 1 < 8)
    assert not [i for i in x.instances if i.op == "broadcast"]


def test_disagreeing_ops_and_point_to_point_are_not_matched(builder: Any, tmp_path: Path) -> None:
    for i in range(4):
        t0 = i * 1000
        for r in (0, 1):
            builder.step(t0, 1000, rank=r, step=i)
        builder.call("all_reduce", t0 + 100, 300, rank=0)
        builder.call("all_gather", t0 + 100, 300, rank=1)  # same position, another op
        builder.call("send_recv", t0 + 500, 100, rank=0)
        builder.call("send_recv", t0 + 500, 100, rank=1)
    x = _x(builder.build(tmp_path / "run"))
    assert x.instances == () and x.unmatched > 0


def test_clocks_of_several_hosts_are_aligned_on_collective_ends(builder: Any,
                                                               tmp_path: Path) -> None:
    # rank 1's clock runs 5000 µs ahead (as on another host): offsets from collective ends;
    # waits come from durations and do not move
    for i in range(4):
        t0 = i * 1000
        builder.step(t0, 1000, rank=0, step=i)
        builder.step(t0 + 5000, 1000, rank=1, step=i)
        builder.call("all_reduce", t0 + 200, 500, rank=0)
        builder.call("all_reduce", t0 + 5000 + 600, 100, rank=1)
    x = _x(builder.build(tmp_path / "run"))
    assert x.offsets_ns == {0: 0, 1: -5_000_000}
    assert all(i.waits_ns == (400_000, 0) for i in x.instances)


def test_one_rank_gives_nothing(builder: Any, tmp_path: Path) -> None:
    for i in range(4):
        builder.step(i * 1000, 1000, step=i)
        builder.call("all_reduce", i * 1000 + 100, 300)
    a = analyze(builder.build(tmp_path / "run"))
    assert cross_rank(a, a.graph) is None
