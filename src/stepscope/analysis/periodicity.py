"""Steps recovered from the periodicity of the kernel stream, where no marker shows them.

The kernel-name sequence of a training loop repeats with the step; the period is the lag
``p`` maximising the match rate ``mean(seq[i] == seq[i+p])`` (smallest such lag within 2% of
the best, and at least 90% matching); boundaries are placed before the kernel phase preceded
by the longest median GPU gap (with several devices in one process, on the busiest device's
kernels, whose sequence repeats where the devices' interleaving does not) (the period is found in the first :data:`MAX_PERIODIC_KERNELS`
kernels and continued over the rest); a period shorter than :data:`MIN_PERIODIC_STEP_NS`
(2 ms: one op of an eager loop, whose step no marker shows) is grouped into steps of whole
periods at least that long, and the detail says so.
"""

from __future__ import annotations

import hashlib
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.analysis.graph import StepGraph
from stepscope.analysis.steady import PeriodicWork, StepInfo, make_step_info
from stepscope.schema_enums import StepSource

MIN_PERIOD_MATCH = 0.90
MAX_PERIODIC_KERNELS = 200_000
# a kernel-stream period shorter than this is one op of an eager loop, not a training step: the
# periods are grouped into steps at least this long (percentages are unchanged; per-step
# figures then mean per group)
MIN_PERIODIC_STEP_NS = 2_000_000


def no_step_hook(g: StepGraph) -> bool:
    """A recorded rank whose steps table is empty: no step hook fired in its window."""
    return g.source_kind == "capture" and g.table("steps").num_rows == 0


def find_period(seq: np.ndarray) -> tuple[int, float]:
    """Best repeating lag of an integer sequence: ``(period, match_rate)``; (0, 0) if none."""
    n = seq.size
    if n < 4:
        return 0, 0.0
    max_lag = n // 2
    # lags where a kernel name reappears are the only candidates worth testing
    first_pos: dict[int, int] = {}
    cand: set[int] = set()
    for i, v in enumerate(seq[: min(n, 5000)].tolist()):
        if v in first_pos:
            lag = i - first_pos[v]
            if 0 < lag <= max_lag:
                cand.add(lag)
        else:
            first_pos[v] = i
    # also multiples of small candidates are covered since we test all reappearance lags of
    # every kernel's first occurrence; add lags of second occurrences for robustness
    best_p, best_m = 0, 0.0
    rates: dict[int, float] = {}
    for p in sorted(cand):
        m = float(np.mean(seq[:-p] == seq[p:]))
        rates[p] = m
        if m > best_m:
            best_p, best_m = p, m
    if best_m < MIN_PERIOD_MATCH:
        return 0, best_m
    for p in sorted(rates):  # smallest lag close to the best
        if rates[p] >= best_m - 0.02:
            return p, rates[p]
    return best_p, best_m


def _one_device(k: pa.Table) -> pa.Table:
    """The kernels of the rank's busiest device. One process driving several GPUs (JAX over
    the local devices) runs the same step on each, but their kernels interleave differently
    every step: the sequence that repeats is one device's."""
    if k.num_rows == 0:
        return k
    dev = k.column("device")
    counts = pc.value_counts(dev).to_pylist()
    if len(counts) < 2:
        return k
    best = max(counts, key=lambda c: (c["counts"], -(c["values"] if c["values"] is not None
                                                      else -1)))["values"]
    mask = pc.is_null(dev) if best is None else pc.equal(dev, best)
    return k.filter(pc.fill_null(mask, False))


def periodic_steps(g: StepGraph) -> StepInfo | None:
    full = _one_device(g.table("kernels"))
    if full.num_rows < 8:
        return None
    full = full.sort_by([("ts_ns", "ascending")])
    k = full.slice(0, MAX_PERIODIC_KERNELS) if full.num_rows > MAX_PERIODIC_KERNELS else full
    names = k.column("name")
    if isinstance(names, pa.ChunkedArray):
        names = names.combine_chunks()
    codes = pc.dictionary_encode(names.cast(pa.string())).indices.to_numpy(zero_copy_only=False)
    p, rate = find_period(codes.astype(np.int64))
    if p == 0 or k.num_rows // p < 2:
        return None
    ts = k.column("ts_ns").to_numpy()
    end = ts + k.column("dur_ns").to_numpy()
    gap_before = np.empty_like(ts)
    gap_before[0] = 0
    gap_before[1:] = ts[1:] - np.maximum.accumulate(end)[:-1]
    phases = np.arange(ts.size) % p
    med = np.array([np.median(gap_before[phases == j]) for j in range(p)])
    phase = int(np.argmax(med))
    all_ts = full.column("ts_ns").to_numpy()  # the period found in the first kernels goes on
    idx = np.arange(phase, all_ts.size, p)
    if idx.size < 2:
        return None
    period_ns = float(np.median(np.diff(all_ts[idx])))
    group = 1
    if 0 < period_ns < MIN_PERIODIC_STEP_NS:  # an eager loop of tiny ops: one op is a period
        group = int(np.ceil(MIN_PERIODIC_STEP_NS / period_ns))
        if idx.size // group >= 2:
            idx = idx[::group]
        else:
            group = 1
    s = all_ts[idx[:-1]]
    e = all_ts[idx[1:]]
    nums = np.arange(s.size, dtype=np.int64)
    work = PeriodicWork(kernels=p, periods=group, signature=_signature(names, _middle_period(phase, p, k.num_rows), p))
    hook = "no step hook fired; " if no_step_hook(g) else ""
    if group > 1:
        detail = (f"{s.size} recovered from the periodicity of the GPU work ({hook}the kernel "
                  f"stream repeats every {p} kernels, {period_ns / 1e3:.3g} µs: {group} periods "
                  f"per step, about {group * period_ns / 1e6:.3g} ms; {rate:.0%} of kernels "
                  "repeat)")
    else:
        detail = (f"{s.size} recovered from the periodicity of the GPU work ({hook}{p} kernels "
                  f"per step, {rate:.0%} of kernels repeat)")
    return make_step_info(g.rank_id, StepSource.PERIODICITY, s, e, nums, detail, work)


def _middle_period(phase: int, p: int, n: int) -> int:
    """The first kernel of a period in the middle of the first ``n`` kernels (away from the
    warm-up's)."""
    whole = max((n - phase) // p, 1)
    return min(phase + p * (whole // 2), max(n - p, 0))


def _signature(names: pa.Array, start: int, p: int) -> str:
    """The multiset of kernel names of one period (rotation does not change it, so two runs
    whose boundaries fall at different phases agree), hashed."""
    counts = Counter(str(x) for x in names.slice(start, p).to_pylist())
    text = "\n".join(f"{n}\t{c}" for n, c in sorted(counts.items()))
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]

