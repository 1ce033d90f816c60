"""torch.distributed flight-recorder entries -> ``collectives`` rows (host side, no GPU times).

The flight recorder (``torch/csrc/distributed/c10d/FlightRecorder*.hpp``; the NCCL one was
``NCCLTraceBuffer`` before torch 2.6) keeps one entry per collective or point-to-point call a
process group issued, in a ring buffer. ``_dump_nccl_trace`` / ``_dump_fr_trace`` (pickle) and
their ``_json`` variants return ``{"version", "pg_config", "pg_status", "entries": [...]}``; the
fields read here are those of ``FlightRecorder::getCollectiveTrace`` (torch 2.5-2.13):

- ``record_id``, ``pg_id``, ``process_group`` = ``(name, desc)``, ``collective_seq_id``,
  ``p2p_seq_id`` (``seq_id`` before 2.4), ``op_id``, ``is_p2p`` (2.5+);
- ``profiling_name``: ``<backend>:<op>`` (``nccl:all_reduce``, ``nccl:_allgather_base``,
  ``nccl:reduce_scatter_tensor_coalesced``, ``gloo:broadcast``, ``nccl:send 0->1`` ...);
- ``time_created_ns``: ``c10::getTime()`` when the call was issued, ``CLOCK_REALTIME`` on Linux
  (the capture's own clock, ``time.time_ns``);
- ``input_sizes`` / ``output_sizes`` (one shape per tensor), ``input_dtypes`` /
  ``output_dtypes`` (``c10::toString(ScalarType)``: ``Float``, ``BFloat16`` ...);
- ``state``, ``time_discovered_*_ns``, ``duration_ms`` (with ``TORCH_NCCL_ENABLE_TIMING``):
  not used (the GPU times come from the kernels, matched at the merge).

``pg_config`` maps a process group's name to ``{"name", "desc", "ranks": "[0, 1]"}`` (global
ranks; ProcessGroupNCCL fills it, gloo leaves it empty: the capture then asks
``torch.distributed`` itself, ``capture.flight_recorder``).

Nothing here imports torch: the rows are built from plain dicts, so tests give synthetic dumps.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stepscope.schema_enums import CollectiveOp, CollectiveSource

# bytes per element of c10::toString(ScalarType) names
ELEMENT_BYTES: dict[str, int] = {
    "Byte": 1, "Char": 1, "Bool": 1, "QInt8": 1, "QUInt8": 1, "QUInt4x2": 1, "QUInt2x4": 1,
    "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1,
    "Float8_e8m0fnu": 1, "Float4_e2m1fn_x2": 1, "UInt8": 1, "Int8": 1,
    "Short": 2, "Half": 2, "BFloat16": 2, "UInt16": 2, "Int16": 2,
    "Int": 4, "Float": 4, "QInt32": 4, "ComplexHalf": 4, "UInt32": 4, "Int32": 4,
    "Long": 8, "Double": 8, "ComplexFloat": 8, "UInt64": 8, "Int64": 8,
    "ComplexDouble": 16,
}

_OPS: dict[str, CollectiveOp] = {}
for _op, _names in (
    (CollectiveOp.ALL_REDUCE, ("all_reduce", "allreduce", "all_reduce_coalesced",
                               "allreduce_coalesced", "_allreduce_sparse", "allreduce_sparse")),
    (CollectiveOp.ALL_GATHER, ("all_gather", "allgather", "_allgather_base", "_all_gather_base",
                               "all_gather_into_tensor", "all_gather_into_tensor_coalesced",
                               "allgather_into_tensor_coalesced", "allgather_coalesced",
                               "all_gather_coalesced", "_allgather_into_tensor_coalesced")),
    (CollectiveOp.REDUCE_SCATTER, ("reduce_scatter", "_reduce_scatter_base",
                                   "reduce_scatter_tensor", "reduce_scatter_tensor_coalesced",
                                   "reduce_scatter_coalesced", "_reduce_scatter_tensor_coalesced")),
    (CollectiveOp.ALL_TO_ALL, ("all_to_all", "alltoall", "alltoall_base", "all_to_all_single",
                               "all_to_allv", "alltoallv")),
    (CollectiveOp.BROADCAST, ("broadcast", "_broadcast_oop", "broadcast_coalesced")),
    (CollectiveOp.REDUCE, ("reduce", "_reduce_oop")),
    (CollectiveOp.SEND, ("send",)),
    (CollectiveOp.RECV, ("recv", "recv_any_source", "recvanysource")),
    (CollectiveOp.BARRIER, ("barrier", "all_reduce_barrier", "allreduce_barrier")),
):
    for _n in _names:
        _OPS[_n] = _op

# the message size nccl-tests counts (schema ``collectives.bytes``): the output of these, the
# input of every other operation
_OUTPUT_SIDE = frozenset({CollectiveOp.ALL_GATHER, CollectiveOp.RECV})


def op_of(profiling_name: str, is_p2p: bool = False) -> CollectiveOp:
    """The operation of a flight-recorder ``profiling_name`` (``nccl:all_reduce``,
    ``nccl:send 0->1``, ``gloo:all_gather``); a coalesced group of point-to-point calls
    (``nccl:coalesced`` with ``is_p2p``) is a send/recv pair."""
    name = profiling_name.split(":", 1)[-1].strip().split(" ", 1)[0].lower()
    op = _OPS.get(name)
    if op is not None:
        return op
    if name == "coalesced" and is_p2p:
        return CollectiveOp.SEND_RECV
    if name in ("batch_p2p", "sendrecv", "send_recv"):
        return CollectiveOp.SEND_RECV
    return CollectiveOp.OTHER


def parse_ranks(text: Any) -> list[int] | None:
    """``pg_config``'s ``ranks`` (``"[0, 1]"``, or a list); None when empty or unreadable."""
    if isinstance(text, (list, tuple)):
        items: Iterable[Any] = text
    elif isinstance(text, str):
        items = [t for t in text.strip().strip("[]").replace(",", " ").split() if t]
    else:
        return None
    try:
        ranks = [int(x) for x in items]
    except (TypeError, ValueError):
        return None
    return ranks or None


