"""Read a Kineto trace file's bytes: gzip is detected by content and decompressed into memory,
plain files are memory-mapped (``EventReader`` then decodes them chunk by chunk).

The decompression uses ISA-L (``isal``) or zlib-ng (``zlib-ng``) when one is installed
(``pip install 'stepscope[fast]'``), else the standard library's zlib: the same bytes, faster
(docs/benchmarks.md, "Faster gzip").
"""

from __future__ import annotations

import importlib
import mmap
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from stepscope.errors import TraceFormatError
from stepscope.progress import report as say_progress

GZIP_MAGIC = b"\x1f\x8b"
_GUNZIP_PIECE = 4 << 20


@dataclass(frozen=True)
class Loaded:
    """A trace file's bytes (or a read-only map of them) and its uncompressed size."""

    data: bytes | bytearray | mmap.mmap
    size: int
    compressed: bool

    def close(self) -> None:
        if isinstance(self.data, mmap.mmap):
            try:
                self.data.close()
            except BufferError:
                # a view of the map is still referenced somewhere (in a live capture: a frame the
                # stack sampler holds for a moment keeps the reader's locals alive); the map is
                # unmapped when the last view goes
                pass


def one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# zlib-compatible modules, fastest first: (module, what to call it)
INFLATERS = (("isal.isal_zlib", "isal"), ("zlib_ng.zlib_ng", "zlib-ng"))


def inflater(names: tuple[tuple[str, str], ...] = INFLATERS) -> tuple[ModuleType, str]:
    """The fastest zlib-compatible module installed, and its name; the standard library's
    ``zlib`` when none of ``names`` is."""
    for module, name in names:
        try:
            return importlib.import_module(module), name
        except ImportError:
            continue
    return zlib, "zlib"


def gunzip(raw: bytes, inflate: ModuleType | None = None, what: str = "") -> bytearray:
    """Decompress (possibly multi-member) gzip data piece by piece into one
    growing buffer (``gzip.decompress`` peaks at twice the output: its pieces
    plus their joined copy; large buffers grow in place with mremap), with ``inflate``
    (a zlib-compatible module; default: :func:`inflater`'s). A corrupt stream raises
    ``zlib.error`` whichever module read it. ``what``: the progress reported, in compressed
    bytes read (``stepscope.progress``; a 1 GB trace takes seconds)."""
    mod = inflate if inflate is not None else inflater()[0]
    try:
        return _gunzip(raw, mod, what)
    except mod.error as exc:
        if mod is zlib:
            raise
        raise zlib.error(str(exc)) from None


def _gunzip(raw: bytes, mod: ModuleType, what: str) -> bytearray:
    out = bytearray()
    rest: bytes | memoryview = memoryview(raw)
    while len(rest):
        d = mod.decompressobj(wbits=31)
        buf: bytes | memoryview = rest
        while not d.eof:
            piece = d.decompress(buf, _GUNZIP_PIECE)
            buf = d.unconsumed_tail
            if not piece and not buf:
                break
            out += piece
            if what:
                say_progress(what, len(raw) - len(buf), len(raw))
        if not d.eof:
            raise EOFError("compressed data ended before the end-of-stream marker")
        rest = d.unused_data.lstrip(b"\0")  # members may be followed by zero padding
    return out


def check_trace_file(path: Path) -> None:
    """Refuse, naming the file, what cannot be read as a trace: a missing path, a folder, or
    something other than a regular file (reading a pipe with no writer would wait for ever)."""
    name = str(path)
    if not path.exists():
        raise TraceFormatError(name, "no such file")
    if path.is_dir():
        raise TraceFormatError(name, "is a directory, not a trace file")
    if not path.is_file():
        raise TraceFormatError(name, "not a regular file (a pipe or a device); save the trace "
                                     "to a file first")


def load_bytes(path: Path) -> Loaded:
    """Read ``path``: gzip is detected by content and decompressed into memory,
    plain files are memory-mapped. Raises ``TraceFormatError`` naming the file."""
    name = str(path)
    check_trace_file(path)
    try:
        with open(path, "rb") as fh:
            if fh.read(2) == GZIP_MAGIC:
                fh.seek(0)
                raw = fh.read()
                try:
                    data = gunzip(raw, what=f"decompressing {path.name}")
                except EOFError:
                    raise TraceFormatError(
                        name, "truncated gzip file (the download or copy is incomplete)") from None
                except (OSError, zlib.error) as exc:
                    raise TraceFormatError(name, f"corrupt gzip file ({one_line(exc)})") from None
                del raw
                if not data:
                    raise TraceFormatError(name, "empty file, not a trace")
                return Loaded(data, len(data), True)
            size = os.fstat(fh.fileno()).st_size
            if size == 0:
                raise TraceFormatError(name, "empty file, not a trace")
            # copy-on-write: the reader brackets each chunk in place (EventReader._bracketed)
            return Loaded(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY), size, False)
    except PermissionError:
        raise TraceFormatError(name, "permission denied (cannot read the file)") from None
    except OSError as exc:
        raise TraceFormatError(name, f"cannot read ({exc.strerror or one_line(exc)})") from None


__all__ = ["GZIP_MAGIC", "JAX_JSON_PROBLEM", "Loaded", "check_trace_file", "gunzip", "load_bytes", "one_line"]


# what a JAX/TensorFlow Chrome trace-event export (``*.trace.json.gz``) is told: its profile
# is the XSpace the profiler wrote beside it, which ``importers.xspace`` reads
JAX_JSON_PROBLEM = ("a JAX/TensorFlow trace-event export, not a PyTorch profiler trace; import "
                    "the profile it was made from instead: the .xplane.pb next to it "
                    "(stepscope import plugins/profile/<run>/)")
