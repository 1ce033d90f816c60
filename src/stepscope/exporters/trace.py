"""A run as a Chrome trace-event JSON timeline (Perfetto UI, chrome://tracing).

Layout (see ``docs/export.md``):

* one process per rank and host process: its threads (names from ``threads``) carry framework
  ops (``cpu_ops``), annotations (nesting as recorded) and CUDA API calls (``api_calls``); two
  extra tracks hold the rank's ``steps`` and its ``input_waits``;
* one process per GPU per rank: one thread per stream with kernels, copies and memsets, one
  track per stream for GPU-projected annotations, and counters (``samples`` per device, the
  allocator's ``memory_events`` totals);
* flow arrows (``ph`` ``s``/``f``, ``bp: "e"``) from each API call to the GPU work it started,
  matched by ``(rank, correlation)``, one arrow (one id) per GPU activity.

Timestamps are microseconds with 3 decimals (exact nanoseconds) from the run's first event;
``otherData`` records where that is on the run's clock.

Speed: events are rendered columnar, a window of ~128k events at a time, by Arrow's string
kernels: no Python object per event. Each distinct name is JSON-encoded once by msgspec (all
escaping is the encoder's). Within a window events are ordered by (ts, longest first) so that a
parent written with ``X`` comes before a child that starts at the same instant: viewers that
keep the file order for equal timestamps then nest them as recorded.

The export is four modules: this one plans and writes; :mod:`.trace_layout` assigns trace
processes and tracks; :mod:`.trace_sources` turns each table into an event source;
:mod:`.json_columns` renders JSON text column-wise.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import msgspec
import numpy as np
import pyarrow as pa

from stepscope._version import __version__
from stepscope.analysis.graph import rank_graph
from stepscope.exporters.json_columns import by_time
from stepscope.exporters.trace_layout import Layout
from stepscope.exporters.trace_sources import (
    counter_sources,
    flow_sources,
    gpu_sources,
    host_sources,
)
from stepscope.progress import report as say_progress
from stepscope.store.output import write_output
from stepscope.store.run import Run

TRACE_SCHEMA = "stepscope.trace/1"
WINDOW_EVENTS = 1 << 17
GZIP_LEVEL = 1  # zlib level: on these traces 1 is ~25% faster than 3 for ~9% more bytes


@dataclass(frozen=True)
class TraceStats:
    """What an export wrote: events per ``ph``, flow pairs, bytes (uncompressed)."""

    events: int
    by_phase: dict[str, int]
    flows: int
    bytes: int
    origin_ns: int


def _payload(arr: pa.Array) -> memoryview:
    """The UTF-8 bytes of a string array's values, back to back (no copy)."""
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32, count=len(arr) + 1,
                            offset=arr.offset * 4)
    return memoryview(arr.buffers()[2])[offsets[0]:offsets[-1]]


