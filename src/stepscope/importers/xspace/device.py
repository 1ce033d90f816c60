"""A GPU plane (``/device:GPU:N``) -> device row, streams, kernels, copies, memsets, the XLA/TF
op ranges on the GPU, and the ``Steps`` line TensorFlow derives.

Stream lines are named ``Stream #<id>(<what>)`` (``Compute``, ``Kernel``, ``MemcpyH2D``,
``MemcpyOther`` ...; JAX on ROCm 7 writes plain ``Stream #2``). On them an event named
``Memcpy*``, ``Copy{Host,Device}To{Host,Device}`` or lying on a copy stream is a copy,
``Memset*`` a memset, any other a kernel. A copy stream is one whose uses are all copies: JAX
names its compute stream ``Stream #14(MemcpyD2H,Compute,Memset)`` once it has copied on it,
and the kernels there stay kernels. Kernels carry ``correlation_id`` (the host launch's),
``kernel_details`` (``regs:R static_shared:S dynamic_shared:D grid:X,Y,Z block:X,Y,Z``; older
TF: ``shm:S``; ROCm: ``group_mem:S``), ``cuda_graph_id``, ``hlo_op``/``hlo_module`` (JAX/XLA)
or ``level 0``/``tf_op`` (TensorFlow). Lines the profiler derives (``XLA Ops``,
``TensorFlow Ops``, ``XLA Modules``) become GPU annotations; where a plane has none, the
kernels' runs of one ``hlo_module`` and, inside them, of one ``hlo_op`` give them.
"""

from __future__ import annotations

import re
from typing import Any

from stepscope.importers.xspace.events import (
    Collected,
    PlaneView,
    XEvent,
    int_or_none,
    key_values,
    positive_i32,
)
from stepscope.schema_enums import AnnotationSource, CopyKind
from stepscope.store.produce.devices import DeviceProperties, device_row

DEVICE_PLANE = re.compile(r"^/device:GPU:(\d+)")
_STREAM = re.compile(r"^Stream #(\d+)")
_USES = re.compile(r"\(([^)]*)\)")
OP_LINES = ("XLA Ops", "TensorFlow Ops", "XLA Modules")
STEPS_LINE = "Steps"
_COPY_KIND = (
    ("H2D", CopyKind.HTOD), ("HtoD", CopyKind.HTOD), ("HostToDevice", CopyKind.HTOD),
    ("D2H", CopyKind.DTOH), ("DtoH", CopyKind.DTOH), ("DeviceToHost", CopyKind.DTOH),
    ("D2D", CopyKind.DTOD), ("DtoD", CopyKind.DTOD), ("DeviceToDevice", CopyKind.DTOD),
    ("P2P", CopyKind.PTOP), ("PtoP", CopyKind.PTOP), ("Peer", CopyKind.PTOP),
    ("HostToHost", CopyKind.HTOH), ("H2H", CopyKind.HTOH),
)
MAX_REGISTERS = 1 << 16  # more per thread than any GPU has: a garbage value (seen on ROCm)


def ns(ps: int) -> int:
    """Picoseconds -> integer nanoseconds (rounded)."""
    return (ps + 500) // 1000


def device_of(plane_name: str) -> int | None:
    m = DEVICE_PLANE.match(plane_name)
    return positive_i32(m.group(1)) if m else None


def properties(device: int, stats: dict[str, Any]) -> dict[str, Any]:
    """The plane's stats (``core_count``, ``clock_rate`` kHz, ``memory_size``,
    ``memory_bandwidth`` B/s, ``compute_cap_major/minor``, ``gpu_device_name``,
    ``device_vendor``) as a ``devices`` row."""
    vendor = str(stats.get("device_vendor") or "").lower()
    vendor = "amd" if "amd" in vendor else "nvidia" if vendor in ("nvidia", "") else "unknown"
    row = device_row(DeviceProperties(
        device=device, name=_str(stats.get("gpu_device_name") or stats.get("device_name")),
        compute_major=int_or_none(stats.get("compute_cap_major"), 0, 1 << 15),
        compute_minor=int_or_none(stats.get("compute_cap_minor"), 0, 1 << 15),
        sm_count=positive_i32(stats.get("core_count")),
        warp_size=64 if vendor == "amd" else 32,
        total_memory=int_or_none(stats.get("memory_size"), 0),
        clock_khz=int_or_none(stats.get("clock_rate"), 0)), vendor)
    bw = int_or_none(stats.get("memory_bandwidth"), 0)
    if bw:
        row["memory_bandwidth_gbs"] = bw / 1e9
    return row


def _str(v: Any) -> str | None:
    return str(v) if v not in (None, "") else None


def copy_line(line: str) -> bool:
    """A stream that only copies: every use in its parentheses is a ``Memcpy*`` one
    (``Stream #15(MemcpyH2D)``). A stream the copies share with kernels
    (``Stream #14(MemcpyD2H,Compute,Memset)``: JAX's compute stream once it has copied) is not."""
    m = _USES.search(line)
    uses = [u.strip() for u in m.group(1).split(",")] if m else []
    return bool(uses) and all(u.startswith("Memcpy") for u in uses)


def copy_kind(name: str, line: str) -> CopyKind | None:
    """The copy an event is, by its name or its stream (None: not a copy)."""
    if name.startswith("Memset"):
        return None
    by_line = copy_line(line)
    if not (name.startswith(("Memcpy", "CopyDeviceTo", "CopyHostTo")) or by_line):
        return None
    for key, kind in _COPY_KIND:
        if key in name:
            return kind
    if by_line:
        for key, kind in _COPY_KIND:
            if key in line:
                return kind
    return CopyKind.UNKNOWN


