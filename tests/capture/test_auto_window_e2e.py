"""The default window's fallback through the real launcher (``python -m stepscope record``), on
CPU: a program without step hooks that uses the GPU (a fake probe, set by the program itself on
its capture session) gets a time window; one that uses no GPU keeps its host tail, with an info."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stepscope.cli.main import main
from stepscope.store.run import Run

SRC = str(Path(__file__).resolve().parents[2] / "src")

LOOP = """
import time
t0 = time.time()
x = 0
while time.time() - t0 < {seconds}:
    x += 1
print("done")
"""


def record(tmp_path: Path, code: str, *opts: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(code))
    env = {k: v for k, v in os.environ.items() if k != "STEPSCOPE_CAPTURE"}
    env["PYTHONPATH"] = SRC
    return subprocess.run([sys.executable, "-m", "stepscope", "record", "-o",
                           str(tmp_path / "run"), *opts, "--", str(script)],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_a_gpu_program_without_step_hooks_gets_a_time_window(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]
                                                              ) -> None:
    fake_gpu = ("from stepscope.capture.process import active\n"
                "active().auto.probe = lambda: True  # the test's stand-in: 'the GPU is in use'\n")
    r = record(tmp_path, fake_gpu + LOOP.format(seconds=2.0), "--warmup", "0.3", "--backend",
               "none", "--sample-hz", "50")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "done\n"
    run = Run(tmp_path / "run")
    rank = run.manifest.settings["ranks"]["rank0"]
    assert rank["window_kind"] == "gpu_time" and rank["auto_warmup_s"] == 0.3
    assert rank["window"].startswith("no step hook fired: 10 s from 0.3 s after the GPU")
    start, end, seen = rank["window_start_ns"], rank["window_end_ns"], rank["gpu_first_used_ns"]
    assert 0.3e9 <= start - seen <= 0.8e9  # polled every 0.25 s
    assert end - start > 0.5e9  # closed when the program ended
    assert not run.manifest.partial
    samples = run.table("samples").column("ts_ns").to_pylist()
    assert samples and all(start <= t <= end for t in samples)
    assert not {d.code for d in run.manifest.diagnostics} & {"window_not_reached", "no_step_hook"}
    capsys.readouterr()
    assert main(["report", str(tmp_path / "run")]) == 0


def test_a_cpu_program_without_hooks_keeps_its_host_tail(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    r = record(tmp_path, LOOP.format(seconds=1.0), "--sample-hz", "50")
    assert r.returncode == 0, r.stderr
    run = Run(tmp_path / "run")
    (d,) = [d for d in run.manifest.diagnostics if d.code == "no_step_hook"]
    assert d.level == "info" and d.message == ("no step hook fired and no GPU work was seen: kept "
                                               "the last 10 s of host activity")
    assert not any(d.code == "window_not_reached" for d in run.manifest.diagnostics)
    assert run.manifest.settings["ranks"]["rank0"]["window_kind"] == "tail"
    assert run.table("samples").num_rows > 0 and not run.manifest.partial
    capsys.readouterr()
    assert main(["report", str(tmp_path / "run")]) == 0
    assert main(["report", str(tmp_path / "run"), "--format", "json"]) == 0
