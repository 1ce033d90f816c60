"""Per-process staging partitions, and their merge into one run.

Every captured process writes into its own folder under the staging directory the launcher made
(``STAGING/p<start_ns>-<pid>/``): a ``meta.json`` (who it was, how it ended, settings, overhead,
diagnostics) and Parquet chunks ``<table>.<n>.parquet`` conformed to ``schema.TABLES``, plus the
raw CUPTI records the ``cupti`` backend kept (``capture.cupti.spill``), which ``read_partitions``
decodes into chunks first (``capture.materialize``). Chunks and meta are written to a temporary
name and renamed, so a process killed mid-write leaves the previous chunks readable.

``merge`` reads every partition, assigns ranks and writes the run through ``RunWriter``:

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from stepscope.capture.endings import capture_cut, ended_by, settle_launched, status_diagnostic
from stepscope.capture.gpu_pace import GPU_TABLES, GpuBusy, with_gpu_pace
from stepscope.errors import CaptureError
from stepscope.schema import TABLE_NAMES
from stepscope.store.manifest import Diagnostic, Manifest, RankInfo, SourceInfo
from stepscope.store.writer import RunWriter, conform

META_NAME = "meta.json"
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
class PartitionMeta:
    pid: int
    start_ns: int
    ppid: int = 0
    host: str = ""
    env_rank: int | None = None
    world_size: int | None = None
    argv: tuple[str, ...] = ()
    ended: str = "running"  # "exit" | "exception: <Type>" | "signal: <NAME>" | "running"
    settings: dict[str, Any] = field(default_factory=dict)
    overhead: dict[str, Any] = field(default_factory=dict)
    diagnostics: tuple[Diagnostic, ...] = ()

    def to_json(self) -> str:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["argv"] = list(self.argv)
        d["diagnostics"] = [vars(x) for x in self.diagnostics]
        return json.dumps(d, default=str)

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> PartitionMeta:
        return PartitionMeta(
            pid=int(d["pid"]), start_ns=int(d["start_ns"]), ppid=int(d.get("ppid", 0)),
            host=str(d.get("host", "")),
            env_rank=None if d.get("env_rank") is None else int(d["env_rank"]),
            world_size=None if d.get("world_size") is None else int(d["world_size"]),
            argv=tuple(str(a) for a in d.get("argv", ())), ended=str(d.get("ended", "running")),
            settings=dict(d.get("settings", {})), overhead=dict(d.get("overhead", {})),
            diagnostics=tuple(Diagnostic(**x) for x in d.get("diagnostics", ())),
        )


def env_rank(environ: Mapping[str, str]) -> tuple[int | None, int | None]:
    """(rank, world size) from the launcher's environment variables, if any."""

    def num(*keys: str) -> int | None:
        for k in keys:
            v = environ.get(k, "").strip()
            if v.isdigit():
                return int(v)
        return None

    return num("RANK", "LOCAL_RANK"), num("WORLD_SIZE", "LOCAL_WORLD_SIZE")


class StagingPartition:
    """One process's staging folder. Not thread-safe: the bootstrap serialises calls.
    ``prefix`` keeps the chunk names of another writer apart (``gpu``: the decoded raw records)."""

    def __init__(self, path: Path, prefix: str = "") -> None:
        self.path = path
        self.path.mkdir(parents=True, exist_ok=True)
        self._prefix = prefix
        self._chunks = 0

    @staticmethod
    def for_process(staging: Path, pid: int, start_ns: int) -> StagingPartition:
        return StagingPartition(staging / f"p{start_ns}-{pid}")

    def write_chunk(self, tables: Mapping[str, Mapping[str, Sequence[Any]] | pa.Table]) -> int:
        """Write one chunk of every non-empty table; returns the rows written."""
        n = self._chunks
        self._chunks += 1
        rows = 0
        for name, data in tables.items():
            t = conform(name, data)
            if t.num_rows == 0:
                continue
            dest = self.path / f"{name}.{self._prefix}{n:05d}.parquet"
            tmp = dest.with_suffix(".tmp")
            pq.write_table(t, tmp, compression="zstd")
            os.replace(tmp, dest)
            rows += t.num_rows
        return rows

    def write_meta(self, meta: PartitionMeta) -> None:
        tmp = self.path / (META_NAME + ".tmp")
        tmp.write_text(meta.to_json(), encoding="utf-8")
        os.replace(tmp, self.path / META_NAME)


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


