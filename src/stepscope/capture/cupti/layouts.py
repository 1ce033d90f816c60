"""CUPTI activity record layouts: where each field this project reads sits in a record.

Offsets and sizes were computed with ``offsetof``/``sizeof`` by a C compiler from NVIDIA's
``cupti_activity.h`` as shipped in the ``nvidia-cuda-cupti`` wheels (13.0.85 for CUPTI 13,
``nvidia-cuda-cupti-cu12`` 12.9.79 for CUPTI 12.x; the later CUPTI 13 releases in
``_RELEASES_13``). The records are packed and 8-byte aligned.
A record's layout depends on the libcupti in the process, not on a header we compile against,
so the table is chosen from ``cuptiGetVersion`` and checked at run time against CUPTI's own
record iterator (``ss_check_walk`` in the shim) on every buffer before it is read.

Kinds and enums (same values in both versions):
"""

from __future__ import annotations

from dataclasses import dataclass

from stepscope.schema_enums import CopyKind, MemoryKind, SyncKind

# CUpti_ActivityKind values used here
MEMCPY = 1
MEMSET = 2
DRIVER = 4
RUNTIME = 5
CONCURRENT_KERNEL = 10
MARKER = 12
MARKER_DATA = 13
OVERHEAD = 17
SYNCHRONIZATION = 38
EXTERNAL_CORRELATION = 39
CUDA_EVENT = 36  # written by CUDA 12.x CUPTI along with sync records; not decoded

KIND_NAMES = {MEMCPY: "memcpy", MEMSET: "memset", DRIVER: "driver", RUNTIME: "runtime",
              CONCURRENT_KERNEL: "concurrent_kernel", MARKER: "marker", MARKER_DATA: "marker_data",
              OVERHEAD: "overhead", SYNCHRONIZATION: "synchronization",
              EXTERNAL_CORRELATION: "external_correlation", CUDA_EVENT: "cuda_event"}

# CUpti_ActivityMemcpyKind -> schema CopyKind (array copies count with their host/device side)
COPY_KINDS = {0: CopyKind.UNKNOWN, 1: CopyKind.HTOD, 2: CopyKind.DTOH, 3: CopyKind.HTOD,
              4: CopyKind.DTOH, 5: CopyKind.DTOD, 6: CopyKind.DTOD, 7: CopyKind.DTOD,
              8: CopyKind.DTOD, 9: CopyKind.HTOH, 10: CopyKind.PTOP}
# CUpti_ActivityMemoryKind -> schema MemoryKind
MEMORY_KINDS = {0: MemoryKind.UNKNOWN, 1: MemoryKind.PAGEABLE, 2: MemoryKind.PINNED,
                3: MemoryKind.DEVICE, 4: MemoryKind.ARRAY, 5: MemoryKind.MANAGED,
                6: MemoryKind.DEVICE, 7: MemoryKind.MANAGED}
# CUpti_ActivitySynchronizationType -> schema SyncKind
SYNC_KINDS = {0: SyncKind.UNKNOWN, 1: SyncKind.EVENT, 2: SyncKind.STREAM_WAIT_EVENT,
              3: SyncKind.STREAM, 4: SyncKind.CONTEXT}
# CUpti_ActivityFlag bits of marker records
MARKER_INSTANTANEOUS = 1 << 0
MARKER_START = 1 << 1
MARKER_END = 1 << 2
# CUpti_ActivityObjectKind of marker records
OBJECT_THREAD = 2
# CUpti_ActivityOverheadKind
OVERHEAD_KINDS = {0: "unknown", 1: "driver_compiler", 1 << 16: "buffer_flush",
                  2 << 16: "instrumentation", 3 << 16: "resource",
                  4 << 16: "module_loading", 5 << 16: "lazy_function_loading",
                  6 << 16: "command_buffer_full", 7 << 16: "activity_buffer_request",
                  8 << 16: "uvm_activity_init"}
# CUpti_CallbackDomain
DOMAIN_DRIVER_API = 1
DOMAIN_RUNTIME_API = 2

Field = tuple[int, str]  # (byte offset, numpy dtype string)


@dataclass(frozen=True)
class Layout:
    size: int
    fields: dict[str, Field]


