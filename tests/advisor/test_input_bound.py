"""input_bound: GPU idle while the step waits for the next batch (builder times in µs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stepscope.advisor.base import Finding, Severity
from stepscope.advisor.engine import advise
from stepscope.advisor.rules.input_bound import (
    CPU_UTIL,
    DISK_READ,
    RULE,
    WORKERS_CPU,
    diagnose,
)
from stepscope.analysis import analyze
from stepscope.importers import import_traces
from stepscope.model.confidence import Confidence
from stepscope.store.run import Run

DATA = Path(__file__).resolve().parents[1] / "data"
LOADER = {"num_workers": 2, "pin_memory": False, "prefetch_factor": 2,
          "persistent_workers": False}


def _findings(run: Run) -> tuple[Finding, ...]:
    return advise(analyze(run), [RULE]).findings


def _input_bound(b: Any, wait: float = 400, steps: int = 4) -> None:
    # 1000 µs steps: wait for the batch [0, wait), launch, one kernel until 990
    for i in range(steps):
        t0 = i * 1000
        b.step(t0, 1000)
        b.input_wait(t0, wait)
        b.kernel("gemm", t0 + wait + 10, 580 + 400 - wait, launch=(t0 + wait, 5))


def test_fires_with_the_idle_part_of_the_wait(builder: Any, tmp_path: Path) -> None:
    _input_bound(builder)
    (f,) = _findings(builder.build(tmp_path / "run"))
    # every step waits 400 µs with no GPU work: 0.4 ms of a 1 ms step
    assert (f.id, f.category) == ("input_bound", "input")
    assert f.est_saving_ms == pytest.approx(0.4) and f.est_saving_pct == pytest.approx(40.0)
    assert f.severity is Severity.CRITICAL and f.confidence is Confidence.HIGH
    assert "0.40 ms per step (40%)" in f.title
    assert f.evidence[0] == ("waited for the next batch 0.40 ms per step (40% of the step) in "
                             "1.0 waits; the GPU was idle for 0.40 ms of it")
    assert any(e.startswith("unknown whether the workers are CPU-bound, I/O-bound or too few")
               and "no CPU or disk samples" in e for e in f.evidence)
    assert "while no GPU work ran" in f.method and "mean over 4 steady steps" in f.method
    assert f.where.rank == 0 and f.where.steps[0] == 0
    assert (f.where.start_ns, f.where.end_ns) == (0, 1_000_000)
    assert f.where.call_sites == ("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",)
    assert "num_workers" in f.fix.pytorch and "AUTOTUNE" in f.fix.tensorflow
    assert "prefetch_to_device" in f.fix.jax


def test_first_step_start_up_is_left_out(builder: Any, tmp_path: Path) -> None:
    # 10 ms steps; the first waits 2 ms (> 2 x 0.3 ms + 1 ms: worker start-up), the others
    # 0.3 ms -> saving 0.3 ms (3%: info)
    for i in range(4):
        t0 = i * 10_000
        wait = 2000 if i == 0 else 300
        builder.step(t0, 10_000).input_wait(t0, wait)
        builder.kernel("gemm", t0 + wait, 7000, launch=(t0 + wait - 10, 5))
    (f,) = _findings(builder.build(tmp_path / "run"))
    assert f.est_saving_ms == pytest.approx(0.3) and f.severity is Severity.INFO
    assert "first steady step waited 2.00 ms (DataLoader worker start-up" in "\n".join(f.evidence)
    assert "mean over 3 steady steps" in f.method and "left out" in f.method
    assert f.where.steps[0] in (1, 2, 3)


def test_samples_tell_too_few_workers(builder: Any, tmp_path: Path) -> None:
    # two workers at 190% of a core together (95% each), CPUs 40% busy: too few workers
    _input_bound(builder)
    for i in range(4):
        builder.sample(WORKERS_CPU, i * 1000 + 100, 190.0).sample(CPU_UTIL, i * 1000 + 100, 40.0)
        builder.sample(WORKERS_CPU, i * 1000 + 600, 10.0)  # outside the waits: not used
    (f,) = _findings(builder.build(tmp_path / "run", settings={"dataloader": LOADER}))
    text = "\n".join(f.evidence)
    assert ("DataLoader settings: num_workers=2, pin_memory=False, prefetch_factor=2, "
            "persistent_workers=False") in text
    assert "pin_memory=False" in text and "pageable" in text
    assert ("too few workers: while the step waited, the 2 workers use 95% of a core each, "
            "the CPUs are 40% busy") in text


def test_diagnosis_from_settings_and_samples() -> None:
    two = {"num_workers": 2}
    assert diagnose({"num_workers": 0}, {}, "capture")[-1].startswith("too few workers: "
                                                                      "num_workers=0")
    cpu = diagnose(two, {WORKERS_CPU: 190.0, CPU_UTIL: 95.0}, "capture")[-1]
    assert cpu.startswith("CPU-bound:") and "more workers will not help" in cpu
    io = diagnose(two, {WORKERS_CPU: 40.0, DISK_READ: 250e6}, "capture")[-1]
    assert io.startswith("I/O-bound:") and "20% of a core each" in io and "250.0 MB/s" in io
    idle = diagnose(two, {WORKERS_CPU: 40.0, DISK_READ: 0.0}, "capture")[-1]
    assert idle.startswith("the workers are mostly idle")
    unknown = diagnose(None, {}, "kineto")
    assert len(unknown) == 1 and "(kineto) has no CPU or disk samples" in unknown[0]


def test_silent_when_the_wait_overlaps_gpu_work(builder: Any, tmp_path: Path) -> None:
    # a healthy GPU-bound run whose loader waits while the GPU works: nothing to save
    for i in range(4):
        t0 = 1000 + i * 1000
        builder.step(t0, 1000).input_wait(t0 + 20, 300)
        builder.kernel("gemm", t0 + 5, 990, launch=(t0 - 500, 5))
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_silent_below_the_threshold(builder: Any, tmp_path: Path) -> None:
    _input_bound(builder, wait=8)  # 8 µs of 1000: under 0.05 ms and 1%
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_skipped_without_input_waits(builder: Any, tmp_path: Path) -> None:
    builder.step(0, 1000).kernel("gemm", 10, 900, launch=(1, 5))
    run = builder.build(tmp_path / "run")
    adv = advise(analyze(run), [RULE])
    assert adv.findings == () and adv.skipped[0].id == "input_bound"
    assert "input_waits" in adv.skipped[0].reason


def test_gpt_fixture_waits_too_little(tmp_path: Path) -> None:
    # the GPT run's 4-worker loader: 0.31, 0.09, 0.10 ms of GPU-idle waiting (0.16 ms per
    # step, 0.4% of a 39.8 ms step): under the 1% threshold
    run = Run(import_traces([DATA / "gpt_bf16_adamw.pt.trace.json.gz"], tmp_path / "run"))
    a = analyze(run)
    assert a.ranks[0].input.gpu_idle_wait_ns_per_step == pytest.approx((307_039, 87_251, 96_993),
                                                                       abs=2)
    assert advise(a, [RULE]).findings == ()
