"""The headline says only what its figures mean: how the program ended, how steps were found,
GPU busy per rank over the GPUs used, no before-window ratio, host time when there is no GPU
work (builder times in µs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from builder import TraceBuilder
from stepscope.reporters.json_report import to_json
from stepscope.reporters.report import Ending, build_report, run_ending
from stepscope.reporters.terminal import render_text
from stepscope.reporters.terminal_head import capture_line
from stepscope.store.manifest import Diagnostic, Manifest, RankInfo, SourceInfo


def _manifest(rc: int | None, *ended: tuple[int, str], open_window: tuple[int, ...] = (),
              partial: bool = True, kind: str = "capture") -> Manifest:
    diags = tuple(Diagnostic("warning", "process_ended", f"rank {r} (pid {100 + r}) ended by {e}")
                  for r, e in ended)
    ranks = {f"rank{r}": {"window_start_ns": 1, "window_end_ns": None if r in open_window else 2}
             for r in range(2)}
    return Manifest(source=SourceInfo(kind=kind, details={"returncode": rc}),
                    ranks=(RankInfo(0), RankInfo(1)), partial=partial, diagnostics=diags,
                    settings={"ranks": ranks})


@pytest.mark.parametrize(("manifest", "ending"), [
    (_manifest(0, partial=False), Ending("", False, 0)),
    # sys.exit(3): not an unfinished program; the rank's own "exit status 3" is not repeated
    (_manifest(3, (0, "exit status 3")), Ending("the program exited with status 3", False, 3)),
    (_manifest(-9, (0, "signal: SIGKILL"), open_window=(0,)),
     Ending("the program was killed by SIGKILL before the capture window closed (rank 0): the "
            "window's last part may be missing", True, -9)),
    # killed after its window closed: the window's data is whole
    (_manifest(-15, (0, "signal: SIGTERM")), Ending("the program was killed by SIGTERM", False,
                                                    -15)),
    (_manifest(1, (0, "exception: RuntimeError")),
     Ending("the program exited with status 1; rank 0 raised RuntimeError", False, 1)),
    # torchrun: the launcher's status, and the worker that was killed inside its window
    (_manifest(1, (1, "signal: SIGKILL"), open_window=(1,)),
     Ending("the program exited with status 1; rank 1 was killed by SIGKILL before the capture "
            "window closed (rank 1): the window's last part may be missing", True, 1)),
    (_manifest(0, (1, "unknown")),
     Ending("rank 1 ended in an unknown way (unknown: it left no record of its end)", True, 0)),
    (_manifest(None), Ending("the program did not finish", True, None)),
    (_manifest(None, kind="kineto"), Ending("the run is partial (see the diagnostics)", True,
                                            None)),
    (_manifest(None, kind="kineto", partial=False), Ending("", False, None)),
])
def test_how_the_program_ended(manifest: Manifest, ending: Ending) -> None:
    assert run_ending(manifest) == ending


def _said(rc: int | None, partial: bool, *diags: tuple[str, str]) -> Manifest:
    """A run whose capture said how it ended (capture/endings.py)."""
    return Manifest(source=SourceInfo(kind="capture", details={"returncode": rc}),
                    ranks=(RankInfo(0),), partial=partial,
                    diagnostics=tuple(Diagnostic("warning", c, t) for c, t in diags))


KILLED = ("program_killed", "the program was killed by SIGKILL")
CUT = "its process ended by signal: SIGKILL with its capture window open: what it had not " \
      "flushed yet is missing"


@pytest.mark.parametrize(("manifest", "ending"), [
    (_said(3, False, ("program_exit_status", "the program exited with status 3"),
           ("process_ended", "rank 0 (pid 7) ended by exit status 3")),
     Ending("the program exited with status 3", False, 3)),
    (_said(-9, False, KILLED, ("process_ended", "rank 0 (pid 7) ended by signal: SIGKILL")),
     Ending("the program was killed by SIGKILL", False, -9)),
    (_said(-9, True, KILLED, ("process_ended", "rank 0 (pid 7) ended by signal: SIGKILL"),
           ("partial_run", f"the run is partial: rank 0 (pid 7): {CUT}")),
     Ending(f"the program was killed by SIGKILL; rank 0: {CUT}", True, -9)),
    (_said(1, True, ("program_exit_status", "the program exited with status 1"),
           ("process_ended", "rank 0 (pid 7) ended by exception: RuntimeError"),
           ("partial_run", ("the run is partial: rank 0 (pid 7): its process ended by "
                            "exception: RuntimeError before its capture window closed"))),
     Ending("the program exited with status 1; rank 0: its process ended by exception: "
            "RuntimeError before its capture window closed", True, 1)),
    (_said(None, True, ("program_not_finished", "the program did not finish")),
     Ending("the program did not finish", True, None)),
])
def test_how_the_program_ended_as_the_capture_said(manifest: Manifest, ending: Ending) -> None:
    assert run_ending(manifest) == ending


def _captured(tmp_path: Path, rc: int, *ended: str, window_closed: bool = True) -> Any:
    b = TraceBuilder()
    for i in range(3):
        b.step(i * 1000, 1000).kernel("k", i * 1000 + 10, 900)
    diags = tuple(Diagnostic("warning", "process_ended", f"rank 0 (pid 7) ended by {e}")
                  for e in ended)
    settings = {"ranks": {"rank0": {"window_start_ns": 0,
                                    "window_end_ns": 3_000_000 if window_closed else None}}}
    return build_report(b.build(tmp_path / "r", settings=settings, partial=rc != 0,
                                diagnostics=diags,
                                source=SourceInfo(kind="capture", details={"returncode": rc})))


def test_a_non_zero_exit_is_said_as_such(tmp_path: Path) -> None:
    text = render_text(_captured(tmp_path, 3, "exit status 3"))
    assert "The program exited with status 3" in text
    assert "PARTIAL" not in text and "did not finish" not in text


def test_a_killed_program_is_partial_with_the_reason(tmp_path: Path) -> None:
    report = _captured(tmp_path, -9, "signal: SIGKILL", window_closed=False)
    text = " ".join(render_text(report).split())
    assert ("PARTIAL: the program was killed by SIGKILL before the capture window closed (rank "
            "0): the window's last part may be missing") in text
    # still analysed: the steps it recorded are there
    assert "Steps: 3 from the trace's ProfilerStep markers (3 steady)" in text
    d = json.loads(to_json(report))
    assert d["run"]["partial"] is True
    assert d["run"]["ending"] == {"text": report.ending.text, "cut_short": True, "returncode": -9}


def _render(b: TraceBuilder, tmp_path: Path, **kw: Any) -> str:
    return " ".join(render_text(build_report(b.build(tmp_path / "r", **kw))).split())


def test_gpu_busy_over_the_one_gpu_used_of_eight(tmp_path: Path) -> None:
    # 1.4 ms busy in 2.0 ms of steps, on device 3 of the 8 listed: 70%, not 8.75%
    b = TraceBuilder()
    for i in range(2):
        b.step(i * 1000, 1000)
    b.kernel("k", 0, 800, device=3).kernel("k", 1000, 600, device=3)
    assert "GPU busy 70.0% of step time (1.4 of 2.0 ms)" in _render(b, tmp_path, devices=8)


def test_gpu_busy_on_two_gpus(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(0, 1000)
    b.kernel("k", 0, 1000, device=0).kernel("k", 0, 500, device=1)
    assert "GPU busy 75.0% of step time on 2 GPUs (1.5 of 2 x 1.0 ms)" in _render(
        b, tmp_path, devices=2)


def test_gpu_busy_of_two_ranks_is_pooled_with_each_ranks_share(tmp_path: Path) -> None:
    # rank 0: 1.4 of 2.0 ms (70%); rank 1: 2.0 of 4.0 ms (50%); pooled 3.4 of 6.0 GPU-ms
    b = TraceBuilder()
    for i in range(2):
        b.step(i * 1000, 1000, rank=0)
        b.step(i * 2000, 2000, rank=1)
    b.kernel("k", 0, 800, rank=0).kernel("k", 1000, 600, rank=0)
    b.kernel("k", 0, 1000, rank=1).kernel("k", 2000, 1000, rank=1)
    text = _render(b, tmp_path)
    assert ("GPU busy 56.7% of step time over 2 ranks (3.4 of 6.0 GPU-ms; per rank 0: 70.0%, "
            "1: 50.0%)") in text
    d = json.loads(to_json(build_report(b.build(tmp_path / "j"))))
    assert d["summary"]["gpu_busy_pct"] == pytest.approx(100 * 3.4 / 6.0, abs=1e-4)
    assert d["summary"]["gpu_time_ms"] == pytest.approx(6.0)
    assert [r["gpu_busy_pct"] for r in d["ranks"]] == [pytest.approx(70.0), pytest.approx(50.0)]


def test_a_cpu_only_run_shows_host_time(tmp_path: Path) -> None:
    b = TraceBuilder()
    for i in range(4):
        b.step(i * 10_000, 10_000, source="hook").input_wait(i * 10_000, 9_700)
    settings = {"ranks": {"rank0": {"gpu": {"backend": "cupti", "state": "stopped"},
                                    "host": {"samplers": {"steps": {
                                        "hook": "torch.optim.Optimizer.step"}}}}}}
    report = build_report(b.build(tmp_path / "r", devices=0, settings=settings,
                                  source=SourceInfo(kind="capture", details={"returncode": 0})))
    text = " ".join(render_text(report).split())
    assert "Steps: 4 from the torch.optim.Optimizer.step hook (4 steady)" in text
    assert ("GPU activity: none recorded: the GPU capture (cupti) ran through the window and "
            "recorded no GPU work") in text
    assert "Where a step's time goes (mean of steady steps): all host time, no GPU activity " \
           "recorded" in text
    assert "input wait 9.70 ms (97%)" in text and "host, nothing recorded 0.30 ms (3%)" in text
    assert "idle (unattributed)" not in text and "GPU busy" not in text
    assert "Input-bound: the step waits 9.70 ms (97%) for the next batch" in text
    assert "Findings: none" not in text
    d = json.loads(to_json(report))
    assert d["summary"]["gpu_use"] == "none" and d["summary"]["devices_used"] == 0
    assert d["summary"]["step_detail"] == "4 from the torch.optim.Optimizer.step hook"
    assert d["run"]["gpu_use"]["0"]["use"] == "none"


def _o(**kw: Any) -> dict[str, Any]:
    return {"rank0": {"step_time_ratio_in_window_vs_before": 0.31, **kw}}


def test_capture_cost_never_compares_with_warm_up_steps() -> None:
    line = capture_line({}, _o())
    assert line == ("capture: GPU none; the capture's cost was not measured (fewer than 3 steps "
                    "ran after the window to compare with)")
    assert "0.31" not in line


def test_a_ratio_under_one_is_no_capture_cost() -> None:
    line = capture_line({}, _o(step_time_ratio_in_window_vs_after=0.98,
                                step_time_ratio_after_ci90=[0.95, 1.02]))
    assert line.endswith("no capture cost measurable: steps in the window were not slower than "
                         "those right after it (x0.98, 90% CI 0.95-1.02)")
    line = capture_line({}, _o(step_time_ratio_in_window_vs_after=1.04,
                                step_time_ratio_after_ci90=[1.01, 1.07]))
    assert line.endswith("steps in the window took x1.04 (90% CI 1.01-1.07) the steps right "
                         "after it (capture off)")
