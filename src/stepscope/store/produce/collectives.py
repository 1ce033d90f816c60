"""The one place that turns NCCL/RCCL activity into ``collectives`` rows.

Every rank bundle goes through :func:`complete` before it is written
(``store.produce.assemble``), whatever made it:

* rows that already have their GPU time (``kernels`` > 0) are kept;
* rows without it (``kernels`` == 0) are linked to the rank's communication kernels: by
  ``correlation`` (the kernel that carried the row's arguments), else by ``external_id`` (the
  ``record_param_comms`` op that launched them), else, for a host-side recorder that knows
  neither, in issue order: NCCL runs one process group's calls in order on its stream, so the
  n-th call of a group is the n-th kernel of the stream paired with that group (the pairing
  that agrees best on the operation; a kernel whose name says another operation is skipped);
  calls left over keep ``kernels`` = 0;
* communication kernels no row claimed become one row each, from the kernel name alone
  (``source`` = ``kernel_name``: no sizes, no process group).

Kernel names (:func:`parse_kernel_name`): ``ncclDevKernel_AllReduce_Sum_bf16_RING_LL`` (NCCL
>= 2.19: op, reduction, type, algorithm, protocol), ``ncclKernel_AllReduce_RING_LL_Sum_float``
(older NCCL and RCCL: op, algorithm, protocol, reduction, type), ``ncclDevKernel_SendRecv``,
``ncclDevKernel_Generic`` (RCCL's one kernel for every operation: no op). NCCL runs all-to-all
as grouped send/recv, so its kernels say ``SendRecv``. Broadcast, all-gather and send/recv
kernels are byte kernels (``int8_t``): a type is taken from a name only for reductions.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.call_kinds import COMM_KERNEL
from stepscope.schema import spec
from stepscope.schema_enums import CollectiveOp, CollectiveSource
from stepscope.store.writer import conform

Op = CollectiveOp

# NCCL op names (kernel names) -> op
_KERNEL_OPS = {
    "AllReduce": Op.ALL_REDUCE, "AllGather": Op.ALL_GATHER, "ReduceScatter": Op.REDUCE_SCATTER,
    "Broadcast": Op.BROADCAST, "Reduce": Op.REDUCE, "SendRecv": Op.SEND_RECV, "Send": Op.SEND,
    "Recv": Op.RECV, "AllToAll": Op.ALL_TO_ALL, "AllToAllPivot": Op.ALL_TO_ALL,
}
_REDUCTIONS = frozenset({Op.ALL_REDUCE, Op.REDUCE_SCATTER, Op.REDUCE})
ALGORITHMS = ("COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS_TREE", "NVLS", "RING", "TREE", "PAT")
PROTOCOLS = ("LL128", "LL", "SIMPLE")
# element types in kernel names (NCCL >= 2.19 short names, older C type names) -> torch's names
_KERNEL_TYPES = {
    "f32": "Float", "float": "Float", "f16": "Half", "half": "Half", "bf16": "BFloat16",
    "__nv_bfloat16": "BFloat16", "rccl_bfloat16": "BFloat16", "f64": "Double",
    "double": "Double", "i8": "Char", "int8_t": "Char", "u8": "Byte", "uint8_t": "Byte",
    "i32": "Int", "int32_t": "Int", "u32": "UInt32", "uint32_t": "UInt32", "i64": "Long",
    "int64_t": "Long", "u64": "UInt64", "uint64_t": "UInt64", "f8e4m3": "Float8_e4m3fn",
    "f8e5m2": "Float8_e5m2",
}
# bytes per element of torch's dtype names (record_param_comms / kernel args 'dtype')
ELEMENT_BYTES = {
    "Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Char": 1, "Byte": 1, "Bool": 1,
    "Short": 2, "Int": 4, "Long": 8, "UInt16": 2, "UInt32": 4, "UInt64": 8, "ComplexHalf": 4,
    "ComplexFloat": 8, "ComplexDouble": 16, "Float8_e4m3fn": 1, "Float8_e5m2": 1,
    "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1, "QInt8": 1, "QUInt8": 1, "QInt32": 4,
}
_NCCL = re.compile(r"^(?:void\s+)?(?:nccl|rccl)(?:Dev)?Kernel(?:Debug)?_([A-Za-z0-9_]+)")
_FALLBACK_OPS = ((re.compile(r"all_?reduce", re.I), Op.ALL_REDUCE),
                 (re.compile(r"all_?gather", re.I), Op.ALL_GATHER),
                 (re.compile(r"reduce_?scatter", re.I), Op.REDUCE_SCATTER),
                 (re.compile(r"all_?to_?all", re.I), Op.ALL_TO_ALL),
                 (re.compile(r"sendrecv", re.I), Op.SEND_RECV))


@dataclass(frozen=True)
class KernelName:
    """What a communication kernel's name says (None: it does not say)."""

    op: CollectiveOp
    dtype: str | None = None
    algorithm: str | None = None
    protocol: str | None = None


