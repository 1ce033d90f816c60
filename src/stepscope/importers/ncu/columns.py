"""Which ncu metrics fill the typed columns of ``kernel_metrics`` (``schema_ncu.NCU_COLUMNS``).

Each column is the first of its candidate metrics present with a value (names change between
ncu versions and architectures), or a sum of several (FLOPs: add + mul + 2 x fma). Values
arrive in base units (``units.base_unit``): seconds, bytes, hertz.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

Values = Mapping[str, float]  # metric -> value in base units, for one launch


@dataclass(frozen=True)
class Pick:
    """A column from the first of ``metrics`` present, times ``scale``."""

    metrics: tuple[str, ...]
    scale: float = 1.0

    def __call__(self, v: Values) -> float | None:
        for m in self.metrics:
            if m in v:
                return v[m] * self.scale
        return None


@dataclass(frozen=True)
class Flops:
    """``add + mul + 2 x fma`` thread instructions of one precision (``f``, ``d``, ``h``):
    what ncu's roofline counts as floating-point operations; from the ``.sum`` counters, else
    from their ``.sum.per_cycle_elapsed`` rates x the SM sub-partitions' elapsed cycles (what
    ``--set full`` collects)."""

    p: str

    def __call__(self, v: Values) -> float | None:
        total, seen = 0.0, False
        cycles = v.get("smsp__cycles_elapsed.avg")
        for op, w in (("add", 1.0), ("mul", 1.0), ("fma", 2.0)):
            m = f"smsp__sass_thread_inst_executed_op_{self.p}{op}_pred_on.sum"
            if m in v:
                total, seen = total + w * v[m], True
            elif f"{m}.per_cycle_elapsed" in v and cycles is not None:
                total, seen = total + w * v[f"{m}.per_cycle_elapsed"] * cycles, True
        return total if seen else None


def _ld_bytes(v: Values) -> float | None:
    """Bytes the global loads asked for: sectors x the bytes used per sector."""
    direct = v.get("smsp__sass_data_bytes_mem_global_op_ld.sum")
    if direct is not None:
        return direct
    sectors = v.get("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum")
    per = v.get("smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio")
    if sectors is None or per is None:
        return None
    return sectors * per


def _smem(v: Values) -> float | None:
    s = v.get("launch__shared_mem_per_block_static")
    d = v.get("launch__shared_mem_per_block_dynamic")
    if s is None and d is None:
        return v.get("launch__shared_mem_per_block")
    return (s or 0.0) + (d or 0.0)


def _pick(*metrics: str, scale: float = 1.0) -> Pick:
    return Pick(tuple(metrics), scale)


COLUMNS: Mapping[str, Callable[[Values], float | None]] = {
    "dur_ns": _pick("gpu__time_duration.sum", scale=1e9),
    "registers": _pick("launch__registers_per_thread"),
    "shared_memory": _smem,
    "static_smem": _pick("launch__shared_mem_per_block_static"),
    "dynamic_smem": _pick("launch__shared_mem_per_block_dynamic"),
    "sm_count": _pick("device__attribute_multiprocessor_count", "launch__sm_count"),
    "sm_clock_hz": _pick("sm__cycles_elapsed.avg.per_second", "gpc__cycles_elapsed.avg.per_second"),
    "dram_clock_hz": _pick("dram__cycles_elapsed.avg.per_second"),
    "sm_throughput_pct": _pick("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
    "memory_throughput_pct": _pick(
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"),
    "dram_throughput_pct": _pick("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                                 "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
    "dram_read_bytes": _pick("dram__bytes_read.sum"),
    "dram_write_bytes": _pick("dram__bytes_write.sum"),
    "dram_peak_bytes_per_cycle": _pick("dram__bytes.sum.peak_sustained"),
    "achieved_occupancy_pct": _pick("sm__warps_active.avg.pct_of_peak_sustained_active"),
    "theoretical_occupancy_pct": _pick("sm__maximum_warps_per_active_cycle_pct"),
    "occupancy_limit_registers": _pick("launch__occupancy_limit_registers"),
    "occupancy_limit_shared_mem": _pick("launch__occupancy_limit_shared_mem"),
    "occupancy_limit_blocks": _pick("launch__occupancy_limit_blocks"),
    "occupancy_limit_warps": _pick("launch__occupancy_limit_warps"),
    "waves_per_sm": _pick("launch__waves_per_multiprocessor"),
    "global_ld_inst": _pick("smsp__sass_inst_executed_op_global_ld.sum",
                            "sm__sass_inst_executed_op_global_ld.sum",
                            "smsp__inst_executed_op_global_ld.sum"),
    "global_ld_bytes": _ld_bytes,
    "global_ld_requests": _pick("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"),
    "global_ld_sectors": _pick("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"),
    "global_st_requests": _pick("l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"),
    "global_st_sectors": _pick("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"),
    "l2_sectors_global": _pick("memory_l2_theoretical_sectors_global",
                               "derived__memory_l2_theoretical_sectors_global"),
    "l2_sectors_global_ideal": _pick("memory_l2_theoretical_sectors_global_ideal",
                                     "derived__memory_l2_theoretical_sectors_global_ideal"),
    "l2_throughput_pct": _pick("lts__throughput.avg.pct_of_peak_sustained_elapsed"),
    "shared_ld_wavefronts": _pick("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"),
    "shared_st_wavefronts": _pick("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"),
    "shared_ld_bank_conflicts": _pick("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"),
    "shared_st_bank_conflicts": _pick("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"),
    "shared_ld_inst": _pick("smsp__sass_inst_executed_op_shared_ld.sum",
                            "smsp__inst_executed_op_shared_ld.sum"),
    "shared_st_inst": _pick("smsp__sass_inst_executed_op_shared_st.sum",
                            "smsp__inst_executed_op_shared_st.sum"),
    "l1tex_throughput_pct": _pick("l1tex__throughput.avg.pct_of_peak_sustained_active"),
    "tensor_active_pct": _pick(
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
        "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
        "sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_active"),
    "fp32_flops": Flops("f"),
    "fp64_flops": Flops("d"),
    "fp16_flops": Flops("h"),
    "fp32_peak_flops_per_cycle": _pick(
        "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained", scale=2.0),
    "warp_cycles_per_inst": _pick("smsp__average_warp_latency_per_inst_issued.ratio",
                                  "smsp__average_warps_issue_stalled_per_issue_active.ratio"),
}
