"""TraceBuilder: tiny synthetic runs with hand-computable answers.

Times are given in microseconds (floats allowed) for readability and stored in
ns. Every ``.kernel()/.memcpy()/...`` call appends one row; ``build(path)``
writes a real run through the store writer and returns it opened.

    b = TraceBuilder()
    b.step(0, 100)
    b.kernel("gemm", ts=10, dur=50)
    run = b.build(tmp_path / "run")
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from stepscope.call_kinds import classify_api
from stepscope.store.manifest import Manifest, RankInfo, SourceInfo
from stepscope.store.run import Run
from stepscope.store.writer import write_run

US = 1000  # ns per µs

H100 = dict(
    name="NVIDIA H100 80GB HBM3", vendor="nvidia", compute_major=9, compute_minor=0,
    sm_count=132, warp_size=32, max_threads_per_block=1024, max_threads_per_sm=2048,
    regs_per_block=65536, regs_per_sm=65536, smem_per_block=49152,
    smem_per_block_optin=232448, smem_per_sm=233472, total_memory=85017493504,
)


def _ns(us: float) -> int:
    return int(round(us * US))


class TraceBuilder:
    def __init__(self, *, device: dict[str, Any] | None = None, pid: int = 100, tid: int = 100) -> None:
        self.rows: dict[int, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
        self.pid = pid
        self.tid = tid
        self._corr = 1000
        self._ids = 0
        self.device_props = dict(H100 if device is None else device)
        self.rank_device: dict[int, dict[str, Any]] = {}
        self.ranks: set[int] = {0}

    # -- helpers ---------------------------------------------------------------
    def _add(self, table: str, rank: int, **row: Any) -> dict[str, Any]:
        self.ranks.add(rank)
        self.rows[rank][table].append(row)
        return row

    def next_correlation(self) -> int:
        self._corr += 1
        return self._corr

    # -- events ----------------------------------------------------------------
    def step(self, ts: float, dur: float, *, step: int | None = None, rank: int = 0,
             name: str | None = None, source: str = "profiler_step") -> TraceBuilder:
        n = step if step is not None else len(self.rows[rank]["steps"])
        self._add("steps", rank, ts_ns=_ns(ts), dur_ns=_ns(dur), step=n, source=source,
                  name=name or f"ProfilerStep#{n}")
        self.annotation(name or f"ProfilerStep#{n}", ts, dur, rank=rank, source="profiler_step")
        return self

    def kernel(self, name: str, ts: float, dur: float, *, stream: int = 7, device: int = 0,
               grid: tuple[int | None, int | None, int | None] = (1024, 1, 1),
               block: tuple[int, int, int] = (256, 1, 1),
               regs: int | None = 32, smem: int | None = 0, rank: int = 0,
               correlation: int | None = None, launch: tuple[float, float] | None = None,
               tid: int | None = None, external_id: int | None = None) -> TraceBuilder:
        """A kernel; ``launch=(ts, dur)`` also adds its cudaLaunchKernel call."""
        corr = correlation if correlation is not None else self.next_correlation()
        self._add("kernels", rank, ts_ns=_ns(ts), dur_ns=_ns(dur), device=device, stream=stream,
                  correlation=corr, name=name, grid_x=grid[0], grid_y=grid[1], grid_z=grid[2],
                  block_x=block[0], block_y=block[1], block_z=block[2], registers=regs,
                  shared_memory=smem, external_id=external_id)
        if launch is not None:
            self.api("cudaLaunchKernel", launch[0], launch[1], correlation=corr, rank=rank, tid=tid,
                     external_id=external_id)
        return self

    def collective(self, name: str, ts: float, dur: float, **kw: Any) -> TraceBuilder:
        """A communication kernel, e.g. ``collective('AllReduce', ...)``; its grid unknown
        unless given (``grid=(24, 1, 1)``: NCCL's blocks, one per channel)."""
        kw.setdefault("stream", 20)
        kw.setdefault("grid", (None, None, None))
        return self.kernel(f"ncclDevKernel_{name}_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                           ts, dur, **kw)

    def call(self, op: str, ts: float, dur: float, *, rank: int = 0, pg: str | None = "0",
             seq: int | None = None, nbytes: int | None = None, group_size: int | None = None,
             source: str = "kernel_args", stream: int = 20, kernels: int = 1) -> TraceBuilder:
        """A ``collectives`` row (``op``: a CollectiveOp value) and, unless ``kernels`` is 0,
        its NCCL kernel at the same time."""
        kname = {"all_reduce": "AllReduce", "all_gather": "AllGather",
                 "reduce_scatter": "ReduceScatter", "broadcast": "Broadcast",
                 "send_recv": "SendRecv"}.get(op, "AllReduce")
        if kernels:
            self.collective(kname, ts, dur, rank=rank, stream=stream)
        self._add("collectives", rank, ts_ns=_ns(ts), dur_ns=_ns(dur), device=0, stream=stream,
                  op=op, name=f"nccl:{op}", pg=pg, group_size=group_size, bytes=nbytes,
                  seq=seq, kernels=kernels, source=source)
        return self

    def memcpy(self, kind: str, ts: float, dur: float, nbytes: int, *, src: str | None = None,
               dst: str | None = None, stream: int = 7, device: int = 0, rank: int = 0,
               api: tuple[str, float, float] | None = None, tid: int | None = None) -> TraceBuilder:
        """A copy; ``kind`` HtoD/DtoH/DtoD; ``api=(name, ts, dur)`` adds its API call."""
        src = src or {"HtoD": "pinned", "DtoH": "device", "DtoD": "device"}.get(kind, "unknown")
        dst = dst or {"HtoD": "device", "DtoH": "pinned", "DtoD": "device"}.get(kind, "unknown")
        corr = self.next_correlation()
        self._add("memcpy", rank, ts_ns=_ns(ts), dur_ns=_ns(dur), device=device, stream=stream,
                  correlation=corr, kind=kind, bytes=nbytes, src_kind=src, dst_kind=dst)
        if api is not None:
            self.api(api[0], api[1], api[2], correlation=corr, rank=rank, tid=tid)
        return self

    def memset(self, ts: float, dur: float, nbytes: int = 4, *, stream: int = 7, device: int = 0,
               rank: int = 0) -> TraceBuilder:
        self._add("memset", rank, ts_ns=_ns(ts), dur_ns=_ns(dur), device=device, stream=stream,
                  correlation=self.next_correlation(), bytes=nbytes, dst_kind="device")
        return self

    def api(self, name: str, ts: float, dur: float, *, correlation: int | None = None,
            rank: int = 0, tid: int | None = None, external_id: int | None = None) -> TraceBuilder:
        self._add("api_calls", rank, ts_ns=_ns(ts), dur_ns=_ns(dur), pid=self.pid,
                  tid=self.tid if tid is None else tid, correlation=correlation, name=name,
                  domain="driver" if name.startswith("cu") and not name.startswith("cuda") else "runtime",
                  kind=classify_api(name).value, external_id=external_id)
        return self

    def sync(self, name: str, ts: float, dur: float, **kw: Any) -> TraceBuilder:
        """A host sync call, e.g. ``sync('cudaStreamSynchronize', ...)``."""
        return self.api(name, ts, dur, **kw)

    def annotation(self, name: str, ts: float, dur: float, *, rank: int = 0, tid: int | None = None,
                   source: str = "user") -> TraceBuilder:
        self._ids += 1
        self._add("annotations", rank, ts_ns=_ns(ts), dur_ns=_ns(dur), pid=self.pid,
                  tid=self.tid if tid is None else tid, id=self._ids, name=name, source=source,
                  depth=0)
        return self

    def nvtx(self, name: str, ts: float, dur: float, **kw: Any) -> TraceBuilder:
        return self.annotation(name, ts, dur, source="nvtx", **kw)

    def cpu_op(self, name: str, ts: float, dur: float, *, rank: int = 0, tid: int | None = None,
               kind: str = "framework", external_id: int | None = None) -> TraceBuilder:
        self._add("cpu_ops", rank, ts_ns=_ns(ts), dur_ns=_ns(dur), pid=self.pid,
                  tid=self.tid if tid is None else tid, name=name, kind=kind, external_id=external_id)
        return self

    def input_wait(self, ts: float, dur: float, *, rank: int = 0, tid: int | None = None) -> TraceBuilder:
        self._add("input_waits", rank, ts_ns=_ns(ts), dur_ns=_ns(dur), pid=self.pid,
                  tid=self.tid if tid is None else tid, source="dataloader",
                  name="enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__")
        return self

    def memory(self, ts: float, nbytes: int, allocated: int, reserved: int, *, device: int = 0,
               rank: int = 0) -> TraceBuilder:
        self._add("memory_events", rank, ts_ns=_ns(ts), pid=self.pid, tid=self.tid,
                  device_type="gpu", device=device, bytes=nbytes, total_allocated=allocated,
                  total_reserved=reserved)
        return self

    def sample(self, metric: str, ts: float, value: float, *, device: int | None = None,
               rank: int = 0, unit: str | None = None) -> TraceBuilder:
        self._add("samples", rank, ts_ns=_ns(ts), device=device, metric=metric, value=value,
                  unit=unit)
        return self

    def thread(self, name: str, tid: int, *, pid: int | None = None, rank: int = 0) -> TraceBuilder:
        """A row of the ``threads`` table (a host thread's name)."""
        self._add("threads", rank, pid=self.pid if pid is None else pid, tid=tid, name=name)
        return self

    def process(self, name: str, pid: int, *, rank: int = 0, **cols: Any) -> TraceBuilder:
        """A ``processes`` row; ``cols``: its other columns (``cpu_affinity`` ...)."""
        self._add("processes", rank, pid=pid, name=name, **cols)
        return self

    def gpu(self, rank: int, **props: Any) -> TraceBuilder:
        """``devices`` columns of ``rank``'s GPUs that differ from the builder's device
        (``numa_node``, ``numa_cpus`` ...)."""
        self.ranks.add(rank)
        self.rank_device[rank] = props
        return self

    def stack(self, ts: float, frames: list[str], *, tid: int | None = None,
              rank: int = 0) -> TraceBuilder:
        """A sampled Python stack, ``frames`` outermost first ('file:line function' each)."""
        self._add("stacks", rank, ts_ns=_ns(ts), pid=self.pid, tid=self.tid if tid is None else tid,
                  frames="\n".join(frames))
        return self

    # -- output ----------------------------------------------------------------
    def build(self, path: str | Path, *, settings: dict[str, Any] | None = None,
              devices: int = 1, **manifest: Any) -> Run:
        """``devices``: rows of the ``devices`` table per rank (GPUs 0..n-1, all alike; 0: a
        CPU-only run); ``manifest``: other Manifest fields (``source``, ``partial``,
        ``diagnostics``, ``overhead``)."""
        parts = []
        for rank in sorted(self.ranks):
            tables: dict[str, dict[str, list[Any]]] = {}
            for table, rows in self.rows[rank].items():
                cols: dict[str, list[Any]] = defaultdict(list)
                keys = sorted({k for r in rows for k in r})
                for r in rows:
                    for k in keys:
                        cols[k].append(r.get(k))
                tables[table] = dict(cols)
            if devices:
                props = {**self.device_props, **self.rank_device.get(rank, {})}
                dev = {k: [v] * devices for k, v in props.items()}
                dev["device"] = list(range(devices))
                tables["devices"] = dev
            parts.append((rank, tables))
        manifest.setdefault("source", SourceInfo(kind="synthetic"))
        m = Manifest(ranks=tuple(RankInfo(rank=r) for r in sorted(self.ranks)),
                     settings=settings or {}, **manifest)
        write_run(path, m, parts)
        return Run(path)


DATA = Path(__file__).parent / "data"


def imported(rel: str, factory: Any) -> Run:
    """A real trace from tests/data (copies of ../shared/fixtures; ``rel`` may keep the
    fixtures' sub-folder), imported into a fresh run (``factory``: pytest's tmp_path_factory)."""
    from stepscope.importers import import_traces

    return Run(import_traces([DATA / Path(rel).name], factory.mktemp("run") / "run"))


def marker_windows(run: Run, rank: int = 0) -> tuple[Any, Any]:
    """The trace's own step markers as (starts, ends) ns arrays."""
    st = run.table("steps", rank).sort_by("ts_ns")
    s = st.column("ts_ns").to_numpy()
    return s, s + st.column("dur_ns").to_numpy()