def parse_kernel_name(name: str) -> KernelName | None:
    """The operation, element type, NCCL algorithm and protocol in a communication kernel's
    name; None for a kernel that is not communication (``call_kinds.COMM_KERNEL``)."""
    if not COMM_KERNEL.search(name):
        return None
    m = _NCCL.match(name.strip())
    if m is None:
        op = next((o for rx, o in _FALLBACK_OPS if rx.search(name)), Op.OTHER)
        return KernelName(op)
    body = m.group(1)
    op = Op.OTHER
    for nccl, o in sorted(_KERNEL_OPS.items(), key=lambda kv: -len(kv[0])):
        if body == nccl or body.startswith(nccl + "_"):
            op = o
            body = body[len(nccl):]
            break
    tokens = f"_{body}_"
    algo = next((a for a in ALGORITHMS if f"_{a}_" in tokens), None)
    proto = next((p for p in PROTOCOLS if f"_{p}_" in tokens), None)
    dtype = None
    if op in _REDUCTIONS:
        dtype = next((t for k, t in _KERNEL_TYPES.items() if f"_{k}_" in tokens), None)
    return KernelName(op, dtype, algo, proto)


def collective_op(name: str) -> CollectiveOp | None:
    """The operation of a torch.distributed collective name (``allreduce``, ``_allgather_base``,
    ``reduce_scatter_tensor_coalesced``, ``all_to_all_single`` ...); None for what is not a
    call (``wait``: the host waiting for one)."""
    n = name.lower().replace("_", "")
    if n in ("wait", "waitall", ""):
        return None
    for prefix, op in (("allreduce", Op.ALL_REDUCE), ("allgather", Op.ALL_GATHER),
                       ("reducescatter", Op.REDUCE_SCATTER), ("alltoall", Op.ALL_TO_ALL),
                       ("broadcast", Op.BROADCAST), ("reduce", Op.REDUCE),
                       ("sendrecv", Op.SEND_RECV), ("send", Op.SEND), ("recv", Op.RECV),
                       ("barrier", Op.BARRIER)):
        if n.startswith(prefix):
            return op
    return Op.OTHER


def message_bytes(op: CollectiveOp, dtype: str | None, in_elems: int | None,
                  out_elems: int | None) -> int | None:
    """The message size as nccl-tests counts it (the ``bytes`` column): the output of
    all-gather and recv, else the input; None when the type or the count is unknown."""
    size = ELEMENT_BYTES.get(dtype or "")
    elems = out_elems if op in (Op.ALL_GATHER, Op.RECV) else in_elems
    if size is None or elems is None:
        return None
    return elems * size


def _compatible(row_op: Any, kernel: KernelName | None) -> bool:
    """Whether a call of ``row_op`` may have run as ``kernel`` (an op-less name: any)."""
    if kernel is None or kernel.op is Op.OTHER or row_op == Op.OTHER.value:
        return True
    k = kernel.op
    if k is Op.SEND_RECV:
        return row_op in (Op.SEND.value, Op.RECV.value, Op.SEND_RECV.value, Op.ALL_TO_ALL.value)
    if row_op == Op.BARRIER.value:  # a barrier is a one-element all-reduce
        return k is Op.ALL_REDUCE
    return bool(row_op == k.value)


_KERNEL_COLUMNS = ("ts_ns", "dur_ns", "device", "stream", "correlation", "external_id", "name")
_EMPTY_KERNELS = spec("kernels").arrow_schema.empty_table().select(list(_KERNEL_COLUMNS))


