"""Speed-of-light estimates for one profiled kernel launch (``analysis.kernel_profiles``):
what share of the kernel's time a fix would save, from its Nsight Compute counters.

Every estimate is ``1 - t_fixed / t``: ``t`` the launch's duration under ncu, ``t_fixed`` the
time the fixed kernel would take, bounded below by two floors that no fix removes:

* the DRAM floor: the bytes the fixed kernel still moves at ``ATTAINABLE_DRAM`` of the peak
  DRAM bandwidth (peak: ``dram__bytes.sum.peak_sustained`` x the DRAM clock);
* the unit floor: the busiest unit (SM or memory, % of peak over the launch) doing the same
  work at ``ATTAINABLE_UNIT`` of its peak.

The attainable fractions were calibrated on planted kernels and their fixed twins (H100,
``benchmarks/kernels/``; results in ``docs/accuracy.md``), never taken from ncu's own
"Estimated Speedup".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from stepscope.analysis.kernel_names import MATMUL, classify_kernel
from stepscope.analysis.kernel_profiles import KernelProfile

# share of peak DRAM bandwidth a well-written streaming kernel reaches: the fixed twins of the
# planted kernels reached 0.70-0.85 timed with CUDA events at default clocks (H100 SXM,
# docs/accuracy.md); 0.80 puts the narrow-load, strided and transpose estimates within 25%
ATTAINABLE_DRAM = 0.80
ATTAINABLE_UNIT = 0.90  # share of a unit's peak throughput a fixed kernel reaches
NARROW_BYTES = 4.0  # global loads narrower than this per thread are "narrow"
UNCOALESCED_RATIO = 1.5  # sectors moved / sectors needed above this: uncoalesced
BANK_CONFLICT_RATIO = 1.3  # shared wavefronts / ideal wavefronts above this: conflicts
OCCUPANCY_TARGET = 0.50  # occupancy a latency-bound kernel is raised to by the fix
LOW_OCCUPANCY = 0.35  # theoretical occupancy below this is low
ACHIEVED_GAP = 0.70  # achieved below this share of theoretical: warps are not kept resident
MAX_TAIL_WAVES = 4  # a partial last wave matters for kernels of few waves
# FP32 FMA -> tensor cores: H100 SXM dense TF32 / FP32 peak (494.7 / 66.9 TFLOP/s; BF16 is 2x
# TF32). An 8192^3 FP32 cuBLAS GEMM ran 15.3x faster in BF16 (tests/data/ncu/gemm_timings.json)
TENSOR_SPEEDUP = 7.4
COMPUTE_BOUND_PCT = 60.0
SECTOR = 32.0


@dataclass(frozen=True)
class Estimate:
    saving: float  # share of the kernel's time, 0..1
    t_fixed_ns: float
    floor: str  # which bound set t_fixed ("scaled", "DRAM floor", "unit floor")


def peak_dram_bw(p: KernelProfile) -> float | None:
    """Peak DRAM bandwidth (B/s) from the launch's counters."""
    per_cycle, clock = p.get("dram_peak_bytes_per_cycle"), p.get("dram_clock_hz")
    if per_cycle and clock:
        return per_cycle * clock
    pct, dur = p.get("dram_throughput_pct"), p.dur_ns
    if pct and pct > 1 and dur > 0:
        return dram_bytes(p) / (dur / 1e9) / (pct / 100.0)
    return None


def dram_bytes(p: KernelProfile) -> float:
    return (p.get("dram_read_bytes") or 0.0) + (p.get("dram_write_bytes") or 0.0)


def achieved_dram_bw(p: KernelProfile) -> float | None:
    return dram_bytes(p) / (p.dur_ns / 1e9) if p.dur_ns > 0 else None


UNITS = ("sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct",
         "l2_throughput_pct", "l1tex_throughput_pct")


def busiest_pct(p: KernelProfile) -> float:
    """The busiest unit's throughput, % of its peak: SM, memory (ncu's summary), DRAM, L2,
    L1/shared."""
    return max(p.get(u) or 0.0 for u in UNITS)


def memory_bound(p: KernelProfile) -> bool:
    return (p.get("memory_throughput_pct") or 0.0) >= (p.get("sm_throughput_pct") or 0.0)


