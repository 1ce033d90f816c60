"""A recorded run's report says which GPU backend ran and what the capture measured of itself."""

from __future__ import annotations

from pathlib import Path

from builder import TraceBuilder

from stepscope.capture.bootstrap import CaptureConfig, Session
from stepscope.capture.partitions import merge
from stepscope.capture.schedule import make_schedule
from stepscope.report import build_report
from stepscope.reporters.json_report import report_dict
from stepscope.reporters.terminal import render_text
from stepscope.store.run import Run
from tests.capture.test_bootstrap import FakeClock, FakeHost, run_steps


def captured(tmp_path: Path) -> Run:
    clock = FakeClock()
    cfg = CaptureConfig(staging=str(tmp_path / "staging"), schedule=make_schedule("3-8"), gpu="none")
    s = Session(cfg, clock=clock, environ={}, host_factory=lambda c, r, clk: FakeHost(clk))
    s.begin()
    run_steps(s, clock, 12)
    s.finish()
    return Run(merge(tmp_path / "staging", tmp_path / "run", command=["x"], returncode=0))


def test_terminal_and_json_show_the_capture(tmp_path: Path) -> None:
    run = captured(tmp_path)
    report = build_report(run)
    text = render_text(report)
    assert "capture: GPU none off; steps in the window took x1.00 the steps before it" in text
    cap = report_dict(report)["run"]["capture"]
    assert cap["gpu"]["rank0"]["state"] == "off"
    assert cap["overhead"]["rank0"]["steps_in_window"] == 6


def test_imported_runs_have_no_capture_block(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(0, 1000, step=0)
    b.kernel("k", 100, 500, launch=(20, 10))
    report = build_report(b.build(tmp_path / "r.stepscope"))
    assert report_dict(report)["run"]["capture"] is None
    assert "capture:" not in render_text(report)
