"""The fast decode of Kineto events: one small Struct per category (a tagged union on ``cat``).

Most of an import's time is spent creating (and later freeing) the Python objects the
decoder makes, and most events are ``cpu_op`` / ``python_function`` ones whose ``args`` the
importer barely reads. Here each category decodes into a Struct with only what the tables
take from it: ``python_function`` without ``args``, ``cpu_op`` with the two op ids, ``[memory]``
instants with the allocator fields, flows with their ids, ignored categories with nothing.
``ph`` (and ``cat``, the union tag) are literals, so msgspec hands back shared strings instead
of allocating two per event. Measured on a GPT trace: ~20% less decode + free time than the
one generic :class:`Event`.

The Structs are drop-in for :class:`Event` where the builder uses them: each has every
attribute the builder reads for its category, with the same types (``cat`` is a class
attribute). An event the union cannot take (no ``cat``, a category not listed here, a phase
not in :data:`PHASES`, a field of the wrong type) is decoded as a generic :class:`Event`
instead (:meth:`EventReader._events_from_raw`), so what is imported does not depend on which
path decoded it; fields a category's table does not use are not type-checked.
"""

from __future__ import annotations

import types
from typing import Any, ClassVar, Literal

import msgspec

from stepscope.importers.kineto.events import EMPTY_ARGS, NAN, Args, IntLike, TraceDoc, _f

# Every phase of the Chrome trace-event format.
PHASES = ("X", "B", "E", "i", "I", "s", "t", "f", "M", "b", "n", "e", "C", "P", "O", "N", "D",
          "R", "c", "V", "v", "(", ")")
Phase = Literal["X", "B", "E", "i", "I", "s", "t", "f", "M", "b", "n", "e", "C", "P", "O", "N",
                "D", "R", "c", "V", "v", "(", ")", ""]


class OpArgs(msgspec.Struct, gc=False, frozen=True):
    """``cpu_op`` args: the op ids (Kineto's key order), and a ``record_param_comms`` op's
    collective arguments (as ``events.Args``'s)."""

    external_id: IntLike = _f("External id")
    sequence: IntLike = _f("Sequence number")
    pg: Any = _f("Process Group Name")
    out_elems: Any = _f("Out msg nelems")
    pg_ranks: Any = _f("Process Group Ranks")
    group_size: Any = _f("Group size")
    in_elems: Any = _f("In msg nelems")
    dtype: Any = None
    pg_desc: Any = _f("Process Group Description")
    collective: Any = _f("Collective name")
    seq: Any = None
    seq_cap: Any = _f("Seq")


class MemArgs(msgspec.Struct, gc=False, frozen=True):
    """``[memory]`` instant args (Kineto's key order)."""

    total_reserved: IntLike = _f("Total Reserved")
    total_allocated: IntLike = _f("Total Allocated")
    mem_bytes: IntLike = _f("Bytes")
    device_id: IntLike = _f("Device Id")
    device_type: IntLike = _f("Device Type")
    addr: IntLike = _f("Addr")


EMPTY_OP_ARGS = OpArgs()
EMPTY_MEM_ARGS = MemArgs()


class _Tagged(msgspec.Struct, gc=False, tag_field="cat"):
    cat: ClassVar[str]


class _Range(_Tagged):
    """Fields (and key order) of Kineto's complete events."""

    ph: Phase = ""
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float = NAN
    dur: float = NAN


class FullEvent(_Range):
    """GPU activity, runtime/driver calls, annotations: every ``Args`` field."""

    args: Args = EMPTY_ARGS


class OpEvent(_Range):
    args: OpArgs = EMPTY_OP_ARGS


class PyEvent(_Range):
    """``python_function``: the args (Python ids) are not imported."""

    args: ClassVar[Args] = EMPTY_ARGS


class MemEvent(_Range):
    args: MemArgs = EMPTY_MEM_ARGS


class FlowEvent(_Tagged):
    """``ac2g`` flows: what links a GPU event without a correlation to its launch."""

    ph: Phase = ""
    id: int | str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float = NAN


class SkippedEvent(_Tagged):
    """A category with nothing to import: only counted."""


def _classes(kinds: dict[type[_Tagged], tuple[str, ...]]) -> dict[str, type[_Tagged]]:
    """One subclass per category (the union needs one tag per class)."""
    out: dict[str, type[_Tagged]] = {}
    for base, cats in kinds.items():
        for cat in cats:
            def body(ns: dict[str, Any], cat: str = cat) -> None:
                ns["cat"] = cat
                ns["__module__"] = __name__
            name = "".join(p.capitalize() for p in cat.split("_") if p.isalnum()) or "Cat"
            out[cat] = types.new_class(f"{name}{base.__name__}", (base,), {"tag": cat}, body)
    return out


class Decoders:
    """The fast decoders for a set of categories (each listed under the Struct it decodes into)."""

    def __init__(self, *, full: tuple[str, ...], ops: tuple[str, ...], python: tuple[str, ...],
                 memory: tuple[str, ...], flows: tuple[str, ...], skipped: tuple[str, ...]) -> None:
        self.classes = _classes({FullEvent: full, OpEvent: ops, PyEvent: python,
                                 MemEvent: memory, FlowEvent: flows, SkippedEvent: skipped})
        union: Any = None
        for cls in self.classes.values():
            union = cls if union is None else union | cls
        self.events: msgspec.json.Decoder[Any] = msgspec.json.Decoder(list[union])
        self.event: msgspec.json.Decoder[Any] = msgspec.json.Decoder(union)
        # TraceDoc with these events; decoded docs are read through TraceDoc's attributes.
        fields = [(f.name, list[union] | None if f.name == "traceEvents" else f.type, f.default)
                  for f in msgspec.structs.fields(TraceDoc)]
        self.doc: msgspec.json.Decoder[Any] = msgspec.json.Decoder(
            msgspec.defstruct("FastTraceDoc", fields, gc=False))


__all__ = ["PHASES", "Decoders", "FlowEvent", "FullEvent", "MemArgs", "MemEvent", "OpArgs",
           "OpEvent", "PyEvent", "SkippedEvent"]
