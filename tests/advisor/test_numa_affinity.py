"""numa_affinity: a rank's process away from its GPU's NUMA node (builder times in µs).

Each rank: 10 ms steps with a 1 ms HtoD copy, a 5 ms kernel and 4 ms of GPU idle (host time);
host-side time = 4 ms idle + 1 ms copies = 5 ms per step, saving = 10% of it = 0.5 ms (5% of
the step).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stepscope.advisor.base import Finding, Severity
from stepscope.advisor.engine import advise
from stepscope.advisor.rules import RULES
from stepscope.advisor.rules.numa_affinity import RULE
from stepscope.analysis import analyze
from stepscope.analysis.placement import cpulist, parse_cpulist, rank_placement
from stepscope.importers import import_traces
from stepscope.model.confidence import Confidence
from stepscope.store.run import Run

EXTERNAL = Path(__file__).resolve().parents[1] / "data" / "external"
NODE0, NODE1 = "0-15", "16-31"


def _rank(b: Any, rank: int, gpu_node: int | None, gpu_cpus: str | None,
          affinity: str | None, *, n: int = 4, pid: int = 100) -> None:
    b.gpu(rank, numa_node=gpu_node, numa_cpus=gpu_cpus)
    b.process("train.py", pid, rank=rank, cpu_affinity=affinity)
    for i in range(n):
        t0 = i * 10_000
        b.step(t0, 10_000, rank=rank)
        b.memcpy("HtoD", t0, 1000, 1 << 20, rank=rank)
        b.kernel("gemm", t0 + 1000, 5000, rank=rank)


def _findings(run: Run) -> tuple[Finding, ...]:
    return advise(analyze(run), [RULE]).findings


def test_a_rank_pinned_to_the_other_node(builder: Any, tmp_path: Path) -> None:
    _rank(builder, 0, 0, NODE0, NODE0)
    _rank(builder, 1, 1, NODE1, NODE0)  # its GPU on node 1, its CPUs on node 0
    (f,) = _findings(builder.build(tmp_path / "run"))
    assert (f.id, f.category) == ("numa_affinity", "host")
    assert f.where.rank == 1
    assert f.est_saving_ms == pytest.approx(0.5) and f.est_saving_pct == pytest.approx(5.0)
    assert f.severity is Severity.WARNING and f.confidence is Confidence.LOW
    assert f.title == ("Rank 1 runs only on CPUs 0-15 (node 0), away from NUMA node 1 of its "
                       "GPU (cuda:0, CPUs 16-31); binding it may save ~0.50 ms per step")
    assert f.evidence[0] == ("rank 1: GPU cuda:0 on NUMA node 1 (CPUs 16-31); process 100 "
                             "(train.py) may run on CPUs 0-15, none of them on its GPU's node")
    assert f.evidence[1] == ("host-side time 5.00 ms per steady step: 4.00 ms of GPU idle the "
                             "host causes (input waits, launches, host work, step gaps, refills "
                             "after syncs) and 1.00 ms of host<->device copies")
    assert "1-10%" in f.evidence[-1] and "10%" in f.method
    assert "--numa-binding=node" in f.fix.pytorch and "numactl --cpunodebind=N" in f.fix.jax
    assert "sched_setaffinity" in f.fix.pytorch and "numactl" in f.fix.tensorflow


def test_right_node_gives_nothing(builder: Any, tmp_path: Path) -> None:
    _rank(builder, 0, 0, NODE0, NODE0)
    _rank(builder, 1, 1, NODE1, "16-23")  # a subset of its node is fine
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_an_unbound_rank_is_info(builder: Any, tmp_path: Path) -> None:
    _rank(builder, 0, 0, NODE0, "0-31")  # may run on both nodes
    _rank(builder, 1, 1, NODE1, NODE1)
    (f,) = _findings(builder.build(tmp_path / "run"))
    assert f.where.rank == 0 and f.severity is Severity.INFO
    assert f.est_saving_ms == pytest.approx(0.5)
    assert f.title.startswith("Rank 0 is not bound to NUMA node 0 of its GPU (cuda:0): it may "
                              "run on CPUs 0-31, 16 of them on other nodes (node 1)")
    assert "16 of 32 outside its GPU's node (16-31)" in f.evidence[0]


def test_several_ranks_off_node_are_listed(builder: Any, tmp_path: Path) -> None:
    _rank(builder, 0, 0, NODE0, NODE1)
    _rank(builder, 1, 1, NODE1, "0-31")
    (f,) = _findings(builder.build(tmp_path / "run"))
    assert f.where.rank == 0 and f.severity is Severity.WARNING  # same saving: lower rank first
    assert "2 of 2 ranks may run away from their GPU's node: rank 0 (off node), rank 1 " \
           "(unbound)" in f.evidence


def test_one_node_or_unknown_gives_nothing_not_even_skipped(builder: Any, tmp_path: Path
                                                            ) -> None:
    _rank(builder, 0, 0, "0-31", "0-31")  # a one-node machine: every CPU is on the node
    _rank(builder, 1, None, None, "0-7")  # GPU's node unknown
    run = builder.build(tmp_path / "run")
    advice = advise(analyze(run), RULES)
    assert not [f for f in advice.findings if f.id == "numa_affinity"]
    assert not [s for s in advice.skipped if s.id == "numa_affinity"]


def test_no_affinity_recorded_gives_nothing(builder: Any, tmp_path: Path) -> None:
    _rank(builder, 0, 0, NODE0, None)
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_kineto_traces_have_no_numa_facts(tmp_path: Path) -> None:
    run = Run(import_traces([EXTERNAL / "hta_negative_queue_length_values_check_rank0.json.gz"],
                            tmp_path / "run"))
    advice = advise(analyze(run), RULES)
    assert not [f for f in advice.findings if f.id == "numa_affinity"]
    assert not [s for s in advice.skipped if s.id == "numa_affinity"]


def test_the_training_process_is_the_one_that_calls_the_gpu(builder: Any, tmp_path: Path
                                                            ) -> None:
    # a worker (pid 7) listed first, pinned to node 1; the training process (pid 100, which
    # issues the launches) on node 0 with its GPU: the rank is placed right
    builder.gpu(0, numa_node=0, numa_cpus=NODE0)
    builder.process("worker", 7, cpu_affinity=NODE1)
    builder.process("train.py", 100, cpu_affinity=NODE0)
    for i in range(3):
        builder.step(i * 1000, 1000)
        builder.kernel("k", i * 1000, 500)
        builder.api("cudaLaunchKernel", i * 1000, 5)
    run = builder.build(tmp_path / "run")
    place = rank_placement(analyze(run).graph.rank(0))
    assert place is not None and place.main.pid == 100 and place.main.on_node
    assert [(o.pid, o.off_node) for o in place.others] == [(7, True)]
    assert _findings(run) == ()


def test_cpulists() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == frozenset({0, 1, 2, 3, 8, 10, 11})
    assert parse_cpulist("") is None and parse_cpulist(None) is None
    assert parse_cpulist("3-1") is None and parse_cpulist("a-b") is None
    assert cpulist(frozenset({0, 1, 2, 5, 7, 8})) == "0-2,5,7-8"