def _numel(shape: Any) -> int | None:
    if not isinstance(shape, (list, tuple)):
        return None
    try:
        return math.prod(int(d) for d in shape)
    except (TypeError, ValueError):
        return None


def _side(shapes: Any, dtypes: Any) -> tuple[int | None, int | None, str | None]:
    """(elements, bytes, first dtype) of one side (inputs or outputs) of an entry; bytes are
    unknown (None) when a tensor's dtype is missing or not in ``ELEMENT_BYTES``."""
    if not isinstance(shapes, (list, tuple)):
        return None, None, None
    types = list(dtypes) if isinstance(dtypes, (list, tuple)) else []
    elems = 0
    nbytes: int | None = 0
    for i, shape in enumerate(shapes):
        n = _numel(shape)
        if n is None:
            return None, None, None
        elems += n
        size = ELEMENT_BYTES.get(str(types[i])) if i < len(types) else None
        nbytes = None if size is None or nbytes is None else nbytes + n * size
    return elems, nbytes, (str(types[0]) if types else None)


def _int(v: Any) -> int | None:
    try:
        return None if v is None or isinstance(v, bool) else int(v)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Converted:
    """What ``collective_rows`` made: the ``collectives`` columns, and what it left out."""

    columns: dict[str, list[Any]]
    before: int  # entries created before the window
    after: int  # entries created after it
    unreadable: int  # entries without a creation time or name

    @property
    def rows(self) -> int:
        return len(self.columns["ts_ns"])


COLUMNS = ("rank", "ts_ns", "dur_ns", "device", "op", "name", "pg", "pg_desc", "pg_ranks",
           "group_size", "dtype", "in_elems", "out_elems", "bytes", "seq", "host_ts_ns",
           "host_dur_ns", "kernels", "source")


