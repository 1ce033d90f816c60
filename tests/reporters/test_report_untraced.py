"""A recorded run's remedies calibrated to the steps record timed right after its capture
window (reporters.report.recorded_untraced), where those steps speak for the program."""

from __future__ import annotations

from pathlib import Path

from stepscope.advisor.remedies import AFTER_WINDOW, GIVEN
from stepscope.reporters.report import build_report, recorded_untraced
from stepscope.store.manifest import Diagnostic, Manifest, RankInfo, SourceInfo
from stepscope.store.run import Run

DATA = Path(__file__).resolve().parents[1] / "data"


def _manifest(overhead: dict[str, object], kind: str = "capture",
              diagnostics: tuple[Diagnostic, ...] = ()) -> Manifest:
    return Manifest(source=SourceInfo(kind=kind), ranks=(RankInfo(0), RankInfo(1), RankInfo(2)),
                    overhead=overhead, diagnostics=diagnostics)


def test_each_measurable_rank_gives_its_own_step() -> None:
    m = _manifest({"rank0": {"median_step_ms_after_window": 12.5},
                   "rank2": {"median_step_ms_after_window": 13.0},
                   "rank1": {"median_step_ms_after_window": 40.0,
                             "step_time_ratio_after_unmeasurable": "the program changed speed"},
                   "note": {"median_step_ms_after_window": 1.0}})
    u = recorded_untraced(m)
    assert u is not None and u.source == AFTER_WINDOW
    assert u.per_rank == ((0, 12.5), (2, 13.0))
    assert (u.of(0), u.of(1), u.of(2)) == (12.5, None, 13.0)


def test_no_calibration_where_the_steps_do_not_speak_for_the_program() -> None:
    timed = {"rank0": {"median_step_ms_after_window": 12.5}}
    assert recorded_untraced(_manifest({})) is None
    assert recorded_untraced(_manifest(timed, kind="kineto")) is None
    attached = (Diagnostic("info", "cupti_stays_attached", "the shim did not load"),)
    assert recorded_untraced(_manifest(timed, diagnostics=attached)) is None
    assert recorded_untraced(_manifest({"rank0": {"median_step_ms_after_window": True}})) is None


def test_a_recorded_run_is_calibrated_by_itself_and_a_given_step_wins() -> None:
    run = Run(DATA / "recorded" / "h100_cpu_ops_midstep")
    rep = build_report(run, workers=1)
    ra = rep.advice.remedies
    assert ra is not None and ra.calibration is not None
    c = ra.calibration
    # manifest.overhead.rank0.median_step_ms_after_window of that H100 run
    assert c.source == AFTER_WINDOW and c.untraced_step_ms == 10.1532 and c.reached
    assert ra.plan is not None and abs(ra.plan.baseline_ms - 10.153178) < 1e-3
    assert all(any(s.startswith("calibrated to the untraced step measured after the capture "
                                "window (10.15 ms") for s in r.assumptions) for r in ra.remedies)
    given = build_report(run, workers=1, untraced_step_ms=11.0).advice.remedies
    assert given is not None and given.calibration is not None
    assert given.calibration.source == GIVEN and given.calibration.untraced_step_ms == 11.0
    # the JAX run: no step boundary in its window and CUPTI stayed attached: no calibration
    jax = build_report(Run(DATA / "recorded" / "h100_jax_host_callback"), workers=1)
    assert jax.advice.remedies is None or jax.advice.remedies.calibration is None
