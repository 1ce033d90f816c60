"""``--force`` replaces a stepscope run and nothing else: never a user's folder, never one that
holds an input of the command (``record -o DIR --force``, ``import ... -o DIR --force``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stepscope.cli.main import main
from stepscope.errors import RunError
from stepscope.store import Manifest, RankInfo, Run, SourceInfo
from stepscope.store.writer import check_replaceable, write_run

DATA = Path(__file__).parent.parent / "data"
CNN = DATA / "cnn_fp32_sync.pt.trace.json.gz"
SRC = str(Path(__file__).resolve().parents[2] / "src")


def a_run(path: Path) -> Path:
    m = Manifest(source=SourceInfo(kind="test"), ranks=(RankInfo(rank=0),))
    return write_run(path, m, [(0, {"steps": {"ts_ns": [0], "dur_ns": [1], "step": [7]}})])


def user_folder(path: Path) -> Path:
    path.mkdir()
    (path / "train.py").write_text("print('mine')\n")
    shutil.copy(CNN, path / CNN.name)
    return path


def one_error_line(err: str, folder: Path) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"stepscope: error: {folder}: not replaced")
    return lines[0]


# -- the check itself --------------------------------------------------------------------------

def test_a_stepscope_run_may_be_replaced(tmp_path: Path) -> None:
    run = a_run(tmp_path / "run")
    (run / "report.html").write_text("<html>")  # what `stepscope report --format html` leaves
    check_replaceable(run, [CNN])
    check_replaceable(tmp_path / "absent")


@pytest.mark.parametrize(("make", "said"), [
    (lambda p: user_folder(p), "has no readable stepscope manifest.json"),
    (lambda p: (p.mkdir(), (p / "manifest.json").write_text(json.dumps({"name": "pkg"}))),
     "has no readable stepscope manifest.json"),  # someone else's manifest.json
    (lambda p: (a_run(p), (p / "train.py").write_text("")), "holds train.py"),
    (lambda p: (a_run(p), (p / "data").mkdir()), "holds data"),
    (lambda p: (a_run(p), (p / "steps" / "notes.txt").write_text("")), "holds steps/notes.txt"),
    (lambda p: p.write_text("x"), "is not a folder"),
])
def test_anything_else_is_refused(tmp_path: Path, make: object, said: str) -> None:
    target = tmp_path / "out"
    make(target)  # type: ignore[operator]
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(RunError, match=f"not replaced: it {said}"):
        check_replaceable(target)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_a_symlink_to_a_run_is_refused(tmp_path: Path) -> None:
    a_run(tmp_path / "run")
    (tmp_path / "link").symlink_to(tmp_path / "run")
    with pytest.raises(RunError, match="is a symbolic link"):
        check_replaceable(tmp_path / "link")


def test_a_run_holding_an_input_or_the_working_folder_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = a_run(tmp_path / "run")
    table = run / "steps" / "rank-0.parquet"
    with pytest.raises(RunError, match=f"holds {table}, which this command uses"):
        check_replaceable(run, [table])
    monkeypatch.chdir(run / "steps")
    with pytest.raises(RunError, match="which this command uses"):
        check_replaceable(run)


def test_the_writer_checks_too(tmp_path: Path) -> None:
    folder = user_folder(tmp_path / "mine")
    m = Manifest(source=SourceInfo(kind="test"), ranks=(RankInfo(rank=0),))
    with pytest.raises(RunError, match="not replaced"):
        write_run(folder, m, [], overwrite=True)
    assert (folder / "train.py").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["mine"]  # no temporary folder left


# -- import ------------------------------------------------------------------------------------

def test_import_force_never_deletes_a_user_folder(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    folder = user_folder(tmp_path / "work")
    assert main(["import", str(folder / CNN.name), "-o", str(folder), "--force"]) == 2
    one_error_line(capsys.readouterr().err, folder)
    assert sorted(p.name for p in folder.iterdir()) == sorted([CNN.name, "train.py"])


def test_import_force_replaces_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = a_run(tmp_path / "run")
    assert main(["import", str(CNN), "-o", str(run), "--force"]) == 0
    assert Run(run).manifest.source.kind == "kineto"


# -- record ------------------------------------------------------------------------------------

def record(tmp_path: Path, out: Path, script: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "STEPSCOPE_CAPTURE"}
    env["PYTHONPATH"] = SRC
    return subprocess.run([sys.executable, "-m", "stepscope", "record", "-o", str(out), "--force",
                           "--quiet", "--", str(script)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


def test_record_force_refuses_a_user_folder_before_the_program_runs(tmp_path: Path) -> None:
    folder = user_folder(tmp_path / "work")
    (folder / "train.py").write_text("open('ran', 'w').write('1')\n")
    r = record(tmp_path, folder, folder / "train.py")
    assert r.returncode == 2
    one_error_line(r.stderr, folder)
    assert not (tmp_path / "ran").exists()  # the program never started
    assert sorted(p.name for p in folder.iterdir()) == sorted([CNN.name, "train.py"])


def test_record_force_replaces_a_run(tmp_path: Path) -> None:
    run = a_run(tmp_path / "run")
    script = tmp_path / "prog.py"
    script.write_text("print('ok')\n")
    r = record(tmp_path, run, script)
    assert r.returncode == 0, r.stderr
    assert Run(run).manifest.source.kind == "capture"
