"""Where the ranks of an import are read: here, one after another (``workers=1``, the serial
path), in a local process pool (the default for large sets), or on a Dask cluster
(``--engine dask[:ADDRESS]``, ``dask_engine``) for rank sets too large for one machine.

Every engine runs the same per-rank work (``rank_work.stage_rank``) and hands its results back
in file order (``ordered``), so that the run assembler sees the ranks in the order the serial
path gives and the run is the same, byte for byte. Memory stays bounded: each worker holds one
rank's tables at a time, and what waits to be assembled is small (the tables are on disk).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from stepscope.errors import StepscopeError
from stepscope.importers.rank_work import (
    RankFailure,
    RankTask,
    Result,
    StagedRank,
    Submit,
    stage_rank,
)
from stepscope.pools import forkserver_context
from stepscope.progress import report as say_progress

ENGINES = ("process", "dask")
# Below this many bytes of (uncompressed) traces in all, an import is serial when the number of
# workers is not given: starting a worker process costs ~0.5 s (it imports pyarrow and the
# reader), the time the reader takes for ~10 MB of trace (measured, docs/benchmarks.md).
POOL_MIN_BYTES = 32 << 20
# A worker's peak memory reading one file: the interpreter with pyarrow (~80 MB) and about 1.2x
# the file's uncompressed bytes (its bytes, columns, Arrow tables; a 69 MB trace peaked at
# +80 MB); doubled for safety. Workers are bounded to what the machine has available.
WORKER_BASE_BYTES = 128 << 20
WORKER_BYTES_PER_BYTE = 2.5


@dataclass(frozen=True)
class Engine:
    """Which engine reads the ranks: ``process`` (a local pool) or ``dask`` (``address``: a
    running scheduler's, e.g. ``tcp://10.0.0.5:8786``; empty: a local cluster)."""

    name: str = "process"
    address: str = ""

    @staticmethod
    def parse(text: str) -> Engine:
        """``process``, ``dask`` or ``dask:ADDRESS``; ``StepscopeError`` for anything else."""
        name, _, address = text.strip().partition(":")
        if name not in ENGINES or (name == "process" and address):
            raise StepscopeError(f"--engine {text}: unknown engine (process, dask or "
                                 "dask:SCHEDULER_ADDRESS)")
        return Engine(name, address)


def uncompressed_size(path: Path) -> int:
    """A trace file's size once decompressed (gzip's trailer, modulo 4 GiB; else its size)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            if fh.read(2) != b"\x1f\x8b" or size < 18:
                return size
            fh.seek(-4, os.SEEK_END)
            return max(size, int.from_bytes(fh.read(4), "little"))
    except OSError:
        return 0


def available_memory() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except (ImportError, OSError):
        return None


def cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def plan_workers(files: Sequence[Path], requested: int | None, *, cores: int | None = None,
                 memory: int | None = None) -> int:
    """How many workers read ``files``: ``requested`` when given (at most one per file);
    otherwise 1 for a small set (below ``POOL_MIN_BYTES``), else the fewest of the files, the
    cores (``cores``, default: those this process may run on) and what the memory available
    (``memory``, default: the machine's) holds of workers reading the largest file."""
    if requested is not None:
        return max(1, min(requested, len(files)))
    sizes = [uncompressed_size(f) for f in files]
    if len(files) < 2 or sum(sizes) < POOL_MIN_BYTES:
        return 1
    mem = available_memory() if memory is None else memory
    per_worker = WORKER_BASE_BYTES + int(WORKER_BYTES_PER_BYTE * max(sizes))
    by_memory = max(1, mem // per_worker) if mem else len(files)
    return max(1, min(len(files), cores or cpus(), by_memory))


def ordered(submit: Submit, tasks: Iterable[RankTask], window: int, total: int
            ) -> Iterator[StagedRank | RankFailure]:
    """The results of ``tasks`` in their order, with at most ``window`` submitted and not yet
    handed on (workers beyond the pool's size wait in its queue; a result handed on is small)."""
    pending: deque[Result] = deque()
    it = iter(tasks)
    for task in it:
        pending.append(submit(task))
        if len(pending) >= window:
            break
    done = 0
    while pending:
        result = pending.popleft().result()
        following = next(it, None)
        if following is not None:
            pending.append(submit(following))
        done += 1
        say_progress("reading traces", done, total)
        yield result


@contextmanager
def open_pool(engine: Engine, workers: int) -> Iterator[Submit]:
    """``submit(task)`` on ``engine`` with ``workers`` workers (a Dask scheduler given by
    address has its own). The engine starts at the first task: an import that stops before
    reading (the output exists already) starts no workers."""
    with ExitStack() as stack:
        started: list[Submit] = []

        def submit(task: RankTask) -> Result:
            if not started:
                if engine.name == "dask":
                    from stepscope.importers.dask_engine import dask_pool

                    started.append(stack.enter_context(dask_pool(engine.address, workers)))
                else:
                    started.append(stack.enter_context(process_pool(workers)))
            return started[0](task)

        yield submit


WORKER_MODULE = "stepscope.importers.rank_work"


@contextmanager
def process_pool(workers: int) -> Iterator[Submit]:
    """``submit(task)`` on a local pool of ``workers`` processes; on leaving, tasks not started
    are cancelled and running ones waited for (so that nothing is written after the import
    ends)."""
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=forkserver_context([WORKER_MODULE]))

    def submit(task: RankTask) -> Result:
        fut: Future[StagedRank | RankFailure] = pool.submit(stage_rank, task)
        return _Checked(fut, task)

    try:
        yield submit
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@dataclass(frozen=True)
class _Checked:
    """A process pool's future whose worker died (killed: out of memory) says so in one line."""

    future: Future[StagedRank | RankFailure]
    task: RankTask

    def result(self) -> StagedRank | RankFailure:
        try:
            return self.future.result()
        except BrokenProcessPool:
            raise StepscopeError(
                f"{self.task.path}: the worker process reading it died (out of memory?); "
                "import with fewer workers (--workers N)") from None


__all__ = ["ENGINES", "Engine", "POOL_MIN_BYTES", "Result", "Submit", "open_pool", "ordered",
           "plan_workers", "process_pool", "uncompressed_size"]