def read_partitions(staging: Path, progress: Progress | None = None) -> list[Partition]:
    from stepscope.capture.materialize import materialize, raw_bytes  # numpy: only when merging

    folders = sorted(p for p in staging.iterdir() if p.is_dir() and p.name.startswith("p"))
    sizes = [raw_bytes(f) for f in folders]
    total, before = float(sum(sizes)), 0.0
    for folder, size in zip(folders, sizes):
        if progress is not None and size:
            at = before  # bytes of the folders before this one

            def one(done: float, at: float = at) -> None:
                progress("decoding GPU records", at + done, total)

            materialize(folder, one)
        else:
            materialize(folder)
        before += size
    parts = [read_partition(p) for p in folders]
    return sorted(parts, key=lambda p: (p.meta.start_ns, p.meta.pid))


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
) -> Path:
    """Merge every staging partition into the run ``out`` (written atomically).

    ``returncode`` is the command's; ``launched_pid`` its process, whose partition (if it has
    one) takes that status as its ending (``settle_launched``). The run is partial only where a
    rank's capture was cut (``capture.endings``), not for a non-zero exit status. ``inputs``:
    paths that ``overwrite`` must not delete (``RunWriter``); ``progress``: told how decoding
    and writing go."""
    try:
        parts = read_partitions(staging, progress)
    except OSError as exc:
        raise CaptureError(f"{staging}: cannot read the capture staging folder ({exc})") from None
    if launched_pid is not None and returncode is not None:
        parts = settle_launched(parts, launched_pid, returncode, socket.gethostname())
    ranked, diags = assign_ranks(parts)
    backends = gpu_backends([p for _, p in ranked])
    diags = [*([] if backends else [NO_GPU_CAPTURE]), *extra_diagnostics, *diags]
    partial = returncode is None
    status = status_diagnostic(returncode)
    if status is not None:
        diags.append(status)
    if not parts:
        diags.append(Diagnostic("error", "nothing_captured",
                                "no Python process was captured (was the command a Python program? "
                                "did it exit before the interpreter started?)"))
    ranks: list[RankInfo] = []
    overhead: dict[str, Any] = {}
    todo = sum(len(p.names()) for _, p in ranked)
    done = 0
    with RunWriter(out, overwrite=overwrite, inputs=inputs) as w:
        for rank, p in ranked:
            busy = GpuBusy.for_window(p.meta.settings)  # the steps' GPU pace (gpu_pace.py)
            for name in p.names():
                if progress is not None:
                    progress("writing tables", done, todo)
                done += 1
                table = p.table(name)
                if table is not None:
                    w.write(name, rank, table)
                    if busy is not None and name in GPU_TABLES:
                        busy.add(table)
                del table
            m = p.meta
            ranks.append(RankInfo(rank=rank, host=m.host or socket.gethostname(), pid=m.pid,
                                  world_size=m.world_size))
            overhead[f"rank{rank}"] = (m.overhead if busy is None
                                       else with_gpu_pace(m.overhead, busy.busiest_ns()))
            for d in m.diagnostics:
                diags.append(replace(d, file=d.file or f"rank {rank} (pid {m.pid})"))
            if m.ended not in ("exit", "running"):
                diags.append(Diagnostic("warning", "process_ended",
                                        f"rank {rank} (pid {m.pid}) ended by {m.ended}"))
            cut = capture_cut(m.settings, m.ended)
            if cut is not None:
                partial = True
                diags.append(Diagnostic("warning", "partial_run",
                                        f"the run is partial: rank {rank} (pid {m.pid}): {cut}"))
        if progress is not None:
            progress("writing tables", todo, todo)
        per_rank = {f"rank{r}": p.meta.settings for r, p in ranked}
        used = sorted({str(p.meta.settings.get("window")) for _, p in ranked
                       if p.meta.settings.get("window")})
        manifest = Manifest(
            source=SourceInfo(kind="capture", files=(), tool=f"stepscope {version} record (host"
                              + "".join(f" + {b}" for b in backends) + ")",
                              details={"command": list(command), "returncode": returncode,
                                       "processes_captured": len(parts)}),
            ranks=tuple(ranks),
            stepscope_version=version,
            partial=partial,
            settings={**dict(settings or {}), "ranks": per_rank,
                      **({"window_used": "; ".join(used)} if used else {})},
            overhead=overhead,
            diagnostics=tuple(_dedupe(diags)),
        )
        return w.finish(manifest)


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


__all__ = ["META_NAME", "NO_GPU_CAPTURE", "Partition", "PartitionMeta", "StagingPartition",
           "assign_ranks", "ended_by", "env_rank", "merge", "read_partitions", "settle_launched"]
