"""Decode a Kineto trace's events, chunk by chunk (its bytes: ``kineto.trace_file``).

Memory: decoding a whole trace at once holds every event as a Python object
(about 3x the JSON size). Large traces are therefore decoded in chunks of
``CHUNK_BYTES`` of JSON, each turned into columns before the next is decoded,
and the pages of a memory-mapped file are handed back once decoded. Peak memory
is then about the (decompressed) file, or much less for a plain file, plus the
columns. Small chunks are also faster: their objects are still in cache when
they are turned into columns.

Chunk boundaries are found without a JSON parser: in valid JSON the bytes
``}, {"<letter>`` cannot lie inside a string (the quote would end the string and
a letter cannot follow a closing quote), so they separate two objects. If that
is not a boundary between two top-level events (an array of objects inside an
event), the chunk does not decode; the reader then reports :class:`SplitFailed`
and the caller starts over with one whole-document decode. The top-level keys
before ``traceEvents`` are decoded from the head of the file, the ones after it
with the last chunk.
"""

from __future__ import annotations

import gc
import mmap
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import msgspec

import stepscope.importers.kineto.native as kineto_native
from stepscope.errors import TraceFormatError
from stepscope.importers.kineto.build import decoders
from stepscope.importers.kineto.events import (
    EVENT,
    META_TYPES,
    RAW_DOC,
    RAW_EVENTS,
    Event,
    TraceDoc,
)
from stepscope.importers.kineto.native import Scanned
from stepscope.importers.kineto.trace_file import one_line
from stepscope.store.manifest import Diagnostic

