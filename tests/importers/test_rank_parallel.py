"""Rank-parallel import (issue 20, item 6): the process pool and the Dask engine give the run
the serial path gives, byte for byte; errors in a worker read as the serial path's; the workers'
files are checked when the run writer adopts them."""

from __future__ import annotations

import gzip
import json
import pickle
import shutil
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from stepscope.cli.main import main
from stepscope.errors import DamagedFileError, RunError, StepscopeError, TraceFormatError
from stepscope.importers import import_traces
from stepscope.importers.engines import (
    POOL_MIN_BYTES,
    WORKER_BASE_BYTES,
    WORKER_BYTES_PER_BYTE,
    Engine,
    plan_workers,
    uncompressed_size,
)
from stepscope.importers.rank_work import RankFailure
from stepscope.progress import reporting
from stepscope.store.run import Run
from stepscope.store.writer import RunWriter, check_partition, write_partition

DATA = Path(__file__).parent.parent / "data"


def _ranks(tmp: Path, n: int) -> list[Path]:
    """``n`` rank traces: copies of HTA's two sampled ranks with distributedInfo.rank rewritten
    (rank i is a copy of sampled rank i % 2)."""
    docs = [json.loads(gzip.decompress((DATA / f"trace_filter_sampled_rank-{i}.json.gz")
                                       .read_bytes())) for i in (0, 1)]
    out = []
    for r in range(n):
        doc = dict(docs[r % 2])
        doc["distributedInfo"] = {**doc["distributedInfo"], "rank": r, "world_size": n}
        p = tmp / "traces" / f"rank-{r}.json.gz"
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))
        out.append(p)
    return out


def _same_run(a: Path, b: Path) -> None:
    """Byte-identical tables, and the manifests equal but for when they were written."""
    files_a = sorted(p.relative_to(a) for p in a.rglob("*.parquet"))
    assert files_a == sorted(p.relative_to(b) for p in b.rglob("*.parquet"))
    assert files_a
    for rel in files_a:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
    ma = json.loads((a / "manifest.json").read_text())
    mb = json.loads((b / "manifest.json").read_text())
    assert ma.pop("created") and mb.pop("created")
    assert ma == mb


def _left(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name != "traces")


@pytest.fixture(scope="module")
def four(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], Path]:
    tmp = tmp_path_factory.mktemp("four")
    files = _ranks(tmp, 4)
    return files, import_traces(files, tmp / "serial", workers=1)


def test_the_process_pool_writes_the_serial_run(four: tuple[list[Path], Path],
                                                tmp_path: Path) -> None:
    files, serial = four
    heard: list[tuple[str, float, float]] = []
    with reporting(lambda what, done, total: heard.append((what, done, total))):
        pooled = import_traces(files, tmp_path / "pooled", workers=2)
    _same_run(serial, pooled)
    # the workers complete the collectives: each rank's 10 SendRecv kernels, as serial
    assert [len(Run(pooled).table("collectives", r)) for r in range(4)] == [10] * 4
    assert ("reading traces", 4, 4) in heard  # the progress bar moves as ranks come back
    # 11 tables a rank, collectives among them
    assert [h for h in heard if h[0] == "writing rank 3's tables"][-1][1:] == (11, 11)
    assert _left(tmp_path) == ["pooled"]  # the workers' parts folder is gone


