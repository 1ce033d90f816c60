"""The noise-aware test of ``stepscope diff``: Hodges-Lehmann shift, Mann-Whitney interval."""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pytest

import stepscope.compare.stats as stats
from stepscope.compare.stats import Verdict, judge, rank_k, shift_test, u_null_cdf


def _u_counts_brute(m: int, n: int) -> list[int]:
    """U's null distribution by enumerating every placement of BASE's ranks."""
    counts = [0] * (m * n + 1)
    for pos in combinations(range(m + n), m):
        # U = pairs (base, new) with new < base: for each base at position p, the news before it
        counts[sum(p - i for i, p in enumerate(pos))] += 1
    return counts


@pytest.mark.parametrize("m,n", [(1, 1), (2, 3), (4, 4), (5, 3), (6, 4)])
def test_u_null_cdf_matches_enumeration(m: int, n: int) -> None:
    counts = _u_counts_brute(m, n)
    total = math.comb(m + n, m)
    expected = np.cumsum(counts) / total
    assert u_null_cdf(m, n) == pytest.approx(expected.tolist())


def test_rank_k_against_published_critical_values() -> None:
    # two-sided 0.05 critical values of U (reject when U <= c): 10/10: 23, 6/4: 2, 4/4: 0,
    # 3/3: none; k = c + 1
    assert rank_k(10, 10, 0.95) == 24
    assert rank_k(6, 4, 0.95) == 3
    assert rank_k(4, 4, 0.95) == 1
    assert rank_k(3, 3, 0.95) == 0
    assert rank_k(20, 20, 0.99) == 106  # 0.01 two-sided: c = 105


def test_normal_approximation_agrees_with_the_exact_count(monkeypatch: pytest.MonkeyPatch) -> None:
    exact = [rank_k(m, n, 0.95) for m, n in ((60, 80), (99, 101))]
    monkeypatch.setattr(stats, "EXACT_MAX", 0)
    approx = [rank_k(m, n, 0.95) for m, n in ((60, 80), (99, 101))]
    assert all(abs(a - e) <= 1 for a, e in zip(approx, exact))


def test_hodges_lehmann_by_hand() -> None:
    # differences new - base: {2-1, 2-3, 5-1, 5-3} = {1, -1, 4, 2}: median 1.5
    t = shift_test(np.array([1.0, 3.0]), np.array([2.0, 5.0]))
    assert t.shift_ms == 1.5 and t.base_ms == 2.0 and t.new_ms == 3.5
    assert t.lo_ms == -math.inf and t.hi_ms == math.inf  # 2 against 2: no 95% interval
    assert t.verdict is Verdict.INCONCLUSIVE and "too few" in t.reason


def test_interval_ends_are_the_kth_differences() -> None:
    base = np.array([10.0, 11, 12, 13])
    new = np.array([20.0, 21, 22, 23])
    t = shift_test(base, new)
    # 4 against 4 at 95%: k = 1, the smallest and the largest of the 16 differences
    assert (t.lo_ms, t.hi_ms) == (7.0, 13.0) and t.shift_ms == 10.0
    assert t.verdict is Verdict.SLOWER and t.change_pct == pytest.approx(100 * 10 / 11.5)


def _noisy(rng: np.random.Generator, mean: float, sd: float, n: int) -> np.ndarray:
    return mean + rng.normal(0.0, sd, n)


def test_identical_runs_are_the_same() -> None:
    x = _noisy(np.random.default_rng(1), 100.0, 2.0, 40)
    t = shift_test(x, x.copy())
    assert t.shift_ms == 0.0 and t.verdict is Verdict.SAME
    lo, hi = t.interval_pct
    assert -2.0 <= lo < 0 < hi <= 2.0


def test_a_ten_percent_slower_copy_with_noise_is_slower() -> None:
    rng = np.random.default_rng(2)
    base = _noisy(rng, 100.0, 3.0, 30)
    new = base * 1.10 + rng.normal(0.0, 3.0, 30)
    t = shift_test(base, new)
    assert t.verdict is Verdict.SLOWER
    lo, hi = t.interval_pct
    assert 0 < lo < 10 < hi
    assert t.change_pct == pytest.approx(10, abs=2.5)
    back = shift_test(new, base)
    assert back.verdict is Verdict.FASTER


def test_overlapping_noisy_runs_are_inconclusive() -> None:
    rng = np.random.default_rng(3)
    base = _noisy(rng, 100.0, 15.0, 12)
    new = _noisy(rng, 102.0, 15.0, 12)
    t = shift_test(base, new)
    assert t.verdict is Verdict.INCONCLUSIVE
    lo, hi = t.interval_pct
    assert lo < 0 < hi and (lo < -2 or hi > 2)


def test_an_outlier_step_does_not_move_the_verdict() -> None:
    base = np.full(20, 100.0) + np.linspace(-1, 1, 20)
    new = base.copy()
    new[5] = 10_000.0  # one checkpoint step
    t = shift_test(base, new)
    assert t.verdict is Verdict.SAME and abs(t.shift_ms) < 0.2


def test_judge_by_interval() -> None:
    assert judge(-1.0, 1.5, 100.0, 2.0, 0.95, 9, 9)[0] is Verdict.SAME
    assert judge(-1.9, -0.1, 100.0, 2.0, 0.95, 9, 9)[0] is Verdict.SAME  # inside the margin
    assert judge(-5.0, -0.1, 100.0, 2.0, 0.95, 9, 9)[0] is Verdict.FASTER
    assert judge(0.1, 5.0, 100.0, 2.0, 0.95, 9, 9)[0] is Verdict.SLOWER
    assert judge(-3.0, 3.0, 100.0, 2.0, 0.95, 9, 9)[0] is Verdict.INCONCLUSIVE
    assert judge(-3.0, 3.0, 100.0, 5.0, 0.95, 9, 9)[0] is Verdict.SAME  # a wider margin
    assert judge(-math.inf, math.inf, 100.0, 2.0, 0.95, 1, 1)[0] is Verdict.INCONCLUSIVE


def test_an_empty_side_is_inconclusive() -> None:
    t = shift_test(np.array([]), np.array([1.0, 2.0]))
    assert t.verdict is Verdict.INCONCLUSIVE and "BASE" in t.reason


def test_many_steps_are_thinned_evenly() -> None:
    base = np.arange(5000, dtype=np.float64)
    t = shift_test(base, base + 100.0)
    assert t.n_base == stats.MAX_STEPS and t.shift_ms == pytest.approx(100.0, abs=3)
