"""Runs without GPU records: input_bound, host_bound and unstable_steps judge host time
(rules/_host.py), never GPU idle time; the GPU idle rules leave such ranks alone (builder
times in µs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from builder import TraceBuilder
from stepscope.advisor.base import Finding, Severity
from stepscope.advisor.engine import Advice, advise
from stepscope.advisor.rules import RULES
from stepscope.advisor.rules.host_bound import RULE as HOST_BOUND
from stepscope.advisor.rules.input_bound import RULE as INPUT_BOUND
from stepscope.advisor.rules.step_gaps import RULE as STEP_GAPS
from stepscope.advisor.rules.unstable_steps import RULE as UNSTABLE
from stepscope.analysis import analyze
from stepscope.model.confidence import Confidence
from stepscope.store.manifest import SourceInfo
from stepscope.store.run import Run

H100 = "NVIDIA H100 80GB HBM3"
CAPTURE = SourceInfo(kind="capture")
RAN = {"ranks": {"rank0": {"gpu": {"backend": "cupti", "state": "stopped"},
                           "host": {"samplers": {"metrics": {"gpus": {"0": H100}}}}}}}
NO_GPU = {"ranks": {"rank0": {"gpu": {"backend": "auto", "state": "unavailable",
                                      "reason": "no NVIDIA GPU or driver found"}}}}
UNKNOWN = {"ranks": {"rank0": {"gpu": {"backend": "auto", "state": "unavailable",
                                       "reason": "CUPTI_ERROR_UNKNOWN"}}}}


def _advise(run: Run, rules: Any = None) -> Advice:
    return advise(analyze(run), rules)


def _only(run: Run, rule: Any) -> tuple[Finding, ...]:
    return _advise(run, [rule]).findings


def _waiting(b: TraceBuilder, wait: float, steps: int = 4, step: float = 10_000) -> TraceBuilder:
    """Steps of ``step`` µs that wait ``wait`` µs for the batch first, then compute on the CPU."""
    for i in range(steps):
        b.step(i * step, step, source="hook").input_wait(i * step, wait)
    return b


def _cpu(b: TraceBuilder, tmp_path: Path, settings: dict[str, Any], **kw: Any) -> Run:
    kw.setdefault("source", CAPTURE)
    return b.build(tmp_path / "r", settings=settings, devices=0, **kw)


# -- input_bound ----------------------------------------------------------------------------

def test_input_bound_fires_on_a_cpu_only_run_whose_gpu_did_nothing(tmp_path: Path) -> None:
    # 10 ms steps, 9.7 ms of each waiting for the batch: the whole wait is the step's (97%)
    (f,) = _only(_cpu(_waiting(TraceBuilder(), 9_700), tmp_path, RAN), INPUT_BOUND)
    assert f.est_saving_ms == pytest.approx(9.7) and f.est_saving_pct == pytest.approx(97.0)
    assert f.severity is Severity.CRITICAL and f.confidence is Confidence.HIGH and f.note == ""
    assert f.title == ("Input-bound: the step waits 9.70 ms (97%) for the next batch (no GPU "
                       "work: the step is host time)")
    assert f.evidence[0] == "waited for the next batch 9.70 ms per step (97% of the step) in 1.0 waits"
    assert f.evidence[1] == ("no GPU work: the GPU capture (cupti) ran through the window and "
                             "recorded no GPU work; the step's time is host time")
    assert not any("GPU was idle" in e or "GPU idle" in e for e in f.evidence)
    assert "no GPU work was recorded" in f.method and "mean over 4 steady steps" in f.method


def test_input_bound_on_a_machine_without_gpu(tmp_path: Path) -> None:
    (f,) = _only(_cpu(_waiting(TraceBuilder(), 9_700), tmp_path, NO_GPU), INPUT_BOUND)
    assert f.est_saving_ms == pytest.approx(9.7) and f.confidence is Confidence.HIGH
    assert f.evidence[1] == ("no GPU work: no NVIDIA GPU or driver found; the step's time is "
                             "host time")


def test_input_bound_with_unknown_gpu_use_is_low_confidence(tmp_path: Path) -> None:
    # GPU activity not captured on a machine that may have a GPU: at most a warning
    (f,) = _only(_cpu(_waiting(TraceBuilder(), 9_700), tmp_path, UNKNOWN), INPUT_BOUND)
    assert f.est_saving_ms == pytest.approx(9.7)
    assert f.severity is Severity.WARNING and f.confidence is Confidence.LOW
    assert f.title.endswith("for the next batch (GPU activity not recorded)")
    assert f.note.startswith("GPU activity was not recorded (GPU activity was not captured: "
                             "CUPTI_ERROR_UNKNOWN)")


def test_input_bound_on_a_cpu_only_torch_profiler_trace(tmp_path: Path) -> None:
    # an imported CPU-activity trace (framework ops recorded): no profiler scaling of the wait
    b = _waiting(TraceBuilder(), 6_000)
    for i in range(4):
        b.cpu_op("aten::mm", i * 10_000 + 6_000, 3_000)
    (f,) = _only(b.build(tmp_path / "r", devices=0, source=SourceInfo(kind="kineto")),
                 INPUT_BOUND)
    assert f.est_saving_ms == pytest.approx(6.0) and f.confidence is Confidence.LOW
    assert f.note.startswith("GPU activity was not recorded (the trace has no GPU events")


def test_input_bound_workers_share_the_cpus(tmp_path: Path) -> None:
    settings = {"ranks": {"rank0": {**RAN["ranks"]["rank0"], "host": {
        "dataloader": {"num_workers": 4, "pin_memory": False}}}}}
    (f,) = _only(_cpu(_waiting(TraceBuilder(), 5_000), tmp_path, settings), INPUT_BOUND)
    assert "without GPU work the loader's workers share the CPUs with the model's own " \
           "compute: more workers can slow the step's compute" in f.evidence


def test_input_bound_silent_on_a_short_wait(tmp_path: Path) -> None:
    # 50 µs of a 10 ms step: 0.5% < 1%
    assert _only(_cpu(_waiting(TraceBuilder(), 50), tmp_path, RAN), INPUT_BOUND) == ()


# -- host_bound -------------------------------------------------------------------------------

def _model_on_cpu(b: TraceBuilder) -> TraceBuilder:
    """4 steps of 20 ms: 2 ms waiting for the batch, then 18 ms on the CPU. NVML samples the
    GPU 0% busy at 5 ms into each step, the process at 350% of a core; stacks at 10 ms: the
    model's forward in three steps, the loss in the fourth; one inside an input wait."""
    for i in range(4):
        t0 = i * 20_000
        b.step(t0, 20_000, source="hook").input_wait(t0, 2_000)
        b.sample("gpu.util_pct", t0 + 5_000, 0.0, device=0)
        b.sample("process.cpu_pct", t0 + 5_000, 350.0)
        inner = ["/w/model.py:12 forward"] if i < 3 else ["/w/train.py:20 loss_fn"]
        b.stack(t0 + 10_000, ["/w/train.py:30 <module>",
                              "/v/lib/python3.11/site-packages/torch/nn/modules/module.py:1 _call",
                              *inner])
        b.stack(t0 + 1_000, ["/w/train.py:31 <module>",
                             "/v/lib/python3.11/site-packages/torch/utils/data/x.py:1 __next__"])
    return b