def _kernel(out: Collected, dev: int, stream: int, e: XEvent) -> None:
    kd = key_values(e.stats.get("kernel_details"))
    grid = _xyz(kd.get("grid"))
    block = _xyz(kd.get("block"))
    regs = positive_i32(kd.get("regs"))
    static = int_or_none(kd.get("static_shared"), 0)
    dynamic = int_or_none(kd.get("dynamic_shared"), 0)
    smem = int_or_none(kd.get("shm", kd.get("group_mem")), 0)
    if smem is None and (static is not None or dynamic is not None):
        smem = int_or_none((static or 0) + (dynamic or 0))
    occ = e.stats.get("theoretical_occupancy_pct")
    occ = occ if occ else int_or_none(kd.get("occ_pct"), 0, 100) or None
    out.add("kernels", ts_ns=ns(e.start_ps), dur_ns=ns(e.dur_ps), device=dev, stream=stream,
            correlation=int_or_none(e.stats.get("correlation_id")),
            name=e.name, grid_x=grid[0], grid_y=grid[1], grid_z=grid[2],
            block_x=block[0], block_y=block[1], block_z=block[2],
            registers=regs if regs is not None and 0 < regs <= MAX_REGISTERS else None,
            shared_memory=smem, static_smem=static, dynamic_smem=dynamic,
            graph_id=int_or_none(e.stats.get("cuda_graph_id")),
            source_occupancy_pct=float(occ) if isinstance(occ, int | float) and 0 < occ <= 100
            else None)


def _xyz(text: str | None) -> tuple[int | None, int | None, int | None]:
    parts = [positive_i32(p) for p in (text or "").split(",")]
    if len(parts) != 3:
        return None, None, None
    return parts[0], parts[1], parts[2]


def _copy(out: Collected, dev: int, stream: int, e: XEvent, kind: CopyKind | None) -> None:
    details = key_values(e.stats.get("memcpy_details") or e.stats.get("memset_details"))
    size = int_or_none(details.get("size"), 0)
    common = dict(ts_ns=ns(e.start_ps), dur_ns=ns(e.dur_ps), device=dev, stream=stream,
                  correlation=int_or_none(e.stats.get("correlation_id")),
                  bytes=size if size else None)
    if kind is None:
        out.add("memset", **common)
        return
    peer = positive_i32(details.get("dest")) if kind is CopyKind.PTOP else None
    out.add("memcpy", **common, kind=kind.value, dst_device=peer)


class DevicePlane:
    """Maps one GPU plane into ``out``; ``steps`` gets the ``Steps`` line's events."""

    def __init__(self, view: PlaneView, device: int, out: Collected) -> None:
        self.view, self.device, self.out = view, device, out
        self.steps: list[tuple[int, int, int, str]] = []  # (start ns, dur ns, step, name)
        self.kernels = self.copies = 0

    def read(self) -> dict[str, Any]:
        """Fill the tables; returns the plane's ``devices`` row."""
        row = properties(self.device, self.view.plane_stats())
        derived = False
        runs: list[list[Any]] = []  # hlo_module / hlo_op runs: [start, end, name, stream]
        for line in self.view.lines():
            lname = line.display_name or line.name
            m = _STREAM.match(lname)
            stream = int_or_none(m.group(1)) if m is not None else None
            if stream is not None:
                self.out.add("streams", device=self.device, stream=stream, name=lname)
                self._stream(line, stream, lname, runs)
            elif lname in OP_LINES:
                derived = True
                for e in self.view.events(line):
                    self._annotation(e.start_ps, e.start_ps + e.dur_ps, e.name, None)
            elif lname == STEPS_LINE:
                for e in self.view.events(line):
                    num = int_or_none(e.stats.get("step_name", e.name))
                    if num is not None:
                        self.steps.append((ns(e.start_ps), ns(e.dur_ps), num, e.name))
        if not derived:
            for start, end, name, stream in runs:
                self._annotation(start, end, name, stream)
        return row

    def _stream(self, line: Any, stream: int, lname: str, runs: list[list[Any]]) -> None:
        # consecutive kernels of one hlo_op (and of one hlo_module) are one range each
        last: dict[str, list[Any] | None] = {"hlo_module": None, "hlo_op": None}
        for e in self.view.events(line):
            kind = copy_kind(e.name, lname)
            if kind is None and not e.name.startswith("Memset"):
                self.kernels += 1
                _kernel(self.out, self.device, stream, e)
            else:
                self.copies += 1
                _copy(self.out, self.device, stream, e, kind)
                continue
            end = e.start_ps + e.dur_ps
            for key in ("hlo_module", "hlo_op"):
                name = e.stats.get(key)
                run = last[key]
                if not name:
                    last[key] = None
                elif run is not None and run[2] == name:
                    run[1] = max(run[1], end)
                else:
                    last[key] = [e.start_ps, end, str(name), stream]
                    runs.append(last[key])  # type: ignore[arg-type]

    def _annotation(self, start_ps: int, end_ps: int, name: str, stream: int | None) -> None:
        self.out.add("gpu_annotations", ts_ns=ns(start_ps), dur_ns=ns(end_ps) - ns(start_ps),
                     name=name, device=self.device, stream=stream,
                     source=AnnotationSource.GPU_USER.value)


__all__ = ["DEVICE_PLANE", "DevicePlane", "copy_kind", "copy_line", "device_of", "ns",
           "properties"]