def dram_floor_ns(p: KernelProfile, scale: float = 1.0) -> float:
    """The time to move ``scale`` x the launch's DRAM bytes at the attainable bandwidth."""
    bw = peak_dram_bw(p)
    if not bw:
        return 0.0
    return dram_bytes(p) * scale / (bw * ATTAINABLE_DRAM) * 1e9


def unit_floor_ns(p: KernelProfile, scale: float = 1.0) -> float:
    return p.dur_ns * scale * busiest_pct(p) / 100.0 / ATTAINABLE_UNIT


def estimate(p: KernelProfile, scaled_ns: float, *, dram_scale: float = 1.0,
             unit_scale: float | None = None) -> Estimate:
    """``scaled_ns``: what the fix's own model says; floored by DRAM (``dram_scale`` x its
    bytes) and, when ``unit_scale`` is given, by the busiest unit doing that share of its
    work."""
    t = p.dur_ns
    cands = [(scaled_ns, "scaled"), (dram_floor_ns(p, dram_scale), "DRAM floor")]
    if unit_scale is not None:
        cands.append((unit_floor_ns(p, unit_scale), "unit floor"))
    t_fixed, floor = max(cands)
    t_fixed = min(t, t_fixed)
    return Estimate(saving=max(0.0, 1.0 - t_fixed / t) if t > 0 else 0.0, t_fixed_ns=t_fixed,
                    floor=floor)


# -- per issue --------------------------------------------------------------------------------

def load_width(p: KernelProfile) -> float | None:
    """Bytes per thread per global load instruction (requested bytes / (warp-level load
    instructions x 32 threads)); None without both counters."""
    b, n = p.get("global_ld_bytes"), p.get("global_ld_inst")
    if not b or not n:
        return None
    return b / (n * 32.0)


def narrow_loads(p: KernelProfile) -> Estimate | None:
    """Narrow global loads: the kernel at the DRAM floor of the bytes it moves (wide loads put
    more bytes in flight per instruction, so the same bytes stream at the attainable rate)."""
    w = load_width(p)
    if w is None or w >= 0.9 * NARROW_BYTES or not peak_dram_bw(p):
        return None
    return estimate(p, 0.0)


def sectors_ratio(p: KernelProfile) -> float | None:
    """L2 sectors the global accesses touch / the sectors they would touch coalesced (ncu's
    ``memory_l2_theoretical_sectors_global`` and ``_ideal``, loads and stores); else the global
    load sectors moved / the sectors the requested bytes fill. 1: perfectly coalesced."""
    l2, ideal_l2 = p.get("l2_sectors_global"), p.get("l2_sectors_global_ideal")
    if l2 and ideal_l2:
        return l2 / ideal_l2
    sectors, b = p.get("global_ld_sectors"), p.get("global_ld_bytes")
    if not sectors:
        return None
    if b:
        ideal = b / SECTOR
    else:
        req = p.get("global_ld_requests")
        if not req:
            return None
        ideal = 4.0 * req  # 4-byte words, unit stride
    return sectors / ideal if ideal > 0 else None


def uncoalesced(p: KernelProfile) -> Estimate | None:
    """The traffic between the SMs and L2 scales with the sectors moved: the fixed kernel takes
    ``t / ratio``, floored by the DRAM bytes it still needs: the coalesced sectors (ideal x
    32 B), or the DRAM bytes measured when L2 already absorbed the waste."""
    r = sectors_ratio(p)
    if r is None or r < UNCOALESCED_RATIO:
        return None
    moved = dram_bytes(p)
    ideal = p.get("l2_sectors_global_ideal")
    need = min(moved, ideal * SECTOR) if ideal else moved / r
    return estimate(p, p.dur_ns / r, dram_scale=need / moved if moved > 0 else 1.0)


def bank_conflict_ratio(p: KernelProfile) -> float | None:
    wf = (p.get("shared_ld_wavefronts") or 0.0) + (p.get("shared_st_wavefronts") or 0.0)
    conf = (p.get("shared_ld_bank_conflicts") or 0.0) + (p.get("shared_st_bank_conflicts") or 0.0)
    if wf <= 0 or conf <= 0 or conf >= wf:
        return None
    return wf / (wf - conf)


