"""A Kineto trace's collective calls, as ``collectives`` rows without their GPU time.

Two places hold a call's arguments (``Collective name``, ``In msg nelems``, ``Out msg nelems``,
``Group size``, ``dtype``, ``Process Group Name`` / ``Description`` / ``Ranks``, ``Seq``):

* the ``record_param_comms`` op that torch.distributed records around each call (torch 2.1+;
  older ones record it without arguments): one row, ``source`` = ``param_comms``, with the op's
  time as ``host_ts_ns`` / ``host_dur_ns`` and its ``External id``, which its kernels carry too;
* the NCCL kernel's own args (torch 2.4+): ``source`` = ``kernel_args``; with a
  ``record_param_comms`` of the same ``External id`` the two make one row (its host time, the
  kernel's arguments).

The GPU side (``ts_ns``/``dur_ns`` of the kernels, stream, algorithm) is filled by
``store.produce.collectives.complete`` when the rank is written, from the ``kernels`` table
(by ``External id``, else by the kernel's ``correlation``); a trace without arguments gets its
rows there from the kernel names. Both readers (the compiled scanner and msgspec) hand the same
events here (:func:`is_call`), so the rows do not depend on which one read a chunk.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from stepscope.importers.kineto.columns import MAX_US, us_to_ns
from stepscope.importers.kineto.events import Event
from stepscope.schema_enums import CollectiveSource
from stepscope.store.produce.collectives import collective_op, message_bytes

PARAM_COMMS = "record_param_comms"
_OP_CATEGORIES = frozenset({"cpu_op", "operator", "Operator"})
_INT64 = (-(1 << 63), (1 << 63) - 1)
_INT32 = (-(1 << 31), (1 << 31) - 1)
_RANKS = re.compile(r"^\s*\[\s*(-?\d+(?:\s*,\s*-?\d+)*)?\s*,?\s*\]\s*$")


def is_call(e: Event) -> bool:
    """A communication call's event: a kernel or a ``record_param_comms`` op with a
    ``Collective name`` arg (the compiled scanner hands back the events with that key)."""
    if getattr(e.args, "collective", None) is None:
        return False
    return e.cat == "kernel" or (e.cat in _OP_CATEGORIES and e.name == PARAM_COMMS)


def calls_of(buckets: dict[str, list[Event]]) -> list[Event]:
    """The communication calls' events of one decoded chunk (bucketed by category)."""
    return [e for cat in ("kernel", *sorted(_OP_CATEGORIES)) for e in buckets.get(cat, ())
            if is_call(e)]


_COUNT = (0, (1 << 59) - 1)  # element counts: never negative; x 8 bytes still fits an int64


def _int(v: Any, bounds: tuple[int, int] = _INT64) -> int | None:
    if isinstance(v, bool) or not isinstance(v, int):
        return None
    return v if bounds[0] <= v <= bounds[1] else None


def _str(v: Any) -> str | None:
    if isinstance(v, str):
        return v
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    return None


def _ranks(v: Any) -> list[int] | None:
    """``"[0, 1]"`` (as Kineto writes it) or a list of ints; None for anything else (a list
    Kineto shortened, a rank out of range)."""
    if isinstance(v, list):
        ranks = [_int(r, _INT32) for r in v]
    elif isinstance(v, str):
        m = _RANKS.match(v)
        if m is None:
            return None
        ranks = [_int(int(r), _INT32) for r in (m.group(1) or "").split(",") if r.strip()]
    else:
        return None
    return None if any(r is None for r in ranks) else [r for r in ranks if r is not None]


def _timed(e: Event) -> bool:
    ts, dur = e.ts, e.dur
    return (e.ph == "X" and math.isfinite(ts) and abs(ts) <= MAX_US and math.isfinite(dur)
            and 0 <= dur <= MAX_US)


def _arguments(e: Event) -> dict[str, Any] | None:
    """The call's arguments, or None when the event has no (known) collective."""
    a = e.args
    name = _str(getattr(a, "collective", None))
    op = collective_op(name) if name else None
    if name is None or op is None:
        return None
    dtype = _str(getattr(a, "dtype", None))
    in_elems = _int(getattr(a, "in_elems", None), _COUNT)
    out_elems = _int(getattr(a, "out_elems", None), _COUNT)
    seq = getattr(a, "seq", None)
    return {"op": op.value, "name": name, "pg": _str(getattr(a, "pg", None)),
            "pg_desc": _str(getattr(a, "pg_desc", None)),
            "pg_ranks": _ranks(getattr(a, "pg_ranks", None)),
            "group_size": _int(getattr(a, "group_size", None), (1, _INT32[1])), "dtype": dtype,
            "in_elems": in_elems, "out_elems": out_elems,
            "bytes": message_bytes(op, dtype, in_elems, out_elems),
            "seq": _int(seq if seq is not None else getattr(a, "seq_cap", None))}


def collective_columns(events: Sequence[Event], base_ns: int) -> dict[str, list[Any]] | None:
    """``collectives`` columns (no ``rank``) of a file's communication calls' events, in time
    order; times shifted by ``base_ns``. None when none of them names a collective."""
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for i, e in enumerate(events):
        if not _timed(e):
            continue
        args = _arguments(e)
        if args is None:
            continue
        ext = _int(e.args.external_id)
        if e.cat == "kernel":
            corr = _int(e.args.correlation)
            key = ("ext", ext) if ext is not None else ("corr", corr if corr is not None else -i)
            row = rows.get(key)
            if row is not None and row["source"] == CollectiveSource.KERNEL_ARGS.value:
                continue  # the call's second kernel: the first one's arguments stand
            if row is None:
                rows[key] = row = {"ts_ns": _ns(e.ts, base_ns), "host_ts_ns": None,
                                   "host_dur_ns": None, "external_id": ext,
                                   "correlation": corr if ext is None else None}
            row.update({k: v for k, v in args.items() if v is not None or k not in row},
                       source=CollectiveSource.KERNEL_ARGS.value)
        else:
            key = ("ext", ext) if ext is not None else ("op", i)
            host = {"host_ts_ns": _ns(e.ts, base_ns), "host_dur_ns": _ns(e.dur, 0)}
            row = rows.get(key)
            if row is not None:  # the kernel came first: its arguments, this op's host time
                row.update(host, ts_ns=host["host_ts_ns"])
                row.update({k: v for k, v in args.items() if row.get(k) is None})
                continue
            rows[key] = {"ts_ns": host["host_ts_ns"], **host, "external_id": ext,
                         "correlation": None, **args,
                         "source": CollectiveSource.PARAM_COMMS.value}
    if not rows:
        return None
    cols: dict[str, list[Any]] = {}
    # in time order: the events' order depends on how the file was read (chunks, decoder)
    for r in sorted(rows.values(), key=lambda r: (r["ts_ns"], _key(r["external_id"]),
                                                  _key(r["correlation"]))):
        r.update(dur_ns=0, kernels=0)
        for k, v in r.items():
            cols.setdefault(k, []).append(v)
    return cols


def _key(v: int | None) -> int:
    return -(1 << 64) if v is None else v


def _ns(us: float, base_ns: int) -> int:
    return int(us_to_ns(np.array([us], dtype=np.float64), base_ns)[0])


__all__ = ["PARAM_COMMS", "calls_of", "collective_columns", "is_call"]
