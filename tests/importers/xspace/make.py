"""Tiny synthetic XSpace files for tests: planes, lines, events and stats built by hand."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepscope.importers.xspace.proto import xspace_class


@dataclass(frozen=True)
class Ref:
    """A stat whose value is a reference to another stat metadata's name (``ref_value``)."""

    text: str


@dataclass
class Line:
    id: int
    name: str
    timestamp_ns: int
    events: list[tuple[str, int, int, dict[str, Any]]] = field(default_factory=list)

    def event(self, name: str, offset_ps: int, duration_ps: int, **stats: Any) -> Line:
        self.events.append((name, offset_ps, duration_ps, stats))
        return self


@dataclass
class Plane:
    name: str
    stats: dict[str, Any] = field(default_factory=dict)
    lines: list[Line] = field(default_factory=list)

    def line(self, id: int, name: str, timestamp_ns: int = 0) -> Line:
        ln = Line(id, name, timestamp_ns)
        self.lines.append(ln)
        return ln


def _set_stat(msg: Any, value: Any, ids: dict[str, int], plane: Any) -> None:
    if isinstance(value, Ref):
        msg.ref_value = _stat_id(value.text, ids, plane)
    elif isinstance(value, bool) or isinstance(value, int):
        msg.int64_value = int(value)
    elif isinstance(value, float):
        msg.double_value = value
    elif isinstance(value, bytes):
        msg.bytes_value = value
    else:
        msg.str_value = str(value)


def _stat_id(name: str, ids: dict[str, int], plane: Any) -> int:
    if name not in ids:
        ids[name] = len(ids) + 1
        plane.stat_metadata[ids[name]].id = ids[name]
        plane.stat_metadata[ids[name]].name = name
    return ids[name]


def build(planes: list[Plane], hostnames: tuple[str, ...] = ("host",)) -> bytes:
    space = xspace_class()()
    space.hostnames.extend(hostnames)
    for i, p in enumerate(planes):
        plane = space.planes.add(id=i, name=p.name)
        ids: dict[str, int] = {}
        meta: dict[str, int] = {}
        for k, v in p.stats.items():
            s = plane.stats.add(metadata_id=_stat_id(k, ids, plane))
            _set_stat(s, v, ids, plane)
        for ln in p.lines:
            line = plane.lines.add(id=ln.id, name=ln.name, timestamp_ns=ln.timestamp_ns)
            for name, off, dur, stats in ln.events:
                if name not in meta:
                    meta[name] = len(meta) + 1
                    plane.event_metadata[meta[name]].id = meta[name]
                    plane.event_metadata[meta[name]].name = name
                ev = line.events.add(metadata_id=meta[name], offset_ps=off, duration_ps=dur)
                for k, v in stats.items():
                    s = ev.stats.add(metadata_id=_stat_id(k, ids, plane))
                    _set_stat(s, v, ids, plane)
    data: bytes = space.SerializeToString()
    return data


def write(path: Path, planes: list[Plane], **kw: Any) -> Path:
    path.write_bytes(build(planes, **kw))
    return path
