"""The typed msgspec Structs a Kineto (PyTorch profiler) Chrome trace decodes into.

Speed comes from decoding only what the importer needs: every event is decoded
into a small typed ``Event`` and its ``args`` into an ``Args`` holding only the
keys some table uses (everything else, e.g. ``Input Dims``, is skipped by the
decoder without allocating). The Structs are created with ``gc=False`` and
``kineto_reader`` pauses the collector during the decode: object allocation, not
JSON syntax, is the cost (see ARCHITECTURE.md, "parsing a Kineto trace in Python").

Fields whose JSON type varies between real traces are unions: AMD traces carry
``"stream": "0x0"`` on HIP runtime calls, Triton ``cpu_op`` events carry
``"grid": "grid(100,)"``. A field of yet another type makes the typed decode
fail; the reader then decodes event by event and drops the bad events.
"""

from __future__ import annotations

from typing import Any, Union

import msgspec

IntLike = Union[int, str, None]  # ints as Kineto writes them; strings as HIP/ROCm sometimes does
NAN = float("nan")


def _f(key: str) -> Any:
    """An optional field stored under JSON key ``key``."""
    return msgspec.field(default=None, name=key)


class Args(msgspec.Struct, gc=False):
    """The keys of an event's ``args`` that some table needs (all optional)."""

    external_id: IntLike = _f("External id")
    correlation: IntLike = None
    device: IntLike = None
    stream: IntLike = None
    cbid: IntLike = None
    bytes: IntLike = None
    to_device: IntLike = _f("toDevice")
    registers: IntLike = _f("registers per thread")
    shared_memory: IntLike = _f("shared memory")
    queued: IntLike = None
    graph_id: IntLike = _f("graph id")
    grid: Union[list[int], str, None] = None
    block: Union[list[int], str, None] = None
    occupancy: Union[float, str, None] = _f("est. achieved occupancy %")
    sequence: IntLike = _f("Sequence number")
    sync_kind: Union[str, None] = _f("cuda_sync_kind")
    wait_event: IntLike = _f("wait_on_cuda_event_id")
    mem_bytes: IntLike = _f("Bytes")
    total_allocated: IntLike = _f("Total Allocated")
    total_reserved: IntLike = _f("Total Reserved")
    device_id: IntLike = _f("Device Id")
    device_type: IntLike = _f("Device Type")
    addr: IntLike = _f("Addr")
    name: Union[str, None] = None  # metadata events: process_name / thread_name
    labels: Union[str, None] = None  # metadata events: process_labels


EMPTY_ARGS = Args()


class Event(msgspec.Struct, gc=False):
    """One trace event; ``ts``/``dur`` are microseconds (NaN when absent)."""

    ph: str = ""
    cat: Union[str, None] = None
    name: str = ""
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None
    ts: float = NAN
    dur: float = NAN
    id: Union[int, str, None] = None  # flow events
    args: Union[Args, None] = None


class DeviceProps(msgspec.Struct, gc=False):
    id: int = 0
    name: str = ""
    totalGlobalMem: Union[int, None] = None
    computeMajor: Union[int, None] = None
    computeMinor: Union[int, None] = None
    maxThreadsPerBlock: Union[int, None] = None
    maxThreadsPerMultiprocessor: Union[int, None] = None
    regsPerBlock: Union[int, None] = None
    regsPerMultiprocessor: Union[int, None] = None
    warpSize: Union[int, None] = None
    sharedMemPerBlock: Union[int, None] = None
    sharedMemPerBlockOptin: Union[int, None] = None
    sharedMemPerMultiprocessor: Union[int, None] = None
    maxSharedMemoryPerMultiProcessor: Union[int, None] = None  # AMD spelling
    numSms: Union[int, None] = None


class DistInfo(msgspec.Struct, gc=False):
    rank: Union[int, None] = None
    world_size: Union[int, None] = None
    backend: Union[str, None] = None
    nccl_version: Union[str, None] = None


# Top-level keys other than the events; decoded leniently one by one in the slow path.
META_TYPES: dict[str, Any] = {
    "schemaVersion": Union[int, str, None],
    "deviceProperties": Union[list[DeviceProps], None],
    "distributedInfo": Union[DistInfo, None],
    "baseTimeNanoseconds": Union[int, None],
    "trace_id": Union[str, None],
    "displayTimeUnit": Union[str, None],
    "cupti_version": Union[int, None],
    "cuda_runtime_version": Union[int, None],
    "cuda_driver_version": Union[int, None],
    "with_stack": Union[int, bool, None],
    "profile_memory": Union[int, bool, None],
    "record_shapes": Union[int, bool, None],
}


class TraceDoc(msgspec.Struct, gc=False):
    """The parts of a Kineto trace file the importer reads."""

    traceEvents: Union[list[Event], None] = None
    schemaVersion: Union[int, str, None] = None
    deviceProperties: Union[list[DeviceProps], None] = None
    distributedInfo: Union[DistInfo, None] = None
    baseTimeNanoseconds: Union[int, None] = None
    trace_id: Union[str, None] = None
    displayTimeUnit: Union[str, None] = None
    cupti_version: Union[int, None] = None
    cuda_runtime_version: Union[int, None] = None
    cuda_driver_version: Union[int, None] = None
    with_stack: Union[int, bool, None] = None
    profile_memory: Union[int, bool, None] = None
    record_shapes: Union[int, bool, None] = None


class RawDoc(msgspec.Struct):
    """Slow path: the same document with each part left undecoded."""

    traceEvents: Union[list[msgspec.Raw], None] = None
    schemaVersion: Union[msgspec.Raw, None] = None
    deviceProperties: Union[msgspec.Raw, None] = None
    distributedInfo: Union[msgspec.Raw, None] = None
    baseTimeNanoseconds: Union[msgspec.Raw, None] = None
    trace_id: Union[msgspec.Raw, None] = None
    displayTimeUnit: Union[msgspec.Raw, None] = None
    cupti_version: Union[msgspec.Raw, None] = None
    cuda_runtime_version: Union[msgspec.Raw, None] = None
    cuda_driver_version: Union[msgspec.Raw, None] = None
    with_stack: Union[msgspec.Raw, None] = None
    profile_memory: Union[msgspec.Raw, None] = None
    record_shapes: Union[msgspec.Raw, None] = None


DOC = msgspec.json.Decoder(TraceDoc)
RAW_DOC = msgspec.json.Decoder(RawDoc)
EVENT = msgspec.json.Decoder(Event)
EVENTS = msgspec.json.Decoder(list[Event])
RAW_EVENTS = msgspec.json.Decoder(list[msgspec.Raw])
