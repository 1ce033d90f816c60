"""Run.query: views over the run's Parquet files (nothing loaded up front), the same answers
as the tables, and one line when DuckDB is missing."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stepscope.cli.main import main
from stepscope.errors import QueryError
from stepscope.schema import TABLE_NAMES
from stepscope.store import Manifest, RankInfo, Run, SourceInfo
from stepscope.store.writer import write_run

KERNELS = {"ts_ns": [10, 20, 40], "dur_ns": [5, 7, 9], "name": ["gemm", "relu", "gemm"],
           "device": [0, 0, 0], "source_occupancy_pct": [50.0, 25.0, None]}


def two_ranks(folder: Path) -> Path:
    m = Manifest(source=SourceInfo(kind="test"), ranks=(RankInfo(rank=0), RankInfo(rank=1)))
    return write_run(folder, m, [(0, {"kernels": KERNELS}), (1, {"kernels": KERNELS})])


def test_a_query_loads_no_table(tmp_path: Path) -> None:
    run = Run(two_ranks(tmp_path / "run"))
    got = run.query("select rank, count(*) as n, sum(dur_ns)::BIGINT as d from kernels "
                    "group by rank order by rank")
    assert got.to_pylist() == [{"rank": 0, "n": 3, "d": 21}, {"rank": 1, "n": 3, "d": 21}]
    assert run._cache == {}  # read through DuckDB's views, not run.table()
    assert run.query("select count(*) as n from memcpy").to_pylist() == [{"n": 0}]


def test_every_view_matches_its_table(tmp_path: Path) -> None:
    run = Run(two_ranks(tmp_path / "run"))
    for name in TABLE_NAMES:
        view = run.query(f'select * from "{name}"')
        table = run.table(name)
        assert view.column_names == table.column_names, name
        key = lambda r: tuple(str(v) for v in r.values())  # noqa: E731
        assert sorted(view.to_pylist(), key=key) == sorted(table.to_pylist(), key=key), name


def test_a_file_without_a_newer_nullable_column_reads_it_as_nulls(tmp_path: Path) -> None:
    path = two_ranks(tmp_path / "run")
    f = path / "kernels" / "rank-1.parquet"
    pq.write_table(pq.read_table(f).drop_columns(["source_occupancy_pct"]), f)
    run = Run(path)
    got = run.query("select rank, list(source_occupancy_pct order by ts_ns) as occ from kernels "
                    "group by rank order by rank").to_pylist()
    assert got == [{"rank": 0, "occ": [50.0, 25.0, None]}, {"rank": 1, "occ": [None] * 3}]


def test_a_folder_with_a_quote_in_its_name(tmp_path: Path) -> None:
    run = Run(two_ranks(tmp_path / "it's a run"))
    assert run.query("select count(*) as n from kernels").to_pylist() == [{"n": 6}]


def test_without_duckdb_one_line_says_what_to_install(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = two_ranks(tmp_path / "run")
    monkeypatch.setitem(sys.modules, "duckdb", None)  # import duckdb raises ImportError
    with pytest.raises(QueryError, match=r"pip install 'stepscope\[query\]'"):
        Run(path).query("select 1")
    assert main(["query", str(path), "select 1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs DuckDB, an optional extra" in err
