"""``stepscope.diff``: synthetic runs with hand-computed answers (builder times in µs)."""

from __future__ import annotations

from itertools import product
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import stepscope
from builder import TraceBuilder
from compare.runs import JITTER, planted
from stepscope.compare import Verdict, shift_test
from stepscope.compare.matching import BY_CONFIG
from stepscope.errors import StepscopeError
from stepscope.reporters.diff_json import diff_dict
from stepscope.reporters.diff_terminal import diff_text


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("diff")
    out = {}
    # BASE: input-bound (400 µs wait of a 1000 µs step); NEW: the wait gone, the Triton kernel
    # rebuilt (renamed, 50 -> 20 µs), aten::to gone, the forward range 20 µs longer
    out["base"] = planted(TraceBuilder(), wait=400, triton=50, tail=50).build(root / "base").path
    out["new"] = planted(TraceBuilder(), wait=0, triton=20, tail=80,
                         triton_name="triton_poi_fused_add_3", forward=520,
                         with_to=False).build(root / "new").path
    return out


def test_planted_against_fixed_by_hand(runs: dict[str, Path]) -> None:
    d = stepscope.diff(runs["base"], runs["new"])
    # steps: BASE 1000 + j µs, NEW 600 + j µs; every pairwise difference is -400 + (ja - jb)
    diffs = sorted(-400 + a - b for a, b in product(JITTER, JITTER))
    assert d.step.base_ms == pytest.approx(1.0045) and d.step.new_ms == pytest.approx(0.6045)
    assert d.step.shift_ms == pytest.approx(-0.4)
    # 8 against 8 at 95%: U's critical value is 13, so the ends are the 14th and 51st of 64
    assert d.step.lo_ms == pytest.approx(diffs[13] / 1000)
    assert d.step.hi_ms == pytest.approx(diffs[50] / 1000)
    assert d.verdict is Verdict.FASTER
    assert d.step.change_pct == pytest.approx(-100 * 0.4 / 1.0045)
    assert d.mean_ms == pytest.approx((1.0045, 0.6045))
    assert d.alignment == "rank 0"
    cats = {c.name: c for c in d.categories}
    assert d.categories[0].name == "input_wait"  # the largest change comes first
    assert cats["input_wait"].base_ms == pytest.approx(0.4)
    assert cats["input_wait"].delta_ms == pytest.approx(-0.4)
    assert cats["compute"].base_ms == pytest.approx(0.55)
    assert cats["compute"].delta_ms == pytest.approx(-0.03)
    # the idle tail, 30 µs longer: BASE's stays idle (its rank has op rows), NEW's rank has
    # none, so the breakdown calls its tail host time (analysis.breakdown)
    assert cats["idle"].new_ms == 0.0 and cats["host"].base_ms == 0.0
    assert cats["idle"].delta_ms + cats["host"].delta_ms == pytest.approx(0.03)
    assert sum(c.delta_ms for c in d.categories) == pytest.approx(d.mean_ms[1] - d.mean_ms[0])


def test_kernels_ops_and_findings(runs: dict[str, Path]) -> None:
    d = stepscope.diff(runs["base"], runs["new"])
    ks = {(k.base_name, k.new_name): k for k in d.kernels}
    tri = ks[("triton_poi_fused_add_0", "triton_poi_fused_add_3")]
    assert tri.matched_by == BY_CONFIG and tri.delta_ms == pytest.approx(-0.03)
    assert tri.base is not None and tri.base.calls == 1 and tri.base.config == (64, 1, 1, 256, 1, 1)
    assert ks[("gemm", "gemm")].delta_ms == pytest.approx(0.0)
    assert d.kernels[0] is tri and len(d.kernels) == 2
    ops = {o.name: o for o in d.ops}
    assert ops["aten::to"].status == "gone" and ops["aten::to"].base_ms == pytest.approx(0.03)
    assert ops["forward"].delta_ms == pytest.approx(0.02)
    assert not any(o.name.startswith("ProfilerStep") for o in d.ops)  # step markers are no op
    fs = {f.id: f for f in d.findings}
    assert fs["input_bound"].status == "gone"
    assert fs["input_bound"].base is not None and fs["input_bound"].new is None
    assert fs["input_bound"].delta_saving_ms < -0.3


