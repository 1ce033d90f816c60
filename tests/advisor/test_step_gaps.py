"""step_gaps: GPU idle around step boundaries (builder times in µs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stepscope.advisor.base import Finding, Severity
from stepscope.advisor.engine import advise
from stepscope.advisor.rules.step_gaps import RULE, hints
from stepscope.analysis import analyze
from stepscope.importers import import_traces
from stepscope.model.confidence import Confidence
from stepscope.model.host_ops import OpTime
from stepscope.store.run import Run

DATA = Path(__file__).resolve().parents[1] / "data"


def _findings(run: Run) -> tuple[Finding, ...]:
    return advise(analyze(run), [RULE]).findings


def _logging(b: Any, steps: int = 3) -> None:
    """1000 µs steps: one kernel 50-750 (launch call 40-48), then the host logs
    (train.py(80): log_metrics 755-995 > record_function "log_metrics" 760-990)."""
    for i in range(steps):
        t0 = i * 1000
        b.step(t0, 1000)
        b.kernel("gemm", t0 + 50, 700, launch=(t0 + 40, 8))
        b.cpu_op("train.py(80): log_metrics", t0 + 755, 240, kind="python")
        b.annotation("log_metrics", t0 + 760, 230)


def test_fires_on_host_work_between_steps(builder: Any, tmp_path: Path) -> None:
    _logging(builder)
    (f,) = _findings(builder.build(tmp_path / "run"))
    # the idle interval around each boundary is 750 -> 1050: every step holds 250 µs at its
    # end and 50 µs at its start = 300 µs; floor 2 x 8 µs launch call = 16 µs -> 284 µs
    assert (f.id, f.category) == ("step_gaps", "host")
    assert f.est_saving_ms == pytest.approx(0.284) and f.est_saving_pct == pytest.approx(28.4)
    assert f.severity is Severity.CRITICAL and f.confidence is Confidence.HIGH
    assert f.title == "GPU idle 0.28 ms per step (28%) between steps: logging / printing"
    assert f.evidence[0] == ("GPU idle at step boundaries (last GPU work of a step to the first "
                             "of the next): 0.30 ms per step, not counting 0.00 ms per step of "
                             "input waits and syncs (other findings)")
    assert "floor 0.016 ms per step (2 x the median launch call)" in f.evidence[1]
    text = "\n".join(f.evidence)
    assert "annotations: log_metrics 0.23 ms per step" in text
    assert "user Python: train.py(80): log_metrics 0.24 ms per step" in text
    assert "looks like: logging / printing" in text
    assert f.where.call_sites == ("log_metrics", "train.py(80): log_metrics")
    assert len(f.where.steps) == 3
    assert "every N steps" in f.fix.pytorch and "async" in f.fix.jax.lower()


def test_sync_and_input_time_are_not_counted_twice(builder: Any, tmp_path: Path) -> None:
    # as above, but the host waits for the next batch 1000-1040 of every step: 40 µs of the
    # 300 belong to input_bound -> (300 - 40 - 16) = 244 µs
    _logging(builder)
    for i in range(3):
        builder.input_wait(i * 1000, 40)
    (f,) = _findings(builder.build(tmp_path / "run"))
    assert f.est_saving_ms == pytest.approx(0.244)
    assert "not counting 0.040 ms per step of input waits and syncs" in f.evidence[0]


def test_hints_name_the_causes() -> None:
    ops = [OpTime("train.py(90): save_checkpoint", 100, 0),
           OpTime("model.py(12): log_softmax_temperature", 90, 0),
           OpTime("Optimizer.zero_grad#AdamW.zero_grad", 50, 0),
           OpTime("train.py(70): log_metrics", 20, 0), OpTime("train.py(3): step", 10, 0)]
    assert hints([ops]) == ["checkpointing", "optimizer.zero_grad", "logging / printing",
                            "metrics / evaluation"]


def test_silent_on_a_healthy_run(builder: Any, tmp_path: Path) -> None:
    # kernels 10-990 of every 1000 µs step, launched ahead: 20 µs at each boundary, minus the
    # 10 µs floor = 10 µs per step: under 0.05 ms
    for i in range(3):
        t0 = 1000 + i * 1000
        builder.step(t0, 1000)
        builder.kernel("gemm", t0 + 10, 490, launch=(t0 - 500, 5))
        builder.kernel("gemm", t0 + 500, 490, launch=(t0 - 490, 5))
    assert _findings(builder.build(tmp_path / "run")) == ()


@pytest.mark.parametrize("name", ["gpt_bf16_adamw.pt.trace.json.gz",
                                  "cnn_fp32_sync.pt.trace.json.gz"])
def test_fixtures_have_no_step_gap(name: str, tmp_path: Path) -> None:
    # GPT: 0.34 ms of boundary idle per step x 0.81 profiler correction - 17 µs = 0.26 ms, 0.7%
    # of the 39.8 ms step; CNN: the boundary idle follows the .item() sync (sync_calls)
    run = Run(import_traces([DATA / name], tmp_path / "run"))
    assert _findings(run) == ()
