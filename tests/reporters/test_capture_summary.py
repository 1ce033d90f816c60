"""A recorded run's report says which GPU backend ran and what the capture measured of itself."""

from __future__ import annotations

from pathlib import Path

from tests.capture.test_bootstrap import captured_run, run_steps, session

from builder import TraceBuilder
from stepscope.capture.partitions import merge
from stepscope.reporters.json_report import report_dict
from stepscope.reporters.report import build_report
from stepscope.reporters.terminal import render_text
from stepscope.store.run import Run


def test_terminal_and_json_show_the_capture(tmp_path: Path) -> None:
    run = captured_run(tmp_path)
    report = build_report(run)
    text = " ".join(render_text(report).split())
    # the window ran to the program's end: no steps after it, and the steps before it are the
    # program's warm-up, never the reference for the capture's cost
    assert report.manifest.overhead["rank0"]["step_time_ratio_in_window_vs_before"] == 1.0
    assert ("capture: GPU none off; the capture's cost was not measured (fewer than 3 steps ran "
            "after the window to compare with)") in text
    assert "before it" not in text
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


def test_terminal_prefers_the_steps_after_the_window(tmp_path: Path) -> None:
    run = captured_run(tmp_path, steps="3-8", n=25)  # the window closes at 9; 10 steps after it
    o = run.manifest.overhead["rank0"]
    assert o["steps_after_window"] == 10
    text = " ".join(render_text(build_report(run)).split())  # the terminal wraps long lines
    assert ("capture: GPU none off; steps in the window took x1.00 (90% CI 1.00-1.00) the steps "
            "right after it (capture off)") in text


def changed_speed_run(tmp_path: Path) -> Run:
    """Steps of 10 ms before and in the window, 4 ms after it: the program changed speed."""
    s, clock, _ = session(tmp_path, "14-19", gpu="none")
    s.begin()
    run_steps(s, clock, 14, step_ms=10)
    run_steps(s, clock, 6, step_ms=10)  # the window
    run_steps(s, clock, 1, step_ms=500)  # closes it (left out)
    run_steps(s, clock, 11, step_ms=4)
    s.finish()
    return Run(merge(tmp_path / "staging", tmp_path / "run", command=["x"], returncode=0))


def test_terminal_says_when_the_capture_cost_is_not_measurable(tmp_path: Path) -> None:
    run = changed_speed_run(tmp_path)
    o = run.manifest.overhead["rank0"]
    assert o["step_time_ratio_in_window_vs_after"] == 2.5 and o["steps_before_window"] >= 10
    text = " ".join(render_text(build_report(run)).split())
    assert ("capture's cost is not measurable on this run: the steps before the window (10 ms) "
            "and after it (4 ms) differ by x2.50") in text
    assert "x2.50 (90% CI" not in text
