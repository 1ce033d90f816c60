"""The XSpace wire format as protobuf message classes, built at run time (no ``protoc`` step).

XSpace is what the TensorFlow and JAX profilers write (``*.xplane.pb``: ``jax.profiler.trace``,
``tf.profiler.experimental``, TensorBoard's ``plugins/profile/<run>/<host>.xplane.pb``). Its
schema is published (TSL ``tsl/profiler/protobuf/xplane.proto``, package
``tensorflow.profiler``); the message and field numbers below are written from it, so the
``protobuf`` package can decode files without TensorFlow or xprof installed:

* ``XSpace``: planes 1, errors 2, warnings 3, hostnames 4;
* ``XPlane``: id 1, name 2, lines 3, event_metadata 4 (map id -> XEventMetadata),
  stat_metadata 5 (map id -> XStatMetadata), stats 6;
* ``XLine``: id 1, display_id 10, name 2, display_name 11, timestamp_ns 3, duration_ps 9,
  events 4;
* ``XEvent``: metadata_id 1, offset_ps 2 | num_occurrences 5 (one of), duration_ps 3, stats 4;
* ``XStat``: metadata_id 1, one of double 2, uint64 3, int64 4, str 5, bytes 6, ref 7 (the id
  of a stat metadata whose name is the value);
* ``XEventMetadata``: id 1, name 2, metadata 3, display_name 4, stats 5, child_id 6;
* ``XStatMetadata``: id 1, name 2, description 3.

``xplane_class()`` returns the ``XPlane`` message class; the reader (``xspace.wire``) walks the
top-level XSpace fields itself so that one plane at a time is decoded.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

PACKAGE = "stepscope.xspace"  # our own package name: no clash with a real TensorFlow install

# (field name, number, type, label, message type or None, oneof index or None)
_F = tuple[str, int, str, str, str | None, int | None]
_MESSAGES: dict[str, tuple[tuple[_F, ...], tuple[str, ...]]] = {
    "XSpace": ((
        ("planes", 1, "message", "repeated", "XPlane", None),
        ("errors", 2, "string", "repeated", None, None),
        ("warnings", 3, "string", "repeated", None, None),
        ("hostnames", 4, "string", "repeated", None, None),
    ), ()),
    "XPlane": ((
        ("id", 1, "int64", "optional", None, None),
        ("name", 2, "string", "optional", None, None),
        ("lines", 3, "message", "repeated", "XLine", None),
        ("event_metadata", 4, "message", "repeated", "XPlane.EventMetadataEntry", None),
        ("stat_metadata", 5, "message", "repeated", "XPlane.StatMetadataEntry", None),
        ("stats", 6, "message", "repeated", "XStat", None),
    ), ()),
    "XLine": ((
        ("id", 1, "int64", "optional", None, None),
        ("display_id", 10, "int64", "optional", None, None),
        ("name", 2, "string", "optional", None, None),
        ("display_name", 11, "string", "optional", None, None),
        ("timestamp_ns", 3, "int64", "optional", None, None),
        ("duration_ps", 9, "int64", "optional", None, None),
        ("events", 4, "message", "repeated", "XEvent", None),
    ), ()),
    "XEvent": ((
        ("metadata_id", 1, "int64", "optional", None, None),
        ("offset_ps", 2, "int64", "optional", None, 0),
        ("num_occurrences", 5, "int64", "optional", None, 0),
        ("duration_ps", 3, "int64", "optional", None, None),
        ("stats", 4, "message", "repeated", "XStat", None),
    ), ("data",)),
    "XStat": ((
        ("metadata_id", 1, "int64", "optional", None, None),
        ("double_value", 2, "double", "optional", None, 0),
        ("uint64_value", 3, "uint64", "optional", None, 0),
        ("int64_value", 4, "int64", "optional", None, 0),
        ("str_value", 5, "string", "optional", None, 0),
        ("bytes_value", 6, "bytes", "optional", None, 0),
        ("ref_value", 7, "uint64", "optional", None, 0),
    ), ("value",)),
    "XEventMetadata": ((
        ("id", 1, "int64", "optional", None, None),
        ("name", 2, "string", "optional", None, None),
        ("display_name", 4, "string", "optional", None, None),
        ("metadata", 3, "bytes", "optional", None, None),
        ("stats", 5, "message", "repeated", "XStat", None),
        ("child_id", 6, "int64", "repeated", None, None),
    ), ()),
    "XStatMetadata": ((
        ("id", 1, "int64", "optional", None, None),
        ("name", 2, "string", "optional", None, None),
        ("description", 3, "string", "optional", None, None),
    ), ()),
}
_MAPS = {"EventMetadataEntry": "XEventMetadata", "StatMetadataEntry": "XStatMetadata"}


@lru_cache(maxsize=1)
def _classes() -> dict[str, Any]:
    """The message classes, by name, built once from a ``FileDescriptorProto``."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fdp = descriptor_pb2.FileDescriptorProto(name="stepscope_xplane.proto", package=PACKAGE,
                                             syntax="proto3")
    types = descriptor_pb2.FieldDescriptorProto
    type_of = {"int64": types.TYPE_INT64, "uint64": types.TYPE_UINT64,
               "double": types.TYPE_DOUBLE, "string": types.TYPE_STRING,
               "bytes": types.TYPE_BYTES, "message": types.TYPE_MESSAGE}
    label_of = {"optional": types.LABEL_OPTIONAL, "repeated": types.LABEL_REPEATED}

    def add_field(msg: Any, f: _F) -> None:
        name, number, typ, label, ref, oneof = f
        fd = msg.field.add(name=name, number=number, type=type_of[typ], label=label_of[label])
        if ref is not None:
            fd.type_name = f".{PACKAGE}.{ref}"
        if oneof is not None:
            fd.oneof_index = oneof

    for name, (fields, oneofs) in _MESSAGES.items():
        msg = fdp.message_type.add(name=name)
        for o in oneofs:
            msg.oneof_decl.add(name=o)
        for f in fields:
            add_field(msg, f)
        if name == "XPlane":
            for entry, value in _MAPS.items():
                m = msg.nested_type.add(name=entry)
                m.options.map_entry = True
                add_field(m, ("key", 1, "int64", "optional", None, None))
                add_field(m, ("value", 2, "message", "optional", value, None))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {name: message_factory.GetMessageClass(
        pool.FindMessageTypeByName(f"{PACKAGE}.{name}")) for name in _MESSAGES}


def xplane_class() -> Any:
    """The ``XPlane`` message class (``ImportError`` when ``protobuf`` is not installed)."""
    return _classes()["XPlane"]


def xspace_class() -> Any:
    """The ``XSpace`` message class (tests write synthetic files with it)."""
    return _classes()["XSpace"]


__all__ = ["PACKAGE", "xplane_class", "xspace_class"]