def collective_rows(entries: Iterable[Mapping[str, Any]], *, rank: int, lo: int, hi: int,
                    pg_ranks: Mapping[str, Sequence[int]] | None = None,
                    device: int | None = None, offset_ns: int = 0) -> Converted:
    """One ``collectives`` row per entry created in ``[lo, hi]`` (capture clock), in creation
    order. ``pg_ranks``: a process group's global ranks by name (``pg_config`` or
    ``torch.distributed``); ``device``: the GPU of this rank's NCCL calls (gloo rows get none);
    ``offset_ns``: added to ``time_created_ns`` to put it on the capture's clock.

    The rows have no GPU time yet: ``ts_ns`` = ``host_ts_ns``, ``dur_ns`` = 0, ``kernels`` = 0
    (the merge matches them to the rank's NCCL kernels); ``host_dur_ns`` is unknown (null)."""
    cols: dict[str, list[Any]] = {c: [] for c in COLUMNS}
    before = after = bad = 0
    ranks_by_pg = pg_ranks or {}
    kept: list[tuple[int, int, Mapping[str, Any]]] = []
    for i, e in enumerate(entries):
        created = _int(e.get("time_created_ns"))
        name = e.get("profiling_name")
        if created is None or not isinstance(name, str) or not name:
            bad += 1
            continue
        ts = created + offset_ns
        if ts < lo:
            before += 1
        elif ts > hi:
            after += 1
        else:
            kept.append((ts, i, e))
    kept.sort(key=lambda k: (k[0], k[1]))
    for ts, _, e in kept:
        name = str(e["profiling_name"])
        p2p = bool(e.get("is_p2p")) or op_of(name) in (CollectiveOp.SEND, CollectiveOp.RECV)
        op = op_of(name, p2p)
        pg = e.get("process_group")
        pg_name = str(pg[0]) if isinstance(pg, (list, tuple)) and len(pg) > 0 else None
        pg_desc = str(pg[1]) if isinstance(pg, (list, tuple)) and len(pg) > 1 else None
        members = list(ranks_by_pg.get(pg_name, ())) if pg_name is not None else []
        in_elems, in_bytes, in_type = _side(e.get("input_sizes"), e.get("input_dtypes"))
        out_elems, out_bytes, out_type = _side(e.get("output_sizes"), e.get("output_dtypes"))
        if op in _OUTPUT_SIDE:
            nbytes, dtype = out_bytes, out_type or in_type
        else:
            nbytes, dtype = in_bytes, in_type or out_type
        seq = e.get("p2p_seq_id") if p2p else e.get("collective_seq_id", e.get("seq_id"))
        gpu = device if name.startswith("nccl:") else None
        for col, value in (("rank", rank), ("ts_ns", ts), ("dur_ns", 0), ("device", gpu),
                           ("op", op.value), ("name", name), ("pg", pg_name), ("pg_desc", pg_desc),
                           ("pg_ranks", members or None),
                           ("group_size", len(members) if members else None), ("dtype", dtype),
                           ("in_elems", in_elems), ("out_elems", out_elems), ("bytes", nbytes),
                           ("seq", _int(seq)), ("host_ts_ns", ts), ("host_dur_ns", None),
                           ("kernels", 0), ("source", CollectiveSource.FLIGHT_RECORDER.value)):
            cols[col].append(value)
    return Converted(columns=cols, before=before, after=after, unreadable=bad)


def merge_entries(dumps: Iterable[Sequence[Mapping[str, Any]]]) -> list[Mapping[str, Any]]:
    """The entries of several recorders' dumps (NCCL's and the generic one are two buffers on
    torch >= 2.8), each call once: an entry seen in two dumps (one recorder reached through two
    names) is kept once."""
    seen: set[tuple[Any, ...]] = set()
    out: list[Mapping[str, Any]] = []
    for entries in dumps:
        for e in entries:
            pg = e.get("process_group")
            key = (tuple(pg) if isinstance(pg, (list, tuple)) else pg, e.get("profiling_name"),
                   e.get("time_created_ns"), e.get("collective_seq_id"), e.get("p2p_seq_id"),
                   e.get("op_id"))
            if key in seen:
                continue
            seen.add(key)
            out.append(e)
    return out


def config_ranks(pg_config: Any) -> dict[str, list[int]]:
    """``pg_config`` (``{name: {"name", "desc", "ranks"}}``) as global ranks by group name."""
    out: dict[str, list[int]] = {}
    if not isinstance(pg_config, Mapping):
        return out
    for key, info in pg_config.items():
        if not isinstance(info, Mapping):
            continue
        ranks = parse_ranks(info.get("ranks"))
        name = str(info.get("name", key))
        if ranks and name:
            out[name] = ranks
    return out


__all__ = ["COLUMNS", "ELEMENT_BYTES", "Converted", "collective_rows", "config_ranks",
           "merge_entries", "op_of", "parse_ranks"]
