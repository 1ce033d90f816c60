"""Import an XSpace (``*.xplane.pb``, ``*.xplane.pb.gz``) into the run tables, as one rank.

One file is one host process of a JAX or TensorFlow program (``jax.profiler.trace`` or the TF
Profiler write one per host: ``plugins/profile/<run>/<host>.xplane.pb``); its GPU planes are
the devices of that rank. Planes are decoded one at a time (``wire``): the host plane
(``host``), each GPU plane (``device``), ``/host:metadata`` (versions) and ``Task Environment``
(the profile's start time). Times in the file are picoseconds on lines that count nanoseconds
from a base; JAX and recent TF write them relative to the profile's start, which the
``Task Environment`` plane gives in Unix nanoseconds: that start is the run's clock offset.

TPU planes (``/device:TPU:N``) are refused: stepscope's analyses are built on GPU kernels,
copies and the CUDA/HIP calls that launch them, which a TPU profile does not have.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from stepscope.call_kinds import classify_api
from stepscope.errors import TraceFormatError
from stepscope.importers.xspace.device import DevicePlane, device_of
from stepscope.importers.xspace.events import Collected, PlaneView, int_or_none
from stepscope.importers.xspace.host import HostPlane, framework_of, is_api_name
from stepscope.importers.xspace.wire import SpaceInfo, read_planes
from stepscope.schema_enums import ApiDomain, ApiKind, SourceKind, StepSource
from stepscope.store.manifest import Diagnostic, RankInfo
from stepscope.store.produce.bundle import RankBundle
from stepscope.store.produce.devices import device_columns, record_devices
from stepscope.store.produce.nesting import nest
from stepscope.store.writer import conform

RELATIVE_BEFORE_NS = 10**17  # line times below this (1973) count from the profile's start
MAX_START_NS = 1 << 62  # with times up to events.MAX_TIME_PS added, still within int64
_PAREN = re.compile(r"\s*\(.*\)$")
_HOST_TABLES = ("api_calls", "cpu_ops", "input_waits")
_DEVICE_TABLES = ("kernels", "memcpy", "memset")


def _decoder() -> Any:
    try:
        from stepscope.importers.xspace.proto import xplane_class
        return xplane_class().FromString
    except ImportError:
        return None


def parse_xspace(path: str | Path, *, default_rank: int) -> RankBundle:
    """Read one XSpace file as one rank's bundle (its rank: ``default_rank``, the file's place
    in the set: XSpace does not record one). Raises ``TraceFormatError`` when the file cannot
    be used (``DamagedFileError`` when it is truncated or malformed)."""
    p = Path(path)
    name = str(p)
    decode = _decoder()
    if decode is None:
        raise TraceFormatError(name, "an XSpace profile needs the protobuf package: "
                                     "pip install 'stepscope[xspace]'")
    info = SpaceInfo()
    out = Collected()
    devices: list[dict[str, Any]] = []
    device_steps: list[tuple[int, list[tuple[int, int, int, str]]]] = []
    host_steps: list[tuple[int, int, int, str]] = []
    hints: set[str] = set()
    meta: dict[str, Any] = {}
    env: dict[str, Any] = {}
    planes: list[str] = []
    tpu = ignored = host_events = 0
    host_pid: int | None = None
    line_ts: list[int] = []
    dropped: dict[str, int] = {}
    for plane in read_planes(p, info, decode):
        view = PlaneView(plane)
        planes.append(view.name)
        line_ts += [int(line.timestamp_ns) for line in plane.lines[:1]]
        dev = device_of(view.name)
        if dev is not None:
            dp = DevicePlane(view, dev, out)
            devices.append(dp.read())
            if dp.steps:
                device_steps.append((dev, dp.steps))
        elif view.name.startswith("/device:TPU"):
            tpu += 1
        elif view.name == "/host:metadata":
            meta = view.plane_stats()
        elif view.name == "Task Environment":
            env = view.plane_stats()
        elif view.name.startswith("/host:CPU"):
            stats = view.plane_stats()
            host_pid = int_or_none(stats.get("process_id")) or int_or_none(meta.get("process_id"))
            hp = HostPlane(view, host_pid, out)
            hp.read()
            host_steps += hp.steps
            hints |= hp.hints
            host_events += hp.events
        else:
            ignored += 1
        for reason, n in view.dropped.items():
            dropped[reason] = dropped.get(reason, 0) + n
        del plane, view  # one plane's messages in memory at a time
    if host_pid is None:
        host_pid = int_or_none(meta.get("process_id"))
    gpu = [r["device"] for r in devices]
    if tpu and not any(out.rows(t) for t in _DEVICE_TABLES):
        raise TraceFormatError(name, f"a TPU profile ({tpu} /device:TPU planes): stepscope "
                                     "imports GPU profiles (kernels, copies and their launches)")
    if not planes:
        raise TraceFormatError(name, "an XSpace with no planes (the profile recorded nothing)")
    start = int_or_none(env.get("profile_start_time"))
    if start is not None and not 0 <= start <= MAX_START_NS:
        raise TraceFormatError(name, f"profile_start_time {start} is out of range "
                                     f"(0 to {MAX_START_NS})")
    relative = start is not None and all(t < RELATIVE_BEFORE_NS for t in line_ts)
    offset = start if relative and start is not None else 0
    framework = framework_of(meta, hints)
    vendor = next((r["vendor"] for r in devices), "unknown")
    diags = _diagnostics(name, info, tpu, ignored, out)
    for reason, n in sorted(dropped.items()):
        what = "start time" if reason == "time_out_of_range" else "duration"
        diags.append(Diagnostic("warning", reason, f"{n} event(s) with a {what} out of range "
                                "were dropped", name, n))
    host = info.hostnames[0] if info.hostnames else ""
    tables = _tables(out, devices, host_steps, device_steps, offset, vendor, host)
    rank = default_rank
    details: dict[str, Any] = {
        "file": name, "format": "xspace", "planes": planes, "hostnames": info.hostnames,
        "framework": framework, "versions": {k: v for k, v in meta.items()
                                             if k.endswith("_version")},
        "host_events": host_events, "gpu_planes": len(gpu), "tpu_planes": tpu,
        "profile_start_ns": start, "relative_times": relative, "vendor": vendor,
        "rank_source": "file_order",
    }
    return RankBundle(
        kind=SourceKind.XSPACE, rank=RankInfo(rank=rank, host=host, pid=host_pid, file=name),
        tables={k: _conformed(k, v, rank) for k, v in tables.items()},
        diagnostics=tuple(diags), tool=_tool(framework, meta), clock_offset_ns=offset,
        details=details)


def _tool(framework: str, meta: Mapping[str, Any]) -> str:
    what = {"jax": "JAX profiler", "tensorflow": "TensorFlow Profiler"}.get(
        framework, "TensorFlow/JAX profiler")
    parts = [f"{what} (XSpace)"]
    if meta.get("jax_version"):
        parts.append(f"JAX {meta['jax_version']}")
    cuda = meta.get("cuda_runtime_version") or meta.get("cuda_version")
    if cuda:
        parts.append(f"CUDA runtime {cuda}")
    return ", ".join(parts)


def _diagnostics(name: str, info: SpaceInfo, tpu: int, ignored: int,
                 out: Collected) -> list[Diagnostic]:
    diags = []
    for text in info.errors[:5]:
        diags.append(Diagnostic("warning", "profiler_error", f"the profiler reported: {text}",
                                name))
    if tpu:
        diags.append(Diagnostic("warning", "device_events_skipped", f"{tpu} TPU plane(s) were "
                                "not imported: stepscope reads GPU activity", name, tpu))
    if not any(out.rows(t) for t in _DEVICE_TABLES):
        diags.append(Diagnostic("warning", "no_gpu_activity", "the profile has no GPU kernels "
                                "or copies (a host-only or CPU profile)", name))
    return diags


def _launch_names(api: dict[str, list[Any]], copies: set[int], vendor: str) -> None:
    """XLA and TF name an API event after what it launched (the kernel, ``MemcpyH2D``): call it
    the call it is. Such an event is a copy when its correlation matches a copy or its name
    says so, a memset by its name, else a kernel launch (also those a CUDA graph captured,
    which run no kernel of their own: XLA's command buffers)."""
    amd = vendor == "amd"
    launch, copy, memset = (("hipLaunchKernel", "hipMemcpyAsync", "hipMemsetAsync") if amd
                            else ("cuLaunchKernel", "cuMemcpyAsync", "cuMemsetAsync"))
    names = api["name"]
    for i, (nm, corr) in enumerate(zip(names, api["correlation"])):
        if api["kind"][i] is not None:  # named by the importer (a host wait)
            continue
        if is_api_name(nm):
            names[i] = _PAREN.sub("", nm)
        elif corr in copies or nm.startswith(("Memcpy", "CopyDeviceTo", "CopyHostTo")):
            names[i] = copy
        elif nm.startswith("Memset"):
            names[i] = memset
        else:
            names[i] = launch
    api["domain"] = [ApiDomain.DRIVER.value if n.startswith("cu") and not n.startswith("cuda")
                     else ApiDomain.RUNTIME.value for n in names]
    api["kind"] = [k if k is not None else classify_api(n).value
                   for k, n in zip(api["kind"], names)]


def _outermost_waits(api: dict[str, list[Any]]) -> None:
    """Of host waits nested on one thread (``jax.block_until_ready`` of an array inside the
    pytree one), keep the outermost: one wait, counted once."""
    sync = ApiKind.SYNC.value
    waits = sorted((api["tid"][i], api["ts_ns"][i], -api["dur_ns"][i], i)
                   for i, k in enumerate(api["kind"]) if k == sync and api["correlation"][i] is None)
    drop: set[int] = set()
    last: tuple[Any, int] | None = None  # (tid, end) of the last kept wait
    for tid, ts, neg, i in waits:
        if last is not None and last[0] == tid and ts - neg <= last[1]:
            drop.add(i)
            continue
        last = (tid, ts - neg)
    if drop:
        for k, col in api.items():
            api[k] = [v for j, v in enumerate(col) if j not in drop]


def _tables(out: Collected, devices: list[dict[str, Any]],
            host_steps: list[tuple[int, int, int, str]],
            device_steps: list[tuple[int, list[tuple[int, int, int, str]]]],
            offset: int, vendor: str, host: str) -> dict[str, dict[str, Any]]:
    t = out.tables
    tables: dict[str, dict[str, Any]] = {}
    corr_c = set(t.get("memcpy", {}).get("correlation", ()))
    if "api_calls" in t:
        _launch_names(t["api_calls"], corr_c, vendor)
        _outermost_waits(t["api_calls"])
    for name in (*_HOST_TABLES, *_DEVICE_TABLES):
        if name in t:
            tables[name] = _shifted(t[name], offset)
    if "threads" in t:
        tables["threads"] = t["threads"]
    if "streams" in t:
        tables["streams"] = t["streams"]
    used = record_devices(tables)
    rows = device_columns([r for r in devices if r["device"] in used])
    if rows is not None:
        tables["devices"] = rows
    ann = _annotations(t.get("host_annotations"), t.get("gpu_annotations"), offset)
    if ann is not None:
        tables["annotations"] = ann
    steps = _steps(host_steps, device_steps, offset)
    if steps is not None:
        tables["steps"] = steps
    pids = sorted({p for p in t.get("threads", {}).get("pid", ()) if p is not None})
    if pids:
        tables["processes"] = {"pid": pids, "host": [host or None] * len(pids)}
    return tables


def _shifted(cols: dict[str, list[Any]], offset: int) -> dict[str, Any]:
    out: dict[str, Any] = dict(cols)
    out["ts_ns"] = np.asarray(cols["ts_ns"], dtype=np.int64) + offset
    order = np.argsort(out["ts_ns"], kind="stable")
    return {k: (v[order] if isinstance(v, np.ndarray) else [v[i] for i in order.tolist()])
            for k, v in out.items()}


def _annotations(host: dict[str, list[Any]] | None, gpu: dict[str, list[Any]] | None,
                 offset: int) -> dict[str, Any] | None:
    """Host TraceMe ranges nested per thread, GPU op ranges per device and stream."""
    parts = [c for c in (host, gpu) if c]
    if not parts:
        return None
    nh = len(host["ts_ns"]) if host else 0
    cols: dict[str, list[Any]] = {k: [] for k in ("ts_ns", "dur_ns", "name", "source",
                                                  "device", "stream", "pid", "tid")}
    for part in parts:
        n = len(part["ts_ns"])
        for k in cols:
            cols[k] += part.get(k, [None] * n)
    for i in range(nh, len(cols["ts_ns"])):  # GPU ranges: pid/tid are device/stream (Kineto's)
        cols["pid"][i], cols["tid"][i] = cols["device"][i], cols["stream"][i]
    ts = np.asarray(cols["ts_ns"], dtype=np.int64) + offset
    dur = np.asarray(cols["dur_ns"], dtype=np.int64)
    groups = [(i >= nh, cols["pid"][i], cols["tid"][i]) for i in range(len(ts))]
    parent, depth = nest(groups, ts, dur)
    order = np.argsort(ts, kind="stable")
    ids = np.empty(len(ts), dtype=np.int64)
    ids[order] = np.arange(len(ts), dtype=np.int64)
    parent_id = pa.array(np.where(parent >= 0, ids[np.maximum(parent, 0)], 0),
                         mask=parent < 0)
    table = {**cols, "ts_ns": ts, "dur_ns": dur, "id": ids, "depth": depth,
             "parent_id": parent_id}
    idx = pa.array(order)
    return {k: (v[order] if isinstance(v, np.ndarray) else pa.array(v).take(idx)
                if not isinstance(v, pa.Array) else v.take(idx)) for k, v in table.items()}


def _steps(host: list[tuple[int, int, int, str]],
           device: list[tuple[int, list[tuple[int, int, int, str]]]],
           offset: int) -> dict[str, Any] | None:
    """Steps from the host's step markers (the outermost range of each step number), else
    from the ``Steps`` line of the lowest GPU that has one (TensorFlow)."""
    rows: list[tuple[int, int, int, str]] = []
    if host:
        best: dict[int, tuple[int, int, int, str]] = {}
        for r in host:
            if r[2] not in best or r[1] > best[r[2]][1]:
                best[r[2]] = r
        rows = sorted(best.values())
    elif device:
        rows = sorted(min(device)[1])
    if not rows:
        return None
    return {"ts_ns": [r[0] + offset for r in rows], "dur_ns": [r[1] for r in rows],
            "step": [r[2] for r in rows], "name": [r[3] for r in rows],
            "source": [StepSource.ANNOTATION.value] * len(rows)}


def _conformed(table: str, cols: Mapping[str, Any], rank: int) -> pa.Table:
    data = dict(cols)
    n = len(next(iter(data.values()))) if data else 0
    data["rank"] = np.full(n, rank, dtype=np.int32)
    return conform(table, data)


__all__ = ["parse_xspace"]
