"""``record``'s edges (issue 19): numbers that are not numbers, a script that is not there, two
records to one RUN, Ctrl-C and SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stepscope.capture import staging_folder
from stepscope.cli.main import main
from stepscope.errors import RunError

SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture
def no_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    def launch(*a: object) -> None:
        raise AssertionError("the program must not start")

    monkeypatch.setattr("stepscope.capture.launcher.launch", launch)  # record imports it to run


@pytest.mark.parametrize(("flags", "said"), [
    (["--delay", "1e308", "--duration", "1"], "--delay must be >= 0"),
    (["--delay", "nan", "--duration", "1"], "--delay must be >= 0"),
    (["--delay", "1", "--duration", "inf"], "--duration must be >= 0"),
    (["--warmup", "nan"], "--warmup must be >= 0"),
    (["--sample-hz", "nan"], "--sample-hz nan: must be > 0"),
    (["--sample-hz", "inf"], "--sample-hz inf"),
    (["--sample-hz", "1e9"], "at most 1000"),
])
def test_numbers_are_checked_before_the_program_starts(
        tmp_path: Path, no_launch: None, flags: list[str], said: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "train.py").write_text("")
    assert main(["record", "-o", str(tmp_path / "r"), *flags, "--",
                 str(tmp_path / "train.py")]) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1
    assert os.listdir(tmp_path) == ["train.py"]


def test_a_missing_script_is_refused(tmp_path: Path, no_launch: None,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["record", "-o", str(tmp_path / "r"), "--", str(tmp_path / "nope.py")]) == 2
    assert "nope.py: no such script" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


def test_a_second_record_to_one_run_stops(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = tmp_path / f".run.staging-{os.getppid()}-{time.time_ns() - 10**9}-abc"
    first.mkdir()  # a live record (our parent is alive) that started a second ago
    mine = tmp_path / f".run.staging-{os.getpid()}-{time.time_ns()}-def"
    mine.mkdir()
    with pytest.raises(RunError, match=f"pid {os.getppid()}.* is writing this run"):
        staging_folder.claim(out, mine)
    staging_folder.claim(out, first)  # the earlier one goes on


def test_a_staging_folder_of_a_killed_record_is_removed(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".run.staging-{dead.pid}-{time.time_ns() - 10**9}-abc"
    (stale / "p1-2").mkdir(parents=True)
    old_style = tmp_path / ".run.staging-xyz"  # an older stepscope's name: left alone
    old_style.mkdir()
    mine = tmp_path / f".run.staging-{os.getpid()}-{time.time_ns()}-def"
    mine.mkdir()
    staging_folder.claim(tmp_path / "run", mine)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([old_style.name, mine.name])


def record(tmp_path: Path, prog: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.Popen(
        [sys.executable, "-m", "stepscope", "record", "--backend", "none", "--quiet",
         "-o", str(tmp_path / "r"), "--", sys.executable, "-c", prog],
        env=env, cwd=tmp_path, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for(path: Path, timeout: float = 30.0) -> None:
    t0 = time.monotonic()
    while not path.exists() or not path.read_text():
        assert time.monotonic() - t0 < timeout, f"{path} never appeared"
        time.sleep(0.05)


def test_ctrl_c_keeps_the_programs_signal_status(tmp_path: Path) -> None:
    # the program's default Ctrl-C: KeyboardInterrupt, then death by SIGINT (a shell sees 130);
    # the capture's excepthook used to turn that into exit status 1
    p = record(tmp_path, "import pathlib, time; pathlib.Path('up').write_text('1'); time.sleep(60)")
    wait_for(tmp_path / "up")
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=60)
    assert p.returncode == -signal.SIGINT


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG)")
def test_sigkill_of_record_ends_the_program(tmp_path: Path) -> None:
    prog = "import os, pathlib, time; pathlib.Path('pid').write_text(str(os.getpid())); time.sleep(60)"
    p = record(tmp_path, prog)
    wait_for(tmp_path / "pid")
    pid = int((tmp_path / "pid").read_text())
    p.kill()
    p.communicate(timeout=30)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 20:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    pytest.fail("the program outlived a SIGKILLed stepscope record")


def test_a_run_name_with_glob_characters(tmp_path: Path) -> None:
    first = tmp_path / f".r[1].staging-{os.getppid()}-{time.time_ns() - 10**9}-abc"
    first.mkdir()
    mine = tmp_path / f".r[1].staging-{os.getpid()}-{time.time_ns()}-def"
    mine.mkdir()
    with pytest.raises(RunError, match="is writing this run"):
        staging_folder.claim(tmp_path / "r[1]", mine)