def test_the_cli_takes_workers_and_engine(four: tuple[list[Path], Path], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    files, serial = four
    out = tmp_path / "run"
    assert main(["import", *map(str, files), "-o", str(out), "--workers", "3",
                 "--engine", "process"]) == 0
    _same_run(serial, out)
    assert main(["import", str(files[0]), "-o", str(tmp_path / "x"), "--workers", "0"]) == 2
    assert "--workers: '0' is not a whole number >= 1" in capsys.readouterr().err
    assert main(["import", str(files[0]), "-o", str(tmp_path / "x"), "--engine", "ray"]) == 2
    assert capsys.readouterr().err == ("stepscope: error: --engine ray: unknown engine (process, "
                                       "dask or dask:SCHEDULER_ADDRESS)\n")


def test_an_error_in_a_worker_reads_as_the_serial_one(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    files = _ranks(tmp_path, 3)
    raw = files[1].read_bytes()
    files[1].write_bytes(raw[: len(raw) // 2])  # a truncated copy: a lost rank
    lines = []
    for workers in ("1", "2"):
        assert main(["import", *map(str, files), "-o", str(tmp_path / "run"),
                     "--workers", workers]) == 2
        lines.append(capsys.readouterr().err)
    assert lines[0] == lines[1]
    assert lines[0].startswith(f"stepscope: error: {files[1]}: truncated gzip file")
    assert lines[0].count("\n") == 1
    assert _left(tmp_path) == []  # no run, no temporary folder, no parts folder


def test_a_rank_given_twice_reads_as_the_serial_error(tmp_path: Path) -> None:
    files = _ranks(tmp_path, 3)
    twin = tmp_path / "traces" / "rank-1-again.json.gz"
    shutil.copy(files[1], twin)
    errors = []
    for workers in (1, 2):
        with pytest.raises(TraceFormatError) as exc:
            import_traces([*files, twin], tmp_path / "run", workers=workers)
        errors.append(str(exc.value))
    assert errors[0] == errors[1]
    assert errors[0] == (f"{twin}: rank 1 again (also the rank of {files[1]}); give each "
                         "rank's trace once")
    assert _left(tmp_path) == []


def test_a_failure_travels_as_data() -> None:
    for exc in (DamagedFileError("a.json", "truncated"), RunError("run: cannot write"),
                StepscopeError("x")):
        back = pickle.loads(pickle.dumps(RankFailure.of(exc))).exception()
        assert type(back) is type(exc) and str(back) == str(exc)
    assert pickle.loads(pickle.dumps(RankFailure.of(TraceFormatError("b", "p")))
                        ).exception().problem == "p"


def test_workers_planned() -> None:
    small = [DATA / "trace_filter_sampled_rank-0.json.gz"] * 3
    assert plan_workers(small, None, cores=16, memory=1 << 40) == 1  # below POOL_MIN_BYTES
    assert plan_workers(small, 8, cores=2) == 3  # asked for: at most one per file
    assert plan_workers(small[:1], None, cores=16) == 1
    size = uncompressed_size(DATA / "nccl_parser_config_nccl_data.json.gz")
    assert size == len(gzip.decompress((DATA / "nccl_parser_config_nccl_data.json.gz")
                                       .read_bytes()))
    big = [DATA / "nccl_parser_config_nccl_data.json.gz"] * 8
    assert 8 * size >= POOL_MIN_BYTES > 3 * size
    assert plan_workers(big[:3], None, cores=16, memory=1 << 40) == 1
    per_worker = WORKER_BASE_BYTES + int(WORKER_BYTES_PER_BYTE * size)
    assert plan_workers(big, None, cores=4, memory=1 << 40) == 4  # the cores
    assert plan_workers(big, None, cores=64, memory=1 << 40) == len(big)  # the files
    assert plan_workers(big, None, cores=64, memory=3 * per_worker + 1) == 3  # the memory
    assert plan_workers(big, None, cores=64, memory=per_worker // 2) == 1


def test_engines_parsed() -> None:
    assert Engine.parse("process") == Engine("process", "")
    assert Engine.parse("dask") == Engine("dask", "")
    assert Engine.parse("dask:tcp://10.0.0.5:8786") == Engine("dask", "tcp://10.0.0.5:8786")
    for bad in ("ray", "process:x", ""):
        with pytest.raises(StepscopeError, match="unknown engine"):
            Engine.parse(bad)


def _kernels(n: int, rank: int = 0) -> dict[str, Any]:
    return {"ts_ns": list(range(n)), "dur_ns": [1] * n, "device": [0] * n, "stream": [7] * n,
            "correlation": list(range(n)), "name": ["k"] * n, "rank": [rank] * n}


def test_adopted_partitions_are_checked(tmp_path: Path) -> None:
    good = tmp_path / "good.parquet"
    assert write_partition(good, "kernels", 3, _kernels(5)) == 5
    assert check_partition(good, "kernels", 3) == 5
    with pytest.raises(RunError, match=r"not rank 2's kernels \(rows of another rank\)"):
        check_partition(good, "kernels", 2)
    with pytest.raises(RunError, match="not a partition of memcpy"):
        check_partition(good, "memcpy", 3)
    odd = tmp_path / "odd.parquet"
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"rank": pa.array([3, None], pa.int32())}), odd)
    with pytest.raises(RunError, match="not a partition of kernels"):
        check_partition(odd, "kernels", 3)
    with RunWriter(tmp_path / "run") as w:
        assert w.adopt("kernels", 3, good) == 5
        assert not good.exists()
        again = tmp_path / "again.parquet"
        write_partition(again, "kernels", 3, _kernels(2))
        with pytest.raises(RunError, match="rank 3's kernels is written already"):
            w.adopt("kernels", 3, again)
        assert w.table("kernels", 3).num_rows == 5
    assert write_partition(tmp_path / "none.parquet", "kernels", 0, _kernels(0)) == 0
    assert not (tmp_path / "none.parquet").exists()


def test_dask_missing_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed: ImportError
    f = DATA / "trace_filter_sampled_rank-0.json.gz"
    assert main(["import", str(f), "-o", str(tmp_path / "run"), "--engine", "dask"]) == 2
    assert capsys.readouterr().err == (
        "stepscope: error: --engine dask needs Dask's distributed scheduler, which is not "
        "installed: pip install 'stepscope[dask]'\n")
    assert _left(tmp_path) == []


def test_the_dask_engine_writes_the_serial_run(four: tuple[list[Path], Path],
                                               tmp_path: Path) -> None:
    dd = pytest.importorskip("distributed", reason="Dask is not installed (stepscope[dask])")
    files, serial = four
    with dd.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                         dashboard_address=None) as cluster:
        run = import_traces(files, tmp_path / "dask", engine=f"dask:{cluster.scheduler_address}")
    _same_run(serial, run)
    assert _left(tmp_path) == ["dask"]


def test_an_import_that_stops_before_reading_starts_no_workers(
        four: tuple[list[Path], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from stepscope.importers import engines

    def no_pool(workers: int) -> Any:
        raise AssertionError("a pool was started")

    monkeypatch.setattr(engines, "process_pool", no_pool)
    files, serial = four
    (tmp_path / "run").mkdir()
    with pytest.raises(RunError, match="already exists"):
        import_traces(files, tmp_path / "run", workers=2)
    assert _left(tmp_path) == ["run"]
