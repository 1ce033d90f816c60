"""The nsys importer on real exports cut down from ../shared/fixtures/nsys (tests/data/nsys,
PROVENANCE.md there): the README's figures where a file was kept whole, else figures computed
here with plain SQL on the same file, independently of the importer."""

from __future__ import annotations

import gzip
import sqlite3
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from stepscope.cli.main import main
from stepscope.importers import detect
from stepscope.importers.nsys import read_nsys
from stepscope.store.produce.bundle import RankBundle

DATA = Path(__file__).parent.parent.parent / "data" / "nsys"
SAXPY = DATA / "saxpy_mpi_a100.sqlite.gz"  # nsys 2022.2.1, schema 2.9.1, whole
HOPPER = DATA / "hopper_matmul_h200.sqlite.gz"  # nsys 2024.6.2, schema 3.16.1, whole
CLOVER = DATA / "cloverleaf_a100_cut.sqlite.gz"  # nsys 2024.5.1, 15 ms cut, OS runtime
TRAIN = DATA / "train_2xh100_before_cut.sqlite.gz"  # nsys 2026.2.1, 2 processes, 12 ms cut


def _all(path: Path) -> tuple[list[RankBundle], dict[str, pa.Table]]:
    bundles = list(read_nsys(path))
    tables: dict[str, list[pa.Table]] = {}
    for b in bundles:
        for k, t in b.tables.items():
            tables.setdefault(k, []).append(t)
    return bundles, {k: pa.concat_tables(v) for k, v in tables.items()}


def _span(tables: dict[str, pa.Table], names: tuple[str, ...]) -> int:
    lo = min(pc.min(tables[n]["ts_ns"]).as_py() for n in names if n in tables)
    hi = max(pc.max(pc.add(tables[n]["ts_ns"], tables[n]["dur_ns"])).as_py()
             for n in names if n in tables)
    return int(hi - lo)


def _copies(t: pa.Table) -> dict[str, tuple[int, int]]:
    g = t.group_by("kind").aggregate([("bytes", "count"), ("bytes", "sum")])
    return {k: (n, b) for k, n, b in zip(g["kind"].cast(pa.string()).to_pylist(),
                                          g["bytes_count"].to_pylist(), g["bytes_sum"].to_pylist())}


def _launched(bundles: list[RankBundle]) -> int:
    n = 0
    for b in bundles:
        have = pc.is_in(b.tables["kernels"]["correlation"],
                        value_set=b.tables["api_calls"]["correlation"].drop_null())
        n += pc.sum(have.cast(pa.int64())).as_py()
    return n


def test_saxpy_2022_layout_matches_the_readme() -> None:
    bundles, t = _all(SAXPY)
    k = t["kernels"]
    assert len(bundles) == 1 and k.num_rows == 5
    assert pc.sum(k["dur_ns"]).as_py() == 88_573_480
    assert _span(t, ("kernels",)) == 1_040_574_391
    assert _span(t, ("kernels", "memcpy", "memset")) == 1_097_327_843
    assert _copies(t["memcpy"]) == {"HtoD": (10, 2_621_440_000), "DtoH": (5, 1_310_720_000)}
    assert "memset" not in t and t["api_calls"].num_rows == 95 and _launched(bundles) == 5
    # 24 NVTX events: 22 push/pop ranges, a thread name (39) and a domain creation (75)
    assert t["annotations"].num_rows == 22 and bundles[0].details["nvtx_other_events"] == 2
    d = t["devices"].to_pylist()[0]
    assert (d["name"], d["sm_count"], d["compute_major"], d["memory_bandwidth_gbs"]) == \
        ("NVIDIA A100-SXM4-40GB", 108, 8, 1555.2)
    assert bundles[0].tool.startswith("NVIDIA Nsight Systems 2022.2.1.31")


def test_hopper_matmul_2024_matches_the_readme() -> None:
    bundles, t = _all(HOPPER)
    assert t["kernels"].num_rows == 19 and pc.sum(t["kernels"]["dur_ns"]).as_py() == 393_539
    assert _span(t, ("kernels",)) == 507_663_181
    assert _span(t, ("kernels", "memcpy", "memset")) == 508_277_390
    assert _copies(t["memcpy"]) == {"DtoH": (1, 1)} and t["memset"].num_rows == 1
    assert t["api_calls"].num_rows == 968 and _launched(bundles) == 19
    assert t["annotations"].num_rows == 652
    assert t["devices"]["name"].to_pylist() == ["NVIDIA H200"]


