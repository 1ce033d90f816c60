"""Every table of a run: columns, Arrow types and units, in one place.

This module is the contract between the producers of a run (``capture/`` and
``importers/``, both through ``store.produce``) and its consumers (``analysis/``
and everything downstream): which tables there are, and which tables each kind of
source must provide (``CONTRACTS``).

Conventions
-----------
* Times are integer nanoseconds (``ts_ns`` start, ``dur_ns`` duration) on one
  clock per run; the offset applied to the source clock is in the manifest.
* Every table carries ``rank`` (the process/rank partition the row belongs to).
* Ids are explicit; a value that is not known is null, never ``-1``.
* Names (kernel names, API names, annotation text) are dictionary-encoded.
* Closed sets (copy kinds, memory kinds, API kinds ...) are small dictionary-
  encoded string columns whose allowed values are the ``Enum`` members of
  ``stepscope.schema_enums``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from stepscope.schema_enums import SourceKind
from stepscope.schema_ncu import NCU_COLUMNS

SCHEMA_VERSION = 1

_NAME = pa.dictionary(pa.int32(), pa.string())
_ENUM = pa.dictionary(pa.int8(), pa.string())


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    nullable: bool
    doc: str
    unit: str = ""


@dataclass(frozen=True)
class TableSpec:
    name: str
    doc: str
    columns: tuple[Column, ...]

    @property
    def arrow_schema(self) -> pa.Schema:
        return pa.schema(
            [pa.field(c.name, c.type, nullable=c.nullable) for c in self.columns]
        )

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


def _c(name: str, typ: pa.DataType, doc: str, unit: str = "", nullable: bool = True) -> Column:
    return Column(name=name, type=typ, nullable=nullable, doc=doc, unit=unit)


RANK = _c("rank", pa.int32(), "rank / process partition", nullable=False)
TS = _c("ts_ns", pa.int64(), "start time", "ns", nullable=False)
DUR = _c("dur_ns", pa.int64(), "duration", "ns", nullable=False)
DEVICE = _c("device", pa.int32(), "GPU index as seen by the process")
STREAM = _c("stream", pa.int64(), "stream id")
CORR = _c("correlation", pa.int64(), "CUDA correlation id linking an API call to its GPU work")
EXT = _c("external_id", pa.int64(), "framework op id linking GPU work to the op that issued it")
PID = _c("pid", pa.int64(), "process id")
TID = _c("tid", pa.int64(), "thread id")



TABLES: dict[str, TableSpec] = {
    t.name: t
    for t in (
        TableSpec(
            "devices",
            "One row per GPU per rank, with the limits occupancy is computed from.",
            (
                RANK,
                _c("device", pa.int32(), "GPU index", nullable=False),
                _c("name", pa.string(), "marketing name"),
                _c("vendor", _ENUM, "nvidia | amd | unknown"),
                _c("compute_major", pa.int16(), "compute capability major (NVIDIA)"),
                _c("compute_minor", pa.int16(), "compute capability minor (NVIDIA)"),
                _c("sm_count", pa.int32(), "streaming multiprocessors (CUs on AMD)"),
                _c("warp_size", pa.int32(), "threads per warp"),
                _c("max_threads_per_block", pa.int32(), ""),
                _c("max_threads_per_sm", pa.int32(), ""),
                _c("max_blocks_per_sm", pa.int32(), "resident blocks per SM (from the CC table when unknown)"),
                _c("regs_per_block", pa.int32(), "registers"),
                _c("regs_per_sm", pa.int32(), "registers"),
                _c("smem_per_block", pa.int64(), "default shared memory per block", "B"),
                _c("smem_per_block_optin", pa.int64(), "opt-in shared memory per block", "B"),
                _c("smem_per_sm", pa.int64(), "shared memory per SM", "B"),
                _c("total_memory", pa.int64(), "device memory", "B"),
                _c("clock_khz", pa.int64(), "SM clock (the driver's CLOCK_RATE)", "kHz"),
                _c("memory_bandwidth_gbs", pa.float64(),
                   "peak DRAM bandwidth: 2 x memory_clock_khz x bus_width_bits / 8", "GB/s"),
                _c("memory_clock_khz", pa.int64(), "peak memory clock", "kHz"),
                _c("bus_width_bits", pa.int32(), "global memory bus width", "bit"),
                _c("l2_bytes", pa.int64(), "L2 cache size", "B"),
                _c("uuid", pa.string(), "GPU UUID as NVML and nvidia-smi print it (GPU-...)"),
                _c("pci_bus_id", pa.string(),
                   "PCI address domain:bus:device.function, lowercase hex (0000:18:00.0)"),
                _c("numa_node", pa.int32(), "host NUMA node the GPU is attached to"),
                _c("numa_cpus", pa.string(), "CPUs of that NUMA node, as Linux lists them (0-15,32-47)"),
                _c("nvlink_links", pa.int32(), "active NVLink links"),
                _c("nvlink_gbs", pa.float64(),
                   "NVLink bandwidth per direction, all active links together", "GB/s"),
                _c("pcie_gbs", pa.float64(),
                   "PCIe bandwidth per direction at the link's max generation and width", "GB/s"),
            ),
        ),
        TableSpec(
            "processes",
            "Processes seen in the run (host processes; GPU 'processes' of a Kineto trace are devices).",
            (RANK, _c("pid", pa.int64(), "process id", nullable=False), _c("name", pa.string(), ""),
             _c("host", pa.string(), "host name"),
             _c("cpu_affinity", pa.string(),
                "CPUs the process may run on, as Linux lists them (0-15,32-47)")),
        ),
        TableSpec(
            "threads",
            "Host threads with their names.",
            (RANK, PID, _c("tid", pa.int64(), "thread id", nullable=False), _c("name", pa.string(), "")),
        ),
        TableSpec(
            "streams",
            "GPU streams that carried work.",
            (RANK, _c("device", pa.int32(), "", nullable=False), _c("stream", pa.int64(), "", nullable=False),
             _c("name", pa.string(), ""), _c("priority", pa.int32(), "")),
        ),
        TableSpec(
            "kernels",
            "GPU kernel executions.",
            (
                RANK, TS, DUR, DEVICE, STREAM, CORR, EXT,
                _c("name", _NAME, "kernel name (demangled where the source demangles)", nullable=False),
                _c("grid_x", pa.int32(), "blocks"), _c("grid_y", pa.int32(), "blocks"),
                _c("grid_z", pa.int32(), "blocks"),
                _c("block_x", pa.int32(), "threads"), _c("block_y", pa.int32(), "threads"),
                _c("block_z", pa.int32(), "threads"),
                _c("registers", pa.int32(), "registers per thread"),
                _c("shared_memory", pa.int64(), "static + dynamic shared memory per block", "B"),
                _c("static_smem", pa.int64(), "static shared memory per block", "B"),
                _c("dynamic_smem", pa.int64(), "dynamic shared memory per block", "B"),
                _c("queued_ns", pa.int64(), "launch-to-start queue time if the source measured it", "ns"),
                _c("graph_id", pa.int64(), "CUDA graph id when launched from a graph"),
                _c("source_occupancy_pct", pa.float32(), "occupancy the source reported (Kineto 'est. achieved occupancy %')", "%"),
            ),
        ),
        TableSpec(
            "memcpy",
            "GPU memory copies.",
            (
                RANK, TS, DUR, DEVICE, STREAM, CORR, EXT,
                _c("kind", _ENUM, "CopyKind"),
                _c("bytes", pa.int64(), "", "B"),
                _c("src_kind", _ENUM, "MemoryKind of the source"),
                _c("dst_kind", _ENUM, "MemoryKind of the destination"),
                _c("dst_device", pa.int32(), "peer device for PtoP copies"),
            ),
        ),
        TableSpec(
            "memset",
            "GPU memsets.",
            (RANK, TS, DUR, DEVICE, STREAM, CORR, EXT, _c("bytes", pa.int64(), "", "B"),
             _c("dst_kind", _ENUM, "MemoryKind")),
        ),
        TableSpec(
            "api_calls",
            "CUDA/HIP runtime and driver calls on host threads.",
            (
                RANK, TS, DUR, PID, TID, CORR, EXT,
                _c("name", _NAME, "API function name", nullable=False),
                _c("domain", _ENUM, "ApiDomain"),
                _c("kind", _ENUM, "ApiKind"),
                _c("cbid", pa.int32(), "CUPTI callback id"),
            ),
        ),
        TableSpec(
            "sync",
            "GPU-side synchronization records (CUPTI SYNCHRONIZATION, Kineto cuda_sync).",
            (RANK, TS, DUR, DEVICE, STREAM, CORR, EXT, _c("kind", _ENUM, "SyncKind"),
             _c("event_id", pa.int64(), "CUDA event waited on")),
        ),
        TableSpec(
            "annotations",
            "Named ranges (NVTX, record_function, TraceMe) with nesting per thread.",
            (
                RANK, TS, DUR, PID, TID,
                _c("id", pa.int64(), "row id, unique per rank", nullable=False),
                _c("parent_id", pa.int64(), "enclosing annotation on the same thread"),
                _c("depth", pa.int16(), "nesting depth on its thread, 0 = outermost"),
                _c("name", _NAME, "", nullable=False),
                _c("source", _ENUM, "AnnotationSource"),
                _c("device", pa.int32(), "set for GPU-projected annotations"),
                _c("stream", pa.int64(), "set for GPU-projected annotations"),
                EXT,
            ),
        ),
        TableSpec(
            "cpu_ops",
            "Framework ops and Python functions on host threads.",
            (
                RANK, TS, DUR, PID, TID, EXT,
                _c("name", _NAME, "", nullable=False),
                _c("kind", _ENUM, "CpuOpKind"),
                _c("sequence", pa.int64(), "autograd sequence number"),
            ),
        ),
        TableSpec(
            "steps",
            "Training steps as marked by the source (analysis may derive others).",
            (RANK, TS, DUR, _c("step", pa.int64(), "step number as the source numbers it", nullable=False),
             _c("source", _ENUM, "StepSource"), _c("name", pa.string(), "")),
        ),
        TableSpec(
            "collectives",
            "Collective and point-to-point communication calls, one row per call per rank, with "
            "the GPU time of their kernels (ts_ns/dur_ns: first kernel start to last kernel end).",
            (
                RANK, TS, DUR, DEVICE, STREAM, CORR, EXT,
                _c("op", _ENUM, "CollectiveOp", nullable=False),
                _c("name", _NAME, "the source's name (allreduce, _allgather_base, kernel name)",
                   nullable=False),
                _c("pg", pa.string(), "process group name"),
                _c("pg_desc", pa.string(), "process group description (default_pg ...)"),
                _c("pg_ranks", pa.list_(pa.int32()), "global ranks of the process group"),
                _c("group_size", pa.int32(), "ranks in the process group"),
                _c("dtype", _ENUM, "element type (Float, BFloat16 ...)"),
                _c("in_elems", pa.int64(), "input elements"),
                _c("out_elems", pa.int64(), "output elements"),
                _c("bytes", pa.int64(),
                   "message size as nccl-tests counts it: the input of all-reduce, reduce-scatter, "
                   "all-to-all, broadcast, reduce, send; the output of all-gather and recv", "B"),
                _c("seq", pa.int64(), "sequence number within the process group, if the source has one"),
                _c("host_ts_ns", pa.int64(), "when the host issued the call", "ns"),
                _c("host_dur_ns", pa.int64(), "how long the issuing host call took", "ns"),
                _c("kernels", pa.int32(), "GPU kernels the call ran (0: none seen)"),
                _c("algorithm", _ENUM, "NCCL algorithm from the kernel name (RING, TREE ...)"),
                _c("protocol", _ENUM, "NCCL protocol from the kernel name (LL, LL128, SIMPLE)"),
                _c("source", _ENUM, "CollectiveSource", nullable=False),
            ),
        ),
        TableSpec(
            "input_waits",
            "Time the training thread was blocked waiting for the next batch.",
            (RANK, TS, DUR, PID, TID, _c("source", _ENUM, "InputWaitSource"), _c("name", pa.string(), "")),
        ),
        TableSpec(
            "samples",
            "Periodic metrics (system, process, GPU), long format.",
            (RANK, _c("ts_ns", pa.int64(), "sample time", "ns", nullable=False), DEVICE,
             _c("metric", _NAME, "metric name, e.g. gpu.sm_util", nullable=False),
             _c("value", pa.float64(), "", nullable=False), _c("unit", _ENUM, "")),
        ),
        TableSpec(
            "stacks",
            "Sampled Python call stacks of host threads.",
            (RANK, _c("ts_ns", pa.int64(), "", "ns", nullable=False), PID, TID,
             _c("frames", pa.string(), "innermost-last, one 'file:line function' per line")),
        ),
        TableSpec(
            "memory_events",
            "Allocator events (Kineto [memory] instants): allocations positive, frees negative.",
            (
                RANK, _c("ts_ns", pa.int64(), "", "ns", nullable=False), PID, TID,
                _c("device_type", _ENUM, "DeviceType"),
                _c("device", pa.int32(), ""),
                _c("addr", pa.int64(), ""),
                _c("bytes", pa.int64(), "signed size change", "B"),
                _c("total_allocated", pa.int64(), "allocated after the event", "B"),
                _c("total_reserved", pa.int64(), "reserved by the caching allocator after the event", "B"),
            ),
        ),
        TableSpec(
            "kernel_metrics",
            "Kernel launches profiled by Nsight Compute (ncu), one row per profiled launch, with "
            "the counters the kernel rules read as typed columns (the ncu metric each comes "
            "from is named in its meaning); every other metric of the launch is in "
            "`kernel_metric_values`. Joined to `kernels` by name and launch configuration.",
            (
                RANK,
                _c("id", pa.int64(), "the launch's ID in the ncu report", nullable=False),
                _c("name", _NAME, "kernel name, demangled (ncu's Kernel Name)", nullable=False),
                PID, DEVICE, STREAM,
                _c("cc", pa.string(), "compute capability (8.0, 9.0 ...)"),
                _c("grid_x", pa.int32(), "blocks"), _c("grid_y", pa.int32(), "blocks"),
                _c("grid_z", pa.int32(), "blocks"),
                _c("block_x", pa.int32(), "threads"), _c("block_y", pa.int32(), "threads"),
                _c("block_z", pa.int32(), "threads"),
                *(_c(c, t, d, u) for c, t, u, d in NCU_COLUMNS),
            ),
        ),
        TableSpec(
            "kernel_metric_values",
            "Every metric of each profiled launch (`kernel_metrics.id`), long format, as ncu's "
            "raw page gives it: numbers in `value`, anything else in `text`.",
            (
                RANK,
                _c("id", pa.int64(), "the launch's ID in the ncu report", nullable=False),
                _c("metric", _NAME, "ncu metric name", nullable=False),
                _c("unit", _NAME, "ncu's unit of the value (byte, nsecond, %, ...)"),
                _c("value", pa.float64(), "the value, when it is a number"),
                _c("text", pa.string(), "the value as ncu wrote it, when it is not a number"),
            ),
        ),
        TableSpec(
            "kernel_source_lines",
            "Source lines of the kernels Nsight Compute profiled, with their warp-stall samples "
            "(ncu's source page; kernels built with line information: Triton, CUDA -lineinfo).",
            (
                RANK,
                _c("kernel", _NAME, "kernel function name (ncu's Function Name)",
                   nullable=False),
                _c("file", _NAME, "source file"),
                _c("line", pa.int32(), "line number", nullable=False),
                _c("source", pa.string(), "the line's text (null where ncu could not open the "
                                          "file)"),
                _c("samples", pa.float64(), "warp stall samples at the line (all samples)"),
                _c("share", pa.float64(), "of the kernel's samples, 0..1"),
            ),
        ),
    )
}

TABLE_NAMES: tuple[str, ...] = tuple(TABLES)


GPU_ACTIVITY_TABLES = ("kernels", "memcpy", "memset")  # rows here: the source saw GPU activity


@dataclass(frozen=True)
class SourceContract:
    """The tables a rank of one kind of source must provide: ``always``, and ``with_gpu`` as
    soon as it has GPU activity (rows in ``GPU_ACTIVITY_TABLES``). The run assembler
    (``store.produce.assemble``) writes a ``missing_tables`` diagnostic for each gap."""

    kind: SourceKind
    always: tuple[str, ...]
    with_gpu: tuple[str, ...]
    doc: str
    # required as soon as the rank ran communication (NCCL/RCCL) kernels: the assembler makes
    # them from the kernels when the source gave none (store.produce.collectives.complete)
    with_communication: tuple[str, ...] = ()

    def required(self, gpu_activity: bool, communication: bool = False) -> tuple[str, ...]:
        return (self.always + (self.with_gpu if gpu_activity else ())
                + (self.with_communication if communication else ()))


CONTRACTS: dict[SourceKind, SourceContract] = {
    c.kind: c
    for c in (
        SourceContract(SourceKind.KINETO, (), ("devices", "streams", "api_calls"),
                       "the trace's deviceProperties, GPU stream names, CUDA/HIP runtime calls",
                       ("collectives",)),
        SourceContract(SourceKind.CUPTI, (), ("devices", "api_calls"),
                       "the CUDA driver's device rows, CUPTI's runtime/driver call records",
                       ("collectives",)),
        SourceContract(SourceKind.TORCH, (), ("devices", "streams", "api_calls"),
                       "the driver's (else Kineto's) device rows, Kineto's streams and calls",
                       ("collectives",)),
        SourceContract(SourceKind.HOST, (), (), "whatever the host capture saw"),
        SourceContract(SourceKind.XSPACE, (), ("devices", "streams", "api_calls"),
                       "the GPU planes' device stats and stream lines, the host plane's "
                       "CUDA/HIP calls", ("collectives",)),
        SourceContract(SourceKind.NSYS, (), ("devices", "streams", "api_calls"),
                       "the export's GPU rows (TARGET_INFO_GPU, else the index only), the "
                       "streams of its GPU records, its CUDA runtime/driver calls",
                       ("collectives",)),
        SourceContract(SourceKind.NCU, ("kernel_metrics",), (),
                       "Nsight Compute's raw page: one row per profiled kernel launch"),
    )
}


def required_tables(kind: SourceKind, gpu_activity: bool,
                    communication: bool = False) -> tuple[str, ...]:
    """The tables a rank of ``kind`` must provide (``CONTRACTS``); ``communication``: the rank
    ran communication kernels."""
    return CONTRACTS[kind].required(gpu_activity, communication)


def spec(name: str) -> TableSpec:
    """The spec of table ``name``; ``KeyError`` names the known tables."""
    try:
        return TABLES[name]
    except KeyError:
        raise KeyError(f"unknown table {name!r}; tables are: {', '.join(TABLE_NAMES)}") from None


def empty_table(name: str) -> pa.Table:
    return spec(name).arrow_schema.empty_table()
