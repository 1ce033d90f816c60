"""straggler: one rank late at the collectives (builder times in µs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.model.test_collectives import straggler as plant

from stepscope.advisor.base import Finding, Severity
from stepscope.advisor.engine import advise
from stepscope.advisor.rules import exposed_communication, straggler
from stepscope.analysis import analyze
from stepscope.model.collectives import run_cross_rank
from stepscope.model.communication import comm_overlap
from stepscope.store.run import Run


def _findings(run: Run, *rules: Any) -> tuple[Finding, ...]:
    return advise(analyze(run), list(rules) or [straggler.RULE]).findings


def test_names_the_late_rank_its_cause_and_the_wait(builder: Any, tmp_path: Path) -> None:
    plant(builder)
    (f,) = _findings(builder.build(tmp_path / "run"))
    assert f.id == "straggler" and f.where.rank == 1
    # rank 0 waits 400 µs per 1000 µs step for rank 1
    assert f.est_saving_ms == pytest.approx(0.4) and f.severity is Severity.CRITICAL
    assert f.title == ("Rank 1 is the straggler (host-side work): the other ranks wait ~0.400 "
                       "ms per step for it in the collectives")
    assert f.evidence[0].startswith("rank 1 arrived last at ")
    assert "the others waited 0.400 ms per step in them" in f.evidence[0]
    assert f.evidence[1] == ("wait inside collectives per step: rank 0 0.400 ms, rank 1 "
                             "0.000 ms")
    # rank 0 records no op: its GPU idle after the all-reduce (100 µs) is host time too
    assert f.evidence[2].startswith("rank 1's step: 0.400 ms host against 0.100 ms")
    assert "move it out of the step" in f.fix.pytorch
    assert f.where.steps and f.where.start_ns is not None


def test_exposed_communication_leaves_the_wait_to_the_straggler(builder: Any,
                                                               tmp_path: Path) -> None:
    plant(builder)
    a = analyze(builder.build(tmp_path / "run"))
    fs = {f.id: f for f in advise(a, [straggler.RULE, exposed_communication.RULE]).findings}
    # rank 0: all-reduce 400-900, compute 0-400, waiting 400-800: 100 µs exposed transfer;
    # rank 1: all-reduce 800-900 after its gemm: 100 µs. Without the wait rank 0 had 500,
    # which overlap could partly hide; one call's 100 µs it cannot (model.comm_remedies)
    x = run_cross_rank(a)
    assert x is not None and (rc := x.rank(0)) is not None
    r = comm_overlap(a.graph.rank(0), a.ranks[0], waits=rc.wait_intervals)
    assert r is not None and r.n_steps > 0
    assert (r.exposed_ns / r.n_steps, r.waiting_ns / r.n_steps) == (100_000, 400_000)
    assert r.saving_ns == 0
    raw = comm_overlap(a.graph.rank(0), a.ranks[0])
    assert raw is not None and raw.exposed_ns / raw.n_steps == 500_000 and raw.saving_ns > 0
    assert "exposed_communication" not in fs and fs["straggler"].est_saving_ms > 0


def test_balanced_ranks_get_nothing(builder: Any, tmp_path: Path) -> None:
    # the late rank alternates, and no rank waits more than 20 µs of a 1000 µs step
    for i in range(8):
        t0 = i * 1000
        for r in (0, 1):
            builder.step(t0, 1000, rank=r, step=i)
            builder.kernel("gemm", t0, 600, rank=r)
        late = i % 2
        builder.call("all_reduce", t0 + 600, 120, rank=1 - late)
        builder.call("all_reduce", t0 + 620, 100, rank=late)
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_late_rank_that_changes_every_step_is_no_straggler(builder: Any,
                                                            tmp_path: Path) -> None:
    # 300 µs waits, but each rank is late every other step: no one rank to fix
    for i in range(8):
        t0 = i * 1000
        for r in (0, 1):
            builder.step(t0, 1000, rank=r, step=i)
        late = i % 2
        builder.kernel("gemm", t0, 400, rank=1 - late)
        builder.kernel("gemm", t0, 700, rank=late)
        builder.call("all_reduce", t0 + 400, 400, rank=1 - late)
        builder.call("all_reduce", t0 + 700, 100, rank=late)
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_small_lateness_stays_silent(builder: Any, tmp_path: Path) -> None:
    plant(builder, late=30)  # rank 0 waits 30 µs per 1000 µs step: 3% < 5%
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_the_late_ranks_own_idle_findings_fold_into_it(builder: Any, tmp_path: Path) -> None:
    plant(builder)
    fs = advise(analyze(builder.build(tmp_path / "run"))).findings
    top = fs[0]
    assert top.id == "straggler"
    # rank 1's GPU idles 0.5 ms per step (host work 0-400 plus the wait for rank 0's end):
    # found by an idle rule on rank 1, folded into the straggler, not ranked above it
    folded = [e for e in top.evidence if e.startswith("on rank 1: ")]
    assert folded and "folded here" in folded[0]
    assert not [f for f in fs if f.where.rank == 1 and f.category in ("host", "input")]
    assert "On that rank: " in top.fix.pytorch


def test_a_wait_hidden_under_compute_costs_nothing(builder: Any, tmp_path: Path) -> None:
    # FSDP-like prefetch: rank 0's all-gather (stream 21) starts at 100 and waits 400 µs for
    # rank 1, while rank 0's gemm runs 0-700 on stream 7: the wait costs rank 0's step nothing
    for i in range(6):
        t0 = i * 1000
        for r in (0, 1):
            builder.step(t0, 1000, rank=r, step=i)
            builder.kernel("gemm", t0, 700, rank=r)
        builder.call("all_gather", t0 + 100, 450, rank=0, stream=21)
        builder.call("all_gather", t0 + 500, 50, rank=1, stream=21)
    run = builder.build(tmp_path / "run")
    assert _findings(run) == ()
    from stepscope.model.collectives import cross_rank
    a = analyze(run)
    x = cross_rank(a, a.graph)
    assert x is not None and x.instances
    i = x.instances[0]
    assert i.waits_ns == (400_000, 0) and i.cost_ns == 400_000
    assert i.exposed_waits_ns == (0, 0) and i.stall_ns == 0
    assert x.rank(1) is not None and x.rank(1).late_cost_ns > 0 and x.rank(1).late_stall_ns == 0


def test_a_host_late_rank_within_the_profilers_cost_is_info(builder: Any, tmp_path: Path) -> None:
    # the same planted run, but the profiler's host cost is estimated at 0.3 ms per step: a
    # host-late rank by 0.4 ms may be the profiler's own doing
    from stepscope.advisor.base import Context
    from stepscope.analysis.summary import summarize
    from stepscope.model.confidence import Confidence

    plant(builder)
    a = analyze(builder.build(tmp_path / "run"))
    ctx = Context(analysis=a, summary=summarize(a), host_confidence=Confidence.MEDIUM,
                  host_note="", host_inflation_ms=0.3)
    (f,) = straggler.RULE.check(ctx)
    assert f.severity is Severity.INFO and f.confidence is Confidence.LOW
    assert "the lateness may be the profiler's" in f.note
    ctx = Context(analysis=a, summary=summarize(a), host_confidence=Confidence.HIGH,
                  host_note="", host_inflation_ms=0.1)
    (f,) = straggler.RULE.check(ctx)
    assert f.severity is Severity.CRITICAL
