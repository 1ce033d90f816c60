"""``stepscope record``'s own lines: how the program ended, said as such (a non-zero status is not
a partial run); the merge's progress on a terminal; ``--warmup``."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.capture.test_bootstrap import FakeClock, FakeHost, run_steps

from stepscope.capture.bootstrap import CaptureConfig, Session
from stepscope.capture.partitions import merge
from stepscope.capture.schedule import make_schedule
from stepscope.cli import record as record_cli
from stepscope.cli.main import main
from stepscope.cli.progress import TerminalProgress
from stepscope.cli.record import summary_line

SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.mark.parametrize(("code", "partial", "said"), [
    (0, False, ""),
    (3, False, " (the program exited with status 3)"),
    (-9, False, " (the program was killed by SIGKILL)"),
    (-15, True, " (the program was killed by SIGTERM; partial: a process's capture was cut short)"),
    (1, True, " (the program exited with status 1; partial: a process's capture was cut short)"),
])
def test_summary_line(code: int, partial: bool, said: str) -> None:
    assert summary_line(Path("r"), code, partial) == f"stepscope: wrote run r{said}"


def test_a_program_exiting_with_status_3_is_said_so(tmp_path: Path) -> None:
    script = tmp_path / "prog.py"
    script.write_text("import sys\nsys.exit(3)\n")
    env = {k: v for k, v in os.environ.items() if k != "STEPSCOPE_CAPTURE"}
    env["PYTHONPATH"] = SRC
    r = subprocess.run([sys.executable, "-m", "stepscope", "record", "-o", str(tmp_path / "run"),
                        "--", str(script)], env=env, cwd=tmp_path, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 3
    assert f"stepscope: wrote run {tmp_path / 'run'} (the program exited with status 3)\n" in r.stderr
    assert "partial" not in r.stderr.split("stepscope: wrote run")[1].splitlines()[0]


def staged(tmp_path: Path) -> Path:
    clock = FakeClock()
    cfg = CaptureConfig(staging=str(tmp_path / "staging"), schedule=make_schedule("1-3"),
                        gpu="none")
    s = Session(cfg, clock=clock, environ={}, host_factory=lambda c, r, clk: FakeHost(clk),
                poll_s=None)
    s.begin()
    run_steps(s, clock, 6)
    s.finish()
    return tmp_path / "staging"


def test_merge_tells_its_progress(tmp_path: Path) -> None:
    calls: list[tuple[str, float, float]] = []
    merge(staged(tmp_path), tmp_path / "run", command=["x"], returncode=0,
          progress=lambda what, done, total: calls.append((what, done, total)))
    writing = [c for c in calls if c[0] == "writing tables"]
    total = writing[0][2]
    assert total >= 2  # steps, samples (and the untimed tables)
    assert [c[1] for c in writing] == [*range(int(total)), total]  # each table, then done
    assert not [c for c in calls if c[0] == "decoding GPU records"]  # no raw records here


def test_progress_is_drawn_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stderr", io.StringIO())
    with TerminalProgress(True) as p:
        assert p is None  # not a terminal: silent
    tty = Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    with TerminalProgress(False) as p:
        assert p is None  # --quiet
    with TerminalProgress(True) as p:
        assert p is not None
        p("decoding GPU records", 50.0, 100.0)
        p("writing tables", 1, 4)
    assert "decoding GPU records" in tty.getvalue()


@pytest.mark.parametrize(("args", "said"), [
    (["--warmup", "1", "--steps", "3-5"], "--warmup applies to the default window only"),
    (["--warmup", "1", "--delay", "1", "--duration", "2"], "--warmup applies to the default"),
    (["--warmup", "-1"], "--warmup must be >= 0"),
])
def test_warmup_option_is_checked(args: list[str], said: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["record", *args, "--", "x.py"]) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1


def test_warmup_reaches_the_capture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []

    def fake_launch(cmd: Any, env: dict[str, str]) -> Any:
        seen.append(env["STEPSCOPE_CAPTURE"])
        raise record_cli.CaptureError("stop here")

    monkeypatch.setattr("stepscope.capture.launcher.launch", fake_launch)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.py").write_text("")  # a script that does not exist is refused first
    assert main(["record", "--warmup", "0.5", "--", "x.py"]) == 2
    assert CaptureConfig.from_json(seen[0]).auto_warmup_s == 0.5
