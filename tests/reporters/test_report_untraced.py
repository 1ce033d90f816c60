"""A recorded run's remedies calibrated to the steps record timed right after its capture
window (reporters.report.recorded_untraced), where those steps speak for the program."""

from __future__ import annotations

from pathlib import Path

from stepscope.advisor.remedies import AFTER_WINDOW, GIVEN, PACED
from stepscope.reporters.report import build_report, recorded_untraced, util_pace
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


def test_a_rank_without_timed_steps_takes_the_gpus_pace() -> None:
    # rank0: steps timed after the window; rank1: none, its GPU 10% busy in the window and 20%
    # after it (the capture doubled its step); rank2: busier in the window than after (the
    # program changed speed), no pace
    m = _manifest({"rank0": {"median_step_ms_after_window": 12.5,
                             "gpu_util_pct_window": 10.0, "gpu_util_pct_after_window": 20.0},
                   "rank1": {"gpu_util_pct_window": 10.0, "gpu_util_pct_after_window": 20.0},
                   "rank2": {"gpu_util_pct_window": 30.0, "gpu_util_pct_after_window": 20.0}})
    u = recorded_untraced(m)
    assert u is not None and u.source == AFTER_WINDOW
    assert u.pace == ((1, 0.5),)
    assert (u.pace_of(0), u.pace_of(1), u.pace_of(2)) == (None, 0.5, None)  # rank0 has a step
    only = recorded_untraced(_manifest({"rank1": {"gpu_util_pct_window": 10.0,
                                                  "gpu_util_pct_after_window": 20.0}}))
    assert only is not None and only.source == PACED and only.per_rank == ()


def test_the_pace_needs_both_figures_and_a_busy_gpu_after_the_window() -> None:
    assert util_pace({"gpu_util_pct_window": 99.0, "gpu_util_pct_after_window": 100.0}) == 0.99
    assert util_pace({"gpu_util_pct_window": 50.0, "gpu_util_pct_after_window": 49.0}) == 1.0
    assert util_pace({"gpu_util_pct_window": 10.0}) is None
    assert util_pace({"gpu_util_pct_window": 1.0, "gpu_util_pct_after_window": 1.5}) is None
    assert util_pace({"gpu_util_pct_window": 10.0, "gpu_util_pct_after_window": 50.0}) is None
    assert util_pace({"gpu_util_pct_window": True, "gpu_util_pct_after_window": 50.0}) is None


def test_a_run_without_a_step_hook_is_calibrated_by_its_pace(tmp_path: Path) -> None:
    """The JAX recording, whose steps were recovered from periodicity (no step hook), its
    manifest given the GPU's utilisation of a capture that cost a fifth of the step (and its
    CUPTI taken as detached): its remedies start from the captured step x 0.8."""
    import json
    import shutil

    src = DATA / "recorded" / "h100_jax_host_callback"
    run_dir = tmp_path / "run"
    shutil.copytree(src, run_dir)
    mf = run_dir / "manifest.json"
    doc = json.loads(mf.read_text())
    doc["diagnostics"] = [d for d in doc.get("diagnostics", [])
                          if d.get("code") != "cupti_stays_attached"]
    doc.setdefault("overhead", {}).setdefault("rank0", {}).update(
        {"gpu_util_pct_window": 16.0, "gpu_util_pct_after_window": 20.0})
    mf.write_text(json.dumps(doc))
    rep = build_report(Run(run_dir), workers=1)
    ra = rep.advice.remedies
    assert ra is not None and ra.calibration is not None and ra.plan is not None
    c = ra.calibration
    assert c.source == PACED and c.reached
    assert abs(c.untraced_step_ms - 0.8 * ra.plan.measured_ms) < 1e-3
    assert abs(ra.plan.baseline_ms - c.untraced_step_ms) < 1e-3
    assert all(any(s.startswith("calibrated to the untraced step paced by the GPU's "
                                "utilisation after the capture window") for s in r.assumptions)
               for r in ra.remedies)
