"""The HTML timeline's ranks on one shared axis: each rank's clock offset (from collective ends,
``model.collectives``) applied where the ranks' clocks differ (``model.clocks``), said in the
payload, and the page's other times (steps, findings, copies) on the same axis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from tests.reporters.test_html import _blob, _data, decode

from builder import TraceBuilder
from stepscope.analysis import analyze
from stepscope.model.clocks import OFFSET_MIN_NS, ClockAlignment, clock_alignment
from stepscope.model.collectives import cross_rank
from stepscope.reporters.html import to_html
from stepscope.reporters.report import build_report
from stepscope.store.run import Run


def shifted(tmp_path: Path, shift_us: float, *, hosts: tuple[str, str] | None = ("a", "b"),
            ranks: int = 2) -> Run:
    """4 steps of 1000 µs on ``ranks`` ranks; rank r >= 1's clock reads ``shift_us`` more than
    rank 0's. Rank 0: gemm 0-200, all-reduce 200-700; the others: gemm 100-600, all-reduce
    600-700 (on their clock: + shift). On one clock the all-reduces all end at 700."""
    b = TraceBuilder()
    for r in range(ranks):
        d = shift_us if r else 0.0
        b.process("train.py", 100 + r, rank=r, host=hosts[min(r, 1)] if hosts else None)
        for i in range(4):
            t0 = i * 1000.0 + d
            b.step(t0, 1000, rank=r, step=i)
            if r == 0:
                b.kernel("gemm", t0, 200, rank=r)
                b.call("all_reduce", t0 + 200, 500, rank=r)
            else:
                b.kernel("gemm", t0 + 100, 500, rank=r)
                b.call("all_reduce", t0 + 600, 100, rank=r)
    return b.build(tmp_path / "run")


def _alignment(run: Run) -> ClockAlignment:
    a = analyze(run)
    return clock_alignment(cross_rank(a, a.graph))


def test_offsets_applied_when_hosts_or_clocks_differ(tmp_path: Path) -> None:
    two_hosts = _alignment(shifted(tmp_path / "1", 5000))
    assert dict(two_hosts.shifts_ns) == {1: -5_000_000}
    assert two_hosts.reason.startswith("the ranks ran on 2 hosts")
    # one host, but clocks 5 ms apart (more than OFFSET_MIN_NS): applied
    one = _alignment(shifted(tmp_path / "2", 5000, hosts=None))
    assert OFFSET_MIN_NS < 5_000_000 and dict(one.shifts_ns) == {1: -5_000_000}
    assert "differ by up to 5.000 ms" in one.reason
    # one host, 200 µs: the end skew of one clock's collectives, not a clock difference
    assert _alignment(shifted(tmp_path / "3", 200, hosts=None)) == ClockAlignment()
    # two hosts: even 200 µs is another clock's
    assert dict(_alignment(shifted(tmp_path / "4", 200)).shifts_ns) == {1: -200_000}
    assert clock_alignment(None) == ClockAlignment()


def _page(run: Run) -> tuple[dict[str, Any], dict[str, Any]]:
    html = to_html(build_report(run, page=True))
    data = _data(html)
    return data, decode(data["timeline"], _blob(html))


def _rank_of_lane(meta: dict[str, Any], lanes: np.ndarray) -> np.ndarray:
    out = np.full(lanes.size, -1)
    for t in meta["tracks"]:
        if t["lanes"]:
            sel = (lanes >= t["lane0"]) & (lanes < t["lane0"] + t["lanes"])
            out[sel] = t["rank"]
    return out


def test_the_lanes_line_up_after_the_shift(tmp_path: Path) -> None:
    run = shifted(tmp_path, 5000)
    data, ev = _page(run)
    meta = data["timeline"]
    assert meta["clock"]["offsets"] == [{"rank": 1, "offset_ns": "-5000000",
                                         "offset_us": -5000.0}]
    assert meta["clock"]["reason"].startswith("the ranks ran on 2 hosts")
    rank = _rank_of_lane(meta, ev["lane"])
    names = np.array(ev["name"])
    ends = ev["start"] + ev["dur"]
    steps = [n.startswith("Step ") for n in names]
    for r in (0, 1):
        ar = (rank == r) & np.char.startswith(names.astype(str), "ncclDevKernel_AllReduce")
        assert sorted(ends[ar].tolist()) == [i * 1_000_000 + 700_000 for i in range(4)], r
        st = (rank == r) & np.array(steps)
        assert sorted(ev["start"][st].tolist()) == [i * 1_000_000 for i in range(4)], r
    assert int(meta["t0_ns"]) == 0  # rank 0's clock: the shared axis
    # the page's own times are on the same axis: rank 1's steps start where rank 0's do
    by_rank = {r: [s["start_us"] for s in data["ui"]["steps"] if s["rank"] == r] for r in (0, 1)}
    assert by_rank[0] == by_rank[1] == [0.0, 1000.0, 2000.0, 3000.0]


def test_one_clock_is_left_alone(tmp_path: Path) -> None:
    run = shifted(tmp_path, 200, hosts=None)
    data, ev = _page(run)
    assert data["timeline"]["clock"] == {"reason": "", "offsets": []}
    rank = _rank_of_lane(data["timeline"], ev["lane"])
    names = np.array(ev["name"]).astype(str)
    st = (rank == 1) & np.char.startswith(names, "Step ")
    assert sorted(ev["start"][st].tolist()) == [i * 1_000_000 + 200_000 for i in range(4)]
