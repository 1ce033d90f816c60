"""Nsight Compute's values and units as the raw page writes them, to numbers in base units.

ncu prints each metric in a unit it scales for reading (``--print-units auto``, the default):
``usecond``, ``Mbyte``, ``Gbyte/second``, ``cycle/nsecond``, ``Khz``. Values may carry thousands
separators (``1,234,567``); a metric the device or the section set does not give is ``n/a``.
"""

from __future__ import annotations

import math
import re

# SI prefixes as ncu writes them (decimal multiples; ncu's byte units are decimal too)
_PREFIX = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9,
           "T": 1e12, "P": 1e15}
_BASES = ("second", "byte", "hz", "cycle", "inst", "warp", "sector", "request", "thread",
          "block", "register", "wavefront", "transaction", "flop", "sample", "bit")
_UNIT = re.compile(r"^(n|u|m|K|k|M|G|T|P)?(" + "|".join(_BASES) + r")s?$", re.IGNORECASE)
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


_TIME = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def _scale_one(unit: str) -> tuple[float, str]:
    u = unit.strip()
    if u in _TIME:  # ncu 2025 writes durations as ns / us / ms
        return _TIME[u], "second"
    m = _UNIT.match(u)
    if m is None or (m.group(1) and u.lower() in _BASES):
        return 1.0, u
    prefix = m.group(1) or ""
    base = m.group(2).lower()
    if base == "hz" or base == "second" or base == "byte":
        return _PREFIX[prefix], base
    if prefix in ("K", "k", "M", "G", "T", "P"):
        return _PREFIX[prefix], base
    return 1.0, u


def base_unit(unit: str) -> tuple[float, str]:
    """The factor that turns a value in ``unit`` into base units, and the base unit:
    ``usecond`` -> (1e-6, "second"), ``Gbyte/second`` -> (1e9, "byte/second"),
    ``cycle/nsecond`` or ``cycle/ns`` -> (1e9, "cycle/second"), ``Ghz`` -> (1e9, "hz"); an
    unknown unit -> (1, unit)."""
    if "/" in unit:
        num, _, den = unit.partition("/")
        fn, un = _scale_one(num)
        fd, ud = _scale_one(den)
        return fn / fd, f"{un}/{ud}"
    return _scale_one(unit)


def number(text: str) -> float | None:
    """A raw-page value as a float: ``1,234.5`` -> 1234.5; ``n/a``, empty or text -> None."""
    t = text.strip().replace(",", "")
    if not t or not _NUMBER.match(t):
        return None
    v = float(t)
    return v if math.isfinite(v) else None


def dims(text: str) -> tuple[int, int, int] | None:
    """``(256, 1, 1)`` (ncu's Block Size / Grid Size) -> (256, 1, 1); anything else None."""
    parts = [p.strip() for p in text.strip().strip("()[]").split(",")]
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1]), int(parts[2])