def test_a_run_against_itself_is_the_same(runs: dict[str, Path]) -> None:
    assert "diff" in stepscope.__all__
    d = stepscope.diff(runs["base"], stepscope.analyze(runs["base"]))  # a Report serves too
    assert d.verdict is Verdict.SAME and d.step.shift_ms == 0.0
    assert all(c.delta_ms == 0 for c in d.categories)
    assert all(k.status == "matched" and k.delta_ms == 0 for k in d.kernels)
    assert all(f.status == "unchanged" for f in d.findings)
    assert not d.slower_than(0.0)


def test_several_runs_per_side_pool_their_steps(tmp_path: Path) -> None:
    other = (3, 7, 1, 9, 2, 8, 4, 6)
    b1 = planted(TraceBuilder(), wait=400, triton=50, tail=50).build(tmp_path / "b1").path
    b2 = planted(TraceBuilder(), wait=400, triton=50, tail=50, jitter=other).build(tmp_path / "b2").path
    n1 = planted(TraceBuilder(), wait=200, triton=50, tail=50).build(tmp_path / "n1").path
    n2 = planted(TraceBuilder(), wait=200, triton=50, tail=50, jitter=other).build(tmp_path / "n2").path
    d = stepscope.diff([b1, b2], [n1, n2])
    base = np.array([1000 + j for j in JITTER + other]) / 1000
    new = base - 0.2
    ref = shift_test(base, new)
    assert (d.step.n_base, d.step.n_new) == (16, 16)
    assert (d.step.lo_ms, d.step.shift_ms, d.step.hi_ms) == pytest.approx(
        (ref.lo_ms, ref.shift_ms, ref.hi_ms))
    assert [r.label for r in d.base] == [str(b1), str(b2)]
    cats = {c.name: c for c in d.categories}
    assert cats["input_wait"].delta_ms == pytest.approx(-0.2)


def _ranks(root: Path, name: str, tails: dict[int, float]) -> Path:
    b = TraceBuilder()
    for rank, tail in tails.items():
        planted(b, wait=0, triton=50, tail=tail, rank=rank, with_to=False)
    return b.build(root / name).path


def test_multi_rank_runs_compare_rank_by_rank(tmp_path: Path) -> None:
    base = _ranks(tmp_path, "b", {0: 450, 1: 450})  # 1000 + j on both ranks
    new = _ranks(tmp_path, "n", {0: 50, 1: 150})  # rank 0: 600 + j, rank 1: 700 + j
    d = stepscope.diff(base, new)
    assert d.alignment.startswith("ranks 0-1, each against itself")
    # a step's time is its slowest rank's: rank 1, 300 µs faster
    assert d.step.shift_ms == pytest.approx(-0.3)
    per = {r.base_rank: r for r in d.ranks}
    assert per[0].step.shift_ms == pytest.approx(-0.4)
    assert per[1].step.shift_ms == pytest.approx(-0.3)
    assert all(r.step.verdict is Verdict.FASTER for r in d.ranks)
    # the idle tails: no op rows, so the breakdown calls them host time
    host = {r.base_rank: {c.name: c for c in r.categories}["host"].delta_ms for r in d.ranks}
    assert host == pytest.approx({0: -0.4, 1: -0.3})
    rows = diff_dict(d)["ranks"]
    assert [(r["base_rank"], r["verdict"]) for r in rows] == [(0, "faster"), (1, "faster")]
    assert rows[1]["step_ms"]["change_ms"] == pytest.approx(-0.3)
    assert rows[1]["categories"]["host"]["delta_ms"] == pytest.approx(-0.3)
    text = diff_text(d)
    assert "ranks 0-1; 8 steady steps" in text and "Per rank" in text


def test_ranks_that_differ_compare_the_lowest_common_or_say_so(tmp_path: Path) -> None:
    one = _ranks(tmp_path, "one", {0: 450})
    two = _ranks(tmp_path, "two", {0: 50, 1: 150})
    d = stepscope.diff(one, two)
    assert d.alignment == ("rank 0, the lowest rank both sides have (BASE: 1 rank, NEW: 2 ranks)")
    assert d.step.shift_ms == pytest.approx(-0.4) and d.ranks == ()
    apart = _ranks(tmp_path, "three", {3: 450})
    d = stepscope.diff(apart, one)
    assert d.alignment == "BASE rank 3 against NEW rank 0 (no rank in common)"