def test_host_bound_says_the_model_runs_on_the_cpu(tmp_path: Path) -> None:
    settings = {"ranks": {"rank0": {"gpu": {"backend": "cupti", "state": "unavailable",
                                            "reason": "CUPTI_ERROR_X"},
                                    "host": {"samplers": {"metrics": {"gpus": {"0": H100}}}}}}}
    (f,) = _only(_cpu(_model_on_cpu(TraceBuilder()), tmp_path, settings), HOST_BOUND)
    # 18 ms of host work per 20 ms step: an upper bound of the saving (90% -> capped warning)
    assert f.est_saving_ms == pytest.approx(18.0) and f.est_saving_pct == pytest.approx(90.0)
    assert f.severity is Severity.WARNING and f.confidence is Confidence.LOW
    assert f.title == ("Host-bound: the model runs on the CPU while a GPU is present: 18.00 ms "
                       "of host work per step (90%), no GPU work recorded")
    assert f.evidence == (
        ("4 steady steps of 20.00 ms: 18.00 ms per step of host work, 2.00 ms waiting for "
         "input, no GPU work"),
        f"GPU present: {H100} (device 0)",
        ("no GPU work: NVML saw the GPU(s) 0% busy over 4 samples in the steps; the step's "
         "time is host time"),
        "the training process used 350% of a core (3.5 cores) in the steps (4 samples)",
        ("sampled Python stacks outside input waits (4 samples), innermost user frames: "
         "model.py:12 forward 75%, train.py:20 loss_fn 25%"),
    )
    assert f.method.startswith("at most: the mean over 4 steady steps of the host time outside "
                               "input waits")
    assert "upper bound" in f.note and ".to('cuda')" in f.fix.pytorch
    assert f.where.call_sites == ("model.py:12 forward", "train.py:20 loss_fn")
    assert not any("idle" in e for e in f.evidence)


def test_host_bound_with_the_gpu_capture_running(tmp_path: Path) -> None:
    (f,) = _only(_cpu(_waiting(TraceBuilder(), 2_000), tmp_path, RAN), HOST_BOUND)
    assert f.est_saving_ms == pytest.approx(8.0)  # 10 ms steps, 2 ms waiting
    assert f.evidence[2] == ("no GPU work: the GPU capture (cupti) ran through the window and "
                             "recorded no GPU work; the step's time is host time")


