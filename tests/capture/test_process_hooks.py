"""``capture.process``'s SIGTERM hook: the capture is flushed, then the program dies by the
signal as it would have; a flush that hangs is given ``TERM_FLUSH_S``, and a second SIGTERM
ends the program at once. Each case runs in a subprocess of its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")

PROGRAM = """
import pathlib, sys, time
from stepscope.capture import process

class Session:  # what the hooks call: finish() hangs (a stuck flush), or returns
    exit_status = 0
    def finish(self, ended=None):
        pathlib.Path("finishing").write_text(str(ended))
        if sys.argv[1] == "hang":
            time.sleep(120)
        pathlib.Path("finished").write_text("1")

process.TERM_FLUSH_S = float(sys.argv[2])
process.install_process_hooks(Session())
pathlib.Path("up").write_text("1")
time.sleep(120)
"""


def _start(tmp_path: Path, mode: str, flush_s: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", PROGRAM, mode, str(flush_s)], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": SRC})


def _wait_for(path: Path, timeout: float = 30.0) -> None:
    t0 = time.monotonic()
    while not path.exists():
        assert time.monotonic() - t0 < timeout, f"{path} never appeared"
        time.sleep(0.02)


def test_sigterm_flushes_then_dies_by_the_signal(tmp_path: Path) -> None:
    p = _start(tmp_path, "ok", 30.0)
    _wait_for(tmp_path / "up")
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == -signal.SIGTERM
    assert (tmp_path / "finishing").read_text() == "signal: SIGTERM"
    assert (tmp_path / "finished").exists()


def test_a_hung_flush_does_not_keep_the_program_alive(tmp_path: Path) -> None:
    p = _start(tmp_path, "hang", 1.0)
    _wait_for(tmp_path / "up")
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == -signal.SIGTERM
    assert 0.9 <= time.monotonic() - t0 < 20  # the watchdog, not the 120 s flush
    assert (tmp_path / "finishing").exists() and not (tmp_path / "finished").exists()


def test_a_second_sigterm_ends_the_flush_at_once(tmp_path: Path) -> None:
    p = _start(tmp_path, "hang", 60.0)
    _wait_for(tmp_path / "up")
    p.send_signal(signal.SIGTERM)
    _wait_for(tmp_path / "finishing")
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == -signal.SIGTERM
    assert time.monotonic() - t0 < 20
