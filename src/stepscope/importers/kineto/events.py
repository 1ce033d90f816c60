"""The typed msgspec Structs a Kineto (PyTorch profiler) Chrome trace decodes into.

Speed comes from decoding only what the importer needs. Events are first decoded
per category (``fast``: each category's Struct holds only what its table
uses); an event that does not fit there (no or an unknown category, an odd phase)
is decoded into the generic ``Event`` here, with its ``args`` in an ``Args`` that
holds every key some table uses (everything else, e.g. ``Input Dims``, is skipped
by the decoder without allocating). The Structs are created with ``gc=False`` and
``reader`` pauses the collector during the decode: object allocation, not
JSON syntax, is the cost (docs/benchmarks.md, "Importer speed").

Fields whose JSON type varies between real traces are unions: AMD traces carry
``"stream": "0x0"`` on HIP runtime calls, Triton ``cpu_op`` events carry
``"grid": "grid(100,)"``. A field of yet another type makes the typed decode
fail; the reader then decodes event by event and drops the bad events.
"""

from __future__ import annotations

from typing import Any

import msgspec

IntLike = int | str | None  # ints as Kineto writes them; strings as HIP/ROCm sometimes does
NAN = float("nan")


def _f(key: str) -> Any:
    """An optional field stored under JSON key ``key``."""
    return msgspec.field(default=None, name=key)


class Args(msgspec.Struct, gc=False, frozen=True):
    """The keys of an event's ``args`` that some table needs (all optional)."""

    # In the order Kineto writes the keys: msgspec looks a key up from the field
    # after the previous match, so this order makes most lookups hit at once
    # (measured: ~4% faster decoding of a GPT trace than the earlier order).
    external_id: IntLike = _f("External id")
    sequence: IntLike = _f("Sequence number")
    queued: IntLike = None
    device: IntLike = None
    stream: IntLike = None
    cbid: IntLike = None
    correlation: IntLike = None
    registers: IntLike = _f("registers per thread")
    shared_memory: IntLike = _f("shared memory")
    grid: list[int] | str | None = None
    block: list[int] | str | None = None
    occupancy: float | str | None = _f("est. achieved occupancy %")
    bytes: IntLike = None
    to_device: IntLike = _f("toDevice")
    graph_id: IntLike = _f("graph id")
    sync_kind: str | None = _f("cuda_sync_kind")
    wait_event: IntLike = _f("wait_on_cuda_event_id")
    total_reserved: IntLike = _f("Total Reserved")
    total_allocated: IntLike = _f("Total Allocated")
    mem_bytes: IntLike = _f("Bytes")
    device_id: IntLike = _f("Device Id")
    device_type: IntLike = _f("Device Type")
    addr: IntLike = _f("Addr")
    name: str | None = None  # metadata events: process_name / thread_name
    labels: str | None = None  # metadata events: process_labels
    # a collective's arguments (NCCL kernels of torch >= 2.4, record_param_comms ops): any JSON
    # type, checked where they are read (kineto.comms), so that an odd one drops no event
    collective: Any = _f("Collective name")
    in_elems: Any = _f("In msg nelems")
    out_elems: Any = _f("Out msg nelems")
    group_size: Any = _f("Group size")
    dtype: Any = None
    pg: Any = _f("Process Group Name")
    pg_desc: Any = _f("Process Group Description")
    pg_ranks: Any = _f("Process Group Ranks")
    seq: Any = None
    seq_cap: Any = _f("Seq")


EMPTY_ARGS = Args()


class Event(msgspec.Struct, gc=False):
    """One trace event; ``ts``/``dur`` are microseconds (NaN when absent)."""

    ph: str = ""
    cat: str | None = None
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float = NAN
    dur: float = NAN
    id: int | str | None = None  # flow events
    args: Args = EMPTY_ARGS  # shared (frozen) when the event has no args


class DeviceProps(msgspec.Struct, gc=False):
    id: int = 0
    name: str = ""
    totalGlobalMem: int | None = None
    computeMajor: int | None = None
    computeMinor: int | None = None
    maxThreadsPerBlock: int | None = None
    maxThreadsPerMultiprocessor: int | None = None
    regsPerBlock: int | None = None
    regsPerMultiprocessor: int | None = None
    warpSize: int | None = None
    sharedMemPerBlock: int | None = None
    sharedMemPerBlockOptin: int | None = None
    sharedMemPerMultiprocessor: int | None = None
    maxSharedMemoryPerMultiProcessor: int | None = None  # AMD spelling
    numSms: int | None = None


class DistInfo(msgspec.Struct, gc=False):
    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None
    nccl_version: str | None = None


# Top-level keys other than the events; decoded leniently one by one in the slow path.
META_TYPES: dict[str, Any] = {
    "schemaVersion": int | str | None,
    "deviceProperties": list[DeviceProps] | None,
    "distributedInfo": DistInfo | None,
    "baseTimeNanoseconds": int | None,
    "trace_id": str | None,
    "displayTimeUnit": str | None,
    "cupti_version": int | None,
    "cuda_runtime_version": int | None,
    "cuda_driver_version": int | None,
    "with_stack": int | bool | None,
    "profile_memory": int | bool | None,
    "record_shapes": int | bool | None,
}


class TraceDoc(msgspec.Struct, gc=False):
    """The parts of a Kineto trace file the importer reads."""

    traceEvents: list[Event] | None = None
    schemaVersion: int | str | None = None
    deviceProperties: list[DeviceProps] | None = None
    distributedInfo: DistInfo | None = None
    baseTimeNanoseconds: int | None = None
    trace_id: str | None = None
    displayTimeUnit: str | None = None
    cupti_version: int | None = None
    cuda_runtime_version: int | None = None
    cuda_driver_version: int | None = None
    with_stack: int | bool | None = None
    profile_memory: int | bool | None = None
    record_shapes: int | bool | None = None


class RawDoc(msgspec.Struct):
    """Slow path: the same document with each part left undecoded (empty when absent)."""

    traceEvents: list[msgspec.Raw] | None = None
    schemaVersion: msgspec.Raw = msgspec.Raw()
    deviceProperties: msgspec.Raw = msgspec.Raw()
    distributedInfo: msgspec.Raw = msgspec.Raw()
    baseTimeNanoseconds: msgspec.Raw = msgspec.Raw()
    trace_id: msgspec.Raw = msgspec.Raw()
    displayTimeUnit: msgspec.Raw = msgspec.Raw()
    cupti_version: msgspec.Raw = msgspec.Raw()
    cuda_runtime_version: msgspec.Raw = msgspec.Raw()
    cuda_driver_version: msgspec.Raw = msgspec.Raw()
    with_stack: msgspec.Raw = msgspec.Raw()
    profile_memory: msgspec.Raw = msgspec.Raw()
    record_shapes: msgspec.Raw = msgspec.Raw()


RAW_DOC = msgspec.json.Decoder(RawDoc)
EVENT = msgspec.json.Decoder(Event)
RAW_EVENTS = msgspec.json.Decoder(list[msgspec.Raw])
