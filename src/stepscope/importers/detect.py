"""Which importer reads a file, decided from its content (not its name).

Only the first megabyte (decompressed) is looked at, so detection is cheap even
for multi-gigabyte traces; the importer itself validates the whole file.
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path

import msgspec

from stepscope.errors import DamagedFileError, TraceFormatError
from stepscope.importers.kineto.trace_file import GZIP_MAGIC, JAX_JSON_PROBLEM, check_trace_file
from stepscope.importers.nsys import SQLITE_MAGIC, is_parquet_export
from stepscope.importers.xspace.wire import looks_like_xspace

SNIFF_BYTES = 1 << 20
_NSYS_NAMES = (".sqlite", ".sqlite.gz", ".sqlite3", ".db")
_CHUNK = 1 << 16

_KINETO = re.compile(
    rb'"(?:schemaVersion|deviceProperties|baseTimeNanoseconds|distributedInfo)"\s*:'
    rb'|"cat"\s*:\s*"(?:cpu_op|user_annotation|gpu_user_annotation|kernel|gpu_memcpy|gpu_memset'
    rb'|cuda_runtime|cuda_driver|cuda_sync|python_function|cpu_instant_event|ac2g|Trace)"'
    rb'|"PyTorch Profiler')
_JAX = re.compile(rb'"name"\s*:\s*"/(?:host|device):|"highres-ticks"')


def sniff(path: Path, limit: int = SNIFF_BYTES) -> tuple[bytes, bool]:
    """The first ``limit`` bytes of the file's (decompressed) content and whether
    that is all of it. Raises ``TraceFormatError`` for unreadable or broken files."""
    name = str(path)
    check_trace_file(path)
    try:
        with open(path, "rb") as fh:
            first = fh.read(_CHUNK)
            if not first.startswith(GZIP_MAGIC):
                rest = fh.read(max(0, limit - len(first)))
                data = first + rest
                return data[:limit], len(data) <= limit and not fh.read(1)
            d = zlib.decompressobj(wbits=31)
            out = bytearray()
            chunk = first
            while chunk and len(out) < limit:
                try:
                    out += d.decompress(chunk, limit - len(out))
                    while d.unconsumed_tail and len(out) < limit:
                        out += d.decompress(d.unconsumed_tail, limit - len(out))
                except zlib.error as exc:
                    raise DamagedFileError(name, f"corrupt gzip file ({exc})") from None
                if d.eof or len(out) >= limit:
                    break
                chunk = fh.read(_CHUNK)
            if not d.eof and len(out) < limit:
                raise DamagedFileError(
                    name, "truncated gzip file (the download or copy is incomplete)")
            complete = d.eof and not d.unused_data
            return bytes(out), complete
    except PermissionError:
        raise TraceFormatError(name, "permission denied (cannot read the file)") from None
    except OSError as exc:
        raise TraceFormatError(name, f"cannot read ({exc.strerror or exc})") from None


def detect(path: str | Path) -> str:
    """``"kineto"`` for a PyTorch profiler trace (gzip or plain JSON with
    ``traceEvents``), ``"xspace"`` for a TensorFlow/JAX profiler XSpace, ``"nsys"`` for an
    SQLite database (an Nsight Systems export, plain or gzip) or an nsys Parquet export
    folder; otherwise ``TraceFormatError`` saying what the file is."""
    p = Path(path)
    name = str(p)
    if is_parquet_export(p):
        return "nsys"
    head, complete = sniff(p)
    if head.startswith(SQLITE_MAGIC):
        return "nsys"
    if looks_like_xspace(head):
        return "xspace"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not text:
        raise TraceFormatError(name, "empty file, not a trace")
    if name.endswith(_NSYS_NAMES):
        raise TraceFormatError(name, "not an SQLite database (an Nsight Systems export starts "
                                     "with 'SQLite format 3')")
    if name.endswith(".nsys-rep") or name.endswith(".qdrep"):
        raise TraceFormatError(name, "an Nsight Systems report: export it first "
                                     "(nsys export --type sqlite REPORT) and import the .sqlite")
    if text[:1] == b"[":
        raise TraceFormatError(name, "not a trace: the top level is a JSON array, expected an "
                                     "object with 'traceEvents' (a PyTorch profiler trace)")
    if text[:1] != b"{":
        if name.endswith((".xplane.pb", ".xplane.pb.gz")):
            raise TraceFormatError(name, "not an XSpace profile (its first field is not a plane)")
        raise TraceFormatError(name, "not a JSON trace (does not start with '{')")
    if complete:  # small enough to check the JSON itself
        try:
            msgspec.json.decode(head)
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            raise DamagedFileError(name, f"invalid JSON ({exc})") from None
        except RecursionError:
            raise DamagedFileError(name, "invalid JSON (nested too deeply to be read)") from None
    has_events = b'"traceEvents"' in head
    if _JAX.search(head) and not _KINETO.search(head):
        raise TraceFormatError(name, JAX_JSON_PROBLEM)
    if _KINETO.search(head):
        return "kineto"
    if complete:
        if not has_events:
            raise TraceFormatError(name, "not a trace: a JSON object without 'traceEvents'")
        raise TraceFormatError(name, "a Chrome trace-event file without PyTorch profiler (Kineto) "
                                     "events; stepscope imports torch.profiler traces")
    # A large file whose first megabyte has no marker: let the importer decide.
    return "kineto"
