"""Where the per-rank analysis of a run runs: here, rank after rank (one worker, the serial
path), in a local process pool (the default for runs with many ranks), or on a Dask cluster
(``engine="dask"``, ``address``: a running scheduler's; empty: a local cluster).

The engines only run a function over tasks and hand the results back in task order (so that
the analysis sees the ranks in the order the serial path gives, and its results are the same).
What a task and a result are is the caller's (``analysis.results``: a run's path and a rank
in, the rank's small results out). At most ``window`` tasks are submitted and not yet handed
on, so that the results waiting in the parent stay few whatever the number of ranks.

The import has its own engines (``importers.engines``: the same choice of engine); what the two
share, the workers' start method and the Dask client's life, is ``stepscope.pools``.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

from stepscope.errors import StepscopeError
from stepscope.pools import dask_client, distributed, forkserver_context

ENGINES = ("process", "dask")
# the module the workers need: the fork server imports it (and numpy, pyarrow) once
WORKER_MODULE = "stepscope.analysis.results"

A = TypeVar("A")
R = TypeVar("R")


class _Future(Protocol):
    def result(self) -> Any: ...


def check_engine(engine: str) -> None:
    if engine not in ENGINES:
        raise StepscopeError(f"--engine {engine}: unknown engine (process, dask or "
                             "dask:SCHEDULER_ADDRESS)")


def cpus() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def run_ordered(fn: Callable[[A], R], tasks: Iterable[A], *, workers: int,
                engine: str = "process", address: str = "",
                window: int | None = None, preload: tuple[str, ...] = ()) -> Iterator[R]:
    """``fn(task)`` of every task, in task order: here when ``workers`` is 1 (and no Dask
    engine is asked for), else on ``engine``'s workers. ``fn`` and the tasks must pickle;
    ``preload``: more modules the fork server imports once for every worker (the modules of
    functions the tasks carry)."""
    check_engine(engine)
    if workers <= 1 and engine == "process":
        yield from map(fn, tasks)
        return
    window = window or 2 * max(1, workers)
    with (_dask_pool(address, workers) if engine == "dask" else _process_pool(workers, preload)) as submit:
        pending: deque[_Future] = deque()
        it = iter(tasks)
        for task in it:
            pending.append(submit(fn, task))
            if len(pending) >= window:
                break
        while pending:
            result = pending.popleft().result()
            following = next(it, _END)
            if following is not _END:
                pending.append(submit(fn, following))
            yield result


_END: Any = object()


class _Local:
    def __init__(self, future: Any) -> None:
        self.future = future

    def result(self) -> Any:
        try:
            return self.future.result()
        except BrokenProcessPool:
            raise StepscopeError("a worker process analysing a rank died (out of memory?); "
                                 "report with fewer workers (--workers N)") from None


@contextmanager
def _process_pool(workers: int, preload: tuple[str, ...] = ()
                  ) -> Iterator[Callable[[Callable[[Any], Any], Any], _Future]]:
    pool = ProcessPoolExecutor(max_workers=workers,
                               mp_context=forkserver_context([WORKER_MODULE, *preload]))
    try:
        yield lambda fn, task: _Local(pool.submit(fn, task))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


class _Remote:
    def __init__(self, future: Any) -> None:
        self.future = future

    def result(self) -> Any:
        dd = distributed()
        try:
            return self.future.result()
        except (dd.KilledWorker, dd.CancelledError) as exc:
            raise StepscopeError(f"a Dask worker analysing a rank was lost "
                                 f"({type(exc).__name__}; out of memory?)") from None


@contextmanager
def _dask_pool(address: str, workers: int
               ) -> Iterator[Callable[[Callable[[Any], Any], Any], _Future]]:
    """Tasks on the scheduler at ``address``, or on a local cluster of ``workers``
    single-threaded worker processes. The run's folder must be at the same path on every
    worker (a shared file system)."""
    with dask_client(address, workers) as (client, futures):
        def submit(fn: Callable[[Any], Any], task: Any) -> _Future:
            fut = client.submit(fn, task, pure=False)
            futures.append(fut)
            return _Remote(fut)

        yield submit


__all__ = ["ENGINES", "check_engine", "cpus", "run_ordered"]