class TraceExport:
    """A planned export: tracks assigned, sources sorted; ``chunks()`` renders the JSON."""

    def __init__(self, run: Run, *, window: int = WINDOW_EVENTS) -> None:
        self.run = run
        self.window = max(1, window)
        lay = self.layout = Layout(run)
        gpu, tables, lanes = gpu_sources(run, lay)
        api = by_time(rank_graph(run, None).table("api_calls"))
        api_lane = lay.rows([api["rank"], api["pid"], api["tid"]], lay.host_thread)
        host = host_sources(run, lay, api, api_lane)
        flows = flow_sources(api, api_lane, tables, lanes)
        self.sources = [s for s in host + gpu + flows + counter_sources(run, lay) if len(s.ts)]
        self.flows = len(flows[0].ts)
        self.origin_ns = min((int(s.ts[0]) for s in self.sources), default=0)
        self.metadata = lay.metadata()
        by_phase: dict[str, int] = {"M": len(self.metadata)}
        for s in self.sources:
            by_phase[s.phase] = by_phase.get(s.phase, 0) + len(s.ts)
        self.by_phase = by_phase

    def other_data(self) -> dict[str, Any]:
        m = self.run.manifest
        return {"schema": TRACE_SCHEMA, "run": str(self.run.path), "source": m.source.kind,
                "tool": m.source.tool, "clock": m.clock, "clock_offset_ns": m.clock_offset_ns,
                "origin_ns": self.origin_ns,
                "time": "ts and dur in µs; ts = (ts_ns - origin_ns) / 1000 on the run's clock; "
                        "the source's own clock = ts_ns - clock_offset_ns",
                "ranks": list(self.run.ranks), "stepscope_version": __version__}

    def _window(self, cuts: list[np.ndarray], k: int, skip_comma: bool,
                level: int | None) -> tuple[memoryview, bytes | None]:
        """Window ``k`` rendered (events of every source by ts, longest first, prio), and
        deflated when ``level`` is set: both run on a worker thread."""
        parts, ts, dur, prio = [], [], [], []
        for s, c in zip(self.sources, cuts):
            lo, hi = int(c[k]), int(c[k + 1])
            if hi > lo:
                parts.append(s.render(lo, hi, self.origin_ns))
                ts.append(s.ts[lo:hi])
                dur.append(s.dur[lo:hi])
                prio.append(np.full(hi - lo, s.prio, np.int8))
        order = np.lexsort((np.concatenate(prio), -np.concatenate(dur), np.concatenate(ts)))
        raw = _payload(pa.concat_arrays(parts).take(pa.array(order)))
        raw = raw[1:] if skip_comma else raw  # the first event of the array has no comma
        return raw, _deflate(raw, level)

    def pieces(self, level: int | None = None, *,
               threads: int | None = None) -> Iterator[tuple[memoryview | bytes, bytes | None]]:
        """The JSON in order, as (raw, raw deflated at ``level`` or None). Windows are
        rendered and deflated ahead on worker threads (Arrow's kernels and zlib release
        the GIL), so that work overlaps the writing."""
        meta = b",\n".join(msgspec.json.encode(e) for e in self.metadata)
        head = (b'{"displayTimeUnit":"ns","otherData":' + msgspec.json.encode(self.other_data())
                + b',"traceEvents":[\n' + meta)
        yield head, _deflate(head, level)
        if self.sources:
            all_ts = np.sort(np.concatenate([s.ts for s in self.sources]))
            bounds = np.unique(all_ts[:: self.window])
            cuts = [np.append(np.searchsorted(s.ts, bounds, "left"), len(s.ts))
                    for s in self.sources]
            workers = max(1, threads if threads is not None else min(4, os.cpu_count() or 1))
            what = "writing the timeline"  # windows written of all (stepscope.progress)
            with ThreadPoolExecutor(max_workers=workers) as pool:
                ahead: deque[Future[tuple[memoryview, bytes | None]]] = deque()
                for k in range(len(bounds)):
                    skip = k == 0 and not self.metadata
                    ahead.append(pool.submit(self._window, cuts, k, skip, level))
                    if len(ahead) > workers:
                        yield ahead.popleft().result()
                        say_progress(what, k + 1 - len(ahead), len(bounds))
                while ahead:
                    yield ahead.popleft().result()
                say_progress(what, len(bounds), len(bounds))
        tail = b"\n]}\n"
        yield tail, _deflate(tail, level)

    def chunks(self) -> Iterator[bytes | memoryview]:
        """The JSON, in order, as byte chunks."""
        for raw, _ in self.pieces():
            yield raw

    def _stats(self, nbytes: int) -> TraceStats:
        return TraceStats(events=sum(self.by_phase.values()), by_phase=dict(self.by_phase),
                          flows=self.flows, bytes=nbytes, origin_ns=self.origin_ns)

    def write(self, fp: IO[bytes]) -> TraceStats:
        """Write the JSON into a binary stream."""
        n = 0
        for raw, _ in self.pieces():
            fp.write(raw)
            n += len(raw)
        return self._stats(n)

    def write_gzip(self, fp: IO[bytes], level: int = GZIP_LEVEL) -> TraceStats:
        """Write one gzip member: windows deflated in parallel, each ended with a sync flush,
        then an empty final block (as pigz does), CRC-32 and size in the trailer."""
        fp.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff")  # deflate, mtime 0, OS unknown
        crc = n = 0
        for raw, packed in self.pieces(level):
            crc = zlib.crc32(raw, crc)
            n += len(raw)
            fp.write(packed or b"")
        fp.write(zlib.compressobj(level, zlib.DEFLATED, -15).flush(zlib.Z_FINISH))
        fp.write(struct.pack("<II", crc & 0xFFFFFFFF, n & 0xFFFFFFFF))
        return self._stats(n)


def _deflate(raw: memoryview | bytes, level: int | None) -> bytes | None:
    """Raw deflate of one piece, byte-aligned by a sync flush so pieces concatenate."""
    if level is None:
        return None
    c = zlib.compressobj(level, zlib.DEFLATED, -15)
    return c.compress(raw) + c.flush(zlib.Z_SYNC_FLUSH)


def write_trace(run: Run, fp: IO[bytes]) -> TraceStats:
    """Write ``run`` as trace-event JSON into a binary stream."""
    return TraceExport(run).write(fp)


def trace_json(run: Run) -> bytes:
    """The whole trace in memory (tests, small runs)."""
    import io

    buf = io.BytesIO()
    write_trace(run, buf)
    return buf.getvalue()


def export_trace(run: Run, path: str | os.PathLike[str], *,
                 gzip_level: int = GZIP_LEVEL) -> TraceStats:
    """Write ``run`` to ``path`` (gzip when it ends in ``.gz``), atomically: a temporary
    sibling renamed into place, so a failed export leaves no partial file (``store.output``:
    the umask's mode, a symbolic link followed, not replaced)."""
    out = Path(path)
    export = TraceExport(run)  # plan first: a bad run fails before anything is created
    if out.name.endswith(".gz"):
        return write_output(out, lambda raw: export.write_gzip(raw, gzip_level))
    return write_output(out, export.write)