def test_bad_input_is_one_stepscope_error(tmp_path: Path, runs: dict[str, Path]) -> None:
    with pytest.raises(StepscopeError):
        stepscope.diff(tmp_path / "missing", runs["new"])
    with pytest.raises(StepscopeError, match="at least one run"):
        stepscope.diff([], runs["new"])
    with pytest.raises(StepscopeError, match="not int"):
        stepscope.diff(3, runs["new"])
    with pytest.raises(StepscopeError, match="confidence"):
        stepscope.diff(runs["base"], runs["new"], confidence=1.5)
    empty: Any = TraceBuilder().build(tmp_path / "empty").path
    with pytest.raises(StepscopeError, match="no rank with steady steps"):
        stepscope.diff(empty, runs["new"])


def _eager(root: Path, name: str, period_us: float, periods: int, *,
           marked: bool = False) -> Path:
    """An eager loop of two tiny kernels and no step marker: its steps are recovered from the
    kernel stream's periodicity, grouped into whole periods of at least 2 ms."""
    b = TraceBuilder()
    t = 0.0
    for i in range(periods):
        if marked and i % 100 == 0:
            b.step(t, 100 * period_us, step=i // 100)
        b.kernel("add", t, period_us * 0.4)
        b.kernel("mul", t + period_us * 0.5, period_us * 0.4)
        t += period_us
    return b.build(root / name).path


def test_periodic_steps_of_different_sizes_compare_per_unit_of_work(tmp_path: Path) -> None:
    # BASE: a period (add, mul) every 20 µs -> 100 periods a step (2 ms); NEW, the same work
    # five times as fast: 4 µs a period -> 500 periods a step, also ~2 ms. Per step they look
    # the same; per unit of work NEW is 5x faster: its steps scale to 100 periods, 0.4 ms.
    base = _eager(tmp_path, "base", 20.0, 2400)
    new = _eager(tmp_path, "new", 4.0, 12000)
    d = stepscope.diff(base, new)
    assert d.step.base_ms == pytest.approx(2.0, rel=1e-3)
    assert d.step.new_ms == pytest.approx(0.4, rel=1e-3)
    assert d.verdict is Verdict.FASTER
    assert "BASE 100, NEW 500 periods" in d.alignment
    assert "scaled to 100 periods" in d.alignment
    # categories are scaled alike: they still add up to the (scaled) mean step
    assert sum(c.new_ms for c in d.categories) == pytest.approx(d.mean_ms[1], rel=1e-6)
    assert d.mean_ms[1] == pytest.approx(0.4, rel=1e-2)


def test_steps_that_are_not_the_same_work_are_inconclusive(tmp_path: Path) -> None:
    # NEW has step markers (100 periods each), BASE none: the recovered 2 ms groups and the
    # marked steps are not known to hold the same work
    base = _eager(tmp_path, "base", 20.0, 2400)
    new = _eager(tmp_path, "new", 4.0, 12000, marked=True)
    d = stepscope.diff(base, new)
    assert d.verdict is Verdict.INCONCLUSIVE
    assert "not the same work" in d.alignment
    assert "not the same work" in d.step.reason


def test_causes_split_the_gpu_idle_time_and_sum_to_the_mean_step(
        runs: dict[str, Path]) -> None:
    # BASE waits 400 µs for input each step: the idle split claims it as input_wait; NEW has
    # no wait. Causes, like categories, sum to each side's mean step.
    d = stepscope.diff(runs["base"], runs["new"])
    causes = {c.name: c for c in d.causes}
    assert causes["input_wait"].base_ms == pytest.approx(0.4)
    assert causes["input_wait"].delta_ms == pytest.approx(-0.4)
    assert d.causes[0].name == "input_wait"
    assert sum(c.base_ms for c in d.causes) == pytest.approx(d.mean_ms[0], rel=1e-6)
    assert sum(c.new_ms for c in d.causes) == pytest.approx(d.mean_ms[1], rel=1e-6)
    assert diff_dict(d)["causes"]["input_wait"]["delta_ms"] == pytest.approx(-0.4)
    assert "by what it waited for" in diff_text(d)
