from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from stepscope.errors import QueryError, RunError
from stepscope.schema import TABLE_NAMES, spec
from stepscope.store import Manifest, RankInfo, Run, RunWriter, SourceInfo
from stepscope.store.writer import conform, write_run


def manifest(ranks: tuple[int, ...] = (0,)) -> Manifest:
    return Manifest(source=SourceInfo(kind="test"), ranks=tuple(RankInfo(rank=r) for r in ranks))


def test_roundtrip_two_ranks_and_sql(tmp_path: Path) -> None:
    kern = {"ts_ns": [10, 20], "dur_ns": [5, 7], "name": ["gemm", "relu"], "device": [0, 0]}
    path = write_run(tmp_path / "run", manifest((0, 1)), [(0, {"kernels": kern}), (1, {"kernels": kern})])
    run = Run(path)
    assert run.ranks == (0, 1)
    t = run.table("kernels")
    assert t.num_rows == 4 and t.schema == spec("kernels").arrow_schema
    assert sorted(t.column("rank").to_pylist()) == [0, 0, 1, 1]
    assert run.table("kernels", rank=1).num_rows == 2
    got = run.query("select rank, sum(dur_ns)::BIGINT as d from kernels group by rank order by rank")
    assert got.to_pylist() == [{"rank": 0, "d": 12}, {"rank": 1, "d": 12}]
    assert run.manifest.tables["kernels"] == 4
    assert pa.types.is_dictionary(t.schema.field("name").type)


def test_missing_table_is_empty_with_schema(tmp_path: Path) -> None:
    run = Run(write_run(tmp_path / "run", manifest(), []))
    for name in TABLE_NAMES:
        t = run.table(name)
        assert t.num_rows == 0 and t.schema == spec(name).arrow_schema
    assert run.query("select count(*) as n from memcpy").to_pylist() == [{"n": 0}]


def test_conform_rejects_unknown_and_missing_required() -> None:
    with pytest.raises(ValueError, match="unknown columns"):
        conform("kernels", {"ts_ns": [1], "dur_ns": [1], "name": ["a"], "gird_x": [1]})
    with pytest.raises(ValueError, match="required column name"):
        conform("kernels", {"ts_ns": [1], "dur_ns": [1]})


def test_failed_write_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        with RunWriter(tmp_path / "run") as w:
            w.write("kernels", 0, {"ts_ns": [1], "dur_ns": [1], "name": ["a"]})
            raise ValueError("boom")
    assert list(tmp_path.iterdir()) == []


def test_existing_run_needs_overwrite(tmp_path: Path) -> None:
    write_run(tmp_path / "run", manifest(), [])
    with pytest.raises(RunError, match="already exists"):
        write_run(tmp_path / "run", manifest(), [])
    write_run(tmp_path / "run", manifest(), [(0, {"steps": {"ts_ns": [0], "dur_ns": [1], "step": [3]}})],
              overwrite=True)
    assert Run(tmp_path / "run").table("steps").column("step").to_pylist() == [3]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_bad_run_folders(tmp_path: Path) -> None:
    with pytest.raises(RunError, match="no such run folder"):
        Run(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunError, match="not a stepscope run"):
        Run(tmp_path / "empty")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "manifest.json").write_text("{nope")
    with pytest.raises(RunError, match="invalid JSON"):
        Run(bad)
    (bad / "manifest.json").write_text(json.dumps({"schema_version": 99, "source": {"kind": "x"},
                                                   "ranks": []}))
    with pytest.raises(RunError, match="newer"):
        Run(bad)


def test_query_error_is_one_line(tmp_path: Path) -> None:
    run = Run(write_run(tmp_path / "run", manifest(), []))
    with pytest.raises(QueryError) as e:
        run.query("select nope from kernels")
    assert "\n" not in str(e.value)
