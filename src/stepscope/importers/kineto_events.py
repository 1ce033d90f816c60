"""Reading a Kineto (PyTorch profiler) Chrome trace into typed msgspec Structs.

Speed comes from decoding only what the importer needs: every event is decoded
into a small typed ``Event`` and its ``args`` into an ``Args`` holding only the
keys some table uses (everything else, e.g. ``Input Dims``, is skipped by the
decoder without allocating). The Structs are created with ``gc=False`` and the
collector is paused during the decode: object allocation, not JSON syntax, is
the cost (see ARCHITECTURE.md, "parsing a Kineto trace in Python").

Fields whose JSON type varies between real traces are unions: AMD traces carry
``"stream": "0x0"`` on HIP runtime calls, Triton ``cpu_op`` events carry
``"grid": "grid(100,)"``. A field of another type somewhere makes the fast decode
fail; :func:`decode_trace` then decodes event by event, drops the bad events
and reports them in one diagnostic.
"""

from __future__ import annotations

import gc
import gzip
import mmap
import os
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import msgspec

from stepscope.errors import TraceFormatError
from stepscope.store.manifest import Diagnostic

GZIP_MAGIC = b"\x1f\x8b"

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
_META_TYPES: dict[str, Any] = {
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


class _RawDoc(msgspec.Struct):
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


_FAST = msgspec.json.Decoder(TraceDoc)
_RAW = msgspec.json.Decoder(_RawDoc)
_EVENT = msgspec.json.Decoder(Event)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector (restored even on error)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclass(frozen=True)
class Loaded:
    """A trace file's bytes (or a read-only map of them) and its uncompressed size."""

    data: bytes | mmap.mmap
    size: int
    compressed: bool


def load_bytes(path: Path) -> Loaded:
    """Read ``path``: gzip is detected by content and decompressed into memory,
    plain files are memory-mapped. Raises ``TraceFormatError`` naming the file."""
    name = str(path)
    if not path.exists():
        raise TraceFormatError(name, "no such file")
    if path.is_dir():
        raise TraceFormatError(name, "is a directory, not a trace file")
    try:
        with open(path, "rb") as fh:
            head = fh.read(2)
            if head == GZIP_MAGIC:
                fh.seek(0)
                raw = fh.read()
                try:
                    data = gzip.decompress(raw)
                except EOFError:
                    raise TraceFormatError(name, "truncated gzip file (the download or copy is incomplete)") from None
                except (OSError, zlib.error) as exc:
                    raise TraceFormatError(name, f"corrupt gzip file ({_one_line(exc)})") from None
                del raw
                return Loaded(data, len(data), True)
            size = os.fstat(fh.fileno()).st_size
            if size == 0:
                raise TraceFormatError(name, "empty file, not a trace")
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            return Loaded(mm, size, False)
    except PermissionError:
        raise TraceFormatError(name, "permission denied (cannot read the file)") from None
    except OSError as exc:
        raise TraceFormatError(name, f"cannot read ({exc.strerror or _one_line(exc)})") from None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def decode_trace(loaded: Loaded, path: str) -> tuple[TraceDoc, list[Diagnostic]]:
    """Decode a trace document; bad events are dropped with a diagnostic.

    Raises ``TraceFormatError`` when the bytes are not JSON, the top level is not
    an object, or there is no ``traceEvents`` list.
    """
    diags: list[Diagnostic] = []
    try:
        with gc_paused():
            doc = _FAST.decode(loaded.data)
    except msgspec.ValidationError:
        doc = _decode_lenient(loaded, path, diags)
    except msgspec.DecodeError as exc:
        raise TraceFormatError(path, f"invalid JSON ({_one_line(exc)})") from None
    if doc.traceEvents is None:
        raise TraceFormatError(path, "not a trace: a JSON object without 'traceEvents'")
    return doc, diags


def _decode_lenient(loaded: Loaded, path: str, diags: list[Diagnostic]) -> TraceDoc:
    try:
        with gc_paused():
            raw = _RAW.decode(loaded.data)
    except msgspec.ValidationError as exc:
        msg = _one_line(exc)
        if msg.startswith("Expected `object`"):
            got = msg.split("got `", 1)[-1].split("`", 1)[0]
            raise TraceFormatError(path, f"not a trace: the top level is a JSON {got}, "
                                         "expected an object with 'traceEvents'") from None
        if "traceEvents" in msg:
            raise TraceFormatError(path, f"'traceEvents' is not a list ({msg})") from None
        raise TraceFormatError(path, f"not a trace ({msg})") from None
    except msgspec.DecodeError as exc:
        raise TraceFormatError(path, f"invalid JSON ({_one_line(exc)})") from None
    meta: dict[str, Any] = {}
    for key, typ in _META_TYPES.items():
        value = getattr(raw, key)
        if value is None:
            continue
        try:
            meta[key] = msgspec.json.decode(value, type=typ)
        except msgspec.ValidationError as exc:
            diags.append(Diagnostic("warning", "bad_metadata",
                                    f"top-level '{key}' ignored: {_one_line(exc)}", path))
    events: list[Event] | None = None
    if raw.traceEvents is not None:
        events = []
        bad = 0
        first = ""
        with gc_paused():
            for i, item in enumerate(raw.traceEvents):
                try:
                    events.append(_EVENT.decode(item))
                except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                    if not bad:
                        first = f"event {i}: {_one_line(exc)}".replace("`$.", "`")
                    bad += 1
        if bad:
            diags.append(Diagnostic("warning", "bad_event",
                                    f"{bad} event(s) with fields of an unexpected type were "
                                    f"skipped; first: {first}", path, bad))
    return TraceDoc(traceEvents=events, **meta)
