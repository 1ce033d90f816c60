"""unstable_steps: step times that vary too much to trust averages (builder times in µs)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from stepscope.advisor.base import Finding, Severity
from stepscope.advisor.engine import advise
from stepscope.advisor.rules.unstable_steps import RULE
from stepscope.analysis import analyze
from stepscope.importers import import_traces
from stepscope.store.run import Run

DATA = Path(__file__).resolve().parents[1] / "data"


def _findings(run: Run) -> tuple[Finding, ...]:
    return advise(analyze(run), [RULE]).findings


def _steps(b: Any, walls: Sequence[float], busy: float = 800) -> None:
    """Contiguous steps of the given walls, each with one kernel of ``busy`` µs at its start."""
    t = 0.0
    for w in walls:
        b.step(t, w).kernel("gemm", t, busy, launch=(t, 2))
        t += w


def test_fires_on_a_slow_step_that_idles_the_gpu(builder: Any, tmp_path: Path) -> None:
    # walls 1,1,1,3,1,1 ms; idle per step 0.2 ms except 2.2 ms in step 3:
    # mean 0.5333 - median 0.2 = 0.3333 ms; cv = 0.7454 / 1.3333 = 0.559; max/median 3.0;
    # step 3 is an outlier, so the steady mean step is 1 ms: 33% -> capped at warning
    _steps(builder, [1000, 1000, 1000, 3000, 1000, 1000])
    (f,) = _findings(builder.build(tmp_path / "run"))
    assert (f.id, f.category) == ("unstable_steps", "measurement")
    assert f.est_saving_ms == pytest.approx(0.3333, abs=1e-4)
    assert f.severity is Severity.WARNING
    assert f.title == ("Step time varies 56% (CV) over 6 steps, slowest 3.00x the median: slow "
                       "steps idle the GPU 0.33 ms per step (33%)")
    assert f.evidence[0] == ("6 steps (warm-up excluded): min 1.00 / median 1.00 / p95 2.50 / "
                             "max 3.00 ms; mean 1.33 ms")
    assert f.evidence[1] == ("coefficient of variation 0.56 (threshold 0.10); slowest step 3.00x "
                             "the median (threshold 1.5)")
    text = "\n".join(f.evidence)
    assert "GPU idle per step: median 0.20 ms, mean 0.53 ms" in text
    assert "1 steps slower than 1.25x the median: step 3 (3.00 ms)" in text
    assert "1 outlier steps are left out of the averages" in text
    assert "only 6 steps" in text
    assert f.where.steps == (3,) and (f.where.start_ns, f.where.end_ns) == (3_000_000, 6_000_000)
    assert "--steps" in f.fix.pytorch and "gc.freeze()" in f.fix.pytorch


def test_periodic_slow_steps(builder: Any, tmp_path: Path) -> None:
    walls = [3000 if i % 3 == 2 else 1000 for i in range(12)]
    _steps(builder, walls)
    (f,) = _findings(builder.build(tmp_path / "run"))
    assert "one step in every 3 is slow" in "\n".join(f.evidence)
    assert f.where.steps == (2, 5, 8, 11)


def test_host_side_variation_is_info(builder: Any, tmp_path: Path) -> None:
    # a host running ahead: step 3 is slow on the host but the GPU never idles in it:
    # no saving, but a 3x step still makes averages untrustworthy -> info
    t = 0.0
    for w in [1000, 1000, 1000, 3000, 1000, 1000]:
        builder.step(t, w).kernel("gemm", t, w, launch=(t, 2))
        t += w
    (f,) = _findings(builder.build(tmp_path / "run"))
    assert f.est_saving_ms == 0 and f.severity is Severity.INFO
    assert "most of the wall-time excess (0.33 ms per step) is GPU work" in "\n".join(f.evidence)


def test_silent_on_steady_steps(builder: Any, tmp_path: Path) -> None:
    _steps(builder, [1000, 1010, 990, 1000, 1005])
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_silent_on_small_costless_variation(builder: Any, tmp_path: Path) -> None:
    # cv 0.16 but the GPU idles the same 0.2 ms in every step (the kernel grows with the step)
    t = 0.0
    for w in [1000, 1400, 1000, 1400, 1000]:
        builder.step(t, w).kernel("gemm", t, w - 200, launch=(t, 2))
        t += w
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_skipped_with_too_few_steps(builder: Any, tmp_path: Path) -> None:
    _steps(builder, [1000, 2000])
    run = builder.build(tmp_path / "run")
    adv = advise(analyze(run), [RULE])
    assert adv.findings == ()
    assert adv.skipped[0].reason == "needs at least 3 steps after warm-up (the run has 2)"


def test_fixtures(tmp_path: Path) -> None:
    # GPT: 34.1 / 39.3 / 46.1 ms (cv 0.12); GPU idle per step 21.9 / 27.3 / 33.9 ms ->
    # 27.7 - 27.3 = 0.40 ms (1% of the step): info. CNN: 12.72 / 12.63 / 12.63 ms: silent.
    gpt = Run(import_traces([DATA / "gpt_bf16_adamw.pt.trace.json.gz"], tmp_path / "gpt"))
    (f,) = _findings(gpt)
    assert f.severity is Severity.INFO and f.est_saving_ms == pytest.approx(0.40, abs=0.01)
    assert "only 3 steps" in "\n".join(f.evidence)
    cnn = Run(import_traces([DATA / "cnn_fp32_sync.pt.trace.json.gz"], tmp_path / "cnn"))
    assert _findings(cnn) == ()


def test_kernel_periods_are_judged_at_info_only(builder: Any, tmp_path: Path) -> None:
    """No step marker: the steps are periods of the kernel stream (a 1 ms and a 0.5 ms kernel,
    launched 3 ms apart, one period in every 5 taking 12 ms). They vary a lot, but where a
    period's boundary falls is not the program's step: info, never a warning."""
    t = 0
    for i in range(30):
        builder.kernel("fwd", t, 1000, launch=(t - 20, 10))
        builder.kernel("bwd", t + 1500, 500, launch=(t + 1480, 10))
        t += 12_000 if i % 5 == 4 else 3_000
    run = builder.build(tmp_path / "run")
    assert analyze(run).ranks[0].steps.source == "periodicity"
    (f,) = _findings(run)
    assert f.severity is Severity.INFO and f.est_saving_ms == 0.0  # no per-step saving claimed
    assert any("periods of the kernel stream" in e for e in f.evidence)
