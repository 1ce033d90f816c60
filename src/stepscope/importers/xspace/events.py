"""One XPlane's events in plain terms: each event's line, start and duration (picoseconds, as
stored), name and stats (names resolved through the plane's stat metadata, reference values
resolved to their strings), and a small column collector the plane mappers fill."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

Stats = dict[str, Any]
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
# events beyond these are dropped (a ``time_out_of_range`` / ``duration_out_of_range``
# diagnostic): ~127 years from the profile's clock zero, as the Kineto importer allows, and a
# duration under 2^53 ns (~104 days), which the analyses' float arithmetic keeps exact
MAX_TIME_PS = 4 * 10**21
MAX_DUR_PS = 4 * 10**18


class XEvent:
    """One event: its line, start and duration (ps), name, and stats decoded on first use (most
    host events are never asked for theirs, and decoding is most of the cost of a plane)."""

    __slots__ = ("_stats", "_view", "dur_ps", "line_id", "line_name", "meta_stats", "name",
                 "raw", "start_ps", "display_name")

    def __init__(self, view: PlaneView, line_id: int, line_name: str, start_ps: int,
                 dur_ps: int, name: str, display_name: str, meta_stats: Stats, raw: Any) -> None:
        self._view, self.line_id, self.line_name = view, line_id, line_name
        self.start_ps, self.dur_ps, self.name, self.display_name = start_ps, dur_ps, name, \
            display_name
        self.meta_stats, self.raw = meta_stats, raw
        self._stats: Stats | None = None

    @property
    def stats(self) -> Stats:
        """The event metadata's stats, overridden by the event's own."""
        if self._stats is None:
            own = self._view.stats(self.raw.stats) if len(self.raw.stats) else {}
            self._stats = {**self.meta_stats, **own} if self.meta_stats else own
        return self._stats


class PlaneView:
    """The stat and event metadata of one ``XPlane`` message, for reading its events."""

    def __init__(self, plane: Any) -> None:
        self.plane = plane
        self.name: str = plane.name
        self.stat_names: dict[int, str] = {k: v.name for k, v in plane.stat_metadata.items()}
        self._meta: dict[int, tuple[str, str, Stats]] = {}
        self.dropped: dict[str, int] = {}  # reason -> events left out

    def value(self, stat: Any) -> Any:
        which = stat.WhichOneof("value")
        if which is None:
            return None
        v = getattr(stat, which)
        if which == "ref_value":
            return self.stat_names.get(v, "")
        return v

    def stats(self, stats: Any) -> Stats:
        return {self.stat_names.get(s.metadata_id, str(s.metadata_id)): self.value(s)
                for s in stats}

    def plane_stats(self) -> Stats:
        return self.stats(self.plane.stats)

    def _metadata(self, mid: int) -> tuple[str, str, Stats]:
        got = self._meta.get(mid)
        if got is None:
            m = self.plane.event_metadata.get(mid)
            got = ("", "", {}) if m is None else (m.name, m.display_name, self.stats(m.stats))
            self._meta[mid] = got
        return got

    def lines(self) -> Iterator[Any]:
        return iter(self.plane.lines)

    def events(self, line: Any) -> Iterator[XEvent]:
        base = line.timestamp_ns * 1000
        lname = line.display_name or line.name
        for e in line.events:
            start, dur = base + e.offset_ps, e.duration_ps
            if not -MAX_TIME_PS <= start <= MAX_TIME_PS:
                self.dropped["time_out_of_range"] = self.dropped.get("time_out_of_range", 0) + 1
                continue
            if not 0 <= dur <= MAX_DUR_PS:
                self.dropped["duration_out_of_range"] = \
                    self.dropped.get("duration_out_of_range", 0) + 1
                continue
            name, display, mstats = self._metadata(e.metadata_id)
            yield XEvent(self, line.id, lname, start, dur, name, display, mstats, e)


class Collected:
    """Rows of the run tables as column lists, table by table (one per import: no shared
    state). The first row of a table fixes its columns; later rows give the same keys."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[str, list[Any]]] = {}

    def add(self, table: str, **row: Any) -> None:
        cols = self.tables.get(table)
        if cols is None:
            self.tables[table] = {k: [v] for k, v in row.items()}
            return
        for k, col in cols.items():
            col.append(row.get(k))

    def rows(self, table: str) -> int:
        cols = self.tables.get(table)
        return len(next(iter(cols.values()))) if cols else 0


def int_or_none(v: Any, lo: int = I64_MIN, hi: int = I64_MAX) -> int | None:
    """An integer stat (XStat int64/uint64, or digits in a string) within ``lo..hi`` (int64 by
    default: what the tables hold), else None."""
    out: int | None = None
    if isinstance(v, bool | int):
        out = int(v)
    elif isinstance(v, float) and v.is_integer():
        out = int(v)
    elif isinstance(v, str | bytes):
        try:
            out = int(v)
        except ValueError:
            return None
    return out if out is not None and lo <= out <= hi else None


def positive_i32(v: Any) -> int | None:
    """A count that fits the tables' int32 columns (grid, block, device ...), else None."""
    return int_or_none(v, 0, (1 << 31) - 1)


def key_values(text: Any) -> dict[str, str]:
    """``"regs:16 static_shared:0 grid:2048,1,1"`` -> ``{"regs": "16", ...}`` (the form of the
    ``kernel_details`` and ``memcpy_details`` stats)."""
    if not isinstance(text, str):
        return {}
    out = {}
    for part in text.split():
        k, sep, v = part.partition(":")
        if sep:
            out[k] = v
    return out


__all__ = ["MAX_DUR_PS", "MAX_TIME_PS", "Collected", "PlaneView", "Stats", "XEvent", "int_or_none",
           "key_values", "positive_i32"]
