"""The noise-aware test over two samples of step times: how much NEW's steps moved against
BASE's, with a distribution-free confidence interval, and the verdict it supports.

The shift is the Hodges-Lehmann estimate: the median of every pairwise difference
``new_j - base_i``. Its interval is the one that inverts the Mann-Whitney (Wilcoxon rank-sum)
test (Lehmann 1963; Bauer 1972): with the ``m * n`` differences sorted, ``[d_(k), d_(mn-k+1)]``
where ``k`` is the largest integer with ``P(U <= k - 1) <= alpha / 2`` under the null
distribution of the Mann-Whitney ``U`` statistic. The null distribution is exact (counted)
while ``m * n <= EXACT_MAX``, else the normal approximation with a continuity correction.
When no ``k >= 1`` exists (too few steps for the confidence asked: 3 against 3 at 95%), the
interval is unbounded and the verdict is inconclusive.

Why this test: step times are skewed and carry outliers (a checkpoint, a slow batch), and a
run holds few steps; the rank test needs no normality, is exact for small samples, is
deterministic (the same answer on every CI run, no random resampling), and its interval is on
the very figure reported (a step-time shift in ms). It assumes the steps are independent
draws of each run's step time that differ by a shift; steps are in truth autocorrelated,
which makes the interval somewhat narrow: the equivalence margin and ``--fail-above``'s
threshold absorb that.

Verdict, with the interval ``[lo, hi]`` as a percentage of BASE's median step and a margin
``M`` (percent): ``same`` when ``-M <= lo`` and ``hi <= M`` (the whole interval inside the
margin: equivalent for practical purposes), else ``faster`` when ``hi < 0``, ``slower`` when
``lo > 0``, and ``inconclusive`` when the interval straddles 0 (or reaches past the margin
on either side while containing 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
EXACT_MAX = 10_000  # m * n up to which U's null distribution is counted exactly
MAX_STEPS = 2_000  # per side: more are thinned evenly (the pairwise differences are m * n)
TEST_NAME = "Hodges-Lehmann shift, Mann-Whitney confidence interval"


class Verdict(str, Enum):
    FASTER = "faster"
    SLOWER = "slower"
    SAME = "same"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class ShiftTest:
    """NEW's step time against BASE's (ms), with its interval and verdict."""

    base_ms: float  # median of BASE's steps
    new_ms: float  # median of NEW's steps
    shift_ms: float  # Hodges-Lehmann: median of the pairwise differences new - base
    lo_ms: float  # the interval of the shift (-inf / inf when too few steps)
    hi_ms: float
    confidence: float
    n_base: int
    n_new: int
    margin_pct: float
    verdict: Verdict
    reason: str  # one line: why this verdict

    @property
    def change_pct(self) -> float:
        return 100.0 * self.shift_ms / self.base_ms if self.base_ms > 0 else math.nan

    @property
    def interval_pct(self) -> tuple[float, float]:
        if self.base_ms <= 0:
            return (math.nan, math.nan)
        return (100.0 * self.lo_ms / self.base_ms, 100.0 * self.hi_ms / self.base_ms)


def u_null_cdf(m: int, n: int) -> list[float]:
    """``P(U <= u)`` for ``u = 0 .. m * n`` under the null (no shift, no ties): the counts
    are the coefficients of the Gaussian binomial ``[m + n choose m]_q``, built by
    multiplying ``(1 - q^(n + i)) / (1 - q^i)`` for ``i = 1 .. m`` (exact integers)."""
    size = m * n + 1
    c = [0] * size
    c[0] = 1
    for i in range(1, m + 1):
        # multiply by (1 - q^(n+i)), then divide by (1 - q^i): both exact on integers
        for u in range(size - 1, n + i - 1, -1):
            c[u] -= c[u - n - i]
        for u in range(i, size):
            c[u] += c[u - i]
    total = math.comb(m + n, m)
    out, acc = [], 0
    for v in c:
        acc += v
        out.append(acc / total)
    return out


def rank_k(m: int, n: int, confidence: float) -> int:
    """The order ``k`` of the interval's ends ``[d_(k), d_(mn-k+1)]``; 0 when none exists."""
    alpha_half = (1.0 - confidence) / 2.0
    if m * n <= EXACT_MAX:
        cdf = u_null_cdf(m, n)
        k = 0
        while k < len(cdf) and cdf[k] <= alpha_half + 1e-12:
            k += 1
        return min(k, (m * n + 1) // 2)
    z = NormalDist().inv_cdf(1.0 - alpha_half)
    sd = math.sqrt(m * n * (m + n + 1) / 12.0)
    return max(0, int(math.floor(m * n / 2.0 - z * sd - 0.5)) + 1)


def _thin(x: F64) -> F64:
    if x.size <= MAX_STEPS:
        return x
    keep = np.linspace(0, x.size - 1, MAX_STEPS).round().astype(np.int64)
    return np.asarray(x[keep], dtype=np.float64)


def shift_test(base_ms: F64, new_ms: F64, *, confidence: float = 0.95,
               margin_pct: float = 2.0) -> ShiftTest:
    """The shift of ``new_ms`` against ``base_ms`` (step times in ms) and its verdict (module
    docstring). Either side empty: inconclusive, with NaN figures."""
    b = _thin(np.sort(np.asarray(base_ms, dtype=np.float64)))
    w = _thin(np.sort(np.asarray(new_ms, dtype=np.float64)))
    m, n = int(b.size), int(w.size)
    if m == 0 or n == 0:
        side = "BASE" if m == 0 else "NEW"
        return ShiftTest(math.nan, math.nan, math.nan, -math.inf, math.inf, confidence, m, n,
                         margin_pct, Verdict.INCONCLUSIVE, f"{side} has no steady steps")
    d = np.sort((w[None, :] - b[:, None]).ravel())
    shift = float(np.median(d))
    k = rank_k(m, n, confidence)
    lo, hi = (float(d[k - 1]), float(d[d.size - k])) if k >= 1 else (-math.inf, math.inf)
    bm = float(np.median(b))
    verdict, reason = judge(lo, hi, bm, margin_pct, confidence, m, n)
    return ShiftTest(bm, float(np.median(w)), shift, lo, hi, confidence, m, n, margin_pct,
                     verdict, reason)


def judge(lo: float, hi: float, base_ms: float, margin_pct: float, confidence: float,
          m: int, n: int) -> tuple[Verdict, str]:
    """The verdict of an interval ``[lo, hi]`` (ms) on a BASE median of ``base_ms``."""
    level = f"{confidence:.0%}"
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return Verdict.INCONCLUSIVE, (f"{m} against {n} steady steps are too few for a "
                                      f"{level} interval")
    if base_ms <= 0:
        return Verdict.INCONCLUSIVE, "BASE's median step is 0 ms"
    lo_p, hi_p = 100.0 * lo / base_ms, 100.0 * hi / base_ms
    span = f"{level} interval {lo_p:+.1f}% .. {hi_p:+.1f}%"
    if -margin_pct <= lo_p and hi_p <= margin_pct:
        return Verdict.SAME, f"{span}, inside the ±{margin_pct:g}% margin"
    if hi < 0:
        return Verdict.FASTER, f"{span}, below 0"
    if lo > 0:
        return Verdict.SLOWER, f"{span}, above 0"
    return Verdict.INCONCLUSIVE, f"{span}: contains 0 and reaches past the ±{margin_pct:g}% margin"