def communication_kernels(kernels: pa.Table | Mapping[str, Any]) -> pa.Table:
    """The communication kernels of a ``kernels`` table (the columns :func:`complete` uses;
    a column the table lacks is null)."""
    t = kernels if isinstance(kernels, pa.Table) else pa.table(dict(kernels))
    if not t.num_rows or "name" not in t.column_names or "ts_ns" not in t.column_names:
        return _EMPTY_KERNELS
    names = t.column("name").combine_chunks()
    if not pa.types.is_dictionary(names.type):
        names = pc.dictionary_encode(names)
    flags = [bool(COMM_KERNEL.search(n or "")) for n in names.dictionary.to_pylist()] + [False]
    idx = names.indices.fill_null(len(flags) - 1).to_numpy(zero_copy_only=False)
    keep = pa.array(np.flatnonzero(np.asarray(flags, dtype=bool)[idx]))
    return pa.table({c: t.column(c).take(keep) if c in t.column_names
                     else pa.nulls(len(keep), _EMPTY_KERNELS.schema.field(c).type)
                     for c in _KERNEL_COLUMNS})


Row = dict[str, Any]
_COLUMNS = spec("collectives").column_names


def complete(collectives: pa.Table | None, kernels: pa.Table, rank: int) -> pa.Table | None:
    """One rank's ``collectives`` rows linked to its communication kernels (``kernels``: the
    rank's ``kernels`` table or :func:`communication_kernels` of it), as the module docstring
    says; None when there are neither rows nor communication kernels."""
    comm = communication_kernels(kernels)
    given = collectives.to_pylist() if collectives is not None else []
    if not given and not comm.num_rows:
        return None
    ks: list[Row] = comm.to_pylist()
    parsed = {n: parse_kernel_name(n) for n in {k["name"] for k in ks}}
    used = np.zeros(len(ks), dtype=bool)
    by_corr: defaultdict[int, list[int]] = defaultdict(list)
    by_ext: defaultdict[int, list[int]] = defaultdict(list)
    for i, k in enumerate(ks):
        if k["correlation"] is not None:
            by_corr[k["correlation"]].append(i)
        if k["external_id"] is not None:
            by_ext[k["external_id"]].append(i)
    rows = [dict(r, rank=rank) for r in given]
    for r in rows:  # rows with their GPU time already: their kernels are taken
        if (r["kernels"] or 0) > 0 and r["correlation"] is not None:
            used[by_corr.get(r["correlation"], [])] = True
        if (r["kernels"] or 0) > 1 and r["external_id"] is not None:
            used[by_ext.get(r["external_id"], [])] = True
    unplaced: list[Row] = []
    for r in rows:
        if (r["kernels"] or 0) > 0:
            continue
        if r["correlation"] is not None:
            hits = [i for i in by_corr.get(r["correlation"], []) if not used[i]]
        elif r["external_id"] is not None:
            hits = [i for i in by_ext.get(r["external_id"], []) if not used[i]]
        else:
            unplaced.append(r)
            continue
        if hits:
            _link(r, [ks[i] for i in hits], parsed)
            used[hits] = True
    if unplaced:
        _in_issue_order(unplaced, ks, parsed, used)
    for i in np.flatnonzero(~used).tolist():
        rows.append(_from_kernel(ks[i], parsed[ks[i]["name"]], rank))
    rows.sort(key=lambda r: (r["ts_ns"], r["host_ts_ns"] if r["host_ts_ns"] is not None else 0))
    return conform("collectives", {c: [r.get(c) for r in rows] for c in _COLUMNS})


def with_collectives(tables: Mapping[str, pa.Table], rank: int) -> dict[str, pa.Table]:
    """A rank's tables with its ``collectives`` completed (:func:`complete`): for a producer
    that writes a rank's tables itself (a worker of a rank-parallel import), so the assembler
    can take them as they are."""
    out = dict(tables)
    kernels = out.get("kernels")
    done = complete(out.get("collectives"),
                    kernels if kernels is not None else communication_kernels({}), rank)
    if done is not None:
        out["collectives"] = done
    return out


