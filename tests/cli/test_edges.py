"""The command line's edges (issue 19): whatever goes wrong is one line on stderr and exit 2,
never a traceback; names from traces never reach the terminal raw; outputs are written whole."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from stepscope.cli import main as main_module
from stepscope.cli.main import main
from stepscope.importers import import_traces

DATA = Path(__file__).parent.parent / "data"
CNN = DATA / "cnn_fp32_sync.pt.trace.json.gz"
SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture(scope="module")
def cnn_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return import_traces([CNN], tmp_path_factory.mktemp("edges") / "cnn")


def one_error(err: str, *needles: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stepscope: error: "), err
    assert "Traceback" not in err and all(n in lines[0] for n in needles), lines[0]
    return lines[0]


def cli(*args: str, stdout: object = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run([sys.executable, "-m", "stepscope", *args], env=env, text=True,
                          stdout=stdout, stderr=subprocess.PIPE, timeout=120)  # type: ignore[call-overload]


@pytest.mark.parametrize("args", [["report"], ["report", "--format", "json"],
                                  ["query", "SELECT * FROM kernels", "--format", "csv"]])
def test_stdout_on_a_full_disk(cnn_run: Path, args: list[str]) -> None:
    with open("/dev/full", "w") as full:
        p = cli(args[0], str(cnn_run), *args[1:], stdout=full)
    assert p.returncode == 2
    one_error(p.stderr, "stdout: cannot write (No space left on device)")


def test_a_foreign_exception_becomes_one_line(cnn_run: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from stepscope.cli import report

    def deep(args: object) -> int:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(report, "run", deep)
    assert main(["report", str(cnn_run)]) == 2
    one_error(capsys.readouterr().err, str(cnn_run), "nested too deeply")
    monkeypatch.setattr(report, "run", lambda a: (_ for _ in ()).throw(OverflowError("big")))
    assert main(["report", str(cnn_run)]) == 2
    one_error(capsys.readouterr().err, str(cnn_run), "out of range")


def test_an_error_line_escapes_control_characters(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", str(tmp_path / "\x1b]0;owned\x07.json")]) == 2
    line = one_error(capsys.readouterr().err, "no such file")
    assert "\x1b" not in line and "\x07" not in line and "\\x1b]0;owned\\x07.json" in line
    assert main_module.printable("a\tb\nc", newlines=False) == "a\\tb\\nc"


def test_kernel_names_reach_the_terminal_escaped(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    evil = "evil\x1b]0;owned\x07\x1b[2J\x9b31m\u202ekern"
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "H100"}], "traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
         "ts": 0.0, "dur": 100.0},
        {"ph": "X", "cat": "kernel", "name": evil, "pid": 0, "tid": 7, "ts": 20.0, "dur": 30.0,
         "args": {"device": 0, "stream": 7, "correlation": 5}}]}
    (tmp_path / "t.json").write_text(json.dumps(doc))
    run = import_traces([tmp_path / "t.json"], tmp_path / "run")
    assert main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    assert "evil\\x1b]0;owned" in out  # (rich drops the BEL itself)
    assert not {"\x1b", "\x07", "\x9b", "\u202e"} & set(out)
    assert main(["report", str(run), "-o", str(tmp_path / "r.txt")]) == 0
    assert "\x1b" not in (tmp_path / "r.txt").read_text()
    assert main(["query", str(run), "SELECT name FROM kernels"]) == 0
    assert "\x1b" not in capsys.readouterr().out


def test_query_json_of_types_json_lacks(cnn_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sql = ("SELECT 'ab'::BLOB AS b, 1.5::DECIMAL(10,2) AS d, INTERVAL 90 SECOND AS i, "
           "UUID '00000000-0000-0000-0000-000000000001' AS u, TIME '01:02:03' AS t")
    assert main(["query", str(cnn_run), sql, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"b": "6162", "d": 1.5, "i": [0, 0, 90_000_000_000], "u": "00000000-0000-0000-0000-000000000001",
         "t": "01:02:03"}]


def test_query_limit_must_not_be_negative(cnn_run: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["query", str(cnn_run), "SELECT 1", "--limit", "-1"]) == 2
    one_error(capsys.readouterr().err, "--limit -1")


def test_demo_over_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "f").write_text("mine")
    assert main(["demo", "-o", str(tmp_path / "f")]) == 2
    one_error(capsys.readouterr().err, "f: exists and is not a folder")
    assert (tmp_path / "f").read_text() == "mine"


def test_demo_that_fails_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    from stepscope.cli import demo

    def full(path: object, text: str) -> None:
        raise demo.StepscopeError(f"{path}: cannot write (No space left on device)")

    monkeypatch.setattr("stepscope.store.output.write_text_output", full)  # demo imports it to run
    assert main(["demo", "-o", str(tmp_path / "demo")]) == 2
    one_error(capsys.readouterr().err, "No space left on device")
    assert not (tmp_path / "demo").exists()


def test_export_mode_and_symlink(cnn_run: Path, tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        assert main(["export", str(cnn_run), "-o", str(tmp_path / "t.json")]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "t.json").stat().st_mode) == 0o644  # was 0600
    (tmp_path / "link.json").symlink_to(tmp_path / "t.json")
    assert main(["export", str(cnn_run), "-o", str(tmp_path / "link.json")]) == 0
    assert (tmp_path / "link.json").is_symlink()
    assert sorted(os.listdir(tmp_path)) == ["link.json", "t.json"]


def test_import_on_a_full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    from stepscope.store import writer

    def full(*args: object, **kw: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer.pq, "write_table", full)
    assert main(["import", str(CNN), "-o", str(tmp_path / "out")]) == 2
    one_error(capsys.readouterr().err, "out: cannot write the run (No space left on device)")
    assert os.listdir(tmp_path) == []


def test_a_broken_run_is_an_error_for_every_verb(cnn_run: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    run = Path(shutil.copytree(cnn_run, tmp_path / "run"))
    (run / "kernels" / "rank-0.parquet").unlink()
    for args in (["report", str(run)], ["query", str(run), "SELECT count(*) FROM kernels"],
                 ["export", str(run), "-o", str(tmp_path / "t.json")]):
        assert main(args) == 2
        one_error(capsys.readouterr().err, "kernels: 0 rows, but the manifest counts 288")
    assert sorted(os.listdir(tmp_path)) == ["run"]


@pytest.mark.parametrize("verb", ["report", "export"])
def test_an_output_over_the_runs_own_manifest_is_refused(cnn_run: Path, tmp_path: Path,
                                                        verb: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    run = Path(shutil.copytree(cnn_run, tmp_path / "run"))
    before = (run / "manifest.json").read_bytes()
    assert main([verb, str(run), "-o", str(run / "manifest.json")]) == 2
    one_error(capsys.readouterr().err, "manifest.json: a file of the run")
    assert (run / "manifest.json").read_bytes() == before
