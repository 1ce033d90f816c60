"""The rules' per-rank parts that a worker of a rank-parallel report computes and the parent
finishes (issue 20, item 6): the kernel rules' savings per steady step before the run-wide
profiler inflation, the communication model's inputs cut to what it reads. The parent's
findings are the serial path's, on synthetic runs with hand-computed answers and on real
traces."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.analysis.test_rank_parallel import DATA, SMALL_TABLES
from tests.model.test_collectives import straggler as plant

from stepscope.advisor import advise
from stepscope.advisor.rank_facts import rank_facts
from stepscope.advisor.rules import exposed_communication, small_grid, straggler
from stepscope.analysis.results import FACT, analyze
from stepscope.importers import import_traces
from stepscope.model.collectives import run_cross_rank
from stepscope.model.comm_inputs import _before
from stepscope.model.communication import comm_overlap
from stepscope.model.overhead import host_trust
from stepscope.model.scaling import ScalingBase
from stepscope.model.small_grid import grid_groups
from stepscope.reporters.json_report import to_json
from stepscope.reporters.report import build_report
from stepscope.store.run import Run

SCALE = "scale_kernel"
ADD = "void at::native::vectorized_elementwise_kernel<4, add>(int)"


def test_the_scaling_takes_the_inflation_in_the_parent() -> None:
    base = ScalingBase(np.array([100.0, 50.0]), np.array([30.0, 80.0]), 0.5)
    # X = 100 ns: each backlog grows by what the GPU did not already wait on the host
    s = base.with_inflation(100 / 1e6)
    assert s.backlog_ns is not None and s.backlog_ns.tolist() == [170.0, 70.0]
    assert base.backlog_ns is not None and base.backlog_ns.tolist() == [100.0, 50.0]
    raw, kept = s.counted_steps(np.array([200.0, 20.0]))
    assert raw == pytest.approx(110 / 1e6) and kept == pytest.approx((170 + 20) / 2 / 1e6)
    assert base.with_inflation(0.0).backlog_ns.tolist() == [100.0, 50.0]  # type: ignore[union-attr]
    # no launch records: the busy share scales the raw saving
    plain = ScalingBase(None, None, 0.5).with_inflation(1.0)
    assert plain.backlog_ns is None and plain.counted_steps(np.array([200.0, 20.0]))[1] == \
        pytest.approx(55 / 1e6)


def _two_grids(b: Any) -> None:
    """Three GPU-bound 1000 µs steps on two ranks: a small-grid user kernel of 500 µs, 16
    blocks on rank 0 and 64 on rank 1 (the builder's H100: 132 SMs), then a full-grid one."""
    for r, blocks in ((0, 16), (1, 64)):
        for i in range(3):
            t0 = i * 1000
            b.step(t0, 1000, rank=r, step=i)
            b.kernel(SCALE, t0 + 10, 500, grid=(blocks, 1, 1), block=(128, 1, 1),
                     launch=(t0 + 1, 5), rank=r)
            b.kernel(ADD, t0 + 520, 400, launch=(t0 + 7, 2), rank=r)


def test_a_kernel_rule_from_the_workers_parts(builder: Any, tmp_path: Path) -> None:
    _two_grids(builder)
    run = builder.build(tmp_path / "run").path
    pooled = analyze(Run(run), workers=2, facts=rank_facts)
    # the parent holds each rank's part, not its kernels
    memo = pooled.graph.rank(0)._memo
    assert (FACT, "grid_parts") in memo and ("steady_kernels",) not in memo
    assert "kernel_frame" not in memo
    (f,) = advise(pooled, [small_grid.RULE]).findings
    # rank 0's saving is the larger: 500 - 500 x 16/132 us per step (rank 1: 500 x 68/132)
    assert f.where.rank == 0 and f.where.kernels == (SCALE,)
    assert f.est_saving_ms == pytest.approx((500 - 500 * 16 / 132) / 1000, abs=1e-4)
    assert "rank 0 shown (largest saving of 2 ranks)" in f.evidence
    assert any(e.startswith("scale_kernel: 16 blocks x 128 threads on 132 SMs") for e in f.evidence)
    (g1,) = grid_groups(pooled, pooled.rank(1)).values()
    assert g1.saving_ms == pytest.approx(500 * (1 - 64 / 132) / 1000, abs=1e-4)
    assert g1.n_items == 1 and g1.sk.n_steps == 3
    serial = analyze(Run(run), workers=1, facts=rank_facts)
    assert advise(serial, [small_grid.RULE]).findings == (f,)


def test_the_communication_model_from_the_workers_inputs(builder: Any, tmp_path: Path) -> None:
    plant(builder)
    run = builder.build(tmp_path / "run").path
    pooled = analyze(Run(run), workers=2, facts=rank_facts)
    assert "gpu_activity" not in pooled.graph.rank(0)._memo
    x = run_cross_rank(pooled)
    assert x is not None and (rc := x.rank(0)) is not None
    # rank 0: all-reduce 400-900, compute 0-400, waiting 400-800 for rank 1 (as serial:
    # tests/advisor/test_straggler.py)
    r = comm_overlap(pooled.graph.rank(0), pooled.ranks[0], waits=rc.wait_intervals)
    assert r is not None and (r.exposed_ns / r.n_steps, r.waiting_ns / r.n_steps) == (
        100_000, 400_000)
    assert x.instances[0].exposed_waits_ns == (400_000, 0)
    rules = [straggler.RULE, exposed_communication.RULE]
    serial = analyze(Run(run), workers=1, facts=rank_facts)
    assert advise(pooled, rules).findings == advise(serial, rules).findings
    assert r == comm_overlap(serial.graph.rank(0), serial.ranks[0], waits=rc.wait_intervals)


def test_the_contention_walk_keeps_what_it_can_reach() -> None:
    # compute kernels (start, duration) and two collectives of one step starting at 100 and
    # 150 lasting 20 and 30: from either, the walk goes back over at most 50 of compute
    ts = np.array([0, 10, 40, 60, 70, 90, 120, 140], dtype=np.int64)
    dur = np.array([5, 20, 10, 10, 20, 10, 20, 5], dtype=np.int64)
    cm = np.ones(ts.size, dtype=bool)
    cm[7] = False  # a communication kernel: never walked over
    rows = _before(ts, dur, cm, np.array([100, 150]), np.array([0, 0]), np.array([20, 30]))
    # kernel ends 5 30 50 70 90 100 140; back from 100: the kernels ending at 100, 90, 70, 50
    # (10 + 20 + 10 + 10 = 50); back from 150: 140, 100, 90 (20 + 10 + 20)
    assert rows.tolist() == [2, 3, 4, 5, 6]
    # two kernels end together where the walk stops: both kept (the walk takes either first)
    rows = _before(np.array([0, 30, 50]), np.array([50, 20, 30]), np.ones(3, dtype=bool),
                   np.array([80]), np.array([0]), np.array([40]))
    assert rows.tolist() == [0, 1, 2]
    assert _before(ts, dur, cm, np.array([100]), np.array([0]), np.array([0])).size == 0


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three ranks of real torch.profiler traces: the fp32 CNN (tensor cores), the bf16 GPT
    (launch-bound, small grids) and HTA's NCCL trace (exposed communication)."""
    tmp = tmp_path_factory.mktemp("mixed")
    files = []
    for r, name in enumerate(("cnn_fp32_sync.pt.trace.json.gz",
                              "gpt_bf16_adamw.pt.trace.json.gz",
                              "nccl_parser_config_nccl_data.json.gz")):
        doc = json.loads(gzip.decompress((DATA / name).read_bytes()))
        doc["distributedInfo"] = {**doc.get("distributedInfo", {}), "rank": r, "world_size": 3}
        p = tmp / "traces" / f"rank-{r}.json.gz"
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))
        files.append(p)
    return import_traces(files, tmp / "run", workers=1)


def test_real_ranks_pooled_as_serial(mixed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    serial = to_json(build_report(Run(mixed), workers=1))
    ids = {f["id"] for f in json.loads(serial)["findings"]}
    assert {"no_tensor_cores", "launch_bound", "exposed_communication"} <= ids
    # the kernel savings are scaled with a run-wide profiler inflation, known in the parent
    assert host_trust(analyze(Run(mixed), workers=1, facts=rank_facts)).est_inflation_ms > 0
    read: set[str] = set()
    table = Run.table

    def counted(self: Run, name: str, rank: int | None = None) -> object:
        read.add(name)
        return table(self, name, rank)

    monkeypatch.setattr(Run, "table", counted)  # the parent's reads (the workers: their own)
    assert to_json(build_report(Run(mixed), workers=2)) == serial
    assert read <= SMALL_TABLES  # none of the ranks' kernels, API calls, CPU ops, copies