_KERNEL_FIELDS: dict[str, Field] = {
    "registers": (6, "<u2"), "start": (16, "<u8"), "end": (24, "<u8"), "device": (40, "<u4"),
    "context": (44, "<u4"), "stream": (48, "<u4"), "grid_x": (52, "<i4"), "grid_y": (56, "<i4"),
    "grid_z": (60, "<i4"), "block_x": (64, "<i4"), "block_y": (68, "<i4"), "block_z": (72, "<i4"),
    "static_smem": (76, "<i4"), "dynamic_smem": (80, "<i4"), "correlation": (92, "<u4"),
    "name": (104, "<u8"), "queued": (120, "<u8"), "submitted": (128, "<u8"),
    "launch_type": (136, "u1"), "graph_node": (144, "<u8"), "graph_id": (156, "<u4"),
}
_MEMCPY_FIELDS: dict[str, Field] = {
    "copy_kind": (4, "u1"), "src_kind": (5, "u1"), "dst_kind": (6, "u1"), "flags": (7, "u1"),
    "bytes": (8, "<u8"), "start": (16, "<u8"), "end": (24, "<u8"), "device": (32, "<u4"),
    "context": (36, "<u4"), "stream": (40, "<u4"), "correlation": (44, "<u4"),
    "graph_id": (72, "<u4"),
}
_PTOP_FIELDS: dict[str, Field] = {
    "copy_kind": (4, "u1"), "src_kind": (5, "u1"), "dst_kind": (6, "u1"), "flags": (7, "u1"),
    "bytes": (8, "<u8"), "start": (16, "<u8"), "end": (24, "<u8"), "device": (32, "<u4"),
    "context": (36, "<u4"), "stream": (40, "<u4"), "src_device": (44, "<u4"),
    "dst_device": (52, "<u4"), "correlation": (60, "<u4"), "graph_id": (80, "<u4"),
}
_MEMSET_FIELDS: dict[str, Field] = {
    "bytes": (8, "<u8"), "start": (16, "<u8"), "end": (24, "<u8"), "device": (32, "<u4"),
    "context": (36, "<u4"), "stream": (40, "<u4"), "correlation": (44, "<u4"),
    "memory_kind": (50, "<u2"), "graph_id": (72, "<u4"),
}
_API_FIELDS: dict[str, Field] = {
    "cbid": (4, "<u4"), "start": (8, "<u8"), "end": (16, "<u8"), "pid": (24, "<u4"),
    "tid": (28, "<u4"), "correlation": (32, "<u4"), "return_value": (36, "<u4"),
}
_SYNC_FIELDS: dict[str, Field] = {
    "type": (4, "<u4"), "start": (8, "<u8"), "end": (16, "<u8"), "correlation": (24, "<u4"),
    "context": (28, "<u4"), "stream": (32, "<u4"), "event": (36, "<u4"),
}
_MARKER_FIELDS: dict[str, Field] = {
    "flags": (4, "<u4"), "timestamp": (8, "<u8"), "id": (16, "<u4"), "object_kind": (20, "<u4"),
    "pid": (24, "<u4"), "tid": (28, "<u4"), "name": (40, "<u8"), "domain": (48, "<u8"),
}
_MARKER_DATA_FIELDS: dict[str, Field] = {"flags": (4, "<u4"), "id": (8, "<u4")}
_OVERHEAD_FIELDS: dict[str, Field] = {
    "overhead_kind": (4, "<u4"), "object_kind": (8, "<u4"), "start": (24, "<u8"), "end": (32, "<u8"),
}
_EXTERNAL_FIELDS: dict[str, Field] = {
    "external_kind": (4, "<u4"), "external_id": (8, "<u8"), "correlation": (16, "<u4"),
}


def _table(kernel_size: int, marker_data_size: int, memcpy_size: int = 96,
           memset_size: int = 88) -> dict[int, Layout]:
    return {
        CONCURRENT_KERNEL: Layout(kernel_size, _KERNEL_FIELDS),
        MEMCPY: Layout(memcpy_size, _MEMCPY_FIELDS),
        MEMSET: Layout(memset_size, _MEMSET_FIELDS),
        RUNTIME: Layout(40, _API_FIELDS),
        DRIVER: Layout(40, _API_FIELDS),
        SYNCHRONIZATION: Layout(56, _SYNC_FIELDS),
        MARKER: Layout(56, _MARKER_FIELDS),
        MARKER_DATA: Layout(marker_data_size, _MARKER_DATA_FIELDS),
        OVERHEAD: Layout(56, _OVERHEAD_FIELDS),
        EXTERNAL_CORRELATION: Layout(24, _EXTERNAL_FIELDS),
    }


# PtoP copies arrive as MEMCPY2 records (kind 22)
MEMCPY2 = 22

LAYOUTS_13 = {**_table(216, 40), MEMCPY2: Layout(96, _PTOP_FIELDS)}  # Kernel10, MarkerData2
LAYOUTS_12 = {**_table(208, 32), MEMCPY2: Layout(96, _PTOP_FIELDS)}  # Kernel9, MarkerData

# CUPTI 13's releases grew three records by fields appended at their end; every field read here
# kept its offset (checked with offsetof in the headers of nvidia-cuda-cupti 13.0.48, 13.0.85,
# 13.1.115, 13.2.23, 13.2.86, 13.3.75, 13.4.92, 13.5.25). From API version: name, table.
_RELEASES_13: tuple[tuple[int, str, dict[int, Layout]], ...] = (
    (130000, "13", LAYOUTS_13),  # 13.0: Kernel10 216, Memcpy6 96, Memset4 88
    (130100, "13.1", {**LAYOUTS_13, **_table(224, 40)}),  # 13.1, 13.2: Kernel11 224
    (130300, "13.3", {**LAYOUTS_13, **_table(232, 40)}),  # 13.3: Kernel12 232
    (130400, "13.4", {**LAYOUTS_13, **_table(248, 40, 112, 104)}),  # 13.4, 13.5: Kernel13,
)                                                                   # Memcpy7 112, Memset5 104
NEWEST_CHECKED = 130599  # the newest API version whose sizes were read from its header (13.5)


@dataclass(frozen=True)
class LayoutChoice:
    """The record layouts for one libcupti. ``checked``: its sizes were read from that release's
    header; a newer CUPTI gets the newest known table, its record sizes learnt from CUPTI's own
    iterator (``CuptiCapture._verify_layout``), the fields read at the known offsets."""
    name: str
    table: dict[int, Layout]
    checked: bool = True


def layouts_for(api_version: int) -> LayoutChoice | None:
    """The layout table for a ``cuptiGetVersion`` value, or None when unknown."""
    if api_version >= 130000:
        name, table = next((n, t) for v, n, t in reversed(_RELEASES_13) if api_version >= v)
        return LayoutChoice(name, table, checked=api_version <= NEWEST_CHECKED)
    if 19 <= api_version <= 28:  # CUDA 12.0 .. 12.9 (checked at run time against CUPTI)
        return LayoutChoice("12", LAYOUTS_12)
    return None


def size_table(layouts: dict[int, Layout]) -> list[int]:
    """Record size per kind (0 = unknown kind), as the shim's walk wants it."""
    sizes = [0] * 64
    for kind, lay in layouts.items():
        sizes[kind] = lay.size
    return sizes
