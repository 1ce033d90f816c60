"""The remedies' shared assumption on a traced step whose tracing cost is large
(``advisor.remedies.tracing_note``), by hand and on the GPT fixture (torch.profiler with
stacks, shapes and memory: 39.3 ms traced, 23.8 ms predicted without the profiler)."""

from __future__ import annotations

from pathlib import Path

from stepscope.advisor.remedies import ESTIMATED_BASE, tracing_note
from stepscope.importers import import_traces
from stepscope.reporters.report import build_report
from stepscope.store.run import Run

DATA = Path(__file__).resolve().parent.parent / "data"


def test_the_baseline_is_flagged_from_a_fifth_of_the_step_taken_out() -> None:
    assert ESTIMATED_BASE == 0.2
    (note,) = tracing_note(16.0, 30.0)  # 14 of 30 ms taken out: 47%
    assert note.startswith("the step without the tracing cost (16.00 ms; 30.00 ms as traced) "
                           "is an estimate")
    assert tracing_note(24.5, 30.0) == ()  # 18%
    assert tracing_note(24.0, 30.0) != ()  # 20%: flagged
    assert tracing_note(30.0, 30.0) == () and tracing_note(5.0, 0.0) == ()


def test_every_remedy_of_a_heavily_traced_step_says_its_baseline_is_estimated(
        tmp_path: Path) -> None:
    run = Run(import_traces([DATA / "gpt_bf16_adamw.pt.trace.json.gz"], tmp_path / "run"))
    ra = build_report(run).advice.remedies
    assert ra is not None and ra.plan is not None and ra.remedies
    assert ra.plan.measured_ms - ra.plan.baseline_ms >= ESTIMATED_BASE * ra.plan.measured_ms
    for r in ra.remedies:
        assert r.assumptions[-1] == tracing_note(ra.plan.baseline_ms, ra.plan.measured_ms)[0]
