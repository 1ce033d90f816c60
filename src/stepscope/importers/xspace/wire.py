"""Reading an XSpace file one plane at a time, and telling one from other files by content.

An XSpace message is a sequence of top-level fields (protobuf wire format): each plane is field
1, a length-delimited ``XPlane``; errors, warnings and host names are fields 2 to 4. Rather than
decoding the whole message (every plane of every device at once), ``read_planes`` walks those
top-level fields itself and decodes one ``XPlane`` at a time, from a plain or gzip file (JAX
writes both), so memory holds one plane's messages, not the file's.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from stepscope.errors import DamagedFileError, TraceFormatError
from stepscope.importers.kineto.trace_file import GZIP_MAGIC

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
PLANE_PREFIXES = (b"/host:", b"/device:", b"Task Environment", b"/custom:", b"/task_env")


@dataclass
class SpaceInfo:
    """The XSpace's own fields besides planes (filled while the planes are read)."""

    hostnames: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    planes: int = 0
    bytes_read: int = 0


def _varint(data: bytes | bytearray, at: int) -> tuple[int, int] | None:
    """(value, next position) of the varint at ``at``, None when it runs past the data."""
    shift = value = 0
    while at < len(data) and shift < 70:
        b = data[at]
        value |= (b & 0x7F) << shift
        at += 1
        if not b & 0x80:
            return value, at
        shift += 7
    return None


def looks_like_xspace(head: bytes) -> bool:
    """Whether ``head`` (the first bytes of a file's decompressed content) starts an XSpace:
    field 1 (a plane) whose own first fields are an optional id and a plane name such as
    ``/host:CPU``, ``/device:GPU:0`` or ``Task Environment``; or field 4 (host names) first."""
    if not head or head[0] not in (0x0A, 0x22):
        return False
    got = _varint(head, 1)
    if got is None:
        return False
    size, at = got
    if head[0] == 0x22:  # an XSpace with no planes before its host names: a short printable name
        return 0 < size < 256 and all(32 <= b < 127 for b in head[at:at + size])
    if at < len(head) and head[at] == 0x08:  # XPlane.id
        got = _varint(head, at + 1)
        if got is None:
            return False
        at = got[1]
    if at >= len(head) or head[at] != 0x12:  # XPlane.name
        return False
    got = _varint(head, at + 1)
    if got is None:
        return False
    n, at = got
    return head[at:at + n].startswith(PLANE_PREFIXES) or (
        0 < n < 256 and all(32 <= b < 127 for b in head[at:at + n]) and n <= size)


def _open(path: Path) -> IO[bytes]:
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic == GZIP_MAGIC[:2]:
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def _read_varint(fh: IO[bytes], name: str, first: bool = False) -> int | None:
    shift = value = 0
    while True:
        b = fh.read(1)
        if not b:
            if first and shift == 0:
                return None  # a clean end of the message
            raise DamagedFileError(name, "truncated XSpace file (ends inside a field)")
        value |= (b[0] & 0x7F) << shift
        if not b[0] & 0x80:
            return value
        shift += 7
        if shift >= 70:
            raise DamagedFileError(name, "not a valid XSpace protobuf (a malformed varint)")


def _exact(fh: IO[bytes], n: int, name: str) -> bytes:
    data = fh.read(n)
    if len(data) != n:
        raise DamagedFileError(name, "truncated XSpace file (the download or copy is "
                                     "incomplete)")
    return data


def read_planes(path: Path, info: SpaceInfo, decode: Any) -> Iterator[Any]:
    """The planes of the XSpace at ``path``, decoded one at a time by ``decode`` (a function of
    the plane's bytes: ``XPlane.FromString``); ``info`` gets the space's other fields.
    Raises ``DamagedFileError`` for a truncated or malformed file."""
    name = str(path)
    try:
        fh = _open(path)
    except OSError as exc:
        raise TraceFormatError(name, f"cannot read ({exc.strerror or exc})") from None
    with fh:
        try:
            while True:
                tag = _read_varint(fh, name, first=True)
                if tag is None:
                    return
                number, wire = tag >> 3, tag & 7
                if wire == _LEN:
                    size = _read_varint(fh, name) or 0
                    if size > 1 << 34:
                        raise DamagedFileError(name, "not a valid XSpace protobuf (a field of "
                                                     f"{size} bytes)")
                    data = _exact(fh, size, name)
                    info.bytes_read += size
                    if number == 1:
                        info.planes += 1
                        yield _decoded(decode, data, name, info.planes)
                    elif number in (2, 3, 4):
                        text = data.decode("utf-8", "replace")
                        (info.errors, info.warnings, info.hostnames)[number - 2].append(text)
                elif wire == _VARINT:
                    _read_varint(fh, name)
                elif wire in (_I64, _I32):
                    _exact(fh, 8 if wire == _I64 else 4, name)
                else:
                    raise DamagedFileError(name, f"not a valid XSpace protobuf (field {number} "
                                                 f"of wire type {wire})")
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise DamagedFileError(name, f"corrupt or truncated gzip file ({exc})") from None
        except OSError as exc:
            raise TraceFormatError(name, f"cannot read ({exc.strerror or exc})") from None


def _decoded(decode: Any, data: bytes, name: str, index: int) -> Any:
    from google.protobuf.message import DecodeError

    try:
        return decode(data)
    except DecodeError as exc:
        raise DamagedFileError(name, f"plane {index} is not a valid XPlane protobuf ({exc})"
                               ) from None
    except RecursionError:
        raise DamagedFileError(name, f"plane {index} is nested too deeply to be read") from None


__all__ = ["PLANE_PREFIXES", "SpaceInfo", "looks_like_xspace", "read_planes"]
