"""Host-timing trust for a recorded run: the capture's own measured cost (hand-computed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.capture.test_bootstrap import run_steps, session

from builder import TraceBuilder
from stepscope.analysis import analyze
from stepscope.analysis.graph import run_graph
from stepscope.capture.partitions import merge
from stepscope.model.confidence import Confidence
from stepscope.model.overhead import capture_trust, host_trust
from stepscope.store.run import Run


def recorded(tmp_path: Path, in_ms: int, after_ms: int) -> Run:
    s, clock, _ = session(tmp_path, "3-7", gpu="none")
    s.begin()
    run_steps(s, clock, 3, step_ms=after_ms)
    run_steps(s, clock, 5, step_ms=in_ms)  # the window
    run_steps(s, clock, 1, step_ms=500)  # closes it (left out)
    run_steps(s, clock, 11, step_ms=after_ms)  # ten steps timed after it
    s.finish()
    return Run(merge(tmp_path / "staging", tmp_path / "run", command=["x"], returncode=0))


@pytest.mark.parametrize(("in_ms", "conf", "pct"), [(15, Confidence.LOW, "33%"),
                                                    (12, Confidence.MEDIUM, "17%"),
                                                    (11, Confidence.HIGH, None)])
def test_the_capture_cost_sets_the_host_confidence(tmp_path: Path, in_ms: int,
                                                   conf: Confidence, pct: str | None) -> None:
    run = recorded(tmp_path, in_ms, 10)
    assert run.manifest.overhead["rank0"]["step_time_ratio_in_window_vs_after"] == pytest.approx(in_ms / 10)
    trust = host_trust(analyze(run))
    assert trust.confidence is conf
    assert trust.est_inflation_ms == 0.0  # not taken off the speed-up estimates
    if pct is None:
        assert trust.note == ""
    else:
        assert f"x{in_ms / 10:.2f}" in trust.note and f"about {pct} of a captured step" in trust.note


def test_no_after_window_figure_no_note(tmp_path: Path) -> None:
    s, clock, _ = session(tmp_path, "3-50", gpu="none")
    s.begin()
    run_steps(s, clock, 10)
    s.finish()  # the window ended with the program: nothing timed after it
    run = Run(merge(tmp_path / "staging", tmp_path / "run", command=["x"], returncode=0))
    assert capture_trust(run_graph(run)).confidence is Confidence.HIGH and capture_trust(run_graph(run)).note == ""


def test_imported_traces_are_not_read_as_captures(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(0, 1000, step=0)
    b.kernel("k", 100, 500, launch=(20, 10))
    run = b.build(tmp_path / "r.stepscope")
    assert capture_trust(run_graph(run)).confidence is Confidence.HIGH


def test_a_program_that_changed_speed_does_not_lower_the_confidence(tmp_path: Path) -> None:
    """In-window steps x2.5 the steps after the window, but the steps before it were as slow as
    the window's: the program changed speed, the ratio is not the capture's cost."""
    from tests.reporters.test_capture_summary import changed_speed_run

    run = changed_speed_run(tmp_path)
    assert run.manifest.overhead["rank0"]["step_time_ratio_in_window_vs_after"] == 2.5
    trust = capture_trust(run_graph(run))
    assert trust.confidence is Confidence.HIGH and trust.note == ""
