"""Captured processes' staging partitions (``capture.staging``), read back and merged into one run.

``read_partitions`` first decodes what a partition kept raw (``capture.materialize``: the
``cupti`` backend's records, the ``torch`` backend's Kineto trace through the ``TraceReader`` the
caller gives), then reads each partition's chunks.

``merge`` reads every partition, assigns ranks and hands one rank bundle per kept partition
(``store.produce.RankBundle``, its tables read one at a time) to the one run assembler
(``store.produce.assemble``), which checks each against what its kind of source must provide:

- a partition whose process had ``RANK`` (else ``LOCAL_RANK``) in its environment keeps it
  (``torchrun`` workers);
- a launcher is never a rank: a partition without ``RANK``/``LOCAL_RANK`` and without steps whose
  process is the parent of a ranked one (the ``torchrun`` agent) is dropped with an ``info``
  diagnostic, even when no process reached a step (workers that crashed at start-up);
- when some partition has steps, partitions without any step (spawned data-loader workers,
  helper interpreters) are not kept as ranks; a diagnostic says so;
- the others get the free ranks in the order the processes started.

How each process ended (``PartitionMeta.ended``) is what its bootstrap saw: ``exit``, ``exit
status N`` (a non-zero ``sys.exit``/``exit()`` on the main thread, ``capture.process``),
``exception: <Type>``, ``signal: <NAME>`` (SIGTERM), or ``running`` when it never got to say
(``os._exit``, SIGKILL, ``exec``). A process cannot see the status of ``raise SystemExit(N)``
(no hook runs with it), but its parent can: for the process ``stepscope record`` launched
itself (``launched_pid``), the launcher's return code replaces a partition's ``exit``,
``exit status N``, ``running`` or ``unknown`` (see ``settle_launched``). Processes further down
(``torchrun`` workers, ``subprocess`` children) keep what they saw themselves.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from stepscope.capture.endings import capture_cut, ended_by, status_diagnostic
from stepscope.capture.gpu_pace import GPU_TABLES, GpuBusy, with_gpu_pace
from stepscope.capture.materialize import materialize, raw_bytes
from stepscope.capture.staging import META_NAME, PartitionMeta
from stepscope.errors import CaptureError
from stepscope.schema import TABLE_NAMES, empty_table
from stepscope.schema_enums import SourceKind
from stepscope.store.manifest import Diagnostic, Manifest, RankInfo, SourceInfo
from stepscope.store.produce import RankBundle, TraceReader, assemble

NO_GPU_CAPTURE = Diagnostic(
    "warning", "gpu_not_captured",
    "no process captured GPU activity (no GPU backend ran; see the per-rank diagnostics): "
    "host-side steps, input waits, samples and stacks only",
)


def gpu_backends(parts: Sequence[Partition]) -> list[str]:
    """The GPU backends that ran in the partitions: stopped, or still running when the process
    was killed (what it flushed before is in the run)."""
    out: list[str] = []
    for p in parts:
        g = p.meta.settings.get("gpu") if isinstance(p.meta.settings, dict) else None
        if isinstance(g, dict) and g.get("state") in ("stopped", "running") and g.get("backend"):
            out.append(str(g["backend"]))
    return sorted(set(out))


@dataclass(frozen=True)
class Partition:
    """A process's staging folder. Tables are read one at a time (``table``), so that merging a
    long capture holds one table of one process in memory, not the whole run; ``tables`` holds
    tables given directly (tests)."""

    path: Path
    meta: PartitionMeta
    tables: dict[str, pa.Table] = field(default_factory=dict)
    files: dict[str, tuple[Path, ...]] = field(default_factory=dict)

    def names(self) -> list[str]:
        return [n for n in TABLE_NAMES if n in self.tables or n in self.files]

    def rows(self, table: str) -> int:
        t = self.tables.get(table)
        if t is not None:
            return int(t.num_rows)
        total = 0
        for f in self.files.get(table, ()):
            try:
                total += pq.ParquetFile(f).metadata.num_rows
            except (OSError, pa.ArrowInvalid):
                continue
        return total

    def table(self, name: str) -> pa.Table | None:
        if name in self.tables:
            return self.tables[name]
        parts = []
        for f in self.files.get(name, ()):
            try:
                parts.append(pq.read_table(f))
            except (OSError, pa.ArrowInvalid):
                continue  # a chunk cut short by a kill: the others still count
        if not parts:
            return None
        t = pa.concat_tables(parts)
        if name in ("threads", "processes", "devices"):  # noted again by every drain: one each
            t = pa.Table.from_pylist(_unique(t.to_pylist()), schema=t.schema)
        if name == "devices":  # the driver's rows, then any a torch trace added at the merge
            t = t.sort_by("device")
        return t


def read_partition(path: Path) -> Partition:
    try:
        meta = PartitionMeta.from_dict(json.loads((path / META_NAME).read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        pid_s = path.name.rsplit("-", 1)[-1]
        start_s = path.name[1:].split("-", 1)[0]
        meta = PartitionMeta(
            pid=int(pid_s) if pid_s.isdigit() else 0,
            start_ns=int(start_s) if start_s.isdigit() else 0,
            ended="unknown",
            diagnostics=(Diagnostic("warning", "partition_meta_missing",
                                    "a captured process left no readable meta.json "
                                    "(killed before it could flush?)", file=path.name),),
        )
    files = {name: tuple(sorted(path.glob(f"{name}.*.parquet"))) for name in TABLE_NAMES}
    return Partition(path=path, meta=meta, files={k: v for k, v in files.items() if v})


# a merge's progress: (what, done, total), e.g. ("decoding GPU records", 120e6, 800e6) in bytes,
# or ("writing tables", 3, 20); the command line draws it (cli/record.py)
Progress = Callable[[str, float, float], None]


def read_partitions(staging: Path, progress: Progress | None = None,
                    read_trace: TraceReader | None = None) -> list[Partition]:
    """Every partition under ``staging``, decoded first (``capture.materialize``; ``read_trace``
    reads the ``torch`` backend's Kineto traces), in the order the processes started."""
    folders = sorted(p for p in staging.iterdir() if p.is_dir() and p.name.startswith("p"))
    sizes = [raw_bytes(f) for f in folders]
    total, before = float(sum(sizes)), 0.0
    for folder, size in zip(folders, sizes):
        if progress is not None and size:
            at = before  # bytes of the folders before this one

            def one(done: float, at: float = at) -> None:
                progress("decoding GPU records", at + done, total)

            materialize(folder, one, read_trace=read_trace)
        else:
            materialize(folder, read_trace=read_trace)
        before += size
    parts = [read_partition(p) for p in folders]
    return sorted(parts, key=lambda p: (p.meta.start_ns, p.meta.pid))


def settle_launched(parts: Sequence[Partition], pid: int, returncode: int,
                    host: str) -> list[Partition]:
    """``parts`` with the launcher's ``returncode`` as the ending of its direct child ``pid``.

    The child's own note cannot be trusted where it says ``exit`` (``raise SystemExit(N)`` is
    not seen in-process), ``exit status N`` (a ``sys.exit(N)`` that was caught), ``running``
    (``os._exit``, SIGKILL) or ``unknown`` (no meta); an exception or a signal it saw stays, as
    it says more. When the child ``exec``-ed, its pid has several partitions: the last one
    started is the image that ended."""
    own = [p for p in parts if p.meta.pid == pid and p.meta.host in (host, "")]
    if not own:
        return list(parts)
    last = max(own, key=lambda p: p.meta.start_ns)
    ended = last.meta.ended
    if not (ended in ("exit", "running", "unknown") or ended.startswith("exit status")):
        return list(parts)
    settled = replace(last, meta=replace(last.meta, ended=ended_by(returncode)))
    return [settled if p is last else p for p in parts]


def assign_ranks(parts: Sequence[Partition]
                 ) -> tuple[list[tuple[int, Partition]], list[Diagnostic]]:
    """``[(rank, partition)]`` for the partitions kept, and what was decided (see module doc)."""
    diags: list[Diagnostic] = []
    parents = {(p.meta.host, p.meta.ppid) for p in parts if p.meta.env_rank is not None}
    launchers = [p for p in parts if p.meta.env_rank is None and not p.rows("steps")
                 and (p.meta.host, p.meta.pid) in parents]
    if launchers:
        names = ", ".join(f"{os.path.basename(p.meta.argv[0]) if p.meta.argv else '?'} "
                          f"(pid {p.meta.pid})" for p in launchers)
        diags.append(Diagnostic(
            "info", "launcher_not_a_rank",
            f"launcher process(es) that started the ranks, not kept as ranks: {names}",
            count=len(launchers)))
    kept = [p for p in parts if not any(p is q for q in launchers)]
    # the processes that did the work: those with steps; where none has steps (no step hook
    # fired: time windows), those that used the GPU
    for has, what in ((lambda p: p.rows("steps") > 0, "training steps"), (_used_gpu, "GPU work")):
        if not any(has(p) for p in kept):
            continue
        dropped = [p for p in kept if not has(p)]
        if dropped:
            kept = [p for p in kept if has(p)]
            diags.append(Diagnostic(
                "info", "processes_without_steps",
                f"{len(dropped)} captured process(es) without {what} (launchers, workers, "
                f"helpers) not kept as ranks: pids {', '.join(str(p.meta.pid) for p in dropped)}",
                count=len(dropped)))
        break
    out: list[tuple[int, Partition]] = []
    used: set[int] = set()
    rest: list[Partition] = []
    for p in kept:
        r = p.meta.env_rank
        if r is not None and r not in used:
            used.add(r)
            out.append((r, p))
        else:
            rest.append(p)
    nxt = 0
    for p in rest:
        while nxt in used:
            nxt += 1
        used.add(nxt)
        out.append((nxt, p))
    if len(rest) and any(p.meta.env_rank is not None for p in rest):
        diags.append(Diagnostic("warning", "duplicate_rank",
                                "several processes had the same RANK; later ones were renumbered"))
    return sorted(out, key=lambda x: x[0]), diags


def _used_gpu(p: Partition) -> bool:
    s = p.meta.settings if isinstance(p.meta.settings, dict) else {}
    return (any(p.rows(t) for t in ("kernels", "memcpy", "memset"))
            or isinstance(s.get("gpu_first_used_ns"), int))


def source_kind(meta: PartitionMeta) -> SourceKind:
    """The kind of source a partition is (``schema.CONTRACTS``): its GPU backend's, when one ran
    (stopped, or running when the process was killed), else host-only."""
    g = meta.settings.get("gpu") if isinstance(meta.settings, dict) else None
    if isinstance(g, dict) and g.get("state") in ("stopped", "running"):
        backend = str(g.get("backend") or "")
        if backend == "torch":
            return SourceKind.TORCH
        if backend.startswith("cupti"):
            return SourceKind.CUPTI
    return SourceKind.HOST


class PartitionTables(Mapping[str, pa.Table]):
    """A partition's tables as a lazy mapping: each is read when it is looked up (the assembler
    looks each up once, so one table of one process is in memory at a time)."""

    def __init__(self, part: Partition) -> None:
        self._part = part
        self._names = part.names()

    def __getitem__(self, name: str) -> pa.Table:
        if name not in self._names:
            raise KeyError(name)
        t = self._part.table(name)
        return empty_table(name) if t is None else t

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def bundle(rank: int, p: Partition) -> RankBundle:
    """Partition ``p`` as rank ``rank``'s bundle: its tables (lazy), who it was and what its
    process said, ended by or lost (``capture.endings``)."""
    m = p.meta
    diags = [replace(d, file=d.file or f"rank {rank} (pid {m.pid})") for d in m.diagnostics]
    if m.ended not in ("exit", "running"):
        diags.append(Diagnostic("warning", "process_ended",
                                f"rank {rank} (pid {m.pid}) ended by {m.ended}"))
    cut = capture_cut(m.settings, m.ended)
    if cut is not None:
        diags.append(Diagnostic("warning", "partial_run",
                                f"the run is partial: rank {rank} (pid {m.pid}): {cut}"))
    return RankBundle(
        kind=source_kind(m),
        rank=RankInfo(rank=rank, host=m.host or socket.gethostname(), pid=m.pid,
                      world_size=m.world_size),
        tables=PartitionTables(p), diagnostics=tuple(_dedupe(diags)))


def merge(
    staging: Path,
    out: Path,
    *,
    command: Sequence[str],
    returncode: int | None,
    launched_pid: int | None = None,
    overwrite: bool = False,
    extra_diagnostics: Sequence[Diagnostic] = (),
    settings: Mapping[str, Any] | None = None,
    version: str = "",
    inputs: Sequence[Path] = (),
    progress: Progress | None = None,
    read_trace: TraceReader | None = None,
) -> Path:
    """Merge every staging partition into the run ``out`` (written atomically, by
    ``store.produce.assemble``).

    ``returncode`` is the command's; ``launched_pid`` its process, whose partition (if it has
    one) takes that status as its ending (``settle_launched``). The run is partial only where a
    rank's capture was cut (``capture.endings``), not for a non-zero exit status. ``inputs``:
    paths that ``overwrite`` must not delete (``RunWriter``); ``progress``: told how decoding
    and writing go; ``read_trace``: reads the Kineto trace a ``--backend torch`` process left
    (the Kineto importer's reader, given by the caller: capture does not import importers;
    without it such a trace is not read, and a diagnostic says so)."""
    try:
        parts = read_partitions(staging, progress, read_trace)
    except OSError as exc:
        raise CaptureError(f"{staging}: cannot read the capture staging folder ({exc})") from None
    if launched_pid is not None and returncode is not None:
        parts = settle_launched(parts, launched_pid, returncode, socket.gethostname())
    ranked, diags = assign_ranks(parts)
    backends = gpu_backends([p for _, p in ranked])
    diags = [*([] if backends else [NO_GPU_CAPTURE]), *extra_diagnostics, *diags]
    partial = returncode is None or any(capture_cut(p.meta.settings, p.meta.ended) is not None
                                        for _, p in ranked)
    status = status_diagnostic(returncode)
    if status is not None:
        diags.append(status)
    if not parts:
        diags.append(Diagnostic("error", "nothing_captured",
                                "no Python process was captured (was the command a Python program? "
                                "did it exit before the interpreter started?)"))
    busy = {r: GpuBusy.for_window(p.meta.settings) for r, p in ranked}  # the steps' GPU pace
    todo = sum(len(p.names()) for _, p in ranked)
    done = [0]
    if progress is not None:
        progress("writing tables", 0, todo)

    def on_table(rank: int, name: str, table: pa.Table) -> None:
        b = busy[rank]
        if b is not None and name in GPU_TABLES:
            b.add(table)
        done[0] += 1
        if progress is not None:
            progress("writing tables", done[0], todo)

    def head(facts: Sequence[RankBundle]) -> Manifest:
        overhead: dict[str, Any] = {}
        for r, p in ranked:
            b = busy[r]
            overhead[f"rank{r}"] = (p.meta.overhead if b is None
                                    else with_gpu_pace(p.meta.overhead, b.busiest_ns()))
        per_rank = {f"rank{r}": p.meta.settings for r, p in ranked}
        used = sorted({str(p.meta.settings.get("window")) for _, p in ranked
                       if p.meta.settings.get("window")})
        return Manifest(
            source=SourceInfo(kind="capture", files=(), tool=f"stepscope {version} record (host"
                              + "".join(f" + {b}" for b in backends) + ")",
                              details={"command": list(command), "returncode": returncode,
                                       "processes_captured": len(parts)}),
            ranks=(),
            stepscope_version=version,
            partial=partial,
            settings={**dict(settings or {}), "ranks": per_rank,
                      **({"window_used": "; ".join(used)} if used else {})},
            overhead=overhead,
            diagnostics=tuple(_dedupe(diags)),
        )

    return assemble(out, (bundle(r, p) for r, p in ranked), head, overwrite=overwrite,
                    inputs=inputs, on_table=on_table)


def _unique(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rows:
        seen.setdefault(tuple(sorted(r.items())), r)
    return list(seen.values())


def _dedupe(diags: Sequence[Diagnostic]) -> list[Diagnostic]:
    seen: set[tuple[str, str, str]] = set()
    out = []
    for d in diags:
        key = (d.level, d.code, d.message + d.file)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out


__all__ = ["NO_GPU_CAPTURE", "Partition", "PartitionTables", "assign_ranks", "bundle", "ended_by",
           "merge", "read_partition", "read_partitions", "settle_launched", "source_kind"]