def bank_conflicts(p: KernelProfile) -> Estimate | None:
    """The shared-memory-bound part (the L1/shared pipe's busy share of the launch) shrinks by
    the ratio; the rest of the kernel (its global traffic: the DRAM floor) stays."""
    r = bank_conflict_ratio(p)
    if r is None or r < BANK_CONFLICT_RATIO:
        return None
    l1 = (p.get("l1tex_throughput_pct") or busiest_pct(p)) / 100.0
    return estimate(p, p.dur_ns * l1 / r)


@dataclass(frozen=True)
class Occupancy:
    theoretical: float  # 0..1
    achieved: float | None
    limiter: str  # registers | shared memory | block size | warps
    estimate: Estimate


_LIMITS = (("occupancy_limit_registers", "registers"),
           ("occupancy_limit_shared_mem", "shared memory"),
           ("occupancy_limit_blocks", "blocks per SM (block size)"),
           ("occupancy_limit_warps", "warps per SM"))


def occupancy(p: KernelProfile) -> Occupancy | None:
    """Low theoretical occupancy: a latency-bound kernel's time scales with its resident warps
    (raised to ``OCCUPANCY_TARGET``), floored by the busiest unit."""
    th = p.get("theoretical_occupancy_pct")
    if th is None or th <= 0:
        return None
    theo = th / 100.0
    ach_pct = p.get("achieved_occupancy_pct")
    ach = ach_pct / 100.0 if ach_pct is not None else None
    if theo >= LOW_OCCUPANCY:
        return None
    limits = [(p.get(m), what) for m, what in _LIMITS if p.get(m) is not None]
    if not limits:
        return None
    limiter = min(limits, key=lambda x: x[0] or 0.0)[1]
    w0 = ach if ach is not None else theo
    waves = p.get("waves_per_sm")
    grid_cap = min(1.0, theo * waves) if waves else 1.0  # what the grid alone could fill
    w1 = min(OCCUPANCY_TARGET, max(grid_cap, w0))
    if w1 <= w0:
        return None
    est = estimate(p, p.dur_ns * w0 / w1, unit_scale=1.0)
    return Occupancy(theoretical=theo, achieved=ach, limiter=limiter, estimate=est)


def achieved_gap(p: KernelProfile) -> tuple[float, float] | None:
    """(theoretical, achieved) occupancy when achieved is far below theoretical."""
    th, ach = p.get("theoretical_occupancy_pct"), p.get("achieved_occupancy_pct")
    if not th or ach is None or ach >= ACHIEVED_GAP * th:
        return None
    return th / 100.0, ach / 100.0


def tail(p: KernelProfile) -> tuple[float, Estimate] | None:
    """A partial last wave of a kernel of few waves: fixed, the same work fills whole waves."""
    w = p.get("waves_per_sm")
    if w is None or w <= 1.0 or math.ceil(w) > MAX_TAIL_WAVES:
        return None
    full = math.ceil(w)
    if w / full > 0.9:
        return None
    return w, estimate(p, p.dur_ns * w / full)


def fp_flops(p: KernelProfile) -> float:
    return sum(p.get(c) or 0.0 for c in ("fp32_flops", "fp16_flops", "fp64_flops"))


def no_tensor_cores(p: KernelProfile) -> Estimate | None:
    """A matrix-multiply kernel (by its name: GEMM, convolution, attention) compute-bound on
    FP32/FP16 FMA with the tensor pipe idle: ``TENSOR_SPEEDUP`` x faster, floored by its DRAM
    traffic. Other FMA-bound kernels (element-wise math) cannot use tensor cores."""
    if classify_kernel(p.name).category not in MATMUL:
        return None
    sm = p.get("sm_throughput_pct") or 0.0
    if sm < COMPUTE_BOUND_PCT or memory_bound(p):
        return None
    if (p.get("tensor_active_pct") or 0.0) > 5.0:
        return None
    flops = (p.get("fp32_flops") or 0.0) + (p.get("fp16_flops") or 0.0)
    if flops <= 0:
        return None
    return estimate(p, p.dur_ns / TENSOR_SPEEDUP)


def memory_roofline(p: KernelProfile) -> Estimate | None:
    """Memory-bound below the attainable DRAM bandwidth: the DRAM floor of its bytes, and the
    busiest unit's floor (a kernel bound by L1/shared or L2 is not far from its roofline)."""
    if not memory_bound(p) or not peak_dram_bw(p) or dram_bytes(p) <= 0:
        return None
    return estimate(p, 0.0, unit_scale=1.0)
