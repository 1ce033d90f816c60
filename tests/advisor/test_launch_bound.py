"""launch_bound: the GPU waits for short kernels' launches (builder times in µs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stepscope.advisor.base import Finding, Severity
from stepscope.advisor.engine import advise
from stepscope.advisor.rules.launch_bound import RULE
from stepscope.analysis import analyze
from stepscope.importers import import_traces
from stepscope.model.confidence import Confidence
from stepscope.store.run import Run

DATA = Path(__file__).resolve().parents[1] / "data"
TINY = "void add_kernel<float>(float*, int)"


def _findings(run: Run) -> tuple[Finding, ...]:
    return advise(analyze(run), [RULE]).findings


def _tiny_kernels(b: Any, steps: int = 3) -> None:
    """1000 µs steps: 20 launch calls of 20 µs back to back (0-400), each 5 µs kernel starting
    2 µs after its call returns; then a 10 µs launch (400-410) of a kernel running 412-1000."""
    for i in range(steps):
        t0 = i * 1000
        b.step(t0, 1000)
        for k in range(20):
            b.kernel(TINY, t0 + 20 * k + 22, 5, launch=(t0 + 20 * k, 20))
        b.kernel("gemm", t0 + 412, 588, launch=(t0 + 400, 10))


def test_fires_on_back_to_back_tiny_launches(builder: Any, tmp_path: Path) -> None:
    _tiny_kernels(builder)
    (f,) = _findings(builder.build(tmp_path / "run"))
    # 19 waits of 15 µs between the tiny kernels + 5 µs before the gemm = 290 µs per step;
    # the 22 µs before the first kernel touches the step boundary (step_gaps)
    assert (f.id, f.category) == ("launch_bound", "launch")
    assert f.est_saving_ms == pytest.approx(0.29) and f.est_saving_pct == pytest.approx(29.0)
    assert f.severity is Severity.CRITICAL and f.confidence is Confidence.HIGH
    assert f.title == ("Launch-bound: 21 launches per step, the GPU waits 0.29 ms per step "
                       "(29%) for them")
    assert f.evidence[0] == ("21 launches per step; median launch call 20.0 µs, median kernel "
                             "5.0 µs")
    assert f.evidence[1] == ("95% of the kernels run shorter than their launch call "
                             "(20 per step)")
    # cross-checks: the launch calls cover 0-410 without a break, so the breakdown's 'launch'
    # also holds the 22 µs before the first kernel: 310 µs; the launch analysis counts the
    # gap before the first kernel from the second step on (22 µs after the previous gemm):
    # (290 + 312 + 312) / 3 = 304.7 µs
    assert f.evidence[2] == ("GPU waiting <= 100 µs for the next launch while the host "
                             "launches: 0.29 ms per step (cross-checks: breakdown 'launch' "
                             "0.31 ms, short launch-bound idle 0.30 ms, all launch-bound idle "
                             "0.30 ms per step)")
    assert f.evidence[3] == ("most frequent kernels shorter than their launch: "
                             "void add_kernel<float> x20/step (5.0 µs)")
    assert f.where.kernels == ("void add_kernel<float>",) and len(f.where.steps) == 3
    assert "CUDA graph" in f.fix.pytorch and "jit_compile=True" in f.fix.tensorflow
    assert "lax.scan" in f.fix.jax and "CUDA graphs" in f.fix.cuda


def test_silent_when_the_host_is_ahead(builder: Any, tmp_path: Path) -> None:
    # the same tiny kernels, launched long before they run: back to back on the GPU
    for i in range(3):
        t0 = 1000 + i * 1000
        builder.step(t0, 1000)
        for k in range(20):
            builder.kernel(TINY, t0 + 10 + 5 * k, 5, launch=(t0 - 900 + 20 * k, 20))
        builder.kernel("gemm", t0 + 110, 880, launch=(t0 - 400, 10))
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_silent_with_few_launches(builder: Any, tmp_path: Path) -> None:
    # 5 launches per step, each followed by a 15 µs wait: under MIN_LAUNCHES
    for i in range(3):
        t0 = i * 1000
        builder.step(t0, 1000)
        for k in range(5):
            builder.kernel(TINY, t0 + 20 * k + 22, 5, launch=(t0 + 20 * k, 20))
        builder.kernel("gemm", t0 + 112, 888, launch=(t0 + 100, 10))
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_gpt_fixture_low_confidence(tmp_path: Path) -> None:
    # 437 launches per step, 26% of kernels shorter than their launch; 6.81 ms of short
    # launch waits per step x 0.67 (profiler correction) = 4.59 ms; traced with stacks: low
    # confidence, at most a warning
    run = Run(import_traces([DATA / "gpt_bf16_adamw.pt.trace.json.gz"], tmp_path / "run"))
    (f,) = _findings(run)
    assert f.est_saving_ms == pytest.approx(4.59, abs=0.02)
    assert f.severity is Severity.WARNING and f.confidence is Confidence.LOW
    assert "with_stack" in f.note
    assert f.evidence[0].startswith("437 launches per step; median launch call 8.5 µs")
    assert any(e.startswith("host times scaled by 0.67") for e in f.evidence)


def _eager_pairs(b: Any, n: int) -> None:
    """An eager loop of two tiny ops with no step marker (a JAX or PyTorch loop without a step
    hook): launch calls of 4 µs every 10 µs (6 µs of framework dispatch between them), each
    1 µs kernel starting 1 µs after its call returns. The period of the kernel stream is one
    op pair (20 µs), not the program's step."""
    for k in range(n):
        t = 10 * k
        b.kernel("mul_kernel" if k % 2 == 0 else "add_kernel", t + 5, 1, launch=(t, 4))


def test_fires_on_an_eager_loop_whose_steps_are_kernel_periods(builder: Any,
                                                               tmp_path: Path) -> None:
    """The kernel stream repeats every op pair (20 µs): the periods are grouped into 2 ms steps
    of 100 pairs (200 launches). Per period the GPU runs 2 µs; its idle time waits for the
    next launch: the call, and the dispatch before it."""
    _eager_pairs(builder, 4000)
    run = builder.build(tmp_path / "run")
    steps = analyze(run).ranks[0].steps
    assert steps.source == "periodicity" and len(steps.steps) == 19
    assert set(steps.spans_ns.tolist()) == {2_000_000}
    assert "repeats every 2 kernels, 20 µs: 100 periods per step" in steps.detail
    (f,) = _findings(run)
    assert f.id == "launch_bound" and f.severity is Severity.CRITICAL
    assert f.est_saving_pct == pytest.approx(90.0, abs=1.0)


def test_few_launches_per_ms_do_not_fire_on_kernel_periods(builder: Any, tmp_path: Path) -> None:
    """The same pairs 200 µs apart (5 launches per ms): the GPU idles for host work, not for
    launches."""
    for k in range(200):
        t = 200 * k
        builder.kernel("mul_kernel" if k % 2 == 0 else "add_kernel", t + 5, 1, launch=(t, 4))
    assert _findings(builder.build(tmp_path / "run")) == ()
