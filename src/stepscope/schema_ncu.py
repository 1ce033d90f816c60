"""The typed columns of the ``kernel_metrics`` table (``schema.TABLES``): the Nsight Compute
counters the kernel rules read, each with the ncu metric it comes from. Kept apart from
``schema`` for size; ``schema`` builds the table from them."""

from __future__ import annotations

import pyarrow as pa

# The typed columns of ``kernel_metrics``: (column, Arrow type, unit, meaning with the ncu metric).
# The importer (``importers.ncu``) fills each from the first of its ncu metrics present.
NCU_COLUMNS: tuple[tuple[str, pa.DataType, str, str], ...] = (
    ("dur_ns", pa.int64(), "ns", "the launch's duration under ncu (gpu__time_duration.sum)"),
    ("registers", pa.int32(), "", "registers per thread (launch__registers_per_thread)"),
    ("shared_memory", pa.int64(), "B", "static + dynamic shared memory per block"),
    ("static_smem", pa.int64(), "B", "launch__shared_mem_per_block_static"),
    ("dynamic_smem", pa.int64(), "B", "launch__shared_mem_per_block_dynamic"),
    ("sm_count", pa.int32(), "", "SMs of the device (device__attribute_multiprocessor_count)"),
    ("sm_clock_hz", pa.float64(), "Hz", "SM clock during the launch (sm__cycles_elapsed.avg.per_second)"),
    ("dram_clock_hz", pa.float64(), "Hz", "DRAM clock (dram__cycles_elapsed.avg.per_second)"),
    ("sm_throughput_pct", pa.float64(), "%", "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
    ("memory_throughput_pct", pa.float64(), "%",
     "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"),
    ("dram_throughput_pct", pa.float64(), "%",
     "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
    ("dram_read_bytes", pa.float64(), "B", "dram__bytes_read.sum"),
    ("dram_write_bytes", pa.float64(), "B", "dram__bytes_write.sum"),
    ("dram_peak_bytes_per_cycle", pa.float64(), "B", "dram__bytes.sum.peak_sustained (per DRAM cycle)"),
    ("achieved_occupancy_pct", pa.float64(), "%",
     "achieved occupancy (sm__warps_active.avg.pct_of_peak_sustained_active)"),
    ("theoretical_occupancy_pct", pa.float64(), "%",
     "theoretical occupancy (sm__maximum_warps_per_active_cycle_pct)"),
    ("occupancy_limit_registers", pa.float64(), "blocks", "launch__occupancy_limit_registers"),
    ("occupancy_limit_shared_mem", pa.float64(), "blocks", "launch__occupancy_limit_shared_mem"),
    ("occupancy_limit_blocks", pa.float64(), "blocks", "launch__occupancy_limit_blocks"),
    ("occupancy_limit_warps", pa.float64(), "blocks", "launch__occupancy_limit_warps"),
    ("waves_per_sm", pa.float64(), "", "launch__waves_per_multiprocessor"),
    ("global_ld_inst", pa.float64(), "", "warp-level global load instructions "
     "(smsp__sass_inst_executed_op_global_ld.sum)"),
    ("global_ld_bytes", pa.float64(), "B", "bytes the global load instructions asked for "
     "(sectors x smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio)"),
    ("global_ld_requests", pa.float64(), "", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"),
    ("global_ld_sectors", pa.float64(), "", "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"),
    ("global_st_requests", pa.float64(), "", "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"),
    ("global_st_sectors", pa.float64(), "", "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"),
    ("l2_sectors_global", pa.float64(), "",
     "L2 sectors the global accesses touch (memory_l2_theoretical_sectors_global)"),
    ("l2_sectors_global_ideal", pa.float64(), "",
     "L2 sectors they would touch coalesced (memory_l2_theoretical_sectors_global_ideal)"),
    ("l2_throughput_pct", pa.float64(), "%", "lts__throughput.avg.pct_of_peak_sustained_elapsed"),
    ("shared_ld_wavefronts", pa.float64(), "",
     "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"),
    ("shared_st_wavefronts", pa.float64(), "",
     "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"),
    ("shared_ld_bank_conflicts", pa.float64(), "",
     "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"),
    ("shared_st_bank_conflicts", pa.float64(), "",
     "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"),
    ("shared_ld_inst", pa.float64(), "", "smsp__sass_inst_executed_op_shared_ld.sum"),
    ("shared_st_inst", pa.float64(), "", "smsp__sass_inst_executed_op_shared_st.sum"),
    ("l1tex_throughput_pct", pa.float64(), "%",
     "l1tex__throughput.avg.pct_of_peak_sustained_active"),
    ("tensor_active_pct", pa.float64(), "%", "tensor pipe cycles active "
     "(sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active)"),
    ("fp32_flops", pa.float64(), "", "fadd + fmul + 2 x ffma thread instructions "
     "(smsp__sass_thread_inst_executed_op_f{add,mul,fma}_pred_on.sum, or its "
     ".per_cycle_elapsed x smsp__cycles_elapsed.avg)"),
    ("fp64_flops", pa.float64(), "", "dadd + dmul + 2 x dfma thread instructions"),
    ("fp16_flops", pa.float64(), "", "hadd + hmul + 2 x hfma thread instructions"),
    ("fp32_peak_flops_per_cycle", pa.float64(), "",
     "2 x sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained"),
    ("warp_cycles_per_inst", pa.float64(), "cycles",
     "smsp__average_warp_latency_per_inst_issued.ratio"),
)