_LENIENT_SLICE = 1000  # events decoded together when some event somewhere is malformed
CHUNK_BYTES = 4 << 20  # measured: 2-4 MB chunks decode as fast as one whole decode
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[\s*')
_BOUNDARY = re.compile(rb'\}\s*,\s*(\{)\s*"[A-Za-z_]')
# msgspec raises UnicodeDecodeError, not DecodeError, for a string it decodes that is not UTF-8
_BAD_JSON = (msgspec.DecodeError, UnicodeDecodeError)


class SplitFailed(Exception):
    """The chunked decode cannot be used for this file; decode it whole."""


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


class EventReader:
    """Yields ``(index of the first event, events)`` chunks of one trace file: decoded events,
    or (``native``, a chunked read without flows) the compiled scanner's columns
    (:class:`native.Scanned`) for the chunks it can read.

    ``meta`` (the top-level keys) and ``diagnostics`` are complete once the
    iteration has finished.
    """

    def __init__(self, data: bytes | bytearray | mmap.mmap, path: str, *,
                 chunk_bytes: int = CHUNK_BYTES, flows: bool = False,
                 native: bool | None = None) -> None:
        self.data = data
        self.fast = decoders(flows)
        self.native = not flows and kineto_native.enabled(native)
        self.path = path
        self.chunk_bytes = chunk_bytes
        self.meta = TraceDoc()
        self.diagnostics: list[Diagnostic] = []
        self._bad = 0
        self._first_bad = ""
        self._dropped_in_last = 0
        self._released = 0
        self.at = 0  # bytes of the file read so far (for progress reports)
        self.skipped: list[int] = []  # file indices of events the lenient decode dropped

    def chunks(self) -> Iterator[tuple[int, list[Event] | Scanned]]:
        """Chunked decode for large files (raises :class:`SplitFailed` when the
        file cannot be split), one whole-document decode for small ones."""
        if len(self.data) < 2 * self.chunk_bytes:
            yield from self.whole()
            return
        yield from self._split()
        self._finish()

    def whole(self) -> Iterator[tuple[int, list[Event]]]:
        try:
            with gc_paused():
                doc = cast(TraceDoc, self.fast.doc.decode(self.data))
        except msgspec.ValidationError:
            doc = self._lenient(self.data, 0)
        except _BAD_JSON as exc:
            raise TraceFormatError(self.path, f"invalid JSON ({one_line(exc)})") from None
        if doc.traceEvents is None:
            raise TraceFormatError(self.path, "not a trace: a JSON object without 'traceEvents'")
        events, doc.traceEvents = doc.traceEvents, None
        self.meta = _merge(doc, TraceDoc())
        self._finish()
        yield 0, events

    def _split(self) -> Iterator[tuple[int, list[Event] | Scanned]]:
        data = self.data
        m = _EVENTS_KEY.search(data)
        if m is None:
            raise SplitFailed
        try:  # the keys before the events, as a document of their own
            head = self._decode_doc(b"".join((memoryview(data)[:m.end()], b"]}")), 0)
        except TraceFormatError:
            raise SplitFailed from None
        view = memoryview(data)
        pos, index, end = m.end(), 0, len(data)
        before = m.start() + m.group(0).rindex(b"[")  # the array's '['
        while True:
            cut = _BOUNDARY.search(data, pos + self.chunk_bytes) \
                if end - pos > 2 * self.chunk_bytes else None
            if cut is None:  # the last chunk: rebuild a document from it and the trailing keys
                del view
                last = self._scan_last(pos) if self.native else None
                if last is not None:
                    self.meta = _merge(head, last[1])
                    yield index, last[0]
                    return
                try:
                    tail = self._decode_doc(b"".join((b'{"traceEvents":[', memoryview(data)[pos:])),
                                            index)
                except TraceFormatError:
                    raise SplitFailed from None  # the whole-document decode says what is wrong
                events = tail.traceEvents or []
                tail.traceEvents = None
                self.meta = _merge(head, tail)
                yield index, events
                return
            after = data.find(b",", cut.start() + 1, cut.start(1))  # the comma after the chunk
            cols = kineto_native.scan(data, pos, cut.start() + 1, tail=False,
                                      decoder=self.fast.events) if self.native else None
            if cols is not None:
                n = cols.events
                yield index, cols
                del cols
            else:
                events = self._bracketed(view, before, pos, cut.start() + 1, after, index)
                n = len(events) + self._dropped_in_last
                yield index, events
                del events  # before the next chunk is decoded
            index += n
            before, pos = after, cut.start(1)
            self.at = pos
            self._release(pos)

    def _scan_last(self, pos: int) -> tuple[Scanned, TraceDoc] | None:
        """The last chunk through the scanner: its events up to the array's ']', then the
        keys after it as a document of their own. None (decode it with msgspec, which also
        reports what is wrong) when either part is not plain."""
        scanned = kineto_native.scan(self.data, pos, len(self.data), tail=True,
                                     decoder=self.fast.events)
        if scanned is None:
            return None
        rest = memoryview(self.data)[scanned.end:]
        try:
            with gc_paused():
                tail = cast(TraceDoc, self.fast.doc.decode(b"".join((b'{"traceEvents":[]', rest))))
        except (msgspec.ValidationError, *_BAD_JSON):
            return None
        finally:
            del rest
        if tail.traceEvents:  # a second 'traceEvents' key after the array: msgspec decides
            return None
        tail.traceEvents = None
        return scanned, tail

    def _bracketed(self, view: memoryview, before: int, start: int, stop: int, after: int,
                   index: int) -> list[Event]:
        """Decode the events in ``view[start:stop]`` as a JSON array. In a writable buffer
        the bytes at ``before`` (whitespace, the array's '[' or the comma ending the previous
        chunk) and ``after`` (the comma after the chunk) become the brackets while it is
        decoded, which saves copying the chunk (~3% of an import); else it is copied."""
        data = self.data
        if view.readonly or isinstance(data, bytes):
            return self._decode_events(b"".join((b"[", view[start:stop], b"]")), index)
        was = data[before], data[after]
        data[before], data[after] = 0x5B, 0x5D  # '[' ... ']'
        try:
            return self._decode_events(view[before:after + 1], index)
        finally:
            data[before], data[after] = was

    def _release(self, upto: int) -> None:
        """Let the kernel drop the pages of a memory-mapped file already decoded
        (they stay in the page cache; they leave this process's resident set)."""
        if isinstance(self.data, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
            end = upto // mmap.PAGESIZE * mmap.PAGESIZE
            if end > self._released:
                self.data.madvise(mmap.MADV_DONTNEED, self._released, end - self._released)
                self._released = end

    def _decode_events(self, buf: bytes | memoryview, index: int) -> list[Event]:
        self._dropped_in_last = 0
        try:
            with gc_paused():
                return cast(list[Event], self.fast.events.decode(buf))
        except msgspec.ValidationError:
            pass
        except _BAD_JSON:
            raise SplitFailed from None
        buf = bytes(buf)  # the raw events below must not refer to the (restored) buffer
        try:
            with gc_paused():
                raws = RAW_EVENTS.decode(buf)
        except _BAD_JSON:
            raise SplitFailed from None
        out = self._events_from_raw(raws, index)
        self._dropped_in_last = len(raws) - len(out)
        return out

    def _decode_doc(self, buf: bytes, index: int) -> TraceDoc:
        try:
            with gc_paused():
                return cast(TraceDoc, self.fast.doc.decode(buf))
        except msgspec.ValidationError:
            return self._lenient(buf, index)
        except _BAD_JSON:
            raise SplitFailed from None

    def _lenient(self, buf: bytes | bytearray | mmap.mmap, index: int) -> TraceDoc:
        """Decode the document part by part; drop events that do not fit ``Event``."""
        path = self.path
        try:
            with gc_paused():
                raw = RAW_DOC.decode(buf)
        except msgspec.ValidationError as exc:
            msg = one_line(exc)
            if msg.startswith("Expected `object`"):
                got = msg.split("got `", 1)[-1].split("`", 1)[0]
                raise TraceFormatError(path, f"not a trace: the top level is a JSON {got}, "
                                             "expected an object with 'traceEvents'") from None
            if "traceEvents" in msg:
                raise TraceFormatError(path, f"'traceEvents' is not a list ({msg})") from None
            raise TraceFormatError(path, f"not a trace ({msg})") from None
        except _BAD_JSON as exc:
            raise TraceFormatError(path, f"invalid JSON ({one_line(exc)})") from None
        meta: dict[str, Any] = {}
        for key, typ in META_TYPES.items():
            value = getattr(raw, key)
            if not len(value):
                continue
            try:
                meta[key] = msgspec.json.decode(value, type=typ)
            except msgspec.ValidationError as exc:
                self.diagnostics.append(Diagnostic(
                    "warning", "bad_metadata", f"top-level '{key}' ignored: {one_line(exc)}", path))
        events = None if raw.traceEvents is None else self._events_from_raw(raw.traceEvents, index)
        return TraceDoc(traceEvents=events, **meta)

    def _events_from_raw(self, raws: list[msgspec.Raw], index: int) -> list[Event]:
        """Typed events from raw ones: a slice at a time, one at a time only in
        the slices where that fails (:meth:`_one_by_one`)."""
        out: list[Event] = []
        step = _LENIENT_SLICE
        for start in range(0, len(raws), step):
            part = raws[start:start + step]
            try:
                with gc_paused():
                    out.extend(self.fast.events.decode(b"".join((b"[", b",".join(part), b"]"))))
            except (msgspec.ValidationError, *_BAD_JSON):
                out.extend(self._one_by_one(part, index + start))
        return out

    def _one_by_one(self, raws: list[msgspec.Raw], index: int) -> list[Event]:
        """Each event as its category's fast Struct, else as a generic ``Event``
        (no or an unknown category, an unknown phase); an event that fits neither
        is dropped."""
        out: list[Event] = []
        with gc_paused():
            for i, item in enumerate(raws):
                try:
                    out.append(self.fast.event.decode(item))
                    continue
                except (msgspec.ValidationError, *_BAD_JSON):
                    pass
                try:
                    out.append(EVENT.decode(item))
                except (msgspec.ValidationError, *_BAD_JSON) as exc:
                    self.skipped.append(index + i)
                    if not self._bad:
                        self._first_bad = f"event {index + i}: {one_line(exc)}".replace("`$.", "`")
                    self._bad += 1
        return out

    def _finish(self) -> None:
        if self._bad:
            self.diagnostics.append(Diagnostic(
                "warning", "bad_event",
                f"{self._bad} event(s) with fields of an unexpected type were skipped; "
                f"first: {self._first_bad}", self.path, self._bad))
            self._bad = 0


def _merge(head: TraceDoc, tail: TraceDoc) -> TraceDoc:
    """Top-level keys from before the events and after them (after wins)."""
    values = {f.name: getattr(tail, f.name) if getattr(tail, f.name) is not None
              else getattr(head, f.name) for f in msgspec.structs.fields(TraceDoc)}
    return TraceDoc(**values)


__all__ = ["CHUNK_BYTES", "EventReader", "SplitFailed", "gc_paused"]