def _sql(path: Path, tmp_path: Path) -> sqlite3.Connection:
    db = tmp_path / "plain.sqlite"
    db.write_bytes(gzip.decompress(path.read_bytes()))
    return sqlite3.connect(db)


def test_two_process_training_cut_agrees_with_sql(tmp_path: Path) -> None:
    con = _sql(TRAIN, tmp_path)
    bundles, _ = _all(TRAIN)
    pids = [b.rank.pid for b in bundles]
    assert len(bundles) == 2 and [b.rank.rank for b in bundles] == [0, 1]
    for b in bundles:
        pid = b.rank.pid
        dev = con.execute("SELECT min(deviceId) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE "
                          "(globalPid >> 24) & 16777215 = ?", (pid,)).fetchone()[0]
        assert b.tables["devices"]["device"].to_pylist() == [dev] == [pids.index(pid)]
        n, total = con.execute("SELECT count(*), sum(end - start) FROM "
                               "CUPTI_ACTIVITY_KIND_KERNEL WHERE (globalPid >> 24) & 16777215 = ?",
                               (pid,)).fetchone()
        assert (b.tables["kernels"].num_rows, pc.sum(b.tables["kernels"]["dur_ns"]).as_py()) == \
            (n, total)
        for table, ours in (("CUPTI_ACTIVITY_KIND_RUNTIME", "api_calls"),
                            ("NVTX_EVENTS", "annotations")):
            want = con.execute(f"SELECT count(*) FROM {table} WHERE (globalTid >> 24) & 16777215 "
                               "= ? AND end IS NOT NULL", (pid,)).fetchone()[0]
            assert b.tables[ours].num_rows == want
        launched = con.execute(
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE (k.globalPid >> 24) & "
            "16777215 = ? AND EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE "
            "r.correlationId = k.correlationId AND r.globalTid >> 24 = k.globalPid >> 24)",
            (pid,)).fetchone()[0]
        assert _launched([b]) == launched
        assert b.rank.world_size == 2 and b.rank.host == "modal"
    by_kind = dict(con.execute("SELECT copyKind, sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY "
                               "GROUP BY 1").fetchall())
    copies = _copies(_all(TRAIN)[1]["memcpy"])
    assert copies["HtoD"][1] == by_kind[1] and copies["DtoD"][1] == by_kind[8]


def test_os_runtime_calls_and_gpu_row_of_the_cuda_ordinal(tmp_path: Path) -> None:
    con = _sql(CLOVER, tmp_path)
    (b,) = list(read_nsys(CLOVER))
    osrt = con.execute("SELECT count(*) FROM OSRT_API WHERE (globalTid >> 24) & 16777215 = ?",
                       (b.rank.pid,)).fetchone()[0]
    ann = b.tables["annotations"]
    assert osrt > 0 and ann.num_rows == osrt
    assert set(ann["source"].cast(pa.string()).to_pylist()) == {"os_runtime"}
    bus = con.execute("SELECT busLocation FROM TARGET_INFO_GPU WHERE cuDevice = 0").fetchone()[0]
    assert b.tables["devices"]["pci_bus_id"].to_pylist() == [bus.lower()]


def test_parquet_folder_export_gives_the_same_tables(tmp_path: Path) -> None:
    con = _sql(TRAIN, tmp_path)
    folder = tmp_path / "report_pqtdir"
    folder.mkdir()
    for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
        cur = con.execute(f'SELECT * FROM "{name}"')
        cols = [c[0] for c in cur.description]
        rows = cur.fetchall()
        if not rows:
            continue
        pq.write_table(pa.table({c: [r[i] for r in rows] for i, c in enumerate(cols)}),
                       folder / f"{name}.parquet")
    assert detect(folder) == "nsys"
    got = list(read_nsys(folder))
    want = list(read_nsys(TRAIN))
    assert len(got) == len(want) == 2
    for g, w in zip(got, want):
        assert set(g.tables) == set(w.tables)
        for k in w.tables:
            assert g.tables[k].equals(w.tables[k]), k
        assert g.details["format"] == "nsys-parquetdir"
    assert main(["import", str(folder), "-o", str(tmp_path / "run"), "--quiet"]) == 0


def test_import_and_report_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    assert main(["import", str(TRAIN), "-o", str(run), "--quiet"]) == 0
    assert main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    assert "nsys run, 2 rank(s)" in out and "Kernels" in out
    assert main(["report", str(run), "-o", str(tmp_path / "r.html")]) == 0