def _link(row: Row, hits: Sequence[Row], parsed: dict[str, KernelName | None]) -> None:
    """Fill a call's GPU side from its kernels (first start to last end)."""
    first = min(hits, key=lambda k: k["ts_ns"])
    end = max(k["ts_ns"] + (k["dur_ns"] or 0) for k in hits)
    row.update(ts_ns=first["ts_ns"], dur_ns=end - first["ts_ns"], device=first["device"],
               stream=first["stream"], correlation=first["correlation"], kernels=len(hits))
    if row.get("external_id") is None:
        row["external_id"] = first["external_id"]
    kn = parsed.get(first["name"])
    if kn is not None:
        row["algorithm"] = row.get("algorithm") or kn.algorithm
        row["protocol"] = row.get("protocol") or kn.protocol
        if row.get("dtype") is None and kn.dtype is not None:
            row["dtype"] = kn.dtype


def _from_kernel(k: Row, kn: KernelName | None, rank: int) -> Row:
    op = kn.op if kn is not None else Op.OTHER
    return {"rank": rank, "ts_ns": k["ts_ns"], "dur_ns": k["dur_ns"] or 0, "device": k["device"],
            "stream": k["stream"], "correlation": k["correlation"],
            "external_id": k["external_id"], "op": op.value, "name": k["name"],
            "dtype": kn.dtype if kn is not None else None, "kernels": 1,
            "algorithm": kn.algorithm if kn is not None else None,
            "protocol": kn.protocol if kn is not None else None, "host_ts_ns": None,
            "source": CollectiveSource.KERNEL_NAME.value}


def _may_run_nccl(row: Row) -> bool:
    """A host-side call of another backend (torch's flight recorder names them ``gloo:...``,
    ``mpi:...``) ran no GPU kernel: it is never matched to one."""
    name = str(row.get("name") or "")
    backend = name.split(":", 1)[0].lower() if ":" in name else ""
    return backend in ("", "nccl", "rccl")


# a host-side call is issued before its kernel starts; the clocks may disagree by a little
ISSUE_SLACK_NS = 50_000


def _in_issue_order(calls: list[Row], ks: Sequence[Row], parsed: dict[str, KernelName | None],
                    used: np.ndarray) -> None:
    """Host-side calls (no correlation, no external id) onto the free kernels, in the order
    they were issued. A process group's calls need not share one stream (torch runs a blocking
    collective on the current stream, an async one on the group's NCCL stream, point-to-point on
    a stream of its own), but on each stream kernels run in issue order. So each call takes,
    on the stream its (group, op) took before if that has a compatible kernel left, else on
    whichever stream starts one first, the first free compatible kernel that starts after the
    call was issued; a stream's kernels before the one taken are not offered again."""
    lanes: defaultdict[tuple[Any, Any], list[int]] = defaultdict(list)
    for i in sorted(np.flatnonzero(~used).tolist(), key=lambda i: ks[i]["ts_ns"]):
        lanes[(ks[i]["device"], ks[i]["stream"])].append(i)
    head = dict.fromkeys(lanes, 0)  # per lane, the first kernel still on offer
    sticky: dict[tuple[Any, Any], tuple[Any, Any]] = {}
    for r in sorted((c for c in calls if _may_run_nccl(c)),
                    key=lambda c: c["host_ts_ns"] if c["host_ts_ns"] is not None else c["ts_ns"]):
        issued = (r["host_ts_ns"] if r["host_ts_ns"] is not None else r["ts_ns"]) or 0
        device = r.get("device")
        offers: dict[tuple[Any, Any], int] = {}
        for key, lane in lanes.items():
            if device is not None and key[0] != device:
                continue
            j = head[key]
            while j < len(lane) and (ks[lane[j]]["ts_ns"] < issued - ISSUE_SLACK_NS
                                     or not _compatible(r["op"], parsed[ks[lane[j]]["name"]])):
                j += 1
            if j < len(lane):
                offers[key] = j
        if not offers:
            continue
        me = (r.get("pg"), r["op"])
        stuck = sticky.get(me)
        key = stuck if stuck is not None and stuck in offers else min(
            offers, key=lambda k: ks[lanes[k][offers[k]]]["ts_ns"])
        j = offers[key]
        i = lanes[key][j]
        _link(r, [ks[i]], parsed)
        used[i] = True
        head[key] = j + 1
        sticky[me] = key


__all__ = ["with_collectives", "ALGORITHMS", "ELEMENT_BYTES", "PROTOCOLS", "KernelName", "collective_op",
           "communication_kernels", "complete", "message_bytes", "parse_kernel_name"]