@pytest.mark.parametrize(("settings", "source", "reason"), [
    (NO_GPU, CAPTURE, ("the steps are host time and no GPU waits for the host (no NVIDIA GPU "
                       "or driver found)")),
    (UNKNOWN, CAPTURE, ("no GPU work was recorded and whether the program used a GPU is not "
                        "known (GPU activity was not captured: CUPTI_ERROR_UNKNOWN)")),
    ({}, SourceInfo(kind="kineto"), ("no GPU work was recorded and whether the program used a "
                                     "GPU is not known (the trace has no GPU events")),
    ({"ranks": {"rank0": {"gpu": {"backend": "cupti", "state": "stopped"}}}}, CAPTURE,
     ("no GPU work was recorded (the GPU capture (cupti) ran through the window and recorded "
      "no GPU work) and no GPU is known to be there")),
])
def test_host_bound_is_skipped_where_the_gpu_is_absent_or_unknown(
        tmp_path: Path, settings: dict[str, Any], source: SourceInfo, reason: str) -> None:
    adv = _advise(_cpu(_waiting(TraceBuilder(), 2_000), tmp_path, settings, source=source),
                  [HOST_BOUND])
    assert adv.findings == ()
    ((rid, why),) = [(s.id, s.reason) for s in adv.skipped]
    assert rid == "host_bound" and why.startswith(reason)


def test_host_bound_silent_on_little_host_work(tmp_path: Path) -> None:
    # 9.95 ms of each 10 ms step waits for input: 0.05 ms of host work (0.5%)
    assert _only(_cpu(_waiting(TraceBuilder(), 9_950), tmp_path, RAN), HOST_BOUND) == ()


# -- unstable_steps ---------------------------------------------------------------------------

def _walls(b: TraceBuilder, walls_ms: list[float]) -> TraceBuilder:
    t = 0.0
    for w in walls_ms:
        b.step(t, w * 1000, source="hook")
        t += w * 1000
    return b


def test_unstable_steps_on_host_time(tmp_path: Path) -> None:
    # 7 steps of 10 ms and one of 30 ms: mean 12.5, median 10, std sqrt(350 / 8) = 6.61 ms:
    # CV 0.53; slowest 3.00x; saving mean - median = 2.5 ms of the 10 ms steady step (25%)
    run = _cpu(_walls(TraceBuilder(), [10, 10, 10, 10, 10, 30, 10, 10]), tmp_path, RAN)
    (f,) = _only(run, UNSTABLE)
    assert f.est_saving_ms == pytest.approx(2.5) and f.est_saving_pct == pytest.approx(25.0)
    assert f.severity is Severity.WARNING and f.confidence is Confidence.HIGH
    assert f.title == ("Step time varies 53% (CV) over 8 steps, slowest 3.00x the median: slow "
                       "steps add 2.50 ms per step (25%) of host time (no GPU work)")
    assert ("the slow steps add 2.50 ms per step on average (mean minus median step time)"
            in f.evidence)
    assert not any("GPU idle" in e for e in f.evidence)


def test_unstable_steps_with_unknown_gpu_use_is_low_confidence(tmp_path: Path) -> None:
    run = _cpu(_walls(TraceBuilder(), [10, 10, 10, 10, 10, 30, 10, 10]), tmp_path, UNKNOWN)
    (f,) = _only(run, UNSTABLE)
    assert f.confidence is Confidence.LOW and f.title.endswith("(GPU activity not recorded)")


def test_unstable_steps_silent_on_even_host_steps(tmp_path: Path) -> None:
    assert _only(_cpu(_walls(TraceBuilder(), [10.0] * 8), tmp_path, RAN), UNSTABLE) == ()


# -- the whole catalogue ----------------------------------------------------------------------

def test_a_cpu_only_input_bound_run_gets_its_finding_first(tmp_path: Path) -> None:
    adv = _advise(_cpu(_waiting(TraceBuilder(), 9_700), tmp_path, RAN), RULES)
    assert [f.id for f in adv.findings] == ["input_bound", "host_bound"]
    skipped = {s.id: s.reason for s in adv.skipped}
    assert skipped["step_gaps"] == "needs kernels (the run has none)"
    assert "input_bound" not in skipped and "unstable_steps" not in skipped


def test_gpu_idle_rules_leave_a_rank_without_gpu_records_alone(tmp_path: Path) -> None:
    # rank 0 keeps its GPU busy; rank 1 recorded no GPU work. Seen as GPU idle time, rank 1's
    # whole step would be one idle gap at the step boundary (1 ms per step)
    b = TraceBuilder()
    for i in range(4):
        t = i * 1000.0
        b.step(t, 1000, rank=0).kernel("gemm", t + 5, 990, launch=(t, 4))
        b.step(t, 1000, rank=1)
    run = b.build(tmp_path / "r")
    a = analyze(run)
    assert [ra.devices_used for ra in a.ranks] == [(0,), ()]
    assert _advise(run, [STEP_GAPS, HOST_BOUND]).findings == ()
