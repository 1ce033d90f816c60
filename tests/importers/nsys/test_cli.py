"""``stepscope import`` of nsys exports: steps from NVTX ranges through the analysis, and bad
input as one line naming the file, exit 2."""

from __future__ import annotations

import gzip
import sqlite3
from pathlib import Path

import pytest
from tests.importers.nsys.nsys_db import build

import stepscope
from stepscope.cli.main import main
from stepscope.importers import run_folder_for


def test_steps_come_from_nvtx_ranges_named_like_steps(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert main(["import", str(build(tmp_path / "r.sqlite")), "-o", str(run), "--quiet"]) == 0
    report = stepscope.analyze(run)
    steps = report.analysis.ranks[0].steps
    assert steps.source == "nvtx" and len(steps.steps) == 3
    assert report.manifest.source.kind == "nsys"


def test_default_output_drops_the_sqlite_suffix() -> None:
    assert run_folder_for("a/report1.sqlite.gz") == Path("a/report1.stepscope")
    assert run_folder_for("report1.sqlite") == Path("report1.stepscope")


def test_import_and_load_name_the_run_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    # one home for the name (importers.run_folder_for): `stepscope import` without -o and
    # stepscope.load write the same folder, the trace's suffixes dropped
    assert run_folder_for("a/rank0.pt.trace.json.gz") == Path("a/rank0.stepscope")
    assert run_folder_for("logs/") == Path("logs.stepscope")
    monkeypatch.chdir(tmp_path)
    assert run_folder_for(".") == tmp_path.with_name(tmp_path.name + ".stepscope")
    src = build(tmp_path / "report1.sqlite")
    assert main(["import", str(src), "--quiet"]) == 0
    assert (tmp_path / "report1.stepscope" / "manifest.json").is_file()
    assert stepscope.load(src).path == tmp_path / "report1.stepscope"  # reused, not imported


def _one_line_exit_2(path: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path,
                     says: str) -> None:
    assert main(["import", str(path), "-o", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and says in err, err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_a_file_named_sqlite_that_is_not(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    bad = tmp_path / "report.sqlite"
    bad.write_text("hello, not a database\n")
    _one_line_exit_2(bad, capsys, tmp_path, "not an SQLite database")


def test_an_sqlite_database_without_nsys_tables(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "other.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (a INTEGER)")
    con.commit()
    con.close()
    _one_line_exit_2(db, capsys, tmp_path, "without Nsight Systems tables")


def test_an_export_without_kernels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = build(tmp_path / "r.sqlite")
    con = sqlite3.connect(db)
    con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    con.commit()
    con.close()
    _one_line_exit_2(db, capsys, tmp_path, "without GPU kernels")


def test_a_truncated_gzip_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = gzip.compress(build(tmp_path / "r.sqlite").read_bytes())
    gz = tmp_path / "cut.sqlite.gz"
    gz.write_bytes(data[: len(data) // 2])
    _one_line_exit_2(gz, capsys, tmp_path, "truncated gzip")


def test_a_truncated_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    whole = build(tmp_path / "r.sqlite").read_bytes()
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(whole[: len(whole) // 2])
    _one_line_exit_2(cut, capsys, tmp_path, "cut.sqlite")


def test_an_nsys_report_must_be_exported_first(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    rep = tmp_path / "report1.nsys-rep"
    rep.write_bytes(b"\x00\x01binary report")
    _one_line_exit_2(rep, capsys, tmp_path, "nsys export --type sqlite")


def test_a_gzip_truncated_past_the_sniffed_megabyte(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The sniff sees only the first megabyte: the reader's own decompression says it too,
    and leaves no temporary file."""
    import tempfile

    from stepscope.errors import DamagedFileError
    from stepscope.importers.nsys.source import open_export

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))

    data = gzip.compress(build(tmp_path / "r.sqlite").read_bytes())
    gz = tmp_path / "cut.sqlite.gz"
    gz.write_bytes(data[: len(data) // 2])
    with pytest.raises(DamagedFileError, match="truncated gzip"):
        open_export(gz)
    assert not list(tmp.iterdir())
