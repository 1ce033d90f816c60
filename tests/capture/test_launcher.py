"""The launcher end to end (subprocesses): exit codes, output, signals, forms of CMD, processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from stepscope.capture.launcher import build_command, shell_status
from stepscope.store.run import Run

SRC = str(Path(__file__).resolve().parents[2] / "src")


def env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k != "STEPSCOPE_CAPTURE"}
    e["PYTHONPATH"] = SRC
    return e


def record(tmp_path: Path, *cmd: str, opts: tuple[str, ...] = ("--quiet",)) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "stepscope", "record", "-o", str(tmp_path / "run"),
                           *opts, "--", *cmd], env=env(), cwd=tmp_path, capture_output=True, timeout=60)


def test_build_command_forms() -> None:
    py = "/py"
    assert build_command(["train.py", "--lr", "1"], py) == [py, "train.py", "--lr", "1"]
    assert build_command(["--", "-m", "pkg.train"], py) == [py, "-m", "pkg.train"]
    assert build_command(["python3", "t.py"], py) == ["python3", "t.py"]
    assert build_command(["torchrun", "--nproc-per-node=2", "t.py"], py)[0] == "torchrun"
    assert shell_status(-15) == 143 and shell_status(3) == 3


@pytest.mark.parametrize("code,status", [("pass", 0), ("import sys; sys.exit(3)", 3),
                                         ("raise ValueError('boom')", 1)])
def test_exit_code_passes_through(tmp_path: Path, code: str, status: int) -> None:
    r = record(tmp_path, sys.executable, "-c", code)
    assert r.returncode == status, r.stderr
    run = Run(tmp_path / "run")
    # a non-zero exit status is said as such; only the crash (before any window) cut the capture
    assert run.manifest.partial is (status == 1)
    said = [d.message for d in run.manifest.diagnostics if d.code == "program_exit_status"]
    assert said == ([f"the program exited with status {status}"] if status else [])
    if status == 1:
        assert b"ValueError: boom" in r.stderr  # the program's traceback is untouched


@pytest.mark.parametrize("code,ended", [
    ("raise SystemExit(3)", "exit status 3"),  # never reaches sys.exit: only the launcher sees it
    ("import os; os._exit(4)", "exit status 4"),  # no atexit: the partition says "running"
    ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", "signal: SIGKILL"),
])
def test_the_launchers_status_of_its_child_names_the_rank(tmp_path: Path, code: str,
                                                           ended: str) -> None:
    script = tmp_path / "prog.py"
    script.write_text(f"import stepscope\nfor i in range(5): stepscope.step()\n{code}\n")
    r = record(tmp_path, str(script), opts=("--quiet", "--steps", "0-2"))
    status = -9 if "SIGKILL" in ended else int(ended.split()[-1])  # the launcher dies by it too
    assert r.returncode == status, r.stderr
    run = Run(tmp_path / "run")
    assert not run.manifest.partial  # the window (steps 0-2) had closed: nothing was cut
    (rank,) = run.manifest.ranks
    assert [d.message for d in run.manifest.diagnostics if d.code == "process_ended"] == [
        f"rank 0 (pid {rank.pid}) ended by {ended}"]
    said = {d.code: d.message for d in run.manifest.diagnostics
            if d.code in ("program_exit_status", "program_killed", "partial_run")}
    assert said == ({"program_killed": "the program was killed by SIGKILL"} if status < 0 else
                    {"program_exit_status": f"the program exited with status {status}"})


def test_a_clean_exit_of_the_child_is_not_a_process_ended(tmp_path: Path) -> None:
    script = tmp_path / "prog.py"
    script.write_text("import stepscope, sys\nfor i in range(5): stepscope.step()\n"
                      "try:\n    sys.exit(3)\nexcept SystemExit:\n    pass\n")
    r = record(tmp_path, str(script), opts=("--quiet", "--steps", "0-2"))
    assert r.returncode == 0, r.stderr
    run = Run(tmp_path / "run")
    assert not run.manifest.partial  # the caught sys.exit(3) was noted; the launcher knows better
    assert not [d for d in run.manifest.diagnostics if d.code == "process_ended"]


def test_output_is_byte_identical(tmp_path: Path) -> None:
    code = ("import sys; sys.stdout.buffer.write(b'a\\x00b\\r\\n\\xff'); "
            "sys.stderr.buffer.write(b'e\\xfe'); data = sys.stdin.buffer.read(); "
            "sys.stdout.buffer.write(data)")
    args = [sys.executable, "-m", "stepscope", "record", "-o", str(tmp_path / "run"), "--quiet",
            "--", sys.executable, "-c", code]
    r = subprocess.run(args, env=env(), cwd=tmp_path, input=b"in\x01", capture_output=True, timeout=60)
    assert r.returncode == 0
    assert r.stdout == b"a\x00b\r\n\xffin\x01"
    assert r.stderr == b"e\xfe"
    # without --quiet the summary goes to stderr only: stdout is still the program's
    r2 = subprocess.run([*args[:5], str(tmp_path / "run2"), *args[7:]], env=env(), cwd=tmp_path,
                        input=b"in\x01", capture_output=True, timeout=60)
    assert r2.stdout == b"a\x00b\r\n\xffin\x01"
    assert b"stepscope: wrote run" in r2.stderr


def test_sigterm_is_forwarded_and_a_window_it_cuts_is_partial(tmp_path: Path) -> None:
    script = tmp_path / "loop.py"
    script.write_text(textwrap.dedent("""
        import time, stepscope, pathlib
        for i in range(3000):
            stepscope.step()
            if i == 20:  # the window (from step 1) is open
                pathlib.Path("started").write_text("1")
            time.sleep(0.01)
    """))
    p = subprocess.Popen([sys.executable, "-m", "stepscope", "record", "-o", str(tmp_path / "run"),
                          "--quiet", "--steps", "1-2000", "--", str(script)], env=env(), cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 30
    while not (tmp_path / "started").exists() and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == -signal.SIGTERM, err  # a shell sees 143
    run = Run(tmp_path / "run")
    assert run.manifest.partial  # the window was open: SIGTERM cut it
    said = {d.code: d.message for d in run.manifest.diagnostics}
    assert said["program_killed"] == "the program was killed by SIGTERM"
    assert "ended by signal: SIGTERM before its capture window closed" in said["partial_run"]
    assert run.table("steps").num_rows > 0  # the child got it; its bootstrap flushed


def test_module_form(tmp_path: Path) -> None:
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text("import sys\nprint('module ran', sys.argv[1:])\n")
    r = record(tmp_path, "-m", "mypkg.train", "x")
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"module ran ['x']\n"
    assert Run(tmp_path / "run").manifest.source.kind == "capture"


def test_python_subprocesses_become_partitions(tmp_path: Path) -> None:
    script = tmp_path / "launch.py"
    script.write_text(textwrap.dedent("""
        import subprocess, sys, stepscope
        if len(sys.argv) == 1:
            subprocess.run([sys.executable, __file__, "worker"], check=True)
        for i in range(8):
            stepscope.step()
    """))
    r = record(tmp_path, str(script), opts=("--quiet", "--steps", "1-3"))
    assert r.returncode == 0, r.stderr
    run = Run(tmp_path / "run")
    assert sorted(x.rank for x in run.manifest.ranks) == [0, 1]
    assert run.manifest.source.details["processes_captured"] == 2


def test_command_not_found_is_exit_2(tmp_path: Path) -> None:
    r = record(tmp_path, "no-such-command-xyz")
    assert r.returncode == 2
    assert b"command not found" in r.stderr
    assert not list(tmp_path.glob(".run.staging-*"))
