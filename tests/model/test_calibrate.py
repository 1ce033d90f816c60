"""Calibrating a step model to the untraced step the user gives: hand-built models with
hand-computed answers, the out-of-reach cases, and a real fixture through the advisor."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from stepscope.advisor import advise
from stepscope.advisor.remedies import GIVEN, UntracedSteps
from stepscope.analysis import analyze
from stepscope.importers import import_traces
from stepscope.model.stepmodel import edits, replay
from stepscope.model.stepmodel.calibrate import (
    MAX_FACTOR,
    TOLERANCE,
    calibrate,
    scale_gpu,
    scale_host,
)
from stepscope.model.stepmodel.steps import HostKind
from stepscope.store import Run

from .test_stepmodel import model

DATA = Path(__file__).resolve().parents[1] / "data"
L = HostKind.LAUNCH


def test_scale_host_scales_every_host_interval_and_no_gpu_op() -> None:
    m = model([(0, L, 100, 10)] * 3, [(1, 0, 20, 5), (2, 0, 20, 5), (3, 0, 20, 5)], tail=40)
    x = scale_host(m, 2.0)
    assert x.host.pre.tolist() == [0, 200, 200, 200]
    assert x.host.own.tolist() == [0, 20, 20, 20]
    assert x.tail.tolist() == [80]
    assert x.ops.dur.tolist() == m.ops.dur.tolist() and x.ops.lat.tolist() == m.ops.lat.tolist()


def test_scale_gpu_scales_op_durations_only() -> None:
    m = model([(0, L, 100, 10)] * 2, [(1, 0, 20, 5), (2, 0, 30, 5)], tail=40)
    x = scale_gpu(m, 1.5)
    assert x.ops.dur.tolist() == [30, 45] and x.ops.lat.tolist() == [5, 5]
    assert x.host.pre.tolist() == m.host.pre.tolist() and x.tail.tolist() == [40]


def test_a_host_bound_step_is_calibrated_by_the_ratio_of_the_steps() -> None:
    # host-bound: 3 x (100 + 10) + 40 = 370 ns; the user's step is 740 ns: the host x2
    m = model([(0, L, 100, 10)] * 3, [(1, 0, 20, 5), (2, 0, 20, 5), (3, 0, 20, 5)], tail=40)
    assert replay(m).step_ns == pytest.approx(370)
    x, c = calibrate(m, 740.0)
    assert c.reached and c.side == "host"  # the GPU cannot reach it (x8: 480 ns of kernels)
    assert c.factor == pytest.approx(2.0, rel=2 * TOLERANCE)
    assert replay(x).step_ns == pytest.approx(740, rel=TOLERANCE)
    # at MIN_FACTOR the host takes 370 / 8 = 46 ns a step, under the GPU's 3 x 20 ns; at
    # MAX_FACTOR 8 x 370 (the GPU's 8 x 60 stays under it)
    assert c.floor_ns == pytest.approx(60, rel=0.02)
    assert c.ceiling_ns == pytest.approx(370 * MAX_FACTOR, rel=0.05)


def test_a_fix_that_leaves_the_gpu_bound_is_predicted_from_the_gpu_work() -> None:
    # 30 launches of 5 us dispatch + 55 us call each, 2 us kernels: 1.8 ms host-bound; the
    # untraced step given is 3.6 ms (the host twice as slow as the trace says). CUDA graphs
    # leave one graph launch (the first dispatch, 10 us or 20 us calibrated, + 10 us) and 30
    # kernels 0.2 us apart on the GPU (65.8 us): GPU-bound either way, the same step, where
    # scaling the uncalibrated prediction by 3.6 / 1.8 (a saving's share) would double it.
    m = model([(0, L, 5_000, 55_000)] * 30, [(e, 0, 2_000, 5_000) for e in range(1, 31)])
    x, c = calibrate(m, 3_600_000.0)
    assert c.reached and c.side == "host" and c.factor == pytest.approx(2.0, rel=2 * TOLERANCE)
    graphed = replay(edits.graph_regions(x, edits.launch_regions(x))).step_ns
    plain = replay(edits.graph_regions(m, edits.launch_regions(m))).step_ns
    gpu = 30 * 2_000 + 29 * edits.GRAPH_NODE_GAP_NS
    assert plain == pytest.approx(gpu, rel=0.01)
    assert graphed == pytest.approx(gpu, rel=0.01)


def test_a_gpu_bound_step_is_calibrated_on_its_gpu_side() -> None:
    # GPU-bound at 2 x 1000 ns under 40 ns of host: 2100 ns is slower kernels (x1.05), not a
    # host 50 times slower; the host cannot reach 1000 ns either, the GPU can (x0.5)
    m = model([(0, L, 10, 10)] * 2, [(1, 0, 1000, 0), (2, 0, 1000, 0)])
    assert replay(m).step_ns == pytest.approx(2000)
    x, c = calibrate(m, 2100.0)
    assert c.reached and c.side == "gpu" and c.factor == pytest.approx(1.05, rel=2 * TOLERANCE)
    assert x.host.pre.tolist() == m.host.pre.tolist() and x.tail.tolist() == m.tail.tolist()
    assert x.ops.dur.tolist() == [round(1000 * c.factor)] * 2
    _, c = calibrate(m, 1000.0)
    assert c.reached and c.side == "gpu" and c.factor == pytest.approx(0.5, rel=2 * TOLERANCE)


def test_a_step_below_either_sides_floor_is_not_calibrated() -> None:
    # host-bound at 370 ns over 60 ns of kernels: the host at 1/8 leaves the GPU's 60 ns, the
    # GPU at 1/8 the host's 370 ns; 10 ns is out of reach
    m = model([(0, L, 100, 10)] * 3, [(1, 0, 20, 5), (2, 0, 20, 5), (3, 0, 20, 5)], tail=40)
    x, c = calibrate(m, 10.0)
    assert not c.reached and c.side == "" and c.factor == 1.0 and x is m
    assert c.floor_ns == pytest.approx(60, rel=0.02)


def test_a_step_beyond_the_ceiling_is_not_calibrated() -> None:
    m = model([(0, L, 100, 10)] * 3, [(1, 0, 20, 5), (2, 0, 20, 5), (3, 0, 20, 5)], tail=40)
    x, c = calibrate(m, 370.0 * MAX_FACTOR * 1.5)  # over the host's 8x and the GPU's 8x
    assert not c.reached and x is m


@pytest.fixture(scope="module")
def cnn(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return Run(import_traces([DATA / "cnn_fp32_sync.pt.trace.json.gz"],
                             tmp_path_factory.mktemp("cal") / "run"))


def test_the_advisor_takes_the_given_step_as_the_baseline(cnn: Run) -> None:
    a = analyze(cnn, workers=1)
    plain = advise(a).remedies
    assert plain is not None and plain.calibration is None and plain.remedies
    estimated = plain.remedies[0].baseline_ms
    given = round(estimated * 1.3, 3)  # the program ran slower untraced than estimated
    cal = advise(a, untraced=UntracedSteps(GIVEN, every=given)).remedies
    assert cal is not None and cal.calibration is not None
    c = cal.calibration
    assert c.reached and c.untraced_step_ms == given and c.source == GIVEN
    assert c.scaled == "gpu" and c.factor > 1.0  # a GPU-bound conv net: its GPU side moves
    assert c.estimated_ms == pytest.approx(estimated, abs=1e-3)
    for r in cal.remedies:
        assert r.baseline_ms == pytest.approx(given, rel=TOLERANCE)
        assert r.predicted_step_ms + r.est_saving_ms == pytest.approx(r.baseline_ms, abs=1e-3)
        assert any(s.startswith("calibrated to the untraced step given") for s in r.assumptions)
    assert cal.plan is not None and cal.plan.baseline_ms == pytest.approx(given, rel=TOLERANCE)
    # the uncalibrated advice is memoised apart and stays as it was
    again = advise(a).remedies
    assert again is not None and again.remedies[0].baseline_ms == estimated


def test_a_given_step_out_of_reach_leaves_the_estimate_and_says_so(cnn: Run) -> None:
    a = analyze(cnn, workers=1)
    cal = advise(a, untraced=UntracedSteps(GIVEN, every=0.01)).remedies  # far under the GPU work of a conv net
    assert cal is not None and cal.calibration is not None
    assert not cal.calibration.reached and cal.calibration.min_ms > 0.01
    plain = advise(a).remedies
    assert plain is not None
    assert [r.predicted_step_ms for r in cal.remedies] == \
        [r.predicted_step_ms for r in plain.remedies]
    assert all(any(s.startswith("not calibrated") for s in r.assumptions) for r in cal.remedies)



def test_a_step_far_from_the_trace_is_questioned(cnn: Run) -> None:
    a = analyze(cnn, workers=1)
    near = advise(a, untraced=UntracedSteps(GIVEN, every=11.0)).remedies  # the GPU x0.84: within FAR
    far = advise(a, untraced=UntracedSteps(GIVEN, every=25.0)).remedies  # the GPU x2.3
    assert near is not None and far is not None
    assert near.calibration is not None and far.calibration is not None
    assert near.calibration.scaled == far.calibration.scaled == "gpu"
    assert 1 / 1.5 < near.calibration.factor < 1.5 < far.calibration.factor
    said = "the step given is far from the trace's (gpu x"
    assert not any(s.startswith(said) for r in near.remedies for s in r.assumptions)
    assert all(any(s.startswith(said) for s in r.assumptions) for r in far.remedies)


def test_the_modelled_steps_own_length_moves_with_the_calibration() -> None:
    # the dataloader remedy reads the step's own length as the loader's period
    m = model([(0, L, 100, 10)] * 3, [(1, 0, 20, 5), (2, 0, 20, 5), (3, 0, 20, 5)], tail=40)
    m = replace(m, step_ns=370)
    x, c = calibrate(m, 740.0)
    assert c.reached and x.step_ns == pytest.approx(740, rel=2 * TOLERANCE)


def test_where_both_sides_set_the_step_the_host_is_scaled_unless_the_gpu_needs_far_less() -> None:
    # a 100 ns host dispatch, then the 200 ns kernel it launched, then a sync: 300 ns, both
    # sides in turn. 360 ns: the host x1.6 (|log| 0.47) or the GPU x1.3 (0.26, weighted x3:
    # 0.79): the host. 210 ns: the GPU x0.55 (0.6 x 3 = 1.8) or the host x0.1, under 1/8: the
    # GPU, as the one side in reach.
    m = model([(0, L, 100, 10), (0, HostKind.BLOCK, 0, 0)], [(1, 0, 200, 0)], wait={2: 0})
    assert replay(m).step_ns == pytest.approx(300)
    x, c = calibrate(m, 360.0)
    assert c.reached and c.side == "host" and c.factor == pytest.approx(1.6, rel=2 * TOLERANCE)
    assert x.ops.dur.tolist() == [200]
    _, c = calibrate(m, 210.0)
    assert c.reached and c.side == "gpu" and c.factor == pytest.approx(0.55, rel=2 * TOLERANCE)
