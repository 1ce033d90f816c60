"""Rank-parallel analysis (issue 20, item 6): the per-rank analysis and the rules' per-rank facts
run in a process pool or on Dask workers, and the report is the serial path's, byte for byte."""

from __future__ import annotations

import gzip
import json
import pickle
import sys
from pathlib import Path

import pytest

from stepscope.advisor import advise
from stepscope.advisor.rank_facts import rank_facts
from stepscope.analysis.results import (
    CHUNK_RANKS,
    FACT,
    POOL_MIN_EVENTS,
    RankTask,
    analyze,
    analyze_rank_at,
    chunks,
    plan_workers,
)
from stepscope.cli.main import main
from stepscope.importers import import_traces
from stepscope.model.overhead import host_trust
from stepscope.reporters.json_report import to_json
from stepscope.reporters.report import build_report
from stepscope.store.run import Run

DATA = Path(__file__).parent.parent / "data"
TEMPLATES = ("trace_filter_sampled_rank-0.json.gz", "trace_filter_sampled_rank-1.json.gz",
             "nccl_parser_config_nccl_data.json.gz")


@pytest.fixture(scope="module")
def five(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 5-rank run: copies of HTA's two sampled ranks and its NCCL trace (rank i is template
    i % 3), each with its distributedInfo rank rewritten."""
    tmp = tmp_path_factory.mktemp("five")
    docs = [json.loads(gzip.decompress((DATA / t).read_bytes())) for t in TEMPLATES]
    files = []
    for r in range(5):
        doc = dict(docs[r % 3])
        doc["distributedInfo"] = {**doc.get("distributedInfo", {}), "rank": r, "world_size": 5}
        p = tmp / "traces" / f"rank-{r}.json.gz"
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))
        files.append(p)
    return import_traces(files, tmp / "run", workers=1)


def _json(run: Path, **kw: object) -> str:
    return to_json(build_report(Run(run), **kw))  # type: ignore[arg-type]


def test_the_pool_gives_the_serial_report(five: Path) -> None:
    serial = _json(five, workers=1)
    assert json.loads(serial)["findings"]  # a report with something in it
    assert _json(five, workers=2) == serial
    assert _json(five, workers=3) == serial  # chunks of unequal sizes


def test_the_workers_send_the_facts_and_the_parent_reads_no_rank_table(five: Path) -> None:
    run = Run(five)
    a = analyze(run, workers=2, facts=rank_facts)
    # the per-rank analysis did not read the ranks' tables here
    assert [k for k in run._cache] == []
    assert [ra.rank for ra in a.ranks] == [0, 1, 2, 3, 4]
    for r in range(5):
        memo = a.graph.rank(r)._memo
        assert {k[1] for k in memo if isinstance(k, tuple) and k[0] == FACT} >= {
            "excess_transfers", "copy_overlap", "pageable_copies", "memory_peaks", "churn",
            "idle_ops"}
        # the intermediate results stay in the workers: the facts are made from them there
        assert "kernel_frame" not in memo and "gpu_activity" not in memo
        assert ("split_idle", r) in a._memo
    serial = analyze(Run(five), workers=1, facts=rank_facts)
    assert a.ranks == serial.ranks
    assert advise(a).findings == advise(serial).findings


# what the parent of a rank-parallel report may read of a rank: the small tables the cross-rank
# model (collectives, processes) and the NUMA check (devices) need
SMALL_TABLES = {"collectives", "processes", "devices"}


def test_the_parent_of_the_pool_reads_no_large_rank_table(five: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[tuple[str, int | None]] = []
    table = Run.table

    def counted(self: Run, name: str, rank: int | None = None) -> object:
        read.append((name, rank))
        return table(self, name, rank)

    # in this process only: the workers run in the fork server's own interpreter
    monkeypatch.setattr(Run, "table", counted)
    pooled = _json(five, workers=2)
    assert read and {name for name, _ in read} <= SMALL_TABLES
    assert all(rank is not None for _, rank in read)  # never all ranks at once
    read.clear()
    assert _json(five, workers=1) == pooled
    # the serial path reads the large tables: what the pooled one is checked against
    assert {"kernels", "api_calls", "cpu_ops"} <= {name for name, _ in read}


def test_a_worker_sends_only_its_ranks_facts(five: Path) -> None:
    got = analyze_rank_at(RankTask(str(five), (3, 4), rank_facts))
    assert got.error == ""
    assert [r.analysis.rank for r in got.ranks] == [3, 4]
    # no run-wide entry of the worker's one-rank analyses (host trust, summary, cross-rank)
    assert [k for k, _ in got.ranks[0].memo] == [("split_idle", 3)]
    bad = analyze_rank_at(RankTask(str(five / "missing"), (0,), None))
    assert bad.ranks == () and "no such run folder" in bad.error


# What the parent of a rank-parallel report keeps of a rank is what its worker sends back:
# the rank's RankAnalysis (its top-50 kernel table is most of it, ~25 kB) and the facts, small
# per-rank results (docs/benchmarks.md). Measured here (pickled, 2026-11-26): 105 / 100 / 200 kB
# for the three templates' ranks; the largest fact is the NCCL rank's communication model
# inputs (91 kB: the compute kernels the contention estimate may walk over). Before the kernel
# rules' parts and the communication inputs were facts, the ranks sent their kernel frames and
# GPU activity sets: 415 / 387 / 926 kB.
RANK_BYTES = 250_000
PART_BYTES = 10_000  # a kernel rule's part: savings per steady step and five kernels


def _bytes(value: object) -> int:
    return len(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


def test_what_a_rank_sends_back_is_bounded(five: Path) -> None:
    got = analyze_rank_at(RankTask(str(five), (0, 1, 2), rank_facts))
    assert len(got.ranks) == 3
    parts = 0
    for res in got.ranks:
        # only facts: no intermediate result (kernel frame, activity sets, per-event costs)
        assert all(isinstance(k, tuple) and k[0] == FACT for k, _ in res.graph_memo)
        memo = dict(res.graph_memo)
        assert (FACT, "comm_inputs") in memo and memo[(FACT, "comm_inputs")] is not None
        for name in ("grid_parts", "occupancy_parts", "tensor_core_part", "misaligned_part"):
            part = memo[(FACT, name)]
            if part:
                parts += 1
                assert _bytes(part) < PART_BYTES, (res.analysis.rank, name, _bytes(part))
        assert 0 < _bytes(res) < RANK_BYTES, (res.analysis.rank, _bytes(res))
    assert parts >= 2  # the NCCL template's rank: small grids and fp32 matmuls
    # the run-wide host-timing trust from those facts is the serial one, and not trivial
    serial = host_trust(analyze(Run(five), workers=1, facts=rank_facts))
    assert serial.est_inflation_ms > 0 and serial.host_events_per_step > 0
    assert host_trust(analyze(Run(five), workers=2, facts=rank_facts)) == serial


def test_chunks_bounded_and_in_order() -> None:
    assert chunks(list(range(5)), 2) == [(0, 1), (2, 3), (4,)]
    big = chunks(list(range(100)), 2)
    assert max(len(c) for c in big) == CHUNK_RANKS
    assert [r for c in big for r in c] == list(range(100))
    assert chunks([7], 4) == [(7,)]


def test_workers_planned(five: Path) -> None:
    run = Run(five)
    events = sum(run.manifest.tables.values())
    assert events < POOL_MIN_EVENTS
    assert plan_workers(run, None, cores=16) == 1  # a small run: serial
    assert plan_workers(run, 8) == 5  # at most one per rank
    assert plan_workers(run, 2) == 2
    run.manifest.tables["kernels"] = POOL_MIN_EVENTS  # a large run: the cores
    assert plan_workers(run, None, cores=3) == 3
    assert plan_workers(run, None, cores=16) == 5


def test_the_cli_takes_workers_and_engine(five: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["report", str(five), "-o", str(a), "--workers", "1", "--quiet"]) == 0
    assert main(["report", str(five), "-o", str(b), "--workers", "2", "--engine", "process",
                 "--quiet"]) == 0
    assert a.read_bytes() == b.read_bytes()
    capsys.readouterr()
    assert main(["report", str(five), "--engine", "ray", "--quiet"]) == 2
    assert capsys.readouterr().err == ("stepscope: error: --engine ray: unknown engine "
                                       "(process, dask or dask:SCHEDULER_ADDRESS)\n")


def test_dask_missing_is_one_line(five: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed: ImportError
    assert main(["report", str(five), "--engine", "dask", "--format", "json", "--quiet"]) == 2
    assert capsys.readouterr().err == (
        "stepscope: error: --engine dask needs Dask's distributed scheduler, which is not "
        "installed: pip install 'stepscope[dask]'\n")


def test_the_dask_engine_gives_the_serial_report(five: Path) -> None:
    dd = pytest.importorskip("distributed", reason="Dask is not installed (stepscope[dask])")
    serial = _json(five, workers=1)
    with dd.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                         dashboard_address=None) as cluster:
        got = _json(five, workers=2, engine="dask", address=cluster.scheduler_address)
    assert got == serial


def test_the_pool_gives_the_serial_calibrated_report(five: Path) -> None:
    # the calibration reaches the workers (advisor.rank_facts.CalibratedFacts)
    plain = json.loads(_json(five, workers=1))
    given = round(plain["plan"]["baseline_ms"] * 1.2, 3)
    serial = _json(five, workers=1, untraced_step_ms=given)
    cal = json.loads(serial)["step_model"]["calibration"]
    assert cal is not None and cal["untraced_step_ms"] == given and cal["reached"]
    assert _json(five, workers=2, untraced_step_ms=given) == serial
