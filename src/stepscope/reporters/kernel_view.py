"""The report's view of the kernels Nsight Compute profiled: one row per profiled kernel
(where it sits on the roofline, its occupancy, the kernel findings about it) and the device's
peaks for the roofline chart. Built once per report from its analysis and advice; the terminal,
JSON and HTML reporters render it."""

from __future__ import annotations

from dataclasses import dataclass

from stepscope.advisor import Finding
from stepscope.analysis.kernel_profiles import HotLine, KernelProfile, kernel_profiles
from stepscope.model import kernel_sol as sol
from stepscope.reporters.report import Report


@dataclass(frozen=True)
class KernelFindingRef:
    id: str
    est_kernel_saving_pct: float | None
    title: str


@dataclass(frozen=True)
class ProfiledKernel:
    rank: int
    id: int  # the launch's ID in the ncu report
    name: str
    grid: tuple[int, int, int] | None
    block: tuple[int, int, int] | None
    dur_us: float  # under ncu
    ms_per_step: float | None  # in the run (None: not matched, or no steps)
    match: str
    dram_gbs: float | None  # achieved DRAM bandwidth
    dram_pct_of_peak: float | None
    gflops: float | None  # achieved floating-point rate (add + mul + 2 fma, all precisions)
    intensity: float | None  # FLOP per DRAM byte
    achieved_occupancy: float | None  # 0..1
    theoretical_occupancy: float | None
    registers: int | None
    findings: tuple[KernelFindingRef, ...]
    hot_lines: tuple[HotLine, ...] = ()  # ncu's source page: most warp-stall samples first


@dataclass(frozen=True)
class Roofline:
    peak_dram_gbs: float | None
    peak_fp32_gflops: float | None  # FMA pipes (ncu's peak_sustained x SM clock)


@dataclass(frozen=True)
class KernelView:
    kernels: tuple[ProfiledKernel, ...]
    roofline: Roofline


def _row(p: KernelProfile, found: list[Finding]) -> ProfiledKernel:
    t_s = p.dur_ns / 1e9
    bw = sol.achieved_dram_bw(p)
    peak = sol.peak_dram_bw(p)
    flops = sol.fp_flops(p)
    db = sol.dram_bytes(p)
    ach, th = p.get("achieved_occupancy_pct"), p.get("theoretical_occupancy_pct")
    regs = p.get("registers")
    mine = [f for f in found if f.where.kernels == (p.name,) and f.where.rank == p.rank]
    return ProfiledKernel(
        rank=p.rank, id=p.id, name=p.name, grid=p.grid, block=p.block, dur_us=p.dur_ns / 1e3,
        ms_per_step=p.ms_per_step, match=p.match,
        dram_gbs=bw / 1e9 if bw is not None else None,
        dram_pct_of_peak=bw / peak if bw is not None and peak else None,
        gflops=flops / t_s / 1e9 if t_s > 0 and flops > 0 else None,
        intensity=flops / db if flops > 0 and db > 0 else None,
        achieved_occupancy=ach / 100 if ach is not None else None,
        theoretical_occupancy=th / 100 if th is not None else None,
        registers=int(regs) if regs is not None else None,
        findings=tuple(KernelFindingRef(f.id, f.est_kernel_saving_pct, f.title) for f in mine),
        hot_lines=p.hot_lines)


def kernel_view(report: Report) -> KernelView | None:
    """The profiled kernels of the report's run (None when it has no Nsight Compute data)."""
    g = report.analysis.graph
    if not g.has("kernel_metrics"):
        return None
    profiles: list[KernelProfile] = []
    for ra in report.analysis.ranks:
        steady = tuple((s.start_ns, s.end_ns) for s in ra.steps.steady)
        profiles += kernel_profiles(g.rank(ra.rank), steady)
    found = [f for f in report.advice.findings if f.category == "kernel"]
    rows = tuple(_row(p, found) for p in profiles)
    peaks = [sol.peak_dram_bw(p) for p in profiles]
    fp = [(p.get("fp32_peak_flops_per_cycle") or 0) * (p.get("sm_clock_hz") or 0)
          for p in profiles]
    bw = max((x for x in peaks if x), default=None)
    return KernelView(kernels=rows, roofline=Roofline(
        peak_dram_gbs=bw / 1e9 if bw else None,
        peak_fp32_gflops=max(fp) / 1e9 if fp and max(fp) > 0 else None))
